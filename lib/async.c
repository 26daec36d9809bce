/* SPDX-License-Identifier: MIT */
/* Async nodes: a wait's life on its loop thread — queued, pending,
 * withdrawn or dispatched — and the event-loop entry points, built on the
 * queues' primitives (the queues know no loop).  The protocol: lib/async.h. */
#include <turnstile/async.h>

#include <errno.h>
#include <stddef.h>

#include <turnstile/turnstile.h>
#include <turnstile/waitlist.h>

#include "async.h"
#include "probe.h"

/* The node's telling operations (waiter.h): a grant, close or fire is
 * pushed to its notifier; a token's fire withdraws it from its queue. */

#define NODE_OF(w, member) ((struct async_node *)(void *)((char *)(w) - offsetof(struct async_node, member)))

static void tell_turn(waiter *w, uint32_t outcome, struct wakeups *wk)
{
	ts_lib_async_complete(NODE_OF(w, q.turn.w), outcome, wk);
}

static void fire_turn(waiter *w, struct wakeups *wk)
{
	ts_lib_async_withdraw(NODE_OF(w, q.turn.w), WAITER_CANCELLED, wk);
}

static void tell_take(waiter *w, uint32_t outcome, struct wakeups *wk)
{
	ts_lib_async_complete(NODE_OF(w, q.take.w), outcome, wk);
}

static void fire_take(waiter *w, struct wakeups *wk)
{
	ts_lib_async_withdraw(NODE_OF(w, q.take.w), WAITER_CANCELLED, wk);
}

/* A doorbell wait's fire cannot take the segment's lock under the token's:
 * it makes its loop look, and dispatch withdraws it there. */
static void fire_shared(waiter *w, struct wakeups *wk)
{
	ts_lib_notifier_poke(NODE_OF(w, q.turn.w)->notifier, wk);
}

static const struct waiter_ops async_turn_ops = { tell_turn, fire_turn, true };
static const struct waiter_ops async_shared_ops = { tell_turn, fire_shared, true };
static const struct waiter_ops async_take_ops = { tell_take, fire_take, true };

int ts_lib_async_check(ts_notifier *n, ts_async *node, ts_async_fn fn)
{
	if (!n || !node || !fn)
		return EINVAL;
	return async_of(node)->pending ? EBUSY : 0;
}

void ts_lib_async_prepare(struct async_node *a, enum async_kind kind, void *object,
			  ts_notifier *n, ts_async_fn fn, void *arg, ts_cancel *cancel,
			  int64_t start_ns, int64_t deadline_ns)
{
	a->kind = kind;
	a->object = object;
	a->notifier = n;
	a->fn = fn;
	a->arg = arg;
	a->cancel = cancel;
	a->start_ns = start_ns;
	a->deadline_ns = deadline_ns;
	a->heap_slot = 0;
	a->stack_next = a->ready_prev = a->ready_next = NULL;
	a->pass = (ts_pass)TS_PASS_NONE;
	a->item = NULL;
	a->pending = a->in_ready = a->fail_open = false;
	waiter_init(async_waiter(a), kind == ASYNC_TURN	 ? &async_turn_ops
				     : kind == ASYNC_TAKE ? &async_take_ops
							  : &async_shared_ops);
	a->in_remote = false;
}

/* A doorbell wait, on its loop thread: settled in the segment now.  As for
 * a queue's withdraw, a state below final means it was withdrawn now;
 * a final one means it is on its notifier's stack — pushed here, as a
 * granter in this process would have. */
static uint32_t withdraw_shared(struct async_node *a, uint32_t outcome)
{
	if (!a->in_remote)
		return atomic_load_explicit(&a->q.turn.w.state, memory_order_acquire);
	uint32_t s = ts_lib_shared_settle(a->object, a->slot, outcome != 0);
	if (s == WAITER_QUEUED && !outcome)
		return s; /* still queued: a look that found nothing */
	ts_lib_notifier_remote_remove(a->notifier, a);
	if (s == WAITER_QUEUED) {
		atomic_store_explicit(&a->q.turn.w.state, outcome, memory_order_relaxed);
		return s;
	}
	struct wakeups wk;
	wakeups_init(&wk);
	/* named now, by the registration the pass went into (not by a child
	 * of fork that may dispatch or cancel it later) */
	a->pass_name = ts_lib_shared_pass_name(a->object);
	atomic_store_explicit(&a->q.turn.w.state, s, memory_order_release);
	ts_lib_notifier_push(a, &wk);
	wakeups_flush(&wk);
	return s;
}

uint32_t ts_lib_async_withdraw(struct async_node *a, uint32_t outcome, struct wakeups *wk)
{
	switch (a->kind) {
	case ASYNC_TURN:
		return ts_lib_turnstile_withdraw(a->object, &a->q.turn, outcome, wk);
	case ASYNC_TAKE:
		return ts_lib_waitlist_withdraw(a->object, &a->q.take, outcome, wk);
	default:
		return withdraw_shared(a, outcome);
	}
}

