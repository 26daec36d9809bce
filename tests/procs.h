/* SPDX-License-Identifier: MIT */
/* Helpers for the process-shared tests: plain programs (Criterion runs its
 * tests in forked workers of its own), a turnstile file in a memfd, memory
 * shared with children, and children that run under a deadline so a hang
 * is a failure.  Waits poll a real condition with a deadline: no sleep
 * stands in for synchronisation. */
#ifndef TS_TESTS_PROCS_H
#define TS_TESTS_PROCS_H

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <turnstile.h>

#define PATIENCE_NS ((int64_t)30 * 1000000000)

#define CHECK(cond)                                                                    \
	do {                                                                           \
		if (!(cond)) {                                                         \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
				#cond);                                                \
			_exit(1);                                                      \
		}                                                                      \
	} while (0)

#define CHECK_EQ(got, want)                                                              \
	do {                                                                             \
		long long got_ = (long long)(got), want_ = (long long)(want);            \
		if (got_ != want_) {                                                     \
			fprintf(stderr, "%s:%d: %s is %lld, want %lld\n", __FILE__, __LINE__, \
				#got, got_, want_);                                      \
			_exit(1);                                                        \
		}                                                                        \
	} while (0)

/* Poll until @cond holds, failing after the patience. */
#define POLL_UNTIL(cond)                                                      \
	do {                                                                  \
		int64_t poll_end_ = ts_now_ns() + PATIENCE_NS;                \
		while (!(cond)) {                                             \
			CHECK(ts_now_ns() < poll_end_ && "timed out: " #cond); \
			sched_yield();                                        \
		}                                                             \
	} while (0)

/* A fresh turnstile file. */
static inline int turnstile_file(int64_t concurrency, const ts_shared_limits *lim)
{
	int fd = memfd_create("ts-test", MFD_CLOEXEC);
	CHECK(fd >= 0);
	CHECK_EQ(ts_shared_format(fd, concurrency, lim), 0);
	return fd;
}

/* Zeroed memory that forked children share with the parent. */
static inline void *shared_memory(size_t size)
{
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(m != MAP_FAILED);
	return m;
}

/* Run @fn(@arg) in a child that exits with its result. */
static inline pid_t spawn(int (*fn)(void *), void *arg)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		_exit(fn(arg));
	return pid;
}

/* Reap @pid, killing it after the patience; returns its wait status. */
static inline int reap(pid_t pid)
{
	int64_t end = ts_now_ns() + PATIENCE_NS;
	int status;
	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			return status;
		CHECK(r == 0);
		if (ts_now_ns() > end) {
			fprintf(stderr, "child %d hung: killed\n", (int)pid);
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -1;
		}
		usleep(1000); /* polling a child's exit, not synchronising with it */
	}
}

static inline void reap_ok(pid_t pid)
{
	int status = reap(pid);
	CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static inline int64_t shared_available(ts_turnstile *t)
{
	int64_t a;
	ts_turnstile_snapshot(t, &a, NULL);
	return a;
}

static inline int64_t shared_waiting(ts_turnstile *t)
{
	int64_t w;
	ts_turnstile_snapshot(t, NULL, &w);
	return w;
}

#endif
