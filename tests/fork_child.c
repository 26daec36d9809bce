/* SPDX-License-Identifier: MIT */
/* fork() without exec, as pre-fork daemons and daemon(3) do: the child may
 * create, use and free new objects and free inherited idle ones (DESIGN.md,
 * "Lifetimes, fork and C++"), notifiers included: the child frees an
 * inherited idle notifier and runs an event loop's waits on a new one,
 * and the parent's notifier (whose fds the child shared) keeps working.
 * liburcu's hash table runs resizes on a worker thread that the child does
 * not have; without the fork hooks the library installs, ts_set_free in
 * the child hangs for ever.
 *
 * A plain program, not Criterion (which runs tests in forked workers of
 * its own).  Every child runs under a deadline: the parent polls waitpid
 * and kills a child that has not finished, so a hang is a failure. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <turnstile.h>

#define CHILD_PATIENCE_NS ((int64_t)30 * 1000000000)

static int failures;
static sigset_t sigchld;

#define CHECK(cond)                                                                 \
	do {                                                                        \
		if (!(cond)) {                                                      \
			fprintf(stderr, "fork_child.c:%d: %s\n", __LINE__, #cond);  \
			return 1;                                                   \
		}                                                                   \
	} while (0)

/* Size @n shards (ids spread out, so the table grows and resizes), then
 * resize each again. */
static int fill_set(ts_set *s, int n)
{
	for (int i = 0; i < n; i++)
		CHECK(ts_set_resize(s, i * 7919, 2) == 0);
	for (int i = 0; i < n; i++)
		CHECK(ts_set_resize(s, i * 7919, 3) == 0);
	return 0;
}

static void record(ts_async *node, int result, void *arg)
{
	int *got = arg;
	*got = result;
	if (result == 0) {
		ts_pass pass = ts_async_pass(node);
		*got = ts_pass_issued(&pass) ? 0 : -2;
		ts_pass_return(&pass);
	}
}

/* Poll @n's fd as a loop would (under a deadline of its own) and dispatch:
 * the number of callbacks that ran, -1 if the fd never became readable. */
static int poll_and_dispatch(ts_notifier *n)
{
	struct pollfd pfd = { ts_notifier_fd(n), POLLIN, 0 };
	if (poll(&pfd, 1, 5000) != 1)
		return -1;
	return ts_notifier_dispatch(n);
}

/* An event loop's waits on a new notifier: a turn queued behind a held
 * pass and granted when it comes back, one that times out with no timer
 * of the caller's, and a waitlist take that creates. */
static int use_new_notifier(void)
{
	ts_notifier *n = ts_notifier_new();
	ts_turnstile *t = ts_turnstile_new(1);
	ts_waitlist *w = ts_waitlist_new(1, 0);
	CHECK(n && t && w);
	ts_claim claim = { 0, ts_now_ns(), 1 };
	ts_pass held = TS_PASS_NONE, now = TS_PASS_NONE;
	ts_async node = TS_ASYNC_INIT;
	int got = -99;
	CHECK(ts_turnstile_wait(t, &claim, 0, NULL, &held) == 0);
	CHECK(ts_turnstile_wait_async(t, &claim, 0, NULL, n, &node, record, &got, &now) ==
	      EINPROGRESS);
	ts_pass_return(&held);
	CHECK(poll_and_dispatch(n) == 1 && got == 0);

	CHECK(ts_turnstile_wait(t, &claim, 0, NULL, &held) == 0);
	got = -99;
	int r = ts_turnstile_wait_async(t, &claim, ts_now_ns() + 20000000, NULL, n, &node, record,
					&got, &now);
	if (r == EINPROGRESS) /* else 20 ms went by before the call looked: at once */
		CHECK(poll_and_dispatch(n) == 1 && (r = got) == ETIMEDOUT);
	CHECK(r == ETIMEDOUT);
	ts_pass_return(&held);

	void *item = &got;
	CHECK(ts_waitlist_take_async(w, 0, NULL, n, &node, record, &got, &item) == TS_CREATE);
	CHECK(item == NULL && ts_waitlist_put(w, &got));
	CHECK(ts_notifier_free(n) == 0);
	ts_turnstile_free(t);
	ts_waitlist_free(w);
	return 0;
}

