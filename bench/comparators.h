/* SPDX-License-Identifier: MIT */
/* Comparators: what a user would write with pthreads instead of a
 * turnstile, with the same semantics wherever possible.
 *
 *  strict  mutex + a condition variable per waiter + a binary heap: strict
 *          (band, since, seq, arrival) order, direct hand-off to the best
 *          waiter — what a careful user writes by hand.
 *  naive   one mutex + one condition variable + broadcast: every waiter
 *          wakes on each release and re-checks whether it is the best
 *          waiting claim.  Ordered, but a thundering herd.
 *  sem     a POSIX semaphore: no ordering at all, the speed floor a user
 *          gives up fairness for. */
#ifndef TS_BENCH_COMPARATORS_H
#define TS_BENCH_COMPARATORS_H

#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdint.h>

#include <turnstile.h>

#define COMPARATOR_MAX_WAITERS 1024

/* A queued claim, arrival as the last tie-break: the first member of each
 * comparator's waiter, so one binary heap serves them all. */
struct claimed {
	ts_claim claim;
	uint64_t arrival;
};

/* A min-heap of @*n claims in @heap (room is the caller's): push, and pop
 * the best. */
void claim_heap_push(struct claimed **heap, int *n, struct claimed *e);
struct claimed *claim_heap_pop(struct claimed **heap, int *n);

struct strict_waiter {
	struct claimed key; /* first: the heap's entry */
	pthread_cond_t cond;
	bool granted;
};

struct strict_turnstile {
	pthread_mutex_t mu;
	int64_t available;
	uint64_t arrivals;
	int n;
	struct claimed *heap[COMPARATOR_MAX_WAITERS]; /* strict_waiters */
};

void strict_init(struct strict_turnstile *s, int64_t conc);
void strict_destroy(struct strict_turnstile *s);
void strict_wait(struct strict_turnstile *s, const ts_claim *claim);
void strict_return(struct strict_turnstile *s);

struct naive_turnstile {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	int64_t available;
	uint64_t arrivals;
	int n;
	struct naive_entry {
		ts_claim claim;
		uint64_t arrival;
	} *waiting[COMPARATOR_MAX_WAITERS];
};

void naive_init(struct naive_turnstile *s, int64_t conc);
void naive_destroy(struct naive_turnstile *s);
void naive_wait(struct naive_turnstile *s, const ts_claim *claim);
void naive_return(struct naive_turnstile *s);

/* Strict order of claims with arrival as the last tie-break. */
bool claim_less(const ts_claim *a, uint64_t arrival_a, const ts_claim *b, uint64_t arrival_b);

#endif
