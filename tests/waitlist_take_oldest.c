/* SPDX-License-Identifier: MIT */
/* ts_waitlist_try_take_oldest: a reaper (idle timeout, maximum lifetime)
 * takes the item idle longest, the bottom of the LIFO ready stack, only if
 * its pick agrees, and then holds it exactly as a taker would: put gives it
 * back (on top), discard frees its slot for a queued taker.  Last, a storm
 * of takers and puts against a reaper that retires the oldest: at rest
 * every live item is ready exactly once and none was held twice. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tagged.h"
#include "takers.h"

#define A ((void *)0xA)
#define B ((void *)0xB)
#define C ((void *)0xC)
#define UNTOUCHED ((void *)0x5e17)

/* A pick that logs every item it is shown and says @arg's answer. */
struct pick_log {
	bool answer;
	int calls;
	void *seen[8];
};

static bool logging_pick(void *item, void *arg)
{
	struct pick_log *p = arg;
	if (p->calls < 8)
		p->seen[p->calls] = item;
	p->calls++;
	return p->answer;
}

/* A pick that takes only the item given as @arg. */
static bool only_pick(void *item, void *arg)
{
	return item == arg;
}

static ts_waitlist *with_abc(size_t max_items)
{
	ts_waitlist *w = ts_waitlist_new(max_items, 0);
	cr_assert(ts_waitlist_put(w, A));
	cr_assert(ts_waitlist_put(w, B));
	cr_assert(ts_waitlist_put(w, C));
	cr_assert_eq(list_ready(w), 3);
	return w;
}

Test(waitlist_take_oldest, the_bottom_of_the_ready_stack_is_taken)
{
	ts_waitlist *w = with_abc(0);
	void *item = NULL;

	cr_assert(ts_waitlist_try_take_oldest(w, &item, NULL, NULL));
	cr_assert_eq(item, A, "took %p, not the oldest (A)", item);
	cr_assert_eq(list_ready(w), 2);
	/* the rest keep their order: C on top, B now the oldest */
	cr_assert(ts_waitlist_try_take(w, &item));
	cr_assert_eq(item, C);
	cr_assert(ts_waitlist_try_take_oldest(w, &item, NULL, NULL));
	cr_assert_eq(item, B);
	cr_assert_eq(list_ready(w), 0);
	item = UNTOUCHED;
	cr_assert_not(ts_waitlist_try_take_oldest(w, &item, NULL, NULL));
	cr_assert_eq(item, UNTOUCHED, "a false return wrote *item");
	ts_waitlist_free(w);
}

Test(waitlist_take_oldest, a_refusing_pick_leaves_the_stack_as_it_was)
{
	ts_waitlist *w = with_abc(0);
	struct pick_log log = { .answer = false };
	void *item = UNTOUCHED;

	cr_assert_not(ts_waitlist_try_take_oldest(w, &item, logging_pick, &log));
	cr_assert_eq(log.calls, 1);
	cr_assert_eq(item, UNTOUCHED, "a refused take wrote *item");
	cr_assert_eq(list_ready(w), 3);
	/* LIFO as before: C, B, A */
	cr_assert_eq(ts_waitlist_take(w, &item, NULL, NULL, 0, NULL), 0);
	cr_assert_eq(item, C);
	cr_assert(ts_waitlist_try_take(w, &item));
	cr_assert_eq(item, B);
	cr_assert(ts_waitlist_try_take(w, &item));
	cr_assert_eq(item, A);
	ts_waitlist_free(w);
}

