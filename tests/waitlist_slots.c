/* SPDX-License-Identifier: MIT */
/* Creation slots: a failed load frees its slot and reports its error, a
 * discard frees one, and a freed slot goes to the oldest taker. */
#include <errno.h>

#include "takers.h"

static int refused_load(void *arg, void **item)
{
	return ECONNREFUSED;
}

Test(waitlist_slots, a_failed_load_frees_its_slot_and_reports_its_error)
{
	ts_waitlist *w = ts_waitlist_new(1, 0);
	void *item;

	atomic_store(&loads, 0);
	cr_assert_eq(ts_waitlist_take(w, &item, refused_load, NULL, 0, NULL), ECONNREFUSED);
	cr_assert_null(item);
	cr_assert_eq(list_created(w), 0);
	cr_assert_eq(list_waiting(w), 0);
	cr_assert_eq(ts_waitlist_take(w, &item, counting_load, NULL, 0, NULL), 0);
	cr_assert_eq(list_created(w), 1);
	ts_waitlist_free(w);
}

static int slow_refused_load(void *arg, void **item)
{
	while (!atomic_load(&release_load))
		sched_yield();
	return ECONNREFUSED;
}

Test(waitlist_slots, a_failed_slot_passes_to_the_next_taker_who_loads)
{
	ts_waitlist *w = ts_waitlist_new(1, 0);

	atomic_store(&loads, 0);
	atomic_store(&release_load, 0);
	start_taker(0, w, slow_refused_load, NULL, 1); /* holds the only slot */
	start_taker(1, w, counting_load, NULL, 2);     /* waits for a slot */
	atomic_store(&release_load, 1);
	join_bounded(takers[0].th);
	join_bounded(takers[1].th);
	cr_assert_eq(takers[0].result, ECONNREFUSED);
	cr_assert_eq(takers[1].result, 0);
	cr_assert_eq(atomic_load(&loads), 1);
	cr_assert_eq(list_created(w), 1);
	ts_waitlist_free(w);
}

Test(waitlist_slots, discard_lets_a_waiter_create_a_replacement)
{
	ts_waitlist *w = ts_waitlist_new(1, 0);
	void *broken;

	atomic_store(&loads, 0);
	cr_assert_eq(ts_waitlist_take(w, &broken, counting_load, NULL, 0, NULL), 0);
	start_taker(0, w, counting_load, NULL, 1);
	cr_assert_eq(atomic_load(&loads), 1, "the waiter loaded past max_items");
	ts_waitlist_discard(w); /* the caller destroyed `broken` */
	join_bounded(takers[0].th);
	cr_assert_eq(takers[0].result, 0);
	cr_assert_neq(takers[0].item, broken);
	cr_assert_eq(atomic_load(&loads), 2);
	cr_assert_eq(list_created(w), 1);
	ts_waitlist_discard(w);
	ts_waitlist_discard(w); /* more discards than items: stays at 0 */
	cr_assert_eq(list_created(w), 0);
	ts_waitlist_free(w);
}

Test(waitlist_slots, expired_deadline_or_fired_cancel_returns_without_loading)
{
	ts_waitlist *w = ts_waitlist_new(0, 0);
	ts_cancel c = TS_CANCEL_INIT;
	void *item;

	atomic_store(&loads, 0);
	cr_assert_eq(ts_waitlist_take(w, &item, counting_load, NULL, TS_DEADLINE_NOW, NULL),
		     ETIMEDOUT);
	ts_cancel_fire(&c);
	cr_assert_eq(ts_waitlist_take(w, &item, counting_load, NULL, 0, &c), ECANCELED);
	cr_assert_eq(atomic_load(&loads), 0);
	cr_assert_eq(list_created(w), 0);
	/* a ready item wins over both */
	cr_assert(ts_waitlist_put(w, (void *)3));
	cr_assert_eq(ts_waitlist_take(w, &item, counting_load, NULL, TS_DEADLINE_NOW, &c), 0);
	cr_assert_eq(item, (void *)3);
	ts_waitlist_free(w);
}
