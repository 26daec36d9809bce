/* SPDX-License-Identifier: MIT */
/* Parking one waiter on its own futex word: spin briefly, then sleep. */
#include "waiter.h"

#include <turnstile/common.h>

#include "hook.h"
#include "spinlock.h"

/* How long a waiter at the head of its queue spins before parking.  Waking
 * a parked thread on the other vCPU costs ~11 us here, a hand-off to a
 * spinning one ~0.2 us, so spinning up to about the cost of one wake-up
 * loses at most 2x against an oracle (the classic ski-rental bound).  Only
 * waiters flagged `spin` (the head of the queue when they joined, while the
 * queue's spin_policy says spinning pays) spin at all: on two cores, a
 * crowd of spinners would steal the core the holder needs to finish and
 * return its pass. */
#define SPIN_NS 10000
#define SPIN_PAUSES_PER_CLOCK_READ 64

static bool expired(int64_t deadline_ns, int64_t now)
{
	return deadline_ns != 0 && now >= deadline_ns;
}

/* Spin phase: returns the state reached, or a negative reason, or
 * WAITER_QUEUED when the budget ran out with nothing decided. */
static int spin(waiter *w, uint32_t wake_at, int64_t deadline_ns,
		const ts_cancel *c)
{
	int64_t now = ts_now_ns(), stop = now + SPIN_NS;

	for (;;) {
		for (int i = 0; i < SPIN_PAUSES_PER_CLOCK_READ; i++) {
			uint32_t s = atomic_load_explicit(w->word, memory_order_acquire);
			if (s >= wake_at)
				return (int)s;
			cpu_relax();
		}
		if (cancel_fired_now(c))
			return WAITER_CANCELED;
		now = ts_now_ns();
		if (expired(deadline_ns, now))
			return WAITER_TIMEDOUT;
		if (now >= stop)
			return WAITER_QUEUED;
	}
}

int ts_lib_waiter_park(waiter *w, uint32_t wake_at, int64_t deadline_ns,
		const ts_cancel *c)
{
	if (w->spin) {
		int r = spin(w, wake_at, deadline_ns, c);
		w->spun = r == WAITER_QUEUED ? -1 : r >= (int)wake_at ? 1 : 0;
		if (r != WAITER_QUEUED)
			return r;
	}
	for (;;) {
		uint32_t s = atomic_load_explicit(w->word, memory_order_acquire);
		if (s >= wake_at)
			return (int)s;
		/* QUEUED -> SLEEPING announces "wake me by futex".  A failed
		 * CAS means a grant or a nudge landed: look again. */
		if (s == WAITER_QUEUED &&
		    !atomic_compare_exchange_strong_explicit(
			    w->word, &s, WAITER_SLEEPING,
			    memory_order_seq_cst, memory_order_acquire))
			continue;
		/* Checked AFTER announcing sleep (both seq_cst): a firer sets
		 * its flag before it tries to nudge SLEEPING -> QUEUED, so
		 * either we see the flag here or its nudge sees SLEEPING and
		 * wakes us.  No fire is missed. */
		if (cancel_fired_now(c))
			return WAITER_CANCELED;
		if (deadline_ns != 0 && expired(deadline_ns, ts_now_ns()))
			return WAITER_TIMEDOUT;
		futex_wait_on(w->word, WAITER_SLEEPING, deadline_ns, w->shared);
		ts_hook_at(TS_HOOK_WOKEN, w->word);
	}
}
