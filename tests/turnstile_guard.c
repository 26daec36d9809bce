/* SPDX-License-Identifier: MIT */
/* The freshness guard libturnstile-fleet keeps on its local turnstile: no
 * pass is granted at or after the guard's instant, by the inlined fast
 * path, the locked take or a hand-out on return; callers queue instead,
 * and moving the guard later serves them at once.  A stress test flips
 * the guard while threads take and return: none is admitted in a stale
 * spell that began before its wait. */
#include <errno.h>

#include "boottime.h" /* the guard's clock, as the library reads it */
#include "callers.h"

static const ts_claim mine = { 0, 0, 0 };

static void go_stale(ts_turnstile *t)
{
	cr_assert_eq(ts_private_turnstile_guard(t, boottime_ns() - 1), 0);
}

static void go_fresh(ts_turnstile *t)
{
	cr_assert_eq(ts_private_turnstile_guard(t, boottime_ns() + (int64_t)3600 * 1000000000), 0);
}

Test(turnstile_guard, bad_input_is_einval, .timeout = 120)
{
	ts_turnstile *t = ts_turnstile_new(1);
	cr_assert_eq(ts_private_turnstile_guard(NULL, 1), EINVAL);
	cr_assert_eq(ts_private_turnstile_guard(t, -1), EINVAL);
	ts_turnstile_free(t);
}

Test(turnstile_guard, a_stale_guard_admits_nobody_though_passes_are_free, .timeout = 120)
{
	ts_turnstile *t = ts_turnstile_new(2);
	ts_pass p;

	go_stale(t);
	cr_assert_eq(available(t), 2);
	/* the inlined fast path (this file is built with it), then the
	 * locked take, both refuse */
	cr_assert_eq(ts_turnstile_wait(t, &mine, TS_DEADLINE_NOW, NULL, &p), ETIMEDOUT);
	cr_assert_eq(ts_turnstile_wait(t, &mine, in_ms(20), NULL, &p), ETIMEDOUT);
	/* its leaving emptied the queue: the fast path must still refuse */
	cr_assert_eq(ts_turnstile_wait(t, &mine, TS_DEADLINE_NOW, NULL, &p), ETIMEDOUT);
	cr_assert_not(ts_pass_issued(&p));
	cr_assert_eq(available(t), 2, "a refused wait took a pass");
	cr_assert_eq(queued(t), 0, "a timed-out wait stayed queued");
	ts_turnstile_free(t);
}

Test(turnstile_guard, callers_queued_while_stale_are_served_when_the_guard_moves, .timeout = 120)
{
	ts_turnstile *t = ts_turnstile_new(2);

	go_stale(t);
	queue_callers(t, 3, 7);
	cr_assert_eq(atomic_load(&n_admitted), 0, "admitted on a stale guard");
	go_fresh(t);
	WAIT_FOR(atomic_load(&n_admitted) == 2);
	cr_assert_eq(queued(t), 1);
	cr_assert_eq(available(t), 0);
	release_all(3);
	cr_assert_eq(available(t), 2);
	ts_turnstile_free(t);
}

Test(turnstile_guard, a_pass_returned_while_stale_is_kept_free_not_handed_on, .timeout = 120)
{
	ts_turnstile *t = ts_turnstile_new(1);
	ts_pass held;

	go_fresh(t);
	cr_assert_eq(ts_turnstile_wait(t, &mine, TS_DEADLINE_NOW, NULL, &held), 0);
	go_stale(t);
	queue_callers(t, 1, 3);
	ts_pass_return(&held);
	cr_assert_eq(available(t), 1);
	cr_assert_eq(queued(t), 1, "a return on a stale guard granted a waiter");
	cr_assert_eq(atomic_load(&n_admitted), 0);
	go_fresh(t);
	WAIT_FOR(atomic_load(&n_admitted) == 1);
	release_all(1);
	cr_assert_eq(available(t), 1);
	ts_turnstile_free(t);
}