/* The doorbell's look (dispatch): settle @a if its slot is final or its
 * token fired; either way it then goes to its callback. */
void ts_lib_async_look(struct async_node *a)
{
	bool fired = cancel_fired_now(a->cancel);
	if (!fired && !ts_lib_shared_slot_final(a->object, a->slot))
		return;
	if (withdraw_shared(a, fired ? WAITER_CANCELLED : 0) < WAITER_FINAL) {
		struct wakeups wk;
		wakeups_init(&wk);
		ts_lib_notifier_push(a, &wk); /* withdrawn now: ECANCELED */
		wakeups_flush(&wk);
	}
}

/* Pending from here; a grant may already have pushed it, which is fine:
 * it stays pending until dispatched.  The cancel token is watched only
 * now, so a fire that walked the token's list before that did not see the
 * node: look at the flag after watching (the fire sets it before it
 * walks), and withdraw the node ourselves. */
int ts_lib_async_begin(struct async_node *a)
{
	ts_notifier *n = a->notifier;

	a->pending = true;
	a->completed = false; /* a new queued wait: ts_async_result's from now on */
	ts_lib_notifier_track(n, a);
	TS_PROBE2(async__queue, a->object, a->kind);
	if (!a->cancel)
		return EINPROGRESS;
	ts_lib_cancel_watch(a->cancel, async_waiter(a));
	if (!cancel_fired_now(a->cancel) || ts_lib_async_withdraw(a, WAITER_CANCELLED, NULL) >= WAITER_FINAL)
		return EINPROGRESS;
	ts_lib_cancel_unwatch(a->cancel, async_waiter(a));
	ts_lib_notifier_untrack(n, a);
	a->pending = false;
	return ECANCELED;
}

/* A completed node is being cancelled: hand on what it got, so nothing is
 * lost — the pass to the next waiter in order, the item to the oldest
 * taker (or the ready stack), the slot back.  None of these can fail. */
static void hand_on(struct async_node *a, uint32_t state)
{
	if (state == WAITER_GRANTED && a->kind != ASYNC_TAKE) {
		ts_pass p = { a->kind == ASYNC_SHARED_TURN ? a->pass_name : a->object, 0 };
		ts_pass_return(&p);
	} else if (state == WAITER_GRANTED) {
		ts_lib_waitlist_hand_back(a->object, a->q.take.item);
	} else if (state == WAITER_CREATE) {
		ts_lib_waitlist_give_back_slot(a->object);
	}
}

/* OWNERSHIP (async.h): under the queue lock, a state below final means
 * the node is still queued and we unlink it; a final one means it is on
 * the stack (collect it) or already on the ready list. */
TS_API int ts_async_cancel(ts_async *node)
{
	if (!node)
		return EINVAL; /* bad input, as DESIGN.md's rule says */
	struct async_node *a = async_of(node);
	int r = 0;

	if (!a->pending)
		return ENOENT;
	ts_notifier *n = a->notifier;
	uint32_t s = ts_lib_async_withdraw(a, WAITER_CANCELLED, NULL);
	if (s >= WAITER_FINAL) {
		if (!a->in_ready)
			ts_lib_notifier_collect(n);
		ts_lib_notifier_unready(n, a);
		s = atomic_load_explicit(&async_waiter(a)->state, memory_order_acquire);
		hand_on(a, s);
		a->outcome = ts_lib_async_outcome(s);
		a->completed = true;
		r = EALREADY;
	}
	if (a->cancel)
		ts_lib_cancel_unwatch(a->cancel, async_waiter(a));
	ts_lib_notifier_untrack(n, a);
	a->pending = false;
	TS_PROBE2(async__cancel, a->object, r);
	return r;
}

int ts_lib_async_outcome(uint32_t state)
{
	switch (state) {
	case WAITER_GRANTED:
		return 0;
	case WAITER_CREATE:
		return TS_CREATE;
	case WAITER_CLOSED:
		return ESHUTDOWN;
	case WAITER_CANCELLED:
		return ECANCELED;
	default:
		return ETIMEDOUT;
	}
}

/* Loop thread only, as every call on a node: a.completed and a.outcome
 * are written by the loop (dispatch, ts_async_cancel, a new wait). */
TS_API int ts_async_result(const ts_async *node)
{
	if (!node)
		return EINVAL;
	const struct async_node *a = (const struct async_node *)(const void *)node;
	return a->completed && !a->pending ? a->outcome : ENOENT;
}

TS_API ts_pass ts_async_pass(ts_async *node)
{
	struct async_node *a = node ? async_of(node) : NULL;
	return a && a->kind != ASYNC_TAKE ? a->pass : (ts_pass)TS_PASS_NONE;
}

TS_API void *ts_async_item(ts_async *node)
{
	struct async_node *a = node ? async_of(node) : NULL;
	return a && a->kind == ASYNC_TAKE ? a->item : NULL;
}

