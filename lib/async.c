/* SPDX-License-Identifier: MIT */
/* Async nodes: a wait's life on its loop thread — queued, pending,
 * withdrawn or dispatched.  The protocol: lib/async.h. */
#include <turnstile/async.h>

#include <errno.h>

#include "async.h"
#include "probe.h"

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
	waiter_init(async_waiter(a), a);
}

static uint32_t withdraw(struct async_node *a, uint32_t outcome, struct wakeups *wk)
{
	return a->kind == ASYNC_TURN ? ts_lib_turnstile_withdraw(a, outcome, wk)
				     : ts_lib_waitlist_withdraw(a, outcome, wk);
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
	ts_lib_notifier_track(n, a);
	TS_PROBE2(async__queue, a->object, a->kind);
	if (!a->cancel)
		return EINPROGRESS;
	ts_lib_cancel_watch(a->cancel, async_waiter(a));
	if (!cancel_fired_now(a->cancel) || withdraw(a, WAITER_CANCELLED, NULL) >= WAITER_FINAL)
		return EINPROGRESS;
	ts_lib_cancel_unwatch(a->cancel, async_waiter(a));
	ts_lib_notifier_untrack(n, a);
	a->pending = false;
	return ECANCELED;
}

void ts_lib_async_fire(struct async_node *a, struct wakeups *wk)
{
	withdraw(a, WAITER_CANCELLED, wk);
}

/* A completed node is being cancelled: hand on what it got, so nothing is
 * lost — the pass to the next waiter in order, the item to the oldest
 * taker (or the ready stack), the slot back.  None of these can fail. */
static void hand_on(struct async_node *a, uint32_t state)
{
	if (state == WAITER_GRANTED && a->kind == ASYNC_TURN) {
		ts_pass p = { a->object, 0 };
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
	struct async_node *a = node ? async_of(node) : NULL;
	int r = 0;

	if (!a || !a->pending)
		return ENOENT;
	ts_notifier *n = a->notifier;
	uint32_t s = withdraw(a, WAITER_CANCELLED, NULL);
	if (s >= WAITER_FINAL) {
		if (!a->in_ready)
			ts_lib_notifier_collect(n);
		ts_lib_notifier_unready(n, a);
		s = atomic_load_explicit(&async_waiter(a)->state, memory_order_acquire);
		hand_on(a, s);
		r = EALREADY;
	}
	if (a->cancel)
		ts_lib_cancel_unwatch(a->cancel, async_waiter(a));
	ts_lib_notifier_untrack(n, a);
	a->pending = false;
	TS_PROBE2(async__cancel, a->object, r);
	return r;
}

TS_API ts_pass ts_async_pass(ts_async *node)
{
	struct async_node *a = node ? async_of(node) : NULL;
	return a && a->kind == ASYNC_TURN ? a->pass : (ts_pass)TS_PASS_NONE;
}

TS_API void *ts_async_item(ts_async *node)
{
	struct async_node *a = node ? async_of(node) : NULL;
	return a && a->kind == ASYNC_TAKE ? a->item : NULL;
}
