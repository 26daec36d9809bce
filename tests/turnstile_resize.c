/* SPDX-License-Identifier: MIT */
/* Resize moves the free count by the delta: growing admits exactly the new
 * passes from the head, shrinking below what is held admits nobody until
 * enough return, and new(0) admits nobody at all. */
#include <errno.h>

#include "callers.h"

static const ts_claim mine = { 0, 0, 0 };

static void try_fails(ts_turnstile *t)
{
	ts_pass p;
	cr_assert_eq(ts_turnstile_wait(t, &mine, TS_DEADLINE_NOW, NULL, &p), ETIMEDOUT);
}

Test(turnstile_resize, grow_admits_exactly_the_delta_from_the_head_in_order)
{
	ts_turnstile *t = ts_turnstile_new(0);
	int order[6];

	queue_callers(t, 6, 11);
	expected_order(order, 6);
	cr_assert_eq(ts_turnstile_resize(t, 2), 0);
	WAIT_FOR(atomic_load(&n_admitted) == 2);
	cr_assert_eq(queued(t), 4, "grow by 2 admitted more than 2");
	cr_assert_eq(available(t), 0);
	/* the two best, in either order (both were granted in one step) */
	cr_assert((admitted[0] == order[0] && admitted[1] == order[1]) ||
		  (admitted[0] == order[1] && admitted[1] == order[0]));
	cr_assert_eq(ts_turnstile_resize(t, 6), 0);
	WAIT_FOR(atomic_load(&n_admitted) == 6);
	cr_assert_eq(queued(t), 0);
	cr_assert_eq(available(t), 0);
	release_all(6);
	cr_assert_eq(available(t), 6);
	ts_turnstile_free(t);
}

Test(turnstile_resize, shrink_below_held_goes_negative_and_admits_nobody_until_enough_return)
{
	ts_turnstile *t = ts_turnstile_new(3);
	ts_pass held[3];

	for (int i = 0; i < 3; i++)
		cr_assert_eq(ts_turnstile_wait(t, &mine, 0, NULL, &held[i]), 0);
	cr_assert_eq(ts_turnstile_resize(t, 1), 0);
	cr_assert_eq(available(t), -2);
	try_fails(t);
	queue_callers(t, 1, 5);
	ts_pass_return(&held[0]);
	cr_assert_eq(available(t), -1);
	ts_pass_return(&held[1]);
	cr_assert_eq(available(t), 0);
	cr_assert_eq(queued(t), 1, "admitted while the ceiling was still exceeded");
	try_fails(t);
	ts_pass_return(&held[2]);
	WAIT_FOR(atomic_load(&n_admitted) == 1);
	cr_assert_eq(available(t), 0);
	release_all(1);
	cr_assert_eq(available(t), 1);
	ts_turnstile_free(t);
}

Test(turnstile_resize, zero_admits_nobody_until_resized)
{
	ts_turnstile *t = ts_turnstile_new(0);

	try_fails(t);
	queue_callers(t, 2, 9);
	cr_assert_eq(atomic_load(&n_admitted), 0);
	cr_assert_eq(ts_turnstile_resize(t, 0), 0);
	cr_assert_eq(queued(t), 2);
	cr_assert_eq(ts_turnstile_resize(t, 1), 0);
	WAIT_FOR(atomic_load(&n_admitted) == 1);
	cr_assert_eq(queued(t), 1);
	release_all(2);
	cr_assert_eq(atomic_load(&n_admitted), 2);
	cr_assert_eq(available(t), 1);
	ts_turnstile_free(t);
}
