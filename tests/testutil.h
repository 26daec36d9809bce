/* SPDX-License-Identifier: MIT */
/* Helpers shared by the tests: bounded polling and bounded joins, so that a
 * broken protocol fails a test instead of hanging it.  No sleeps stand in
 * for synchronisation: every wait here polls a real condition with a
 * deadline. */
#ifndef TS_TESTUTIL_H
#define TS_TESTUTIL_H

#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include <turnstile.h>

#define TEST_PATIENCE_NS ((int64_t)20 * 1000000000) /* generous for TSan */

/* Poll until @cond holds; fail the test if it does not within the patience. */
#define WAIT_FOR(cond)                                                        \
	do {                                                                  \
		int64_t wait_for_end_ = ts_now_ns() + TEST_PATIENCE_NS;       \
		while (!(cond)) {                                             \
			cr_assert(ts_now_ns() < wait_for_end_,                \
				  "timed out waiting for: %s", #cond);         \
			sched_yield();                                        \
		}                                                             \
	} while (0)

static inline int64_t queued(ts_turnstile *t)
{
	int64_t w;
	ts_turnstile_snapshot(t, NULL, &w);
	return w;
}

static inline int64_t available(ts_turnstile *t)
{
	int64_t a;
	ts_turnstile_snapshot(t, &a, NULL);
	return a;
}

static inline int64_t in_ms(int64_t ms)
{
	return ts_now_ns() + ms * 1000000;
}

/* Join, failing the test if the thread is not done within the patience. */
static inline void join_bounded(pthread_t th)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += TEST_PATIENCE_NS / 1000000000;
	cr_assert_eq(pthread_timedjoin_np(th, NULL, &ts), 0, "thread did not finish");
}

static inline void start_thread(pthread_t *th, void *(*fn)(void *), void *arg)
{
	cr_assert_eq(pthread_create(th, NULL, fn, arg), 0);
}

#endif
