/* SPDX-License-Identifier: MIT */
/* ts_async_cancel against grants: a wait withdrawn before it completed
 * (0), one withdrawn after (EALREADY: what it got goes to the next waiter
 * in order), one not pending (ENOENT); never a callback after a cancel,
 * never a reference kept (each node is freed right after its cancel, so
 * AddressSanitizer sees any later touch); and a storm of cancels, grants,
 * returns and puts from several threads that ends with every pass free
 * and every item back. */
#include <errno.h>

#include "loops.h"

static ts_turnstile *t;
static ts_waitlist *w;
static const ts_claim band0 = { 0, 0, 0 }, band1 = { 1, 0, 0 };
static _Atomic int calls[4];

static void count_call(ts_async *node, int result, void *arg)
{
	THREAD_CHECK(result == 0);
	atomic_fetch_add(&calls[(intptr_t)arg], 1);
	ts_pass p = ts_async_pass(node);
	ts_pass_return(&p);
}

static uint64_t completions(struct loop *l)
{
	ts_notifier_counters c;
	ts_notifier_read_counters(l->n, &c);
	return c.completions;
}

/* --- A and B queued, A granted then cancelled: B gets the pass --------- */

static ts_async *a_node, *b_node;

static void queue_a_then_b(struct loop *l, void *arg)
{
	ts_pass p;
	(void)arg;
	THREAD_CHECK(ts_turnstile_wait_async(t, &band0, 0, NULL, l->n, a_node, count_call,
					     (void *)0, &p) == EINPROGRESS);
	THREAD_CHECK(ts_turnstile_wait_async(t, &band1, 0, NULL, l->n, b_node, count_call,
					     (void *)1, &p) == EINPROGRESS);
}

/* On the loop thread, so that nothing is dispatched in between: @grant
 * completes A (pushed to the notifier, not yet dispatched), then A is
 * cancelled — which must hand what A got on to B — and freed at once. */
struct grant_then_cancel {
	void (*grant)(void);
	int result;
};

static void grant_then_cancel_a(struct loop *l, void *arg)
{
	struct grant_then_cancel *g = arg;
	uint64_t before = completions(l);
	g->grant();
	THREAD_CHECK(completions(l) == before + 1);
	g->result = ts_async_cancel(a_node);
	free(a_node);
	a_node = NULL;
}

static ts_pass held;

static void return_held(void)
{
	ts_pass_return(&held);
}

Test(async_cancel, a_pass_granted_to_a_cancelled_node_goes_to_the_next_in_order)
{
	struct loop l;
	struct grant_then_cancel g = { return_held, -1 };

	t = ts_turnstile_new(1);
	atomic_store(&calls[0], 0);
	atomic_store(&calls[1], 0);
	a_node = calloc(1, sizeof(ts_async));
	b_node = calloc(1, sizeof(ts_async));
	loop_start(&l);
	cr_assert_eq(ts_turnstile_wait(t, &band0, 0, NULL, &held), 0);
	loop_run(&l, queue_a_then_b, NULL);
	cr_assert_eq(queued(t), 2);
	loop_run(&l, grant_then_cancel_a, &g);
	cr_assert_eq(g.result, EALREADY);
	WAIT_FOR(atomic_load(&calls[1]) == 1); /* B ran, with A's pass */
	cr_assert_eq(atomic_load(&calls[0]), 0, "a cancelled node's callback ran");
	cr_assert_eq(available(t), 1);
	cr_assert_eq(loop_stop(&l), 0);
	free(b_node);
	ts_turnstile_free(t);
}

/* --- withdrawn before completion; not pending ------------------------- */

static void queue_cancel_cancel(struct loop *l, void *arg)
{
	int *r = arg;
	ts_pass p;
	ts_async *node = calloc(1, sizeof(*node));
	r[0] = ts_async_cancel(node); /* never queued */
	r[1] = ts_turnstile_wait_async(t, &band0, 0, NULL, l->n, node, count_call, (void *)2, &p);
	r[2] = ts_async_cancel(node);
	r[3] = ts_async_cancel(node); /* no longer pending */
	free(node);
}

