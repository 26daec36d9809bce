/* SPDX-License-Identifier: MIT */
/* Private: keeping an object alive across the unlocked gaps of one call.
 *
 * Free after the last return is safe (DESIGN.md, as POSIX semaphores): the
 * caller may free a turnstile or waitlist as soon as every wait on it has
 * returned, even while the call that released them is still running.  A
 * call whose last touch is its unlock needs nothing more (a woken waiter
 * passes through the lock before it returns).  A call that must unlock and
 * lock again — a close or a large grow waking more waiters than one wake
 * batch holds — marks the object busy for that stretch, and the free
 * function waits until no call is busy.  Only those rare calls and free pay
 * for it; the common paths never touch the counter. */
#ifndef TS_LIB_BUSY_H
#define TS_LIB_BUSY_H

#include <stdatomic.h>
#include <stdint.h>

#include "futex.h"

/* The count, and a bit set by a free function that sleeps until it is 0:
 * the last leave wakes only then, so the common case makes no system
 * call (an event-loop completion holds its notifier this way each time). */
#define BUSY_WAITED 0x80000000u

/* Under the object's lock, before the first of several unlocks. */
static inline void busy_enter(_Atomic uint32_t *busy)
{
	atomic_fetch_add_explicit(busy, 1, memory_order_relaxed);
}

/* The call's last touch of the object: then only a wake by address. */
static inline void busy_leave(_Atomic uint32_t *busy)
{
	if (atomic_fetch_sub_explicit(busy, 1, memory_order_release) == (BUSY_WAITED | 1))
		futex_wake(busy, 1);
}

/* In the free function: wait for every busy stretch to end. */
static inline void busy_wait_idle(_Atomic uint32_t *busy)
{
	uint32_t b = atomic_load_explicit(busy, memory_order_acquire);
	while (b & ~BUSY_WAITED) {
		if (!(b & BUSY_WAITED) &&
		    !atomic_compare_exchange_weak_explicit(busy, &b, b | BUSY_WAITED,
							   memory_order_acquire,
							   memory_order_acquire))
			continue; /* b reloaded: look again */
		futex_wait(busy, b | BUSY_WAITED, 0);
		b = atomic_load_explicit(busy, memory_order_acquire);
	}
}

#endif
