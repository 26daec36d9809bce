/* SPDX-License-Identifier: MIT */
/* A pass carries happens-before from the thread that returned it to the
 * thread it is handed to, on every path, as a mutex does (DESIGN.md,
 * "Memory order").  Each test writes plain data before returning a pass
 * and reads it in the next holder, with nothing else ordering the two:
 * every thread is started before the data is written and waits only by
 * polling relaxed snapshots.  In the ThreadSanitizer build a missing edge
 * is a reported data race (the test then fails); in every build the value
 * read is checked. */
#include "testutil.h"

static const ts_claim claim = { 0, 0, 0 };
static int data; /* plain, on purpose */

static ts_turnstile *t;
static _Atomic int phase;
static int seen;

/* Waits (by relaxed polling only) until the turnstile is closed to fast
 * takers, then queues and reads what the previous holder wrote. */
static void *next_holder(void *arg)
{
	ts_pass pass;
	while (atomic_load_explicit(&phase, memory_order_relaxed) < 1)
		sched_yield();
	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &pass), 0);
	seen = data;
	ts_pass_return(&pass);
	return arg;
}

/* Resizes once the next holder is queued, from a thread ordered with
 * nobody: the grant it makes must carry the fast return's write. */
static void *resizer(void *arg)
{
	while (queued(t) != 1)
		sched_yield();
	cr_assert_eq(ts_turnstile_resize(t, 1), 0);
	return arg;
}

/* Ceiling 1 as a mutex: A holds; resize(0) leaves available at -1; A writes
 * and returns on the fast path (nobody queued); B queues; resize(1) from a
 * third thread grants B. */
Test(pass_happens_before, a_fast_return_reaches_a_holder_granted_by_a_resize)
{
	pthread_t b, c;
	ts_pass a;

	t = ts_turnstile_new(1);
	atomic_store(&phase, 0);
	start_thread(&b, next_holder, NULL);
	start_thread(&c, resizer, NULL);
	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &a), 0);
	cr_assert_eq(ts_turnstile_resize(t, 0), 0);
	data = 42;
	ts_pass_return(&a); /* -1 -> 0 on the fast path */
	atomic_store_explicit(&phase, 1, memory_order_relaxed);
	join_bounded(b);
	join_bounded(c);
	cr_assert_eq(seen, 42);
	ts_turnstile_free(t);
}

static ts_pass other;
static void *slow_returner(void *arg)
{
	while (queued(t) != 1)
		sched_yield();
	ts_pass_return(&other); /* WAITERS is set: the locked path grants B */
	return arg;
}

/* Ceiling 2 shrunk to 1 under two holders: A writes and returns on the fast
 * path (-1 -> 0); B queues; C's return takes the locked path and grants B. */
Test(pass_happens_before, a_fast_return_reaches_a_holder_granted_by_a_slow_return)
{
	pthread_t b, c;
	ts_pass a;

	t = ts_turnstile_new(2);
	atomic_store(&phase, 0);
	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &other), 0);
	start_thread(&b, next_holder, NULL);
	start_thread(&c, slow_returner, NULL);
	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &a), 0);
	cr_assert_eq(ts_turnstile_resize(t, 1), 0);
	data = 43;
	ts_pass_return(&a);
	atomic_store_explicit(&phase, 1, memory_order_relaxed);
	join_bounded(b);
	join_bounded(c);
	cr_assert_eq(seen, 43);
	ts_turnstile_free(t);
}

/* A job shared by two threads: A's first turn looks the shard up and
 * caches its turnstile; B finds it in the cache.  The turnstile was created
 * by a third thread after both started, so only the cache's release/acquire
 * orders its creation before B's use. */
static ts_set *set;
static ts_job job = TS_JOB_INIT;
static _Atomic int job_ready, a_done;

static void *creator(void *arg)
{
	while (!atomic_load_explicit(&job_ready, memory_order_acquire))
		sched_yield();
	cr_assert_eq(ts_set_resize(set, 5, 1), 0);
	return arg;
}

static void *first_turn(void *arg)
{
	while (!atomic_load_explicit(&job_ready, memory_order_acquire) ||
	       !ts_set_turnstile(set, 5))
		sched_yield();
	ts_pass pass = ts_wait_turn(&job); /* fills the cache */
	cr_assert(ts_pass_issued(&pass));
	ts_pass_return(&pass);
	atomic_store_explicit(&a_done, 1, memory_order_relaxed);
	return arg;
}

static void *cached_turn(void *arg)
{
	while (!atomic_load_explicit(&job_ready, memory_order_acquire) ||
	       !atomic_load_explicit(&a_done, memory_order_relaxed))
		sched_yield();
	ts_pass pass = ts_wait_turn(&job); /* from the cache */
	cr_assert(ts_pass_issued(&pass));
	ts_pass_return(&pass);
	return arg;
}

Test(pass_happens_before, a_jobs_cached_turnstile_is_published_with_its_creation)
{
	pthread_t c, a, b;

	start_thread(&c, creator, NULL);
	start_thread(&a, first_turn, NULL);
	start_thread(&b, cached_turn, NULL);
	set = ts_set_new();
	ts_set_prioritize(set, &job, 5, 0);
	atomic_store_explicit(&job_ready, 1, memory_order_release);
	join_bounded(c);
	join_bounded(a);
	join_bounded(b);
	ts_set_free(set);
}
