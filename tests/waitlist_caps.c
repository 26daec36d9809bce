/* SPDX-License-Identifier: MIT */
/* The caps hold: never more than max_items created, never more than
 * max_waiters waiting, and a slow load blocks nobody else. */
#include <errno.h>

#include "takers.h"

#define THREADS 6
#define ROUNDS 300
#define MAX_ITEMS 3

static _Atomic int live_loads, max_live_loads;

static int slow_load(void *arg, void **item)
{
	int live = atomic_fetch_add(&live_loads, 1) + 1;
	int seen = atomic_load(&max_live_loads);
	while (live > seen && !atomic_compare_exchange_weak(&max_live_loads, &seen, live))
		;
	int64_t end = ts_now_ns() + 50000;
	while (ts_now_ns() < end)
		; /* an expensive connect */
	atomic_fetch_sub(&live_loads, 1);
	return counting_load(arg, item);
}

static void *churn(void *p)
{
	ts_waitlist *w = p;
	for (int i = 0; i < ROUNDS; i++) {
		void *item;
		if (ts_waitlist_take(w, &item, slow_load, NULL, 0, NULL) == 0)
			ts_waitlist_put(w, item);
	}
	return NULL;
}

Test(waitlist_caps, max_items_is_never_exceeded_under_concurrent_takes)
{
	ts_waitlist *w = ts_waitlist_new(MAX_ITEMS, 0);
	pthread_t th[THREADS];

	atomic_store(&loads, 0);
	for (int i = 0; i < THREADS; i++)
		start_thread(&th[i], churn, w);
	for (int i = 0; i < THREADS; i++)
		join_bounded(th[i]);
	cr_assert_leq(atomic_load(&loads), MAX_ITEMS, "created %ld items", atomic_load(&loads));
	cr_assert_leq(atomic_load(&max_live_loads), MAX_ITEMS);
	cr_assert_eq(list_created(w), (size_t)atomic_load(&loads));
	cr_assert_eq(list_ready(w), (size_t)atomic_load(&loads), "an item went missing");
	ts_waitlist_free(w);
}

Test(waitlist_caps, max_waiters_gives_eagain)
{
	ts_waitlist *w = ts_waitlist_new(1, 2);
	void *held, *item;

	atomic_store(&n_took, 0);
	cr_assert_eq(ts_waitlist_take(w, &held, NULL, NULL, 0, NULL), 0);
	start_taker(0, w, NULL, NULL, 1);
	start_taker(1, w, NULL, NULL, 2);
	cr_assert_eq(ts_waitlist_take(w, &item, NULL, NULL, 0, NULL), EAGAIN);
	cr_assert_null(item);
	cr_assert_eq(list_waiting(w), 2);
	ts_waitlist_put(w, held);
	WAIT_FOR(atomic_load(&n_took) == 1);
	ts_waitlist_put(w, takers[took_log[0]].item);
	join_bounded(takers[0].th);
	join_bounded(takers[1].th);
	cr_assert(takers[0].result == 0 && takers[1].result == 0);
	ts_waitlist_free(w);
}

Test(waitlist_caps, a_slow_load_blocks_no_other_caller)
{
	ts_waitlist *w = ts_waitlist_new(2, 0);
	void *held, *item;

	atomic_store(&n_took, 0);
	cr_assert_eq(ts_waitlist_take(w, &held, NULL, NULL, 0, NULL), 0);
	start_taker(0, w, blocked_load, (void *)0x5107, 1);
	WAIT_FOR(atomic_load(&in_load));
	/* all of these take the pool's lock while the load is running; the
	 * loader cannot use an item before its load returns, so none goes to it */
	cr_assert(ts_waitlist_put(w, held));
	cr_assert(ts_waitlist_put(w, (void *)0xF00));
	cr_assert(ts_waitlist_try_take(w, &item));
	cr_assert_eq(item, (void *)0xF00);
	cr_assert(ts_waitlist_put(w, item));
	cr_assert_eq(ts_waitlist_take(w, &item, NULL, NULL, 0, NULL), 0);
	cr_assert_eq(item, (void *)0xF00);
	cr_assert_eq(ts_waitlist_take(w, &item, NULL, NULL, TS_DEADLINE_NOW, NULL), 0);
	cr_assert_eq(item, held);
	cr_assert_eq(ts_waitlist_take(w, &item, NULL, NULL, TS_DEADLINE_NOW, NULL), ETIMEDOUT);
	cr_assert_eq(atomic_load(&n_took), 0);
	atomic_store(&release_load, 1);
	join_bounded(takers[0].th);
	cr_assert_eq(takers[0].result, 0);
	cr_assert_eq(takers[0].item, (void *)0x5107, "the loader keeps what it made");
	ts_waitlist_free(w);
}
