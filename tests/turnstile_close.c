/* SPDX-License-Identifier: MIT */
/* Close releases every waiter with ESHUTDOWN, refuses later waits, is
 * idempotent, and still accepts the passes held when it happened. */
#include <errno.h>

#include "callers.h"

static const ts_claim mine = { 0, 0, 0 };

Test(turnstile_close, releases_every_parked_waiter_with_eshutdown)
{
	ts_turnstile *t = ts_turnstile_new(1);
	ts_pass held, p;

	cr_assert_eq(ts_turnstile_wait(t, &mine, 0, NULL, &held), 0);
	queue_callers(t, 16, 3);
	ts_turnstile_close(t);
	release_all(16);
	for (int i = 0; i < 16; i++)
		cr_assert_eq(callers[i].result, ESHUTDOWN);
	cr_assert_eq(atomic_load(&n_admitted), 0);
	cr_assert_eq(queued(t), 0);
	cr_assert_eq(ts_turnstile_wait(t, &mine, 0, NULL, &p), ESHUTDOWN);
	ts_turnstile_close(t);
	cr_assert(ts_turnstile_closed(t));
	ts_pass_return(&held);
	cr_assert_eq(available(t), 1, "a pass held across close came back");
	cr_assert_eq(ts_turnstile_wait(t, &mine, 0, NULL, &p), ESHUTDOWN,
		     "a closed turnstile admitted a caller");
	ts_turnstile_free(t);
}

Test(turnstile_close, resize_after_close_moves_the_count_but_admits_nobody)
{
	ts_turnstile *t = ts_turnstile_new(1);
	ts_pass p;

	ts_turnstile_close(t);
	cr_assert_eq(ts_turnstile_resize(t, 4), 0);
	cr_assert_eq(available(t), 4);
	cr_assert_eq(ts_turnstile_wait(t, &mine, TS_DEADLINE_NOW, NULL, &p), ESHUTDOWN);
	ts_turnstile_free(t);
}
