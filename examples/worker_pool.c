/* SPDX-License-Identifier: MIT */
/* A worker pool serving several bands through gates (man 3 ts_gate).
 *
 * One resource (shard 0 of a set, CEILING passes) serves two bands of work,
 * interactive (band 0) and batch (band 2), each with its own queue.  The
 * pattern, for every worker:
 *
 *   1. wait until its band's queue has an item no other worker is already
 *      fetching, and reserve one (a count, not an item: the item stays in
 *      the queue, visible to all);
 *   2. take the job's FIRST turn at its band's gate (ts_gate_acquire_strict)
 *      BEFORE touching the queue, so a worker blocked here holds no work;
 *   3. with the turn held, dequeue: from here on the item is this worker's
 *      alone (the reservation guarantees the queue is not empty);
 *   4. make the first call under the gate's pass and return it; every later
 *      call takes a turn with ts_wait_turn(&job), whose claim is the gate's
 *      stamp, so a job under way keeps its place ahead of later pickups.
 *
 * Which gate a worker waits at: each worker is DEDICATED to one band and
 * waits only at that band's gate.  All gates share one shard, so the
 * turnstile orders the bands: a free pass goes to an interactive waiter
 * before any batch waiter.  Batch workers parked at the batch gate when
 * interactive work arrives delay nothing; an idle interactive worker takes
 * it to the interactive gate, ahead of them.  Workers that chose "the best
 * band with queued work" instead would need fewer threads, but their choice
 * goes stale while they wait: a worker parked at the batch gate stays a
 * batch waiter, and with every spare worker parked there interactive work
 * waits for a whole job to finish while batch turns are granted before it
 * (undoing that needs a cancel token per parked worker).  The cost of
 * dedication is threads: give a band as many workers as jobs of it may be
 * in flight (at least CEILING for the band that must be able to fill the
 * resource); idle workers of one band do not serve the other.
 *
 * Drain: ts_set_close releases every worker at a gate with ESHUTDOWN (it
 * gives its reservation back and exits) and wakes the idle ones.  Jobs
 * already picked up finish, their later turns passing unordered (ts_wait_turn
 * fails open): their work exists nowhere else.  Work not yet picked up is
 * still in its queue, untouched.  Round 1 drains half way; round 2, a
 * restart with a new set, serves what it left.  Exit status 0 only if every
 * item was done exactly once and no more than CEILING passes were held.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include <turnstile.h>

enum { SHARD = 0, CEILING = 3, NBANDS = 2, WORKERS_PER_BAND = 4, JOBS_PER_BAND = 400, CALLS = 3 };
static const int band_priority[NBANDS] = { 0, 2 };
static const char *const band_name[NBANDS] = { "interactive", "batch" };

struct item {
	atomic_int done;   /* times it was done: must end at exactly 1 */
	unsigned sum;      /* written only by the worker that dequeued it */
};

/* Items [head, tail) are queued, owned by the queue; a dequeued item is
 * owned by its worker.  Under pool.lock, tail - head == unreserved + the
 * reservations workers hold, so a reservation always finds an item. */
struct queue {
	struct item items[JOBS_PER_BAND];
	int head, tail, unreserved;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t work;       /* an item was queued, or the set closed */
	pthread_cond_t progress;   /* a job finished */
	struct queue q[NBANDS];    /* outlive each round's set and workers */
	int done;                  /* jobs finished, all rounds */
	ts_set *set;               /* this round's */
	ts_gate gate[NBANDS];
	atomic_int holders, max_holders, unordered, errors;
	atomic_llong waited_ns[NBANDS];
	atomic_int turns[NBANDS];
} pool = { .lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER,
	   .progress = PTHREAD_COND_INITIALIZER };

/* One call to the resource.  Holders are counted only under an issued
 * pass (the count goes down before the pass goes back): that is what the
 * ceiling bounds.  A turn may come back unissued only once the set is
 * closed (the shard is sized, jobs have no deadline or cancel). */
static void call(struct item *it, const ts_pass *pass)
{
	bool issued = ts_pass_issued(pass);

	if (issued) {
		int now = atomic_fetch_add(&pool.holders, 1) + 1;
		int max = atomic_load(&pool.max_holders);
		while (now > max && !atomic_compare_exchange_weak(&pool.max_holders, &max, now))
			;
	} else {
		atomic_fetch_add(&pool.unordered, 1);
		if (!ts_set_closed(pool.set))
			atomic_fetch_add(&pool.errors, 1);
	}
	for (int i = 0; i < 20000; i++) /* the "query" */
		it->sum = it->sum * 1103515245u + 12345u;
	if (issued)
		atomic_fetch_sub(&pool.holders, 1);
}

