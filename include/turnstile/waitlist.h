/* SPDX-License-Identifier: MIT */
/* libturnstile — waitlist: a FIFO-fair pool of reusable items.
 *
 * For resources that are expensive to create (database connections,
 * handles) where fairness matters and creation must be capped: waiters are
 * served strictly in arrival order, ready items are reused LIFO (the warm
 * one first), and items are created lazily by the caller's own `load`, on
 * its own thread and outside every lock, never more than `max_items` at a
 * time.  It trades some throughput for predictable latency and a hard cap.
 *
 * An item handed to a waiter whose wait ends at that instant (deadline,
 * cancel) is never lost and never given twice: whichever lands first under
 * the pool's lock wins, and an item that reached the waiter before it left
 * the queue is a success.  A deadline means never after it: a taker whose
 * deadline has passed is given no item and no creation slot, even if it
 * has not left the queue yet (ETIMEDOUT; the next taker gets it).  The
 * clock is read only for a taker that has a deadline.
 */
#ifndef TURNSTILE_WAITLIST_H
#define TURNSTILE_WAITLIST_H

#include <turnstile/common.h>
#include <turnstile/cancel.h>

TS_BEGIN_DECLS

typedef struct ts_waitlist ts_waitlist;

/* Creates one item: 0 and *item, or a positive errno value (the item is
 * then not created and its creation slot is freed). */
typedef int (*ts_load_fn)(void *arg, void **item);

/* ts_waitlist_new - an empty, open pool creating at most @max_items items
 * and letting at most @max_waiters callers wait (0: no limit for either).
 * NULL with errno ENOMEM. */
TS_API ts_waitlist *ts_waitlist_new(size_t max_items, size_t max_waiters);

/* ts_waitlist_free - destroy @w.  Nobody may be inside (no take pending,
 * event-loop ones included) and every item taken must be back (put, or
 * discarded); free after the last return is safe, even
 * while the thread that put, discarded or closed is still inside that
 * call.  Items still ready are NOT destroyed: drain them first
 * (ts_waitlist_try_take) if they own resources.  NULL: no-op. */
TS_API void ts_waitlist_free(ts_waitlist *w);

/* ts_waitlist_take - get an item into *item.
 *
 * In this order: a ready item is returned at once (0), whatever the
 * deadline, cancel or closed state; else closed (ESHUTDOWN); else @cancel
 * fired (ECANCELED); else @deadline_ns passed (ETIMEDOUT) — neither calls
 * @load; else @max_waiters already waiting (EAGAIN); else the caller joins
 * the FIFO queue and, if fewer than @max_items exist, creates one with
 * @load(@load_arg) on its own thread outside every lock.  Items go to the
 * oldest taker that is NOT loading (a loader could not use one before its
 * load returns); a loader keeps the item it made, since every taker queued
 * ahead of it is loading too.  While queued the caller may be handed an
 * item (0), time out (ETIMEDOUT), be cancelled (ECANCELED), be closed out
 * (ESHUTDOWN), or be given a creation slot freed by a failed load or a
 * discard (then it loads).  A failed load returns its own error to the
 * caller that ran it and frees its slot; a loader whose pool closes keeps
 * the item it made (0).  @load NULL: items are NULL tokens.
 * EINVAL: @w or @item NULL.  *item is NULL unless 0 is returned.
 * Thread-safe; no allocation (only put may grow the ready stack). */
TS_API int ts_waitlist_take(ts_waitlist *w, void **item, ts_load_fn load,
			    void *load_arg, int64_t deadline_ns, ts_cancel *cancel);

/* ts_waitlist_try_take - a ready item, if there is one (even when closed).
 * Never creates or waits.  NULL @w or @item: false. */
TS_API bool ts_waitlist_try_take(ts_waitlist *w, void **item);

/* Tells whether @item may be taken (ts_waitlist_try_take_oldest). */
typedef bool (*ts_pick_fn)(void *item, void *arg);

