/* SPDX-License-Identifier: MIT */
/* Bad input to the event-loop calls: a clear result, no side effect. */
#include <errno.h>
#include <poll.h>

#include "loops.h"

static void never(ts_async *node, int result, void *arg)
{
	(void)node;
	(void)result;
	(void)arg;
	abort();
}

Test(async_bad_input, null_objects_are_einval)
{
	ts_notifier *n = ts_notifier_new();
	ts_turnstile *t = ts_turnstile_new(0);
	ts_waitlist *w = ts_waitlist_new(1, 0);
	ts_job job = TS_JOB_INIT;
	ts_async node = TS_ASYNC_INIT;
	ts_claim c = { 0, 0, 0 };
	ts_pass p;
	void *item;

	cr_assert_eq(ts_turnstile_wait_async(NULL, &c, 0, NULL, n, &node, never, NULL, &p), EINVAL);
	cr_assert_eq(ts_turnstile_wait_async(t, NULL, 0, NULL, n, &node, never, NULL, &p), EINVAL);
	cr_assert_eq(ts_turnstile_wait_async(t, &c, 0, NULL, NULL, &node, never, NULL, &p), EINVAL);
	cr_assert_eq(ts_turnstile_wait_async(t, &c, 0, NULL, n, NULL, never, NULL, &p), EINVAL);
	cr_assert_eq(ts_turnstile_wait_async(t, &c, 0, NULL, n, &node, NULL, NULL, &p), EINVAL);
	cr_assert_eq(ts_turnstile_wait_async(t, &c, 0, NULL, n, &node, never, NULL, NULL), EINVAL);
	cr_assert_eq(ts_wait_turn_async(NULL, n, &node, never, NULL, &p), EINVAL);
	cr_assert_eq(ts_wait_turn_async(&job, NULL, &node, never, NULL, &p), EINVAL);
	cr_assert_eq(ts_wait_turn_async(&job, n, NULL, never, NULL, &p), EINVAL);
	cr_assert_eq(ts_wait_turn_async(&job, n, &node, NULL, NULL, &p), EINVAL);
	cr_assert_eq(ts_wait_turn_async(&job, n, &node, never, NULL, NULL), EINVAL);
	cr_assert_eq(ts_waitlist_take_async(NULL, 0, NULL, n, &node, never, NULL, &item), EINVAL);
	cr_assert_eq(ts_waitlist_take_async(w, 0, NULL, NULL, &node, never, NULL, &item), EINVAL);
	cr_assert_eq(ts_waitlist_take_async(w, 0, NULL, n, NULL, never, NULL, &item), EINVAL);
	cr_assert_eq(ts_waitlist_take_async(w, 0, NULL, n, &node, NULL, NULL, &item), EINVAL);
	cr_assert_eq(ts_waitlist_take_async(w, 0, NULL, n, &node, never, NULL, NULL), EINVAL);
	/* nothing happened: no slot taken, nobody queued */
	size_t created, waiting;
	ts_waitlist_stats(w, &created, NULL, &waiting);
	cr_assert_eq(created, 0);
	cr_assert_eq(waiting, 0);
	cr_assert_eq(queued(t), 0);

	errno = 0;
	cr_assert_eq(ts_notifier_fd(NULL), -1);
	cr_assert_eq(errno, EINVAL);
	cr_assert_eq(ts_notifier_dispatch(NULL), 0);
	cr_assert_eq(ts_notifier_free(NULL), EINVAL);
	cr_assert_eq(ts_async_cancel(NULL), EINVAL);
	ts_pass none = ts_async_pass(NULL);
	cr_assert(!ts_pass_issued(&none));
	cr_assert_null(ts_async_item(NULL));
	ts_notifier_counters k = { 1, 1, 1, 1 };
	ts_notifier_read_counters(NULL, &k);
	cr_assert_eq(k.callbacks + k.completions + k.fd_writes + k.timeouts, 0);
	ts_notifier_read_counters(n, NULL);

	cr_assert_eq(ts_notifier_free(n), 0);
	ts_turnstile_free(t);
	ts_waitlist_free(w);
}

