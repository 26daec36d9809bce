/* SPDX-License-Identifier: MIT */
/* Waiters are served strictly FIFO; ready items are reused LIFO. */
#include <errno.h>

#include "takers.h"

#define N 12

Test(waitlist_order, queued_takers_receive_puts_in_arrival_order)
{
	ts_waitlist *w = ts_waitlist_new(1, 0);
	void *only;

	atomic_store(&n_took, 0);
	cr_assert_eq(ts_waitlist_take(w, &only, counting_load, NULL, 0, NULL), 0);
	for (int i = 0; i < N; i++)
		start_taker(i, w, counting_load, NULL, (size_t)i + 1);
	for (int k = 0; k < N; k++) {
		cr_assert(ts_waitlist_put(w, (void *)(intptr_t)(k + 1)));
		WAIT_FOR(atomic_load(&n_took) == k + 1);
	}
	for (int i = 0; i < N; i++) {
		join_bounded(takers[i].th);
		cr_assert_eq(takers[i].result, 0);
		cr_assert_eq((intptr_t)takers[i].item, i + 1,
			     "taker %d got put #%ld", i, (long)(intptr_t)takers[i].item);
	}
	cr_assert_eq(list_created(w), 1, "a queued taker created past max_items");
	ts_waitlist_free(w);
}

Test(waitlist_order, ready_items_are_reused_last_in_first_out)
{
	ts_waitlist *w = ts_waitlist_new(0, 0);
	void *item;

	for (intptr_t i = 1; i <= 3; i++)
		cr_assert(ts_waitlist_put(w, (void *)i));
	cr_assert_eq(list_ready(w), 3);
	for (intptr_t i = 3; i >= 1; i--) {
		cr_assert_eq(ts_waitlist_take(w, &item, NULL, NULL, 0, NULL), 0);
		cr_assert_eq((intptr_t)item, i);
	}
	cr_assert(ts_waitlist_put(w, (void *)7));
	cr_assert(ts_waitlist_try_take(w, &item));
	cr_assert_eq((intptr_t)item, 7);
	cr_assert_not(ts_waitlist_try_take(w, &item));
	ts_waitlist_free(w);
}

/* A created item goes to the oldest taker: here an earlier taker, not its
 * maker. */
Test(waitlist_order, a_loader_keeps_its_item_and_idle_takers_follow_in_order)
{
	ts_waitlist *w = ts_waitlist_new(1, 0);

	atomic_store(&n_took, 0);
	atomic_store(&release_load, 0);
	atomic_store(&in_load, 0);
	/* taker 0 makes item A (slow); takers 1 and 2 find no slot and wait */
	start_taker(0, w, blocked_load, (void *)0xA, 1);
	WAIT_FOR(atomic_load(&in_load));
	start_taker(1, w, blocked_load, (void *)0xB, 2);
	start_taker(2, w, blocked_load, (void *)0xC, 3);
	atomic_store(&release_load, 1);
	/* nobody idle is older than the loader: it keeps A; 1 and 2 wait on */
	join_bounded(takers[0].th);
	cr_assert_eq(takers[0].item, (void *)0xA);
	cr_assert_eq(list_waiting(w), 2);
	cr_assert(ts_waitlist_put(w, takers[0].item));
	join_bounded(takers[1].th);
	cr_assert_eq(takers[1].item, (void *)0xA);
	cr_assert(ts_waitlist_put(w, takers[1].item));
	join_bounded(takers[2].th);
	cr_assert_eq(takers[2].item, (void *)0xA);
	cr_assert_eq(took_log[0], 0);
	cr_assert_eq(took_log[1], 1);
	cr_assert_eq(took_log[2], 2);
	cr_assert_eq(list_created(w), 1);
	ts_waitlist_free(w);
}
