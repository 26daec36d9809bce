/* SPDX-License-Identifier: MIT */
/* Takers for the waitlist tests: threads that take one item (with a given
 * load), log what they got and when, and keep it for the test. */
#ifndef TS_TEST_TAKERS_H
#define TS_TEST_TAKERS_H

#include "testutil.h"

#define MAX_TAKERS 32

struct taker_thread {
	pthread_t th;
	ts_waitlist *w;
	ts_load_fn load;
	void *load_arg;
	int64_t deadline_ns;
	ts_cancel *cancel;
	int id;
	int result;
	void *item;
};

static struct taker_thread takers[MAX_TAKERS];
static int took_log[MAX_TAKERS];
static _Atomic int n_took;
static pthread_mutex_t took_mu = PTHREAD_MUTEX_INITIALIZER;

static inline size_t list_waiting(ts_waitlist *w)
{
	size_t n;
	ts_waitlist_stats(w, NULL, NULL, &n);
	return n;
}

static inline size_t list_created(ts_waitlist *w)
{
	size_t n;
	ts_waitlist_stats(w, &n, NULL, NULL);
	return n;
}

static inline size_t list_ready(ts_waitlist *w)
{
	size_t n;
	ts_waitlist_stats(w, NULL, &n, NULL);
	return n;
}

static inline void *taker_main(void *p)
{
	struct taker_thread *t = p;
	t->result = ts_waitlist_take(t->w, &t->item, t->load, t->load_arg, t->deadline_ns,
				     t->cancel);
	pthread_mutex_lock(&took_mu);
	took_log[atomic_load(&n_took)] = t->id;
	atomic_fetch_add(&n_took, 1);
	pthread_mutex_unlock(&took_mu);
	return NULL;
}

/* Start taker @id and wait until the queue holds @queued_after takers. */
static inline struct taker_thread *start_taker(int id, ts_waitlist *w, ts_load_fn load,
					       void *arg, size_t queued_after)
{
	takers[id] = (struct taker_thread){ .w = w, .load = load, .load_arg = arg,
					    .id = id, .result = -1 };
	start_thread(&takers[id].th, taker_main, &takers[id]);
	WAIT_FOR(list_waiting(w) == queued_after);
	return &takers[id];
}

/* A load that makes numbered tokens and counts its calls. */
static _Atomic long loads;
static inline int counting_load(void *arg, void **item)
{
	*item = (void *)(intptr_t)(1000 + atomic_fetch_add(&loads, 1));
	return 0;
}

/* A load that announces itself and blocks until the test releases it; it
 * makes the item it was given as its argument. */
static _Atomic int release_load, in_load;
static inline int blocked_load(void *arg, void **item)
{
	atomic_store(&in_load, 1);
	while (!atomic_load(&release_load))
		sched_yield();
	*item = arg;
	return 0;
}

#endif
