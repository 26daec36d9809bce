/* Private: the turnstile's state and its lock-free fast path, shared by
 * ts_turnstile_wait and ts_wait_turn (which inline it).
 *
 * State is one atomic word plus a spinlock-guarded skiplist of waiters:
 *
 *   word = available << 2 | CLOSED | WAITERS      (available is signed)
 *
 * INVARIANT (no barging): WAITERS is set exactly when the queue is
 * non-empty, and both change only under the lock.  Every operation that
 * raises `available` under the lock drains waiters while it is positive
 * (drain() in turnstile.c), so whenever the lock is free, WAITERS implies
 * available <= 0.  The lock-free fast paths act only on a word WITHOUT the
 * WAITERS bit, and do so by CAS on the whole word: a fast acquire can
 * therefore never take a pass while anyone is queued, and a fast release
 * can never add a pass that a queued waiter should have had — a concurrent
 * enqueue sets WAITERS and makes their CAS fail, sending them to the
 * locked path. */
#ifndef TS_LIB_TURNSTILE_IMPL_H
#define TS_LIB_TURNSTILE_IMPL_H

#include <stdatomic.h>

#include <turnstile/turnstile.h>

#include "skiplist.h"
#include "waiter.h"

#define WORD_WAITERS ((uint64_t)1)
#define WORD_CLOSED ((uint64_t)2)
#define WORD_UNIT ((uint64_t)4)

struct ts_turnstile {
	_Alignas(64) _Atomic uint64_t word; /* alone on its line: the fast path */
	_Alignas(64) _Atomic int lock;
	int64_t ceiling;              /* under lock */
	_Atomic int64_t waiting;      /* queue length, for snapshots */
	struct spin_policy spin;      /* does the head's spin pay here? */
	struct skiplist queue;        /* under lock */
};

static inline int64_t word_available(uint64_t w)
{
	return (int64_t)w >> 2; /* arithmetic shift: gcc and clang define it */
}

/* Take a free pass without the lock: only when nobody is queued, the
 * turnstile is open and @cancel has not fired.  false: take the slow path,
 * which also sorts out closed / cancelled precedence. */
static inline bool turnstile_take_fast(ts_turnstile *t, const ts_cancel *cancel,
				       ts_pass *pass)
{
	if (cancel_fired_now(cancel))
		return false;
	uint64_t w = atomic_load_explicit(&t->word, memory_order_relaxed);
	while (!(w & (WORD_WAITERS | WORD_CLOSED)) && word_available(w) > 0) {
		if (atomic_compare_exchange_weak_explicit(&t->word, &w, w - WORD_UNIT,
							  memory_order_acquire,
							  memory_order_relaxed)) {
			pass->private_turnstile = t;
			pass->private_waited_ns = 0;
			return true;
		}
	}
	return false;
}

/* Everything else: precedence checks, queueing, parking.  *pass must be
 * TS_PASS_NONE on entry. */
int turnstile_wait_slow(ts_turnstile *t, const ts_claim *claim, int64_t deadline_ns,
			ts_cancel *cancel, ts_pass *pass);

#endif
