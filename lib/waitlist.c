/* SPDX-License-Identifier: MIT */
/* Waitlist: FIFO waiters, LIFO ready stack, lazy creation under a cap.
 *
 * One lock guards everything below.  Waiters are nodes on their own
 * stacks (struct taker), parked on their own futex word (waiter.h).  A
 * taker is IDLE while it waits without a creation slot, and LOADING from
 * the moment it gets one until its load returns.
 *
 * INVARIANTS, whenever the lock is free:
 *  - no item is ever handed to a loading taker: it could not use it until
 *    its load returns.  A returned item goes to the oldest LIVE idle taker
 *    (oldest_live: idle, its deadline not passed), and onto the ready
 *    stack only if none waits; so a non-empty ready stack means every
 *    queued taker is loading or past its deadline.
 *  - NEVER AFTER THE DEADLINE: an idle taker whose deadline has passed is
 *    handed nothing, neither an item nor a slot, even while it is still
 *    queued: it is passed over and left to leave by itself (a thread's own
 *    futex sleep ends at that deadline, a loop's timer fires at it), so
 *    passing it over takes no wake and changes no link.  The clock is read
 *    only when a taker with a deadline is looked at.
 *  - a queued live idle taker waits only while every slot is in use: a
 *    slot freed by a failed load or a discard goes at once to the oldest
 *    live idle taker (pass_slot).
 *  - so every loader is queued ahead of every live idle taker: a taker
 *    joins with a slot only when one is free, and then nobody live and
 *    idle waits; a slot passed later goes to the first live idle taker.  A
 *    loader whose load returned is therefore the oldest live idle taker,
 *    and keeps its item.
 *  - loads never need the ready stack (by the above), only put pushes, and
 *    it grows the stack outside the lock: nothing under the lock allocates
 *    or sleeps.
 *  - KEPT PLACES: room >= n_ready + kept.  An event-loop taker keeps one
 *    place on the ready stack from the moment it queues until it leaves
 *    without an item or its item is dispatched, so that ts_async_cancel of
 *    a take that got an item but was not dispatched yet hands the item back
 *    without allocating, and cannot fail.  kept rises under the lock (the
 *    take makes room first, outside it); it falls under the lock, or in the
 *    dispatch that delivers the item, without it: a smaller count only
 *    frees room, and every push reads it under the lock.
 * HAND-OVER: an item goes to a taker only under the lock, by writing it
 * into the node and publishing GRANTED with one exchange (waiter_grant), the
 * node having been unlinked first.  A taker that times out or is cancelled
 * takes the lock and reads its own state: GRANTED means the item reached it
 * first and it returns it (0); otherwise it unlinks itself, so no later put
 * can pick it.  Either way the item has exactly one owner.
 * LIFETIME (free after the last return, as POSIX semaphores): every call
 * that hands out an item, a slot or a close does so under the lock and its
 * last touch of the pool is its unlock (a close waking in several batches
 * marks the pool busy across the gaps); ts_waitlist_free passes through the
 * lock and waits for busy, so it can never overtake such a call. */
#include <turnstile/waitlist.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "busy.h"
#include "hook.h"
#include "probe.h"
#include "spinlock.h"
#include "waiter.h"
#include "waitlist_impl.h"

struct ts_waitlist {
	_Atomic uint32_t lock;
	_Atomic uint32_t busy; /* a close between unlocks (busy.h) */
	bool closed;
	size_t max_items, max_waiters;
	size_t created; /* creation slots in use */
	size_t waiting; /* queue length */
	struct taker *head, *tail;
	struct spin_policy spin; /* does the head's spin pay here? */
	void **ready;
	size_t n_ready, room;
	_Atomic size_t kept; /* KEPT PLACES */
	ts_waitlist_counters counters;
};

TS_API ts_waitlist *ts_waitlist_new(size_t max_items, size_t max_waiters)
{
	ts_waitlist *w = calloc(1, sizeof(*w));
	if (!w) {
		errno = ENOMEM;
		return NULL;
	}
	w->max_items = max_items;
	w->max_waiters = max_waiters;
	return w;
}

