/* Private: event counters for benchmarks (futex system calls per
 * admission).  Compiled in only with --enable-counters; otherwise every
 * TS_COUNT is nothing at all, so release builds pay no instruction. */
#ifndef TS_LIB_COUNTERS_H
#define TS_LIB_COUNTERS_H

#ifdef TS_ENABLE_COUNTERS
#include <stdatomic.h>
#include <stdint.h>

struct ts_counters {
	_Atomic uint64_t futex_waits;
	_Atomic uint64_t futex_wakes;
};
extern struct ts_counters ts_counters;
#define TS_COUNT(field) \
	atomic_fetch_add_explicit(&ts_counters.field, 1, memory_order_relaxed)
#else
#define TS_COUNT(field) ((void)0)
#endif

#endif
