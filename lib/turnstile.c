/* SPDX-License-Identifier: MIT */
/* Turnstile: bounded admission in (band, since, seq, arrival) order.
 * The state word and its no-barging invariant: include/turnstile/fastpath.h. */
#include <turnstile/turnstile.h>

#include <errno.h>
#include <stdlib.h>

#include "boottime.h"
#include "busy.h"
#include "hook.h"
#include "probe.h"
#include "skiplist.h"
#include "spinlock.h"
#include "turnstile_impl.h"
#include "waiter.h"

static inline uint64_t units(int64_t n)
{
	return (uint64_t)n * WORD_UNIT; /* modular: negative deltas wrap right */
}

TS_API ts_turnstile *ts_turnstile_new(int64_t concurrency)
{
	if (concurrency < 0 || concurrency > TS_CONCURRENCY_MAX) {
		errno = EINVAL;
		return NULL;
	}
	ts_turnstile *t = aligned_alloc(64, sizeof(*t));
	if (!t) {
		errno = ENOMEM;
		return NULL;
	}
	atomic_init(&t->word, units(concurrency));
	atomic_init(&t->lock, 0);
	atomic_init(&t->waiting, 0);
	atomic_init(&t->busy, 0);
	atomic_init(&t->spin.score, 0);
	atomic_init(&t->spin.probes, 0);
	atomic_init(&t->ceiling_units, (int64_t)units(concurrency));
	ts_lib_skip_init(&t->queue);
	t->shared = NULL;
	t->guard_until = 0;
	return t;
}

/* LIFETIME (free after the last return, as POSIX semaphores): every call
 * that releases waiters, or makes passes visible, does so under the lock,
 * and its last touch of t is its unlock — except a close or grow that
 * unlocks between wake batches, which marks t busy across the gaps.  So
 * freeing first passes through the lock (any such call has unlocked) and
 * then waits for busy.  The model (tests/model/turnstile.pml) found that
 * nothing weaker is enough: a slow return, resize or close finding nobody
 * queued makes its effect visible to lock-free fast paths before its
 * unlock. */
TS_API void ts_turnstile_free(ts_turnstile *t)
{
	if (!t)
		return;
	if (t->shared) {
		ts_lib_shared_free(t);
		return;
	}
	spin_lock(&t->lock);
	spin_unlock(&t->lock);
	busy_wait_idle(&t->busy);
	free(t);
}

/* FRESHNESS GUARD (ts_private_turnstile_guard; libturnstile-fleet's): a
 * turnstile that holds a share of a wider ceiling only until a deadline
 * admits nobody at or after it, whichever thread runs first when a paused
 * process or frozen VM resumes.  No thread can be relied on to notice the
 * pause before the others, so the grant itself reads the clock:
 *  - while guarded, WAITERS stays set, so both inlined fast paths fail to
 *    the lock (every change of the word is then under it), and the queue
 *    itself says whether anybody waits;
 *  - a take (enqueue) and a hand-out (drain) read the clock under the lock
 *    and grant nothing once the deadline has passed: the caller queues
 *    (no grant is DECIDED at or after it: a drain reads the clock once per
 *    wake batch, a critical section of a few hundred nanoseconds);
 *  - moving the deadline drains under the lock, so a caller that queued
 *    while stale (under the lock, before the move) is served by the move,
 *    and one that comes after it reads the new deadline: none is left
 *    queued beside a free pass.
 * An unguarded turnstile reads no clock: guard_until is 0.  Model:
 * tests/model/turnstile.pml with -DGUARD (four mutations caught). */
/* Lock held.  Whether a free pass may go to anybody now. */
static bool admitting(const ts_turnstile *t)
{
	return !t->guard_until || boottime_ns() < t->guard_until;
}

/* Lock held.  WAITERS follows the queue, unless guarded (always set). */
static void waiters_follow_queue(ts_turnstile *t)
{
	if (!skip_first(&t->queue) && !t->guard_until)
		atomic_fetch_and_explicit(&t->word, ~WORD_WAITERS, memory_order_acq_rel);
}