Test(async_cancel, a_wait_withdrawn_before_its_grant_leaves_no_trace)
{
	struct loop l;
	int r[4];

	t = ts_turnstile_new(1);
	atomic_store(&calls[2], 0);
	loop_start(&l);
	cr_assert_eq(ts_turnstile_wait(t, &band0, 0, NULL, &held), 0);
	loop_run(&l, queue_cancel_cancel, r);
	cr_assert_eq(r[0], ENOENT);
	cr_assert_eq(r[1], EINPROGRESS);
	cr_assert_eq(r[2], 0);
	cr_assert_eq(r[3], ENOENT);
	cr_assert_eq(queued(t), 0);
	ts_pass_return(&held);
	cr_assert_eq(available(t), 1);
	cr_assert_eq(loop_stop(&l), 0, "a cancelled wait still counts as pending");
	cr_assert_eq(atomic_load(&calls[2]), 0);
	ts_turnstile_free(t);
}

/* --- waitlist: an item granted to a cancelled taker, and a slot -------- */

static int item_a;
static void *got_item, *taken;

static void put_taken(void)
{
	THREAD_CHECK(ts_waitlist_put(w, taken));
}

static void discard_one(void)
{
	ts_waitlist_discard(w);
}

static void keep_item(ts_async *node, int result, void *arg)
{
	(void)arg;
	THREAD_CHECK(result == 0);
	got_item = ts_async_item(node);
	atomic_fetch_add(&calls[3], 1);
}

/* A then B take from w, both told through take_fn. */
static ts_async_fn take_fn;

static void queue_takers(struct loop *l, void *arg)
{
	void *item;
	(void)arg;
	THREAD_CHECK(ts_waitlist_take_async(w, 0, NULL, l->n, a_node, take_fn, NULL, &item) ==
		     EINPROGRESS);
	THREAD_CHECK(ts_waitlist_take_async(w, 0, NULL, l->n, b_node, take_fn, NULL, &item) ==
		     EINPROGRESS);
}

static int make(void *arg, void **item)
{
	*item = arg;
	return 0;
}

Test(async_cancel, an_item_granted_to_a_cancelled_taker_goes_to_the_next_taker)
{
	struct loop l;
	struct grant_then_cancel g = { put_taken, -1 };

	w = ts_waitlist_new(1, 0);
	atomic_store(&calls[3], 0);
	got_item = NULL;
	a_node = calloc(1, sizeof(ts_async));
	b_node = calloc(1, sizeof(ts_async));
	loop_start(&l);
	cr_assert_eq(ts_waitlist_take(w, &taken, make, &item_a, 0, NULL), 0);
	take_fn = keep_item;
	loop_run(&l, queue_takers, NULL);
	loop_run(&l, grant_then_cancel_a, &g); /* the item goes to A, then to B */
	cr_assert_eq(g.result, EALREADY);
	WAIT_FOR(atomic_load(&calls[3]) == 1);
	cr_assert_eq(got_item, &item_a, "B did not get the item A was handed");
	cr_assert(ts_waitlist_put(w, got_item));
	size_t created, ready;
	ts_waitlist_stats(w, &created, &ready, NULL);
	cr_assert_eq(created, 1);
	cr_assert_eq(ready, 1);
	cr_assert_eq(loop_stop(&l), 0);
	free(b_node);
	ts_waitlist_free(w);
}

static _Atomic int creates;

static void expect_create(ts_async *node, int result, void *arg)
{
	(void)node;
	(void)arg;
	THREAD_CHECK(result == TS_CREATE);
	atomic_fetch_add(&creates, 1);
}

