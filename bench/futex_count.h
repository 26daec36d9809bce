/* SPDX-License-Identifier: MIT */
/* Futex system calls made by libturnstile in this process (futex_count.c). */
#ifndef TS_BENCH_FUTEX_COUNT_H
#define TS_BENCH_FUTEX_COUNT_H

#include <stdatomic.h>

extern _Atomic unsigned long futex_wait_calls, futex_wake_calls;

#endif
