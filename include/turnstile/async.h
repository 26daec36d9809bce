/* SPDX-License-Identifier: MIT */
/* libturnstile — event-loop waiters: turns and items for threads that must
 * never block (an epoll or libuv loop serving thousands of clients).
 *
 * An async wait joins the SAME queue as blocking waits, in the same order
 * (band, since, seq, arrival for a turnstile; FIFO for a waitlist).  Its
 * outcome is delivered later by a callback, run by the loop itself:
 *
 *   ts_notifier   one per loop thread.  Its file descriptor is readable
 *                 while ts_notifier_dispatch has work: a wait completed (on
 *                 any thread) or the earliest pending deadline passed.  The
 *                 caller polls it; it needs no timer of its own.
 *   ts_async      the caller's node (embed it in the client's struct); no
 *                 allocation per wait.  TS_ASYNC_INIT (all zero, so calloc
 *                 memory counts) before first use; a node that is not
 *                 pending may be queued again as it is.
 *
 * A node is PENDING from an _async call that returns EINPROGRESS until its
 * callback begins or ts_async_cancel returns.  While pending it must stay
 * in place.  Inside its callback it is no longer pending: the callback may
 * queue it again or free it; the library never touches a node again once
 * its callback has begun.
 *
 * Where callbacks run: only inside ts_notifier_dispatch, on the thread that
 * calls it, with no library lock held, in the order the waits completed —
 * never inside the call that queued the wait, never on a granting thread.
 * A callback may call any library function.
 *
 * Threads: calls naming a notifier or its nodes (the _async calls,
 * ts_async_cancel, ts_notifier_dispatch, ts_notifier_free) are made on one
 * thread at a time — the loop's.  Grants come from any thread (a return,
 * put, resize, close or cancel fire): they complete the node and make the
 * fd readable.  The fd is written only when the notifier goes from nothing
 * pending to something pending, so a burst of K completions costs one
 * write, and always gives exactly K callbacks.
 */
#ifndef TURNSTILE_ASYNC_H
#define TURNSTILE_ASYNC_H

#include <turnstile/common.h>
#include <turnstile/cancel.h>
#include <turnstile/job.h>
#include <turnstile/turnstile.h>
#include <turnstile/waitlist.h>

TS_BEGIN_DECLS

typedef struct ts_notifier ts_notifier;

/* The caller's node.  Complete so that it can be embedded; every member is
 * private (the size is part of the ABI). */
/* 512 bytes (part of the ABI): a queued client's whole cost, in memory
 * the caller owns. */
typedef struct ts_async {
	bool private_pending; /* read by the inline fast path below */
	uint64_t private_storage[63];
} ts_async;

/* Static initializer: a node that is not pending. */
#define TS_ASYNC_INIT { false, { 0 } }

/* The outcome of an async wait: @result is 0 (a pass: ts_async_pass; an
 * item: ts_async_item), TS_CREATE, ETIMEDOUT, ECANCELED or ESHUTDOWN. */
typedef void (*ts_async_fn)(ts_async *node, int result, void *arg);

/* A waitlist take's result when nothing was ready and a creation slot is
 * now the taker's (it is out of the queue).  Negative, so it is never an
 * errno value.  The taker makes an item without blocking its loop and owns
 * it as if taken (ts_waitlist_put when done), or, if making it fails, gives
 * the slot back with ts_waitlist_discard (the slot goes to the oldest
 * taker). */
#define TS_CREATE (-1)

/* Counters of one notifier, read on its loop thread. */
typedef struct ts_notifier_counters {
	uint64_t callbacks;   /* callbacks run */
	uint64_t completions; /* completions pushed, by whichever thread
				 granted (the loop's own included) */
	uint64_t fd_writes;   /* times the fd was made readable by a write */
	uint64_t timeouts;    /* waits ended by their deadline */
} ts_notifier_counters;

/* ts_notifier_new - a notifier for one event-loop thread.  NULL + errno:
 * ENOMEM, or EMFILE/ENFILE (it uses three file descriptors: an epoll fd
 * over an eventfd and a timerfd). */
TS_API ts_notifier *ts_notifier_new(void);

/* ts_notifier_free - close and free @n.  EBUSY (nothing freed) while a wait
 * is still pending on it, or when called from one of its callbacks (free
 * it after ts_notifier_dispatch returns); EINVAL for NULL.  It may run while a thread that
 * completed one of its waits is still inside that call: it waits until that
 * thread no longer touches @n.  Loop thread only. */
TS_API int ts_notifier_free(ts_notifier *n);

/* ts_notifier_fd - the descriptor to poll for POLLIN (EPOLLIN, uv_poll_t
 * UV_READABLE), level-triggered: readable while ts_notifier_dispatch has
 * work to do.  Owned by @n: do not read, write or close it.  NULL: -1 with
 * errno EINVAL. */