TS_API void ts_waitlist_free(ts_waitlist *w)
{
	if (!w)
		return;
	spin_lock(&w->lock); /* see LIFETIME */
	spin_unlock(&w->lock);
	busy_wait_idle(&w->busy);
	TS_CHECK_INVARIANT(atomic_load(&w->kept) == 0, "KEPT PLACES: a place outlived its take");
	free(w->ready);
	free(w);
}

/* Make room for @need ready items.  Called WITHOUT the lock: the
 * allocation happens outside it and only the copy inside.  false: out of
 * memory (nothing changed). */
static bool grow_ready(ts_waitlist *w, size_t need)
{
	size_t room = need < 8 ? 8 : need * 2;
	TS_CHECK_NO_LOCK_HELD("the ready stack's malloc");
	void **fresh = malloc(room * sizeof(*fresh));
	if (!fresh)
		return false;
	spin_lock(&w->lock);
	if (w->room < room) {
		if (w->n_ready) /* w->ready is NULL before the first growth */
			memcpy(fresh, w->ready, w->n_ready * sizeof(*fresh));
		void **old = w->ready;
		w->ready = fresh;
		w->room = room;
		fresh = old;
	}
	spin_unlock(&w->lock);
	free(fresh); /* the old stack, or ours if another put grew it first */
	return true;
}

static void link_tail(ts_waitlist *w, struct taker *n)
{
	n->next = NULL;
	n->prev = w->tail;
	if (w->tail)
		w->tail->next = n;
	else
		w->head = n;
	w->tail = n;
	w->waiting++;
}

static void unlink_taker(ts_waitlist *w, struct taker *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		w->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		w->tail = n->prev;
	w->waiting--;
}

/* The oldest queued taker that is not loading, or NULL.  Lock held.  It
 * walks past the loaders at the front: at most one per creation slot. */
static struct taker *oldest_idle(const ts_waitlist *w)
{
	struct taker *n = w->head;
	while (n && n->loading)
		n = n->next;
	return n;
}

/* The oldest idle taker that may still be handed something
 * (NEVER AFTER THE DEADLINE), or NULL.  Lock held. */
static struct taker *oldest_live(const ts_waitlist *w)
{
	int64_t now = 0;
	for (struct taker *n = oldest_idle(w); n; n = n->next) {
		if (n->loading)
			continue;
		if (!n->deadline_ns)
			return n;
		if (!now)
			now = ts_now_ns();
		if (now < n->deadline_ns)
			return n;
	}
	return NULL;
}

static bool slot_free(const ts_waitlist *w)
{
	return w->max_items == 0 || w->created < w->max_items;
}

/* Room on the ready stack for one more item besides the kept places.
 * Lock held. */
static bool room_for_one(ts_waitlist *w)
{
	return w->n_ready + atomic_load_explicit(&w->kept, memory_order_relaxed) < w->room;
}

/* An event-loop taker leaves without an item, or its item was delivered:
 * its place is free (KEPT PLACES). */
static void unkeep(ts_waitlist *w)
{
	atomic_fetch_sub_explicit(&w->kept, 1, memory_order_relaxed);
}

void ts_lib_waitlist_delivered(ts_waitlist *w)
{
	unkeep(w);
}

/* A slot was freed: hand it to the oldest idle taker.  A blocking one
 * wakes and loads; it stays linked: once its load returns it competes for
 * the item at its place in the queue.  An async one leaves the queue with
 * the slot (TS_CREATE): its loop makes the item and owns it.  Lock held. */
static void pass_slot(ts_waitlist *w, struct wakeups *wk)
{
	if (w->closed || !slot_free(w))
		return;
	struct taker *n = oldest_live(w);
	if (!n)
		return;
	w->created++;
	if (n->w.ops && n->w.ops->loop) {
		unlink_taker(w, n);
		unkeep(w);
		waiter_grant(&n->w, WAITER_CREATE, wk);
		return;
	}
	n->loading = true;
	waiter_grant(&n->w, WAITER_LOAD, wk);
}

/* @n holds a slot it will not use (closed out, or gave up before loading):
 * free it for the oldest idle taker.  Lock held. */
static void drop_slot(ts_waitlist *w, struct taker *n, struct wakeups *wk)
{
	n->loading = false;
	w->created--;
	pass_slot(w, wk);
}

/* Unlink @n and hand it @item.  Lock held; @n is idle (an async one keeps
 * its place until the item is dispatched). */
