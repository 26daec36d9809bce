/* SPDX-License-Identifier: MIT */
/* A close delivers ESHUTDOWN to each pending node exactly once; a cancel
 * token fired on another thread delivers ECANCELED (and one fired before
 * the call refuses at once); a notifier with a pending wait is not freed. */
#include <errno.h>

#include "loops.h"

#define NODES 100 /* several wake batches */

static ts_turnstile *t;
static ts_waitlist *w;
static ts_cancel token;
static ts_async nodes[NODES];
static _Atomic int calls[NODES], results[NODES];

static void record(ts_async *node, int result, void *arg)
{
	int i = (int)(intptr_t)arg;
	(void)node;
	atomic_fetch_add(&calls[i], 1);
	atomic_store(&results[i], result);
}

static void reset(void)
{
	for (int i = 0; i < NODES; i++) {
		nodes[i] = (ts_async)TS_ASYNC_INIT;
		atomic_store(&calls[i], 0);
		atomic_store(&results[i], -1);
	}
}

/* Half turns, half takes; every other one watches the token. */
static void queue_all(struct loop *l, void *arg)
{
	bool with_token = arg != NULL;
	for (int i = 0; i < NODES; i++) {
		ts_claim c = { i % 3, 0, 0 };
		ts_pass p;
		void *item;
		ts_cancel *cancel = with_token ? &token : NULL;
		int r = i % 2 ? ts_turnstile_wait_async(t, &c, 0, cancel, l->n, &nodes[i], record,
							(void *)(intptr_t)i, &p)
			      : ts_waitlist_take_async(w, 0, cancel, l->n, &nodes[i], record,
						       (void *)(intptr_t)i, &item);
		THREAD_CHECK(r == EINPROGRESS);
	}
}

static void setup(struct loop *l, bool with_token)
{
	void *item;
	reset();
	t = ts_turnstile_new(0);
	w = ts_waitlist_new(1, 0);
	ts_cancel_init(&token);
	cr_assert_eq(ts_waitlist_take(w, &item, NULL, NULL, 0, NULL), 0); /* the only slot */
	loop_start(l);
	loop_run(l, queue_all, with_token ? &token : NULL);
	cr_assert_eq(queued(t), NODES / 2);
}

static int delivered(void)
{
	int n = 0;
	for (int i = 0; i < NODES; i++)
		n += atomic_load(&calls[i]);
	return n;
}

static void *close_both(void *arg)
{
	(void)arg;
	ts_turnstile_close(t);
	ts_waitlist_close(w);
	return NULL;
}

static void teardown(struct loop *l)
{
	cr_assert_eq(loop_stop(l), 0);
	ts_turnstile_free(t);
	ts_waitlist_free(w);
	ts_cancel_destroy(&token);
}

Test(async_close_and_tokens, a_close_tells_each_pending_node_once)
{
	struct loop l;
	pthread_t th;

	setup(&l, false);
	start_thread(&th, close_both, NULL);
	join_bounded(th);
	WAIT_FOR(delivered() == NODES);
	for (int i = 0; i < NODES; i++) {
		cr_assert_eq(atomic_load(&calls[i]), 1, "node %d told %d times", i,
			     atomic_load(&calls[i]));
		cr_assert_eq(atomic_load(&results[i]), ESHUTDOWN);
	}
	teardown(&l);
}

static void *fire(void *arg)
{
	ts_cancel_fire(arg);
	return NULL;
}

Test(async_close_and_tokens, a_token_fired_on_another_thread_cancels_each_node_once)
{
	struct loop l;
	pthread_t th;

	setup(&l, true);
	start_thread(&th, fire, &token);
	join_bounded(th);
	WAIT_FOR(delivered() == NODES);
	for (int i = 0; i < NODES; i++) {
		cr_assert_eq(atomic_load(&calls[i]), 1);
		cr_assert_eq(atomic_load(&results[i]), ECANCELED);
	}
	cr_assert_eq(queued(t), 0);
	size_t waiting;
	ts_waitlist_stats(w, NULL, NULL, &waiting);
	cr_assert_eq(waiting, 0);
	teardown(&l);
}

static void queue_on_fired(struct loop *l, void *arg)
{
	int *r = arg;
	ts_claim c = { 0, 0, 0 };
	ts_pass p;
	void *item;
	r[0] = ts_turnstile_wait_async(t, &c, 0, &token, l->n, &nodes[0], record, NULL, &p);
	r[1] = ts_waitlist_take_async(w, 0, &token, l->n, &nodes[1], record, NULL, &item);
}

Test(async_close_and_tokens, a_token_already_fired_refuses_at_once)
{
	struct loop l;
	int r[2];
	void *item;

	reset();
	t = ts_turnstile_new(1); /* a pass is free: a fired token still refuses */
	w = ts_waitlist_new(1, 0);
	cr_assert_eq(ts_waitlist_take(w, &item, NULL, NULL, 0, NULL), 0);
	ts_cancel_init(&token);
	ts_cancel_fire(&token);
	loop_start(&l);
	loop_run(&l, queue_on_fired, r);
	cr_assert_eq(r[0], ECANCELED);
	cr_assert_eq(r[1], ECANCELED);
	cr_assert_eq(available(t), 1);
	teardown(&l);
}

static void free_while_pending(struct loop *l, void *arg)
{
	int *r = arg;
	ts_claim c = { 0, 0, 0 };
	ts_pass p;
	THREAD_CHECK(ts_turnstile_wait_async(t, &c, 0, NULL, l->n, &nodes[0], record, NULL, &p) ==
		     EINPROGRESS);
	r[0] = ts_notifier_free(l->n);
	r[1] = ts_async_cancel(&nodes[0]);
}

Test(async_close_and_tokens, a_notifier_with_a_pending_wait_is_not_freed)
{
	struct loop l;
	int r[2];

	reset();
	t = ts_turnstile_new(0);
	w = ts_waitlist_new(0, 0);
	ts_cancel_init(&token);
	loop_start(&l);
	loop_run(&l, free_while_pending, r);
	cr_assert_eq(r[0], EBUSY);
	cr_assert_eq(r[1], 0);
	teardown(&l); /* frees it: nothing pending now */
}
