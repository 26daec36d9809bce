/* SPDX-License-Identifier: MIT */
/* Private: the turnstile's layout.  The state word, its encoding and the
 * no-barging invariant are in include/turnstile/fastpath.h, whose inline
 * fast paths read the word as the struct's first member. */
#ifndef TS_LIB_TURNSTILE_IMPL_H
#define TS_LIB_TURNSTILE_IMPL_H

#include <stdatomic.h>
#include <stddef.h>

#include <turnstile/turnstile.h>

#include "skiplist.h"
#include "waiter.h"

#define WORD_WAITERS TS_PRIVATE_WORD_WAITERS
#define WORD_CLOSED TS_PRIVATE_WORD_CLOSED
#define WORD_UNIT TS_PRIVATE_WORD_UNIT

struct ts_turnstile {
	_Alignas(64) _Atomic uint64_t word; /* alone on its line: the fast path */
	_Alignas(64) _Atomic int lock;
	int64_t ceiling;              /* under lock */
	_Atomic int64_t waiting;      /* queue length, for snapshots */
	struct spin_policy spin;      /* does the head's spin pay here? */
	struct skiplist queue;        /* under lock */
};
_Static_assert(offsetof(struct ts_turnstile, word) == 0,
	       "fastpath.h reads the word as the first member");

static inline int64_t word_available(uint64_t w)
{
	return (int64_t)w >> 2; /* arithmetic shift: gcc and clang define it */
}

#endif
