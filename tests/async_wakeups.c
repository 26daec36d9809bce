/* SPDX-License-Identifier: MIT */
/* No lost wake-up: a loop that only polls its notifier's fd is woken for
 * every completion.  Its own callbacks and two blocking threads return
 * passes that complete its queued nodes, over and over, so grants land
 * before, during and after each dispatch.  A poll that times out while a
 * completion is waiting is the bug (the first dispatch cleared its flag
 * before draining the fd, and hung this way in 4 runs of 10). */
#include <errno.h>
#include <poll.h>

#include "loops.h"

#define CLIENTS 64
#define RUN_NS ((int64_t)2000000000)

static ts_turnstile *t;
static ts_notifier *n;
static ts_async nodes[CLIENTS];
static _Atomic int stop, blocking_done;
static long callbacks;
static uint64_t seq;

static void requeue(ts_async *node, int result, void *arg);

static bool idle[CLIENTS]; /* got a pass at once: holds it until the loop's next round */
static ts_pass held[CLIENTS];

/* One try: queued (EINPROGRESS), or a pass at once, which the client
 * holds until the loop's next round gives it back and queues the client
 * again.  Never a retry loop here: on a machine that runs one thread at
 * a time (valgrind), a pass is nearly always free to a thread that
 * retries, and it would spin forever. */
static void queue(int i)
{
	ts_claim c = { 0, ts_now_ns(), seq++ };
	int r = ts_turnstile_wait_async(t, &c, 0, NULL, n, &nodes[i], requeue, (void *)(intptr_t)i,
					&held[i]);
	idle[i] = r == 0;
	THREAD_CHECK(r == EINPROGRESS || r == 0);
}

/* The loop's round: give back what idle clients hold, then queue them. */
static bool requeue_idle(void)
{
	bool any = false;
	for (int i = 0; i < CLIENTS; i++)
		if (idle[i])
			ts_pass_return(&held[i]);
	for (int i = 0; i < CLIENTS; i++)
		if (idle[i]) {
			queue(i);
			any |= idle[i];
		}
	return any;
}

static void requeue(ts_async *node, int result, void *arg)
{
	ts_pass p = ts_async_pass(node);
	THREAD_CHECK(result == 0 && ts_pass_issued(&p));
	callbacks++;
	ts_pass_return(&p);
	if (!atomic_load(&stop))
		queue((int)(intptr_t)arg);
}

static void *blocking(void *arg)
{
	uint64_t s = (uint64_t)(intptr_t)arg << 40;
	while (!atomic_load(&stop)) {
		ts_claim c = { 0, ts_now_ns(), s++ };
		ts_pass p;
		THREAD_CHECK(ts_turnstile_wait(t, &c, 0, NULL, &p) == 0);
		ts_pass_return(&p);
	}
	atomic_fetch_add(&blocking_done, 1);
	return NULL;
}

Test(async_wakeups, a_loop_polling_only_its_fd_misses_no_completion)
{
	pthread_t th[2];
	ts_notifier_counters k;

	t = ts_turnstile_new(2);
	n = ts_notifier_new();
	for (int i = 0; i < 2; i++)
		start_thread(&th[i], blocking, (void *)(intptr_t)(i + 1));
	for (int i = 0; i < CLIENTS; i++)
		queue(i);
	int64_t end = ts_now_ns() + RUN_NS;
	while (ts_now_ns() < end) {
		struct pollfd pfd = { ts_notifier_fd(n), POLLIN, 0 };
		bool any_idle = requeue_idle();
		if (poll(&pfd, 1, any_idle ? 0 : 2000) == 0 && !any_idle) {
			ts_notifier_read_counters(n, &k);
			cr_assert_eq(k.completions, k.callbacks,
				     "lost wake-up: the fd stayed unreadable for 2 s with %llu "
				     "completions not dispatched",
				     (unsigned long long)(k.completions - k.callbacks));
		}
		ts_notifier_dispatch(n);
	}
	/* Stop re-queueing, and dispatch until the blocking threads are out
	 * (a pass may sit with a completed node until it is dispatched). */
	atomic_store(&stop, 1);
	for (int i = 0; i < CLIENTS; i++)
		ts_pass_return(&held[i]); /* no-op for the unissued */
	int64_t patience = ts_now_ns() + TEST_PATIENCE_NS;
	while (atomic_load(&blocking_done) < 2) {
		cr_assert_lt(ts_now_ns(), patience, "the blocking threads never got their turns");
		struct pollfd pfd = { ts_notifier_fd(n), POLLIN, 0 };
		poll(&pfd, 1, 10);
		ts_notifier_dispatch(n);
	}
	for (int i = 0; i < 2; i++)
		join_bounded(th[i]);
	/* wind down: every node back, every pass free */
	for (int i = 0; i < CLIENTS; i++) {
		int r = ts_async_cancel(&nodes[i]);
		cr_assert(r == 0 || r == EALREADY || r == ENOENT);
	}
	cr_log_info("wake-ups: %ld callbacks in %lld ms", callbacks, (long long)(RUN_NS / 1000000));
	cr_assert_gt(callbacks, 0);
	cr_assert_eq(available(t), 2);
	cr_assert_eq(ts_notifier_free(n), 0);
	ts_turnstile_free(t);
}
