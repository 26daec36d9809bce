/* SPDX-License-Identifier: MIT */
/* Event-loop waiters share the blocking waiters' queue and order: on a
 * turnstile, blocking threads and async nodes on two loop threads are
 * admitted by (band, since, seq), whichever kind each is; on a waitlist,
 * both kinds are served in the order they joined. */
#include <string.h>

#include "loops.h"

#define PARTIES 12

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int admitted[PARTIES], n_admitted;

static void log_admission(int id)
{
	pthread_mutex_lock(&log_mu);
	admitted[n_admitted++] = id;
	pthread_mutex_unlock(&log_mu);
}

static int logged(void)
{
	pthread_mutex_lock(&log_mu);
	int n = n_admitted;
	pthread_mutex_unlock(&log_mu);
	return n;
}

/* --- turnstile ------------------------------------------------------- */

static ts_turnstile *t;
static ts_claim claims[PARTIES];
static ts_async nodes[PARTIES];

static void turn_done(ts_async *node, int result, void *arg)
{
	THREAD_CHECK((result) == (0));
	ts_pass p = ts_async_pass(node);
	THREAD_CHECK(ts_pass_issued(&p));
	log_admission((int)(intptr_t)arg);
	ts_pass_return(&p);
}

static void queue_turn(struct loop *l, void *arg)
{
	int id = (int)(intptr_t)arg;
	ts_pass p;
	THREAD_CHECK((ts_turnstile_wait_async(t, &claims[id], 0, NULL, l->n, &nodes[id],
					     turn_done, arg, &p)) == (EINPROGRESS));
	THREAD_CHECK(!ts_pass_issued(&p));
}

static void *blocking_turn(void *arg)
{
	int id = (int)(intptr_t)arg;
	ts_pass p;
	THREAD_CHECK((ts_turnstile_wait(t, &claims[id], 0, NULL, &p)) == (0));
	log_admission(id);
	ts_pass_return(&p);
	return NULL;
}

static int by_claim(const void *a, const void *b)
{
	const ts_claim *x = &claims[*(const int *)a], *y = &claims[*(const int *)b];
	if (x->priority != y->priority)
		return x->priority < y->priority ? -1 : 1;
	if (x->since_ns != y->since_ns)
		return x->since_ns < y->since_ns ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

Test(async_order, blocking_and_loop_waiters_are_admitted_by_claim_alone)
{
	struct loop loops[2];
	pthread_t th[PARTIES];
	bool blocking[PARTIES];
	ts_pass held;
	int expected[PARTIES];

	t = ts_turnstile_new(1);
	n_admitted = 0;
	loop_start(&loops[0]);
	loop_start(&loops[1]);
	cr_assert_eq(ts_turnstile_wait(t, &claims[0], 0, NULL, &held), 0);
	/* Bands, ages and seqs scrambled against the order of arrival; every
	 * third party blocks, the others are spread over the two loops. */
	for (int i = 0; i < PARTIES; i++) {
		claims[i] = (ts_claim){ (i * 7) % 3, 1000 + (i * 5) % 4, (uint64_t)(PARTIES - i) };
		nodes[i] = (ts_async)TS_ASYNC_INIT;
		blocking[i] = i % 3 == 0;
		if (blocking[i])
			start_thread(&th[i], blocking_turn, (void *)(intptr_t)i);
		else
			loop_run(&loops[i % 2], queue_turn, (void *)(intptr_t)i);
		WAIT_FOR(queued(t) == i + 1);
	}
	ts_pass_return(&held);
	WAIT_FOR(logged() == PARTIES);

	for (int i = 0; i < PARTIES; i++)
		expected[i] = i;
	qsort(expected, PARTIES, sizeof(int), by_claim);
	for (int i = 0; i < PARTIES; i++)
		cr_assert_eq(admitted[i], expected[i],
			     "admission %d went to party %d (%s), the claims order party %d", i,
			     admitted[i], blocking[admitted[i]] ? "blocking" : "async",
			     expected[i]);
	for (int i = 0; i < PARTIES; i++)
		if (blocking[i])
			join_bounded(th[i]);
	cr_assert_eq(available(t), 1);
	cr_assert_eq(loop_stop(&loops[0]), 0);
	cr_assert_eq(loop_stop(&loops[1]), 0);
	ts_turnstile_free(t);
}

/* --- waitlist --------------------------------------------------------- */

static ts_waitlist *w;
static int the_item;

static int make(void *arg, void **item)
{
	*item = arg;
	return 0;
}

static void take_done(ts_async *node, int result, void *arg)
{
	THREAD_CHECK((result) == (0));
	void *item = ts_async_item(node);
	THREAD_CHECK((item) == (&the_item));
	log_admission((int)(intptr_t)arg);
	THREAD_CHECK(ts_waitlist_put(w, item));
}

static void queue_take(struct loop *l, void *arg)
{
	int id = (int)(intptr_t)arg;
	void *item = &id;
	THREAD_CHECK((ts_waitlist_take_async(w, 0, NULL, l->n, &nodes[id], take_done, arg, &item)) == (EINPROGRESS));
	THREAD_CHECK(item == NULL);
}

static void *blocking_take(void *arg)
{
	void *item;
	THREAD_CHECK((ts_waitlist_take(w, &item, NULL, NULL, 0, NULL)) == (0));
	THREAD_CHECK((item) == (&the_item));
	log_admission((int)(intptr_t)arg);
	THREAD_CHECK(ts_waitlist_put(w, item));
	return NULL;
}

static size_t waiting(void)
{
	size_t q;
	ts_waitlist_stats(w, NULL, NULL, &q);
	return q;
}

Test(async_order, blocking_and_loop_takers_are_served_in_the_order_they_joined)
{
	struct loop loops[2];
	pthread_t th[PARTIES];
	void *item;

	w = ts_waitlist_new(1, 0);
	n_admitted = 0;
	loop_start(&loops[0]);
	loop_start(&loops[1]);
	cr_assert_eq(ts_waitlist_take(w, &item, make, &the_item, 0, NULL), 0);
	for (int i = 0; i < PARTIES; i++) {
		nodes[i] = (ts_async)TS_ASYNC_INIT;
		if (i % 3 == 1)
			start_thread(&th[i], blocking_take, (void *)(intptr_t)i);
		else
			loop_run(&loops[i % 2], queue_take, (void *)(intptr_t)i);
		WAIT_FOR(waiting() == (size_t)i + 1);
	}
	cr_assert(ts_waitlist_put(w, item));
	WAIT_FOR(logged() == PARTIES);
	for (int i = 0; i < PARTIES; i++)
		cr_assert_eq(admitted[i], i, "served %d-th: party %d", i, admitted[i]);
	for (int i = 0; i < PARTIES; i++)
		if (i % 3 == 1)
			join_bounded(th[i]);
	size_t created, ready = 0;
	WAIT_FOR((ts_waitlist_stats(w, &created, &ready, NULL), ready == 1)); /* the last put */
	cr_assert_eq(created, 1);
	cr_assert_eq(loop_stop(&loops[0]), 0);
	cr_assert_eq(loop_stop(&loops[1]), 0);
	ts_waitlist_free(w);
}
