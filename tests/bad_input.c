/* SPDX-License-Identifier: MIT */
/* Bad input, function by function: every row of docs/bad-input.md.  Each
 * gets its documented result — never a crash, a hang or a silent wrong
 * answer.  (Returning a pass to a freed turnstile is not detectable at an
 * acceptable cost and is documented as a caller error.) */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "testutil.h"

static const ts_claim claim = { 0, 0, 0 };

Test(bad_input, cancel)
{
	ts_cancel_init(NULL);
	ts_cancel_fire(NULL);
	cr_assert_not(ts_cancel_fired(NULL));
	ts_cancel_destroy(NULL);
}

Test(bad_input, turnstile_new_and_resize)
{
	errno = 0;
	cr_assert_null(ts_turnstile_new(-1));
	cr_assert_eq(errno, EINVAL);
	errno = 0;
	cr_assert_null(ts_turnstile_new(TS_CONCURRENCY_MAX + 1));
	cr_assert_eq(errno, EINVAL);
	ts_turnstile *largest = ts_turnstile_new(TS_CONCURRENCY_MAX);
	cr_assert_not_null(largest);
	ts_turnstile_free(largest);
	ts_turnstile *t = ts_turnstile_new(1);
	cr_assert_eq(ts_turnstile_resize(NULL, 1), EINVAL);
	cr_assert_eq(ts_turnstile_resize(t, -1), EINVAL);
	cr_assert_eq(ts_turnstile_resize(t, INT64_MIN), EINVAL);
	cr_assert_eq(ts_turnstile_resize(t, TS_CONCURRENCY_MAX + 1), EINVAL);
	cr_assert_eq(available(t), 1, "a refused resize changed the count");
	ts_turnstile_free(NULL);
	ts_turnstile_free(t);
}

Test(bad_input, turnstile_wait)
{
	ts_turnstile *t = ts_turnstile_new(1);
	ts_pass p = { (ts_turnstile *)&p, 99 }; /* garbage in the out-parameter */

	cr_assert_eq(ts_turnstile_wait(NULL, &claim, 0, NULL, &p), EINVAL);
	cr_assert_not(ts_pass_issued(&p), "*pass not reset on EINVAL");
	cr_assert_eq(ts_turnstile_wait(t, NULL, 0, NULL, &p), EINVAL);
	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, NULL), EINVAL);
	cr_assert_eq(available(t), 1);
	/* a negative deadline is in the past: a try */
	ts_pass held;
	cr_assert_eq(ts_turnstile_wait(t, &claim, -5, NULL, &held), 0);
	cr_assert_eq(ts_turnstile_wait(t, &claim, -5, NULL, &p), ETIMEDOUT);
	ts_pass_return(&held);
	ts_turnstile_free(t);
}

Test(bad_input, turnstile_observers_and_passes)
{
	ts_turnstile_close(NULL);
	cr_assert_not(ts_turnstile_closed(NULL));
	int64_t a = 5, w = 5;
	ts_turnstile_snapshot(NULL, &a, &w);
	cr_assert(a == 0 && w == 0);
	ts_turnstile *t = ts_turnstile_new(2);
	ts_turnstile_snapshot(t, NULL, NULL);
	ts_pass none = TS_PASS_NONE, p;
	ts_pass_return(NULL);
	ts_pass_return(&none);
	cr_assert_not(ts_pass_issued(NULL));
	cr_assert_eq(ts_pass_waited_ns(NULL), 0);
	cr_assert_eq(ts_pass_waited_ns(&none), 0);
	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &p), 0);
	ts_pass_return(&p);
	ts_pass_return(&p); /* twice */
	cr_assert_eq(available(t), 2, "a double return inflated the ceiling");
	ts_turnstile_free(t);
}

Test(bad_input, set)
{
	ts_set *s = ts_set_new();
	cr_assert_eq(ts_set_resize(NULL, 0, 1), EINVAL);
	cr_assert_eq(ts_set_resize(s, -1, 1), EINVAL);
	cr_assert_eq(ts_set_resize(s, INT_MIN, 1), EINVAL);
	cr_assert_eq(ts_set_resize(s, 0, -1), EINVAL);
	cr_assert_eq(ts_set_resize(s, 0, TS_CONCURRENCY_MAX + 1), EINVAL);
	cr_assert_null(ts_set_turnstile(s, 0), "a refused resize created a shard");
	cr_assert_eq(ts_set_resize(s, INT_MAX, 1), 0, "the largest id is valid");
	cr_assert_null(ts_set_turnstile(s, -5));
	cr_assert_null(ts_set_turnstile(NULL, 0));
	cr_assert_not(ts_set_closed(NULL));
	ts_set_close(NULL);
	ts_set_snapshot(NULL, NULL, NULL);
	ts_set_snapshot(s, NULL, NULL);
	ts_set_close(s);
	cr_assert_eq(ts_set_resize(s, 1, 1), ESHUTDOWN);
	cr_assert_null(ts_set_turnstile(s, 1));
	ts_set_free(s);
	ts_set_free(NULL);
}

