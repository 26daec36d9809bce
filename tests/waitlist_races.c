/* SPDX-License-Identifier: MIT */
/* Items racing timeouts, cancels, closes and freed slots.  Forced first,
 * through the test hook at the instant a taker that gave up is about to
 * take the lock to leave (a cancelled taker keeps what reached it first; a
 * timed-out one is given nothing: its deadline has passed); then a
 * conservation storm: tagged items, tiny
 * deadlines, random cancels, failing loads, discards — at the end every
 * live item is ready exactly once and none was ever held twice. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hook.h"
#include "tagged.h"
#include "takers.h"

enum action { ACT_NONE, ACT_PUT, ACT_CLOSE, ACT_DISCARD, ACT_DISCARD_THEN_PUT };
static ts_waitlist *target;
static void *to_put;
static _Atomic int action, fired;

static void race_hook(enum ts_hook_point point, void *obj)
{
	if (point != TS_HOOK_LEAVING || obj != target)
		return;
	switch (atomic_exchange(&action, ACT_NONE)) {
	case ACT_PUT:
		ts_waitlist_put(target, to_put);
		break;
	case ACT_CLOSE:
		ts_waitlist_close(target);
		break;
	case ACT_DISCARD:
		ts_waitlist_discard(target);
		break;
	case ACT_DISCARD_THEN_PUT:
		ts_waitlist_discard(target);
		ts_waitlist_put(target, to_put);
		break;
	default:
		return;
	}
	atomic_fetch_add(&fired, 1);
}

static ts_waitlist *armed(size_t max_items, enum action act)
{
	target = ts_waitlist_new(max_items, 0);
	atomic_store(&fired, 0);
	atomic_store(&action, act);
	atomic_store(&ts_hook, race_hook);
	return target;
}

static void disarm(void)
{
	atomic_store(&ts_hook, NULL);
}

/* A deadline means never after it: the item put while the timed-out taker
 * is on its way out does not reach it, and waits on the ready stack. */
Test(waitlist_races, an_item_put_after_a_takers_deadline_is_not_given_to_it)
{
	ts_waitlist *w = armed(1, ACT_PUT);
	void *item;

	cr_assert_eq(ts_waitlist_take(w, &to_put, counting_load, NULL, 0, NULL), 0);
	int r = ts_waitlist_take(w, &item, counting_load, NULL, in_ms(5), NULL);
	disarm();
	cr_assert_eq(atomic_load(&fired), 1, "the race was not forced");
	cr_assert_eq(r, ETIMEDOUT, "an item was given after the taker's deadline");
	cr_assert_null(item);
	cr_assert_eq(list_waiting(w), 0);
	cr_assert_eq(list_ready(w), 1, "the item was lost");
	ts_waitlist_free(w);
}

static void *fire_when_queued(void *p)
{
	ts_cancel *c = p;
	int64_t end = ts_now_ns() + TEST_PATIENCE_NS;
	while (list_waiting(target) == 0 && ts_now_ns() < end)
		sched_yield();
	ts_cancel_fire(c);
	return NULL;
}

Test(waitlist_races, an_item_reaching_a_cancelled_taker_before_it_leaves_is_a_success)
{
	ts_waitlist *w = armed(1, ACT_PUT);
	ts_cancel c = TS_CANCEL_INIT;
	pthread_t th;
	void *item;

	cr_assert_eq(ts_waitlist_take(w, &to_put, counting_load, NULL, 0, NULL), 0);
	start_thread(&th, fire_when_queued, &c);
	int r = ts_waitlist_take(w, &item, counting_load, NULL, 0, &c);
	join_bounded(th);
	disarm();
	cr_assert_eq(atomic_load(&fired), 1);
	cr_assert_eq(r, 0);
	cr_assert_eq(item, to_put);
	ts_waitlist_free(w);
}

