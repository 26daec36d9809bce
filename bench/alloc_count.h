/* SPDX-License-Identifier: MIT */
/* Heap allocations made by the whole process while counting is on
 * (alloc_count.c). */
#ifndef TS_BENCH_ALLOC_COUNT_H
#define TS_BENCH_ALLOC_COUNT_H

#include <stdatomic.h>
#include <stdbool.h>

/* Calls to malloc, calloc, realloc, aligned_alloc, memalign and
 * posix_memalign, from any thread, while alloc_counting is true. */
extern _Atomic unsigned long alloc_calls;
extern _Atomic bool alloc_counting;

#endif
