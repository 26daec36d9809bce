/* SPDX-License-Identifier: MIT */
/* Admission order: band, then since, then seq, then arrival — under real
 * threads, and with no barging by newcomers. */
#include <errno.h>

#include "callers.h"

#define N 24

/* With C passes in play, free exactly one pass at a time and watch which
 * caller it reaches: the k-th freed pass must reach the k-th best claim. */
static void admission_follows_claims(int64_t conc, unsigned seed)
{
	ts_turnstile *t = ts_turnstile_new(conc);
	ts_pass held[8];
	static const ts_claim mine = { 0, 0, 0 };
	int order[N];

	for (int i = 0; i < conc; i++)
		cr_assert_eq(ts_turnstile_wait(t, &mine, 0, NULL, &held[i]), 0);
	queue_callers(t, N, seed);
	expected_order(order, N);
	for (int k = 0; k < N; k++) {
		if (k < conc)
			ts_pass_return(&held[k]);
		else
			atomic_store(&callers[admitted[k - conc]].release, 1);
		WAIT_FOR(atomic_load(&n_admitted) == k + 1);
	}
	release_all(N);
	for (int i = 0; i < N; i++)
		cr_assert_eq(callers[i].result, 0);
	for (int k = 0; k < N; k++)
		cr_assert_eq(admitted[k], order[k], "admission %d went to caller %d, expected %d",
			     k, admitted[k], order[k]);
	cr_assert_eq(available(t), conc);
	ts_turnstile_free(t);
}

Test(turnstile_order, strict_order_under_contention_concurrency_1)
{
	admission_follows_claims(1, 1);
	admission_follows_claims(1, 2);
}

Test(turnstile_order, strict_order_under_contention_concurrency_3)
{
	admission_follows_claims(3, 3);
	admission_follows_claims(3, 4);
}

Test(turnstile_order, returned_pass_goes_to_the_best_waiter_not_a_newcomer)
{
	ts_turnstile *t = ts_turnstile_new(1);
	ts_pass held, newcomer;
	static const ts_claim mine = { 0, 0, 0 }, best_possible = { -100, -100, 0 };
	int order[4];

	cr_assert_eq(ts_turnstile_wait(t, &mine, 0, NULL, &held), 0);
	queue_callers(t, 4, 7);
	expected_order(order, 4);
	ts_pass_return(&held);
	/* The pass was handed over inside the return: it never became free, so
	 * even the best possible newcomer cannot take it. */
	cr_assert_eq(available(t), 0);
	cr_assert_eq(ts_turnstile_wait(t, &best_possible, TS_DEADLINE_NOW, NULL, &newcomer),
		     ETIMEDOUT);
	WAIT_FOR(atomic_load(&n_admitted) == 1);
	cr_assert_eq(admitted[0], order[0]);
	release_all(4);
	cr_assert_eq(atomic_load(&n_admitted), 4);
	cr_assert_eq(available(t), 1);
	ts_turnstile_free(t);
}