Test(waitlist_take_oldest, the_pick_sees_only_the_bottom_item)
{
	ts_waitlist *w = with_abc(0);
	struct pick_log log = { .answer = true };
	void *item = NULL;

	/* B is ready but not the oldest: a pick wanting only B gets nothing */
	cr_assert_not(ts_waitlist_try_take_oldest(w, &item, only_pick, B));
	cr_assert_eq(list_ready(w), 3);
	cr_assert(ts_waitlist_try_take_oldest(w, &item, logging_pick, &log));
	cr_assert_eq(log.calls, 1, "the pick ran %d times for one take", log.calls);
	cr_assert_eq(log.seen[0], A);
	cr_assert_eq(item, A, "the pick approved A but %p was taken", item);
	/* now B is the oldest */
	cr_assert(ts_waitlist_try_take_oldest(w, &item, only_pick, B));
	cr_assert_eq(item, B);
	/* nothing ready: the pick is not called at all */
	cr_assert(ts_waitlist_try_take(w, &item));
	log.calls = 0;
	cr_assert_not(ts_waitlist_try_take_oldest(w, &item, logging_pick, &log));
	cr_assert_eq(log.calls, 0, "the pick was shown an item of an empty stack");
	ts_waitlist_free(w);
}

Test(waitlist_take_oldest, an_oldest_item_put_back_goes_on_top)
{
	ts_waitlist *w = with_abc(0);
	void *item = NULL;

	cr_assert(ts_waitlist_try_take_oldest(w, &item, NULL, NULL));
	cr_assert_eq(item, A);
	cr_assert(ts_waitlist_put(w, item)); /* still good: back, as the newest */
	cr_assert_eq(list_ready(w), 3);
	cr_assert(ts_waitlist_try_take(w, &item));
	cr_assert_eq(item, A, "the item put back is not on top");
	cr_assert(ts_waitlist_put(w, item));
	cr_assert(ts_waitlist_try_take_oldest(w, &item, NULL, NULL));
	cr_assert_eq(item, B, "after A came back, B is the oldest");
	ts_waitlist_free(w);
}

Test(waitlist_take_oldest, bad_input_is_false_and_changes_nothing)
{
	ts_waitlist *w = with_abc(0);
	struct pick_log log = { .answer = true };
	void *item = UNTOUCHED;

	cr_assert_not(ts_waitlist_try_take_oldest(NULL, &item, logging_pick, &log));
	cr_assert_eq(item, UNTOUCHED);
	cr_assert_not(ts_waitlist_try_take_oldest(w, NULL, logging_pick, &log));
	cr_assert_not(ts_waitlist_try_take_oldest(NULL, NULL, NULL, NULL));
	cr_assert_eq(log.calls, 0);
	cr_assert_eq(list_ready(w), 3);
	ts_waitlist_free(w);
}

Test(waitlist_take_oldest, a_closed_pool_drains_oldest_first)
{
	ts_waitlist *w = with_abc(0);
	void *item = NULL;

	ts_waitlist_close(w);
	cr_assert(ts_waitlist_try_take_oldest(w, &item, NULL, NULL));
	cr_assert_eq(item, A);
	cr_assert_not(ts_waitlist_put(w, item), "a closed pool took an item back");
	cr_assert(ts_waitlist_try_take_oldest(w, &item, only_pick, B));
	cr_assert_eq(item, B);
	cr_assert(ts_waitlist_try_take_oldest(w, &item, NULL, NULL));
	cr_assert_eq(item, C);
	cr_assert_not(ts_waitlist_try_take_oldest(w, &item, NULL, NULL));
	ts_waitlist_free(w);
}

/* The reaper's item counts as held: created stays, ready drops; its
 * discard frees the slot for a queued taker, which makes a new item.  The
 * take itself is no counted event. */
