/* SPDX-License-Identifier: MIT */
/* libturnstile — turnstile: bounded, ordered admission to one resource.
 *
 * A turnstile issues at most `concurrency` passes at once.  When none is free
 * callers queue, and each freed pass goes straight to the best waiter:
 * lowest priority band, then earliest since_ns, then lowest seq, then
 * arrival.  A newcomer never takes a pass while anyone is queued (no
 * barging).  Callers that share a job share its claim (see job.h), so
 * admission is first-in-first-out over jobs rather than over calls.
 *
 * A PASS MUST ENCLOSE THE RESOURCE it orders, for the whole time the resource
 * is held (a query until its rows are read, a transaction until it commits),
 * and it must never be taken while the resource is already held.
 */
#ifndef TURNSTILE_TURNSTILE_H
#define TURNSTILE_TURNSTILE_H

#include <turnstile/common.h>
#include <turnstile/cancel.h>

TS_BEGIN_DECLS

typedef struct ts_turnstile ts_turnstile;

/* What a waiter is ordered by.  since_ns is when its JOB began (ts_now_ns
 * clock) and seq names the job; both stay fixed for every turn the job
 * takes.  Lower is better in every field. */
typedef struct ts_claim {
	int priority;
	int64_t since_ns;
	uint64_t seq;
} ts_claim;

/* ts_claim_stamp - a fresh job's claim for a turnstile used without a set:
 * band @priority, since = ts_now_ns(), seq = a new job number from the
 * counter ts_set_prioritize uses (no two claims stamped in one process
 * share a seq).  Stamp once per job and pass the same claim to each of
 * its waits, so its later turns keep their place.  NULL @claim: no-op.
 * Thread-safe for distinct claims, async-signal-safe. */
TS_API void ts_claim_stamp(ts_claim *claim, int priority);

/* One issued turn, passed by value.  Members are private. */
typedef struct ts_pass {
	ts_turnstile *private_turnstile; /* NULL: not issued (or returned) */
	int64_t private_waited_ns;
} ts_pass;

/* The unissued pass. */
#define TS_PASS_NONE { NULL, 0 }

/* Largest concurrency a turnstile accepts (EINVAL above). */
#define TS_CONCURRENCY_MAX ((int64_t)1 << 60)

/* ts_turnstile_new - a turnstile issuing at most @concurrency passes.
 * 0 admits nobody until resized.  Returns NULL with errno EINVAL
 * (concurrency < 0 or > TS_CONCURRENCY_MAX) or ENOMEM. */
TS_API ts_turnstile *ts_turnstile_new(int64_t concurrency);

/* ts_turnstile_free - destroy @t.  Nobody may be waiting on it (event-loop
 * waits included) or hold one of its passes.  Free after the last return
 * is safe (as for POSIX semaphores): once every wait has returned and
 * every pass is back, @t may be freed even while the thread that granted,
 * resized or closed is still inside that call.  NULL: no-op. */
TS_API void ts_turnstile_free(ts_turnstile *t);

/* ts_turnstile_wait - take a pass for @claim, waiting while none is free.
 *
 * Checked in this order at the call: closed (ESHUTDOWN), @cancel fired
 * (ECANCELED), a pass free with nobody queued (0), otherwise the caller
 * queues until granted (0), @deadline_ns passes (ETIMEDOUT), @cancel fires
 * (ECANCELED) or the turnstile closes (ESHUTDOWN); whichever lands first
 * under the turnstile's lock wins, so a pass granted before a cancelled
 * waiter left the queue is a success.  A deadline means never after it: a
 * waiter whose deadline has passed is never granted, even if it has not
 * left the queue yet (the granter ends it with ETIMEDOUT and grants the
 * next); a pass granted before the deadline is a success however late the
 * waiter sees it.  The deadline is read only when the caller must wait,
 * and a granter reads the clock only for a head waiter that has one: the
 * uncontended path reads no clock.  TS_DEADLINE_NOW
 * never blocks.  EINVAL: @t, @claim or @pass NULL.
 * *pass is the issued pass on 0 and TS_PASS_NONE otherwise.
 * Thread-safe; must not be called from a signal handler.  No allocation. */
