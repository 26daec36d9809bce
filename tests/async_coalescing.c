/* SPDX-License-Identifier: MIT */
/* K completions from 8 granting threads give exactly K callbacks, none
 * twice, and the notifier's fd is written only when it goes from nothing
 * pending to something pending: once for a whole burst that lands while
 * the loop is busy, and never more often than the loop dispatches while
 * grants race its dispatches. */
#include <errno.h>

#include "loops.h"

#define GRANTERS 8
#define PER_GRANTER 64
#define K (GRANTERS * PER_GRANTER)

static ts_waitlist *w;
static ts_async nodes[K];
static int items[K];
static _Atomic int seen_node[K], seen_item[K];
static _Atomic int callbacks;
static pthread_barrier_t go;

static void took(ts_async *node, int result, void *arg)
{
	THREAD_CHECK(result == 0);
	int *item = ts_async_item(node);
	THREAD_CHECK(item >= items && item < items + K);
	atomic_fetch_add(&seen_node[(intptr_t)arg], 1);
	atomic_fetch_add(&seen_item[item - items], 1);
	atomic_fetch_add(&callbacks, 1);
}

static void queue_all(struct loop *l, void *arg)
{
	(void)arg;
	for (int i = 0; i < K; i++) {
		void *item;
		nodes[i] = (ts_async)TS_ASYNC_INIT;
		THREAD_CHECK(ts_waitlist_take_async(w, 0, NULL, l->n, &nodes[i], took,
						    (void *)(intptr_t)i, &item) == EINPROGRESS);
	}
}

static void *granter(void *arg)
{
	int g = (int)(intptr_t)arg;
	pthread_barrier_wait(&go);
	for (int i = 0; i < PER_GRANTER; i++)
		THREAD_CHECK(ts_waitlist_put(w, &items[g * PER_GRANTER + i]));
	return NULL;
}

static void start_granters(pthread_t *th)
{
	for (int g = 0; g < GRANTERS; g++)
		start_thread(&th[g], granter, (void *)(intptr_t)g);
}

static void reset(void)
{
	w = ts_waitlist_new(K, 0);
	atomic_store(&callbacks, 0);
	for (int i = 0; i < K; i++) {
		atomic_store(&seen_node[i], 0);
		atomic_store(&seen_item[i], 0);
	}
	pthread_barrier_init(&go, NULL, GRANTERS + 1);
}

/* Every slot in use, no item ready: the async takers queue without one. */
static void use_every_slot(void)
{
	for (int i = 0; i < K; i++) {
		void *tok;
		cr_assert_eq(ts_waitlist_take(w, &tok, NULL, NULL, 0, NULL), 0); /* NULL tokens */
	}
}

static void check_each_once(void)
{
	for (int i = 0; i < K; i++) {
		cr_assert_eq(atomic_load(&seen_node[i]), 1, "node %d: %d callbacks", i,
			     atomic_load(&seen_node[i]));
		cr_assert_eq(atomic_load(&seen_item[i]), 1, "item %d delivered %d times", i,
			     atomic_load(&seen_item[i]));
	}
}

struct burst {
	pthread_t th[GRANTERS];
	ts_notifier_counters before, after;
};

/* On the loop thread, so it cannot dispatch meanwhile: the whole burst of
 * K grants lands while the notifier is already readable. */
static void burst_while_busy(struct loop *l, void *arg)
{
	struct burst *b = arg;
	ts_notifier_read_counters(l->n, &b->before);
	pthread_barrier_wait(&go);
	for (int g = 0; g < GRANTERS; g++)
		pthread_join(b->th[g], NULL);
	ts_notifier_read_counters(l->n, &b->after);
}

Test(async_coalescing, a_burst_while_the_loop_is_busy_writes_the_fd_once)
{
	struct loop l;
	struct burst b;

	reset();
	use_every_slot();
	loop_start(&l);
	loop_run(&l, queue_all, NULL);
	start_granters(b.th);
	loop_run(&l, burst_while_busy, &b);
	cr_assert_eq(b.after.completions - b.before.completions, K);
	cr_assert_eq(b.after.fd_writes - b.before.fd_writes, 1,
		     "%llu fd writes for one burst",
		     (unsigned long long)(b.after.fd_writes - b.before.fd_writes));
	WAIT_FOR(atomic_load(&callbacks) == K);
	check_each_once();
	cr_assert_eq(loop_stop(&l), 0);
	ts_waitlist_free(w);
}

static void read_counters(struct loop *l, void *arg)
{
	ts_notifier_read_counters(l->n, arg);
}

Test(async_coalescing, grants_racing_dispatches_give_exactly_k_callbacks)
{
	struct loop l;
	pthread_t th[GRANTERS];
	ts_notifier_counters c;

	reset();
	use_every_slot();
	loop_start(&l);
	loop_run(&l, queue_all, NULL);
	start_granters(th);
	pthread_barrier_wait(&go); /* the loop sleeps in epoll_wait, dispatching as they land */
	for (int g = 0; g < GRANTERS; g++)
		join_bounded(th[g]);
	WAIT_FOR(atomic_load(&callbacks) == K);
	check_each_once();
	loop_run(&l, read_counters, &c);
	cr_log_info("coalescing: %d completions, %llu fd writes, %ld dispatches", K,
		    (unsigned long long)c.fd_writes, atomic_load(&l.dispatches));
	cr_assert_eq(c.callbacks, K);
	cr_assert_eq(c.completions, K);
	/* each write follows a clear of the pending flag, which only a
	 * dispatch does: at most one per dispatch, plus the first */
	cr_assert_leq(c.fd_writes, (uint64_t)atomic_load(&l.dispatches) + 1);
	cr_assert_eq(loop_stop(&l), 0);
	ts_waitlist_free(w);
}
