/* SPDX-License-Identifier: MIT */
/* The one clock of the library: CLOCK_MONOTONIC in nanoseconds. */
#include <turnstile/common.h>

#include <time.h>

TS_API int64_t ts_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
