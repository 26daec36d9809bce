/* SPDX-License-Identifier: MIT */
/* A deadline means never after it: a pass returned, or an item put, after
 * an event-loop wait's deadline goes to the next waiter in order, even
 * while the expired wait is still queued (its loop has not dispatched
 * since).  A turnstile's granter ends the expired wait (ETIMEDOUT, counted
 * as a timeout), private and process-shared alike; a waitlist passes over
 * it, leaving it to its own timer.  (Blocking waiters:
 * tests/turnstile_races.c and tests/waitlist_races.c.) */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "loops.h"

static const ts_claim band0 = { 0, 0, 0 }, band1 = { 1, 0, 0 };

/* Far enough for the waits to queue first even under valgrind, which the
 * test then waits out on the clock. */
#define DEADLINE_NS ((int64_t)200 * 1000000)

struct scene {
	ts_turnstile *t;
	ts_waitlist *w;
	ts_async late, next;
	ts_pass held;
	void *item;
	int r[6];
	_Atomic int next_result, next_called;
	ts_pass next_pass;
	void *next_item;
};

static void never(ts_async *node, int result, void *arg)
{
	(void)node, (void)result, (void)arg;
	THREAD_CHECK(!"the expired wait's callback ran after its cancel");
}

static void next_turn(ts_async *node, int result, void *arg)
{
	struct scene *s = arg;
	s->next_pass = ts_async_pass(node);
	s->next_item = ts_async_item(node);
	atomic_store(&s->next_result, result);
	atomic_store(&s->next_called, 1);
}

static void past(int64_t deadline)
{
	while (ts_now_ns() < deadline) /* polling the clock: the deadline itself is the point */
		;
}

/* On the loop thread, so nothing is dispatched in between: the late wait
 * (band 0, a deadline) and the next (band 1, none) queue, the deadline
 * passes, the held pass comes back. */
static void return_after_deadline(struct loop *l, void *arg)
{
	struct scene *s = arg;
	ts_pass p;
	int64_t deadline = ts_now_ns() + DEADLINE_NS;
	s->r[0] = ts_turnstile_wait_async(s->t, &band0, deadline, NULL, l->n, &s->late, never, s, &p);
	s->r[1] = ts_turnstile_wait_async(s->t, &band1, 0, NULL, l->n, &s->next, next_turn, s, &p);
	past(deadline);
	ts_pass_return(&s->held);
	s->r[2] = ts_async_cancel(&s->late);
	s->r[3] = ts_async_result(&s->late);
}

static uint64_t timeouts(ts_notifier *n)
{
	ts_notifier_counters c;
	ts_notifier_read_counters(n, &c);
	return c.timeouts;
}

static void read_timeouts(struct loop *l, void *arg)
{
	((struct scene *)arg)->r[4] = (int)timeouts(l->n);
}

static void pass_goes_to_the_next(ts_turnstile *t)
{
	struct scene s = { .late = TS_ASYNC_INIT, .next = TS_ASYNC_INIT };
	struct loop l;
	s.t = t;
	cr_assert_eq(ts_turnstile_wait(s.t, &band0, 0, NULL, &s.held), 0);
	loop_start(&l);
	loop_run(&l, return_after_deadline, &s);
	cr_assert_eq(s.r[0], EINPROGRESS);
	cr_assert_eq(s.r[1], EINPROGRESS);
	cr_assert_eq(s.r[2], EALREADY, "the expired wait was still queued");
	cr_assert_eq(s.r[3], ETIMEDOUT, "the pass was granted after the deadline");
	WAIT_FOR(atomic_load(&s.next_called));
	cr_assert_eq(atomic_load(&s.next_result), 0);
	cr_assert(ts_pass_issued(&s.next_pass), "the pass did not go on to the next waiter");
	loop_run(&l, read_timeouts, &s);
	cr_assert_eq(s.r[4], 1, "the granter's expiry was not counted as a timeout");
	ts_pass_return(&s.next_pass);
	cr_assert_eq(available(s.t), 1, "pass lost or doubled");
	cr_assert_eq(loop_stop(&l), 0);
	ts_turnstile_free(s.t);
}

Test(deadline_never_after, a_pass_returned_after_an_async_deadline_goes_to_the_next)
{
	pass_goes_to_the_next(ts_turnstile_new(1));
}

Test(deadline_never_after, on_a_shared_turnstile_too)
{
	int fd = memfd_create("ts-deadline", MFD_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ts_shared_format(fd, 1, NULL), 0);
	ts_turnstile *t = ts_shared_attach(fd);
	cr_assert_not_null(t);
	pass_goes_to_the_next(t);
	close(fd);
}

/* Many expired takers at the head (more than one wake batch): a put
 * passes over every one (they are left queued, to leave by their own
 * timers) and reaches the live taker behind them. */
