/* SPDX-License-Identifier: MIT */
/* Deadlines need no timer from the caller: a loop that only polls the
 * notifier's fd gets each expired wait's ETIMEDOUT shortly after its
 * deadline, and never before it. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>

#include "loops.h"

#define WAITS 10000
#define SPREAD_NS ((int64_t)10000) /* 10 us between deadlines: 100 ms in all */

/* Each wait must be told in the first dispatch that starts after its
 * deadline, and that dispatch must have been woken by the fd (the loop's
 * poll has a 1 s timeout it must never reach): those two hold however
 * long the machine keeps the loop thread off the CPU.  The lateness itself
 * (target: within 1 ms) is reported, not asserted: a shared 2-vCPU
 * machine running the rest of the suite in parallel stalls the thread for
 * tens of milliseconds at times, which no library can hide. */
struct timed {
	ts_async node;
	int64_t deadline_ns;
	int64_t late_ns;
	int64_t previous_dispatch_ns; /* when the dispatch before its own began */
	int result, calls;
};

static struct timed waits[WAITS];
static int64_t previous_dispatch_ns;

static void expired(ts_async *node, int result, void *arg)
{
	struct timed *w = arg;
	(void)node;
	w->late_ns = ts_now_ns() - w->deadline_ns;
	w->previous_dispatch_ns = previous_dispatch_ns;
	w->result = result;
	w->calls++;
}

