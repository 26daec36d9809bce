/* SPDX-License-Identifier: MIT */
/* Private: event-loop nodes and their notifier (public side: async.h).
 *
 * An async node is a queue node like a parked thread's — the same
 * struct turn_waiter or struct taker, in the same queue under the same
 * lock — whose waiter carries its own telling operations (waiter_ops:
 * tell and fire, async_turn_ops / async_take_ops in async.c).  The one
 * place that differs is how a grant is told (waiter_grant in waiter.h
 * calls the node's tell; the queues never name a notifier):
 *
 *   granter, under the queue lock:   state = outcome (final)
 *                                    hold the notifier (holds++)
 *                                    push the node on n->stack
 *                                    if signalled 0 -> 1: owe a kick
 *   granter, after unlocking:        kick: write the eventfd
 *                                    release the hold (holds--)
 *   loop, in dispatch:               drain the eventfd, signalled = 1,
 *                                    take the whole stack, run callbacks
 *                                    (again while more were pushed, a
 *                                    few rounds), signalled = 0, and if
 *                                    anything is left: signalled 0 -> 1,
 *                                    write the eventfd
 *
 * OWNERSHIP.  While a node is linked in a queue, that queue's lock owns
 * its links, as for any waiter.  The final state is decided exactly once,
 * under that lock, by whoever gets there first: a grant, a close, a cancel
 * fire (all of which push the node), or the loop itself withdrawing it
 * (ts_async_cancel, a deadline: no push).  So a loop that takes the queue
 * lock and finds a final state knows the node is already on its stack or
 * its ready list: nothing can still be on its way to it.  The push is the
 * granter's last touch of the node; its hold keeps the NOTIFIER alive
 * until its kick is written (ts_notifier_free waits for holds == 0).
 *
 * NO LOST WAKE-UP.  Only dispatch's final exchange ever sets signalled
 * back to 0, and dispatch looks at the stack (and its ready list) AFTER
 * that exchange.  A granter pushes BEFORE its own exchange, so:
 *  - finding 0, it writes the fd itself;
 *  - finding 1, its push came before some dispatch's final clear, and
 *    that dispatch's look finds it and writes the fd for it.
 * Holding signalled at 1 while dispatch runs only saves writes (the model
 * passes without it), and draining the eventfd before taking the stack
 * only keeps a write that was already served from waking the loop once
 * more.  The first version cleared signalled at the START of dispatch and
 * never looked again: a later push then found 1 with the fd drained, and
 * the loop slept forever (the async benchmark hung on it;
 * tests/model/async.pml keeps that dispatch as a mutation it catches).
 *
 * LOOP-LOCAL.  A notifier whose loop calls ts_notifier_before_poll on
 * every turn records that thread (a number never reused).  A push made by
 * that thread (a return or put from its own socket handlers or callbacks)
 * owes no kick: the same thread runs before_poll (or dispatch) before it
 * can block, and that call looks at the stack.  It still holds the
 * notifier, and reads the recorded thread again after its push: a loop
 * that took the notifier over meanwhile either sees the node in its own
 * look or is kicked (ts_lib_notifier_push).  signalled is left alone, so
 * the argument above still covers every push from another thread.
 *
 * Everything else in the notifier and in a pending node (ready list,
 * deadline heap, pending count, flags) belongs to the loop thread alone. */
#ifndef TS_LIB_ASYNC_H
#define TS_LIB_ASYNC_H

#include <turnstile/async.h>

#include "turnstile_impl.h"
#include "waiter.h"
#include "waitlist_impl.h"

/* ASYNC_SHARED_TURN: a turn on a process-shared turnstile.  Its queue is a
 * waiter slot in the segment, granted from any process, which rings the
 * notifier's doorbell (doorbell.h): its waiter here (q.turn.w) is only the
 * loop's record of the outcome and its registration on the cancel token. */
enum async_kind { ASYNC_TURN = 1, ASYNC_TAKE = 2, ASYNC_SHARED_TURN = 3 };

struct async_node {
	bool pending;              /* ts_async's private_pending: read inline */
	union {
		struct turn_waiter turn; /* ASYNC_TURN: in the turnstile's skiplist */
		struct taker take;       /* ASYNC_TAKE: in the waitlist's queue */
	} q;
	struct ts_notifier *notifier;
	void *object;              /* the ts_turnstile or ts_waitlist */
	ts_async_fn fn;
	void *arg;
	ts_cancel *cancel;         /* registered on it while pending */
	int64_t start_ns, deadline_ns;
	size_t heap_slot;          /* 1 + index in the deadline heap; 0: none */
	struct async_node *stack_next;              /* the completion stack */
	struct async_node *ready_prev, *ready_next; /* the loop's ready list */
	ts_pass pass;              /* the callback's pass (result 0 of a turn) */
	void *item;                /* the callback's item (result 0 of a take) */
	unsigned char kind;
	bool in_ready, fail_open;
	/* ts_async_result: the last queued wait's outcome, once it completed
	 * (false in a zeroed node: ENOENT) */
	bool completed;
	int outcome;
	/* ASYNC_SHARED_TURN, the loop thread's alone: */
	bool in_remote;             /* on the notifier's list of doorbell waits */
	uint32_t slot;              /* its waiter slot in the segment */
	ts_turnstile *pass_name;    /* what its pass names, fixed when granted */
	struct async_node *remote_prev, *remote_next;
};
_Static_assert(sizeof(struct async_node) <= sizeof(ts_async),
	       "ts_async's private storage holds an async node");