Test(waitlist_take_oldest, a_reaped_item_is_held_and_its_discard_feeds_a_queued_taker)
{
	ts_waitlist *w = ts_waitlist_new(2, 0);
	ts_waitlist_counters before, after;
	void *first, *second, *oldest = NULL, *other = NULL;
	size_t created, ready, waiting;

	atomic_store(&n_took, 0);
	atomic_store(&loads, 0);
	cr_assert_eq(ts_waitlist_take(w, &first, counting_load, NULL, 0, NULL), 0);
	cr_assert_eq(ts_waitlist_take(w, &second, counting_load, NULL, 0, NULL), 0);
	cr_assert(ts_waitlist_put(w, first));
	cr_assert(ts_waitlist_put(w, second));
	ts_waitlist_read_counters(w, &before);

	cr_assert(ts_waitlist_try_take_oldest(w, &oldest, NULL, NULL));
	cr_assert_eq(oldest, first);
	ts_waitlist_stats(w, &created, &ready, &waiting);
	cr_assert_eq(created, 2, "taking the oldest gave its slot back");
	cr_assert_eq(ready, 1);
	ts_waitlist_read_counters(w, &after);
	cr_assert(memcmp(&before, &after, sizeof(before)) == 0,
		  "taking the oldest changed the counters");

	/* both items held: a taker queues without a slot */
	cr_assert(ts_waitlist_try_take(w, &other));
	cr_assert_eq(other, second);
	start_taker(0, w, counting_load, NULL, 1);
	cr_assert_eq(list_created(w), 2, "a taker loaded past max_items");
	ts_waitlist_discard(w); /* the reaper destroyed the oldest */
	join_bounded(takers[0].th);
	cr_assert_eq(takers[0].result, 0);
	cr_assert_neq(takers[0].item, first, "a destroyed item came back");
	cr_assert_neq(takers[0].item, second, "an item held by us was given out");
	cr_assert_eq(atomic_load(&loads), 3, "the freed slot did not make a new item");
	ts_waitlist_stats(w, &created, &ready, &waiting);
	cr_assert_eq(created, 2);
	cr_assert_eq(ready, 0);
	cr_assert_eq(waiting, 0);
	ts_waitlist_read_counters(w, &after);
	cr_assert_eq(after.discards, before.discards + 1);
	cr_assert_eq(after.loads, before.loads + 1);
	ts_waitlist_free(w);
}

/* An oldest item taken and put back while a taker queues goes to that
 * taker, not onto the stack. */
Test(waitlist_take_oldest, an_oldest_item_put_back_goes_to_a_queued_taker)
{
	ts_waitlist *w = ts_waitlist_new(1, 0);
	void *item = NULL;

	atomic_store(&n_took, 0);
	cr_assert(ts_waitlist_put(w, A)); /* made elsewhere: no slot counted */
	cr_assert(ts_waitlist_try_take_oldest(w, &item, NULL, NULL));
	cr_assert_eq(item, A);
	cr_assert_eq(ts_waitlist_take(w, &item, NULL, NULL, in_ms(5000), NULL), 0); /* a NULL token */
	start_taker(0, w, NULL, NULL, 1); /* the only slot is in use: it waits */
	cr_assert(ts_waitlist_put(w, A));
	join_bounded(takers[0].th);
	cr_assert_eq(takers[0].result, 0);
	cr_assert_eq(takers[0].item, A);
	cr_assert_eq(list_ready(w), 0);
	ts_waitlist_free(w);
}

/* KEPT PLACES: an event-loop take queued with nothing ready is handed an
 * item, then withdrawn before dispatch; the item goes onto the place it
 * kept, where a reaper finds it as the oldest. */
static void never_called(ts_async *node, int result, void *arg)
{
	(void)node;
	(void)result;
	*(int *)arg += 1;
}