static int by_value(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

Test(async_deadlines, each_expires_on_time_with_only_the_fd_polled)
{
	static int64_t late[WAITS];
	ts_notifier *n = ts_notifier_new();
	ts_turnstile *t = ts_turnstile_new(0); /* nobody is ever admitted */
	int64_t start = ts_now_ns() + 1000000000; /* queueing 10,000 is slow under TSan and valgrind */
	ts_pass p;

	/* Queued in a scrambled order, so the heap does the sorting. */
	for (int i = 0; i < WAITS; i++) {
		int k = (int)(((uint64_t)i * 7919) % WAITS);
		ts_claim c = { k % 4, 0, 0 };
		waits[k] = (struct timed){ .node = TS_ASYNC_INIT,
					   .deadline_ns = start + k * SPREAD_NS };
		cr_assert_eq(ts_turnstile_wait_async(t, &c, waits[k].deadline_ns, NULL, n,
						     &waits[k].node, expired, &waits[k], &p),
			     EINPROGRESS);
	}
	cr_assert_eq(queued(t), WAITS);

	struct pollfd pfd = { ts_notifier_fd(n), POLLIN, 0 };
	int done = 0;
	previous_dispatch_ns = 0;
	while (done < WAITS) {
		cr_assert_eq(poll(&pfd, 1, 1000), 1, "the fd was not readable within 1 s: %d of %d expired",
			     done, WAITS);
		int64_t now = ts_now_ns();
		done += ts_notifier_dispatch(n);
		previous_dispatch_ns = now;
	}
	for (int i = 0; i < WAITS; i++) {
		cr_assert_eq(waits[i].calls, 1);
		cr_assert_eq(waits[i].result, ETIMEDOUT);
		cr_assert_geq(waits[i].late_ns, 0, "wait %d expired %lld ns early", i,
			      (long long)-waits[i].late_ns);
		cr_assert_geq(waits[i].deadline_ns, waits[i].previous_dispatch_ns,
			      "wait %d was due in an earlier dispatch", i);
		late[i] = waits[i].late_ns;
	}
	qsort(late, WAITS, sizeof(late[0]), by_value);
	int64_t p50 = late[WAITS / 2], p99 = late[WAITS * 99 / 100], max = late[WAITS - 1];
	cr_log_info("deadlines: lateness p50 %lld us, p99 %lld us, max %lld us over %d waits",
		    (long long)p50 / 1000, (long long)p99 / 1000, (long long)max / 1000, WAITS);
	cr_assert_eq(queued(t), 0);
	ts_notifier_counters k;
	ts_notifier_read_counters(n, &k);
	cr_assert_eq(k.timeouts, WAITS);
	cr_assert_eq(ts_notifier_free(n), 0);
	ts_turnstile_free(t);
}

static int taker_result = -1;

static void took(ts_async *node, int result, void *arg)
{
	(void)node;
	(void)arg;
	taker_result = result;
}

/* A deadline in the past with nothing to take refuses at once; one in
 * the future expires through the fd, on a waitlist too. */
Test(async_deadlines, a_waitlist_take_expires_too)
{
	ts_notifier *n = ts_notifier_new();
	ts_waitlist *w = ts_waitlist_new(1, 0);
	ts_async node = TS_ASYNC_INIT;
	void *item;

	cr_assert_eq(ts_waitlist_take(w, &item, NULL, NULL, 0, NULL), 0); /* the only slot */
	cr_assert_eq(ts_waitlist_take_async(w, TS_DEADLINE_NOW, NULL, n, &node, took, NULL, &item),
		     ETIMEDOUT);
	int64_t deadline = ts_now_ns() + 50000000; /* ahead even under valgrind */
	cr_assert_eq(ts_waitlist_take_async(w, deadline, NULL, n, &node, took, NULL, &item),
		     EINPROGRESS);
	struct pollfd pfd = { ts_notifier_fd(n), POLLIN, 0 };
	cr_assert_eq(poll(&pfd, 1, 5000), 1);
	cr_assert_eq(ts_notifier_dispatch(n), 1);
	cr_assert_geq(ts_now_ns(), deadline);
	cr_assert_eq(taker_result, ETIMEDOUT);
	size_t waiting;
	ts_waitlist_stats(w, NULL, NULL, &waiting);
	cr_assert_eq(waiting, 0);
	cr_assert_eq(ts_notifier_free(n), 0);
	ts_waitlist_free(w);
}

static void keep_pass(ts_async *node, int result, void *arg)
{
	ts_pass *out = arg;
	(void)result;
	*out = ts_async_pass(node);
}

/* A wait granted before its deadline leaves the timer armed; when it
 * fires, one dispatch quiets the fd again (a level-triggered loop must
 * not spin on an expiry nobody waits for). */
Test(async_deadlines, an_unneeded_timer_expiry_does_not_keep_the_fd_readable)
{
	ts_notifier *n = ts_notifier_new();
	ts_turnstile *t = ts_turnstile_new(1);
	ts_async node = TS_ASYNC_INIT;
	ts_claim c = { 0, 0, 0 };
	ts_pass held, p, got = TS_PASS_NONE;
	struct pollfd pfd = { ts_notifier_fd(n), POLLIN, 0 };

	cr_assert_eq(ts_turnstile_wait(t, &c, 0, NULL, &held), 0);
	int64_t deadline = ts_now_ns() + 200000000; /* the grant comes first even under valgrind */
	cr_assert_eq(ts_turnstile_wait_async(t, &c, deadline, NULL, n, &node, keep_pass, &got, &p),
		     EINPROGRESS);
	ts_pass_return(&held); /* granted long before the deadline */
	cr_assert_eq(poll(&pfd, 1, 5000), 1);
	cr_assert_eq(ts_notifier_dispatch(n), 1);
	cr_assert(ts_pass_issued(&got));
	ts_pass_return(&got);
	/* the timer still fires at the deadline: readable once ... */
	cr_assert_eq(poll(&pfd, 1, 5000), 1);
	cr_assert_geq(ts_now_ns(), deadline);
	cr_assert_eq(ts_notifier_dispatch(n), 0);
	/* ... and then quiet */
	cr_assert_eq(poll(&pfd, 1, 50), 0, "the fd stayed readable with nothing to do");
	cr_assert_eq(ts_notifier_free(n), 0);
	ts_turnstile_free(t);
}
