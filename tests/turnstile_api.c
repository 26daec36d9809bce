/* SPDX-License-Identifier: MIT */
/* Single-caller behaviour of the turnstile API: bad input, precedence of
 * closed / cancel / free pass / deadline, returns, snapshots. */
#include <errno.h>

#include "testutil.h"

static const ts_claim claim = { 0, 0, 0 };

Test(turnstile_api, double_return_and_unissued_return_change_nothing)
{
	ts_turnstile *t = ts_turnstile_new(1);
	ts_pass p, none = TS_PASS_NONE;

	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &p), 0);
	cr_assert(ts_pass_issued(&p));
	cr_assert_eq(available(t), 0);
	ts_pass_return(&p);
	cr_assert_not(ts_pass_issued(&p));
	cr_assert_eq(available(t), 1);
	ts_pass_return(&p);
	ts_pass_return(&none);
	cr_assert_eq(available(t), 1, "a second return issued a phantom pass");
	ts_turnstile_free(t);
}

/* A second COPY of a returned pass is a caller error; it is caught when
 * every pass is already free, so it cannot raise the ceiling — on the
 * inlined fast path, the library's exported one (the _noinline build), and
 * the locked path (a turnstile resized to ceiling 0). */
Test(turnstile_api, returning_a_copy_of_a_returned_pass_never_raises_the_ceiling)
{
	ts_turnstile *t = ts_turnstile_new(2);
	ts_pass p, q, copy;

	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &p), 0);
	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &q), 0);
	copy = p;
	ts_pass_return(&p);
	ts_pass_return(&copy); /* q is still held: this one cannot be told apart */
	ts_pass_return(&q);
	cr_assert_eq(available(t), 2);
	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &p), 0);
	copy = p;
	ts_pass_return(&p);
	ts_pass_return(&copy);
	cr_assert_eq(available(t), 2, "a copy returned with every pass free raised the ceiling");
	cr_assert_eq(ts_turnstile_resize(t, 0), 0);
	cr_assert_eq(ts_turnstile_wait(t, &claim, in_ms(1), NULL, &q), ETIMEDOUT);
	ts_pass_return(&copy); /* the locked path: nobody holds a pass of 0 */
	cr_assert_eq(available(t), 0);
	ts_turnstile_free(t);
}

Test(turnstile_api, deadline_now_takes_a_free_pass_or_times_out_at_once)
{
	ts_turnstile *t = ts_turnstile_new(1);
	ts_pass p1, p2;

	cr_assert_eq(ts_turnstile_wait(t, &claim, TS_DEADLINE_NOW, NULL, &p1), 0);
	cr_assert_eq(ts_pass_waited_ns(&p1), 0, "uncontended pass did not queue");
	cr_assert_eq(ts_turnstile_wait(t, &claim, TS_DEADLINE_NOW, NULL, &p2), ETIMEDOUT);
	cr_assert_not(ts_pass_issued(&p2));
	cr_assert_eq(queued(t), 0, "a refused try left a node in the queue");
	ts_pass_return(&p1);
	cr_assert_eq(available(t), 1);
	ts_turnstile_free(t);
}

Test(turnstile_api, deadline_ends_a_real_wait_and_reports_time)
{
	ts_turnstile *t = ts_turnstile_new(1);
	ts_pass held, p;

	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &held), 0);
	int64_t start = ts_now_ns();
	cr_assert_eq(ts_turnstile_wait(t, &claim, in_ms(20), NULL, &p), ETIMEDOUT);
	cr_assert_geq(ts_now_ns() - start, 20 * 1000000 - 1000000);
	cr_assert_eq(queued(t), 0);
	ts_pass_return(&held);
	cr_assert_eq(available(t), 1, "the pass returned after a timeout was lost");
	ts_turnstile_free(t);
}

Test(turnstile_api, fired_cancel_fails_even_with_free_passes)
{
	ts_turnstile *t = ts_turnstile_new(4);
	ts_cancel c = TS_CANCEL_INIT;
	ts_pass p;

	ts_cancel_fire(&c);
	ts_cancel_fire(&c); /* idempotent */
	cr_assert(ts_cancel_fired(&c));
	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, &c, &p), ECANCELED);
	cr_assert_not(ts_pass_issued(&p));
	cr_assert_eq(available(t), 4);
	ts_cancel_destroy(&c);
	ts_turnstile_free(t);
}

Test(turnstile_api, closed_takes_precedence_over_cancel_and_free_passes)
{
	ts_turnstile *t = ts_turnstile_new(2);
	ts_cancel c;
	ts_pass p;

	ts_cancel_init(&c);
	ts_cancel_fire(&c);
	ts_turnstile_close(t);
	cr_assert(ts_turnstile_closed(t));
	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, &c, &p), ESHUTDOWN);
	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &p), ESHUTDOWN);
	ts_turnstile_free(t);
}

Test(turnstile_api, snapshot_reports_free_and_queued)
{
	ts_turnstile *t = ts_turnstile_new(3);
	ts_pass p[3];
	int64_t a, w;

	for (int i = 0; i < 3; i++)
		cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &p[i]), 0);
	ts_turnstile_snapshot(t, &a, &w);
	cr_assert(a == 0 && w == 0);
	cr_assert_eq(ts_turnstile_ceiling(t), 3);
	cr_assert_eq(ts_turnstile_resize(t, 1), 0);
	ts_turnstile_snapshot(t, &a, NULL);
	cr_assert_eq(a, -2);
	cr_assert_eq(ts_turnstile_ceiling(t), 1); /* held = ceiling - free = 3 */
	cr_assert_eq(ts_turnstile_ceiling(NULL), 0);
	for (int i = 0; i < 3; i++)
		ts_pass_return(&p[i]);
	cr_assert_eq(available(t), 1);
	ts_turnstile_free(t);
}

