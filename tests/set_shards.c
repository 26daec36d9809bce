/* SPDX-License-Identifier: MIT */
/* Shards are independent, created concurrently with lock-free lookups, and
 * cost memory by count, not by id. */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "hook.h"
#include "testutil.h"

static const ts_claim mine = { 0, 0, 0 };

/* --- independence: count wake-ups of one parked thread ----------------- */

/* Thread-local: the hook runs on the woken thread itself, so no other thread
 * ever reads this (a shared pthread_t written by the waiter raced the
 * hammers' reads under TSan). */
static _Thread_local bool watched;
static _Atomic int watched_wakeups;

static void count_wakeups(enum ts_hook_point point, void *obj)
{
	if (point == TS_HOOK_WOKEN && watched)
		atomic_fetch_add(&watched_wakeups, 1);
}

struct shard_waiter {
	ts_turnstile *t;
	int result;
	_Atomic int running;
};

static void *wait_on_shard(void *p)
{
	struct shard_waiter *w = p;
	ts_pass pass;
	watched = true;
	atomic_store(&w->running, 1);
	w->result = ts_turnstile_wait(w->t, &mine, 0, NULL, &pass);
	ts_pass_return(&pass);
	return NULL;
}

static void *hammer(void *p)
{
	ts_turnstile *t = p;
	for (int i = 0; i < 2000; i++) {
		ts_pass pass;
		ts_turnstile_wait(t, &mine, 0, NULL, &pass);
		for (volatile int k = 0; k < 200; k++)
			;
		ts_pass_return(&pass);
	}
	return NULL;
}

Test(set_shards, returns_on_one_shard_never_wake_a_waiter_on_another)
{
	ts_set *s = ts_set_new();
	ts_set_resize(s, 1, 1);
	ts_set_resize(s, 2, 1);
	ts_turnstile *a = ts_set_turnstile(s, 1), *b = ts_set_turnstile(s, 2);
	struct shard_waiter w = { a, -1, 0 };
	pthread_t th, hammers[3];
	ts_pass held;

	atomic_store(&watched_wakeups, 0);
	atomic_store(&ts_hook, count_wakeups);
	cr_assert_eq(ts_turnstile_wait(a, &mine, 0, NULL, &held), 0);
	start_thread(&th, wait_on_shard, &w);
	WAIT_FOR(queued(a) == 1);
	for (int i = 0; i < 3; i++)
		start_thread(&hammers[i], hammer, b);
	for (int i = 0; i < 3; i++)
		join_bounded(hammers[i]);
	cr_assert_eq(atomic_load(&watched_wakeups), 0,
		     "traffic on shard 2 woke a waiter of shard 1");
	cr_assert_eq(queued(a), 1);
	ts_pass_return(&held);
	join_bounded(th);
	atomic_store(&ts_hook, NULL);
	cr_assert_eq(w.result, 0);
	ts_set_free(s);
}

/* --- creation racing lookups and waits -------------------------------- */

#define CREATORS 2
#define PER_CREATOR 300
#define USERS 2

struct race {
	ts_set *s;
	_Atomic int creators_done;
	int id;
};

static void *create_shards(void *p)
{
	struct race *r = p;
	int base = 1000 + r->id * PER_CREATOR;
	for (int i = 0; i < PER_CREATOR; i++)
		ts_set_resize(r->s, base + i, 1 + i % 3);
	return NULL;
}

static void *use_shards(void *p)
{
	struct race *r = p;
	ts_job job = TS_JOB_INIT;
	for (int i = 0; atomic_load(&r->creators_done) < CREATORS || i < 500; i++) {
		ts_set_prioritize(r->s, &job, i % 4, 0);
		ts_pass pass = ts_wait_turn(&job);
		ts_pass_return(&pass);
		ts_set_turnstile(r->s, 1000 + i % (CREATORS * PER_CREATOR));
	}
	return NULL;
}

static void count_shard(int shard, int64_t available, int64_t waiting, void *arg)
{
	int *n = arg;
	if (shard >= 1000)
		cr_assert_eq(available, 1 + (shard - 1000) % PER_CREATOR % 3);
	else
		cr_assert_eq(available, 2);
	cr_assert_eq(waiting, 0);
	(*n)++;
}

Test(set_shards, creating_shards_races_lookups_and_waits_safely)
{
	struct race base = { ts_set_new(), 0, 0 }, args[CREATORS];
	pthread_t creators[CREATORS], users[USERS];

	for (int i = 0; i < 4; i++)
		ts_set_resize(base.s, i, 2);
	for (int i = 0; i < USERS; i++)
		start_thread(&users[i], use_shards, &base);
	for (int i = 0; i < CREATORS; i++) {
		args[i] = base;
		args[i].id = i;
		start_thread(&creators[i], create_shards, &args[i]);
	}
	for (int i = 0; i < CREATORS; i++) {
		join_bounded(creators[i]);
		atomic_fetch_add(&base.creators_done, 1);
	}
	for (int i = 0; i < USERS; i++)
		join_bounded(users[i]);
	int n = 0;
	ts_set_snapshot(base.s, count_shard, &n);
	cr_assert_eq(n, 4 + CREATORS * PER_CREATOR);
	ts_turnstile *t = ts_set_turnstile(base.s, 1000);
	cr_assert_eq(ts_set_resize(base.s, 1000, 5), 0);
	cr_assert_eq(ts_set_turnstile(base.s, 1000), t, "resize replaced the turnstile");
	ts_set_free(base.s);
}

/* --- sparse ids ------------------------------------------------------- */

static long resident_kib(void)
{
	long size, resident;
	FILE *f = fopen("/proc/self/statm", "r");
	cr_assert_not_null(f);
	cr_assert_eq(fscanf(f, "%ld %ld", &size, &resident), 2);
	fclose(f);
	return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

Test(set_shards, huge_sparse_ids_cost_no_more_than_small_ones)
{
	ts_set *s = ts_set_new();
	ts_set_resize(s, 0, 4); /* warm the table and allocator */
	long before = resident_kib();
	static const int ids[] = { INT_MAX, INT_MAX - 1, 1 << 30, 123456789, 1 << 20 };
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		cr_assert_eq(ts_set_resize(s, ids[i], 4), 0);
		cr_assert_not_null(ts_set_turnstile(s, ids[i]));
	}
	long grown = resident_kib() - before;
	cr_assert_lt(grown, 1024, "five sparse shards took %ld KiB", grown);
	cr_assert_null(ts_set_turnstile(s, INT_MAX - 2));
	ts_set_free(s);
}