/* Hand free passes to the head waiters while any are free, at most one
 * wake batch.  Lock held.  Each grant unlinks the waiter and publishes
 * GRANTED with one exchange (waiter.h); the pass moves from `available` to
 * the waiter in the same critical section, so it is never both free and
 * held, nor lost.  A head whose deadline has passed is unlinked with
 * EXPIRED instead (its wait ends in ETIMEDOUT, as its own timeout would
 * have ended it) and the pass goes on to the next: no wait is granted
 * after its deadline, whoever notices it first.  Returns true when the batch filled with a pass still
 * free and a waiter still queued: the caller unlocks, wakes, and drains
 * again (unlock_and_wake), with the turnstile marked busy meanwhile.
 *
 * HAPPENS-BEFORE: every RMW of the word here and in the other locked paths
 * is acq_rel.  A pass returned on the fast path was released into the word;
 * whoever later grants it from under the lock has acquired the word first,
 * and the grant's exchange hands that on to the waiter. */
static bool drain(ts_turnstile *t, struct wakeups *wk)
{
	struct skip_node *n;
	int open = -1; /* the guard's verdict, read once per batch when a grant is due */

	while (word_available(atomic_load_explicit(&t->word, memory_order_acquire)) > 0 &&
	       (n = skip_first(&t->queue))) {
		if (open < 0)
			open = admitting(t);
		if (!open)
			break;
		if (wakeups_full(wk))
			return true;
		struct turn_waiter *tw = (struct turn_waiter *)n;
		ts_lib_skip_remove(&t->queue, n);
		atomic_fetch_sub_explicit(&t->waiting, 1, memory_order_relaxed);
		if (waiter_expired(tw->deadline_ns)) {
			waiter_grant(&tw->w, WAITER_EXPIRED, wk);
			continue;
		}
		atomic_fetch_sub_explicit(&t->word, WORD_UNIT, memory_order_acq_rel);
		waiter_grant(&tw->w, WAITER_GRANTED, wk);
	}
	waiters_follow_queue(t);
	return false;
}

/* Finish a critical section that drained: unlock, wake, and go on
 * draining batch by batch while drain() says more are owed, with t marked
 * busy across the gaps (busy.h).  Lock held on entry. */
static void unlock_and_wake(ts_turnstile *t, struct wakeups *wk, bool more)
{
	bool gaps = more;

	if (gaps)
		busy_enter(&t->busy);
	for (;;) {
		ts_hook_at(TS_HOOK_UNLOCKING, t);
		spin_unlock(&t->lock); /* without gaps, the last touch of t */
		wakeups_flush(wk);
		if (!more)
			break;
		wakeups_init(wk);
		spin_lock(&t->lock);
		more = !(atomic_load_explicit(&t->word, memory_order_relaxed) & WORD_CLOSED) &&
		       drain(t, wk);
	}
	if (gaps)
		busy_leave(&t->busy);
}

/* Queue @tw, or take a pass if one became free.  Lock NOT held.
 * Returns 0 (pass taken), ESHUTDOWN, ETIMEDOUT, or EINPROGRESS (queued). */
int ts_lib_turnstile_enqueue(ts_turnstile *t, struct turn_waiter *tw, int64_t now,
			     int64_t deadline_ns)
{
	spin_lock(&t->lock);
	uint64_t w = atomic_load_explicit(&t->word, memory_order_relaxed);
	for (;;) {
		if (w & WORD_CLOSED) {
			spin_unlock(&t->lock);
			return ESHUTDOWN;
		}
		if (!(w & WORD_WAITERS) && word_available(w) > 0) {
			if (atomic_compare_exchange_weak_explicit(
				    &t->word, &w, w - WORD_UNIT,
				    memory_order_acquire, memory_order_relaxed)) {
				spin_unlock(&t->lock);
				return 0;
			}
			continue;
		}
		/* guarded: WAITERS is always set; the queue says who waits */
		if (t->guard_until && !skip_first(&t->queue) && word_available(w) > 0 &&
		    admitting(t)) {
			atomic_fetch_sub_explicit(&t->word, WORD_UNIT, memory_order_acq_rel);
			spin_unlock(&t->lock);
			return 0;
		}
		if (deadline_ns != 0 && now >= deadline_ns) {
			spin_unlock(&t->lock);
			return ETIMEDOUT;
		}
		/* acq_rel: acquires a fast return's release (see drain) */
		if ((w & WORD_WAITERS) ||
		    atomic_compare_exchange_weak_explicit(
			    &t->word, &w, w | WORD_WAITERS, memory_order_acq_rel,
			    memory_order_relaxed))
			break;
	}
	/* Only the head at arrival spins (it is next, the others sleep), and
	 * only while spinning has been paying on this turnstile. */
	tw->deadline_ns = deadline_ns;
	tw->w.spin = ts_lib_skip_insert(&t->queue, &tw->link) && spin_policy_allows(&t->spin);
	atomic_fetch_add_explicit(&t->waiting, 1, memory_order_relaxed);
	spin_unlock(&t->lock);
	return EINPROGRESS;
}