_Static_assert(_Alignof(struct async_node) <= _Alignof(ts_async),
	       "ts_async is aligned for an async node");
_Static_assert(offsetof(struct async_node, pending) == offsetof(ts_async, private_pending),
	       "the inline fast path reads a node's pending flag");

static inline struct async_node *async_of(ts_async *node)
{
	return (struct async_node *)(void *)node;
}

static inline waiter *async_waiter(struct async_node *a)
{
	return a->kind == ASYNC_TAKE ? &a->q.take.w : &a->q.turn.w;
}

/* async.c — a node's life on its loop thread. */

/* The bad input every _async call refuses first: EINVAL, EBUSY or 0. */
int ts_lib_async_check(ts_notifier *n, ts_async *node, ts_async_fn fn);

/* Fill @a for a wait on @object and init its waiter (the queue links are
 * the caller's to set).  Not pending yet. */
void ts_lib_async_prepare(struct async_node *a, enum async_kind kind, void *object,
			  ts_notifier *n, ts_async_fn fn, void *arg, ts_cancel *cancel,
			  int64_t start_ns, int64_t deadline_ns);

/* @a was queued (EINPROGRESS): make it pending, watch its deadline and its
 * cancel token.  Returns EINPROGRESS, or ECANCELED if the token fired
 * before it was watched and the node could still be withdrawn. */
int ts_lib_async_begin(struct async_node *a);

/* A doorbell wait, looked at by dispatch: settled and pushed if its slot
 * is final or its token fired, else left alone. */
void ts_lib_async_look(struct async_node *a);

/* Withdraw @a from its queue if it is still there, giving it the final
 * state @outcome, pushed (@wk non-NULL: another thread's fire) or not (the
 * loop itself: a deadline, ts_async_cancel).  Returns the state found under
 * the lock: below WAITER_FINAL means it was withdrawn now. */
uint32_t ts_lib_async_withdraw(struct async_node *a, uint32_t outcome, struct wakeups *wk);

/* The result a final @state stands for (0, TS_CREATE, ESHUTDOWN,
 * ECANCELED, ETIMEDOUT), before failing open. */
int ts_lib_async_outcome(uint32_t state);

/* notifier.c, the node's tell (under its queue's lock): publish @outcome
 * and push the node onto its notifier's completion stack. */
void ts_lib_async_complete(struct async_node *a, uint32_t outcome, struct wakeups *wk);

/* ts_turnstile_wait_async, failing open for jobs (job.c). */
int ts_lib_turnstile_wait_async(ts_turnstile *t, const ts_claim *claim, int64_t deadline_ns,
				ts_cancel *cancel, ts_notifier *n, ts_async *node,
				ts_async_fn fn, void *arg, ts_pass *pass, bool fail_open);

/* notifier.c — doorbell waits (ASYNC_SHARED_TURN), on the loop thread:
 * the doorbell's id (bound on first use: 0 or an errno); the list of
 * doorbell waits dispatch looks at when the doorbell rings, a token
 * fires or recover_ns / 2 passes; a token's fire (under its lock) only
 * makes dispatch look (poke); push a node settled by the loop itself onto
 * its own completion stack. */
int ts_lib_notifier_doorbell(ts_notifier *n, uint64_t *id);
void ts_lib_notifier_remote_add(ts_notifier *n, struct async_node *a);
void ts_lib_notifier_remote_remove(ts_notifier *n, struct async_node *a);
void ts_lib_notifier_poke(ts_notifier *n, struct wakeups *wk);
void ts_lib_notifier_push(struct async_node *a, struct wakeups *wk);

/* notifier.c — the loop's side. */
void ts_lib_notifier_track(ts_notifier *n, struct async_node *a); /* pending++, deadline */
void ts_lib_notifier_untrack(ts_notifier *n, struct async_node *a);
void ts_lib_notifier_collect(ts_notifier *n);  /* stack -> ready list */
void ts_lib_notifier_unready(ts_notifier *n, struct async_node *a);
int ts_lib_notifier_reserve(ts_notifier *n);  /* room for one more deadline */

#endif
