/* SPDX-License-Identifier: MIT */
/* Uncontended acquire+release: the turnstile beside what a user would use
 * instead — pthread_mutex, sem_t — and a bare atomic pair as the floor.
 * turnstile_async is an event-loop wait granted at once
 * (ts_turnstile_wait_async returns 0; its callback never runs) and its
 * return.  turnstile_fleet is a fleet member's local turnstile: its
 * freshness guard (fastpath.h) sends every wait and return to the lock
 * and reads the clock at the grant.
 *
 *   uncontended [--repeats R] [--iters N]   ns/op, median and min-max over R
 *                                           repeats, implementations
 *                                           alternating run by run
 *   uncontended --count IMPL [--iters N]    run IMPL N times between
 *                                           callgrind start/stop requests,
 *                                           for instructions per op
 */
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <valgrind/callgrind.h>

#include <turnstile.h>

#include "mutex_pool.h"
#include "sem_pool.h"
#include "stats.h"

static ts_turnstile *turnstile, *guarded;
static ts_set *set;
static ts_job job = TS_JOB_INIT;
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static sem_t sem;
static _Atomic long counter;
static const ts_claim claim = { 0, 0, 0 };
static ts_waitlist *waitlist;
static struct mutex_pool mpool;
static struct sem_pool spool;
static ts_notifier *notifier;
static ts_async async_node = TS_ASYNC_INIT;

static void wait_and_return(ts_turnstile *t, long n)
{
	for (long i = 0; i < n; i++) {
		ts_pass p;
		if (ts_turnstile_wait(t, &claim, 0, NULL, &p) != 0)
			abort();
		ts_pass_return(&p);
	}
}

static void run_turnstile(long n)
{
	wait_and_return(turnstile, n);
}

static void run_turnstile_fleet(long n)
{
	wait_and_return(guarded, n);
}

static void never_called(ts_async *node, int result, void *arg)
{
	abort(); /* uncontended: every wait is granted at once */
}

static void run_turnstile_async(long n)
{
	for (long i = 0; i < n; i++) {
		ts_pass p;
		if (ts_turnstile_wait_async(turnstile, &claim, 0, NULL, notifier, &async_node,
					    never_called, NULL, &p) != 0)
			abort();
		ts_pass_return(&p);
	}
}

/* The same turn through a job: the set's lookup is cached in the job. */
static void run_job(long n)
{
	for (long i = 0; i < n; i++) {
		ts_pass p = ts_wait_turn(&job);
		ts_pass_return(&p);
	}
}

/* The RCU hash-table lookup alone: what a job's first turn on a shard adds. */
static void run_set_lookup(long n)
{
	for (long i = 0; i < n; i++)
		if (!ts_set_turnstile(set, (int)(i & 7)))
			abort();
}

static void run_waitlist(long n)
{
	for (long i = 0; i < n; i++) {
		void *item;
		if (ts_waitlist_take(waitlist, &item, NULL, NULL, 0, NULL) != 0)
			abort();
		ts_waitlist_put(waitlist, item);
	}
}

static void run_mutex_pool(long n)
{
	for (long i = 0; i < n; i++)
		mutex_pool_put(&mpool, mutex_pool_take(&mpool));
}

static void run_sem_pool(long n)
{
	for (long i = 0; i < n; i++)
		sem_pool_put(&spool, sem_pool_take(&spool));
}

static void run_mutex(long n)
{
	for (long i = 0; i < n; i++) {
		pthread_mutex_lock(&mutex);
		pthread_mutex_unlock(&mutex);
	}
}

static void run_sem(long n)
{
	for (long i = 0; i < n; i++) {
		sem_wait(&sem);
		sem_post(&sem);
	}
}

static void run_atomic(long n)
{
	for (long i = 0; i < n; i++) {
		atomic_fetch_sub(&counter, 1);
		atomic_fetch_add(&counter, 1);
	}
}