Test(async_bad_input, a_pending_node_is_ebusy_and_a_free_node_enoent)
{
	ts_notifier *n = ts_notifier_new();
	ts_turnstile *t = ts_turnstile_new(0);
	ts_waitlist *w = ts_waitlist_new(1, 0);
	ts_async node = TS_ASYNC_INIT;
	ts_claim c = { 0, 0, 0 };
	ts_pass p;
	void *item;

	cr_assert_eq(ts_async_cancel(&node), ENOENT);
	cr_assert_eq(ts_turnstile_wait_async(t, &c, 0, NULL, n, &node, never, NULL, &p), EINPROGRESS);
	cr_assert_eq(ts_turnstile_wait_async(t, &c, 0, NULL, n, &node, never, NULL, &p), EBUSY);
	cr_assert_eq(ts_waitlist_take_async(w, 0, NULL, n, &node, never, NULL, &item), EBUSY);
	cr_assert_eq(queued(t), 1, "a refused call queued the node twice");
	size_t created;
	ts_waitlist_stats(w, &created, NULL, NULL);
	cr_assert_eq(created, 0, "a refused call took a slot");
	cr_assert_eq(ts_notifier_free(n), EBUSY);
	cr_assert_eq(ts_async_cancel(&node), 0);
	cr_assert_eq(ts_async_cancel(&node), ENOENT);
	cr_assert_eq(ts_notifier_dispatch(n), 0);
	cr_assert_eq(ts_notifier_free(n), 0);
	ts_turnstile_free(t);
	ts_waitlist_free(w);
}

/* Fail-open as ts_wait_turn: a job that orders nothing passes at once. */
Test(async_bad_input, an_unprioritized_job_passes_at_once)
{
	ts_notifier *n = ts_notifier_new();
	ts_job job = TS_JOB_INIT;
	ts_async node = TS_ASYNC_INIT;
	ts_pass p;

	cr_assert_eq(ts_wait_turn_async(&job, n, &node, never, NULL, &p), 0);
	cr_assert(!ts_pass_issued(&p));
	cr_assert_eq(ts_notifier_free(n), 0);
}

static int open_result = -1;
static bool open_issued = true;

static void fail_open(ts_async *node, int result, void *arg)
{
	(void)arg;
	ts_pass p = ts_async_pass(node);
	open_result = result;
	open_issued = ts_pass_issued(&p);
}

/* A job's wait that ends without a pass still calls back with 0 and an
 * unissued pass: the caller proceeds unordered. */
Test(async_bad_input, a_job_wait_that_times_out_fails_open)
{
	ts_notifier *n = ts_notifier_new();
	ts_set *s = ts_set_new();
	ts_job job = TS_JOB_INIT;
	ts_async node = TS_ASYNC_INIT;
	ts_pass held, p;

	cr_assert_eq(ts_set_resize(s, 1, 1), 0);
	ts_set_prioritize(s, &job, 1, 0);
	cr_assert_eq(ts_wait_turn_async(&job, n, &node, fail_open, NULL, &held), 0);
	cr_assert(ts_pass_issued(&held));
	ts_job_set_deadline(&job, ts_now_ns() + 200000000); /* still ahead under valgrind */
	cr_assert_eq(ts_wait_turn_async(&job, n, &node, fail_open, NULL, &p), EINPROGRESS);
	struct pollfd pfd = { ts_notifier_fd(n), POLLIN, 0 };
	cr_assert_eq(poll(&pfd, 1, 5000), 1, "the deadline did not make the fd readable");
	cr_assert_eq(ts_notifier_dispatch(n), 1);
	cr_assert_eq(open_result, 0);
	cr_assert(!open_issued);
	ts_pass_return(&held);
	cr_assert_eq(ts_notifier_free(n), 0);
	ts_set_free(s);
}

static int free_from_callback = -1;

static void try_free(ts_async *node, int result, void *arg)
{
	(void)node;
	(void)result;
	free_from_callback = ts_notifier_free(arg);
}

/* The notifier is still in use by the dispatch that runs the callback. */
Test(async_bad_input, a_callback_cannot_free_its_own_notifier)
{
	ts_notifier *n = ts_notifier_new();
	ts_turnstile *t = ts_turnstile_new(1);
	ts_async node = TS_ASYNC_INIT;
	ts_claim c = { 0, 0, 0 };
	ts_pass held, p;

	cr_assert_eq(ts_turnstile_wait(t, &c, 0, NULL, &held), 0);
	cr_assert_eq(ts_turnstile_wait_async(t, &c, 0, NULL, n, &node, try_free, n, &p), EINPROGRESS);
	ts_pass_return(&held);
	cr_assert_eq(ts_notifier_dispatch(n), 1);
	cr_assert_eq(free_from_callback, EBUSY);
	p = ts_async_pass(&node);
	ts_pass_return(&p);
	cr_assert_eq(ts_notifier_free(n), 0);
	ts_turnstile_free(t);
}
