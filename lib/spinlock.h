/* SPDX-License-Identifier: MIT */
/* Private: the spinlock guarding each queue.
 *
 * Critical sections under it are a few dozen instructions (link or unlink a
 * node, mark a waiter), so waiting for it is spinning, not parking.  After a
 * bounded number of pauses the waiter yields the CPU: on a 2-vCPU machine
 * the holder may have been preempted, and spinning then only delays it. */
#ifndef TS_LIB_SPINLOCK_H
#define TS_LIB_SPINLOCK_H

#include <sched.h>
#include <stdatomic.h>

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define cpu_relax() atomic_signal_fence(memory_order_seq_cst)
#endif

#define SPINLOCK_PAUSES_BEFORE_YIELD 128

static inline void spin_lock_slow(_Atomic int *lock)
{
	for (int n = 0;; n++) {
		if (!atomic_load_explicit(lock, memory_order_relaxed) &&
		    !atomic_exchange_explicit(lock, 1, memory_order_acquire))
			return;
		if (n < SPINLOCK_PAUSES_BEFORE_YIELD)
			cpu_relax();
		else
			sched_yield();
	}
}

static inline void spin_lock(_Atomic int *lock)
{
	if (__builtin_expect(!atomic_exchange_explicit(lock, 1, memory_order_acquire), 1))
		return;
	spin_lock_slow(lock);
}

static inline void spin_unlock(_Atomic int *lock)
{
	atomic_store_explicit(lock, 0, memory_order_release);
}

#endif
