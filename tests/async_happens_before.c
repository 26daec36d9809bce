/* SPDX-License-Identifier: MIT */
/* What a pass or an item carries reaches an event-loop callback with a
 * happens-before edge, on every path: a grant under the queue lock, the
 * push onto the notifier's completion stack, the pop in dispatch
 * (DESIGN.md, "Memory order", and lib/async.h).
 *
 * As in pass_happens_before.c, each test writes plain data and reads it in
 * the callback with nothing else ordering the two: every thread is started
 * before the data is written and waits only by polling relaxed snapshots.
 * The loop thread polls ts_notifier_dispatch instead of its fd, and a test
 * hook holds the granter before it writes the fd (TS_HOOK_KICKING) until
 * the callback has run: ThreadSanitizer orders an eventfd write before the
 * read that sees it, which would otherwise hide a missing edge in the
 * stack.  In the ThreadSanitizer build a missing edge is a reported data
 * race (the test fails); in every build the value read is checked. */
#include <errno.h>

#include "hook.h"
#include "testutil.h"

static const ts_claim claim = { 0, 0, 0 };
static int data; /* plain, on purpose */
static int seen, result;
static ts_pass got_pass;
static void *got_item;

static ts_turnstile *t;
static ts_waitlist *pool;
static ts_cancel token;
static ts_notifier *ntf;
static ts_async node = TS_ASYNC_INIT;
static _Atomic int phase, queued_async, called;

/* Holds a granter before its fd write until the callback ran (bounded:
 * a loop that never sees the node fails on its own). */
static void hold_kick(enum ts_hook_point point, void *obj)
{
	if (point != TS_HOOK_KICKING || obj != ntf)
		return;
	int64_t end = ts_now_ns() + TEST_PATIENCE_NS / 4;
	while (!atomic_load_explicit(&called, memory_order_relaxed) && ts_now_ns() < end)
		sched_yield();
}

static void on_done(ts_async *nd, int r, void *arg)
{
	(void)arg;
	result = r;
	seen = data;
	got_pass = ts_async_pass(nd);
	got_item = ts_async_item(nd);
	atomic_store_explicit(&called, 1, memory_order_relaxed);
}

static void setup(void)
{
	data = 0;
	seen = -1;
	result = -100;
	got_pass = (ts_pass)TS_PASS_NONE;
	got_item = NULL;
	atomic_store(&phase, 0);
	atomic_store(&queued_async, 0);
	atomic_store(&called, 0);
	node = (ts_async)TS_ASYNC_INIT;
	ntf = ts_notifier_new();
	cr_assert_not_null(ntf);
	atomic_store(&ts_hook, hold_kick);
}

static void teardown(void)
{
	atomic_store(&ts_hook, NULL);
	cr_assert_eq(ts_notifier_free(ntf), 0);
}

enum what { TURN, TAKE };
static enum what what;
static bool wait_phase, with_token;

/* The loop: queue (after phase 1 when asked: the queueing must not order
 * the writer's data), then dispatch until the callback ran. */
static void *loop(void *arg)
{
	ts_pass p = TS_PASS_NONE;
	void *item = NULL;
	int r;

	while (wait_phase && atomic_load_explicit(&phase, memory_order_relaxed) < 1)
		sched_yield();
	if (what == TURN)
		r = ts_turnstile_wait_async(t, &claim, 0, with_token ? &token : NULL, ntf, &node,
					    on_done, NULL, &p);
	else
		r = ts_waitlist_take_async(pool, 0, with_token ? &token : NULL, ntf, &node,
					   on_done, NULL, &item);
	if (r != EINPROGRESS) {
		result = r;
		return arg;
	}
	atomic_store_explicit(&queued_async, 1, memory_order_relaxed);
	int64_t end = ts_now_ns() + TEST_PATIENCE_NS;
	while (!atomic_load_explicit(&called, memory_order_relaxed) && ts_now_ns() < end) {
		ts_notifier_dispatch(ntf);
		sched_yield();
	}
	return arg;
}

static void *resizer(void *arg)
{
	while (!atomic_load_explicit(&queued_async, memory_order_relaxed))
		sched_yield();
	cr_assert_eq(ts_turnstile_resize(t, 1), 0);
	return arg;
}

/* Ceiling 1 as a mutex: A holds; resize(0) leaves available at -1; A writes
 * and returns on the fast path; the loop queues; resize(1) from a third
 * thread grants the loop's node. */
Test(async_happens_before, a_fast_return_reaches_a_callback_granted_by_a_resize)
{
	pthread_t l, c;
	ts_pass a;

	setup();
	t = ts_turnstile_new(1);
	what = TURN, wait_phase = true, with_token = false;
	start_thread(&l, loop, NULL);
	start_thread(&c, resizer, NULL);
	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &a), 0);
	cr_assert_eq(ts_turnstile_resize(t, 0), 0);
	data = 42;
	ts_pass_return(&a); /* -1 -> 0 on the fast path */
	atomic_store_explicit(&phase, 1, memory_order_relaxed);
	join_bounded(l);
	join_bounded(c);
	cr_assert_eq(result, 0);
	cr_assert_eq(seen, 42);
	ts_pass_return(&got_pass);
	teardown();
	ts_turnstile_free(t);
}

static ts_pass other;
static void *slow_returner(void *arg)
{
	while (!atomic_load_explicit(&queued_async, memory_order_relaxed))
		sched_yield();
	ts_pass_return(&other); /* WAITERS is set: the locked path grants the node */
	return arg;
}