static void give(ts_waitlist *w, struct taker *n, void *item, struct wakeups *wk)
{
	unlink_taker(w, n);
	n->item = item;
	waiter_grant(&n->w, WAITER_GRANTED, wk);
}

/* The loader's side, after its load returned: the take's result.  Its
 * state read under the lock is LOAD (still linked) or CLOSED (close
 * unlinked it): a loader is never handed an item.  Nobody idle is queued
 * ahead of it (INVARIANTS), so a made item is its own. */
static int finish_load(ts_waitlist *w, struct taker *n, int err, void *made, void **out)
{
	struct wakeups wk;
	int r;

	ts_hook_at(TS_HOOK_LOADED, w);
	wakeups_init(&wk);
	spin_lock(&w->lock);
	n->loading = false;
	bool closed_out = atomic_load_explicit(&n->w.state, memory_order_acquire) == WAITER_CLOSED;
	if (err) {
		w->counters.load_failures++;
		w->counters.last_load_error = err;
		w->created--;
		if (!closed_out)
			unlink_taker(w, n);
		pass_slot(w, &wk);
		r = err;
	} else {
		w->counters.loads++;
		if (!closed_out)
			unlink_taker(w, n);
		*out = made;
		r = 0;
	}
	spin_unlock(&w->lock);
	wakeups_flush(&wk);
	return r;
}

static int run_load(ts_waitlist *w, struct taker *n, ts_load_fn load, void *arg,
		    void **out)
{
	void *made = NULL;
	int err = load ? load(arg, &made) : 0;
	if (err < 0)
		err = EIO; /* a load must return a positive errno; keep it an error */
	TS_PROBE3(create, w, made, err);
	return finish_load(w, n, err, made, out);
}

static void count_refusal(ts_waitlist *w, int r)
{
	if (r == ETIMEDOUT)
		w->counters.timeouts++;
	else if (r == ECANCELED)
		w->counters.cancels++;
	else if (r == EAGAIN)
		w->counters.rejected++;
}

/* The taker gave up (timeout or cancel): see HAND-OVER above. */
static int leave(ts_waitlist *w, struct taker *n, int reason, void **out)
{
	struct wakeups wk;
	int r = reason;

	ts_hook_at(TS_HOOK_LEAVING, w);
	wakeups_init(&wk);
	spin_lock(&w->lock);
	uint32_t s = atomic_load_explicit(&n->w.state, memory_order_acquire);
	if (s == WAITER_GRANTED) {
		*out = n->item;
		r = 0;
	} else if (s == WAITER_CLOSED) {
		r = ESHUTDOWN;
	} else {
		unlink_taker(w, n);
	}
	if (n->loading) /* a slot reached it as it gave up: pass it on */
		drop_slot(w, n, &wk);
	count_refusal(w, r);
	spin_unlock(&w->lock);
	wakeups_flush(&wk);
	return r;
}

/* A slot reached @n just before the close did (CLOSED overwrites LOAD):
 * give it back.  n->loading, written under the lock before either
 * exchange, tells; nobody else writes it once @n is unlinked. */
static void give_back_slot(ts_waitlist *w, struct taker *n)
{
	struct wakeups wk;

	wakeups_init(&wk);
	spin_lock(&w->lock);
	drop_slot(w, n, &wk);
	spin_unlock(&w->lock);
	wakeups_flush(&wk);
}

static int refuse(ts_waitlist *w, int64_t deadline_ns, const ts_cancel *cancel)
{
	if (w->closed)
		return ESHUTDOWN;
	if (cancel_fired_now(cancel))
		return ECANCELED;
	if (deadline_ns != 0 && ts_now_ns() >= deadline_ns)
		return ETIMEDOUT;
	if (w->max_waiters && w->waiting >= w->max_waiters)
		return EAGAIN;
	return 0;
}

/* Lock held, an item ready: take it (whatever the state) and unlock. */
static inline int pop_ready(ts_waitlist *w, void **item)
{
	*item = w->ready[--w->n_ready];
	spin_unlock(&w->lock);
	return 0;
}

/* Lock held, nothing ready: a refusal, counted, with the lock dropped; or
 * 0 with the lock still held: the taker must queue. */
