/* SPDX-License-Identifier: MIT */
/* Cancel tokens: a fired flag plus the list of waits parked on it. */
#include <turnstile/cancel.h>

#include <assert.h>

#include "hook.h"
#include "spinlock.h"
#include "waiter.h"

TS_API void ts_cancel_init(ts_cancel *c)
{
	if (!c)
		return;
	atomic_init(&c->private_fired, 0);
	atomic_init(&c->private_lock, 0);
	c->private_waiters = NULL;
}

/* Nudge every registered waiter that is asleep.  The list is guarded by the
 * token's lock, and a waiter unregisters (under that lock) before its node
 * dies, so every node touched here is alive.  The nudge moves SLEEPING back
 * to QUEUED: it never overwrites a grant, and the woken waiter re-checks
 * the flag before sleeping again. */
TS_API void ts_cancel_fire(ts_cancel *c)
{
	if (!c)
		return;
	if (atomic_exchange_explicit(&c->private_fired, 1, memory_order_seq_cst))
		return;
	TS_FAULT(); /* window: fired, waiters not yet nudged */
	spin_lock(&c->private_lock);
	for (waiter *w = c->private_waiters; w; w = w->cancel_next) {
		uint32_t s = WAITER_SLEEPING;
		if (atomic_compare_exchange_strong_explicit(
			    &w->state, &s, WAITER_QUEUED, memory_order_seq_cst,
			    memory_order_relaxed))
			futex_wake(&w->state, 1);
	}
	spin_unlock(&c->private_lock);
}

TS_API bool ts_cancel_fired(const ts_cancel *c)
{
	return cancel_fired_now(c);
}

TS_API void ts_cancel_destroy(ts_cancel *c)
{
	assert(!c || !c->private_waiters);
	(void)c;
}

void ts_lib_cancel_watch(ts_cancel *c, waiter *w)
{
	spin_lock(&c->private_lock);
	w->cancel_prev = NULL;
	w->cancel_next = c->private_waiters;
	if (w->cancel_next)
		w->cancel_next->cancel_prev = w;
	c->private_waiters = w;
	spin_unlock(&c->private_lock);
}

void ts_lib_cancel_unwatch(ts_cancel *c, waiter *w)
{
	spin_lock(&c->private_lock);
	if (w->cancel_prev)
		w->cancel_prev->cancel_next = w->cancel_next;
	else
		c->private_waiters = w->cancel_next;
	if (w->cancel_next)
		w->cancel_next->cancel_prev = w->cancel_prev;
	spin_unlock(&c->private_lock);
}
