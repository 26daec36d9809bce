/* SPDX-License-Identifier: MIT */
/* ts_async_result tells how a node's last queued wait completed: after
 * ts_async_cancel's EALREADY it tells a pass or item handed on (0), a slot
 * given back (TS_CREATE) from a wait that had ended (ESHUTDOWN, ...); in a
 * callback it is the callback's result, except that a failing-open turn
 * tells what really happened; ENOENT while pending, after a withdrawal
 * and for a node never queued. */
#include <errno.h>

#include "loops.h"

static const ts_claim band0 = { 0, 0, 0 };

struct scene {
	ts_turnstile *t;
	ts_waitlist *w;
	ts_async node;
	ts_pass held;
	int r[6];
	_Atomic int called, told, result_in_callback;
};

static void no_call(ts_async *node, int result, void *arg)
{
	(void)node, (void)result, (void)arg;
	THREAD_CHECK(!"a cancelled node's callback ran");
}

static void record(ts_async *node, int result, void *arg)
{
	struct scene *s = arg;
	ts_pass p = ts_async_pass(node);
	ts_pass_return(&p);
	atomic_store(&s->told, result);
	atomic_store(&s->result_in_callback, ts_async_result(node));
	atomic_store(&s->called, 1);
}

static void untouched(struct loop *l, void *arg)
{
	struct scene *s = arg;
	(void)l;
	s->r[0] = ts_async_result(&s->node);
	s->r[1] = ts_async_result(NULL);
}

Test(async_result, a_node_never_queued_is_enoent_and_null_is_einval)
{
	struct scene s = { .node = TS_ASYNC_INIT };
	struct loop l;
	loop_start(&l);
	loop_run(&l, untouched, &s);
	cr_assert_eq(s.r[0], ENOENT);
	cr_assert_eq(s.r[1], EINVAL);
	cr_assert_eq(loop_stop(&l), 0);
}

/* On the loop thread, so nothing is dispatched in between: queued, then
 * granted (the held pass returned here), then cancelled. */
static void granted_then_cancelled(struct loop *l, void *arg)
{
	struct scene *s = arg;
	ts_pass p;
	s->r[0] = ts_turnstile_wait_async(s->t, &band0, 0, NULL, l->n, &s->node, no_call, s, &p);
	s->r[1] = ts_async_result(&s->node);
	ts_pass_return(&s->held);
	s->r[2] = ts_async_cancel(&s->node);
	s->r[3] = ts_async_result(&s->node);
}

Test(async_result, a_grant_cancelled_before_dispatch_tells_zero_the_pass_handed_on)
{
	struct scene s = { .node = TS_ASYNC_INIT };
	struct loop l;
	s.t = ts_turnstile_new(1);
	cr_assert_eq(ts_turnstile_wait(s.t, &band0, 0, NULL, &s.held), 0);
	loop_start(&l);
	loop_run(&l, granted_then_cancelled, &s);
	cr_assert_eq(s.r[0], EINPROGRESS);
	cr_assert_eq(s.r[1], ENOENT, "a pending wait had a result");
	cr_assert_eq(s.r[2], EALREADY);
	cr_assert_eq(s.r[3], 0);
	cr_assert_eq(available(s.t), 1, "the pass was not handed on");
	cr_assert_eq(loop_stop(&l), 0);
	ts_turnstile_free(s.t);
}

static void closed_then_cancelled(struct loop *l, void *arg)
{
	struct scene *s = arg;
	ts_pass p;
	s->r[0] = ts_turnstile_wait_async(s->t, &band0, 0, NULL, l->n, &s->node, no_call, s, &p);
	ts_turnstile_close(s->t);
	s->r[1] = ts_async_cancel(&s->node);
	s->r[2] = ts_async_result(&s->node);
}

Test(async_result, a_close_cancelled_before_dispatch_tells_eshutdown)
{
	struct scene s = { .node = TS_ASYNC_INIT };
	struct loop l;
	s.t = ts_turnstile_new(1);
	cr_assert_eq(ts_turnstile_wait(s.t, &band0, 0, NULL, &s.held), 0);
	loop_start(&l);
	loop_run(&l, closed_then_cancelled, &s);
	cr_assert_eq(s.r[0], EINPROGRESS);
	cr_assert_eq(s.r[1], EALREADY);
	cr_assert_eq(s.r[2], ESHUTDOWN);
	ts_pass_return(&s.held);
	cr_assert_eq(loop_stop(&l), 0);
	ts_turnstile_free(s.t);
}

static void withdrawn(struct loop *l, void *arg)
{
	struct scene *s = arg;
	ts_pass p;
	s->r[0] = ts_turnstile_wait_async(s->t, &band0, 0, NULL, l->n, &s->node, no_call, s, &p);
	s->r[1] = ts_async_cancel(&s->node);
	s->r[2] = ts_async_result(&s->node);
}

