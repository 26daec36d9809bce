/* SPDX-License-Identifier: MIT */
/* Grants racing timeouts, cancels and closes.  First forced: a test hook
 * runs at the instant a timed-out (or cancelled) waiter is about to take the
 * lock to leave, and lands the competing grant or close right there: a
 * cancelled waiter keeps a grant that landed first, a timed-out one never
 * gets one (its deadline has passed).  Then
 * raced for thousands of iterations: afterwards no pass is lost or doubled
 * and nobody is stuck. */
#include <errno.h>
#include <stdlib.h>

#include "hook.h"
#include "testutil.h"

static const ts_claim mine = { 0, 0, 0 };

enum action { ACT_NONE, ACT_RETURN_PASS, ACT_CLOSE };
static ts_turnstile *hook_target;
static ts_pass hook_pass;
static _Atomic int hook_action;
static _Atomic int hook_fired;

static void race_hook(enum ts_hook_point point, void *obj)
{
	if (point != TS_HOOK_LEAVING || obj != hook_target)
		return;
	switch (atomic_exchange(&hook_action, ACT_NONE)) {
	case ACT_RETURN_PASS:
		ts_pass_return(&hook_pass);
		break;
	case ACT_CLOSE:
		ts_turnstile_close(hook_target);
		break;
	default:
		return;
	}
	atomic_fetch_add(&hook_fired, 1);
}

static ts_turnstile *armed(int64_t conc, enum action act)
{
	ts_turnstile *t = ts_turnstile_new(conc);
	hook_target = t;
	atomic_store(&hook_fired, 0);
	atomic_store(&hook_action, act);
	atomic_store(&ts_hook, race_hook);
	return t;
}

static void disarm(void)
{
	atomic_store(&ts_hook, NULL);
}

/* A deadline means never after it: the pass returned while the timed-out
 * waiter is on its way out is not granted to it, and stays free. */
Test(turnstile_races, a_pass_returned_after_a_waiters_deadline_is_not_granted_to_it)
{
	ts_turnstile *t = armed(1, ACT_RETURN_PASS);
	ts_pass p;

	cr_assert_eq(ts_turnstile_wait(t, &mine, 0, NULL, &hook_pass), 0);
	int r = ts_turnstile_wait(t, &mine, in_ms(5), NULL, &p);
	disarm();
	cr_assert_eq(atomic_load(&hook_fired), 1, "the race was not forced");
	cr_assert_eq(r, ETIMEDOUT, "a pass was granted after the waiter's deadline");
	cr_assert_not(ts_pass_issued(&p));
	cr_assert_eq(queued(t), 0);
	cr_assert_eq(available(t), 1, "pass lost or doubled");
	ts_turnstile_free(t);
}

/* The expired head is skipped, not the queue: the pass goes on to the
 * next waiter in order. */
struct later {
	ts_turnstile *t;
	ts_claim claim;
	int r;
	ts_pass p;
};

static void *wait_without_deadline(void *arg)
{
	struct later *l = arg;
	l->r = ts_turnstile_wait(l->t, &l->claim, 0, NULL, &l->p);
	return NULL;
}

Test(turnstile_races, an_expired_head_is_skipped_and_the_next_waiter_granted)
{
	ts_turnstile *t = armed(1, ACT_RETURN_PASS);
	struct later next = { t, { 1, 0, 0 }, -1, TS_PASS_NONE }; /* band 1: behind */
	pthread_t th;
	ts_pass p;

	atomic_store(&hook_action, ACT_NONE);
	cr_assert_eq(ts_turnstile_wait(t, &mine, 0, NULL, &hook_pass), 0);
	start_thread(&th, wait_without_deadline, &next);
	WAIT_FOR(queued(t) == 1);
	atomic_store(&hook_action, ACT_RETURN_PASS); /* when the head times out */
	int r = ts_turnstile_wait(t, &mine, in_ms(5), NULL, &p);
	join_bounded(th);
	disarm();
	cr_assert_eq(atomic_load(&hook_fired), 1, "the race was not forced");
	cr_assert_eq(r, ETIMEDOUT, "the expired head was granted");
	cr_assert_eq(next.r, 0, "the pass did not go on to the next waiter");
	cr_assert(ts_pass_issued(&next.p));
	ts_pass_return(&next.p);
	cr_assert_eq(available(t), 1, "pass lost or doubled");
	ts_turnstile_free(t);
}

struct firer {
	ts_turnstile *t;
	ts_cancel *c;
};