Test(waitlist_races, close_landing_before_a_timed_out_taker_leaves_unlinks_it_once)
{
	ts_waitlist *w = armed(1, ACT_CLOSE);
	void *held, *item;

	atomic_store(&n_took, 0);
	cr_assert_eq(ts_waitlist_take(w, &held, counting_load, NULL, 0, NULL), 0);
	start_taker(0, w, counting_load, NULL, 1); /* queued behind: closed out too */
	int r = ts_waitlist_take(w, &item, counting_load, NULL, in_ms(5), NULL);
	join_bounded(takers[0].th);
	disarm();
	cr_assert_eq(atomic_load(&fired), 1);
	cr_assert_eq(r, ESHUTDOWN);
	cr_assert_eq(takers[0].result, ESHUTDOWN);
	cr_assert_eq(list_waiting(w), 0);
	ts_waitlist_free(w);
}

Test(waitlist_races, a_slot_reaching_a_taker_as_it_gives_up_passes_to_the_next)
{
	ts_waitlist *w = armed(1, ACT_DISCARD);
	void *held;

	atomic_store(&loads, 0);
	atomic_store(&n_took, 0);
	cr_assert_eq(ts_waitlist_take(w, &held, counting_load, NULL, 0, NULL), 0);
	struct taker_thread *quitter = &takers[0];
	*quitter = (struct taker_thread){ .w = w, .load = counting_load, .id = 0,
					  .deadline_ns = in_ms(300), .result = -1 };
	start_thread(&quitter->th, taker_main, quitter);
	WAIT_FOR(list_waiting(w) == 1);
	start_taker(1, w, counting_load, NULL, 2);
	/* the quitter times out; the hook discards `held`, whose slot goes to
	 * the quitter (oldest), which must hand it on to taker 1 */
	join_bounded(quitter->th);
	join_bounded(takers[1].th);
	disarm();
	cr_assert_eq(atomic_load(&fired), 1);
	cr_assert_eq(quitter->result, ETIMEDOUT);
	cr_assert_eq(takers[1].result, 0, "the freed slot was lost with the quitter");
	cr_assert_eq(atomic_load(&loads), 2);
	cr_assert_eq(list_created(w), 1);
	ts_waitlist_free(w);
}

Test(waitlist_races, a_slot_then_an_item_reaching_a_quitting_taker_leak_nothing)
{
	ts_waitlist *w = armed(1, ACT_DISCARD_THEN_PUT);
	void *held, *item;

	atomic_store(&loads, 0);
	cr_assert_eq(ts_waitlist_take(w, &held, counting_load, NULL, 0, NULL), 0);
	to_put = (void *)0xF0F0;
	/* we time out; the hook discards `held` (its slot does not come to
	 * us: our deadline has passed) and puts another item, which waits on
	 * the ready stack; nothing is loaded and the slot stays free */
	int r = ts_waitlist_take(w, &item, counting_load, NULL, in_ms(5), NULL);
	disarm();
	cr_assert_eq(atomic_load(&fired), 1);
	cr_assert_eq(r, ETIMEDOUT);
	cr_assert_null(item);
	cr_assert_eq(atomic_load(&loads), 1, "the unused slot was loaded anyway");
	cr_assert_eq(list_created(w), 0, "the freed slot was kept");
	cr_assert(ts_waitlist_try_take(w, &item));
	cr_assert_eq(item, to_put);
	ts_waitlist_free(w);
}

/* ---- conservation storm ------------------------------------------------ */

#define WORKERS 4
#define ITERS 1500
#define MAX_ITEMS 3

static _Atomic int live, over_cap, kept_after_close, failed, discarded;
static _Atomic(const char *) bad_item; /* the first tagged_hold complaint */
static _Atomic(ts_cancel *) slot[WORKERS];
static _Atomic int workers_done;

static int tagged_load(void *arg, void **item)
{
	unsigned *seed = arg;
	if (rand_r(seed) % 8 == 0) {
		atomic_fetch_add(&failed, 1);
		return EIO; /* a refused connect */
	}
	if (atomic_fetch_add(&live, 1) + 1 > MAX_ITEMS)
		atomic_fetch_add(&over_cap, 1);
	*item = tagged_new();
	return 0;
}

struct storm_arg {
	ts_waitlist *w;
	int id;
	ts_cancel tokens[ITERS];
};