/* Take a waiter that is still queued out of the queue.  Lock held.  It
 * never held a pass, so none is owed: WAITERS only follows the queue. */
static void unlink_waiter(ts_turnstile *t, struct turn_waiter *tw)
{
	ts_lib_skip_remove(&t->queue, &tw->link);
	atomic_fetch_sub_explicit(&t->waiting, 1, memory_order_relaxed);
	waiters_follow_queue(t);
}

/* The waiter gave up (timeout or cancel).  Under the lock, its own state
 * says who won: a final state means a grant or a close unlinked it first —
 * it must not be unlinked twice, and a grant is kept (0).  Otherwise it is
 * still linked and unlinks itself; it never held a pass, so none is lost. */
static int leave(ts_turnstile *t, struct turn_waiter *tw, int reason)
{
	ts_hook_at(TS_HOOK_LEAVING, t);
	spin_lock(&t->lock);
	uint32_t s = atomic_load_explicit(&tw->w.state, memory_order_acquire);
	if (s < WAITER_FINAL)
		unlink_waiter(t, tw);
	spin_unlock(&t->lock);
	return s >= WAITER_FINAL ? (int)s : reason;
}

static int wait_queued(ts_turnstile *t, const ts_claim *claim, int64_t start,
		       int64_t deadline_ns, ts_cancel *cancel, ts_pass *pass);

/* The private slow path, out of line so that the dispatcher below stays a
 * frameless pair of tail calls (a shared handle's fast path goes through
 * it on every call). */
__attribute__((noinline, cold)) static int wait_slow(ts_turnstile *t, const ts_claim *claim,
						     int64_t deadline_ns, ts_cancel *cancel,
						     ts_pass *pass)
{
	if (atomic_load_explicit(&t->word, memory_order_relaxed) & WORD_CLOSED)
		return ESHUTDOWN;
	if (cancel_fired_now(cancel))
		return ECANCELED;
	/* the clock only when a deadline needs it now; a wait that queues
	 * reads it then (a guarded turnstile's take reads its own clock) */
	int64_t start = deadline_ns ? ts_now_ns() : 0;
	TS_PROBE3(wait__start, t, claim->priority, claim->since_ns);
	int r = wait_queued(t, claim, start, deadline_ns, cancel, pass);
	if (r == 0)
		TS_PROBE3(wait__done, t, pass->private_waited_ns, claim->priority);
	else
		TS_PROBE2(wait__fail, t, r);
	return r;
}

/* Out of line and cold, so the fast path stays a leaf with no frame. */
__attribute__((noinline)) TS_API int ts_private_wait_slow(ts_turnstile *t, const ts_claim *claim,
							   int64_t deadline_ns, ts_cancel *cancel,
							   ts_pass *pass)
{
	if (t->shared)
		return ts_lib_shared_wait(t, claim, deadline_ns, cancel, pass);
	return wait_slow(t, claim, deadline_ns, cancel, pass);
}

/* Queue and park (the part of the slow path that can wait). */
static int wait_queued(ts_turnstile *t, const ts_claim *claim, int64_t start,
		       int64_t deadline_ns, ts_cancel *cancel, ts_pass *pass)
{
	struct turn_waiter tw;

	tw.link.key = *claim;
	waiter_init(&tw.w, NULL);
	int r = ts_lib_turnstile_enqueue(t, &tw, start, deadline_ns);
	if (r == 0) { /* taken without queueing: no wait, as on the fast path */
		pass->private_turnstile = t;
		pass->private_waited_ns = 0;
	}
	if (r != EINPROGRESS)
		return r;
	if (!start)
		start = ts_now_ns();

	TS_FAULT(); /* window: queued, not yet parked (nor watching cancel) */
	if (cancel)
		ts_lib_cancel_watch(cancel, &tw.w);
	int outcome = ts_lib_waiter_park(&tw.w, WAITER_FINAL, deadline_ns, cancel);
	spin_policy_record(&t->spin, &tw.w);
	if (cancel)
		ts_lib_cancel_unwatch(cancel, &tw.w);
	if (outcome < 0)
		outcome = leave(t, &tw, outcome);

	switch (outcome) {
	case WAITER_GRANTED:
		pass->private_turnstile = t;
		pass->private_waited_ns = ts_now_ns() - start;
		return 0;
	case WAITER_CLOSED:
		return ESHUTDOWN;
	case WAITER_CANCELED:
		return ECANCELED;
	default:
		return ETIMEDOUT;
	}
}

