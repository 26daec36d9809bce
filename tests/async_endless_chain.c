/* SPDX-License-Identifier: MIT */
/* A chain of completions that callbacks cause (each callback queues its
 * client again and returns its pass, which completes the other client's
 * node of the same notifier, whose callback does the same, for ever)
 * cannot keep ts_notifier_dispatch or ts_notifier_before_poll from
 * returning: each call runs a bounded number of rounds, leaves the rest
 * for the next call, and makes the fd readable for it — so a loop that
 * polls after the call is woken at once, and nothing is lost when the
 * chain finally stops.  The test thread is the loop here: every call
 * naming the notifier is made on it. */
#include <errno.h>
#include <poll.h>

#include "testutil.h"

#define CALLS 5
/* "A few rounds": here each round runs one callback (it causes exactly
 * one completion), so a call runs DISPATCH_ROUNDS of them, 16 today;
 * this leaves room to tune it but not to drop the bound. */
#define FEW 64

static ts_turnstile *t;
static ts_notifier *n;
static ts_async nodes[2];
static bool stopping;
static long ran; /* callbacks run */
static int faults; /* a callback without its pass, or a queue refused */

static void chain(ts_async *node, int result, void *arg);

static int queue(int i, ts_pass *pass)
{
	ts_claim c = { 0, ts_now_ns(), (uint64_t)ran };
	return ts_turnstile_wait_async(t, &c, 0, NULL, n, &nodes[i], chain, (void *)(intptr_t)i, pass);
}

/* Queue again (the pass this client holds is the only one, so it waits),
 * then give the pass back: it completes the other client's node. */
static void chain(ts_async *node, int result, void *arg)
{
	int i = (int)(intptr_t)arg;
	ts_pass pass = ts_async_pass(node), none;
	ran++;
	if (result != 0 || !ts_pass_issued(&pass))
		faults++;
	if (!stopping && queue(i, &none) != EINPROGRESS)
		faults++;
	ts_pass_return(&pass);
}

static bool fd_readable(void)
{
	struct pollfd p = { .fd = ts_notifier_fd(n), .events = POLLIN };
	return poll(&p, 1, 0) == 1;
}

/* Client 0 takes the only pass, client 1 queues, client 0's pass goes
 * back and completes client 1: the chain starts at the next call.  With
 * @local this thread is the loop's (before_poll) before it starts. */
static void start_chain(bool local)
{
	ts_pass p;
	t = ts_turnstile_new(1);
	n = ts_notifier_new();
	cr_assert(t && n);
	if (local)
		cr_assert_eq(ts_notifier_before_poll(n), 0);
	nodes[0] = nodes[1] = (ts_async)TS_ASYNC_INIT;
	stopping = false;
	ran = 0;
	faults = 0;
	cr_assert_eq(queue(0, &p), 0);
	ts_pass none;
	cr_assert_eq(queue(1, &none), EINPROGRESS);
	ts_pass_return(&p);
}

/* Stop the chain: the callbacks stop queueing, every call runs what is
 * left, and the pass is back with nobody waiting. */
static void end_chain(int (*call)(ts_notifier *))
{
	stopping = true;
	for (int i = 0; i < 100 && call(n) > 0; i++)
		;
	cr_assert_eq(faults, 0, "a callback came without its pass, or could not queue again");
	int64_t avail, waiting;
	ts_turnstile_snapshot(t, &avail, &waiting);
	cr_assert_eq(avail, 1, "the pass was lost");
	cr_assert_eq(waiting, 0);
	cr_assert_eq(ts_notifier_free(n), 0);
	ts_turnstile_free(t);
}

Test(async_endless_chain, dispatch_returns_and_leaves_the_rest_announced, .timeout = 20)
{
	start_chain(false);
	for (int k = 0; k < CALLS; k++) {
		cr_assert(fd_readable(), "call %d: the fd does not say work is waiting", k);
		long before = ran;
		int r = ts_notifier_dispatch(n);
		cr_assert_gt(r, 0, "call %d ran nothing", k);
		cr_assert_eq(ran - before, r);
		cr_assert_leq(r, FEW, "call %d ran %d callbacks", k, r);
	}
	cr_assert(fd_readable());
	end_chain(ts_notifier_dispatch);
}

Test(async_endless_chain, before_poll_returns_and_leaves_the_rest_announced, .timeout = 20)
{
	start_chain(true);
	/* the first completion was the loop's own: no fd write */
	cr_assert(!fd_readable(), "a loop-local completion wrote the fd");
	for (int k = 0; k < CALLS; k++) {
		long before = ran;
		int r = ts_notifier_before_poll(n);
		cr_assert_gt(r, 0, "call %d ran nothing", k);
		cr_assert_eq(ran - before, r);
		cr_assert_leq(r, FEW, "call %d ran %d callbacks", k, r);
		/* the loop would block now: the fd must wake it */
		cr_assert(fd_readable(), "call %d left work and the fd does not say so", k);
		before = ran;
		r = ts_notifier_dispatch(n); /* woken: drains the fd, goes on */
		cr_assert_gt(r, 0, "dispatch %d ran nothing", k);
		cr_assert_eq(ran - before, r);
		cr_assert(fd_readable(), "dispatch %d left work and the fd does not say so", k);
	}
	end_chain(ts_notifier_before_poll);
}
