/* SPDX-License-Identifier: MIT */
/* Private: the protocol's race windows — a test hook, and fault injection.
 *
 * White-box tests install a function that runs at a named point, so a race
 * (a grant landing between a waiter's timeout and its removal, say) can be
 * forced deterministically instead of hoped for.  Only slow paths call it;
 * with no hook installed it costs one relaxed load and a branch. */
#ifndef TS_LIB_HOOK_H
#define TS_LIB_HOOK_H

#include <stdatomic.h>
#include <stddef.h>

enum ts_hook_point {
	/* a queued waiter timed out or was cancelled and is about to take the
	 * lock to leave the queue (obj: its turnstile or waitlist) */
	TS_HOOK_LEAVING,
	/* a waitlist loader's load returned and it is about to hand the item
	 * out (obj: the waitlist) */
	TS_HOOK_LOADED,
	/* a parked waiter's futex_wait returned (obj: its futex word) */
	TS_HOOK_WOKEN,
	/* a call that granted a waiter (return, resize, close, put, discard)
	 * is about to unlock (obj: its turnstile or waitlist): the window in
	 * which a waiter that saw its grant must not free the object yet */
	TS_HOOK_UNLOCKING,
	/* a pass return found callers queued and is about to take the lock
	 * (obj: the turnstile) */
	TS_HOOK_RETURNING,
	/* a grant was just published to a waiter, under its queue's lock
	 * (obj: the waiter's futex word) */
	TS_HOOK_GRANTED,
	/* ts_cancel_fire set the flag and has not nudged anyone yet (obj: the
	 * token): a waiter may already see the flag and return */
	TS_HOOK_FIRING,
	/* a granter that pushed an event-loop node has dropped every lock and
	 * is about to write the notifier's fd (if it owes the kick) and end its
	 * hold (obj: the notifier): the loop may already have run the callback,
	 * freed the objects and be freeing the notifier */
	TS_HOOK_KICKING,
	/* a shared turnstile's lock holder is draining every process's cache
	 * (a first waiter's enqueue, close, a shrink, a rebuild) and has just
	 * drained one (obj: the turnstile): the processes after it may still
	 * take and return through their caches */
	TS_HOOK_DRAINING,
};

typedef void (*ts_hook_fn)(enum ts_hook_point point, void *obj);
extern _Atomic(ts_hook_fn) ts_hook;

/* Fault injection (--enable-fault-injection): at every race window a
 * random yield or short spin, so the stress harness explores interleavings
 * that the scheduler rarely produces.  Nothing at all in other builds. */
#ifdef TS_FAULT_INJECTION
void ts_fault_point(void);
#define TS_FAULT() ts_fault_point()
#else
#define TS_FAULT() ((void)0)
#endif

/* Nothing slow under a queue lock: in fault-injection builds (the
 * sanitizer builds of the test suite) each thread counts the library locks
 * it holds, and every futex system call checks that it holds none, and so
 * do the notifier's other system calls (its eventfd write and read, the
 * timerfd's read and settime) and the allocations on slow paths (the
 * deadline heap, the ready stack), so the whole suite asserts it on every
 * path.  Nothing in other builds. */
#ifdef TS_FAULT_INJECTION
extern _Thread_local int ts_lib_locks_held;
void ts_lib_lock_held_violation(const char *what);
#define TS_LOCKS_HELD_ADD(n) (ts_lib_locks_held += (n))
#define TS_CHECK_NO_LOCK_HELD(what) \
	(ts_lib_locks_held ? ts_lib_lock_held_violation(what) : (void)0)
/* An invariant the code keeps by construction, checked where it is used
 * (fault-injection builds only, as above): aborts with @what. */
void ts_lib_invariant_violation(const char *what);
#define TS_CHECK_INVARIANT(cond, what) ((cond) ? (void)0 : ts_lib_invariant_violation(what))
#else
#define TS_LOCKS_HELD_ADD(n) ((void)0)
#define TS_CHECK_NO_LOCK_HELD(what) ((void)0)
#define TS_CHECK_INVARIANT(cond, what) ((void)0)
#endif

static inline void ts_hook_at(enum ts_hook_point point, void *obj)
{
	TS_FAULT();
	ts_hook_fn fn = atomic_load_explicit(&ts_hook, memory_order_relaxed);
	if (__builtin_expect(fn != NULL, 0))
		fn(point, obj);
}

#endif