/* Create, use and free a new set, turnstile, waitlist and notifier. */
static int use_new_objects(int shards)
{
	ts_set *s = ts_set_new();
	CHECK(s);
	CHECK(fill_set(s, shards) == 0);
	ts_job job = TS_JOB_INIT;
	ts_set_prioritize(s, &job, 0, 0);
	ts_pass pass = ts_wait_turn(&job);
	CHECK(shards == 0 || ts_pass_issued(&pass));
	ts_pass_return(&pass);
	ts_set_free(s);

	ts_turnstile *t = ts_turnstile_new(1);
	ts_claim claim = { 0, ts_now_ns(), 1 };
	CHECK(t && ts_turnstile_wait(t, &claim, TS_DEADLINE_NOW, NULL, &pass) == 0);
	ts_pass_return(&pass);
	ts_turnstile_free(t);

	ts_waitlist *w = ts_waitlist_new(1, 0);
	void *item;
	CHECK(w && ts_waitlist_take(w, &item, NULL, NULL, 0, NULL) == 0);
	CHECK(ts_waitlist_put(w, item));
	ts_waitlist_free(w);
	return use_new_notifier();
}

/* One async turn on @n, granted when a pass on @t comes back. */
static int use_notifier(ts_notifier *n, ts_turnstile *t)
{
	ts_claim claim = { 0, ts_now_ns(), 1 };
	ts_pass held = TS_PASS_NONE, now = TS_PASS_NONE;
	ts_async node = TS_ASYNC_INIT;
	int got = -99;
	CHECK(ts_turnstile_resize(t, 1) == 0);
	CHECK(ts_turnstile_wait(t, &claim, 0, NULL, &held) == 0);
	CHECK(ts_turnstile_wait_async(t, &claim, 0, NULL, n, &node, record, &got, &now) ==
	      EINPROGRESS);
	ts_pass_return(&held);
	CHECK(poll_and_dispatch(n) == 1 && got == 0);
	return 0;
}

struct inherited {
	ts_set *set;
	ts_turnstile *turnstile;
	ts_waitlist *waitlist;
	ts_notifier *notifier; /* idle: no wait pending at the fork */
};

/* Fork; the child runs @body and exits with its result.  The parent waits
 * for it under CHILD_PATIENCE_NS.  Returns 0 when the child succeeded. */
static int in_child(const char *what, int (*body)(void *), void *arg)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0)
		_exit(body(arg));
	int64_t end = ts_now_ns() + CHILD_PATIENCE_NS;
	int status;
	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			break;
		if (r < 0 && errno != EINTR) {
			perror("waitpid");
			return 1;
		}
		int64_t left = end - ts_now_ns();
		if (left <= 0) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fprintf(stderr, "fork_child: %s: the child hung\n", what);
			return 1;
		}
		/* SIGCHLD is blocked in every thread (main): wait for it, or
		 * for the deadline; waitpid above tells whose it was */
		struct timespec ts = { left / 1000000000, left % 1000000000 };
		sigtimedwait(&sigchld, NULL, &ts);
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "fork_child: %s: the child failed (status %d)\n", what, status);
		return 1;
	}
	return 0;
}

static int child_frees_inherited_and_makes_new(void *p)
{
	struct inherited *in = p;
	ts_set_free(in->set);
	ts_turnstile_free(in->turnstile);
	ts_waitlist_free(in->waitlist);
	CHECK(ts_notifier_free(in->notifier) == 0);
	return use_new_objects(3000);
}

static int child_makes_new(void *p)
{
	return use_new_objects(*(int *)p);
}

static void expect(int ok_is_zero, const char *what)
{
	if (ok_is_zero) {
		failures++;
		fprintf(stderr, "fork_child: FAIL %s\n", what);
	} else {
		printf("fork_child: ok %s\n", what);
	}
}