Test(waitlist_take_oldest, an_item_handed_back_by_a_withdrawn_async_take_is_reapable)
{
	ts_waitlist *w = ts_waitlist_new(1, 0);
	ts_notifier *n = ts_notifier_new();
	ts_async node = TS_ASYNC_INIT;
	void *held, *item = NULL;
	int calls = 0;

	cr_assert_not_null(n);
	cr_assert_eq(ts_waitlist_take(w, &held, NULL, NULL, 0, NULL), 0);
	cr_assert_eq(ts_waitlist_take_async(w, 0, NULL, n, &node, never_called, &calls, &item),
		     EINPROGRESS);
	cr_assert(ts_waitlist_put(w, A)); /* to the queued async take */
	cr_assert_not(ts_waitlist_try_take_oldest(w, &item, NULL, NULL),
		      "an item handed to a queued take was ready too");
	cr_assert_eq(ts_async_cancel(&node), EALREADY);
	cr_assert_eq(list_ready(w), 1);
	cr_assert(ts_waitlist_try_take_oldest(w, &item, NULL, NULL));
	cr_assert_eq(item, A);
	cr_assert_eq(ts_notifier_dispatch(n), 0);
	cr_assert_eq(calls, 0, "a withdrawn take's callback ran");
	cr_assert_eq(ts_notifier_free(n), 0);
	ts_waitlist_free(w);
}

/* ---- storm: takers and puts against a reaper ------------------------- */

#define WORKERS 3
#define ITERS 3000
#define MAX_ITEMS 6
#define REAPS 20

static _Atomic int live, over_cap, workers_done, reaped, put_back, refused_picks, timeouts;
static _Atomic(const char *) bad_item; /* the first complaint */

static void complain(const char *why)
{
	const char *none = NULL;
	atomic_compare_exchange_strong(&bad_item, &none, why);
}

static int storm_load(void *arg, void **item)
{
	(void)arg;
	if (atomic_fetch_add(&live, 1) + 1 > MAX_ITEMS)
		atomic_fetch_add(&over_cap, 1);
	*item = tagged_new();
	return 0;
}

struct worker_arg {
	ts_waitlist *w;
	unsigned seed;
};

static void *worker_main(void *p)
{
	struct worker_arg *a = p;
	int64_t give_up = ts_now_ns() + TEST_PATIENCE_NS;
	/* ITERS rounds, and on until the reaper has done both of its things
	 * a few times (a fast machine may finish before it starts) */
	for (int i = 0; i < ITERS || ((atomic_load(&reaped) < REAPS ||
				       atomic_load(&put_back) < REAPS) &&
				      ts_now_ns() < give_up);
	     i++) {
		void *item;
		int r;
		if (rand_r(&a->seed) % 4 == 0) {
			r = ts_waitlist_try_take(a->w, &item) ? 0 : EAGAIN;
		} else {
			int64_t deadline = rand_r(&a->seed) % 3 ? 0 : ts_now_ns() + 20000;
			r = ts_waitlist_take(a->w, &item, storm_load, NULL, deadline, NULL);
			if (r == ETIMEDOUT)
				atomic_fetch_add(&timeouts, 1);
			else if (r != 0)
				complain("a take failed other than by its deadline");
		}
		if (r != 0)
			continue;
		struct tagged *t = item;
		const char *bad = tagged_hold(t);
		if (bad) {
			complain(bad);
			continue; /* not ours to give back */
		}
		/* past ITERS the reaper is behind (a serialising scheduler such as
		 * valgrind's): hold nothing, and let it run */
		for (volatile int k = i < ITERS ? rand_r(&a->seed) % 1000 : 0; k > 0; k--)
			;
		tagged_release(t);
		if (!ts_waitlist_put(a->w, t))
			complain("a put to an open pool failed");
		if (i >= ITERS)
			sched_yield();
	}
	atomic_fetch_add(&workers_done, 1);
	return NULL;
}

/* The pick: refuses one in four, at random (no library call: a bare
 * rand_r on the reaper's seed), and records what it approved. */
struct reap_pick {
	unsigned seed;
	void *approved;
};

static bool reap_pick(void *item, void *arg)
{
	struct reap_pick *p = arg;
	if (rand_r(&p->seed) % 4 == 0)
		return false;
	p->approved = item;
	return true;
}