Test(async_cancel, a_creation_slot_granted_to_a_cancelled_taker_goes_to_the_next_taker)
{
	struct loop l;
	void *item;
	struct grant_then_cancel g = { discard_one, -1 };

	w = ts_waitlist_new(1, 0);
	atomic_store(&creates, 0);
	a_node = calloc(1, sizeof(ts_async));
	b_node = calloc(1, sizeof(ts_async));
	loop_start(&l);
	cr_assert_eq(ts_waitlist_take(w, &item, make, &item_a, 0, NULL), 0);
	take_fn = expect_create;
	loop_run(&l, queue_takers, NULL);
	loop_run(&l, grant_then_cancel_a, &g); /* the slot goes to A, then to B */
	cr_assert_eq(g.result, EALREADY);
	WAIT_FOR(atomic_load(&creates) == 1); /* B got the slot back from A */
	size_t created, waiting;
	ts_waitlist_stats(w, &created, NULL, &waiting);
	cr_assert_eq(created, 1);
	cr_assert_eq(waiting, 0);
	ts_waitlist_discard(w); /* B gives it up */
	cr_assert_eq(loop_stop(&l), 0);
	free(b_node);
	ts_waitlist_free(w);
}

/* --- storm -------------------------------------------------------------- */

#define STORM_LOOPS 2
#define STORM_NODES 48
#define STORM_ROUNDS 300
#define STORM_CEILING 3
#define STORM_ITEMS 3

struct storm_node {
	ts_async node; /* first: the callback gets back here */
	int id;
	bool turn;
};

/* What one of a loop's slots holds between visits. */
struct storm_slot {
	struct storm_node *pending; /* a queued wait, or NULL */
	bool has_pass, has_item;
	ts_pass pass;
	void *item;
};

struct storm_loop {
	pthread_t th;
	ts_notifier *n;
	struct storm_slot slot[STORM_NODES];
	unsigned rng;
	long callbacks, cancels, already;
	int free_result;
};

static _Atomic int storm_done;
static int storm_items[STORM_ITEMS];

/* Keep what the wait got until the slot's next visit, so passes and
 * items are held for a while and waits really queue. */
static void storm_hold(struct storm_slot *sl, bool turn, int result, ts_pass pass, void *item)
{
	if (turn) {
		THREAD_CHECK(result == 0 && ts_pass_issued(&pass));
		sl->pass = pass;
		sl->has_pass = true;
	} else if (result == 0) {
		sl->item = item;
		sl->has_item = true;
	} else {
		THREAD_CHECK(result == TS_CREATE);
		ts_waitlist_discard(w); /* never made: the slot goes on */
	}
}

static void storm_release(struct storm_slot *sl)
{
	if (sl->has_pass)
		ts_pass_return(&sl->pass);
	if (sl->has_item)
		THREAD_CHECK(ts_waitlist_put(w, sl->item));
	sl->has_pass = sl->has_item = false;
}

static void storm_done_cb(ts_async *node, int result, void *arg)
{
	struct storm_loop *lp = arg;
	struct storm_node *s = (struct storm_node *)node;
	struct storm_slot *sl = &lp->slot[s->id];
	THREAD_CHECK(sl->pending == s); /* never for a cancelled (freed) node */
	storm_hold(sl, s->turn, result, ts_async_pass(node), ts_async_item(node));
	sl->pending = NULL;
	free(s);
	lp->callbacks++;
}

static void storm_queue(struct storm_loop *lp, int id)
{
	struct storm_node *s = calloc(1, sizeof(*s));
	unsigned x = lp->rng >> 8;
	ts_claim c = { (int)(x % 3), (int64_t)(x % 7), x };
	int r;
	void *item = NULL;
	ts_pass p = TS_PASS_NONE;

	s->id = id;
	s->turn = x & 8;
	lp->slot[id].pending = s;
	if (s->turn)
		r = ts_turnstile_wait_async(t, &c, 0, NULL, lp->n, &s->node, storm_done_cb, lp, &p);
	else
		r = ts_waitlist_take_async(w, 0, NULL, lp->n, &s->node, storm_done_cb, lp, &item);
	if (r == EINPROGRESS)
		return;
	bool turn = s->turn;
	lp->slot[id].pending = NULL;
	free(s);
	storm_hold(&lp->slot[id], turn, r, p, item);
}