Test(async_result, a_wait_withdrawn_before_it_completed_is_enoent)
{
	struct scene s = { .node = TS_ASYNC_INIT };
	struct loop l;
	s.t = ts_turnstile_new(1);
	cr_assert_eq(ts_turnstile_wait(s.t, &band0, 0, NULL, &s.held), 0);
	loop_start(&l);
	loop_run(&l, withdrawn, &s);
	cr_assert_eq(s.r[0], EINPROGRESS);
	cr_assert_eq(s.r[1], 0);
	cr_assert_eq(s.r[2], ENOENT);
	ts_pass_return(&s.held);
	cr_assert_eq(loop_stop(&l), 0);
	ts_turnstile_free(s.t);
}

static int make(void *arg, void **item)
{
	*item = arg;
	return 0;
}

static void slot_then_cancelled(struct loop *l, void *arg)
{
	struct scene *s = arg;
	void *item;
	s->r[0] = ts_waitlist_take_async(s->w, 0, NULL, l->n, &s->node, no_call, s, &item);
	ts_waitlist_discard(s->w); /* the held item is gone: its slot goes to the node */
	s->r[1] = ts_async_cancel(&s->node);
	s->r[2] = ts_async_result(&s->node);
}

Test(async_result, a_creation_slot_cancelled_before_dispatch_tells_ts_create)
{
	struct scene s = { .node = TS_ASYNC_INIT };
	struct loop l;
	static int thing;
	void *item;
	s.w = ts_waitlist_new(1, 0);
	cr_assert_eq(ts_waitlist_take(s.w, &item, make, &thing, 0, NULL), 0);
	loop_start(&l);
	loop_run(&l, slot_then_cancelled, &s);
	cr_assert_eq(s.r[0], EINPROGRESS);
	cr_assert_eq(s.r[1], EALREADY);
	cr_assert_eq(s.r[2], TS_CREATE);
	size_t created;
	ts_waitlist_stats(s.w, &created, NULL, NULL);
	cr_assert_eq(created, 0, "the slot was not given back");
	cr_assert_eq(loop_stop(&l), 0);
	ts_waitlist_free(s.w);
}

static void queue_recorded(struct loop *l, void *arg)
{
	struct scene *s = arg;
	ts_pass p;
	s->r[0] = ts_turnstile_wait_async(s->t, &band0, 0, NULL, l->n, &s->node, record, s, &p);
	ts_pass_return(&s->held);
}

static void read_result(struct loop *l, void *arg)
{
	struct scene *s = arg;
	(void)l;
	s->r[5] = ts_async_result(&s->node);
}

Test(async_result, in_and_after_a_callback_it_is_the_callbacks_result)
{
	struct scene s = { .node = TS_ASYNC_INIT };
	struct loop l;
	s.t = ts_turnstile_new(1);
	cr_assert_eq(ts_turnstile_wait(s.t, &band0, 0, NULL, &s.held), 0);
	loop_start(&l);
	loop_run(&l, queue_recorded, &s);
	WAIT_FOR(atomic_load(&s.called));
	loop_run(&l, read_result, &s);
	cr_assert_eq(s.r[0], EINPROGRESS);
	cr_assert_eq(atomic_load(&s.told), 0);
	cr_assert_eq(atomic_load(&s.result_in_callback), 0);
	cr_assert_eq(s.r[5], 0);
	cr_assert_eq(loop_stop(&l), 0);
	ts_turnstile_free(s.t);
}

struct job_scene {
	struct scene s;
	ts_set *set;
	ts_job job;
};

static void queue_failing_open(struct loop *l, void *arg)
{
	struct job_scene *j = arg;
	ts_pass p;
	ts_set_prioritize(j->set, &j->job, 0, 0);
	ts_job_set_deadline(&j->job, in_ms(200));
	j->s.r[0] = ts_wait_turn_async(&j->job, l->n, &j->s.node, record, &j->s, &p);
}

Test(async_result, a_failing_open_turn_told_zero_tells_etimedout_here)
{
	struct job_scene j = { .s = { .node = TS_ASYNC_INIT }, .job = TS_JOB_INIT };
	struct loop l;
	j.set = ts_set_new();
	cr_assert_eq(ts_set_resize(j.set, 0, 1), 0);
	cr_assert_eq(ts_turnstile_wait(ts_set_turnstile(j.set, 0), &band0, 0, NULL, &j.s.held), 0);
	loop_start(&l);
	loop_run(&l, queue_failing_open, &j);
	cr_assert_eq(j.s.r[0], EINPROGRESS);
	WAIT_FOR(atomic_load(&j.s.called));
	loop_run(&l, read_result, &j.s);
	cr_assert_eq(atomic_load(&j.s.told), 0, "a failing-open turn was told a refusal");
	cr_assert_eq(atomic_load(&j.s.result_in_callback), ETIMEDOUT);
	cr_assert_eq(j.s.r[5], ETIMEDOUT);
	ts_pass_return(&j.s.held);
	cr_assert_eq(loop_stop(&l), 0);
	ts_set_free(j.set);
}