static void *fire_when_queued(void *p)
{
	struct firer *f = p;
	int64_t end = ts_now_ns() + TEST_PATIENCE_NS;
	while (queued(f->t) == 0 && ts_now_ns() < end)
		sched_yield();
	ts_cancel_fire(f->c);
	return NULL;
}

Test(turnstile_races, grant_landing_before_a_cancelled_waiter_leaves_is_a_success)
{
	ts_turnstile *t = armed(1, ACT_RETURN_PASS);
	ts_cancel c = TS_CANCEL_INIT;
	struct firer f = { t, &c };
	pthread_t th;
	ts_pass p;

	cr_assert_eq(ts_turnstile_wait(t, &mine, 0, NULL, &hook_pass), 0);
	start_thread(&th, fire_when_queued, &f);
	int r = ts_turnstile_wait(t, &mine, 0, &c, &p);
	join_bounded(th);
	disarm();
	cr_assert_eq(atomic_load(&hook_fired), 1, "the race was not forced");
	cr_assert_eq(r, 0);
	cr_assert_eq(available(t), 0);
	ts_pass_return(&p);
	cr_assert_eq(available(t), 1);
	ts_turnstile_free(t);
}

struct plain_waiter {
	ts_turnstile *t;
	int result;
};

static void *wait_plain(void *p)
{
	struct plain_waiter *w = p;
	ts_pass pass;
	w->result = ts_turnstile_wait(w->t, &mine, 0, NULL, &pass);
	ts_pass_return(&pass);
	return NULL;
}

Test(turnstile_races, close_landing_before_a_timed_out_waiter_leaves_is_not_unlinked_twice)
{
	ts_turnstile *t = armed(1, ACT_CLOSE);
	struct plain_waiter behind = { t, -1 };
	pthread_t th;
	ts_pass held, p;

	cr_assert_eq(ts_turnstile_wait(t, &mine, 0, NULL, &held), 0);
	int r = ts_turnstile_wait(t, &mine, TS_DEADLINE_NOW, NULL, &p);
	cr_assert_eq(r, ETIMEDOUT, "a try never queues, so close cannot reach it");
	start_thread(&th, wait_plain, &behind);
	WAIT_FOR(queued(t) == 1);
	r = ts_turnstile_wait(t, &mine, in_ms(5), NULL, &p);
	join_bounded(th);
	disarm();
	cr_assert_eq(atomic_load(&hook_fired), 1);
	cr_assert_eq(r, ESHUTDOWN);
	cr_assert_eq(behind.result, ESHUTDOWN);
	cr_assert_eq(queued(t), 0);
	ts_pass_return(&held);
	cr_assert_eq(available(t), 1);
	ts_turnstile_free(t);
}

Test(turnstile_races, timeout_landing_first_leaves_the_pass_for_the_next_waiter)
{
	ts_turnstile *t = ts_turnstile_new(1);
	struct plain_waiter behind = { t, -1 };
	pthread_t th;
	ts_pass held, p;

	cr_assert_eq(ts_turnstile_wait(t, &mine, 0, NULL, &held), 0);
	start_thread(&th, wait_plain, &behind);
	WAIT_FOR(queued(t) == 1);
	cr_assert_eq(ts_turnstile_wait(t, &mine, in_ms(5), NULL, &p), ETIMEDOUT);
	cr_assert_eq(queued(t), 1);
	ts_pass_return(&held);
	join_bounded(th);
	cr_assert_eq(behind.result, 0);
	cr_assert_eq(available(t), 1);
	ts_turnstile_free(t);
}

/* ---- raced: many threads, tiny deadlines, random cancels ---------------- */

#define WORKERS 4
#define ITERS 3000
#define CONC 2

struct storm {
	ts_turnstile *t;
	_Atomic int holders, over_ceiling, admitted, timed_out, cancelled, shut;
	_Atomic(ts_cancel *) slot[WORKERS];
	_Atomic int workers_done, attempts;
	bool close_midway;
	ts_cancel tokens[WORKERS][ITERS];
};

struct worker_arg {
	struct storm *s;
	int id;
};

/* Work while holding a pass: busy, so holders overlap and waiters queue. */
static void hold_busy(int64_t ns)
{
	int64_t end = ts_now_ns() + ns;
	while (ts_now_ns() < end)
		;
}

