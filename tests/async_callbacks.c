/* SPDX-License-Identifier: MIT */
/* Where callbacks run: only in ts_notifier_dispatch, on the thread calling
 * it, never inside the call that queued the wait, never nested, never
 * under a library lock — so a callback may queue its own node again,
 * return its pass, cancel another node, resize and close without
 * deadlocking.  (A callback run under the turnstile's lock would deadlock
 * on the resize or close below; the fault-injection builds also abort if
 * any library lock is held when a callback starts.) */
#include <errno.h>

#include "loops.h"

enum { A, B, C, D, E, PARTIES };

static ts_turnstile *t;
static ts_async nodes[PARTIES];
static _Atomic int calls[PARTIES];
static _Atomic int results[PARTIES][2];
static pthread_t loop_thread;
static bool in_async_call, in_callback;
static _Atomic int nested_ran = -1, cancel_d = -1, requeue_a = -1;

static void on_turn(ts_async *node, int result, void *arg);

static int queue(ts_notifier *n, int id, int band)
{
	ts_claim c = { band, 0, 0 };
	ts_pass p;
	in_async_call = true;
	int r = ts_turnstile_wait_async(t, &c, 0, NULL, n, &nodes[id], on_turn,
					(void *)(intptr_t)id, &p);
	in_async_call = false;
	return r;
}

static ts_notifier *the_notifier;

static void on_turn(ts_async *node, int result, void *arg)
{
	int id = (int)(intptr_t)arg;
	ts_pass p = ts_async_pass(node);

	THREAD_CHECK(pthread_equal(pthread_self(), loop_thread));
	THREAD_CHECK(!in_async_call);
	THREAD_CHECK(!in_callback);
	in_callback = true;
	int k = atomic_fetch_add(&calls[id], 1);
	THREAD_CHECK(k < 2);
	atomic_store(&results[id][k], result);
	switch (id) {
	case A:
		if (k == 0) {
			atomic_store(&nested_ran, ts_notifier_dispatch(the_notifier));
			/* A's node is not pending inside its callback: queue it again */
			atomic_store(&requeue_a, queue(the_notifier, A, 5));
		}
		break;
	case B:
		atomic_store(&cancel_d, ts_async_cancel(&nodes[D]));
		break;
	case C:
		THREAD_CHECK(ts_turnstile_resize(t, 3) == 0); /* grants E and A again */
		break;
	case E:
		ts_turnstile_close(t);
		break;
	}
	ts_pass_return(&p);
	in_callback = false;
}

static void queue_all(struct loop *l, void *arg)
{
	(void)arg;
	loop_thread = pthread_self();
	the_notifier = l->n;
	for (int id = A; id < PARTIES; id++)
		THREAD_CHECK(queue(l->n, id, id) == EINPROGRESS);
}

Test(async_callbacks, run_only_in_dispatch_and_may_call_anything)
{
	struct loop l;
	ts_pass held;
	ts_claim first = { 0, 0, 0 };

	t = ts_turnstile_new(1);
	loop_start(&l);
	cr_assert_eq(ts_turnstile_wait(t, &first, 0, NULL, &held), 0);
	loop_run(&l, queue_all, NULL);
	cr_assert_eq(queued(t), PARTIES);
	ts_pass_return(&held); /* A, whose callback hands on to B, then C ... */
	WAIT_FOR(atomic_load(&calls[A]) == 2 && atomic_load(&calls[E]) == 1);

	cr_assert_eq(atomic_load(&nested_ran), 0, "a nested dispatch ran callbacks");
	cr_assert_eq(atomic_load(&requeue_a), EINPROGRESS);
	cr_assert_eq(atomic_load(&cancel_d), 0, "D was still queued when B cancelled it");
	cr_assert_eq(atomic_load(&calls[B]), 1);
	cr_assert_eq(atomic_load(&calls[C]), 1);
	cr_assert_eq(atomic_load(&calls[D]), 0, "a cancelled node's callback ran");
	for (int id = A; id < PARTIES; id++)
		if (id != D)
			cr_assert_eq(atomic_load(&results[id][0]), 0, "party %d", id);
	cr_assert_eq(atomic_load(&results[A][1]), 0, "the resize granted A before the close");
	cr_assert(ts_turnstile_closed(t));
	cr_assert_eq(available(t), 3);
	cr_assert_eq(queued(t), 0);
	cr_assert_eq(loop_stop(&l), 0);
	ts_turnstile_free(t);
}

static int ran_inside;

static void count_inside(ts_async *node, int result, void *arg)
{
	(void)node;
	(void)result;
	(void)arg;
	ran_inside++;
}

/* Even a wait completed by the queuing thread itself — a token fired, a
 * close, a return — is told later, by dispatch. */
Test(async_callbacks, never_run_inside_the_call_that_completes_them)
{
	ts_notifier *n = ts_notifier_new();
	ts_turnstile *tt = ts_turnstile_new(1);
	ts_async node = TS_ASYNC_INIT;
	ts_claim c = { 0, 0, 0 };
	ts_pass held, p;

	cr_assert_eq(ts_turnstile_wait(tt, &c, 0, NULL, &held), 0);
	cr_assert_eq(ts_turnstile_wait_async(tt, &c, 0, NULL, n, &node, count_inside, NULL, &p),
		     EINPROGRESS);
	ts_pass_return(&held);
	cr_assert_eq(ran_inside, 0);
	cr_assert_eq(ts_notifier_dispatch(n), 1);
	cr_assert_eq(ran_inside, 1);
	p = ts_async_pass(&node);
	cr_assert(ts_pass_issued(&p));
	ts_pass_return(&p);
	cr_assert_eq(ts_notifier_free(n), 0);
	ts_turnstile_free(tt);
}
