/* SPDX-License-Identifier: MIT */
/* libturnstile — definitions every public header shares.
 *
 * Conventions of the whole API:
 *  - errors are positive errno values returned directly (the pthread
 *    convention); 0 is success;
 *  - times are int64_t nanoseconds of CLOCK_MONOTONIC (see ts_now_ns);
 *  - a deadline of 0 means "no deadline", TS_DEADLINE_NOW means "do not wait";
 *  - NULL for a required object gives EINVAL from functions returning int and
 *    is a no-op (or false) for functions returning void or bool.
 */
#ifndef TURNSTILE_COMMON_H
#define TURNSTILE_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(TS_BUILDING_LIBRARY)
#define TS_API __attribute__((visibility("default")))
#else
#define TS_API
#endif

/* A deadline already in the past: a try that never blocks. It gets a free
 * pass (or ready item) or ETIMEDOUT, and reads no clock when one is free. */
#define TS_DEADLINE_NOW ((int64_t)1)

/* ts_now_ns - CLOCK_MONOTONIC in nanoseconds, the clock of every deadline
 * and of ts_claim.since_ns.  Thread-safe, async-signal-safe. */
TS_API int64_t ts_now_ns(void);

#endif