static const struct impl {
	const char *name;
	void (*run)(long);
} impls[] = {
	{ "turnstile", run_turnstile },
	{ "job", run_job },
	{ "set_lookup", run_set_lookup },
	{ "pthread_mutex", run_mutex },
	{ "sem_t", run_sem },
	{ "atomic_pair", run_atomic },
	{ "waitlist", run_waitlist },
	{ "mutex_pool", run_mutex_pool },
	{ "sem_pool", run_sem_pool },
	{ "turnstile_async", run_turnstile_async },
	{ "turnstile_fleet", run_turnstile_fleet },
};
#define N_IMPLS (sizeof(impls) / sizeof(impls[0]))

static void *nothing(void *arg)
{
	return arg;
}

int main(int argc, char **argv)
{
	long iters = 5000000;
	int repeats = 7;
	const char *count = NULL;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atol(argv[++i]);
		else if (!strcmp(argv[i], "--repeats") && i + 1 < argc)
			repeats = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--count") && i + 1 < argc)
			count = argv[++i];
		else {
			fprintf(stderr, "usage: %s [--repeats R] [--iters N] [--count IMPL]\n", argv[0]);
			return 2;
		}
	}
	if (repeats < 1 || repeats > MAX_REPEATS || iters < 1) {
		fprintf(stderr, "repeats must be 1..%d, iters >= 1\n", MAX_REPEATS);
		return 2;
	}
	/* glibc skips atomics in a process that never had a second thread,
	 * which would flatter pthread: have one first. */
	pthread_t th;
	pthread_create(&th, NULL, nothing, NULL);
	pthread_join(th, NULL);
	turnstile = ts_turnstile_new(1);
	guarded = ts_turnstile_new(1);
	struct timespec now;
	clock_gettime(CLOCK_BOOTTIME, &now); /* fresh for the next hour */
	if (ts_private_turnstile_guard(guarded, ((int64_t)now.tv_sec + 3600) * 1000000000)) {
		perror("ts_private_turnstile_guard");
		return 1;
	}
	if (!(notifier = ts_notifier_new())) {
		perror("ts_notifier_new");
		return 1;
	}
	set = ts_set_new();
	for (int shard = 0; shard < 8; shard++)
		ts_set_resize(set, shard, 1);
	ts_set_prioritize(set, &job, 0, 0);
	waitlist = ts_waitlist_new(1, 0);
	mutex_pool_init(&mpool, 1);
	sem_pool_init(&spool, 1);
	void *token = &token;
	ts_waitlist_put(waitlist, token);
	mutex_pool_put(&mpool, token);
	sem_pool_put(&spool, token);
	sem_init(&sem, 0, 1);

	if (count) {
		for (size_t k = 0; k < N_IMPLS; k++) {
			if (strcmp(impls[k].name, count))
				continue;
			impls[k].run(1000); /* warm: resolve PLT entries first */
			CALLGRIND_START_INSTRUMENTATION;
			impls[k].run(iters);
			CALLGRIND_STOP_INSTRUMENTATION;
			return 0;
		}
		fprintf(stderr, "unknown implementation %s\n", count);
		return 2;
	}

	double ns[N_IMPLS][MAX_REPEATS];
	for (int r = 0; r < repeats; r++)
		for (size_t k = 0; k < N_IMPLS; k++) {
			int64_t t0 = ts_now_ns();
			impls[k].run(iters);
			ns[k][r] = (double)(ts_now_ns() - t0) / (double)iters;
		}
	printf("impl,ns_median,ns_min,ns_max,ratio_to_pthread_mutex,repeats,iters\n");
	double base = median(ns[3], repeats); /* pthread_mutex */
	for (size_t k = 0; k < N_IMPLS; k++)
		printf("%s,%.2f,%.2f,%.2f,%.3f,%d,%ld\n", impls[k].name, median(ns[k], repeats),
		       minimum(ns[k], repeats), maximum(ns[k], repeats),
		       median(ns[k], repeats) / base, repeats, iters);
	ts_turnstile_free(turnstile);
	ts_turnstile_free(guarded);
	ts_set_free(set);
	ts_waitlist_free(waitlist);
	ts_notifier_free(notifier);
	mutex_pool_destroy(&mpool);
	sem_pool_destroy(&spool);
	return 0;
}
