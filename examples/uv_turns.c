/* SPDX-License-Identifier: MIT */
/* uv_turns: libturnstile's async turns in a libuv loop.
 *
 * The loop watches the notifier's descriptor with a uv_poll_t and runs
 * ts_notifier_dispatch when it is readable: no uv_async_t, and no timer of
 * its own (a passed deadline makes the descriptor readable too).  A batch
 * thread holds the only pass while the loop queues its clients; one client
 * hangs up before its turn and is withdrawn; the batch returns its pass and
 * the other clients are served in claim order.  Exits 0 when each client
 * that stayed was served and the one that left was not.
 *
 *   cc -std=c11 uv_turns.c $(pkg-config --cflags --libs turnstile libuv)
 */
#define _POSIX_C_SOURCE 200809L /* uv.h, under -std=c11 */
#include <errno.h>
#include <stdio.h>
#include <turnstile.h>
#include <uv.h>

enum { CLIENTS = 4, LEAVER = 1 };

struct client {
	ts_async node;          /* embedded: no allocation per wait */
	ts_claim claim;
	int served;
};

static ts_turnstile *db;        /* one query at a time */
static uv_barrier_t step;       /* the batch thread's hand-shake */
static uv_poll_t watch;
static int settled;

static void on_turn(ts_async *node, int result, void *arg)
{
	struct client *c = arg;
	ts_pass pass = ts_async_pass(node);

	if (++settled == CLIENTS - 1)   /* the last: let uv_run return */
		uv_close((uv_handle_t *)&watch, NULL);
	if (result != 0) {      /* ETIMEDOUT, ECANCELED, ESHUTDOWN */
		printf("client %d: %s\n", (int)c->claim.seq,
		       ts_strerror(result));
		return;
	}
	/* the query runs here, on the loop, without blocking */
	printf("client %d (band %d) in after %lld ns\n",
	       (int)c->claim.seq, c->claim.priority,
	       (long long)ts_pass_waited_ns(&pass));
	c->served = 1;
	ts_pass_return(&pass);  /* the next client's turn */
}

static void on_readable(uv_poll_t *handle, int status, int events)
{
	(void)events;
	if (status < 0) {
		fprintf(stderr, "poll: %s\n", uv_strerror(status));
		uv_close((uv_handle_t *)handle, NULL);
		return;
	}
	ts_notifier_dispatch(handle->data);
}

static void batch(void *arg)    /* a thread that may block */
{
	ts_claim claim = { 0, ts_now_ns(), 0 };
	ts_pass pass;
	int err = ts_turnstile_wait(db, &claim, 0, NULL, &pass);

	(void)arg;
	uv_barrier_wait(&step); /* the pass is held */
	uv_barrier_wait(&step); /* the clients are queued */
	if (err == 0)
		ts_pass_return(&pass);  /* granted from this thread */
}

int main(void)
{
	struct client clients[CLIENTS];
	ts_notifier *n = ts_notifier_new();
	uv_loop_t *loop = uv_default_loop();
	uv_thread_t th;
	int ok = 1;

	db = ts_turnstile_new(1);
	if (!n || !db || uv_poll_init(loop, &watch, ts_notifier_fd(n))) {
		fprintf(stderr, "setup failed\n");
		return 1;
	}
	watch.data = n;
	uv_poll_start(&watch, UV_READABLE, on_readable);
	uv_barrier_init(&step, 2);
	uv_thread_create(&th, batch, NULL);
	uv_barrier_wait(&step);

	for (int i = 0; i < CLIENTS; i++) {
		struct client *c = &clients[i];
		ts_pass pass;
		int err;

		*c = (struct client){ .node = TS_ASYNC_INIT,
		                      .claim = { .priority = i % 2,
		                                 .since_ns = ts_now_ns(),
		                                 .seq = (uint64_t)i + 1 } };
		err = ts_turnstile_wait_async(db, &c->claim,
		                              ts_now_ns() + 2000000000,
		                              NULL, n, &c->node, on_turn, c,
		                              &pass);
		if (err != EINPROGRESS) { /* 0: a pass was free */
			fprintf(stderr, "client %d: %s\n", i + 1,
			        ts_strerror(err));
			return 1;
		}
	}
	/* A client hangs up: withdrawn (0), its callback will not run. */
	if (ts_async_cancel(&clients[LEAVER].node) != 0)
		return 1;
	uv_barrier_wait(&step); /* now the batch returns its pass */

	uv_run(loop, UV_RUN_DEFAULT);
	uv_thread_join(&th);
	for (int i = 0; i < CLIENTS; i++)
		ok &= clients[i].served == (i != LEAVER);
	ok &= ts_notifier_free(n) == 0; /* EBUSY while a wait pends */
	ts_turnstile_free(db);
	uv_barrier_destroy(&step);
	ok &= uv_loop_close(loop) == 0;
	return ok ? 0 : 1;
}