TS_API int ts_turnstile_wait(ts_turnstile *t, const ts_claim *claim,
			     int64_t deadline_ns, ts_cancel *cancel,
			     ts_pass *pass);

/* ts_turnstile_resize - set the ceiling to @concurrency, live.  The free
 * count moves by the delta: passes held stay held, shrinking below what is
 * held makes it negative (admitting nobody until enough return), growing
 * hands the new passes straight to the head waiters.  Works on a closed
 * turnstile too (it only changes the count).  EINVAL: @t NULL or
 * @concurrency out of [0, TS_CONCURRENCY_MAX].  Thread-safe. */
TS_API int ts_turnstile_resize(ts_turnstile *t, int64_t concurrency);

/* ts_turnstile_close - release every waiter with ESHUTDOWN (an event-loop
 * waiter gets it in its callback) and refuse every later wait.  Passes
 * held may still be returned.  Idempotent, thread-safe.  NULL: no-op. */
TS_API void ts_turnstile_close(ts_turnstile *t);

/* ts_turnstile_closed - whether @t is closed.  NULL: false. */
TS_API bool ts_turnstile_closed(const ts_turnstile *t);

/* ts_turnstile_snapshot - passes free now (negative after a shrink below
 * what is held) and callers queued now.  Instantaneous values for metrics;
 * either out-pointer may be NULL.  Thread-safe. */
TS_API void ts_turnstile_snapshot(const ts_turnstile *t, int64_t *available,
				  int64_t *waiting);

/* ts_turnstile_ceiling - the ceiling now, as ts_turnstile_new or the last
 * ts_turnstile_resize set it (for a fleet member, its share); passes held
 * now are this less the free count of ts_turnstile_snapshot.  An instant's
 * view.  NULL: 0.  Thread-safe. */
TS_API int64_t ts_turnstile_ceiling(const ts_turnstile *t);

/* ts_turnstile_waiting_by_band - callers queued now, per band, best band
 * first: up to @max pairs (@bands[i], @waiting[i]) in ascending band
 * order.  Returns how many distinct bands are queued (more than @max:
 * only the first @max are told), or -EINVAL (NULL @t, @max < 0, or a NULL
 * array with @max > 0), or -ENOMEM (a process-shared turnstile copies its
 * queue's bands out of its lock).  Takes the queue's lock for a walk of
 * every waiter: for demand reports and metrics (libturnstile-fleet
 * publishes it), not for hot paths.  An instant's view, like
 * ts_turnstile_snapshot.  Thread-safe. */
TS_API int ts_turnstile_waiting_by_band(const ts_turnstile *t, int *bands, int64_t *waiting,
					int max);

/* ts_pass_return - hand @p back, admitting the best waiter.  Afterwards @p is
 * unissued; returning it again, or returning TS_PASS_NONE, is a no-op.
 * Returning two COPIES of one pass is a caller error: keep one copy.  It is
 * caught where that is cheap — a return while every pass is already free
 * is ignored, so the ceiling is not raised — but while other passes are
 * held a copy's return cannot be told from theirs, and one racing a resize
 * may briefly slip past the check (the next real return then evens it).  A pass carries
 * happens-before to its next holder, as a mutex does.  Thread-safe (for
 * distinct passes).  NULL: no-op. */
TS_API void ts_pass_return(ts_pass *p);

/* ts_pass_issued - whether @p holds an issued turn.  NULL: false. */
TS_API bool ts_pass_issued(const ts_pass *p);

/* ts_pass_waited_ns - how long the holder queued for @p, from joining the
 * queue to the grant; 0 when it did not queue or @p is unissued/NULL. */
TS_API int64_t ts_pass_waited_ns(const ts_pass *p);

TS_END_DECLS

#include <turnstile/fastpath.h>

#endif