/* A cancel token wakes every wait that uses it, across turnstiles. */
struct cancel_arg {
	ts_turnstile *t;
	ts_cancel *c;
	int result;
	ts_pass pass;
};

static void *wait_with_cancel(void *p)
{
	struct cancel_arg *a = p;
	a->result = ts_turnstile_wait(a->t, &claim, 0, a->c, &a->pass);
	return NULL;
}

Test(turnstile_api, firing_a_cancel_wakes_every_wait_using_it)
{
	ts_turnstile *t1 = ts_turnstile_new(0), *t2 = ts_turnstile_new(0);
	ts_cancel c = TS_CANCEL_INIT;
	struct cancel_arg args[4];
	pthread_t th[4];

	for (int i = 0; i < 4; i++) {
		args[i] = (struct cancel_arg){ i % 2 ? t2 : t1, &c, -1, TS_PASS_NONE };
		start_thread(&th[i], wait_with_cancel, &args[i]);
	}
	WAIT_FOR(queued(t1) == 2 && queued(t2) == 2);
	ts_cancel_fire(&c);
	for (int i = 0; i < 4; i++) {
		join_bounded(th[i]);
		cr_assert_eq(args[i].result, ECANCELED);
	}
	cr_assert(queued(t1) == 0 && queued(t2) == 0);
	ts_cancel_destroy(&c);
	ts_turnstile_free(t1);
	ts_turnstile_free(t2);
}

Test(turnstile_api, waited_ns_counts_from_joining_the_queue)
{
	ts_turnstile *t = ts_turnstile_new(1);
	ts_pass held;
	struct cancel_arg a = { t, NULL, -1, TS_PASS_NONE };
	pthread_t th;

	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &held), 0);
	start_thread(&th, wait_with_cancel, &a);
	WAIT_FOR(queued(t) == 1);
	int64_t queued_at = ts_now_ns();
	while (ts_now_ns() - queued_at < 2000000)
		sched_yield(); /* let measurable time pass: this is the quantity under test */
	ts_pass_return(&held);
	join_bounded(th);
	cr_assert_eq(a.result, 0);
	cr_assert_geq(ts_pass_waited_ns(&a.pass), 2000000);
	cr_assert_lt(ts_pass_waited_ns(&a.pass), TEST_PATIENCE_NS);
	ts_pass_return(&a.pass);
	cr_assert_eq(available(t), 1);
	ts_turnstile_free(t);
}

static void never_called(ts_async *node, int result, void *arg)
{
	(void)node, (void)result, (void)arg;
	cr_assert(false, "a withdrawn wait's callback ran");
}

/* Waiters are told per band in ascending order, all counted even past the
 * pairs asked for; bad input is -EINVAL. */
Test(turnstile_api, waiting_by_band_counts_each_band_in_order)
{
	ts_turnstile *t = ts_turnstile_new(1);
	ts_notifier *n = ts_notifier_new();
	ts_async node[6] = { TS_ASYNC_INIT, TS_ASYNC_INIT, TS_ASYNC_INIT,
			     TS_ASYNC_INIT, TS_ASYNC_INIT, TS_ASYNC_INIT };
	const int band[6] = { 2, 0, 2, 5, 0, 2 };
	ts_pass held, p[6];
	int bands[3];
	int64_t waiting[3];

	cr_assert_eq(ts_turnstile_waiting_by_band(t, bands, waiting, 3), 0);
	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &held), 0);
	for (int i = 0; i < 6; i++)
		cr_assert_eq(ts_turnstile_wait_async(t, &(ts_claim){ band[i], i, 0 }, 0, NULL, n,
						     &node[i], never_called, NULL, &p[i]),
			     EINPROGRESS);
	cr_assert_eq(ts_turnstile_waiting_by_band(t, bands, waiting, 3), 3);
	cr_assert(bands[0] == 0 && waiting[0] == 2, "band %d: %ld", bands[0], (long)waiting[0]);
	cr_assert(bands[1] == 2 && waiting[1] == 3, "band %d: %ld", bands[1], (long)waiting[1]);
	cr_assert(bands[2] == 5 && waiting[2] == 1, "band %d: %ld", bands[2], (long)waiting[2]);
	bands[1] = -1;
	cr_assert_eq(ts_turnstile_waiting_by_band(t, bands, waiting, 1), 3, "bands past max uncounted");
	cr_assert_eq(bands[1], -1, "a pair past max was written");
	cr_assert_eq(ts_turnstile_waiting_by_band(t, NULL, NULL, 0), 3);
	cr_assert_eq(ts_turnstile_waiting_by_band(NULL, bands, waiting, 3), -EINVAL);
	cr_assert_eq(ts_turnstile_waiting_by_band(t, NULL, waiting, 3), -EINVAL);
	cr_assert_eq(ts_turnstile_waiting_by_band(t, bands, waiting, -1), -EINVAL);
	for (int i = 0; i < 6; i++)
		cr_assert_eq(ts_async_cancel(&node[i]), 0);
	cr_assert_eq(ts_turnstile_waiting_by_band(t, bands, waiting, 3), 0);
	ts_pass_return(&held);
	ts_notifier_free(n);
	ts_turnstile_free(t);
}