/* A thread that keeps growing a set (so its table resizes) while the
 * parent forks. */
static atomic_bool stop_resizing;
static void *resizer_main(void *p)
{
	for (int round = 0; !atomic_load(&stop_resizing); round++) {
		ts_set *s = ts_set_new();
		for (int i = 0; i < 4000 && !atomic_load(&stop_resizing); i++)
			ts_set_resize(s, i * 104729 + round, 1);
		ts_set_free(s);
	}
	return p;
}

int main(void)
{
	static const int sizes[] = { 0, 1, 5000 };

	sigemptyset(&sigchld);
	sigaddset(&sigchld, SIGCHLD);
	pthread_sigmask(SIG_BLOCK, &sigchld, NULL); /* before any thread starts */

#if defined(__SANITIZE_THREAD__)
	/* ThreadSanitizer cannot follow a multi-threaded process through
	 * fork: threads the child starts (liburcu's workers) collide with the
	 * parent's in its registry ("dup thread with used id").  The plain
	 * and ASan builds run this test. */
	puts("fork_child: not under ThreadSanitizer: skipped");
	return 77;
#endif

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		struct inherited in = { ts_set_new(), ts_turnstile_new(2), ts_waitlist_new(2, 0),
					ts_notifier_new() };
		char what[96];
		void *item;
		if (!in.set || !in.turnstile || !in.waitlist || !in.notifier ||
		    fill_set(in.set, sizes[k]) || use_notifier(in.notifier, in.turnstile) ||
		    ts_waitlist_take(in.waitlist, &item, NULL, NULL, 0, NULL) ||
		    !ts_waitlist_put(in.waitlist, item)) {
			fprintf(stderr, "fork_child: parent set-up failed\n");
			return 1;
		}
		snprintf(what, sizeof(what), "child of a parent with %d shards frees what it inherited and makes new",
			 sizes[k]);
		expect(in_child(what, child_frees_inherited_and_makes_new, &in), what);
		/* the parent goes on using its set after the fork */
		snprintf(what, sizeof(what), "parent with %d shards keeps working after the fork", sizes[k]);
		expect(fill_set(in.set, sizes[k] + 100) != 0, what);
		snprintf(what, sizeof(what), "parent's notifier still works after the child freed its copy");
		expect(use_notifier(in.notifier, in.turnstile) != 0, what);
		if (ts_notifier_free(in.notifier)) {
			failures++;
			fprintf(stderr, "fork_child: FAIL the parent's notifier is not idle\n");
		}
		ts_set_free(in.set);
		ts_turnstile_free(in.turnstile);
		ts_waitlist_free(in.waitlist);
	}

	int shards = 2000, bad = 0;
	for (int i = 0; i < 100; i++)
		bad += in_child("one of 100 forks in a row", child_makes_new, &shards) != 0;
	expect(bad, "100 forks in a row, each child makes and frees a set of 2000 shards and a notifier");

#if defined(__SANITIZE_ADDRESS__)
	/* gcc 12's AddressSanitizer does not hold its allocator's lock
	 * across fork: a child forked while another thread is inside malloc
	 * inherits that lock held and hangs in its first allocation (seen:
	 * the child blocked in __asan::Allocator, not in this library).  The
	 * plain build runs this part. */
	puts("fork_child: forks racing another thread's allocations: not under ASan");
	printf("fork_child: %s\n", failures ? "FAILED" : "every child finished");
	return failures != 0;
#endif
	pthread_t resizer;
	if (pthread_create(&resizer, NULL, resizer_main, NULL)) {
		perror("pthread_create");
		return 1;
	}
	bad = 0;
	for (int i = 0; i < 20; i++)
		bad += in_child("fork while another thread resizes", child_makes_new, &shards) != 0;
	atomic_store(&stop_resizing, true);
	pthread_join(resizer, NULL);
	expect(bad, "20 forks while another thread grows a set");

	printf("fork_child: %s\n", failures ? "FAILED" : "every child finished");
	return failures != 0;
}
