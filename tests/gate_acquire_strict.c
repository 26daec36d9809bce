/* SPDX-License-Identifier: MIT */
/* A strict gate stamps as ts_gate_acquire does but refuses, as
 * ts_wait_turn_strict does: a closed set, an expired deadline, a fired
 * token; and on any refusal the worker holds nothing. */
#include <errno.h>

#include "testutil.h"

static const ts_claim mine = { 0, 0, 0 };

Test(gate_acquire_strict, bad_input_is_einval_with_the_pass_unissued)
{
	ts_set *s = ts_set_new();
	ts_gate g = ts_set_gate(s, 0), none = ts_set_gate(NULL, 0);
	ts_job job = TS_JOB_INIT;
	ts_pass p = { (ts_turnstile *)&job, 1 }; /* garbage the call must clear */
	cr_assert_eq(ts_gate_acquire_strict(NULL, &job, 0, &p), EINVAL);
	cr_assert_not(ts_pass_issued(&p));
	cr_assert_eq(ts_gate_acquire_strict(&g, NULL, 0, &p), EINVAL);
	cr_assert_eq(ts_gate_acquire_strict(&none, &job, 0, &p), EINVAL);
	cr_assert_eq(ts_gate_acquire_strict(&g, &job, 0, NULL), EINVAL);
	ts_set_free(s);
}

Test(gate_acquire_strict, a_free_turn_is_issued_and_stamped)
{
	ts_set *s = ts_set_new();
	ts_set_resize(s, 0, 1);
	ts_gate g = ts_set_gate(s, 3);
	ts_job job = TS_JOB_INIT;
	ts_pass p;
	int64_t before = ts_now_ns();
	cr_assert_eq(ts_gate_acquire_strict(&g, &job, 0, &p), 0);
	cr_assert(ts_pass_issued(&p));
	cr_assert_eq(ts_job_claim(&job).priority, 3);
	cr_assert_geq(ts_job_claim(&job).since_ns, before);
	ts_pass_return(&p);
	cr_assert_eq(available(ts_set_turnstile(s, 0)), 1);
	ts_set_free(s);
}

Test(gate_acquire_strict, an_unsized_shard_is_zero_and_unordered)
{
	ts_set *s = ts_set_new();
	ts_gate g = ts_set_gate(s, 0);
	ts_job job = TS_JOB_INIT;
	ts_pass p;
	cr_assert_eq(ts_gate_acquire_strict(&g, &job, 5, &p), 0);
	cr_assert_not(ts_pass_issued(&p));
	cr_assert_eq(ts_gate_acquire_strict(&g, &job, -1, &p), 0);
	cr_assert_not(ts_pass_issued(&p));
	ts_set_free(s);
}

Test(gate_acquire_strict, a_closed_set_is_eshutdown)
{
	ts_set *s = ts_set_new();
	ts_set_resize(s, 0, 1);
	ts_gate g = ts_set_gate(s, 0);
	ts_job job = TS_JOB_INIT;
	ts_pass p;
	ts_set_close(s);
	cr_assert_eq(ts_gate_acquire_strict(&g, &job, 0, &p), ESHUTDOWN);
	cr_assert_not(ts_pass_issued(&p));
	ts_set_free(s);
}

Test(gate_acquire_strict, an_expired_deadline_is_etimedout)
{
	ts_set *s = ts_set_new();
	ts_set_resize(s, 0, 1);
	ts_gate g = ts_set_gate(s, 0);
	ts_job job = TS_JOB_INIT;
	ts_pass held, p;
	cr_assert_eq(ts_turnstile_wait(ts_set_turnstile(s, 0), &mine, 0, NULL, &held), 0);
	ts_job_set_deadline(&job, TS_DEADLINE_NOW);
	cr_assert_eq(ts_gate_acquire_strict(&g, &job, 0, &p), ETIMEDOUT);
	cr_assert_not(ts_pass_issued(&p));
	ts_pass_return(&held);
	ts_set_free(s);
}

Test(gate_acquire_strict, a_fired_token_is_ecanceled_even_with_a_free_turn)
{
	ts_set *s = ts_set_new();
	ts_set_resize(s, 0, 1);
	ts_gate g = ts_set_gate(s, 0);
	ts_job job = TS_JOB_INIT;
	ts_cancel c = TS_CANCEL_INIT;
	ts_pass p;
	ts_cancel_fire(&c);
	ts_job_set_cancel(&job, &c);
	cr_assert_eq(ts_gate_acquire_strict(&g, &job, 0, &p), ECANCELED);
	cr_assert_not(ts_pass_issued(&p));
	cr_assert_eq(available(ts_set_turnstile(s, 0)), 1, "a refused worker kept a turn");
	ts_cancel_destroy(&c);
	ts_set_free(s);
}

struct strict_arg {
	ts_gate *g;
	ts_job job;
	ts_pass pass;
	int result;
};

static void *acquire_main(void *p)
{
	struct strict_arg *a = p;
	a->result = ts_gate_acquire_strict(a->g, &a->job, 0, &a->pass);
	return NULL;
}

Test(gate_acquire_strict, a_close_while_blocked_is_eshutdown_holding_nothing)
{
	ts_set *s = ts_set_new();
	ts_set_resize(s, 0, 1);
	ts_turnstile *t = ts_set_turnstile(s, 0);
	ts_gate g = ts_set_gate(s, 0);
	struct strict_arg a = { &g, TS_JOB_INIT, TS_PASS_NONE, -1 };
	ts_pass held;
	pthread_t th;
	cr_assert_eq(ts_turnstile_wait(t, &mine, 0, NULL, &held), 0);
	start_thread(&th, acquire_main, &a);
	WAIT_FOR(queued(t) == 1);
	ts_set_close(s);
	join_bounded(th);
	cr_assert_eq(a.result, ESHUTDOWN);
	cr_assert_not(ts_pass_issued(&a.pass));
	ts_pass_return(&held);
	cr_assert_eq(available(t), 1);
	ts_set_free(s);
}
