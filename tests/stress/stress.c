/* SPDX-License-Identifier: MIT */
/* Randomized stress: a set of shards and a waitlist under a random mix of
 * every operation, with invariants checked while it runs and at rest.
 *
 *   stress [--seconds N] [--seed S] [--scenario NAME]
 *
 * Scenarios: mix (default) and the named ones the field has been bitten by:
 * timed-try-storm, cancelled-head, fired-cancel, close-vs-timeouts,
 * resize-vs-close, resize-handoff, free-after-last-return, slow-loaders,
 * async-loops.  The seed is printed first, so a failure can be replayed
 * (thread interleavings differ between runs; the operation mix does not).
 * A watchdog fails the run, with a dump of what every thread is doing, if
 * no operation completes for WATCHDOG_S seconds. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <turnstile.h>

#include "../tagged.h"

#define WORKERS 6
#define SHARDS 3 /* shard SHARDS exists in jobs but is never sized: fail-open */
#define MAX_CEILING 4
#define MAX_ITEMS 4
#define WATCHDOG_S 30

static uint64_t seed;
static int64_t end_ns, close_ns;
static _Atomic long ops, checks, violations;
static _Atomic int stop_watchdog;

static void violation(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "stress: VIOLATION (seed %" PRIu64 "): ", seed);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	atomic_fetch_add(&violations, 1);
}

static void check(bool ok, const char *what)
{
	atomic_fetch_add_explicit(&checks, 1, memory_order_relaxed);
	if (!ok)
		violation("%s", what);
}

