/* SPDX-License-Identifier: MIT */
/* Close wakes every waiter with ESHUTDOWN, leaves ready items drainable,
 * refuses later puts, and lets a loader keep what it made. */
#include <errno.h>

#include "takers.h"

Test(waitlist_close, waiters_get_eshutdown_ready_items_drain_puts_fail)
{
	ts_waitlist *w = ts_waitlist_new(1, 0);
	void *held, *item;

	atomic_store(&n_took, 0);
	cr_assert_eq(ts_waitlist_take(w, &held, NULL, NULL, 0, NULL), 0);
	for (int i = 0; i < 5; i++)
		start_taker(i, w, NULL, NULL, (size_t)i + 1);
	ts_waitlist_close(w);
	for (int i = 0; i < 5; i++) {
		join_bounded(takers[i].th);
		cr_assert_eq(takers[i].result, ESHUTDOWN);
		cr_assert_null(takers[i].item);
	}
	cr_assert_eq(list_waiting(w), 0);
	cr_assert_not(ts_waitlist_put(w, held), "put after close must leave the item with us");
	cr_assert_eq(ts_waitlist_take(w, &item, NULL, NULL, 0, NULL), ESHUTDOWN);
	ts_waitlist_close(w); /* idempotent */
	ts_waitlist_free(w);
}

Test(waitlist_close, ready_items_are_still_returned_after_close)
{
	ts_waitlist *w = ts_waitlist_new(0, 0);
	void *item;

	cr_assert(ts_waitlist_put(w, (void *)1));
	cr_assert(ts_waitlist_put(w, (void *)2));
	ts_waitlist_close(w);
	cr_assert_eq(ts_waitlist_take(w, &item, NULL, NULL, 0, NULL), 0);
	cr_assert_eq(item, (void *)2);
	cr_assert(ts_waitlist_try_take(w, &item));
	cr_assert_eq(item, (void *)1);
	cr_assert_eq(ts_waitlist_take(w, &item, NULL, NULL, 0, NULL), ESHUTDOWN);
	ts_waitlist_free(w);
}

Test(waitlist_close, a_loader_closed_out_keeps_the_item_it_made)
{
	ts_waitlist *w = ts_waitlist_new(0, 0);

	start_taker(0, w, blocked_load, (void *)0xC0, 1);
	WAIT_FOR(atomic_load(&in_load));
	ts_waitlist_close(w);
	atomic_store(&release_load, 1);
	join_bounded(takers[0].th);
	cr_assert_eq(takers[0].result, 0);
	cr_assert_eq(takers[0].item, (void *)0xC0);
	cr_assert_eq(list_created(w), 1);
	ts_waitlist_free(w);
}
