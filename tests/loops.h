/* SPDX-License-Identifier: MIT */
/* An event-loop thread for the async tests: it epoll_waits on its
 * notifier's fd and a control eventfd, dispatches, and runs functions the
 * test posts to it (calls naming a notifier or its nodes must be made on
 * its loop thread).  No sleeps: posting waits on a condition variable with
 * a deadline, and the loop blocks only in epoll_wait. */
#ifndef TS_TESTS_LOOPS_H
#define TS_TESTS_LOOPS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "testutil.h"

/* Criterion's assertions belong to the test's own thread: elsewhere (loop
 * threads, callbacks, helpers) a failed check aborts the test process,
 * which Criterion reports as a crash of the test. */
#define THREAD_CHECK(cond)                                                    \
	((cond) ? (void)0                                                     \
		: (fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,     \
			   __LINE__, #cond),                                  \
		   abort()))

struct loop {
	ts_notifier *n;
	pthread_t th;
	int ep, ctl;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	void (*call)(struct loop *, void *);
	void *call_arg;
	bool call_done, stop;
	_Atomic long dispatched;  /* callbacks run, as dispatch counted them */
	_Atomic long wakeups;     /* epoll_wait returns with the notifier ready */
	_Atomic long dispatches;  /* calls of ts_notifier_dispatch */
};

static void *loop_main(void *p)
{
	struct loop *l = p;
	struct epoll_event ev[2];

	for (;;) {
		int k = epoll_wait(l->ep, ev, 2, -1);
		for (int i = 0; i < k; i++) {
			if (ev[i].data.fd != l->ctl) {
				atomic_fetch_add(&l->wakeups, 1);
				continue;
			}
			uint64_t v;
			if (read(l->ctl, &v, sizeof(v)) < 0)
				continue;
			pthread_mutex_lock(&l->mu);
			if (l->call) {
				l->call(l, l->call_arg);
				l->call = NULL;
				l->call_done = true;
				pthread_cond_broadcast(&l->cv);
			}
			bool stop = l->stop;
			pthread_mutex_unlock(&l->mu);
			if (stop)
				return NULL;
		}
		atomic_fetch_add(&l->dispatches, 1);
		atomic_fetch_add(&l->dispatched, ts_notifier_dispatch(l->n));
	}
}

static inline void loop_start(struct loop *l)
{
	struct epoll_event ev = { .events = EPOLLIN };

	memset(l, 0, sizeof(*l));
	l->n = ts_notifier_new();
	cr_assert_not_null(l->n);
	l->ep = epoll_create1(0);
	l->ctl = eventfd(0, EFD_NONBLOCK);
	cr_assert(l->ep >= 0 && l->ctl >= 0);
	ev.data.fd = ts_notifier_fd(l->n);
	cr_assert_eq(epoll_ctl(l->ep, EPOLL_CTL_ADD, ev.data.fd, &ev), 0);
	ev.data.fd = l->ctl;
	cr_assert_eq(epoll_ctl(l->ep, EPOLL_CTL_ADD, l->ctl, &ev), 0);
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cv, NULL);
	start_thread(&l->th, loop_main, l);
}

/* Run @fn(@l, @arg) on the loop thread and wait until it has run. */
static inline void loop_run(struct loop *l, void (*fn)(struct loop *, void *), void *arg)
{
	uint64_t one = 1;
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += TEST_PATIENCE_NS / 1000000000;
	pthread_mutex_lock(&l->mu);
	l->call = fn;
	l->call_arg = arg;
	l->call_done = false;
	cr_assert_eq(write(l->ctl, &one, sizeof(one)), (ssize_t)sizeof(one));
	while (!l->call_done)
		cr_assert_eq(pthread_cond_timedwait(&l->cv, &l->mu, &until), 0,
			     "the loop did not run the call");
	pthread_mutex_unlock(&l->mu);
}

static void loop_set_stop(struct loop *l, void *arg)
{
	(void)arg;
	l->stop = true;
}

/* Stop the loop and free its notifier: 0, or EBUSY if a wait is pending. */
static inline int loop_stop(struct loop *l)
{
	loop_run(l, loop_set_stop, NULL);
	join_bounded(l->th);
	int r = ts_notifier_free(l->n);
	if (r == 0) {
		close(l->ep);
		close(l->ctl);
	}
	return r;
}

#endif