static void *worker(void *arg)
{
	int b = *(const int *)arg;
	struct queue *q = &pool.q[b];

	for (;;) {
		/* 1. Reserve an item of this band, or stop on a drain. */
		pthread_mutex_lock(&pool.lock);
		while (q->unreserved == 0 && !ts_set_closed(pool.set))
			pthread_cond_wait(&pool.work, &pool.lock);
		if (ts_set_closed(pool.set)) {
			pthread_mutex_unlock(&pool.lock);
			break;
		}
		q->unreserved--;
		pthread_mutex_unlock(&pool.lock);

		/* 2. The job's first turn, holding no work.  The plain form is
		 * `if (!ts_gate_acquire(...)) stop;`.  Strict also refuses on a
		 * deadline or cancel set on the job (none here). */
		ts_job job = TS_JOB_INIT;
		ts_pass pass;
		int err = ts_gate_acquire_strict(&pool.gate[b], &job, SHARD, &pass);
		if (err) {
			pthread_mutex_lock(&pool.lock);
			q->unreserved++; /* never ours: it stays queued */
			pthread_mutex_unlock(&pool.lock);
			if (err != ESHUTDOWN)
				atomic_fetch_add(&pool.errors, 1);
			break;
		}
		atomic_fetch_add(&pool.waited_ns[b], ts_pass_waited_ns(&pass));
		atomic_fetch_add(&pool.turns[b], 1);

		/* 3. Only now take the work: the item is ours from here on. */
		pthread_mutex_lock(&pool.lock);
		struct item *it = q->head < q->tail ? &q->items[q->head++] : NULL;
		pthread_mutex_unlock(&pool.lock);
		if (!it) { /* cannot happen: the reservation counted it */
			atomic_fetch_add(&pool.errors, 1);
			ts_pass_return(&pass);
			break;
		}

		/* 4. The first call under the gate's pass, later calls on
		 * later turns of the same job (the same claim: its place). */
		ts_claim stamp = ts_job_claim(&job);
		for (int c = 0; c < CALLS; c++) {
			if (c > 0)
				pass = ts_wait_turn(&job);
			call(it, &pass);
			ts_pass_return(&pass);
		}
		ts_claim after = ts_job_claim(&job);
		if (after.seq != stamp.seq || after.since_ns != stamp.since_ns ||
		    after.priority != band_priority[b])
			atomic_fetch_add(&pool.errors, 1);

		atomic_fetch_add(&it->done, 1);
		pthread_mutex_lock(&pool.lock);
		pool.done++;
		pthread_cond_signal(&pool.progress);
		pthread_mutex_unlock(&pool.lock);
	}
	return NULL;
}

/* One round: a fresh set and pool of workers over the same queues,
 * drained (closed) once `stop_at` jobs in all are done.  Returns the
 * number of items left queued. */
static int run_round(int n, int stop_at)
{
	static int bands[NBANDS * WORKERS_PER_BAND];
	pthread_t threads[NBANDS * WORKERS_PER_BAND];
	int done_before = pool.done, left = 0;

	pool.set = ts_set_new();
	if (!pool.set || ts_set_resize(pool.set, SHARD, CEILING))
		return -1;
	for (int b = 0; b < NBANDS; b++)
		pool.gate[b] = ts_set_gate(pool.set, band_priority[b]);
	for (int w = 0; w < NBANDS * WORKERS_PER_BAND; w++) {
		bands[w] = w % NBANDS;
		if (pthread_create(&threads[w], NULL, worker, &bands[w]))
			return -1;
	}

	if (n == 1) /* the intake: batch and interactive work arrive interleaved */
		for (int i = 0; i < JOBS_PER_BAND; i++)
			for (int b = NBANDS - 1; b >= 0; b--) {
				pthread_mutex_lock(&pool.lock);
				pool.q[b].tail++;
				pool.q[b].unreserved++;
				pthread_cond_broadcast(&pool.work);
				pthread_mutex_unlock(&pool.lock);
			}
	pthread_mutex_lock(&pool.lock);
	while (pool.done < stop_at)
		pthread_cond_wait(&pool.progress, &pool.lock);
	pthread_mutex_unlock(&pool.lock);

	/* The drain (a daemon's SIGTERM): close, then wake the idle workers
	 * under the lock they check the set under, so none misses it. */
	ts_set_close(pool.set);
	pthread_mutex_lock(&pool.lock);
	pthread_cond_broadcast(&pool.work);
	pthread_mutex_unlock(&pool.lock);
	for (int w = 0; w < NBANDS * WORKERS_PER_BAND; w++)
		pthread_join(threads[w], NULL);
	ts_set_free(pool.set);

	for (int b = 0; b < NBANDS; b++) {
		struct queue *q = &pool.q[b];
		left += q->tail - q->head;
		if (q->unreserved != q->tail - q->head) /* every reservation back */
			atomic_fetch_add(&pool.errors, 1);
	}
	printf("round %d: %d jobs done, drained with %d queued\n", n, pool.done - done_before, left);
	return left;
}

int main(void)
{
	int total = NBANDS * JOBS_PER_BAND, once = 0;

	printf("worker_pool: %d bands, %d workers, ceiling %d, %d jobs of %d calls\n", NBANDS,
	       NBANDS * WORKERS_PER_BAND, CEILING, total, CALLS);
	if (run_round(1, total / 2) < 0 || run_round(2, total) < 0)
		return 1;

	for (int b = 0; b < NBANDS; b++) {
		int band_once = 0, turns = atomic_load(&pool.turns[b]);
		for (int i = 0; i < JOBS_PER_BAND; i++)
			band_once += atomic_load(&pool.q[b].items[i].done) == 1;
		once += band_once;
		printf("%-11s: %d of %d done exactly once, %lld us average wait at the gate\n",
		       band_name[b], band_once, JOBS_PER_BAND,
		       turns ? (long long)(atomic_load(&pool.waited_ns[b]) / turns / 1000) : 0LL);
	}
	int max = atomic_load(&pool.max_holders), errors = atomic_load(&pool.errors);
	printf("most passes held at once: %d of %d; unordered calls after a close: %d\n", max,
	       CEILING, atomic_load(&pool.unordered));
	bool ok = once == total && pool.done == total && max >= 1 && max <= CEILING && !errors;
	printf("%s: %d of %d jobs done exactly once, %d errors\n", ok ? "ok" : "FAILED", once, total,
	       errors);
	return ok ? 0 : 1;
}