static void *storm_worker(void *p)
{
	struct worker_arg *a = p;
	struct storm *s = a->s;
	unsigned seed = (unsigned)a->id * 7919u + 1;

	/* With a close midway, keep going until this worker has been refused
	 * by it, so every worker meets the close whatever the scheduler does. */
	bool refused = false;
	for (int i = 0; i < ITERS || (s->close_midway && !refused); i++) {
		/* past ITERS no token: one must never be re-initialised while
		 * the canceller may still fire it */
		ts_cancel *c = i < ITERS ? &s->tokens[a->id][i] : NULL;
		atomic_fetch_add(&s->attempts, 1);
		if (c) {
			ts_cancel_init(c);
			atomic_store(&s->slot[a->id], c);
			if (rand_r(&seed) % 64 == 0)
				ts_cancel_fire(c); /* give-ups whatever the scheduler does */
		}
		ts_claim claim = { rand_r(&seed) % 2, rand_r(&seed) % 8, 0 };
		int64_t deadline = ts_now_ns() + (rand_r(&seed) % 50) * 1000;
		ts_pass pass;
		int r = ts_turnstile_wait(s->t, &claim, rand_r(&seed) % 4 ? deadline : 0, c, &pass);
		if (r == 0) {
			if (atomic_fetch_add(&s->holders, 1) + 1 > CONC)
				atomic_fetch_add(&s->over_ceiling, 1);
			atomic_fetch_add(&s->admitted, 1);
			hold_busy(rand_r(&seed) % 20000);
			atomic_fetch_sub(&s->holders, 1);
			ts_pass_return(&pass);
		} else if (r == ETIMEDOUT) {
			atomic_fetch_add(&s->timed_out, 1);
		} else if (r == ECANCELED) {
			atomic_fetch_add(&s->cancelled, 1);
		} else if (r == ESHUTDOWN) {
			atomic_fetch_add(&s->shut, 1);
			refused = true;
		}
		atomic_store(&s->slot[a->id], NULL);
	}
	atomic_fetch_add(&s->workers_done, 1);
	return NULL;
}

/* Fires whichever token a worker is using, at random moments. */
static void *storm_canceller(void *p)
{
	struct storm *s = p;
	unsigned seed = 99;
	while (atomic_load(&s->workers_done) < WORKERS) {
		ts_cancel *c = atomic_load(&s->slot[rand_r(&seed) % WORKERS]);
		if (c && rand_r(&seed) % 8 == 0)
			ts_cancel_fire(c);
		sched_yield();
	}
	return NULL;
}

static struct storm *run_storm(bool close_midway)
{
	struct storm *s = calloc(1, sizeof(*s));
	struct worker_arg args[WORKERS];
	pthread_t th[WORKERS], canceller;

	s->t = ts_turnstile_new(CONC);
	s->close_midway = close_midway;
	for (int i = 0; i < WORKERS; i++) {
		args[i] = (struct worker_arg){ s, i };
		start_thread(&th[i], storm_worker, &args[i]);
	}
	start_thread(&canceller, storm_canceller, s);
	if (close_midway) {
		WAIT_FOR(atomic_load(&s->admitted) + atomic_load(&s->timed_out) > ITERS);
		ts_turnstile_close(s->t);
	}
	for (int i = 0; i < WORKERS; i++)
		join_bounded(th[i]);
	join_bounded(canceller);
	cr_assert_eq(atomic_load(&s->over_ceiling), 0, "more holders than the ceiling");
	cr_assert_eq(queued(s->t), 0, "a waiter was left in the queue");
	cr_assert_eq(available(s->t), CONC, "passes lost or doubled");
	cr_assert_eq(atomic_load(&s->admitted) + atomic_load(&s->timed_out) +
			     atomic_load(&s->cancelled) + atomic_load(&s->shut),
		     atomic_load(&s->attempts), "a wait ended with an unexpected result");
	return s;
}

Test(turnstile_races, storm_of_timeouts_and_cancels_conserves_passes)
{
	struct storm *s = run_storm(false);
	cr_assert_gt(atomic_load(&s->admitted), 0);
	/* the give-up paths ran (timeouts need overlapping holders, which a
	 * serialising scheduler such as valgrind's rarely produces) */
	cr_assert_gt(atomic_load(&s->timed_out) + atomic_load(&s->cancelled), 0);
	cr_log_info("admitted %d, timed out %d, cancelled %d", atomic_load(&s->admitted),
		    atomic_load(&s->timed_out), atomic_load(&s->cancelled));
	ts_turnstile_free(s->t);
	free(s);
}

Test(turnstile_races, close_racing_a_storm_of_timeouts_strands_nobody)
{
	struct storm *s = run_storm(true);
	cr_assert_gt(atomic_load(&s->shut), 0);
	ts_turnstile_free(s->t);
	free(s);
}
