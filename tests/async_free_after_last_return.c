/* SPDX-License-Identifier: MIT */
/* Free after the last return is safe for event-loop waiters too (DESIGN.md,
 * "Lifetimes"; lib/async.h): inside the callback that ends its last wait,
 * the loop may return the pass, put the item, destroy its cancel token and
 * free the turnstile or waitlist, and right after dispatch free its
 * notifier, while the thread that granted, put, resized, closed, discarded
 * or fired is still inside that call.
 *
 * The loop polls ts_notifier_dispatch, so it runs the callback as soon as
 * the node is pushed, under the granter's lock.  Test hooks then hold the
 * granter in each of its windows — before its unlock (TS_HOOK_UNLOCKING),
 * before the fire's nudge (TS_HOOK_FIRING) and, after every lock is
 * dropped, before its fd write and the end of its hold on the notifier
 * (TS_HOOK_KICKING) — until the loop has freed everything, within
 * WINDOW_NS.  A loop that finishes inside a window freed what the granter
 * was about to touch: counted (ASan also reports the access). */
#include <errno.h>
#include <stdlib.h>

#include "hook.h"
#include "testutil.h"

#define ROUNDS 300
#define WINDOW_NS 300000
#define CROWD 40 /* more than one wake batch */

static _Atomic(void *) target;   /* the object whose release is widened */
static _Atomic(void *) target_n; /* its notifier */
static _Atomic int loop_done;    /* the loop freed everything */
static _Atomic int early, windows;

static void wait_out_window(void)
{
	atomic_fetch_add(&windows, 1);
	int64_t end = ts_now_ns() + WINDOW_NS;
	while (ts_now_ns() < end)
		if (atomic_load(&loop_done)) {
			atomic_fetch_add(&early, 1);
			return;
		}
}

static void widen(enum ts_hook_point point, void *obj)
{
	if (!obj)
		return;
	if ((point == TS_HOOK_UNLOCKING || point == TS_HOOK_FIRING) && obj == atomic_load(&target))
		wait_out_window();
	else if (point == TS_HOOK_KICKING && obj == atomic_load(&target_n))
		wait_out_window();
}

static const ts_claim claim = { 0, 0, 0 };

enum how {
	TURN_BY_RETURN,
	TURN_BY_RESIZE,
	TURN_BY_CLOSE,
	TURN_BY_FIRE,
	TAKE_BY_PUT,
	TAKE_BY_DISCARD,
	TAKE_BY_CLOSE,
	TAKE_BY_FIRE,
};

struct round {
	enum how how;
	int nodes; /* 1, or CROWD */
	ts_turnstile *t;
	ts_waitlist *w;
	ts_cancel *token;
	ts_notifier *n;
	ts_async *node;
	_Atomic int queued; /* the loop queued every node */
	int outstanding;    /* loop thread only */
	bool bad;
};

static bool is_turn(enum how h)
{
	return h <= TURN_BY_FIRE;
}

static int expected(enum how h)
{
	switch (h) {
	case TURN_BY_CLOSE:
	case TAKE_BY_CLOSE:
		return ESHUTDOWN;
	case TURN_BY_FIRE:
	case TAKE_BY_FIRE:
		return ECANCELED;
	case TAKE_BY_DISCARD:
		return TS_CREATE;
	default:
		return 0;
	}
}

/* The callback: hand back what it got; the last one frees the object and
 * the token (the notifier is freed after dispatch returns). */
static void done(ts_async *node, int r, void *arg)
{
	struct round *rd = arg;

	if (r != expected(rd->how))
		rd->bad = true;
	if (r == 0 && is_turn(rd->how)) {
		ts_pass p = ts_async_pass(node);
		ts_pass_return(&p);
	} else if (r == 0) {
		ts_waitlist_put(rd->w, ts_async_item(node));
	} else if (r == TS_CREATE) {
		ts_waitlist_discard(rd->w);
	}
	if (--rd->outstanding)
		return;
	if (rd->t)
		ts_turnstile_free(rd->t);
	if (rd->w) {
		void *item;
		while (ts_waitlist_try_take(rd->w, &item))
			;
		ts_waitlist_free(rd->w);
	}
	if (rd->token) {
		ts_cancel_destroy(rd->token);
		free(rd->token);
	}
	free(rd->node);
}

static void *loop(void *arg)
{
	struct round *rd = arg;

	rd->outstanding = rd->nodes;
	for (int i = 0; i < rd->nodes; i++) {
		ts_pass p = TS_PASS_NONE;
		void *item = NULL;
		int r = is_turn(rd->how)
				? ts_turnstile_wait_async(rd->t, &claim, 0, rd->token, rd->n,
							  &rd->node[i], done, rd, &p)
				: ts_waitlist_take_async(rd->w, 0, rd->token, rd->n, &rd->node[i],
							 done, rd, &item);
		if (r != EINPROGRESS)
			rd->bad = true;
	}
	atomic_store(&rd->queued, 1);
	int64_t end = ts_now_ns() + TEST_PATIENCE_NS;
	while (rd->outstanding && ts_now_ns() < end)
		ts_notifier_dispatch(rd->n);
	if (rd->outstanding || ts_notifier_free(rd->n) != 0)
		rd->bad = true;
	atomic_store(&loop_done, 1);
	return NULL;
}

