/* SPDX-License-Identifier: MIT */
/* Waitlist: FIFO waiters, LIFO ready stack, lazy creation under a cap.
 *
 * One spinlock guards everything below.  Waiters are nodes on their own
 * stacks (struct taker), parked on their own futex word (waiter.h).
 *
 * INVARIANTS, whenever the lock is free:
 *  - ready non-empty => queue empty: put and a finished load hand an item
 *    to the head waiter before they ever push it onto the ready stack.
 *  - a queued taker without a slot waits only while every slot is in use:
 *    a slot freed by a failed load or a discard goes at once to the oldest
 *    taker that has none (pass_slot).
 *  - room >= ready + loading: every load in flight has room reserved on the
 *    ready stack, so a finished load can always park its item there and no
 *    item is ever dropped for want of memory.
 * HAND-OVER: an item goes to a taker only under the lock, by writing it
 * into the node and publishing GRANTED with one exchange (waiter_grant), the
 * node having been unlinked first.  A taker that times out or is cancelled
 * takes the lock and reads its own state: GRANTED means the item reached it
 * first and it returns it (0); otherwise it unlinks itself, so no later put
 * can pick it.  Either way the item has exactly one owner. */
#include <turnstile/waitlist.h>

#include <errno.h>
#include <stdlib.h>

#include "hook.h"
#include "probe.h"
#include "spinlock.h"
#include "waiter.h"

struct taker {
	struct taker *prev, *next; /* queue links, under the lock */
	waiter w;
	void *item;   /* written before GRANTED is published */
	bool loading; /* holds a creation slot and is (about to be) loading */
};

struct ts_waitlist {
	_Atomic int lock;
	bool closed;
	size_t max_items, max_waiters;
	size_t created; /* creation slots in use */
	size_t loading; /* loads in flight (each holds a slot and ready room) */
	size_t waiting; /* queue length */
	struct taker *head, *tail;
	struct spin_policy spin; /* does the head's spin pay here? */
	void **ready;
	size_t n_ready, room;
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
	free(w->ready);
	free(w);
}

/* Make room for @need items on the ready stack.  Lock held; growing is
 * rare (amortised doubling) and never happens on the take/put fast path
 * once the pool has reached its working size. */