Test(bad_input, job)
{
	ts_set *s = ts_set_new();
	ts_job job = TS_JOB_INIT;
	ts_set_prioritize(NULL, &job, 0, 0);
	ts_set_prioritize(s, NULL, 0, 0);
	cr_assert_eq(ts_job_claim(&job).seq, 0, "prioritize with a NULL set stamped the job");
	ts_job_set_deadline(NULL, 1);
	ts_job_set_cancel(NULL, NULL);
	ts_claim zero = ts_job_claim(NULL);
	cr_assert(zero.priority == 0 && zero.since_ns == 0 && zero.seq == 0);
	ts_pass p = ts_wait_turn(NULL);
	cr_assert_not(ts_pass_issued(&p));
	ts_set_prioritize(s, &job, INT_MIN, 0); /* negative: no turnstile */
	p = ts_wait_turn(&job);
	cr_assert_not(ts_pass_issued(&p));
	ts_set_free(s);
}

Test(bad_input, gate)
{
	ts_set *s = ts_set_new();
	ts_set_resize(s, 0, 1);
	ts_gate g = ts_set_gate(s, 0), nothing = ts_set_gate(NULL, 0);
	ts_job job = TS_JOB_INIT;
	ts_pass p;
	cr_assert_not(ts_gate_acquire(NULL, &job, 0, &p));
	cr_assert_not(ts_pass_issued(&p));
	cr_assert_not(ts_gate_acquire(&g, NULL, 0, &p));
	cr_assert_not(ts_gate_acquire(&g, &job, 0, NULL));
	cr_assert_not(ts_gate_acquire(&nothing, &job, 0, &p));
	cr_assert(ts_gate_acquire(&g, &job, -3, &p), "a negative shard refused an open set");
	cr_assert_not(ts_pass_issued(&p));
	ts_set_free(s);
}

static int negative_load(void *arg, void **item)
{
	return -1; /* not a positive errno: a broken loader */
}

Test(bad_input, waitlist)
{
	ts_waitlist *w = ts_waitlist_new(0, 0);
	void *item = (void *)1;
	size_t c = 9, r = 9, q = 9;

	cr_assert_eq(ts_waitlist_take(NULL, &item, NULL, NULL, 0, NULL), EINVAL);
	cr_assert_null(item);
	cr_assert_eq(ts_waitlist_take(w, NULL, NULL, NULL, 0, NULL), EINVAL);
	cr_assert_eq(ts_waitlist_take(w, &item, negative_load, NULL, 0, NULL), EIO);
	ts_waitlist_stats(w, &c, NULL, NULL);
	cr_assert_eq(c, 0, "a failed load kept its slot");
	cr_assert_not(ts_waitlist_try_take(NULL, &item));
	cr_assert_not(ts_waitlist_try_take(w, NULL));
	cr_assert_not(ts_waitlist_put(NULL, item));
	ts_waitlist_discard(NULL);
	ts_waitlist_discard(w); /* more discards than items: stays at 0 */
	ts_waitlist_close(NULL);
	ts_waitlist_stats(NULL, &c, &r, &q);
	cr_assert(c == 0 && r == 0 && q == 0);
	ts_waitlist_stats(w, NULL, NULL, NULL);
	ts_waitlist_stats(w, &c, NULL, NULL);
	cr_assert_eq(c, 0);
	ts_waitlist_free(NULL);
	ts_waitlist_free(w);
}

Test(bad_input, additions_of_0_2)
{
	ts_pass p = { (ts_turnstile *)&p, 7 };
	ts_waitlist_counters c;

	cr_assert_eq(ts_wait_turn_strict(NULL, &p), EINVAL);
	cr_assert_not(ts_pass_issued(&p), "*pass was left issued on EINVAL");
	ts_job job = TS_JOB_INIT;
	cr_assert_eq(ts_wait_turn_strict(&job, NULL), EINVAL);
	memset(&c, 0xff, sizeof(c));
	ts_waitlist_read_counters(NULL, &c);
	cr_assert(c.loads == 0 && c.load_failures == 0 && c.last_load_error == 0 &&
		  c.discards == 0 && c.timeouts == 0 && c.cancels == 0 && c.rejected == 0);
	ts_waitlist *w = ts_waitlist_new(1, 0);
	ts_waitlist_read_counters(w, NULL);
	ts_waitlist_free(w);
	cr_assert_not_null(ts_strerror(-5));
	cr_assert_not_null(ts_strerror(INT_MAX));
	cr_assert_not_null(ts_strerror(INT_MIN));
	cr_assert_eq(ts_version(), TS_VERSION_NUMBER);
}
