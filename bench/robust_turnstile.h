/* SPDX-License-Identifier: MIT */
/* Comparator for process-shared turnstiles (bench/shared.c): what a careful
 * user writes with glibc's process-shared primitives instead.
 *
 * One robust, process-shared pthread mutex guards a free-pass count and a
 * binary heap of waiters in claim order (band, since, seq, arrival).  Each
 * process has a slot in shared memory with its record (`held`: passes its
 * threads hold) and its one waiter: a claim, a state and a process-shared
 * condition variable of its own.  A return pops the best waiter, marks it
 * GRANTED (direct hand-off: the pass never becomes free) and signals its
 * condition variable after unlocking.
 *
 * Death: every process locks a robust mutex of its own (`alive`) for as
 * long as it is attached, so a trylock that returns EOWNERDEAD (or takes
 * it) says its owner died.  When the big mutex comes back EOWNERDEAD (its
 * owner died inside), the locker repairs: records of dead processes are
 * dropped, the free count is recomputed as ceiling - (held + granted) of
 * the live ones, the heap is rebuilt from the live QUEUED waiters, passes
 * are granted, then pthread_mutex_consistent.  robust_recover does the
 * same on demand (a master's SIGCHLD).  Single-threaded processes: one
 * waiter per process slot. */
#ifndef TS_BENCH_ROBUST_TURNSTILE_H
#define TS_BENCH_ROBUST_TURNSTILE_H

#include <pthread.h>
#include <stdint.h>

#include <turnstile.h>

#include "comparators.h"

#define ROBUST_MAX_PROCS 64

enum { RW_IDLE, RW_QUEUED, RW_GRANTED };

struct robust_proc {
	pthread_mutex_t alive; /* robust: held by the attached process for its life */
	int live;              /* under mu: slot attached */
	int64_t held;          /* under mu: passes this process holds (truth) */
	int wstate;            /* under mu: RW_* of its waiter (GRANTED: truth) */
	int heap_pos;
	struct claimed key;
	pthread_cond_t cond;   /* its waiter sleeps here */
};

struct robust_turnstile {
	pthread_mutex_t mu; /* robust, process-shared */
	int64_t ceiling, avail;
	uint64_t arrivals;
	int n;
	int heap[ROBUST_MAX_PROCS];
	long repairs;
	struct robust_proc procs[ROBUST_MAX_PROCS];
};

/* In shared memory, before any process attaches. */
void robust_init(struct robust_turnstile *r, int64_t ceiling);
void robust_destroy(struct robust_turnstile *r);
/* Process slot @me (< ROBUST_MAX_PROCS) for the calling process. */
void robust_attach(struct robust_turnstile *r, int me);
void robust_wait(struct robust_turnstile *r, int me, const ts_claim *claim);
void robust_return(struct robust_turnstile *r, int me);
/* Queued waiters now (locks). */
int robust_queued(struct robust_turnstile *r, int me);
/* Repair now: passes of dead processes back to the waiters. */
void robust_recover(struct robust_turnstile *r, int me);

#endif