static int refused(ts_waitlist *w, int64_t deadline_ns, const ts_cancel *cancel)
{
	int r = refuse(w, deadline_ns, cancel);

	if (r) {
		count_refusal(w, r);
		spin_unlock(&w->lock);
	}
	return r;
}

/* Lock held, nothing ready: refuse, or queue and park.  Out of line so
 * that the ready path (ts_waitlist_take) saves no registers for it. */
static __attribute__((noinline)) int take_queued(ts_waitlist *w, void **item, ts_load_fn load,
						 void *load_arg, int64_t deadline_ns,
						 ts_cancel *cancel)
{
	struct taker n;
	int r;

	if ((r = refused(w, deadline_ns, cancel)))
		return r;
	/* Join the queue first: a loader counts as a waiter, and the item it
	 * makes goes to the oldest idle taker. */
	waiter_init(&n.w, NULL);
	n.item = NULL;
	n.deadline_ns = deadline_ns;
	n.loading = slot_free(w);
	link_tail(w, &n);
	if (n.loading) {
		w->created++;
		atomic_store_explicit(&n.w.state, WAITER_LOAD, memory_order_relaxed);
	} else {
		n.w.spin = oldest_idle(w) == &n && spin_policy_allows(&w->spin);
	}
	/* Read under the lock: once it is dropped, pass_slot may write it. */
	bool loads_first = n.loading;
	spin_unlock(&w->lock);

	TS_FAULT(); /* window: queued, not yet parked (nor watching cancel) */
	TS_PROBE2(take__start, w, loads_first);
	int64_t start = ts_now_ns();
	if (cancel)
		ts_lib_cancel_watch(cancel, &n.w);
	int s = ts_lib_waiter_park(&n.w, WAITER_LOAD, deadline_ns, cancel);
	spin_policy_record(&w->spin, &n.w);
	if (s == WAITER_LOAD) {
		r = run_load(w, &n, load, load_arg, item);
	} else if (s == WAITER_GRANTED || s == WAITER_CLOSED) {
		if (n.loading)
			give_back_slot(w, &n);
		*item = s == WAITER_GRANTED ? n.item : NULL;
		r = s == WAITER_GRANTED ? 0 : ESHUTDOWN;
	} else {
		r = leave(w, &n, s == WAITER_CANCELED ? ECANCELED : ETIMEDOUT, item);
	}
	if (cancel)
		ts_lib_cancel_unwatch(cancel, &n.w);
	TS_PROBE3(take__done, w, ts_now_ns() - start, r);
	return r;
}

TS_API int ts_waitlist_take(ts_waitlist *w, void **item, ts_load_fn load,
			    void *load_arg, int64_t deadline_ns, ts_cancel *cancel)
{
	if (!item)
		return EINVAL;
	*item = NULL;
	if (!w)
		return EINVAL;
	spin_lock(&w->lock);
	if (w->n_ready)
		return pop_ready(w, item);
	return take_queued(w, item, load, load_arg, deadline_ns, cancel);
}

/* --- takers told by their own operation (event-loop nodes, async.c) ---- */

/* The owner's or a token's side of the race (OWNERSHIP in async.h); a
 * token's fire (@wk set) holds the token's lock: NESTING in spinlock.h. */
uint32_t ts_lib_waitlist_withdraw(ts_waitlist *w, struct taker *n, uint32_t outcome,
				  struct wakeups *wk)
{
	if (wk)
		spin_lock_nested(&w->lock); /* under the token's lock */
	else
		spin_lock(&w->lock);
	uint32_t s = atomic_load_explicit(&n->w.state, memory_order_acquire);
	if (s < WAITER_FINAL) {
		unlink_taker(w, n);
		unkeep(w);
		count_refusal(w, outcome == WAITER_EXPIRED ? ETIMEDOUT : ECANCELED);
		if (wk)
			waiter_grant(&n->w, outcome, wk);
		else
			atomic_store_explicit(&n->w.state, outcome, memory_order_relaxed);
	}
	if (wk)
		wakeups_add(wk, spin_unlock_nested(&w->lock));
	else
		spin_unlock(&w->lock);
	return s;
}

/* A loop taker's take: precedence as ts_waitlist_take; where a blocking
 * taker would load, it gets the slot (TS_CREATE) and leaves.  @no_room is
 * the error to give if it has to queue and its deadline found no room.
 * Returns 0 (*item ready), TAKE_SLOT, a refusal, or EINPROGRESS: queued,
 * with its place on the ready stack kept (KEPT PLACES). */