/* ts_waitlist_try_take_oldest - the ready item idle longest, for a reaper
 * (an idle timeout, a maximum lifetime).  Ready items are reused LIFO, so
 * the bottom of the ready stack is the one put back longest ago.
 *
 * If an item is ready and @pick is NULL or @pick(bottom item, @arg) returns
 * true, removes that item, stores it in *@item and returns true.  The
 * caller then holds it exactly as if it had taken it: ts_waitlist_put to
 * give it back (it goes to a waiting taker, or on top of the stack: it is
 * then the newest), or destroy it and call ts_waitlist_discard to free its
 * creation slot (a waiting taker then creates a replacement).  Otherwise
 * returns false and changes nothing (*@item untouched): nothing ready, or
 * @pick refused.  @pick sees only the bottom item, never the others: a
 * reaper retires several by calling again until it gets false.  A closed
 * pool still hands out its ready items, oldest first, so this also drains
 * one.  Never creates or waits; allocates nothing; not counted in
 * ts_waitlist_read_counters (a discard that follows is).
 * @pick runs with the pool's lock held: it must be quick (compare a time
 * stamp in the item with one passed in @arg), must not block, and must not
 * call the library (ts_now_ns excepted): a call into this pool deadlocks.
 * Thread-safe.  NULL @w or @item: false. */
TS_API bool ts_waitlist_try_take_oldest(ts_waitlist *w, void **item, ts_pick_fn pick,
					void *arg);

/* ts_waitlist_put - hand @item back: to the oldest taker that is not
 * loading, if any, else onto the ready stack (which it may grow, outside
 * the pool's lock).  false when closed, or when the stack could not grow
 * (out of memory; nobody was waiting for the item): the caller keeps
 * @item, and should destroy it and call ts_waitlist_discard, so its
 * creation slot is freed and the stats stay right.  Thread-safe; never
 * blocks.  NULL @w: false. */
TS_API bool ts_waitlist_put(ts_waitlist *w, void *item);

/* ts_waitlist_discard - the caller destroyed an item it held (a broken
 * connection): its creation slot is freed and goes to the oldest taker
 * without one, which then creates a replacement (an event-loop taker is
 * told TS_CREATE: turnstile/async.h).  Thread-safe.  NULL: no-op. */
TS_API void ts_waitlist_discard(ts_waitlist *w);

/* ts_waitlist_close - wake every waiter with ESHUTDOWN (an event-loop taker
 * gets it in its callback); later puts return false; ready items stay
 * drainable.  Idempotent, thread-safe.  NULL: no-op. */
TS_API void ts_waitlist_close(ts_waitlist *w);

/* ts_waitlist_stats - creation slots in use (created minus discarded and
 * failed), items ready, callers waiting; instantaneous.  Any out-pointer
 * may be NULL.  Thread-safe.  NULL @w: zeros. */
TS_API void ts_waitlist_stats(const ts_waitlist *w, size_t *created, size_t *ready,
			      size_t *waiting);

/* Events since the pool was made, for metrics and alerts.  Every counter
 * only grows. */
typedef struct ts_waitlist_counters {
	uint64_t loads;         /* loads that returned an item (an event-loop
				   taker's TS_CREATE is not a load) */
	uint64_t load_failures; /* loads that returned an error */
	int last_load_error;    /* the latest failed load's error; 0: none yet */
	uint64_t discards;      /* ts_waitlist_discard calls that gave a slot back */
	uint64_t timeouts;      /* takes that ended ETIMEDOUT */
	uint64_t cancels;       /* takes that ended ECANCELED (and event-loop
				   takes withdrawn by ts_async_cancel) */
	uint64_t rejected;      /* takes refused EAGAIN (waiter cap) */
} ts_waitlist_counters;

/* ts_waitlist_read_counters - copy @w's counters into *@out, consistent
 * with one another, without stopping the pool (it holds the pool's lock for
 * the copy): failed loads and their last error, discards, timeouts,
 * cancels and refusals, for metrics and alerts beside ts_waitlist_stats.
 * Thread-safe.  NULL @w: zeros; NULL @out: no-op. */
TS_API void ts_waitlist_read_counters(const ts_waitlist *w, ts_waitlist_counters *out);

TS_END_DECLS

#endif