static void rounds(enum how how, int nodes, int count)
{
	atomic_store(&early, 0);
	atomic_store(&windows, 0);
	for (int i = 0; i < count; i++) {
		struct round *rd = calloc(1, sizeof(*rd));
		void *held = NULL;
		ts_pass pass;
		pthread_t th;

		rd->how = how;
		rd->nodes = nodes;
		rd->n = ts_notifier_new();
		rd->node = calloc((size_t)nodes, sizeof(ts_async));
		cr_assert(rd->n && rd->node);
		if (how == TURN_BY_FIRE || how == TAKE_BY_FIRE) {
			rd->token = malloc(sizeof(ts_cancel));
			ts_cancel_init(rd->token);
		}
		if (is_turn(how)) {
			rd->t = ts_turnstile_new(how == TURN_BY_RETURN ? 1 : 0);
			if (how == TURN_BY_RETURN)
				cr_assert_eq(ts_turnstile_wait(rd->t, &claim, 0, NULL, &pass), 0);
		} else {
			rd->w = ts_waitlist_new(1, 0);
			cr_assert_eq(ts_waitlist_take(rd->w, &held, NULL, NULL, 0, NULL), 0);
		}
		/* everything the releaser touches, read before it starts */
		ts_turnstile *t = rd->t;
		ts_waitlist *w = rd->w;
		ts_cancel *token = rd->token;
		atomic_store(&loop_done, 0);
		start_thread(&th, loop, rd);
		WAIT_FOR(atomic_load(&rd->queued));
		atomic_store(&target, t ? (void *)t : w);
		if (token)
			atomic_store(&target, token);
		atomic_store(&target_n, rd->n);
		atomic_store(&ts_hook, widen);
		switch (how) {
		case TURN_BY_RETURN:
			ts_pass_return(&pass);
			break;
		case TURN_BY_RESIZE:
			ts_turnstile_resize(t, nodes);
			break;
		case TURN_BY_CLOSE:
			ts_turnstile_close(t);
			break;
		case TAKE_BY_PUT:
			ts_waitlist_put(w, held);
			break;
		case TAKE_BY_DISCARD:
			ts_waitlist_discard(w);
			break;
		case TAKE_BY_CLOSE:
			ts_waitlist_close(w);
			break;
		case TURN_BY_FIRE:
		case TAKE_BY_FIRE:
			ts_cancel_fire(token);
			break;
		}
		atomic_store(&ts_hook, NULL);
		atomic_store(&target, NULL);
		atomic_store(&target_n, NULL);
		join_bounded(th); /* everything is gone now */
		cr_assert(!rd->bad, "round %d: a wrong result or a notifier left busy", i);
		free(rd);
	}
	cr_assert_gt(atomic_load(&windows), 0, "no round reached a window");
	cr_assert_eq(atomic_load(&early), 0,
		     "%d loops freed what a granter was still about to touch (%d windows)",
		     atomic_load(&early), atomic_load(&windows));
}

Test(async_free_after_last_return, turnstile_freed_in_the_callback_of_a_return)
{
	rounds(TURN_BY_RETURN, 1, ROUNDS);
}

Test(async_free_after_last_return, turnstile_freed_in_the_callback_of_a_resize)
{
	rounds(TURN_BY_RESIZE, 1, ROUNDS);
}

Test(async_free_after_last_return, turnstile_freed_in_the_callback_of_a_close)
{
	rounds(TURN_BY_CLOSE, 1, ROUNDS);
}

Test(async_free_after_last_return, token_and_turnstile_freed_in_the_callback_of_a_fire)
{
	rounds(TURN_BY_FIRE, 1, ROUNDS);
}

Test(async_free_after_last_return, waitlist_freed_in_the_callback_of_a_put)
{
	rounds(TAKE_BY_PUT, 1, ROUNDS);
}

Test(async_free_after_last_return, waitlist_freed_in_the_callback_of_a_discard)
{
	rounds(TAKE_BY_DISCARD, 1, ROUNDS);
}

Test(async_free_after_last_return, waitlist_freed_in_the_callback_of_a_close)
{
	rounds(TAKE_BY_CLOSE, 1, ROUNDS);
}

Test(async_free_after_last_return, token_and_waitlist_freed_in_the_callback_of_a_fire)
{
	rounds(TAKE_BY_FIRE, 1, ROUNDS);
}

/* More nodes than one wake batch: the granter unlocks and locks again. */
Test(async_free_after_last_return, turnstile_freed_by_the_last_of_a_crowd_closed_out)
{
	rounds(TURN_BY_CLOSE, CROWD, ROUNDS / 10);
}

Test(async_free_after_last_return, turnstile_freed_by_the_last_of_a_crowd_admitted_by_a_grow)
{
	rounds(TURN_BY_RESIZE, CROWD, ROUNDS / 10);
}

Test(async_free_after_last_return, waitlist_freed_by_the_last_of_a_crowd_closed_out)
{
	rounds(TAKE_BY_CLOSE, CROWD, ROUNDS / 10);
}

Test(async_free_after_last_return, token_freed_by_the_last_of_a_crowd_it_cancelled)
{
	rounds(TURN_BY_FIRE, CROWD, ROUNDS / 10);
}
