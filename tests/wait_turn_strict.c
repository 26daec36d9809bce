/* SPDX-License-Identifier: MIT */
/* ts_wait_turn_strict: a job's turn for daemons that shed load.  Where
 * ts_wait_turn fails open (the caller proceeds unordered), the strict wait
 * returns the refusal; where nothing orders the job, both let it through. */
#include <errno.h>

#include "testutil.h"

static ts_set *set;
static ts_job job;

static void sized(int64_t conc)
{
	set = ts_set_new();
	cr_assert_eq(ts_set_resize(set, 1, conc), 0);
	job = (ts_job)TS_JOB_INIT;
	ts_set_prioritize(set, &job, 1, 0);
}

Test(wait_turn_strict, a_free_pass_is_issued)
{
	ts_pass p;
	sized(1);
	cr_assert_eq(ts_wait_turn_strict(&job, &p), 0);
	cr_assert(ts_pass_issued(&p));
	ts_pass_return(&p);
	ts_set_free(set);
}

Test(wait_turn_strict, an_expired_deadline_is_etimedout_where_the_lenient_wait_lets_through)
{
	ts_pass p, lenient;
	sized(0);
	ts_job_set_deadline(&job, in_ms(5));
	cr_assert_eq(ts_wait_turn_strict(&job, &p), ETIMEDOUT);
	cr_assert_not(ts_pass_issued(&p));
	lenient = ts_wait_turn(&job);
	cr_assert_not(ts_pass_issued(&lenient)); /* through, unordered */
	ts_set_free(set);
}

Test(wait_turn_strict, a_fired_cancel_is_ecanceled_even_with_a_free_pass)
{
	ts_cancel c = TS_CANCEL_INIT;
	ts_pass p;
	sized(1);
	ts_cancel_fire(&c);
	ts_job_set_cancel(&job, &c);
	cr_assert_eq(ts_wait_turn_strict(&job, &p), ECANCELED);
	cr_assert_not(ts_pass_issued(&p));
	cr_assert_eq(available(ts_set_turnstile(set, 1)), 1);
	ts_cancel_destroy(&c);
	ts_set_free(set);
}

Test(wait_turn_strict, a_closed_set_is_eshutdown)
{
	ts_pass p;
	sized(1);
	ts_set_close(set);
	cr_assert_eq(ts_wait_turn_strict(&job, &p), ESHUTDOWN);
	cr_assert_not(ts_pass_issued(&p));
	ts_set_free(set);
}

Test(wait_turn_strict, a_job_nothing_orders_passes_through_unissued)
{
	ts_job never = TS_JOB_INIT;
	ts_pass p;
	sized(1);
	cr_assert_eq(ts_wait_turn_strict(&never, &p), 0);
	cr_assert_not(ts_pass_issued(&p));
	ts_set_prioritize(set, &job, 99, 0); /* a shard without a turnstile */
	cr_assert_eq(ts_wait_turn_strict(&job, &p), 0);
	cr_assert_not(ts_pass_issued(&p));
	ts_set_prioritize(set, &job, -1, 0);
	cr_assert_eq(ts_wait_turn_strict(&job, &p), 0);
	cr_assert_not(ts_pass_issued(&p));
	ts_set_free(set);
}