/* --- turnstile waits ---------------------------------------------------- */

/* On a process-shared turnstile: the same precedence; the wait queues as a
 * waiter slot told by the notifier's doorbell. */
static int wait_async_shared(ts_turnstile *t, const ts_claim *claim, int64_t deadline_ns,
			     ts_cancel *cancel, ts_notifier *n, ts_async *node, ts_async_fn fn,
			     void *arg, ts_pass *pass, bool fail_open)
{
	uint64_t bell;
	int r;

	*pass = (ts_pass)TS_PASS_NONE;
	if ((r = ts_lib_notifier_doorbell(n, &bell)) || (deadline_ns && (r = ts_lib_notifier_reserve(n))))
		return r;
	struct async_node *a = async_of(node);
	int64_t now = ts_now_ns();
	ts_lib_async_prepare(a, ASYNC_SHARED_TURN, t, n, fn, arg, cancel, now, deadline_ns);
	a->fail_open = fail_open;
	r = ts_lib_shared_enqueue_async(t, claim, deadline_ns, cancel, bell, &a->slot, pass);
	if (r != EINPROGRESS)
		return r;
	ts_lib_notifier_remote_add(n, a);
	return ts_lib_async_begin(a);
}

/* Precedence as for blocking waits: closed, fired cancel, free pass, then
 * queue (an expired deadline refuses only then).  A pass granted later
 * reaches the node under the lock, through waiter_grant, as any other. */
int ts_lib_turnstile_wait_async(ts_turnstile *t, const ts_claim *claim, int64_t deadline_ns,
				ts_cancel *cancel, ts_notifier *n, ts_async *node,
				ts_async_fn fn, void *arg, ts_pass *pass, bool fail_open)
{
	int r = ts_lib_async_check(n, node, fn);
	if (r)
		return r;
	if (t->shared)
		return wait_async_shared(t, claim, deadline_ns, cancel, n, node, fn, arg, pass,
					 fail_open);
	if (ts_private_take_fast(t, cancel, pass))
		return 0;
	*pass = (ts_pass)TS_PASS_NONE;
	if (atomic_load_explicit(&t->word, memory_order_relaxed) & WORD_CLOSED)
		return ESHUTDOWN;
	if (cancel_fired_now(cancel))
		return ECANCELED;
	if (deadline_ns && (r = ts_lib_notifier_reserve(n)))
		return r;
	struct async_node *a = async_of(node);
	int64_t now = ts_now_ns();
	ts_lib_async_prepare(a, ASYNC_TURN, t, n, fn, arg, cancel, now, deadline_ns);
	a->fail_open = fail_open;
	a->q.turn.link.key = *claim;
	r = ts_lib_turnstile_enqueue(t, &a->q.turn, now, deadline_ns);
	if (r == 0)
		pass->private_turnstile = t;
	return r == EINPROGRESS ? ts_lib_async_begin(a) : r;
}

__attribute__((noinline, cold)) TS_API int ts_private_wait_async_slow(
	ts_turnstile *t, const ts_claim *claim, int64_t deadline_ns, ts_cancel *cancel,
	ts_notifier *n, ts_async *node, ts_async_fn fn, void *arg, ts_pass *pass)
{
	if (!pass)
		return EINVAL;
	if (!t || !claim)
		return EINVAL;
	return ts_lib_turnstile_wait_async(t, claim, deadline_ns, cancel, n, node, fn, arg,
					   pass, false);
}

TS_API int ts_turnstile_wait_async(ts_turnstile *t, const ts_claim *claim, int64_t deadline_ns,
				   ts_cancel *cancel, ts_notifier *n, ts_async *node,
				   ts_async_fn fn, void *arg, ts_pass *pass)
{
	TS_PRIVATE_WAIT_ASYNC_BODY
}

/* --- waitlist takes ------------------------------------------------------- */

TS_API int ts_waitlist_take_async(ts_waitlist *w, int64_t deadline_ns, ts_cancel *cancel,
				  ts_notifier *ntf, ts_async *node, ts_async_fn fn, void *arg,
				  void **item)
{
	int r;

	if (!item || !w)
		return EINVAL;
	if ((r = ts_lib_async_check(ntf, node, fn)))
		return r;
	*item = NULL;
	/* Room for the deadline, made outside the lock; a failure matters
	 * only if the taker has to queue (a ready item still wins). */
	int no_room = deadline_ns ? ts_lib_notifier_reserve(ntf) : 0;
	struct async_node *a = async_of(node);
	ts_lib_async_prepare(a, ASYNC_TAKE, w, ntf, fn, arg, cancel, ts_now_ns(), deadline_ns);
	r = ts_lib_waitlist_enqueue_loop(w, &a->q.take, deadline_ns, cancel, no_room, item);
	_Static_assert(TAKE_SLOT == TS_CREATE, "a creation slot reads as TS_CREATE");
	return r == EINPROGRESS ? ts_lib_async_begin(a) : r;
}
