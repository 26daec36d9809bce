/* SPDX-License-Identifier: MIT */
/* Private: CLOCK_BOOTTIME in nanoseconds, the clock of a fleet member's
 * freshness (lib/fleet.c), of the guard that enforces it (lib/turnstile.c)
 * and of etcd call budgets (lib/etcd.c).  A lease runs on at etcd while
 * this machine is suspended; CLOCK_MONOTONIC (ts_now_ns) stops then, and
 * would let a member wake believing its share still fresh. */
#ifndef TS_LIB_BOOTTIME_H
#define TS_LIB_BOOTTIME_H

#include <stdint.h>
#include <time.h>

static inline int64_t boottime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