int ts_lib_waitlist_enqueue_loop(ts_waitlist *w, struct taker *n, int64_t deadline_ns,
				 ts_cancel *cancel, int no_room, void **item)
{
	int r;

	n->item = NULL;
	n->deadline_ns = deadline_ns;
	n->loading = false;
	for (;;) {
		spin_lock(&w->lock);
		if (w->n_ready)
			return pop_ready(w, item);
		if ((r = refused(w, deadline_ns, cancel)))
			return r;
		if (slot_free(w)) {
			w->created++;
			spin_unlock(&w->lock);
			return TAKE_SLOT;
		}
		if (no_room) {
			spin_unlock(&w->lock);
			return no_room;
		}
		if (room_for_one(w))
			break;
		/* its place on the ready stack (KEPT PLACES), made outside
		 * the lock; then everything is looked at again */
		size_t need = w->n_ready + atomic_load_explicit(&w->kept, memory_order_relaxed) + 1;
		spin_unlock(&w->lock);
		if (!grow_ready(w, need))
			return ENOMEM;
	}
	atomic_fetch_add_explicit(&w->kept, 1, memory_order_relaxed);
	link_tail(w, n);
	spin_unlock(&w->lock);
	return EINPROGRESS;
}

TS_API bool ts_waitlist_try_take(ts_waitlist *w, void **item)
{
	if (!w || !item)
		return false;
	spin_lock(&w->lock);
	bool got = w->n_ready > 0;
	if (got)
		*item = w->ready[--w->n_ready];
	spin_unlock(&w->lock);
	return got;
}

/* The bottom of the ready stack is the item idle longest (puts push on
 * top, takes pop from the top).  Taking it keeps every invariant above: it
 * only lowers n_ready (KEPT PLACES: room >= n_ready + kept still holds; a
 * smaller stack still means every queued taker is loading), hands out no
 * slot, and wakes nobody, so there is no wake batch and no futex call.
 * @pick runs under the lock (it must be quick and call nothing of ours);
 * the shift is a memmove of the idle items, nothing allocates.  Not a
 * counted event: the counters count loads, failures, discards and refused
 * takes, and a reaper's discard that follows is counted as a discard. */
TS_API bool ts_waitlist_try_take_oldest(ts_waitlist *w, void **item, ts_pick_fn pick,
					void *arg)
{
	if (!w || !item)
		return false;
	spin_lock(&w->lock);
	bool got = w->n_ready > 0 && (!pick || pick(w->ready[0], arg));
	if (got) {
		*item = w->ready[0];
		w->n_ready--;
		memmove(w->ready, w->ready + 1, w->n_ready * sizeof(*w->ready));
	}
	spin_unlock(&w->lock);
	return got;
}

/* Lock held: give @item to the oldest idle taker, or push it on the ready
 * stack, growing the stack outside the lock.  Drops the lock.  false:
 * closed, or the stack could not grow. */
static __attribute__((noinline)) bool put_locked(ts_waitlist *w, void *item)
{
	struct wakeups wk;
	bool grow_failed = false;

	wakeups_init(&wk);
	while (!w->closed) {
		struct taker *h = oldest_live(w);
		if (h) {
			give(w, h, item, &wk);
			ts_hook_at(TS_HOOK_UNLOCKING, w);
		} else if (room_for_one(w)) {
			w->ready[w->n_ready++] = item;
		} else if (grow_failed) {
			break; /* ENOMEM, and still nobody idle waits */
		} else {
			size_t need = w->n_ready +
				      atomic_load_explicit(&w->kept, memory_order_relaxed) + 1;
			spin_unlock(&w->lock);
			/* on failure, look once more under the lock: a taker may
			 * have queued meanwhile, and must get the item */
			grow_failed = !grow_ready(w, need);
			spin_lock(&w->lock);
			continue;
		}
		spin_unlock(&w->lock);
		wakeups_flush(&wk);
		return true;
	}
	spin_unlock(&w->lock);
	return false;
}

