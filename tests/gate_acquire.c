/* SPDX-License-Identifier: MIT */
/* A gate stamps a job's first turn at pickup and refuses only on a closed
 * set: before waiting, and after a close released the wait. */
#include <errno.h>

#include "testutil.h"

static const ts_claim mine = { 0, 0, 0 };

Test(gate_acquire, closed_set_refuses_at_once)
{
	ts_set *s = ts_set_new();
	ts_set_resize(s, 0, 1);
	ts_gate g = ts_set_gate(s, 1);
	ts_job job = TS_JOB_INIT;
	ts_pass p;
	ts_set_close(s);
	cr_assert_not(ts_gate_acquire(&g, &job, 0, &p));
	cr_assert_not(ts_pass_issued(&p));
	ts_set_free(s);
}

struct gate_arg {
	ts_gate *g;
	ts_job job;
	ts_pass pass;
	int result;
};

static void *acquire_main(void *p)
{
	struct gate_arg *a = p;
	a->result = ts_gate_acquire(a->g, &a->job, 0, &a->pass);
	return NULL;
}

Test(gate_acquire, close_while_blocked_refuses_and_holds_nothing)
{
	ts_set *s = ts_set_new();
	ts_set_resize(s, 0, 1);
	ts_turnstile *t = ts_set_turnstile(s, 0);
	ts_gate g = ts_set_gate(s, 1);
	struct gate_arg a = { &g, TS_JOB_INIT, TS_PASS_NONE, -1 };
	ts_pass held;
	pthread_t th;

	cr_assert_eq(ts_turnstile_wait(t, &mine, 0, NULL, &held), 0);
	start_thread(&th, acquire_main, &a);
	WAIT_FOR(queued(t) == 1);
	ts_set_close(s);
	join_bounded(th);
	cr_assert_eq(a.result, false);
	cr_assert_not(ts_pass_issued(&a.pass));
	ts_pass_return(&held);
	cr_assert_eq(available(t), 1);
	ts_set_free(s);
}

Test(gate_acquire, later_turns_keep_the_gate_stamp)
{
	ts_set *s = ts_set_new();
	ts_set_resize(s, 0, 1);
	ts_set_resize(s, 7, 1);
	ts_gate g = ts_set_gate(s, 4);
	ts_job job = TS_JOB_INIT;
	ts_pass p;

	ts_set_prioritize(s, &job, 7, 0); /* an old stamp the gate must replace */
	uint64_t old_seq = ts_job_claim(&job).seq;
	int64_t before = ts_now_ns();
	cr_assert(ts_gate_acquire(&g, &job, 0, &p));
	cr_assert(ts_pass_issued(&p));
	ts_claim c = ts_job_claim(&job);
	cr_assert_eq(c.priority, 4);
	cr_assert_gt(c.seq, old_seq);
	cr_assert_geq(c.since_ns, before);
	ts_pass_return(&p);

	p = ts_wait_turn(&job);
	cr_assert(ts_pass_issued(&p));
	ts_pass_return(&p);
	ts_set_prioritize(s, &job, 7, 1);
	p = ts_wait_turn(&job);
	cr_assert(ts_pass_issued(&p));
	ts_pass_return(&p);
	cr_assert_eq(ts_job_claim(&job).since_ns, c.since_ns);
	cr_assert_eq(ts_job_claim(&job).seq, c.seq);
	ts_set_free(s);
}

Test(gate_acquire, expired_deadline_proceeds_unordered)
{
	ts_set *s = ts_set_new();
	ts_set_resize(s, 0, 1);
	ts_gate g = ts_set_gate(s, 0);
	ts_job job = TS_JOB_INIT;
	ts_pass held, p;

	cr_assert_eq(ts_turnstile_wait(ts_set_turnstile(s, 0), &mine, 0, NULL, &held), 0);
	ts_job_set_deadline(&job, TS_DEADLINE_NOW);
	cr_assert(ts_gate_acquire(&g, &job, 0, &p), "the gate refused an open set");
	cr_assert_not(ts_pass_issued(&p));
	cr_assert_eq(job.private_deadline_ns, TS_DEADLINE_NOW, "the gate dropped the deadline");
	ts_pass_return(&held);
	ts_set_free(s);
}
