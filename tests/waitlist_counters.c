/* SPDX-License-Identifier: MIT */
/* ts_waitlist_read_counters: what happened to a pool since it was made,
 * readable while it runs — above all, load failures, whose error only the
 * taker that ran the load would otherwise see. */
#include <errno.h>

#include "takers.h"

static int refused_load(void *arg, void **item)
{
	return ECONNREFUSED;
}

static ts_waitlist_counters read_counters(ts_waitlist *w)
{
	ts_waitlist_counters c;
	ts_waitlist_read_counters(w, &c);
	return c;
}

Test(waitlist_counters, each_event_is_counted_once)
{
	ts_waitlist *w = ts_waitlist_new(1, 1);
	ts_cancel fired = TS_CANCEL_INIT;
	void *item, *other;

	ts_cancel_fire(&fired);
	ts_waitlist_counters c = read_counters(w);
	cr_assert(c.loads == 0 && c.load_failures == 0 && c.last_load_error == 0);
	cr_assert_eq(ts_waitlist_take(w, &item, refused_load, NULL, 0, NULL), ECONNREFUSED);
	cr_assert_eq(ts_waitlist_take(w, &item, counting_load, NULL, 0, NULL), 0);
	cr_assert_eq(ts_waitlist_take(w, &other, NULL, NULL, TS_DEADLINE_NOW, NULL), ETIMEDOUT);
	cr_assert_eq(ts_waitlist_take(w, &other, NULL, NULL, 0, &fired), ECANCELED);
	cr_assert_eq(ts_waitlist_take(w, &other, NULL, NULL, in_ms(2), NULL), ETIMEDOUT);
	ts_waitlist_discard(w);
	c = read_counters(w);
	cr_assert_eq(c.loads, 1);
	cr_assert_eq(c.load_failures, 1);
	cr_assert_eq(c.last_load_error, ECONNREFUSED);
	cr_assert_eq(c.timeouts, 2, "one refused at the call, one after queueing");
	cr_assert_eq(c.cancels, 1);
	cr_assert_eq(c.discards, 1);
	cr_assert_eq(c.rejected, 0);
	ts_cancel_destroy(&fired);
	ts_waitlist_free(w);
}

Test(waitlist_counters, a_full_waiter_cap_counts_as_rejected)
{
	ts_waitlist *w = ts_waitlist_new(1, 1);
	void *held, *item;

	atomic_store(&n_took, 0);
	cr_assert_eq(ts_waitlist_take(w, &held, NULL, NULL, 0, NULL), 0);
	start_taker(0, w, NULL, NULL, 1);
	cr_assert_eq(ts_waitlist_take(w, &item, NULL, NULL, 0, NULL), EAGAIN);
	cr_assert_eq(read_counters(w).rejected, 1);
	cr_assert(ts_waitlist_put(w, held));
	join_bounded(takers[0].th);
	ts_waitlist_free(w);
}

/* A reader polls the counters while takers fail loads: it never sees them
 * go backwards and the final count is exact. */
static _Atomic int stop_reading;
static void *reader(void *p)
{
	ts_waitlist *w = p;
	uint64_t last = 0;
	while (!atomic_load(&stop_reading)) {
		ts_waitlist_counters c = read_counters(w);
		cr_assert_geq(c.load_failures, last);
		last = c.load_failures;
	}
	return NULL;
}

Test(waitlist_counters, readable_while_the_pool_runs)
{
	ts_waitlist *w = ts_waitlist_new(2, 0);
	pthread_t th;
	void *item;

	atomic_store(&stop_reading, 0);
	start_thread(&th, reader, w);
	for (int i = 0; i < 2000; i++)
		cr_assert_eq(ts_waitlist_take(w, &item, refused_load, NULL, 0, NULL),
			     ECONNREFUSED);
	atomic_store(&stop_reading, 1);
	join_bounded(th);
	cr_assert_eq(read_counters(w).load_failures, 2000);
	ts_waitlist_free(w);
}
