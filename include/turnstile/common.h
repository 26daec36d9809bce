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

/* Every header wraps its declarations in these, so C++ links to them. */
#ifdef __cplusplus
#define TS_BEGIN_DECLS extern "C" {
#define TS_END_DECLS }
#else
#define TS_BEGIN_DECLS
#define TS_END_DECLS
#endif

/* Private members that the library accesses atomically.  C++ before C++23
 * has no _Atomic, so C++ sees plain storage of the same size and alignment
 * (gcc and clang lay out _Atomic integers and pointers as the plain types); only
 * the library, which is C, ever touches these members. */
#ifdef __cplusplus
#define TS_PRIVATE_ATOMIC(type) type
#else
#define TS_PRIVATE_ATOMIC(type) _Atomic(type)
#endif

/* A deadline already in the past: a try that never blocks. It gets a free
 * pass (or ready item) or ETIMEDOUT, and reads no clock when one is free. */
#define TS_DEADLINE_NOW ((int64_t)1)

TS_BEGIN_DECLS

/* ts_now_ns - CLOCK_MONOTONIC in nanoseconds, the clock of every deadline
 * and of ts_claim.since_ns.  Thread-safe, async-signal-safe. */
TS_API int64_t ts_now_ns(void);

/* ts_strerror - what @err means as a result of this library (ESHUTDOWN:
 * "closed", not the C library's "transport endpoint" text).  Values the
 * library never returns itself (a load function's own error) get the C
 * library's description.  Never NULL; the string is static.  Thread-safe. */
TS_API const char *ts_strerror(int err);

TS_END_DECLS

#endif
