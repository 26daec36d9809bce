/* SPDX-License-Identifier: MIT */
/* ts_wait_turn never refuses: every reason it cannot order a caller gives
 * the unissued pass at once, and that pass is safe to return. */
#include <errno.h>

#include "testutil.h"

static ts_set *full_shard(ts_pass *held)
{
	static const ts_claim mine = { 0, 0, 0 };
	ts_set *s = ts_set_new();
	cr_assert_eq(ts_set_resize(s, 3, 1), 0);
	cr_assert_eq(ts_turnstile_wait(ts_set_turnstile(s, 3), &mine, 0, NULL, held), 0);
	return s;
}

static void passes_through(ts_job *job)
{
	ts_pass p = ts_wait_turn(job);
	cr_assert_not(ts_pass_issued(&p));
	ts_pass_return(&p);
}

Test(wait_turn_fail_open, unprioritized_job)
{
	ts_job job = TS_JOB_INIT;
	passes_through(&job);
	passes_through(NULL);
	cr_assert_eq(ts_job_claim(&job).seq, 0);
}

Test(wait_turn_fail_open, shard_without_turnstile_and_negative_shard)
{
	ts_pass held;
	ts_set *s = full_shard(&held);
	ts_job job = TS_JOB_INIT;
	ts_set_prioritize(s, &job, 4, 0);
	passes_through(&job);
	ts_set_prioritize(s, &job, -1, 0);
	passes_through(&job);
	ts_pass_return(&held);
	ts_set_free(s);
}

Test(wait_turn_fail_open, expired_deadline_on_a_full_shard)
{
	ts_pass held;
	ts_set *s = full_shard(&held);
	ts_job job = TS_JOB_INIT;
	ts_set_prioritize(s, &job, 3, 0);
	ts_job_set_deadline(&job, TS_DEADLINE_NOW);
	passes_through(&job);
	ts_pass_return(&held);
	ts_set_free(s);
}

Test(wait_turn_fail_open, fired_cancel_even_with_a_free_pass)
{
	ts_set *s = ts_set_new();
	ts_cancel c = TS_CANCEL_INIT;
	ts_job job = TS_JOB_INIT;
	cr_assert_eq(ts_set_resize(s, 0, 5), 0);
	ts_set_prioritize(s, &job, 0, 0);
	ts_job_set_cancel(&job, &c);
	ts_cancel_fire(&c);
	passes_through(&job);
	int64_t available;
	ts_turnstile_snapshot(ts_set_turnstile(s, 0), &available, NULL);
	cr_assert_eq(available, 5);
	ts_set_free(s);
}

Test(wait_turn_fail_open, closed_set)
{
	ts_pass held;
	ts_set *s = full_shard(&held);
	ts_job job = TS_JOB_INIT;
	ts_set_prioritize(s, &job, 3, 0);
	ts_set_close(s);
	cr_assert(ts_set_closed(s));
	passes_through(&job);
	cr_assert_eq(ts_set_resize(s, 3, 2), ESHUTDOWN);
	cr_assert_eq(ts_set_resize(s, 9, 2), ESHUTDOWN);
	cr_assert_null(ts_set_turnstile(s, 9), "a closed set created a shard");
	ts_pass_return(&held);
	ts_set_free(s);
}
