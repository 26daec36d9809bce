/* SPDX-License-Identifier: MIT */
/* Private: the lock guarding each queue.
 *
 * Critical sections under it are a few dozen instructions (link or unlink a
 * node, publish a grant), so a contender spins first.  It must not spin (or
 * yield) forever: under SCHED_FIFO a waiter of higher priority on the
 * holder's CPU never lets a preempted holder run, and sched_yield does not
 * help across priorities.  So after a bounded spin it sleeps on the lock
 * word: Drepper's three-state futex mutex ("Futexes Are Tricky", mutex 3):
 *   0 free, 1 held, 2 held and someone may sleep on it.
 * A sleeper takes the lock by exchanging in 2, so whoever holds it after a
 * sleep unlocks with a wake: no wake-up is lost.  The unlock is one
 * exchange; its futex_wake, if any, touches only the address (harmless on
 * freed memory, as every futex wake in this library: see futex.h). */
#ifndef TS_LIB_SPINLOCK_H
#define TS_LIB_SPINLOCK_H

#include <stdatomic.h>
#include <stdint.h>

#include "futex.h"
#include "hook.h"

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
/* Other architectures: no pause hint, just a compiler barrier. */
#define cpu_relax() atomic_signal_fence(memory_order_seq_cst)
#endif

#define SPINLOCK_FREE 0u
#define SPINLOCK_HELD 1u
#define SPINLOCK_CONTENDED 2u
#define SPINLOCK_SPINS 128

static inline void spin_lock_slow(_Atomic uint32_t *lock)
{
	for (int n = 0; n < SPINLOCK_SPINS; n++) {
		uint32_t s = atomic_load_explicit(lock, memory_order_relaxed);
		if (s == SPINLOCK_FREE &&
		    atomic_compare_exchange_weak_explicit(lock, &s, SPINLOCK_HELD,
							  memory_order_acquire,
							  memory_order_relaxed)) {
			TS_LOCKS_HELD_ADD(1);
			return;
		}
		cpu_relax();
	}
	while (atomic_exchange_explicit(lock, SPINLOCK_CONTENDED, memory_order_acquire) !=
	       SPINLOCK_FREE)
		futex_wait(lock, SPINLOCK_CONTENDED, 0);
	TS_LOCKS_HELD_ADD(1);
}

static inline void spin_lock(_Atomic uint32_t *lock)
{
	uint32_t s = SPINLOCK_FREE;
	if (__builtin_expect(atomic_compare_exchange_strong_explicit(
				     lock, &s, SPINLOCK_HELD, memory_order_acquire,
				     memory_order_relaxed),
			     1)) {
		TS_LOCKS_HELD_ADD(1);
		return;
	}
	spin_lock_slow(lock);
}

static inline void spin_unlock(_Atomic uint32_t *lock)
{
	TS_LOCKS_HELD_ADD(-1);
	if (atomic_exchange_explicit(lock, SPINLOCK_FREE, memory_order_release) ==
	    SPINLOCK_CONTENDED)
		futex_wake(lock, 1);
}

/* NESTING.  Library locks nest in one place only: a cancel fire takes an
 * event-loop node's queue lock while it holds the token's lock (order:
 * token, then queue; nothing takes them the other way round).  There,
 * sleeping for the inner lock is allowed — its holder never needs the
 * outer one, so the wait is bounded by its critical section — and the
 * inner unlock's wake is not issued but handed back, for the caller's
 * wake batch after both locks are dropped. */
static inline void spin_lock_nested(_Atomic uint32_t *lock)
{
	TS_LOCKS_HELD_ADD(-1); /* the outer lock, known: see NESTING */
	spin_lock(lock);
	TS_LOCKS_HELD_ADD(1);
}

/* Unlock; returns the word to futex_wake later, or NULL. */
static inline _Atomic uint32_t *spin_unlock_nested(_Atomic uint32_t *lock)
{
	TS_LOCKS_HELD_ADD(-1);
	if (atomic_exchange_explicit(lock, SPINLOCK_FREE, memory_order_release) ==
	    SPINLOCK_CONTENDED)
		return lock;
	return NULL;
}

#endif