static bool reserve(ts_waitlist *w, size_t need)
{
	if (need <= w->room)
		return true;
	size_t room = w->room ? w->room : 8;
	while (room < need)
		room *= 2;
	void **grown = realloc(w->ready, room * sizeof(*grown));
	if (!grown)
		return false;
	w->ready = grown;
	w->room = room;
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

/* Give @n a creation slot (room on the ready stack reserved with it).
 * Lock held.  false if the room could not be reserved. */
static bool take_slot(ts_waitlist *w, struct taker *n)
{
	if (!reserve(w, w->n_ready + w->loading + 1))
		return false;
	w->created++;
	w->loading++;
	n->loading = true;
	return true;
}

static bool slot_free(const ts_waitlist *w)
{
	return w->max_items == 0 || w->created < w->max_items;
}

/* A slot was freed: hand it to the oldest queued taker without one, which
 * wakes and loads.  It stays linked, so FIFO order is kept for the item it
 * will make.  Lock held. */
static void pass_slot(ts_waitlist *w, struct wakeups *wk)
{
	if (w->closed || !slot_free(w))
		return;
	for (struct taker *n = w->head; n; n = n->next)
		if (!n->loading) {
			if (take_slot(w, n))
				wakeups_add(wk, waiter_grant(&n->w, WAITER_LOAD));
			return;
		}
}

/* @n holds a slot it will not use: it was handed an item, closed out, or
 * gave up before it started loading.  Free the slot for the oldest taker
 * that has none.  Lock held. */
static void drop_slot(ts_waitlist *w, struct taker *n, struct wakeups *wk)
{
	n->loading = false;
	w->loading--;
	w->created--;
	pass_slot(w, wk);
}

/* Hand @item to the head taker, or push it if nobody waits.  Lock held;
 * the caller has ensured room for the push. */
static void hand_out(ts_waitlist *w, void *item, struct wakeups *wk)
{
	struct taker *h = w->head;
	if (!h) {
		w->ready[w->n_ready++] = item;
		return;
	}
	unlink_taker(w, h);
	h->item = item;
	wakeups_add(wk, waiter_grant(&h->w, WAITER_GRANTED));
}

/* The loader's side, after its load returned.  Returns the take's result,
 * or EINPROGRESS when the caller must go on waiting (its item went to an
 * earlier taker).  The state read under the lock says what happened while
 * it was loading: GRANTED (a put reached it), CLOSED (close unlinked it),
 * or still LOAD (linked, waiting its turn). */
static int finish_load(ts_waitlist *w, struct taker *n, int err, void *made, void **out)
{
	struct wakeups wk;
	int r;

	ts_hook_at(TS_HOOK_LOADED, w);
	wakeups_init(&wk);
	spin_lock(&w->lock);
	n->loading = false;
	w->loading--;
	uint32_t s = atomic_load_explicit(&n->w.state, memory_order_acquire);
	if (err) {
		w->created--;
		if (s == WAITER_GRANTED) {
			*out = n->item;
			r = 0;
		} else {
			if (s != WAITER_CLOSED)
				unlink_taker(w, n);
			r = err;
		}
		pass_slot(w, &wk);
	} else if (s == WAITER_GRANTED) {
		*out = n->item;
		r = 0;
		hand_out(w, made, &wk); /* room was reserved with the slot */
	} else if (s == WAITER_CLOSED) {
		*out = made;
		r = 0;
	} else if (w->head == n) {
		unlink_taker(w, n);
		*out = made;
		r = 0;
	} else {
		hand_out(w, made, &wk); /* FIFO: the head is older than us */
		atomic_store_explicit(&n->w.state, WAITER_QUEUED, memory_order_relaxed);
		n->w.spin = false;
		r = EINPROGRESS;
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
	spin_unlock(&w->lock);
	wakeups_flush(&wk);
	return r;
}

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

TS_API int ts_waitlist_take(ts_waitlist *w, void **item, ts_load_fn load,
			    void *load_arg, int64_t deadline_ns, ts_cancel *cancel)
{
	struct taker n;
	int r;

	if (!item)
		return EINVAL;
	*item = NULL;
	if (!w)
		return EINVAL;
	spin_lock(&w->lock);
	if (w->n_ready) {
		*item = w->ready[--w->n_ready];
		spin_unlock(&w->lock);
		return 0;
	}
	if ((r = refuse(w, deadline_ns, cancel))) {
		spin_unlock(&w->lock);
		return r;
	}
	/* Join the queue first: a loader counts as a waiter, and the item it
	 * makes goes to whoever is oldest. */
	waiter_init(&n.w);
	n.loading = false;
	n.item = NULL;
	link_tail(w, &n);
	if (slot_free(w)) {
		if (!take_slot(w, &n)) {
			unlink_taker(w, &n);
			spin_unlock(&w->lock);
			return ENOMEM;
		}
		atomic_store_explicit(&n.w.state, WAITER_LOAD, memory_order_relaxed);
	} else {
		n.w.spin = w->head == &n && spin_policy_allows(&w->spin);
	}
	/* Read under the lock: once it is dropped, pass_slot may write it. */
	bool loads_first = n.loading;
	spin_unlock(&w->lock);

	TS_FAULT(); /* window: queued, not yet parked (nor watching cancel) */
	TS_PROBE2(take__start, w, loads_first);
	int64_t start = ts_now_ns();
	if (cancel)
		ts_lib_cancel_watch(cancel, &n.w);
	for (;;) {
		int s = ts_lib_waiter_park(&n.w, WAITER_LOAD, deadline_ns, cancel);
		spin_policy_record(&w->spin, &n.w);
		n.w.spun = 0;
		if (s == WAITER_LOAD) {
			r = run_load(w, &n, load, load_arg, item);
			if (r == EINPROGRESS)
				continue;
		} else if (s == WAITER_GRANTED || s == WAITER_CLOSED) {
			/* A slot may have reached us just before the item or the
			 * close did (both overwrite LOAD): n.loading, written
			 * before either exchange, tells; nobody else writes it
			 * once we are unlinked. */
			if (n.loading)
				give_back_slot(w, &n);
			*item = s == WAITER_GRANTED ? n.item : NULL;
			r = s == WAITER_GRANTED ? 0 : ESHUTDOWN;
		} else {
			r = leave(w, &n, s == WAITER_CANCELED ? ECANCELED : ETIMEDOUT, item);
		}
		break;
	}
	if (cancel)
		ts_lib_cancel_unwatch(cancel, &n.w);
	TS_PROBE3(take__done, w, ts_now_ns() - start, r);
	return r;
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

TS_API bool ts_waitlist_put(ts_waitlist *w, void *item)
{
	struct wakeups wk;

	if (!w)
		return false;
	wakeups_init(&wk);
	spin_lock(&w->lock);
	TS_PROBE2(put, w, item);
	bool ok = !w->closed && (w->head || reserve(w, w->n_ready + w->loading + 1));
	if (ok)
		hand_out(w, item, &wk);
	spin_unlock(&w->lock);
	wakeups_flush(&wk);
	return ok;
}

TS_API void ts_waitlist_discard(ts_waitlist *w)
{
	struct wakeups wk;

	if (!w)
		return;
	TS_PROBE1(discard, w);
	wakeups_init(&wk);
	spin_lock(&w->lock);
	if (w->created > 0) {
		w->created--;
		pass_slot(w, &wk);
	}
	spin_unlock(&w->lock);
	wakeups_flush(&wk);
}

/* Unlink every taker and tell it CLOSED.  A loader among them finds CLOSED
 * after its load and keeps what it made; one that timed out concurrently
 * finds a final state in leave() and does not unlink itself twice. */
TS_API void ts_waitlist_close(ts_waitlist *w)
{
	struct wakeups wk;

	if (!w)
		return;
	wakeups_init(&wk);
	spin_lock(&w->lock);
	w->closed = true;
	while (w->head) {
		struct taker *n = w->head;
		unlink_taker(w, n);
		wakeups_add(&wk, waiter_grant(&n->w, WAITER_CLOSED));
	}
	spin_unlock(&w->lock);
	wakeups_flush(&wk);
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
