/* SPDX-License-Identifier: MIT */
/* Waking many sleepers at once: every one is woken, and no futex system
 * call runs under a library lock.  A close, a large grow, a cancel fire and
 * a waitlist close each wake more sleepers than one wake batch holds.  In
 * the fault-injection builds (the sanitizer builds of the suite) every
 * futex call checks that its thread holds no library lock and aborts if it
 * does (lib/hook.h); in every build each sleeper must come back. */
#include <errno.h>

#include "testutil.h"

#define SLEEPERS 40

static const ts_claim claim = { 0, 0, 0 };
static ts_turnstile *t;
static ts_cancel token;
static _Atomic int granted, refused;

static void *sleeper(void *arg)
{
	ts_pass p;
	int r = ts_turnstile_wait(t, &claim, 0, arg ? &token : NULL, &p);
	if (r == 0) {
		atomic_fetch_add(&granted, 1);
		ts_pass_return(&p);
	} else {
		atomic_fetch_add(&refused, 1);
	}
	return NULL;
}

/* SLEEPERS threads queued on a turnstile of ceiling 0; all but the head
 * park at once (only the head spins first). */
static void crowd(pthread_t *th, bool with_token)
{
	t = ts_turnstile_new(0);
	ts_cancel_init(&token);
	atomic_store(&granted, 0);
	atomic_store(&refused, 0);
	for (int i = 0; i < SLEEPERS; i++)
		start_thread(&th[i], sleeper, with_token ? &token : NULL);
	WAIT_FOR(queued(t) == SLEEPERS);
}

static void join_crowd(pthread_t *th)
{
	for (int i = 0; i < SLEEPERS; i++)
		join_bounded(th[i]);
	ts_turnstile_free(t);
}

Test(wakes_outside_locks, a_close_wakes_every_sleeper)
{
	pthread_t th[SLEEPERS];
	crowd(th, false);
	ts_turnstile_close(t);
	join_crowd(th);
	cr_assert_eq(atomic_load(&refused), SLEEPERS);
}

Test(wakes_outside_locks, a_large_grow_admits_every_sleeper)
{
	pthread_t th[SLEEPERS];
	crowd(th, false);
	cr_assert_eq(ts_turnstile_resize(t, SLEEPERS), 0);
	join_crowd(th);
	cr_assert_eq(atomic_load(&granted), SLEEPERS);
}

Test(wakes_outside_locks, a_cancel_fire_wakes_every_sleeper_using_it)
{
	pthread_t th[SLEEPERS];
	crowd(th, true);
	ts_cancel_fire(&token);
	join_crowd(th);
	cr_assert_eq(atomic_load(&refused), SLEEPERS);
	ts_cancel_destroy(&token);
}

static ts_waitlist *pool;
static void *taker(void *arg)
{
	void *item;
	cr_assert_eq(ts_waitlist_take(pool, &item, NULL, NULL, 0, NULL), ESHUTDOWN);
	return arg;
}

Test(wakes_outside_locks, a_waitlist_close_wakes_every_taker)
{
	pthread_t th[SLEEPERS];
	void *held;
	size_t waiting = 0;

	pool = ts_waitlist_new(1, 0);
	cr_assert_eq(ts_waitlist_take(pool, &held, NULL, NULL, 0, NULL), 0);
	for (int i = 0; i < SLEEPERS; i++)
		start_thread(&th[i], taker, NULL);
	WAIT_FOR((ts_waitlist_stats(pool, NULL, NULL, &waiting), waiting == SLEEPERS));
	ts_waitlist_close(pool);
	for (int i = 0; i < SLEEPERS; i++)
		join_bounded(th[i]);
	ts_waitlist_free(pool);
}