static void *storm_worker(void *p)
{
	struct storm_arg *a = p;
	unsigned seed = (unsigned)a->id * 131u + 7;
	for (int i = 0; i < ITERS; i++) {
		ts_cancel *c = &a->tokens[i];
		ts_cancel_init(c);
		atomic_store(&slot[a->id], c);
		int64_t deadline = rand_r(&seed) % 4 ? ts_now_ns() + (rand_r(&seed) % 30) * 1000 : 0;
		void *item;
		int r = ts_waitlist_take(a->w, &item, tagged_load, &seed, deadline, c);
		atomic_store(&slot[a->id], NULL);
		if (r != 0)
			continue;
		struct tagged *t = item;
		const char *bad = tagged_hold(t);
		if (bad) {
			const char *none = NULL;
			atomic_compare_exchange_strong(&bad_item, &none, bad);
			continue; /* not ours to give back */
		}
		for (volatile int k = rand_r(&seed) % 2000; k > 0; k--)
			;
		tagged_release(t);
		if (rand_r(&seed) % 16 == 0) { /* broken: destroy it */
			tagged_destroy(t);
			atomic_fetch_sub(&live, 1);
			atomic_fetch_add(&discarded, 1);
			ts_waitlist_discard(a->w);
		} else if (!ts_waitlist_put(a->w, t)) {
			atomic_fetch_add(&kept_after_close, 1); /* closed: still ours */
		}
	}
	atomic_fetch_add(&workers_done, 1);
	return NULL;
}

static void *storm_canceller(void *p)
{
	unsigned seed = 5;
	while (atomic_load(&workers_done) < WORKERS) {
		ts_cancel *c = atomic_load(&slot[rand_r(&seed) % WORKERS]);
		if (c && rand_r(&seed) % 8 == 0)
			ts_cancel_fire(c);
		sched_yield();
	}
	return NULL;
}

static void run_storm(bool close_midway)
{
	ts_waitlist *w = ts_waitlist_new(MAX_ITEMS, 0);
	struct storm_arg *args = calloc(WORKERS, sizeof(*args));
	pthread_t th[WORKERS], canceller;

	atomic_store(&bad_item, NULL);
	atomic_store(&live, 0);
	atomic_store(&kept_after_close, 0);
	atomic_store(&workers_done, 0);
	atomic_store(&failed, 0);
	atomic_store(&discarded, 0);
	for (int i = 0; i < WORKERS; i++) {
		args[i].w = w;
		args[i].id = i;
		start_thread(&th[i], storm_worker, &args[i]);
	}
	start_thread(&canceller, storm_canceller, NULL);
	if (close_midway) {
		/* close only once both give-back paths have run, so the
		 * close races a pool whose slots have already churned */
		WAIT_FOR(atomic_load(&failed) > 0 && atomic_load(&discarded) > 0);
		ts_waitlist_close(w);
	}
	for (int i = 0; i < WORKERS; i++)
		join_bounded(th[i]);
	join_bounded(canceller);

	cr_assert_null(atomic_load(&bad_item), "%s", atomic_load(&bad_item));
	cr_assert_eq(atomic_load(&over_cap), 0, "more than max_items existed");
	cr_assert_eq(list_waiting(w), 0);
	/* every live item is ready exactly once, or was kept by a put that the
	 * close refused */
	const char *why = NULL;
	int drained = tagged_drain(w, &why);
	cr_assert_geq(drained, 0, "%s", why);
	cr_assert_eq(drained + atomic_load(&kept_after_close), atomic_load(&live),
		     "items lost: %d live, %d ready, %d kept", atomic_load(&live), drained,
		     atomic_load(&kept_after_close));
	cr_assert_eq(list_created(w), (size_t)atomic_load(&live));
	cr_log_info("made %d, live %d, ready %d, kept %d", atomic_load(&tagged_count),
		    atomic_load(&live), drained, atomic_load(&kept_after_close));
	cr_assert_gt(atomic_load(&failed), 0, "no load failure was exercised");
	cr_assert_gt(atomic_load(&discarded), 0, "no discard was exercised");
	tagged_free_all();
	free(args);
	ts_waitlist_free(w);
}

Test(waitlist_races, storm_of_timeouts_cancels_failures_and_discards_loses_nothing)
{
	run_storm(false);
}

Test(waitlist_races, close_racing_the_storm_loses_nothing)
{
	run_storm(true);
}
