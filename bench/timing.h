/* SPDX-License-Identifier: MIT */
/* Work and pauses for the benchmarks' scenarios. */
#ifndef TS_BENCH_TIMING_H
#define TS_BENCH_TIMING_H

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include <turnstile/common.h>

/* Stand-in for @ns of work holding a pass: busy, so it costs CPU as work
 * does. */
static inline void spin_ns(int64_t ns)
{
	if (ns <= 0)
		return;
	int64_t end = ts_now_ns() + ns;
	while (ts_now_ns() < end)
		;
}

/* A measurement window: the threads under test run meanwhile. */
static inline void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) == EINTR)
		;
}

static inline void *no_work(void *arg)
{
	return arg;
}

/* glibc skips atomics until a process has had a second thread: start one,
 * so that one-thread measurements pay what threaded programs pay. */
static inline void first_thread(void)
{
	pthread_t th;
	pthread_create(&th, NULL, no_work, NULL);
	pthread_join(th, NULL);
}

#endif