/* --- waiters told by their own operation (event-loop nodes) ----------- */

/* The owner's or a token's side of the grant race: under the lock, whoever
 * comes first decides (OWNERSHIP in async.h).  A token's fire (@wk set)
 * holds the token's lock: see NESTING in spinlock.h. */
uint32_t ts_lib_turnstile_withdraw(ts_turnstile *t, struct turn_waiter *tw, uint32_t outcome,
				   struct wakeups *wk)
{
	waiter *w = &tw->w;

	if (wk)
		spin_lock_nested(&t->lock); /* under the token's lock */
	else
		spin_lock(&t->lock);
	uint32_t s = atomic_load_explicit(&w->state, memory_order_acquire);
	if (s < WAITER_FINAL) {
		unlink_waiter(t, tw);
		if (wk)
			waiter_grant(w, outcome, wk);
		else
			atomic_store_explicit(&w->state, outcome, memory_order_relaxed);
	}
	if (wk)
		wakeups_add(wk, spin_unlock_nested(&t->lock));
	else
		spin_unlock(&t->lock);
	return s;
}

TS_API int ts_turnstile_wait(ts_turnstile *t, const ts_claim *claim,
			     int64_t deadline_ns, ts_cancel *cancel, ts_pass *pass)
{
	TS_PRIVATE_WAIT_BODY
}

__attribute__((noinline, cold)) static void return_slow(ts_turnstile *t)
{
	struct wakeups wk;

	TS_PROBE1(pass__return, t);
	ts_hook_at(TS_HOOK_RETURNING, t);
	wakeups_init(&wk);
	spin_lock(&t->lock);
	/* A return with every pass already free is a second copy of a pass
	 * returned before: counting it would raise the ceiling.  Ignore it. */
	if (word_available(atomic_load_explicit(&t->word, memory_order_relaxed)) >=
	    turnstile_ceiling(t)) {
		spin_unlock(&t->lock);
		return;
	}
	uint64_t w = atomic_fetch_add_explicit(&t->word, WORD_UNIT, memory_order_acq_rel);
	/* Closed, perhaps by a close between its wake batches: whoever is
	 * still queued gets ESHUTDOWN from it, not this pass. */
	unlock_and_wake(t, &wk, !(w & WORD_CLOSED) && drain(t, &wk));
}

/* A dispatcher of tail calls, as ts_private_wait_slow. */
__attribute__((noinline)) TS_API void ts_private_return_slow(ts_turnstile *t)
{
	if (t->shared)
		ts_lib_shared_return(t);
	else
		return_slow(t);
}

TS_API void ts_pass_return(ts_pass *p)
{
	TS_PRIVATE_RETURN_BODY
}

TS_API bool ts_pass_issued(const ts_pass *p)
{
	return p && p->private_turnstile;
}

TS_API int64_t ts_pass_waited_ns(const ts_pass *p)
{
	return p && p->private_turnstile ? p->private_waited_ns : 0;
}

TS_API int ts_turnstile_resize(ts_turnstile *t, int64_t concurrency)
{
	struct wakeups wk;

	if (!t || concurrency < 0 || concurrency > TS_CONCURRENCY_MAX)
		return EINVAL;
	if (t->shared)
		return ts_lib_shared_resize(t, concurrency);
	wakeups_init(&wk);
	spin_lock(&t->lock);
	/* Move by the delta: passes held now stay held and are not reissued. */
	int64_t delta = concurrency - turnstile_ceiling(t);
	TS_PROBE3(resize, t, turnstile_ceiling(t), concurrency);
	atomic_store_explicit(&t->ceiling_units, (int64_t)units(concurrency), memory_order_relaxed);
	uint64_t w = atomic_fetch_add_explicit(&t->word, units(delta), memory_order_acq_rel);
	unlock_and_wake(t, &wk, !(w & WORD_CLOSED) && drain(t, &wk));
	return 0;
}

