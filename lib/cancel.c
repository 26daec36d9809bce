/* SPDX-License-Identifier: MIT */
/* Cancel tokens: a fired flag plus the list of waits parked on it.
 *
 * The flag goes 0 -> FIRING -> FIRED.  Waiters treat any non-zero value as
 * fired.  FIRING marks a ts_cancel_fire still touching the token: the
 * destroyer waits for FIRED, which is the firer's last write to the token
 * (then at most a futex_wake on its address), so a token may be destroyed
 * as soon as every wait using it has returned, even while the fire that
 * ended them is still running. */
#include <turnstile/cancel.h>

#include <assert.h>

#include "futex.h"
#include "hook.h"
#include "spinlock.h"
#include "waiter.h"

enum { CANCEL_UNFIRED = 0, CANCEL_FIRING = 1, CANCEL_FIRED = 2 };

TS_API void ts_cancel_init(ts_cancel *c)
{
	if (!c)
		return;
	atomic_init(&c->private_fired, CANCEL_UNFIRED);
	atomic_init(&c->private_lock, SPINLOCK_FREE);
	c->private_waiters = NULL;
}

/* Nudge up to one wake batch of registered waiters that are asleep, under
 * the token's lock; the wakes are issued after unlocking.  The list is
 * guarded by that lock, and a waiter unregisters (under it) before its
 * node dies, so every node touched here is alive.  The nudge moves
 * SLEEPING back to QUEUED: it never overwrites a grant, and the woken
 * waiter re-checks the flag right after announcing sleep again, so it
 * returns instead of sleeping; a later pass may nudge it once more in that
 * instant (a spurious wake, harmless).  Each waiter goes back to SLEEPING
 * at most once after the fire, so the passes end.
 * Returns false once a pass found nobody asleep (and no event-loop node
 * still queued). */
static bool nudge_batch(ts_cancel *c)
{
	struct wakeups wk;

	wakeups_init(&wk);
	spin_lock(&c->private_lock);
	/* room for two entries: an async node's notifier and its queue lock */
	for (waiter *w = c->private_waiters; w && wk.n <= WAKE_BATCH - 2; w = w->cancel_next) {
		if (w->ops) {
			/* A waiter told by its own operation (an event-loop
			 * node): its fire ends the wait under its queue's lock
			 * (lock order: token, then queue), unless a grant got
			 * there first.  It stays on this list until its owner
			 * unwatches it (under this lock, before its callback
			 * or cancel ends), so a final state seen here stays
			 * final: no need to lock its queue again. */
			if (atomic_load_explicit(&w->state, memory_order_acquire) < WAITER_FINAL)
				w->ops->fire(w, &wk);
			continue;
		}
		uint32_t s = WAITER_SLEEPING;
		if (atomic_compare_exchange_strong_explicit(
			    w->word, &s, WAITER_QUEUED, memory_order_seq_cst,
			    memory_order_relaxed))
			wakeups_add_waiter(&wk, w);
	}
	spin_unlock(&c->private_lock);
	bool more = wk.n > WAKE_BATCH - 2;
	wakeups_flush(&wk);
	return more;
}

TS_API void ts_cancel_fire(ts_cancel *c)
{
	uint32_t unfired = CANCEL_UNFIRED;

	if (!c || !atomic_compare_exchange_strong_explicit(&c->private_fired, &unfired,
							   CANCEL_FIRING, memory_order_seq_cst,
							   memory_order_relaxed))
		return;
	ts_hook_at(TS_HOOK_FIRING, c); /* window: fired, waiters not yet nudged */
	while (nudge_batch(c))
		;
	TS_FAULT(); /* window: every waiter nudged, destroyer still held off */
	atomic_store_explicit(&c->private_fired, CANCEL_FIRED, memory_order_release);
	futex_wake(&c->private_fired, 1); /* a destroyer waiting for FIRED */
}

TS_API bool ts_cancel_fired(const ts_cancel *c)
{
	return cancel_fired_now(c);
}

/* Waits while a fire is still touching the token (FIRING). */
TS_API void ts_cancel_destroy(ts_cancel *c)
{
	if (!c)
		return;
	while (atomic_load_explicit(&c->private_fired, memory_order_acquire) == CANCEL_FIRING)
		futex_wait(&c->private_fired, CANCEL_FIRING, 0);
	assert(!c->private_waiters);
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