/* Ceiling 2 shrunk to 1 under two holders: A writes and returns on the fast
 * path (-1 -> 0); the loop queues; C's return takes the locked path. */
Test(async_happens_before, a_fast_return_reaches_a_callback_granted_by_a_slow_return)
{
	pthread_t l, c;
	ts_pass a;

	setup();
	t = ts_turnstile_new(2);
	what = TURN, wait_phase = true, with_token = false;
	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &other), 0);
	start_thread(&l, loop, NULL);
	start_thread(&c, slow_returner, NULL);
	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &a), 0);
	cr_assert_eq(ts_turnstile_resize(t, 1), 0);
	data = 43;
	ts_pass_return(&a);
	atomic_store_explicit(&phase, 1, memory_order_relaxed);
	join_bounded(l);
	join_bounded(c);
	cr_assert_eq(result, 0);
	cr_assert_eq(seen, 43);
	ts_pass_return(&got_pass);
	teardown();
	ts_turnstile_free(t);
}

/* The holder itself returns on the locked path: the loop's node is queued. */
Test(async_happens_before, a_slow_return_reaches_the_callback_it_grants)
{
	pthread_t l;
	ts_pass a;

	setup();
	t = ts_turnstile_new(1);
	what = TURN, wait_phase = false, with_token = false;
	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &a), 0);
	start_thread(&l, loop, NULL);
	while (!atomic_load_explicit(&queued_async, memory_order_relaxed))
		sched_yield();
	data = 44;
	ts_pass_return(&a);
	join_bounded(l);
	cr_assert_eq(result, 0);
	cr_assert_eq(seen, 44);
	ts_pass_return(&got_pass);
	teardown();
	ts_turnstile_free(t);
}

/* An item and what it points to reach the async taker. */
struct box {
	int value;
};
static struct box the_box;

static int make_box(void *arg, void **item)
{
	(void)arg;
	*item = &the_box;
	return 0;
}

Test(async_happens_before, a_put_reaches_the_async_taker_it_hands_the_item_to)
{
	pthread_t l;
	void *held;

	setup();
	pool = ts_waitlist_new(1, 0);
	what = TAKE, wait_phase = false, with_token = false;
	cr_assert_eq(ts_waitlist_take(pool, &held, make_box, NULL, 0, NULL), 0);
	start_thread(&l, loop, NULL);
	while (!atomic_load_explicit(&queued_async, memory_order_relaxed))
		sched_yield();
	((struct box *)held)->value = 45;
	data = 45;
	cr_assert(ts_waitlist_put(pool, held));
	join_bounded(l);
	cr_assert_eq(result, 0);
	cr_assert_eq(seen, 45);
	cr_assert_eq(got_item, &the_box);
	cr_assert_eq(the_box.value, 45);
	teardown();
	ts_waitlist_free(pool);
}

/* A slot given back by a discard reaches the async taker (TS_CREATE). */
Test(async_happens_before, a_discard_reaches_the_async_taker_it_passes_the_slot_to)
{
	pthread_t l;
	void *held;

	setup();
	pool = ts_waitlist_new(1, 0);
	what = TAKE, wait_phase = false, with_token = false;
	cr_assert_eq(ts_waitlist_take(pool, &held, make_box, NULL, 0, NULL), 0);
	start_thread(&l, loop, NULL);
	while (!atomic_load_explicit(&queued_async, memory_order_relaxed))
		sched_yield();
	data = 46;
	ts_waitlist_discard(pool);
	join_bounded(l);
	cr_assert_eq(result, TS_CREATE);
	cr_assert_eq(seen, 46);
	ts_waitlist_discard(pool); /* the loop's slot, unused */
	teardown();
	ts_waitlist_free(pool);
}

/* Close and a token's fire complete the node too: what the closer or the
 * firer wrote before the call is seen by the callback. */
static void ended_by(bool close, enum what kind)
{
	pthread_t l;
	void *held = NULL;

	setup();
	what = kind, wait_phase = false, with_token = !close;
	ts_cancel_init(&token);
	if (kind == TURN) {
		t = ts_turnstile_new(0);
	} else {
		pool = ts_waitlist_new(1, 0);
		cr_assert_eq(ts_waitlist_take(pool, &held, make_box, NULL, 0, NULL), 0);
	}
	start_thread(&l, loop, NULL);
	while (!atomic_load_explicit(&queued_async, memory_order_relaxed))
		sched_yield();
	data = 47;
	if (!close)
		ts_cancel_fire(&token);
	else if (kind == TURN)
		ts_turnstile_close(t);
	else
		ts_waitlist_close(pool);
	join_bounded(l);
	cr_assert_eq(result, close ? ESHUTDOWN : ECANCELED);
	cr_assert_eq(seen, 47);
	teardown();
	ts_cancel_destroy(&token);
	if (kind == TURN) {
		ts_turnstile_free(t);
	} else {
		ts_waitlist_discard(pool);
		ts_waitlist_free(pool);
	}
}

Test(async_happens_before, a_turnstile_close_reaches_the_callback)
{
	ended_by(true, TURN);
}

Test(async_happens_before, a_waitlist_close_reaches_the_callback)
{
	ended_by(true, TAKE);
}

Test(async_happens_before, a_fire_reaches_the_callback_of_a_turn)
{
	ended_by(false, TURN);
}

Test(async_happens_before, a_fire_reaches_the_callback_of_a_take)
{
	ended_by(false, TAKE);
}
