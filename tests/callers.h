/* SPDX-License-Identifier: MIT */
/* Queued callers for the turnstile tests: threads that wait with a known
 * claim, log their admission, and hold their pass until the test releases
 * it — so a test decides exactly when each pass comes back. */
#ifndef TS_TEST_CALLERS_H
#define TS_TEST_CALLERS_H

#include <stdlib.h>

#include "testutil.h"

#define MAX_CALLERS 64

struct queued_caller {
	pthread_t th;
	ts_turnstile *t;
	ts_claim claim;
	int id;
	int result;
	ts_pass pass;
	_Atomic int release; /* set by the test: return your pass now */
};

static struct queued_caller callers[MAX_CALLERS];
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int admitted[MAX_CALLERS];
static _Atomic int n_admitted;

static inline void *caller_main(void *p)
{
	struct queued_caller *c = p;
	c->result = ts_turnstile_wait(c->t, &c->claim, 0, NULL, &c->pass);
	if (c->result == 0) {
		pthread_mutex_lock(&log_mu);
		admitted[atomic_load(&n_admitted)] = c->id;
		atomic_fetch_add(&n_admitted, 1);
		pthread_mutex_unlock(&log_mu);
	}
	while (!atomic_load(&c->release))
		sched_yield();
	ts_pass_return(&c->pass);
	return NULL;
}

/* Queue callers one at a time (so arrival order is known), each with a
 * claim from a small range so that bands, ages, seqs and arrivals all
 * decide some comparisons. */
static inline void queue_callers(ts_turnstile *t, int n, unsigned seed)
{
	srand(seed);
	atomic_store(&n_admitted, 0);
	for (int i = 0; i < n; i++) {
		callers[i] = (struct queued_caller){ .t = t, .id = i, .result = -1 };
		callers[i].claim = (ts_claim){ rand() % 3, (rand() % 3) * 1000,
					       (uint64_t)(rand() % 2) };
		start_thread(&callers[i].th, caller_main, &callers[i]);
		WAIT_FOR(queued(t) == i + 1);
	}
}

static inline int by_claim_then_arrival(const void *a, const void *b)
{
	const struct queued_caller *x = &callers[*(const int *)a];
	const struct queued_caller *y = &callers[*(const int *)b];
	if (x->claim.priority != y->claim.priority)
		return x->claim.priority < y->claim.priority ? -1 : 1;
	if (x->claim.since_ns != y->claim.since_ns)
		return x->claim.since_ns < y->claim.since_ns ? -1 : 1;
	if (x->claim.seq != y->claim.seq)
		return x->claim.seq < y->claim.seq ? -1 : 1;
	return x->id - y->id;
}

static inline void expected_order(int *order, int n)
{
	for (int i = 0; i < n; i++)
		order[i] = i;
	qsort(order, (size_t)n, sizeof(int), by_claim_then_arrival);
}

static inline void release_all(int n)
{
	for (int i = 0; i < n; i++)
		atomic_store(&callers[i].release, 1);
	for (int i = 0; i < n; i++)
		join_bounded(callers[i].th);
}

#endif
