/* SPDX-License-Identifier: MIT */
/* Threads that take one turn for a given job and log their admission; the
 * test returns their passes by releasing them.  The job counterpart of
 * callers.h. */
#ifndef TS_TEST_JOBS_H
#define TS_TEST_JOBS_H

#include "testutil.h"

#define MAX_TURNS 16

struct turn {
	pthread_t th;
	ts_job *job;
	int id;
	ts_pass pass;
	_Atomic int release;
};

static struct turn turns[MAX_TURNS];
static int turn_log[MAX_TURNS];
static _Atomic int n_turns_logged;
static pthread_mutex_t turn_log_mu = PTHREAD_MUTEX_INITIALIZER;

static inline void *turn_main(void *p)
{
	struct turn *t = p;
	t->pass = ts_wait_turn(t->job);
	pthread_mutex_lock(&turn_log_mu);
	turn_log[atomic_load(&n_turns_logged)] = t->id;
	atomic_fetch_add(&n_turns_logged, 1);
	pthread_mutex_unlock(&turn_log_mu);
	while (!atomic_load(&t->release))
		sched_yield();
	ts_pass_return(&t->pass);
	return NULL;
}

/* Start turn @id for @job and wait until it is queued on @t (the queue
 * grows to @queued_after). */
static inline void start_turn(int id, ts_job *job, ts_turnstile *t, int64_t queued_after)
{
	turns[id] = (struct turn){ .job = job, .id = id };
	start_thread(&turns[id].th, turn_main, &turns[id]);
	WAIT_FOR(queued(t) == queued_after);
}

static inline void finish_turns(int n)
{
	for (int i = 0; i < n; i++)
		atomic_store(&turns[i].release, 1);
	for (int i = 0; i < n; i++)
		join_bounded(turns[i].th);
}

#endif