static void *storm_loop_main(void *p)
{
	struct storm_loop *lp = p;

	for (int round = 0; round < STORM_ROUNDS; round++) {
		for (int i = 0; i < STORM_NODES; i++) {
			struct storm_slot *sl = &lp->slot[i];
			lp->rng = lp->rng * 1103515245u + 12345u;
			if (sl->has_pass || sl->has_item) {
				storm_release(sl);
			} else if (!sl->pending) {
				storm_queue(lp, i);
			} else if ((lp->rng >> 16) % 4 == 0) {
				int r = ts_async_cancel(&sl->pending->node);
				THREAD_CHECK(r == 0 || r == EALREADY);
				lp->already += r == EALREADY;
				free(sl->pending); /* at once: no reference may remain */
				sl->pending = NULL;
				lp->cancels++;
			}
		}
		ts_notifier_dispatch(lp->n);
	}
	/* Wind down: cancel what is still queued, give back what is held;
	 * then nothing may be pending. */
	for (int i = 0; i < STORM_NODES; i++) {
		struct storm_slot *sl = &lp->slot[i];
		if (sl->pending) {
			int r = ts_async_cancel(&sl->pending->node);
			THREAD_CHECK(r == 0 || r == EALREADY);
			free(sl->pending);
			sl->pending = NULL;
		}
		storm_release(sl);
	}
	THREAD_CHECK(ts_notifier_dispatch(lp->n) == 0);
	lp->free_result = ts_notifier_free(lp->n);
	return NULL;
}

static void *storm_blocking(void *arg)
{
	(void)arg;
	while (!atomic_load(&storm_done)) {
		ts_pass p;
		void *item;
		if (ts_turnstile_wait(t, &band1, 0, NULL, &p) == 0)
			ts_pass_return(&p);
		int r = ts_waitlist_take(w, &item, make, &storm_items[0], in_ms(50), NULL);
		if (r == 0)
			THREAD_CHECK(ts_waitlist_put(w, item));
	}
	return NULL;
}

Test(async_cancel, cancels_racing_grants_from_other_threads_lose_nothing)
{
	struct storm_loop loops[STORM_LOOPS] = { 0 };
	pthread_t blocking[2];
	void *items[STORM_ITEMS];

	t = ts_turnstile_new(STORM_CEILING);
	w = ts_waitlist_new(STORM_ITEMS, 0);
	/* The pool's items exist up front; a TS_CREATE never makes one. */
	for (int i = 0; i < STORM_ITEMS; i++)
		cr_assert_eq(ts_waitlist_take(w, &items[i], make, &storm_items[i], 0, NULL), 0);
	for (int i = 0; i < STORM_ITEMS; i++)
		cr_assert(ts_waitlist_put(w, items[i]));
	atomic_store(&storm_done, 0);
	for (int i = 0; i < STORM_LOOPS; i++) {
		loops[i].n = ts_notifier_new();
		loops[i].rng = 7u + (unsigned)i * 101u;
		start_thread(&loops[i].th, storm_loop_main, &loops[i]);
	}
	for (int i = 0; i < 2; i++)
		start_thread(&blocking[i], storm_blocking, NULL);
	for (int i = 0; i < STORM_LOOPS; i++)
		join_bounded(loops[i].th);
	atomic_store(&storm_done, 1);
	for (int i = 0; i < 2; i++)
		join_bounded(blocking[i]);

	long callbacks = 0, cancels = 0, already = 0;
	for (int i = 0; i < STORM_LOOPS; i++) {
		cr_assert_eq(loops[i].free_result, 0);
		callbacks += loops[i].callbacks;
		cancels += loops[i].cancels;
		already += loops[i].already;
	}
	cr_log_info("storm: %ld callbacks, %ld cancels (%ld after completion)", callbacks,
		    cancels, already);
	cr_assert(callbacks > 0 && cancels > 0);
	cr_assert_eq(available(t), STORM_CEILING, "a pass was lost or doubled");
	cr_assert_eq(queued(t), 0);
	size_t created, ready, waiting;
	ts_waitlist_stats(w, &created, &ready, &waiting);
	cr_assert_eq(waiting, 0);
	cr_assert_eq(created, STORM_ITEMS, "creation slots in use: %zu", created);
	cr_assert_eq(ready, STORM_ITEMS, "an item was lost: %zu of %d ready", ready, STORM_ITEMS);
	ts_turnstile_free(t);
	ts_waitlist_free(w);
}