TS_API int ts_notifier_fd(const ts_notifier *n);

/* ts_notifier_dispatch - run the callbacks of the waits that completed or
 * whose deadline passed, in the order they completed; returns how many ran.
 * Never blocks.  A completion that lands while it runs (a callback's
 * return granting another node of @n) runs in the same call, for a few
 * rounds; what lands after those is left for the next call (the fd stays
 * readable).  The fd may be readable with nothing to run: 0 then.  A nested
 * call from a callback runs nothing and returns 0.  NULL: 0.  Loop thread
 * only. */
TS_API int ts_notifier_dispatch(ts_notifier *n);

/* ts_notifier_before_poll - for a loop that calls it on every turn, just
 * before it blocks on the fd (epoll_wait, poll, a uv_prepare_t): runs the
 * callbacks of waits this thread completed since the last dispatch (a pass
 * returned or an item put outside dispatch, from a socket handler, to
 * another node of @n), as ts_notifier_dispatch would, and returns how many
 * ran.  From its first call on, such completions made on the calling
 * thread no longer write the fd nor cost a trip through poll: they wait
 * for this call (or ts_notifier_dispatch), so the loop must make it before
 * every wait on the fd.  Completions from other threads still make the fd
 * readable; the fd keeps its meaning for them, and for what this call
 * leaves after a few rounds.  No system call unless something is left.
 * The callback rules are those of dispatch (never inside the returning
 * call, no lock held).  Nothing that returns passes may run between this
 * call and the wait; a thread serving several notifiers calls it on each,
 * again until a round runs nothing.  A call from a callback runs nothing.
 * NULL: 0.  Loop thread only. */
TS_API int ts_notifier_before_poll(ts_notifier *n);

/* ts_notifier_read_counters - copy @n's counters into @out (zeros for NULL
 * @n; NULL @out: no-op).  Loop thread only. */
TS_API void ts_notifier_read_counters(const ts_notifier *n, ts_notifier_counters *out);

/* ts_turnstile_wait_async - ask @t for a turn for @claim without blocking.
 * At once: 0 (*pass issued, @fn will not run), ESHUTDOWN, ECANCELED (@cancel
 * already fired), ETIMEDOUT (@deadline_ns passed and no pass is free), or
 * EINPROGRESS: queued in @claim's place; @fn(node, result, @arg) runs later
 * in ts_notifier_dispatch(@n) with 0 (the pass: ts_async_pass), ETIMEDOUT,
 * ECANCELED or ESHUTDOWN.  A pass granted before the deadline, cancel or
 * close landed is a success, and none is granted after the deadline (not
 * even while the node waits for its loop's next dispatch), as for
 * blocking waits.  EINVAL: @t, @claim, @n,
 * @node, @fn or @pass NULL; EBUSY: @node already pending (both with no side
 * effect; *pass is not written); ENOMEM: the deadline heap could not grow.
 * Otherwise *pass is unissued unless the result is 0.  @cancel must outlive
 * the wait. */
TS_API int ts_turnstile_wait_async(ts_turnstile *t, const ts_claim *claim, int64_t deadline_ns,
				   ts_cancel *cancel, ts_notifier *n, ts_async *node,
				   ts_async_fn fn, void *arg, ts_pass *pass);

/* ts_wait_turn_async - ts_wait_turn for event loops: the turn of @job on its
 * shard, with the job's deadline and cancel token.  Fails open as
 * ts_wait_turn: 0 at once (*pass issued, or unissued when nothing orders the
 * job or the wait was refused), or EINPROGRESS: @fn later gets result 0 and
 * ts_async_pass gives the pass — unissued if the wait timed out, was
 * cancelled or closed.  EINVAL / EBUSY / ENOMEM as ts_turnstile_wait_async. */
TS_API int ts_wait_turn_async(ts_job *job, ts_notifier *n, ts_async *node, ts_async_fn fn,
			      void *arg, ts_pass *pass);

/* ts_waitlist_take_async - take an item from @w without blocking.  At once:
 * 0 (*item: a ready item, whatever the state), TS_CREATE (nothing ready, a
 * creation slot is free and now the caller's), ESHUTDOWN, ECANCELED,
 * ETIMEDOUT, EAGAIN (max_waiters queued); or EINPROGRESS: queued FIFO with
 * the blocking takers; @fn runs later with 0 (ts_async_item), TS_CREATE, ETIMEDOUT,
 * ECANCELED or ESHUTDOWN.  EINVAL: @w, @n, @node, @fn or @item NULL; EBUSY:
 * @node already pending (neither writes *item); ENOMEM: the deadline heap
 * could not grow, or a take that had to queue could not make the place on
 * the ready stack it keeps for ts_async_cancel (nothing queued either
 * way).  Otherwise *item is NULL unless the result is 0.  The
 * pool's own refusals are counted in ts_waitlist_read_counters. */
