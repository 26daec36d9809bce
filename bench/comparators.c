/* SPDX-License-Identifier: MIT */
#include "comparators.h"

#include <stdlib.h>

bool claim_less(const ts_claim *a, uint64_t arrival_a, const ts_claim *b, uint64_t arrival_b)
{
	if (a->priority != b->priority)
		return a->priority < b->priority;
	if (a->since_ns != b->since_ns)
		return a->since_ns < b->since_ns;
	if (a->seq != b->seq)
		return a->seq < b->seq;
	return arrival_a < arrival_b;
}

/* ---- strict: heap + a condvar per waiter ------------------------------- */

static bool heap_less(const struct claimed *a, const struct claimed *b)
{
	return claim_less(&a->claim, a->arrival, &b->claim, b->arrival);
}

static void heap_swap(struct claimed **heap, int i, int j)
{
	struct claimed *t = heap[i];
	heap[i] = heap[j];
	heap[j] = t;
}

void claim_heap_push(struct claimed **heap, int *n, struct claimed *e)
{
	int i = (*n)++;
	heap[i] = e;
	while (i > 0 && heap_less(heap[i], heap[(i - 1) / 2])) {
		heap_swap(heap, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

struct claimed *claim_heap_pop(struct claimed **heap, int *n)
{
	struct claimed *top = heap[0];
	heap[0] = heap[--*n];
	for (int i = 0;;) {
		int l = 2 * i + 1, r = l + 1, m = i;
		if (l < *n && heap_less(heap[l], heap[m]))
			m = l;
		if (r < *n && heap_less(heap[r], heap[m]))
			m = r;
		if (m == i)
			break;
		heap_swap(heap, i, m);
		i = m;
	}
	return top;
}

void strict_init(struct strict_turnstile *s, int64_t conc)
{
	pthread_mutex_init(&s->mu, NULL);
	s->available = conc;
	s->arrivals = 0;
	s->n = 0;
}

void strict_destroy(struct strict_turnstile *s)
{
	pthread_mutex_destroy(&s->mu);
}

void strict_wait(struct strict_turnstile *s, const ts_claim *claim)
{
	pthread_mutex_lock(&s->mu);
	if (s->available > 0 && s->n == 0) {
		s->available--;
		pthread_mutex_unlock(&s->mu);
		return;
	}
	struct strict_waiter me = { .key = { *claim, s->arrivals++ }, .granted = false };
	pthread_cond_init(&me.cond, NULL);
	claim_heap_push(s->heap, &s->n, &me.key);
	while (!me.granted)
		pthread_cond_wait(&me.cond, &s->mu);
	pthread_mutex_unlock(&s->mu);
	pthread_cond_destroy(&me.cond);
}

void strict_return(struct strict_turnstile *s)
{
	pthread_mutex_lock(&s->mu);
	if (s->n) {
		struct strict_waiter *w = (struct strict_waiter *)claim_heap_pop(s->heap, &s->n);
		w->granted = true;
		pthread_cond_signal(&w->cond);
	} else {
		s->available++;
	}
	pthread_mutex_unlock(&s->mu);
}

/* ---- naive: one condvar, broadcast, re-check ---------------------------- */

void naive_init(struct naive_turnstile *s, int64_t conc)
{
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cond, NULL);
	s->available = conc;
	s->arrivals = 0;
	s->n = 0;
}

void naive_destroy(struct naive_turnstile *s)
{
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cond);
}

static bool naive_is_best(struct naive_turnstile *s, struct naive_entry *me)
{
	for (int i = 0; i < s->n; i++)
		if (s->waiting[i] != me &&
		    claim_less(&s->waiting[i]->claim, s->waiting[i]->arrival, &me->claim, me->arrival))
			return false;
	return true;
}

void naive_wait(struct naive_turnstile *s, const ts_claim *claim)
{
	pthread_mutex_lock(&s->mu);
	struct naive_entry me = { *claim, s->arrivals++ };
	int slot = s->n++;
	s->waiting[slot] = &me;
	while (!(s->available > 0 && naive_is_best(s, &me)))
		pthread_cond_wait(&s->cond, &s->mu);
	for (int i = 0; i < s->n; i++)
		if (s->waiting[i] == &me) {
			s->waiting[i] = s->waiting[--s->n];
			break;
		}
	s->available--;
	/* another pass may still be free for the next best */
	if (s->available > 0 && s->n)
		pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->mu);
}

void naive_return(struct naive_turnstile *s)
{
	pthread_mutex_lock(&s->mu);
	s->available++;
	if (s->n)
		pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->mu);
}
