/* SPDX-License-Identifier: MIT */
/* Storage for the test hook, and fault injection. */
#include "hook.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>

_Atomic(ts_hook_fn) ts_hook;

#ifdef TS_FAULT_INJECTION
_Thread_local int ts_lib_locks_held;

void ts_lib_lock_held_violation(const char *what)
{
	fprintf(stderr, "libturnstile: %s with %d library lock(s) held\n", what,
		ts_lib_locks_held);
	abort();
}

void ts_lib_invariant_violation(const char *what)
{
	fprintf(stderr, "libturnstile: invariant broken: %s\n", what);
	abort();
}

/* One in four windows yields the CPU, one in eight spins ~1-2 us: enough to
 * reorder threads without slowing the stress runs to a crawl. */
void ts_fault_point(void)
{
	static _Thread_local uint64_t x;
	if (!x)
		x = (uint64_t)(uintptr_t)&x | 1;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	switch (x & 7) {
	case 0:
	case 1:
		sched_yield();
		break;
	case 2:
		for (volatile int i = 0; i < 2000; i++)
			;
		break;
	default:
		break;
	}
}
#endif
