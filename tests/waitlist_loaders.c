/* SPDX-License-Identifier: MIT */
/* Items never go to a taker that is still running its load: it could not
 * use one before its load returns, so a put or a finished load serves the
 * oldest taker that is NOT loading (DESIGN.md, "Waitlist hand-over to
 * loaders").  Each test fails under the old rule (items to the head). */
#include "takers.h"

static void reset(void)
{
	atomic_store(&n_took, 0);
	atomic_store(&loads, 0);
	atomic_store(&in_load, 0);
	atomic_store(&release_load, 0);
}

/* Unlimited pool: taker 0's load is slow, taker 1 loads at once.  Taker
 * 1's item is its own (taker 0 is loading), so it returns well within its
 * deadline while taker 0 is still in its load. */
Test(waitlist_loaders, a_fast_loader_keeps_its_item_while_an_older_one_loads)
{
	ts_waitlist *w = ts_waitlist_new(0, 0);

	reset();
	start_taker(0, w, blocked_load, (void *)0xA, 1);
	WAIT_FOR(atomic_load(&in_load));
	takers[1] = (struct taker_thread){ .w = w, .load = counting_load, .id = 1,
					   .deadline_ns = in_ms(10000), .result = -1 };
	start_thread(&takers[1].th, taker_main, &takers[1]);
	WAIT_FOR(atomic_load(&n_took) == 1);
	cr_assert_eq(took_log[0], 1);
	cr_assert_eq(takers[1].result, 0, "its item went to the loader ahead of it");
	cr_assert_eq(takers[1].item, (void *)1000);
	cr_assert_eq(list_created(w), 2);
	cr_assert_eq(list_waiting(w), 1, "only the slow loader waits");
	atomic_store(&release_load, 1);
	join_bounded(takers[0].th);
	join_bounded(takers[1].th);
	cr_assert_eq(takers[0].result, 0);
	cr_assert_eq(takers[0].item, (void *)0xA);
	ts_waitlist_free(w);
}

/* Capped pool of 2, both items held.  Taker 0 and taker 1 wait without a
 * slot.  A discard hands the slot to taker 0, which starts a slow
 * replacement load; a put during that load reaches taker 1 at once. */
Test(waitlist_loaders, a_put_during_a_slow_replacement_load_reaches_the_next_taker)
{
	ts_waitlist *w = ts_waitlist_new(2, 0);
	void *x, *y;

	reset();
	cr_assert_eq(ts_waitlist_take(w, &x, counting_load, NULL, 0, NULL), 0);
	cr_assert_eq(ts_waitlist_take(w, &y, counting_load, NULL, 0, NULL), 0);
	start_taker(0, w, blocked_load, (void *)0xA, 1);
	start_taker(1, w, blocked_load, (void *)0xB, 2);
	ts_waitlist_discard(w); /* y is gone: its slot goes to taker 0 */
	WAIT_FOR(atomic_load(&in_load));
	cr_assert(ts_waitlist_put(w, x));
	WAIT_FOR(atomic_load(&n_took) == 1);
	cr_assert_eq(took_log[0], 1);
	cr_assert_eq(takers[1].item, x);
	cr_assert_eq(list_waiting(w), 1);
	atomic_store(&release_load, 1);
	join_bounded(takers[0].th);
	join_bounded(takers[1].th);
	cr_assert_eq(takers[0].result, 0);
	cr_assert_eq(takers[0].item, (void *)0xA);
	cr_assert_eq(list_created(w), 2);
	ts_waitlist_free(w);
}

/* A queued taker without a slot waits only while every slot is in use:
 * with a free slot and only loaders ahead, a put item goes to the first
 * idle taker, never to a loader — checked at every step of a queue of
 * three loaders and one idle taker. */
Test(waitlist_loaders, a_put_skips_every_loader_ahead)
{
	ts_waitlist *w = ts_waitlist_new(3, 0);

	reset();
	for (int i = 0; i < 3; i++)
		start_taker(i, w, blocked_load, (void *)(intptr_t)(0xA + i), (size_t)i + 1);
	start_taker(3, w, counting_load, NULL, 4);
	cr_assert(ts_waitlist_put(w, (void *)0xF00));
	WAIT_FOR(atomic_load(&n_took) == 1);
	cr_assert_eq(took_log[0], 3);
	cr_assert_eq(takers[3].item, (void *)0xF00);
	cr_assert_eq(atomic_load(&loads), 0, "the idle taker had no slot to load with");
	atomic_store(&release_load, 1);
	for (int i = 0; i < 4; i++)
		join_bounded(takers[i].th);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(takers[i].item, (void *)(intptr_t)(0xA + i));
	ts_waitlist_free(w);
}