/* The guard's only writer (FRESHNESS GUARD above): set, move or (0) lift
 * it, then hand out whatever it now lets through. */
TS_API int ts_private_turnstile_guard(ts_turnstile *t, int64_t until_ns)
{
	struct wakeups wk;

	if (!t || until_ns < 0)
		return EINVAL;
	if (t->shared)
		return ENOTSUP;
	wakeups_init(&wk);
	spin_lock(&t->lock);
	t->guard_until = until_ns;
	if (until_ns)
		atomic_fetch_or_explicit(&t->word, WORD_WAITERS, memory_order_acq_rel);
	else
		waiters_follow_queue(t);
	uint64_t w = atomic_load_explicit(&t->word, memory_order_relaxed);
	unlock_and_wake(t, &wk, !(w & WORD_CLOSED) && drain(t, &wk));
	return 0;
}

/* Set CLOSED and release every waiter with WAITER_CLOSED, one wake batch
 * per critical section (waiter.h).  Each is unlinked here, so a waiter that
 * timed out concurrently finds a final state in leave() and does not
 * unlink itself a second time.  Nobody queues once CLOSED is set, so the
 * loop ends; each round runs only while a waiter is still queued. */
TS_API void ts_turnstile_close(ts_turnstile *t)
{
	struct wakeups wk;
	struct skip_node *n;
	bool more;
	int gaps = 0;

	if (!t)
		return;
	if (t->shared) {
		ts_lib_shared_close(t);
		return;
	}
	TS_PROBE1(close, t);
	do {
		wakeups_init(&wk);
		spin_lock(&t->lock);
		atomic_fetch_or_explicit(&t->word, WORD_CLOSED, memory_order_acq_rel);
		while ((n = skip_first(&t->queue)) && !wakeups_full(&wk)) {
			ts_lib_skip_remove(&t->queue, n);
			atomic_fetch_sub_explicit(&t->waiting, 1, memory_order_relaxed);
			waiter_grant(&((struct turn_waiter *)n)->w, WAITER_CLOSED, &wk);
		}
		more = n != NULL;
		if (!more)
			waiters_follow_queue(t);
		else if (!gaps++)
			busy_enter(&t->busy);
		ts_hook_at(TS_HOOK_UNLOCKING, t);
		spin_unlock(&t->lock);
		wakeups_flush(&wk);
	} while (more);
	if (gaps)
		busy_leave(&t->busy);
}

TS_API bool ts_turnstile_closed(const ts_turnstile *t)
{
	if (t && t->shared)
		return ts_lib_shared_closed(t);
	return t && (atomic_load_explicit(&t->word, memory_order_acquire) & WORD_CLOSED);
}

TS_API int ts_turnstile_waiting_by_band(const ts_turnstile *t, int *bands, int64_t *waiting,
					int max)
{
	if (!t || max < 0 || (max > 0 && (!bands || !waiting)))
		return -EINVAL;
	if (t->shared)
		return ts_lib_shared_waiting_by_band(t, bands, waiting, max);
	ts_turnstile *m = (ts_turnstile *)t; /* for its lock: nothing changes */
	struct band_tally bt = { bands, waiting, max, 0, 0 };
	spin_lock(&m->lock);
	for (const struct skip_node *n = skip_first(&m->queue); n; n = n->next[0])
		band_tally_add(&bt, n->key.priority); /* the skiplist is in band order */
	spin_unlock(&m->lock);
	return bt.seen;
}

TS_API int64_t ts_turnstile_ceiling(const ts_turnstile *t)
{
	if (!t)
		return 0;
	return t->shared ? ts_lib_shared_ceiling(t) : turnstile_ceiling(t);
}

TS_API void ts_turnstile_snapshot(const ts_turnstile *t, int64_t *available,
				  int64_t *waiting)
{
	if (t && t->shared) {
		ts_lib_shared_snapshot(t, available, waiting);
		return;
	}
	if (available)
		*available = t ? word_available(atomic_load_explicit(
					 &t->word, memory_order_relaxed))
			       : 0;
	if (waiting)
		*waiting = t ? atomic_load_explicit(&t->waiting, memory_order_relaxed) : 0;
}