static uint64_t next_rand(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void busy_ns(int64_t ns)
{
	int64_t end = ts_now_ns() + ns;
	while (ts_now_ns() < end)
		;
}

/* What each thread is doing, for the watchdog's dump. */
static _Atomic(const char *) doing[WORKERS + 4];

/* ---- watchdog ------------------------------------------------------------ */

static void *watchdog(void *arg)
{
	long last = -1;
	int64_t last_change = ts_now_ns();
	int n = *(int *)arg;
	while (!atomic_load(&stop_watchdog)) {
		struct timespec ts = { 0, 50000000 };
		nanosleep(&ts, NULL);
		long now_ops = atomic_load(&ops);
		if (now_ops != last) {
			last = now_ops;
			last_change = ts_now_ns();
			continue;
		}
		if (ts_now_ns() - last_change > (int64_t)WATCHDOG_S * 1000000000) {
			fprintf(stderr, "stress: STUCK (seed %" PRIu64 "): no progress for %d s\n",
				seed, WATCHDOG_S);
			for (int i = 0; i < n; i++)
				fprintf(stderr, "  thread %d: %s\n", i,
					atomic_load(&doing[i]) ? atomic_load(&doing[i]) : "-");
			abort();
		}
	}
	return NULL;
}

/* ---- the mix ------------------------------------------------------------- */

static ts_set *set;
static ts_waitlist *pool;
static _Atomic int holders[SHARDS], enforced[SHARDS];
static int ceiling[SHARDS]; /* the resizer's */
static _Atomic int closed_all;

static _Atomic int live, kept; /* items in existence; kept by a refused put */

static int tagged_load(void *arg, void **item)
{
	uint64_t *x = arg;
	busy_ns((int64_t)(next_rand(x) % 5000));
	if (next_rand(x) % 8 == 0)
		return ECONNREFUSED;
	check(atomic_fetch_add(&live, 1) + 1 <= MAX_ITEMS, "more than max_items items exist");
	*item = tagged_new();
	return 0;
}

/* The token each worker's current operation may be cancelled with.  The
 * canceller fires it under the worker's mutex, and the worker unpublishes
 * under the same mutex, so no fire is still running when a token is
 * re-initialised for a later operation. */
static _Atomic(ts_cancel *) published[WORKERS];
static pthread_mutex_t publish_mu[WORKERS];

static void publish(int id, ts_cancel *c)
{
	pthread_mutex_lock(&publish_mu[id]);
	atomic_store(&published[id], c);
	pthread_mutex_unlock(&publish_mu[id]);
}

static void hold_turn(int shard, ts_pass *pass, uint64_t *x)
{
	if (!ts_pass_issued(pass))
		return;
	/* The bound is read on both sides of the increment: between the
	 * increment and a later read, another holder may leave and a shrink
	 * complete and lower the bound, while h still counts that holder.  At
	 * the instant of the increment the bound was at most the larger read. */
	int before = atomic_load(&enforced[shard]);
	int h = atomic_fetch_add(&holders[shard], 1) + 1;
	int after = atomic_load(&enforced[shard]);
	int bound = before > after ? before : after;
	atomic_fetch_add_explicit(&checks, 1, memory_order_relaxed);
	if (h > bound)
		violation("more holders than the ceiling: shard %d, %d holders, bound %d", shard, h,
			  bound);
	busy_ns((int64_t)(next_rand(x) % 3000));
	atomic_fetch_sub(&holders[shard], 1);
}

static void pool_op(uint64_t *x, ts_cancel *c)
{
	void *item = NULL;
	int64_t deadline = next_rand(x) % 4 ? ts_now_ns() + (int64_t)(next_rand(x) % 40000) : 0;
	int r = next_rand(x) % 4 ? ts_waitlist_take(pool, &item, tagged_load, x, deadline, c)
				 : (ts_waitlist_try_take(pool, &item) ? 0 : EAGAIN);
	if (r != 0)
		return;
	struct tagged *t = item;
	const char *bad = tagged_hold(t);
	check(!bad, bad);
	if (bad)
		return; /* not ours to give back */
	busy_ns((int64_t)(next_rand(x) % 3000));
	tagged_release(t);
	if (next_rand(x) % 16 == 0) {
		tagged_destroy(t);
		atomic_fetch_sub(&live, 1);
		ts_waitlist_discard(pool);
	} else if (!ts_waitlist_put(pool, t)) {
		atomic_fetch_add(&kept, 1); /* closed: ours to keep */
	}
}

static void *mix_worker(void *arg)
{
	int id = (int)(intptr_t)arg;
	uint64_t x = seed * 2654435761u + (uint64_t)id + 1;
	ts_job job = TS_JOB_INIT;
	ts_gate gate = ts_set_gate(set, 1);
	static _Thread_local ts_cancel tokens[2];

	for (long i = 0; ts_now_ns() < end_ns; i++) {
		ts_cancel *c = &tokens[i % 2];
		ts_cancel_init(c);
		publish(id, c);
		int shard = (int)(next_rand(&x) % (SHARDS + 1));
		ts_pass pass = TS_PASS_NONE;
		switch (next_rand(&x) % 6) {
		case 0: /* a new job */
			job = (ts_job)TS_JOB_INIT;
			/* fall through */
		case 1: { /* a turn, re-pointing the job (it keeps its age) */
			atomic_store(&doing[id], "ts_wait_turn");
			ts_claim before = ts_job_claim(&job);
			ts_set_prioritize(set, &job, shard, (int)(next_rand(&x) % 3));
			if (before.seq)
				check(ts_job_claim(&job).seq == before.seq &&
					      ts_job_claim(&job).since_ns == before.since_ns,
				      "re-pointing a job changed its age");
			ts_job_set_deadline(&job, next_rand(&x) % 3 ? 0
							: ts_now_ns() + (int64_t)(next_rand(&x) % 50000));
			ts_job_set_cancel(&job, next_rand(&x) % 4 ? NULL : c);
			pass = ts_wait_turn(&job);
			if (shard < SHARDS)
				hold_turn(shard, &pass, &x);
			ts_pass_return(&pass);
			break;
		}
		case 2: { /* gate */
			atomic_store(&doing[id], "ts_gate_acquire");
			ts_job_set_cancel(&job, NULL);
			bool ok = ts_gate_acquire(&gate, &job, shard, &pass);
			check(ok || !ts_pass_issued(&pass), "a refused gate left a pass issued");
			if (shard < SHARDS)
				hold_turn(shard, &pass, &x);
			ts_pass_return(&pass);
			break;
		}
		case 3: { /* a direct try */
			atomic_store(&doing[id], "ts_turnstile_wait(TS_DEADLINE_NOW)");
			ts_turnstile *t = ts_set_turnstile(set, shard);
			ts_claim claim = { 0, ts_now_ns(), 0 };
			int r = ts_turnstile_wait(t, &claim, TS_DEADLINE_NOW, NULL, &pass);
			check(t || r == EINVAL, "NULL turnstile accepted");
			if (r == 0)
				hold_turn(shard, &pass, &x);
			ts_pass_return(&pass);
			break;
		}
		default:
			atomic_store(&doing[id], "waitlist");
			pool_op(&x, c);
			break;
		}
		publish(id, NULL);
		atomic_store(&doing[id], "between operations");
		atomic_fetch_add_explicit(&ops, 1, memory_order_relaxed);
	}
	atomic_store(&doing[id], "done");
	return NULL;
}

static void *canceller(void *arg)
{
	uint64_t x = seed + 99;
	while (ts_now_ns() < end_ns) {
		int id = (int)(next_rand(&x) % WORKERS);
		pthread_mutex_lock(&publish_mu[id]);
		ts_cancel *c = atomic_load(&published[id]);
		if (c && next_rand(&x) % 4 == 0)
			ts_cancel_fire(c);
		pthread_mutex_unlock(&publish_mu[id]);
		busy_ns(20000);
	}
	return NULL;
}

/* Resizes shards: grow, shrink below what is held, to zero and back.  The
 * bound a holder count is checked against moves up before a grow and down
 * only once a shrink has drained (available >= 0). */
static void *resizer(void *arg)
{
	uint64_t x = seed + 7;
	while (ts_now_ns() < close_ns) {
		atomic_store(&doing[WORKERS], "resizing");
		int s = (int)(next_rand(&x) % SHARDS), to = (int)(next_rand(&x) % (MAX_CEILING + 1));
		if (to >= ceiling[s]) {
			atomic_store(&enforced[s], to);
			check(ts_set_resize(set, s, to) == 0, "resize failed");
		} else {
			check(ts_set_resize(set, s, to) == 0, "resize failed");
			int64_t avail;
			do {
				ts_turnstile_snapshot(ts_set_turnstile(set, s), &avail, NULL);
				sched_yield();
			} while (avail < 0 && ts_now_ns() < end_ns);
			if (avail >= 0)
				atomic_store(&enforced[s], to);
		}
		ceiling[s] = to;
		atomic_fetch_add(&ops, 1);
		busy_ns((int64_t)(next_rand(&x) % 500000));
	}
	/* leave every shard sized, then close: the drain path */
	for (int s = 0; s < SHARDS; s++) {
		atomic_store(&enforced[s], MAX_CEILING);
		ts_set_resize(set, s, 2);
		ceiling[s] = 2;
	}
	atomic_store(&doing[WORKERS], "closing");
	ts_set_close(set);
	ts_waitlist_close(pool);
	atomic_store(&closed_all, 1);
	check(ts_set_resize(set, 0, 3) == ESHUTDOWN, "resize after close did not refuse");
	atomic_store(&doing[WORKERS], "done");
	return NULL;
}

static int run_mix(int seconds)
{
	pthread_t th[WORKERS + 3];
	int n_watched = WORKERS + 1;

	set = ts_set_new();
	pool = ts_waitlist_new(MAX_ITEMS, 8);
	for (int i = 0; i < WORKERS; i++)
		pthread_mutex_init(&publish_mu[i], NULL);
	for (int s = 0; s < SHARDS; s++) {
		ceiling[s] = 2;
		atomic_store(&enforced[s], 2);
		ts_set_resize(set, s, 2);
	}
	int64_t start = ts_now_ns();
	end_ns = start + (int64_t)seconds * 1000000000;
	close_ns = start + (int64_t)seconds * 850000000; /* close in the last 15% */
	for (int i = 0; i < WORKERS; i++)
		pthread_create(&th[i], NULL, mix_worker, (void *)(intptr_t)i);
	pthread_create(&th[WORKERS], NULL, resizer, NULL);
	pthread_create(&th[WORKERS + 1], NULL, canceller, NULL);
	pthread_create(&th[WORKERS + 2], NULL, watchdog, &n_watched);
	for (int i = 0; i < WORKERS + 2; i++)
		pthread_join(th[i], NULL);
	atomic_store(&stop_watchdog, 1);
	pthread_join(th[WORKERS + 2], NULL);

	/* at rest: every pass home, nobody queued, every item accounted for */
	for (int s = 0; s < SHARDS; s++) {
		int64_t avail, waiting;
		ts_turnstile_snapshot(ts_set_turnstile(set, s), &avail, &waiting);
		check(avail == ceiling[s], "passes lost or doubled at rest");
		check(waiting == 0, "a waiter left in a queue");
		check(atomic_load(&holders[s]) == 0, "a holder left");
	}
	check(atomic_load(&closed_all) == 1, "the close did not happen");
	const char *why = NULL;
	int drained = tagged_drain(pool, &why);
	check(drained >= 0, why);
	check(drained < 0 || drained + atomic_load(&kept) == atomic_load(&live),
	      "an item was lost");
	size_t created, waiting;
	ts_waitlist_stats(pool, &created, NULL, &waiting);
	check(created == (size_t)atomic_load(&live), "creation slots leaked");
	check(waiting == 0, "a taker left in the queue");
	tagged_free_all();
	ts_waitlist_free(pool);
	ts_set_free(set);
	return 0;
}

/* ---- named scenarios ------------------------------------------------------ */

static ts_turnstile *one;
static const ts_claim plain = { 0, 0, 0 };

static void *timed_try(void *arg)
{
	int id = (int)(intptr_t)arg;
	while (ts_now_ns() < end_ns) {
		atomic_store(&doing[id], "1us timed wait");
		ts_pass p;
		if (ts_turnstile_wait(one, &plain, ts_now_ns() + 1000, NULL, &p) == 0)
			ts_pass_return(&p);
		atomic_fetch_add(&ops, 1);
	}
	atomic_store(&doing[id], "done");
	return NULL;
}

/* JSR-166's timed-try storm: a storm of 1 us waits on a turnstile at zero
 * must not swallow the returns (or resizes) that follow, nor stall them. */
static void timed_try_storm(int seconds)
{
	pthread_t th[4];
	one = ts_turnstile_new(0);
	end_ns = ts_now_ns() + (int64_t)seconds * 1000000000;
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, timed_try, (void *)(intptr_t)i);
	ts_pass held = TS_PASS_NONE;
	while (ts_now_ns() < end_ns) {
		ts_turnstile_resize(one, 1); /* a pass appears mid-storm... */
		ts_turnstile_wait(one, &plain, ts_now_ns() + 100000000, NULL, &held);
		ts_pass_return(&held); /* ...and is returned into it */
		ts_turnstile_resize(one, 0);
		atomic_fetch_add(&ops, 1);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	int64_t avail, waiting;
	ts_turnstile_snapshot(one, &avail, &waiting);
	check(avail == 0 && waiting == 0, "timed-try storm swallowed or invented a pass");
	ts_turnstile_resize(one, 1);
	ts_pass p;
	check(ts_turnstile_wait(one, &plain, TS_DEADLINE_NOW, NULL, &p) == 0,
	      "the pass after the storm was not free");
	ts_pass_return(&p);
	ts_turnstile_free(one);
}

struct queued {
	ts_claim claim;
	ts_cancel *cancel;
	int result;
	_Atomic int done;
};

static void *queue_and_wait(void *arg)
{
	struct queued *q = arg;
	ts_pass p;
	q->result = ts_turnstile_wait(one, &q->claim, 0, q->cancel, &p);
	ts_pass_return(&p);
	atomic_store(&q->done, 1);
	return NULL;
}

static bool wait_until(_Atomic int *flag, int64_t ns)
{
	int64_t end = ts_now_ns() + ns;
	while (!atomic_load(flag) && ts_now_ns() < end)
		sched_yield();
	return atomic_load(flag);
}

static void wait_queued(int64_t n)
{
	int64_t w, end = ts_now_ns() + 10000000000;
	do {
		ts_turnstile_snapshot(one, NULL, &w);
		sched_yield();
	} while (w < n && ts_now_ns() < end);
	check(w >= n, "waiters did not queue");
}

/* x/sync's semaphore bug: a cancelled head must not block those behind. */
static void cancelled_head(int seconds)
{
	end_ns = ts_now_ns() + (int64_t)seconds * 1000000000;
	one = ts_turnstile_new(1);
	while (ts_now_ns() < end_ns) {
		ts_pass held;
		ts_cancel c = TS_CANCEL_INIT;
		struct queued head = { { 0, 0, 0 }, &c, -1, 0 }, behind = { { 1, 0, 0 }, NULL, -1, 0 };
		pthread_t a, b;
		ts_turnstile_wait(one, &plain, 0, NULL, &held);
		pthread_create(&a, NULL, queue_and_wait, &head);
		wait_queued(1);
		pthread_create(&b, NULL, queue_and_wait, &behind);
		wait_queued(2);
		ts_cancel_fire(&c);
		check(wait_until(&head.done, 10000000000), "cancelled head did not return");
		ts_pass_return(&held);
		check(wait_until(&behind.done, 10000000000), "the waiter behind a cancelled head stalled");
		pthread_join(a, NULL);
		pthread_join(b, NULL);
		check(head.result == ECANCELED && behind.result == 0, "wrong results");
		atomic_fetch_add(&ops, 1);
	}
	int64_t avail;
	ts_turnstile_snapshot(one, &avail, NULL);
	check(avail == 1, "pass lost around a cancelled head");
	ts_turnstile_free(one);
}

/* x/sync again: an already-fired cancel fails at once, even with passes free. */
static void fired_cancel(int seconds)
{
	end_ns = ts_now_ns() + (int64_t)seconds * 1000000000;
	one = ts_turnstile_new(4);
	ts_cancel c = TS_CANCEL_INIT;
	ts_cancel_fire(&c);
	ts_job job = TS_JOB_INIT;
	while (ts_now_ns() < end_ns) {
		ts_pass p;
		check(ts_turnstile_wait(one, &plain, 0, &c, &p) == ECANCELED && !ts_pass_issued(&p),
		      "a fired cancel took a free pass");
		void *item;
		ts_waitlist *w = ts_waitlist_new(0, 0);
		check(ts_waitlist_take(w, &item, NULL, NULL, 0, &c) == ECANCELED,
		      "a fired cancel created an item");
		ts_waitlist_free(w);
		(void)job;
		atomic_fetch_add(&ops, 1);
	}
	int64_t avail;
	ts_turnstile_snapshot(one, &avail, NULL);
	check(avail == 4, "a cancelled wait consumed a pass");
	ts_turnstile_free(one);
}

/* Close racing a storm of timeouts: nobody is stranded, nothing unlinked twice. */
static void close_vs_timeouts(int seconds)
{
	end_ns = ts_now_ns() + (int64_t)seconds * 1000000000;
	while (ts_now_ns() < end_ns) {
		one = ts_turnstile_new(1);
		pthread_t th[4];
		int64_t storm_end = end_ns;
		end_ns = ts_now_ns() + 20000000;
		for (int i = 0; i < 4; i++)
			pthread_create(&th[i], NULL, timed_try, (void *)(intptr_t)i);
		busy_ns(5000000);
		ts_turnstile_close(one);
		for (int i = 0; i < 4; i++)
			pthread_join(th[i], NULL);
		end_ns = storm_end;
		int64_t avail, waiting;
		ts_turnstile_snapshot(one, &avail, &waiting);
		check(avail == 1 && waiting == 0, "close racing timeouts lost a pass or a waiter");
		ts_turnstile_free(one);
		atomic_fetch_add(&ops, 1);
	}
}

/* Resize racing close: blocked waiters all get out, the count stays whole. */
static void resize_vs_close(int seconds)
{
	end_ns = ts_now_ns() + (int64_t)seconds * 1000000000;
	uint64_t x = seed + 3;
	while (ts_now_ns() < end_ns) {
		one = ts_turnstile_new(0);
		struct queued q[4];
		pthread_t th[4];
		for (int i = 0; i < 4; i++) {
			q[i] = (struct queued){ { 0, 0, (uint64_t)i }, NULL, -1, 0 };
			pthread_create(&th[i], NULL, queue_and_wait, &q[i]);
		}
		for (int i = 0; i < (int)(next_rand(&x) % 8); i++)
			ts_turnstile_resize(one, (int64_t)(next_rand(&x) % 3));
		ts_turnstile_close(one);
		ts_turnstile_resize(one, 2);
		for (int i = 0; i < 4; i++) {
			check(wait_until(&q[i].done, 10000000000), "a waiter was stranded by close");
			pthread_join(th[i], NULL);
			check(q[i].result == 0 || q[i].result == ESHUTDOWN, "unexpected result");
		}
		int64_t avail, waiting;
		ts_turnstile_snapshot(one, &avail, &waiting);
		check(avail == 2 && waiting == 0, "resize racing close miscounted");
		ts_turnstile_free(one);
		atomic_fetch_add(&ops, 1);
	}
}

/* Ceiling 1 used as a mutex while a resizer moves it between 0 and 1: the
 * holders' plain counter must add up (in the TSan build a hand-off without
 * happens-before is a reported race) and nobody may hold alongside another. */
static long guarded; /* plain: only a holder touches it */
static _Atomic long increments;
static _Atomic int inside;

static void *mutex_user(void *arg)
{
	int id = (int)(intptr_t)arg;
	while (ts_now_ns() < end_ns) {
		ts_pass p;
		atomic_store(&doing[id], "waiting for the mutex");
		if (ts_turnstile_wait(one, &plain, ts_now_ns() + 2000000, NULL, &p))
			continue;
		check(atomic_fetch_add(&inside, 1) == 0, "two holders under ceiling 1");
		guarded++;
		atomic_fetch_add(&increments, 1);
		atomic_fetch_sub(&inside, 1);
		ts_pass_return(&p);
		atomic_fetch_add(&ops, 1);
	}
	atomic_store(&doing[id], "done");
	return NULL;
}

static void resize_handoff(int seconds)
{
	pthread_t th[3];
	uint64_t x = seed + 5;
	one = ts_turnstile_new(1);
	end_ns = ts_now_ns() + (int64_t)seconds * 1000000000;
	for (int i = 0; i < 3; i++)
		pthread_create(&th[i], NULL, mutex_user, (void *)(intptr_t)i);
	while (ts_now_ns() < end_ns) {
		ts_turnstile_resize(one, 0);
		busy_ns((int64_t)(next_rand(&x) % 20000));
		ts_turnstile_resize(one, 1);
		busy_ns((int64_t)(next_rand(&x) % 20000));
	}
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	check(guarded == atomic_load(&increments), "a hand-off lost a holder's write");
	int64_t avail, waiting;
	ts_turnstile_snapshot(one, &avail, &waiting);
	check(avail == 1 && waiting == 0, "resize hand-offs miscounted");
	ts_turnstile_free(one);
}

/* Free after the last return: each round's turnstile or waitlist is freed
 * by whichever of its waiters finishes last, while the thread that released
 * them may still be inside its call (ASan and fault injection watch). */
#define FREERS 3
static _Atomic int refs;
static ts_waitlist *round_pool;

static void *turn_then_free(void *arg)
{
	ts_pass p;
	int r = ts_turnstile_wait(one, &plain, 0, NULL, &p);
	check(r == 0 || r == ESHUTDOWN, "a waiter freed by its last user saw an odd result");
	ts_pass_return(&p);
	if (atomic_fetch_sub(&refs, 1) == 1)
		ts_turnstile_free(one);
	return arg;
}

static void *take_then_free(void *arg)
{
	void *item;
	int r = ts_waitlist_take(round_pool, &item, NULL, NULL, 0, NULL);
	check(r == 0 || r == ESHUTDOWN, "a taker freed by its last user saw an odd result");
	if (atomic_fetch_sub(&refs, 1) == 1)
		ts_waitlist_free(round_pool);
	return arg;
}

static void wait_pool_queued(size_t n)
{
	size_t w = 0;
	int64_t end = ts_now_ns() + 10000000000;
	while ((ts_waitlist_stats(round_pool, NULL, NULL, &w), w < n) && ts_now_ns() < end)
		sched_yield();
	check(w >= n, "takers did not queue");
}

static void free_after_last_return(int seconds)
{
	uint64_t x = seed + 7;
	end_ns = ts_now_ns() + (int64_t)seconds * 1000000000;
	while (ts_now_ns() < end_ns) {
		pthread_t th[FREERS];
		atomic_store(&refs, FREERS);
		if (next_rand(&x) & 1) {
			one = ts_turnstile_new(0);
			for (int i = 0; i < FREERS; i++)
				pthread_create(&th[i], NULL, turn_then_free, NULL);
			wait_queued(FREERS);
			/* the last touch of `one` by this thread is the call below */
			if (next_rand(&x) & 1)
				ts_turnstile_resize(one, FREERS);
			else
				ts_turnstile_close(one);
		} else {
			void *held;
			round_pool = ts_waitlist_new(1, 0);
			ts_waitlist_take(round_pool, &held, NULL, NULL, 0, NULL);
			for (int i = 0; i < FREERS; i++)
				pthread_create(&th[i], NULL, take_then_free, NULL);
			wait_pool_queued(FREERS);
			if (next_rand(&x) & 1)
				ts_waitlist_put(round_pool, held); /* one taker gets it */
			/* the last touch of the pool by this thread: */
			ts_waitlist_close(round_pool);
		}
		for (int i = 0; i < FREERS; i++)
			pthread_join(th[i], NULL);
		atomic_fetch_add(&ops, 1);
	}
}

/* Slow loaders: takers on a capped pool whose loads take random time and
 * sometimes fail, with deadlines, puts and discards.  Items are tagged:
 * none is lost, given twice or created past the cap; nobody stalls. */
#define SLOW_TAKERS 5
#define SLOW_CAP 3
static _Atomic int slow_live;

static int slow_load(void *arg, void **item)
{
	uint64_t *x = arg;
	busy_ns((int64_t)(next_rand(x) % 300000));
	if (next_rand(x) % 5 == 0)
		return ECONNREFUSED;
	check(atomic_fetch_add(&slow_live, 1) < SLOW_CAP, "more items than max_items");
	*item = tagged_new();
	return 0;
}

static void *slow_taker(void *arg)
{
	int id = (int)(intptr_t)arg;
	uint64_t x = seed * 31 + (uint64_t)id + 1;
	while (ts_now_ns() < end_ns) {
		void *item;
		atomic_store(&doing[id], "taking from a pool of slow loaders");
		int r = ts_waitlist_take(round_pool, &item, slow_load, &x,
					 ts_now_ns() + (int64_t)(next_rand(&x) % 2000000), NULL);
		if (r == 0) {
			const char *bad = tagged_hold(item);
			check(bad == NULL, bad ? bad : "");
			busy_ns((int64_t)(next_rand(&x) % 50000));
			tagged_release(item);
			if (next_rand(&x) % 8 == 0) {
				atomic_fetch_sub(&slow_live, 1);
				tagged_destroy(item);
				ts_waitlist_discard(round_pool);
			} else {
				check(ts_waitlist_put(round_pool, item), "put refused on an open pool");
			}
		} else {
			check(r == ETIMEDOUT || r == ECONNREFUSED, "unexpected take result");
		}
		atomic_fetch_add(&ops, 1);
	}
	atomic_store(&doing[id], "done");
	return NULL;
}

static void slow_loaders(int seconds)
{
	pthread_t th[SLOW_TAKERS];
	round_pool = ts_waitlist_new(SLOW_CAP, 0);
	end_ns = ts_now_ns() + (int64_t)seconds * 1000000000;
	for (int i = 0; i < SLOW_TAKERS; i++)
		pthread_create(&th[i], NULL, slow_taker, (void *)(intptr_t)i);
	for (int i = 0; i < SLOW_TAKERS; i++)
		pthread_join(th[i], NULL);
	size_t created, ready, waiting;
	ts_waitlist_stats(round_pool, &created, &ready, &waiting);
	check(waiting == 0, "takers left queued");
	const char *why = "";
	int drained = tagged_drain(round_pool, &why);
	check(drained >= 0, why);
	check(created == ready && drained == atomic_load(&slow_live),
	      "slow loaders: an item was lost or a slot leaked");
	ts_waitlist_free(round_pool);
	tagged_free_all();
}

/* Event loops: two loop threads, each with its own notifier, queue async
 * turns and takes (some with deadlines, some on a token a third thread
 * fires), cancel pending ones at random and free each node at once, and
 * hold what they get for a few rounds or give it back inside the callback,
 * and resize the turnstile from callbacks (between 1 and its ceiling), so
 * that a callback's return or resize completes nodes of the same dispatch;
 * two blocking threads share the same turnstile and pool.  Holders never exceed the ceiling, no callback comes
 * for a cancelled node (its memory is gone: ASan), no item is lost, given
 * twice or created past the cap, and at rest every pass is free. */
#define LOOP_THREADS 2
#define LOOP_NODES 24
#define ASYNC_CEILING 2
#define ASYNC_CAP 3
static ts_turnstile *async_t;
static _Atomic int async_holding, async_live;
static ts_cancel async_tokens[2];

struct async_slot {
	ts_async *node;  /* pending, or NULL */
	bool turn;
	ts_pass pass;    /* held */
	void *item;      /* held */
	int hold_rounds;
};

struct async_loop {
	int id;
	ts_notifier *n;
	struct async_slot slot[LOOP_NODES];
	uint64_t x;
};

static void async_got_pass(struct async_slot *sl, ts_pass p, struct async_loop *l)
{
	check(ts_pass_issued(&p), "an async turn succeeded without a pass");
	check(atomic_fetch_add(&async_holding, 1) < ASYNC_CEILING, "more holders than the ceiling");
	sl->pass = p;
	sl->hold_rounds = 1 + (int)(next_rand(&l->x) % 3);
}

static void async_got_item(struct async_slot *sl, void *item, struct async_loop *l)
{
	const char *bad = tagged_hold(item);
	check(bad == NULL, bad ? bad : "");
	sl->item = item;
	sl->hold_rounds = 1 + (int)(next_rand(&l->x) % 3);
}

/* TS_CREATE: make the item on the loop (or fail to, and discard). */
static void async_create(struct async_slot *sl, struct async_loop *l)
{
	if (next_rand(&l->x) % 4 == 0) {
		ts_waitlist_discard(round_pool);
		return;
	}
	check(atomic_fetch_add(&async_live, 1) < ASYNC_CAP, "more items than max_items");
	async_got_item(sl, tagged_new(), l);
}

static void async_outcome(struct async_slot *sl, struct async_loop *l, int r, ts_pass p, void *item)
{
	if (r == 0 && sl->turn)
		async_got_pass(sl, p, l);
	else if (r == 0)
		async_got_item(sl, item, l);
	else if (r == TS_CREATE && !sl->turn)
		async_create(sl, l);
	else
		check(r == ETIMEDOUT || r == ECANCELED, "unexpected async result");
}

static void async_release(struct async_slot *sl);

static void async_done(ts_async *node, int result, void *arg)
{
	struct async_loop *l = arg;
	struct async_slot *sl = NULL;
	for (int i = 0; i < LOOP_NODES; i++)
		if (l->slot[i].node == node)
			sl = &l->slot[i];
	check(sl != NULL, "a callback for a node that is not pending");
	if (!sl)
		return;
	sl->node = NULL;
	async_outcome(sl, l, result, ts_async_pass(node), ts_async_item(node));
	free(node);
	atomic_fetch_add(&ops, 1);
	uint64_t r = next_rand(&l->x);
	if (r % 4 == 0)
		async_release(sl);
	if (r % 16 == 1)
		check(ts_turnstile_resize(async_t, (r >> 8) & 1 ? 1 : ASYNC_CEILING) == 0,
		      "a resize from a callback refused");
}

static void async_release(struct async_slot *sl)
{
	if (ts_pass_issued(&sl->pass)) {
		atomic_fetch_sub(&async_holding, 1);
		ts_pass_return(&sl->pass);
	}
	if (sl->item) {
		tagged_release(sl->item);
		check(ts_waitlist_put(round_pool, sl->item), "put refused on an open pool");
		sl->item = NULL;
	}
}

static void async_queue(struct async_slot *sl, struct async_loop *l)
{
	uint64_t r = next_rand(&l->x);
	ts_claim c = { (int)(r % 3), (int64_t)(r >> 8) % 5, r >> 16 };
	int64_t deadline = r & 16 ? ts_now_ns() + (int64_t)(r >> 20) % 3000000 : 0;
	ts_cancel *cancel = r & 32 ? &async_tokens[l->id] : NULL;
	ts_pass p = TS_PASS_NONE;
	void *item = NULL;
	int res;

	sl->turn = r & 64;
	sl->node = calloc(1, sizeof(ts_async));
	if (sl->turn)
		res = ts_turnstile_wait_async(async_t, &c, deadline, cancel, l->n, sl->node,
					      async_done, l, &p);
	else
		res = ts_waitlist_take_async(round_pool, deadline, cancel, l->n, sl->node,
					     async_done, l, &item);
	if (res == EINPROGRESS)
		return;
	free(sl->node);
	sl->node = NULL;
	async_outcome(sl, l, res, p, item);
}

static void *async_loop_main(void *arg)
{
	struct async_loop *l = arg;
	struct pollfd pfd = { ts_notifier_fd(l->n), POLLIN, 0 };

	while (ts_now_ns() < end_ns) {
		atomic_store(&doing[l->id], "an event loop round");
		for (int i = 0; i < LOOP_NODES; i++) {
			struct async_slot *sl = &l->slot[i];
			if (ts_pass_issued(&sl->pass) || sl->item) {
				if (--sl->hold_rounds <= 0)
					async_release(sl);
			} else if (!sl->node) {
				async_queue(sl, l);
			} else if (next_rand(&l->x) % 8 == 0) {
				int r = ts_async_cancel(sl->node);
				check(r == 0 || r == EALREADY, "cancel of a pending node");
				free(sl->node); /* at once */
				sl->node = NULL;
				atomic_fetch_add(&ops, 1);
			}
		}
		/* loop 1 is loop-local: its own returns and puts, made above
		 * outside dispatch, write no fd and run here */
		if (l->id == 1)
			ts_notifier_before_poll(l->n);
		poll(&pfd, 1, 1);
		ts_notifier_dispatch(l->n);
	}
	atomic_store(&doing[l->id], "winding down");
	for (int i = 0; i < LOOP_NODES; i++) {
		struct async_slot *sl = &l->slot[i];
		if (sl->node) {
			int r = ts_async_cancel(sl->node);
			check(r == 0 || r == EALREADY, "cancel at the end");
			free(sl->node);
			sl->node = NULL;
		}
		async_release(sl);
	}
	check(ts_notifier_dispatch(l->n) == 0, "a callback after every node was cancelled");
	check(ts_notifier_free(l->n) == 0, "a notifier still busy at the end");
	atomic_store(&doing[l->id], "done");
	return NULL;
}

/* A blocking taker with a free slot makes its item, as a loop would. */
static int async_blocking_load(void *arg, void **item)
{
	(void)arg;
	check(atomic_fetch_add(&async_live, 1) < ASYNC_CAP, "more items than max_items");
	*item = tagged_new();
	return 0;
}

static void *async_blocking(void *arg)
{
	int id = (int)(intptr_t)arg;
	uint64_t x = seed * 17 + (uint64_t)id;
	const ts_claim c = { 1, 0, 0 };
	while (ts_now_ns() < end_ns) {
		ts_pass p;
		void *item;
		atomic_store(&doing[id], "a blocking turn");
		if (ts_turnstile_wait(async_t, &c, ts_now_ns() + 2000000, NULL, &p) == 0) {
			check(atomic_fetch_add(&async_holding, 1) < ASYNC_CEILING,
			      "more holders than the ceiling");
			busy_ns((int64_t)(next_rand(&x) % 20000));
			atomic_fetch_sub(&async_holding, 1);
			ts_pass_return(&p);
		}
		atomic_store(&doing[id], "a blocking take");
		if (ts_waitlist_take(round_pool, &item, async_blocking_load, NULL,
				     ts_now_ns() + 2000000, NULL) == 0) {
			const char *bad = tagged_hold(item);
			check(bad == NULL, bad ? bad : "");
			tagged_release(item);
			check(ts_waitlist_put(round_pool, item), "put refused on an open pool");
		}
		atomic_fetch_add(&ops, 1);
	}
	atomic_store(&doing[id], "done");
	return NULL;
}

/* Fires each loop's token once, a third and two thirds into the run: a
 * token cannot be re-armed while waits may use it, so from then on that
 * loop's waits with a token are refused at once. */
static void *async_firer(void *arg)
{
	int id = (int)(intptr_t)arg;
	int64_t start = ts_now_ns(), span = end_ns - start;
	for (int k = 0; k < 2; k++) {
		atomic_store(&doing[id], "waiting to fire a token");
		while (ts_now_ns() < start + span * (k + 1) / 3) {
			struct timespec ms = { 0, 1000000 }; /* pacing, not synchronisation */
			nanosleep(&ms, NULL);
		}
		ts_cancel_fire(&async_tokens[k]);
		atomic_fetch_add(&ops, 1);
	}
	atomic_store(&doing[id], "done");
	return NULL;
}

static void async_loops(int seconds)
{
	pthread_t loops[LOOP_THREADS], blocking[2], firer;
	struct async_loop l[LOOP_THREADS];

	async_t = ts_turnstile_new(ASYNC_CEILING);
	round_pool = ts_waitlist_new(ASYNC_CAP, 0);
	for (int i = 0; i < 2; i++)
		ts_cancel_init(&async_tokens[i]);
	end_ns = ts_now_ns() + (int64_t)seconds * 1000000000;
	for (int i = 0; i < LOOP_THREADS; i++) {
		memset(&l[i], 0, sizeof(l[i]));
		l[i].id = i;
		l[i].n = ts_notifier_new();
		l[i].x = seed * 11 + (uint64_t)i + 1;
		pthread_create(&loops[i], NULL, async_loop_main, &l[i]);
	}
	for (int i = 0; i < 2; i++)
		pthread_create(&blocking[i], NULL, async_blocking, (void *)(intptr_t)(LOOP_THREADS + i));
	pthread_create(&firer, NULL, async_firer, (void *)(intptr_t)(LOOP_THREADS + 2));
	for (int i = 0; i < LOOP_THREADS; i++)
		pthread_join(loops[i], NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(blocking[i], NULL);
	pthread_join(firer, NULL);
	check(ts_turnstile_resize(async_t, ASYNC_CEILING) == 0, "the last resize refused");
	int64_t available, waiting;
	ts_turnstile_snapshot(async_t, &available, &waiting);
	check(available == ASYNC_CEILING && waiting == 0, "async loops: a pass was lost or doubled");
	size_t created, ready, queued;
	ts_waitlist_stats(round_pool, &created, &ready, &queued);
	const char *why = "";
	int drained = tagged_drain(round_pool, &why);
	check(drained >= 0, why);
	check(queued == 0 && created == ready && drained == atomic_load(&async_live),
	      "async loops: an item was lost or a slot leaked");
	for (int i = 0; i < 2; i++)
		ts_cancel_destroy(&async_tokens[i]);
	ts_turnstile_free(async_t);
	ts_waitlist_free(round_pool);
	tagged_free_all();
}

int main(int argc, char **argv)
{
	int seconds = 5;
	const char *scenario = "mix";
	seed = (uint64_t)ts_now_ns();
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			seed = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--scenario") && i + 1 < argc)
			scenario = argv[++i];
		else {
			fprintf(stderr, "usage: stress [--seconds N] [--seed S] [--scenario NAME]\n");
			return 2;
		}
	}
	if (seconds < 1 || !seed) {
		fprintf(stderr, "stress: --seconds must be >= 1 and --seed non-zero\n");
		return 2;
	}
	printf("stress: scenario %s, seed %" PRIu64 ", %d s\n", scenario, seed, seconds);
	fflush(stdout);
	pthread_t dog;
	int n_watched = 5;
	if (strcmp(scenario, "mix"))
		pthread_create(&dog, NULL, watchdog, &n_watched);
	if (!strcmp(scenario, "mix"))
		run_mix(seconds);
	else if (!strcmp(scenario, "timed-try-storm"))
		timed_try_storm(seconds);
	else if (!strcmp(scenario, "cancelled-head"))
		cancelled_head(seconds);
	else if (!strcmp(scenario, "fired-cancel"))
		fired_cancel(seconds);
	else if (!strcmp(scenario, "close-vs-timeouts"))
		close_vs_timeouts(seconds);
	else if (!strcmp(scenario, "resize-vs-close"))
		resize_vs_close(seconds);
	else if (!strcmp(scenario, "resize-handoff"))
		resize_handoff(seconds);
	else if (!strcmp(scenario, "free-after-last-return"))
		free_after_last_return(seconds);
	else if (!strcmp(scenario, "slow-loaders"))
		slow_loaders(seconds);
	else if (!strcmp(scenario, "async-loops"))
		async_loops(seconds);
	else {
		fprintf(stderr, "stress: unknown scenario %s\n", scenario);
		return 2;
	}
	if (strcmp(scenario, "mix")) {
		atomic_store(&stop_watchdog, 1);
		pthread_join(dog, NULL);
	}
	long v = atomic_load(&violations);
	printf("stress: %s: %ld operations, %ld invariant checks, %ld violations (seed %" PRIu64
	       ")\n",
	       scenario, atomic_load(&ops), atomic_load(&checks), v, seed);
	return v ? 1 : 0;
}