TS_API bool ts_waitlist_put(ts_waitlist *w, void *item)
{
	if (!w)
		return false;
	TS_PROBE2(put, w, item);
	spin_lock(&w->lock);
	/* The common case, nobody queued and room on the stack, inline:
	 * put_locked's answer for it, without its wake batch. */
	if (!w->head && !w->closed && room_for_one(w)) {
		w->ready[w->n_ready++] = item;
		spin_unlock(&w->lock);
		return true;
	}
	return put_locked(w, item);
}

/* ts_async_cancel of a take that got @item and was not dispatched: the
 * item goes to the oldest idle taker, or onto the place the taker kept
 * (KEPT PLACES), so nothing allocates and nothing can fail.  Closed or not:
 * a closed list still hands out ready items, so the item is never lost. */
void ts_lib_waitlist_hand_back(ts_waitlist *w, void *item)
{
	struct wakeups wk;

	wakeups_init(&wk);
	spin_lock(&w->lock);
	unkeep(w);
	TS_CHECK_INVARIANT(room_for_one(w), "KEPT PLACES: no room for a kept place");
	struct taker *h = oldest_live(w); /* none once closed */
	if (h)
		give(w, h, item, &wk);
	else
		w->ready[w->n_ready++] = item;
	ts_hook_at(TS_HOOK_UNLOCKING, w);
	spin_unlock(&w->lock);
	wakeups_flush(&wk);
}

/* Free one creation slot for the oldest idle taker.  @why: a discard is
 * counted as one; a slot given back unused is not. */
static void free_slot(ts_waitlist *w, bool discard)
{
	struct wakeups wk;

	wakeups_init(&wk);
	spin_lock(&w->lock);
	if (w->created > 0) {
		w->created--;
		if (discard)
			w->counters.discards++;
		pass_slot(w, &wk);
		ts_hook_at(TS_HOOK_UNLOCKING, w);
	}
	spin_unlock(&w->lock);
	wakeups_flush(&wk);
}

void ts_lib_waitlist_give_back_slot(ts_waitlist *w)
{
	free_slot(w, false);
}

TS_API void ts_waitlist_discard(ts_waitlist *w)
{
	if (!w)
		return;
	TS_PROBE1(discard, w);
	free_slot(w, true);
}

/* Unlink every taker and tell it CLOSED, one wake batch per critical
 * section (waiter.h).  A loader among them finds CLOSED after its load and
 * keeps what it made; one that timed out concurrently finds a final state
 * in leave() and does not unlink itself twice.  Nobody joins once closed,
 * so the loop ends. */
TS_API void ts_waitlist_close(ts_waitlist *w)
{
	struct wakeups wk;
	bool more;
	int gaps = 0;

	if (!w)
		return;
	do {
		wakeups_init(&wk);
		spin_lock(&w->lock);
		w->closed = true;
		while (w->head && !wakeups_full(&wk)) {
			struct taker *n = w->head;
			unlink_taker(w, n);
			if (n->w.ops && n->w.ops->loop)
				unkeep(w);
			waiter_grant(&n->w, WAITER_CLOSED, &wk);
		}
		more = w->head != NULL;
		if (more && !gaps++)
			busy_enter(&w->busy);
		ts_hook_at(TS_HOOK_UNLOCKING, w);
		spin_unlock(&w->lock);
		wakeups_flush(&wk);
	} while (more);
	if (gaps)
		busy_leave(&w->busy);
}

TS_API void ts_waitlist_stats(const ts_waitlist *cw, size_t *created, size_t *ready,
			      size_t *waiting)
{
	size_t c = 0, r = 0, q = 0;
	ts_waitlist *w = (ts_waitlist *)cw; /* the lock is not part of the value */

	if (w) {
		spin_lock(&w->lock);
		c = w->created;
		r = w->n_ready;
		q = w->waiting;
		spin_unlock(&w->lock);
	}
	if (created)
		*created = c;
	if (ready)
		*ready = r;
	if (waiting)
		*waiting = q;
}

TS_API void ts_waitlist_read_counters(const ts_waitlist *cw, ts_waitlist_counters *out)
{
	ts_waitlist *w = (ts_waitlist *)cw; /* the lock is not part of the value */

	if (!out)
		return;
	if (!w) {
		memset(out, 0, sizeof(*out));
		return;
	}
	spin_lock(&w->lock);
	*out = w->counters;
	spin_unlock(&w->lock);
}