static void *reaper_main(void *p)
{
	ts_waitlist *w = p;
	struct reap_pick pick = { .seed = 11 };

	while (atomic_load(&workers_done) < WORKERS) {
		void *item = NULL;
		bool with_pick = rand_r(&pick.seed) % 2;
		pick.approved = NULL;
		if (list_ready(w) < 1) {
			sched_yield();
			continue;
		}
		if (!ts_waitlist_try_take_oldest(w, &item, with_pick ? reap_pick : NULL, &pick)) {
			if (with_pick && list_ready(w) > 0)
				atomic_fetch_add(&refused_picks, 1);
			sched_yield();
			continue;
		}
		if (with_pick && item != pick.approved)
			complain("the item taken is not the one the pick approved");
		struct tagged *t = item;
		const char *bad = tagged_hold(t);
		if (bad) {
			complain(bad);
			continue;
		}
		tagged_release(t);
		if (rand_r(&pick.seed) % 4 == 0) { /* still fresh: give it back */
			atomic_fetch_add(&put_back, 1);
			if (!ts_waitlist_put(w, t))
				complain("the reaper's put to an open pool failed");
			continue;
		}
		tagged_destroy(t); /* retired: idle too long */
		atomic_fetch_sub(&live, 1);
		atomic_fetch_add(&reaped, 1);
		ts_waitlist_discard(w);
	}
	return NULL;
}

Test(waitlist_take_oldest, takers_and_a_reaper_lose_nothing_and_double_nothing)
{
	ts_waitlist *w = ts_waitlist_new(MAX_ITEMS, 0);
	struct worker_arg args[WORKERS];
	pthread_t th[WORKERS], reaper;
	size_t created, ready, waiting;

	atomic_store(&bad_item, NULL);
	atomic_store(&live, 0);
	atomic_store(&over_cap, 0);
	atomic_store(&workers_done, 0);
	atomic_store(&reaped, 0);
	atomic_store(&put_back, 0);
	atomic_store(&refused_picks, 0);
	atomic_store(&timeouts, 0);
	for (int i = 0; i < WORKERS; i++) {
		args[i] = (struct worker_arg){ .w = w, .seed = (unsigned)i * 131u + 7 };
		start_thread(&th[i], worker_main, &args[i]);
	}
	start_thread(&reaper, reaper_main, w);
	for (int i = 0; i < WORKERS; i++)
		join_bounded(th[i]);
	join_bounded(reaper);

	cr_assert_null(atomic_load(&bad_item), "%s", atomic_load(&bad_item));
	cr_assert_eq(atomic_load(&over_cap), 0, "more than max_items existed");
	/* at rest nobody holds an item: created == ready + held (0) */
	ts_waitlist_stats(w, &created, &ready, &waiting);
	cr_assert_eq(waiting, 0);
	cr_assert_eq(created, ready, "%zu slots in use but %zu ready and none held", created,
		     ready);
	cr_assert_eq(created, (size_t)atomic_load(&live), "%zu slots in use, %d items live",
		     created, atomic_load(&live));
	const char *why = NULL;
	int drained = tagged_drain(w, &why);
	cr_assert_geq(drained, 0, "%s", why);
	cr_assert_eq(drained, atomic_load(&live), "items lost: %d live, %d ready",
		     atomic_load(&live), drained);
	cr_assert_eq(atomic_load(&tagged_count), atomic_load(&live) + atomic_load(&reaped),
		     "made %d, live %d, reaped %d", atomic_load(&tagged_count),
		     atomic_load(&live), atomic_load(&reaped));
	cr_log_info("made %d, live %d, reaped %d, put back %d, refused %d, timeouts %d",
		    atomic_load(&tagged_count), atomic_load(&live), atomic_load(&reaped),
		    atomic_load(&put_back), atomic_load(&refused_picks), atomic_load(&timeouts));
	cr_assert_geq(atomic_load(&reaped), REAPS, "the reaper retired too few items");
	cr_assert_geq(atomic_load(&put_back), REAPS, "the reaper put too few items back");
	tagged_free_all();
	ts_waitlist_free(w);
}