TS_API int ts_waitlist_take_async(ts_waitlist *w, int64_t deadline_ns, ts_cancel *cancel,
				  ts_notifier *n, ts_async *node, ts_async_fn fn, void *arg,
				  void **item);

/* ts_async_pass - inside @node's callback with result 0 of a turn: the
 * pass (return it with ts_pass_return).  TS_PASS_NONE otherwise. */
TS_API ts_pass ts_async_pass(ts_async *node);

/* ts_async_item - inside @node's callback with result 0 of a take: the
 * item.  NULL otherwise. */
TS_API void *ts_async_item(ts_async *node);

/* ts_async_cancel - withdraw @node's pending wait.  0: withdrawn before it
 * completed; EALREADY: it had completed but was not dispatched yet — a pass
 * it got was returned (to the next waiter in order), an item handed on (to
 * the oldest taker, or the ready stack), a creation slot given back;
 * ENOENT: not pending (never queued, or already dispatched); EINVAL:
 * @node NULL.  On
 * return the library holds no reference to @node and its callback will not
 * run: the caller may free it at once.  Handing on never fails (no
 * allocation: the take kept its place on the ready stack when it queued).
 * Loop thread only. */
TS_API int ts_async_cancel(ts_async *node);

/* ts_async_result - how @node's last queued wait (one whose call returned
 * EINPROGRESS) completed: 0 (granted: a pass or an item), TS_CREATE (a
 * creation slot), ETIMEDOUT, ECANCELED or ESHUTDOWN.  After
 * ts_async_cancel returned EALREADY it tells what was handed on (0: the
 * pass went to the next waiter, the item to the oldest taker; TS_CREATE:
 * the slot went back) from an ending (ESHUTDOWN, ECANCELED, ETIMEDOUT:
 * nothing was handed on).  In and after the callback it is the callback's
 * result, except that a ts_wait_turn_async node, whose callback is told 0
 * whatever happened, tells here what did.  ENOENT: the wait is pending,
 * was withdrawn before it completed (ts_async_cancel returned 0), or no
 * wait on @node ever queued; EINVAL: @node NULL.  Loop thread only. */
TS_API int ts_async_result(const ts_async *node);

/* Private: the locked path of ts_turnstile_wait_async, exported for its
 * inlined fast path only. */
TS_API int ts_private_wait_async_slow(ts_turnstile *t, const ts_claim *claim, int64_t deadline_ns,
				      ts_cancel *cancel, ts_notifier *n, ts_async *node,
				      ts_async_fn fn, void *arg, ts_pass *pass);

/* Private: ts_wait_turn_async past its inlined fast path. */
TS_API int ts_private_wait_turn_async_slow(ts_job *job, ts_notifier *n, ts_async *node,
					   ts_async_fn fn, void *arg, ts_pass *pass);

TS_END_DECLS

#ifndef __cplusplus
/* A turn granted at once costs what a blocking wait's fast path costs: the
 * same lock-free take, inlined (see turnstile/fastpath.h), after the bad
 * input checks; everything else goes to the library. */
#define TS_PRIVATE_WAIT_ASYNC_BODY                                            \
	if (t && claim && n && node && fn && pass && !node->private_pending && \
	    ts_private_take_fast(t, cancel, pass))                             \
		return 0;                                                      \
	return ts_private_wait_async_slow(t, claim, deadline_ns, cancel, n, node, fn, arg, pass);

/* A job's turn on the turnstile cached in it (its first turn on a shard
 * goes to the library), granted at once: the same lock-free take. */
#define TS_PRIVATE_WAIT_TURN_ASYNC_BODY                                       \
	if (job && n && node && fn && pass && !node->private_pending) {       \
		ts_turnstile *t = atomic_load_explicit(&job->private_turnstile, \
						       memory_order_acquire); \
		if (t && ts_private_take_fast(t, job->private_cancel, pass))  \
			return 0;                                              \
	}                                                                     \
	return ts_private_wait_turn_async_slow(job, n, node, fn, arg, pass);

#ifdef TS_PRIVATE_INLINE_FAST_PATHS
TS_PRIVATE_INLINE int ts_wait_turn_async(ts_job *job, ts_notifier *n, ts_async *node,
					 ts_async_fn fn, void *arg, ts_pass *pass)
{
	TS_PRIVATE_WAIT_TURN_ASYNC_BODY
}

TS_PRIVATE_INLINE int ts_turnstile_wait_async(ts_turnstile *t, const ts_claim *claim,
					      int64_t deadline_ns, ts_cancel *cancel,
					      ts_notifier *n, ts_async *node, ts_async_fn fn,
					      void *arg, ts_pass *pass)
{
	TS_PRIVATE_WAIT_ASYNC_BODY
}
#endif
#endif /* !__cplusplus */

#endif
