/* SPDX-License-Identifier: MIT */
/* Jobs keep their age across every call and every shard: admission is
 * first-in-first-out over jobs, not calls. */
#include "jobs.h"

static ts_set *two_full_shards(ts_pass held[2])
{
	ts_set *s = ts_set_new();
	static const ts_claim mine = { 0, 0, 0 };
	cr_assert_eq(ts_set_resize(s, 0, 1), 0);
	cr_assert_eq(ts_set_resize(s, 1, 1), 0);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(ts_turnstile_wait(ts_set_turnstile(s, i), &mine, 0, NULL, &held[i]), 0);
	return s;
}

Test(job_order, an_older_job_beats_a_newer_one_on_every_shard_it_moves_to)
{
	ts_pass held[2];
	ts_set *s = two_full_shards(held);
	ts_turnstile *t1 = ts_set_turnstile(s, 1);
	ts_job older = TS_JOB_INIT, newer = TS_JOB_INIT;

	atomic_store(&n_turns_logged, 0);
	ts_set_prioritize(s, &older, 0, 2); /* begins first, on shard 0 */
	WAIT_FOR(ts_now_ns() > ts_job_claim(&older).since_ns);
	ts_set_prioritize(s, &newer, 1, 2);
	ts_claim stamped = ts_job_claim(&older);
	start_turn(0, &newer, t1, 1); /* the newer job queues on shard 1 first */
	ts_set_prioritize(s, &older, 1, 2); /* the older job hops to shard 1 */
	cr_assert_eq(ts_job_claim(&older).since_ns, stamped.since_ns, "re-pointing re-stamped the age");
	cr_assert_eq(ts_job_claim(&older).seq, stamped.seq);
	start_turn(1, &older, t1, 2); /* ...and arrives there later */
	ts_pass_return(&held[1]);
	WAIT_FOR(atomic_load(&n_turns_logged) == 1);
	cr_assert_eq(turn_log[0], 1, "the newer job was admitted ahead of the older one");
	finish_turns(2);
	ts_pass_return(&held[0]);
	ts_set_free(s);
}

Test(job_order, equal_ages_are_ordered_by_seq_so_jobs_never_interleave)
{
	ts_pass held[2];
	ts_set *s = two_full_shards(held);
	ts_turnstile *t0 = ts_set_turnstile(s, 0);
	ts_job a = TS_JOB_INIT, b = TS_JOB_INIT;

	atomic_store(&n_turns_logged, 0);
	ts_set_prioritize(s, &a, 0, 0);
	ts_set_prioritize(s, &b, 0, 0);
	cr_assert_lt(a.private_claim.seq, b.private_claim.seq);
	b.private_claim.since_ns = a.private_claim.since_ns; /* white box: force a tie */
	/* calls arrive alternating b, a, b, a */
	start_turn(0, &b, t0, 1);
	start_turn(1, &a, t0, 2);
	start_turn(2, &b, t0, 3);
	start_turn(3, &a, t0, 4);
	ts_pass_return(&held[0]);
	for (int k = 0; k < 4; k++) {
		WAIT_FOR(atomic_load(&n_turns_logged) == k + 1);
		atomic_store(&turns[turn_log[k]].release, 1);
	}
	finish_turns(4);
	cr_assert(turns[turn_log[0]].job == &a && turns[turn_log[1]].job == &a,
		  "job a (lower seq) did not finish before job b started");
	cr_assert(turns[turn_log[2]].job == &b && turns[turn_log[3]].job == &b);
	ts_pass_return(&held[1]);
	ts_set_free(s);
}

Test(job_order, seq_is_unique_and_64_bit)
{
	ts_set *s = ts_set_new();
	uint64_t last = 0;
	for (int i = 0; i < 2000000; i++) {
		ts_job j = TS_JOB_INIT;
		ts_set_prioritize(s, &j, 0, 0);
		cr_assert_gt(ts_job_claim(&j).seq, last); /* the Go original wraps at 1e6 */
		last = ts_job_claim(&j).seq;
	}
	ts_set_free(s);
}
