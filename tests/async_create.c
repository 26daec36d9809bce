/* SPDX-License-Identifier: MIT */
/* TS_CREATE: an async taker on a capped pool gets a creation slot instead
 * of running a load, in FIFO order with everyone else; it makes the item
 * on its loop and owns it, or gives the slot back with a discard, which
 * goes to the oldest taker.  Never more than max_items are created. */
#include <errno.h>

#include "loops.h"

#define CAP 2
#define TAKERS 6

static ts_waitlist *w;
static ts_async nodes[TAKERS];
static int made[TAKERS];
static int order[TAKERS * 2], n_order;
static size_t max_created;

static size_t created_now(void)
{
	size_t c;
	ts_waitlist_stats(w, &c, NULL, NULL);
	return c;
}

static size_t waiting_now(void)
{
	size_t q;
	ts_waitlist_stats(w, NULL, NULL, &q);
	return q;
}

/* Runs on the test's own thread, which is the loop here. */
static void on_take(ts_async *node, int result, void *arg)
{
	int id = (int)(intptr_t)arg;
	order[n_order++] = id * 10 + (result == TS_CREATE);
	if (created_now() > max_created)
		max_created = created_now();
	if (result == TS_CREATE) {
		/* make it without blocking, own it, give it back */
		if (id % 2) {
			ts_waitlist_discard(w); /* making it failed */
			return;
		}
		THREAD_CHECK(ts_waitlist_put(w, &made[id]));
	} else {
		THREAD_CHECK(result == 0);
		THREAD_CHECK(ts_waitlist_put(w, ts_async_item(node)));
	}
}

Test(async_create, slots_go_to_async_takers_in_fifo_order_and_come_back)
{
	ts_notifier *n = ts_notifier_new();
	void *a, *b, *item;

	w = ts_waitlist_new(CAP, 0);
	/* The caller that gets TS_CREATE at once holds a slot. */
	cr_assert_eq(ts_waitlist_take_async(w, 0, NULL, n, &nodes[0], on_take, NULL, &a), TS_CREATE);
	cr_assert_null(a);
	cr_assert_eq(ts_waitlist_take_async(w, 0, NULL, n, &nodes[0], on_take, NULL, &b), TS_CREATE);
	cr_assert_eq(created_now(), CAP);
	for (int i = 0; i < TAKERS; i++) {
		nodes[i] = (ts_async)TS_ASYNC_INIT;
		cr_assert_eq(ts_waitlist_take_async(w, 0, NULL, n, &nodes[i], on_take,
						    (void *)(intptr_t)i, &item),
			     EINPROGRESS);
	}
	/* The first creation fails: its slot goes to taker 0, which creates
	 * (it has an even id) and puts, which serves taker 1; the second
	 * creator's item goes to taker 1 ... */
	ts_waitlist_discard(w);
	cr_assert(ts_waitlist_put(w, &made[TAKERS - 1]));
	int ran = 0;
	for (int guard = 0; guard < 100 && ran < TAKERS; guard++)
		ran += ts_notifier_dispatch(n);
	cr_assert_eq(ran, TAKERS, "%d of %d takers served", ran, TAKERS);
	for (int i = 0; i < TAKERS; i++)
		cr_assert_eq(order[i] / 10, i, "served %d-th: taker %d", i, order[i] / 10);
	cr_assert_eq(order[0] % 10, 1, "taker 0 got the discarded slot");
	cr_assert_leq(max_created, CAP);
	cr_assert_leq(created_now(), CAP);
	cr_assert_eq(ts_notifier_free(n), 0);
	ts_waitlist_free(w);
}

/* A blocking taker behind async takers waits its turn; a slot freed while
 * a blocking loader and an async taker wait goes to the older. */
static int make(void *arg, void **item)
{
	*item = arg;
	return 0;
}

static void *blocking_take(void *arg)
{
	void **out = arg;
	THREAD_CHECK(ts_waitlist_take(w, out, make, &made[0], 0, NULL) == 0);
	return NULL;
}

static int last_result = -1;

static void note(ts_async *node, int result, void *arg)
{
	(void)node;
	(void)arg;
	last_result = result;
}

Test(async_create, a_freed_slot_goes_to_the_oldest_taker_of_either_kind)
{
	ts_notifier *n = ts_notifier_new();
	ts_async node = TS_ASYNC_INIT;
	void *mine, *theirs = NULL, *item;
	pthread_t th;

	w = ts_waitlist_new(1, 0);
	cr_assert_eq(ts_waitlist_take(w, &mine, make, &made[1], 0, NULL), 0);
	cr_assert_eq(ts_waitlist_take_async(w, 0, NULL, n, &node, note, NULL, &item), EINPROGRESS);
	start_thread(&th, blocking_take, &theirs);
	WAIT_FOR(waiting_now() == 2);
	ts_waitlist_discard(w); /* the async taker is older: TS_CREATE */
	cr_assert_eq(ts_notifier_dispatch(n), 1);
	cr_assert_eq(last_result, TS_CREATE);
	cr_assert(ts_waitlist_put(w, &made[2])); /* what it made, to the blocking taker */
	join_bounded(th);
	cr_assert_eq(theirs, &made[2]);
	cr_assert_eq(created_now(), 1);
	cr_assert_eq(ts_notifier_free(n), 0);
	ts_waitlist_free(w);
}