Test(turnstile_guard, a_fresh_guard_admits_and_counts_as_usual_and_lifting_it_is_clean, .timeout = 120)
{
	ts_turnstile *t = ts_turnstile_new(2);
	ts_pass a, b, c, copy;

	go_fresh(t);
	cr_assert_eq(ts_turnstile_wait(t, &mine, TS_DEADLINE_NOW, NULL, &a), 0);
	cr_assert_eq(ts_turnstile_wait(t, &mine, TS_DEADLINE_NOW, NULL, &b), 0);
	cr_assert_eq(ts_turnstile_wait(t, &mine, TS_DEADLINE_NOW, NULL, &c), ETIMEDOUT);
	copy = a;
	ts_pass_return(&a);
	cr_assert_eq(available(t), 1);
	ts_pass_return(&b);
	ts_pass_return(&copy); /* a second copy: every pass is free, ignored */
	cr_assert_eq(available(t), 2, "a copy of a returned pass raised the count");
	cr_assert_eq(ts_turnstile_wait(t, &mine, TS_DEADLINE_NOW, NULL, &b), 0);
	cr_assert_eq(ts_private_turnstile_guard(t, 0), 0);
	/* lifted: WAITERS follows the queue again (empty), so the lock-free
	 * paths are back */
	cr_assert_eq(atomic_load(&ts_private_head(t)->word) & TS_PRIVATE_WORD_WAITERS, 0);
	ts_pass_return(&b);
	cr_assert_eq(available(t), 2);
	cr_assert_eq(ts_turnstile_wait(t, &mine, TS_DEADLINE_NOW, NULL, &a), 0);
	ts_pass_return(&a);
	cr_assert_eq(available(t), 2);
	ts_turnstile_free(t);
}

Test(turnstile_guard, close_ends_callers_queued_on_a_stale_guard, .timeout = 120)
{
	ts_turnstile *t = ts_turnstile_new(1);

	go_stale(t);
	queue_callers(t, 2, 5);
	ts_turnstile_close(t);
	release_all(2);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(callers[i].result, ESHUTDOWN);
	ts_pass p;
	cr_assert_eq(ts_turnstile_wait(t, &mine, TS_DEADLINE_NOW, NULL, &p), ESHUTDOWN);
	ts_turnstile_free(t);
}

/* --- stress ------------------------------------------------------------- */

#define TAKERS 4
#define CEILING 2
#define SPELLS 2000          /* at most, and for at most STRESS_NS after the */
#define MIN_SPELLS 10        /* first MIN_SPELLS (valgrind runs a thread at a time, a spell taking up to 3 s there) */
#define STRESS_NS ((int64_t)2 * 1000000000)

static ts_turnstile *st;
/* odd: a stale spell; the guard went stale before it turned odd, and is
 * moved only after it turns even again */
static _Atomic uint64_t spell;
static _Atomic int holders, over_ceiling, stale_admissions, stuck, stop;
static _Atomic long admissions;

static void *taker(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		ts_pass p;
		uint64_t before = atomic_load(&spell);
		/* a deadline far beyond any spell: a wait lost across a
		 * renewal fails the test instead of hanging it */
		int r = ts_turnstile_wait(st, &mine, ts_now_ns() + TEST_PATIENCE_NS, NULL, &p);
		if (r) {
			atomic_fetch_add(&stuck, 1);
			continue;
		}
		/* admitted in the stale spell its wait began in: a grant on a
		 * stale guard */
		if ((before & 1) && atomic_load(&spell) == before)
			atomic_fetch_add(&stale_admissions, 1);
		if (atomic_fetch_add(&holders, 1) >= CEILING)
			atomic_fetch_add(&over_ceiling, 1);
		atomic_fetch_add(&admissions, 1);
		atomic_fetch_sub(&holders, 1);
		ts_pass_return(&p);
	}
	return NULL;
}

Test(turnstile_guard, stress_no_grant_in_a_stale_spell_and_none_lost_across_renewals, .timeout = 400)
{
	pthread_t th[TAKERS];

	st = ts_turnstile_new(CEILING);
	go_fresh(st);
	for (int i = 0; i < TAKERS; i++)
		start_thread(&th[i], taker, NULL);
	int64_t end = ts_now_ns() + STRESS_NS;
	for (int s = 0; s < SPELLS && (s < MIN_SPELLS || ts_now_ns() < end); s++) {
		go_stale(st);
		atomic_fetch_add(&spell, 1); /* odd */
		/* the takers run into it: wait until one queued, or a moment */
		int64_t until = ts_now_ns() + 1000000;
		while (queued(st) == 0 && ts_now_ns() < until)
			sched_yield();
		atomic_fetch_add(&spell, 1); /* even */
		go_fresh(st);
		/* and fresh: someone gets through before the next spell */
		long seen = atomic_load(&admissions);
		WAIT_FOR(atomic_load(&admissions) > seen);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < TAKERS; i++)
		join_bounded(th[i]);
	cr_assert_eq(atomic_load(&stale_admissions), 0, "%d admissions on a stale guard",
		     atomic_load(&stale_admissions));
	cr_assert_eq(atomic_load(&over_ceiling), 0);
	cr_assert_eq(atomic_load(&stuck), 0, "a wait outlived every spell: lost across a renewal");
	cr_assert_eq(available(st), CEILING, "a pass was lost or doubled");
	cr_assert_eq(queued(st), 0);
	ts_turnstile_free(st);
}