#define EXPIRED_TAKERS 40

struct crowd {
	ts_waitlist *w;
	ts_async late[EXPIRED_TAKERS], live;
	int queued, withdrawn, never_completed;
	_Atomic int live_called, live_result;
	void *live_item;
};

static void live_take(ts_async *node, int result, void *arg)
{
	struct crowd *c = arg;
	c->live_item = ts_async_item(node);
	atomic_store(&c->live_result, result);
	atomic_store(&c->live_called, 1);
}

static void put_after_many_deadlines(struct loop *l, void *arg)
{
	struct crowd *c = arg;
	static int item;
	void *got;
	int64_t deadline = ts_now_ns() + DEADLINE_NS;
	for (int i = 0; i < EXPIRED_TAKERS; i++)
		c->queued += ts_waitlist_take_async(c->w, deadline, NULL, l->n, &c->late[i], never,
						    c, &got) == EINPROGRESS;
	c->queued += ts_waitlist_take_async(c->w, 0, NULL, l->n, &c->live, live_take, c, &got) ==
		     EINPROGRESS;
	past(deadline);
	THREAD_CHECK(ts_waitlist_put(c->w, &item));
	for (int i = 0; i < EXPIRED_TAKERS; i++) {
		c->withdrawn += ts_async_cancel(&c->late[i]) == 0;
		c->never_completed += ts_async_result(&c->late[i]) == ENOENT;
	}
}

static int make(void *arg, void **item)
{
	*item = arg;
	return 0;
}

Test(deadline_never_after, an_item_put_after_many_async_deadlines_reaches_the_live_taker)
{
	static struct crowd c;
	static int held_item;
	struct loop l;
	void *held;
	memset(&c, 0, sizeof(c));
	c.w = ts_waitlist_new(1, 0);
	cr_assert_eq(ts_waitlist_take(c.w, &held, make, &held_item, 0, NULL), 0);
	loop_start(&l);
	loop_run(&l, put_after_many_deadlines, &c);
	cr_assert_eq(c.queued, EXPIRED_TAKERS + 1);
	cr_assert_eq(c.withdrawn, EXPIRED_TAKERS, "an expired taker was given the item");
	cr_assert_eq(c.never_completed, EXPIRED_TAKERS);
	WAIT_FOR(atomic_load(&c.live_called));
	cr_assert_eq(atomic_load(&c.live_result), 0);
	cr_assert_not_null(c.live_item, "the item did not reach the live taker");
	cr_assert(ts_waitlist_put(c.w, c.live_item));
	cr_assert(ts_waitlist_put(c.w, held));
	size_t ready, waiting;
	ts_waitlist_stats(c.w, NULL, &ready, &waiting);
	cr_assert_eq(ready, 2);
	cr_assert_eq(waiting, 0);
	cr_assert_eq(loop_stop(&l), 0);
	ts_waitlist_free(c.w);
}

/* A slot freed after an async take's deadline goes to the next taker
 * (TS_CREATE), not to the expired one. */
static void discard_after_deadline(struct loop *l, void *arg)
{
	struct scene *s = arg;
	void *got;
	int64_t deadline = ts_now_ns() + DEADLINE_NS;
	s->r[0] = ts_waitlist_take_async(s->w, deadline, NULL, l->n, &s->late, never, s, &got);
	s->r[1] = ts_waitlist_take_async(s->w, 0, NULL, l->n, &s->next, next_turn, s, &got);
	past(deadline);
	ts_waitlist_discard(s->w);
	s->r[2] = ts_async_cancel(&s->late);
	s->r[3] = ts_async_result(&s->late);
}

Test(deadline_never_after, a_slot_freed_after_an_async_deadline_goes_to_the_next)
{
	struct scene s = { .late = TS_ASYNC_INIT, .next = TS_ASYNC_INIT };
	static int thing;
	struct loop l;
	void *held;
	s.w = ts_waitlist_new(1, 0);
	cr_assert_eq(ts_waitlist_take(s.w, &held, make, &thing, 0, NULL), 0);
	loop_start(&l);
	loop_run(&l, discard_after_deadline, &s);
	cr_assert_eq(s.r[0], EINPROGRESS);
	cr_assert_eq(s.r[1], EINPROGRESS);
	cr_assert_eq(s.r[2], 0, "the slot went to a taker past its deadline");
	cr_assert_eq(s.r[3], ENOENT);
	WAIT_FOR(atomic_load(&s.next_called));
	cr_assert_eq(atomic_load(&s.next_result), TS_CREATE);
	size_t created;
	ts_waitlist_stats(s.w, &created, NULL, NULL);
	cr_assert_eq(created, 1, "the slot is the next taker's");
	ts_waitlist_discard(s.w);
	cr_assert_eq(loop_stop(&l), 0);
	ts_waitlist_free(s.w);
}
