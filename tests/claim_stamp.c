/* SPDX-License-Identifier: MIT */
/* A claim stamped without a set orders jobs as a set's would: each stamp
 * is a new job (a later since, a seq never given before, from the counter
 * ts_set_prioritize shares), and an older stamp goes first. */
#include "testutil.h"

Test(claim_stamp, each_stamp_is_a_new_job_number_shared_with_sets)
{
	ts_set *s = ts_set_new();
	ts_job job = TS_JOB_INIT;
	ts_claim a, b;
	int64_t before = ts_now_ns();
	ts_claim_stamp(&a, 2);
	ts_set_prioritize(s, &job, 0, 2);
	ts_claim_stamp(&b, 7);
	cr_assert_eq(a.priority, 2);
	cr_assert_eq(b.priority, 7);
	cr_assert_geq(a.since_ns, before);
	cr_assert_geq(b.since_ns, a.since_ns);
	cr_assert_gt(ts_job_claim(&job).seq, a.seq, "a set's stamp reused a claim's number");
	cr_assert_gt(b.seq, ts_job_claim(&job).seq, "a claim reused a set's number");
	ts_claim_stamp(NULL, 0); /* no-op, no crash */
	ts_set_free(s);
}

struct waiter {
	ts_turnstile *t;
	ts_claim claim;
	_Atomic int *order, *next;
};

static void *wait_main(void *p)
{
	struct waiter *w = p;
	ts_pass pass;
	cr_assert_eq(ts_turnstile_wait(w->t, &w->claim, 0, NULL, &pass), 0);
	*w->order = atomic_fetch_add(w->next, 1);
	ts_pass_return(&pass);
	return NULL;
}

Test(claim_stamp, an_older_stamp_goes_first_whoever_queued_first)
{
	ts_turnstile *t = ts_turnstile_new(1);
	static const ts_claim mine = { 0, 0, 0 };
	_Atomic int next = 0, older_at = -1, newer_at = -1;
	struct waiter older = { t, { 0 }, &older_at, &next }, newer = { t, { 0 }, &newer_at, &next };
	ts_pass held;
	pthread_t a, b;
	ts_claim_stamp(&older.claim, 1);
	ts_claim_stamp(&newer.claim, 1);
	cr_assert_eq(ts_turnstile_wait(t, &mine, 0, NULL, &held), 0);
	start_thread(&b, wait_main, &newer); /* the newer job queues first */
	WAIT_FOR(queued(t) == 1);
	start_thread(&a, wait_main, &older);
	WAIT_FOR(queued(t) == 2);
	ts_pass_return(&held);
	join_bounded(a);
	join_bounded(b);
	cr_assert_eq(older_at, 0, "the newer stamp was admitted first");
	cr_assert_eq(newer_at, 1);
	ts_turnstile_free(t);
}
