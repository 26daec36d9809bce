/* SPDX-License-Identifier: MIT */
/* The queue lock cannot livelock under real-time priorities.  Two
 * SCHED_FIFO threads pinned to one CPU: the low-priority one takes the lock
 * and is preempted by the high-priority one, which then wants the lock.
 * A lock that only spins and yields never lets the holder run again
 * (sched_yield does not cross priorities); ours sleeps on the lock word
 * after a bounded spin, so the holder runs, unlocks, and wakes it.
 *
 * A plain program: exits 77 (Automake's SKIP) when the process may not use
 * SCHED_FIFO (not root, no CAP_SYS_NICE); CI runs as root.  The main
 * thread, not pinned and not real-time, joins the high-priority thread
 * under a deadline, so a livelock fails instead of hanging. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <turnstile/common.h>

#include "spinlock.h"

#define PATIENCE_S 10

static _Atomic uint32_t lock;
static atomic_bool low_holds, high_started, high_locked;

static void *low_main(void *arg)
{
	spin_lock(&lock);
	atomic_store(&low_holds, true);
	/* hold the lock until the high-priority thread is running: it
	 * preempts us here, on our CPU, while we hold the lock */
	while (!atomic_load(&high_started))
		cpu_relax();
	spin_unlock(&lock);
	return arg;
}

static void *high_main(void *arg)
{
	atomic_store(&high_started, true);
	spin_lock(&lock);
	atomic_store(&high_locked, true);
	spin_unlock(&lock);
	return arg;
}

static int start_fifo(pthread_t *th, int priority, void *(*fn)(void *))
{
	pthread_attr_t attr;
	struct sched_param param = { .sched_priority = priority };
	cpu_set_t cpu0;

	CPU_ZERO(&cpu0);
	CPU_SET(0, &cpu0);
	pthread_attr_init(&attr);
	pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
	pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
	pthread_attr_setschedparam(&attr, &param);
	pthread_attr_setaffinity_np(&attr, sizeof(cpu0), &cpu0);
	int r = pthread_create(th, &attr, fn, NULL);
	pthread_attr_destroy(&attr);
	return r;
}

int main(void)
{
	pthread_t low, high;
	int r = start_fifo(&low, 10, low_main);

	if (r == EPERM) {
		printf("spinlock_realtime: SCHED_FIFO not permitted here: skipped\n");
		return 77;
	}
	if (r) {
		fprintf(stderr, "spinlock_realtime: pthread_create: %s\n", strerror(r));
		return 1;
	}
	int64_t end = ts_now_ns() + (int64_t)PATIENCE_S * 1000000000;
	while (!atomic_load(&low_holds))
		if (ts_now_ns() > end) {
			fprintf(stderr, "spinlock_realtime: the low thread never took the lock\n");
			return 1;
		}
	r = start_fifo(&high, 20, high_main);
	if (r) {
		fprintf(stderr, "spinlock_realtime: pthread_create: %s\n", strerror(r));
		return 1;
	}
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += PATIENCE_S;
	if (pthread_timedjoin_np(high, NULL, &ts)) {
		fprintf(stderr, "spinlock_realtime: LIVELOCK: the high-priority thread never got "
				"the lock its preempted low-priority holder kept\n");
		return 1; /* exiting ends both threads */
	}
	pthread_join(low, NULL);
	if (!atomic_load(&high_locked))
		return 1;
	printf("spinlock_realtime: a preempted holder ran, unlocked and woke the waiter\n");
	return 0;
}
