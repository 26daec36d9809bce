/* SPDX-License-Identifier: MIT */
/* Close releases every waiter with ESHUTDOWN, refuses later waits, is
 * idempotent, and still accepts the passes held when it happened. */
#include <errno.h>

#include "callers.h"
#include "hook.h"

static const ts_claim mine = { 0, 0, 0 };

Test(turnstile_close, releases_every_parked_waiter_with_eshutdown)
{
	ts_turnstile *t = ts_turnstile_new(1);
	ts_pass held, p;

	cr_assert_eq(ts_turnstile_wait(t, &mine, 0, NULL, &held), 0);
	queue_callers(t, 16, 3);
	ts_turnstile_close(t);
	release_all(16);
	for (int i = 0; i < 16; i++)
		cr_assert_eq(callers[i].result, ESHUTDOWN);
	cr_assert_eq(atomic_load(&n_admitted), 0);
	cr_assert_eq(queued(t), 0);
	cr_assert_eq(ts_turnstile_wait(t, &mine, 0, NULL, &p), ESHUTDOWN);
	ts_turnstile_close(t);
	cr_assert(ts_turnstile_closed(t));
	ts_pass_return(&held);
	cr_assert_eq(available(t), 1, "a pass held across close came back");
	cr_assert_eq(ts_turnstile_wait(t, &mine, 0, NULL, &p), ESHUTDOWN,
		     "a closed turnstile admitted_late a caller");
	ts_turnstile_free(t);
}

Test(turnstile_close, resize_after_close_moves_the_count_but_admits_nobody)
{
	ts_turnstile *t = ts_turnstile_new(1);
	ts_pass p;

	ts_turnstile_close(t);
	cr_assert_eq(ts_turnstile_resize(t, 4), 0);
	cr_assert_eq(available(t), 4);
	cr_assert_eq(ts_turnstile_wait(t, &mine, TS_DEADLINE_NOW, NULL, &p), ESHUTDOWN);
	ts_turnstile_free(t);
}

/* A close that wakes more waiters than one batch unlocks between batches.
 * A pass returned in that gap must not admit a waiter the close has not
 * reached yet: close landed first, so every waiter queued before it gets
 * ESHUTDOWN.  (A hook releases the returner at the close's first unlock.) */
#define CROWD 40
static ts_turnstile *crowded;
static ts_pass crowd_held;
static _Atomic int returner_go, admitted_late;

static void *crowd_waiter(void *arg)
{
	ts_pass p;
	if (ts_turnstile_wait(crowded, &mine, 0, NULL, &p) == 0) {
		atomic_fetch_add(&admitted_late, 1);
		ts_pass_return(&p);
	}
	return arg;
}

static void *gap_returner(void *arg)
{
	int64_t end = ts_now_ns() + (int64_t)20 * 1000000000;
	while (!atomic_load(&returner_go) && ts_now_ns() < end)
		sched_yield();
	ts_pass_return(&crowd_held);
	return arg;
}

static void release_returner(enum ts_hook_point point, void *obj)
{
	if (point == TS_HOOK_UNLOCKING && obj == crowded)
		atomic_store(&returner_go, 1);
}

Test(turnstile_close, a_pass_returned_between_close_batches_admits_nobody)
{
	for (int round = 0; round < 20; round++) {
		pthread_t th[CROWD], ret;
		crowded = ts_turnstile_new(1);
		atomic_store(&returner_go, 0);
		atomic_store(&admitted_late, 0);
		cr_assert_eq(ts_turnstile_wait(crowded, &mine, 0, NULL, &crowd_held), 0);
		for (int i = 0; i < CROWD; i++)
			cr_assert_eq(pthread_create(&th[i], NULL, crowd_waiter, NULL), 0);
		WAIT_FOR(queued(crowded) == CROWD);
		cr_assert_eq(pthread_create(&ret, NULL, gap_returner, NULL), 0);
		atomic_store(&ts_hook, release_returner);
		ts_turnstile_close(crowded);
		atomic_store(&ts_hook, NULL);
		join_bounded(ret);
		for (int i = 0; i < CROWD; i++)
			join_bounded(th[i]);
		cr_assert_eq(atomic_load(&admitted_late), 0,
			     "round %d: %d waiters admitted after the close began", round,
			     atomic_load(&admitted_late));
		cr_assert_eq(available(crowded), 1);
		ts_turnstile_free(crowded);
	}
}
