/* SPDX-License-Identifier: MIT */
#include "robust_turnstile.h"

#include <errno.h>
#include <stdlib.h>

static void check(int r)
{
	if (r != 0)
		abort();
}

/* ---- the heap of waiting process slots ---------------------------------- */

static bool before(struct robust_turnstile *r, int a, int b)
{
	const struct claimed *x = &r->procs[a].key, *y = &r->procs[b].key;
	return claim_less(&x->claim, x->arrival, &y->claim, y->arrival);
}

static void put(struct robust_turnstile *r, int i, int p)
{
	r->heap[i] = p;
	r->procs[p].heap_pos = i;
}

static void sift_up(struct robust_turnstile *r, int i)
{
	int p = r->heap[i];
	while (i > 0 && before(r, p, r->heap[(i - 1) / 2])) {
		put(r, i, r->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	put(r, i, p);
}

static void sift_down(struct robust_turnstile *r, int i)
{
	int p = r->heap[i];
	for (;;) {
		int c = 2 * i + 1;
		if (c >= r->n)
			break;
		if (c + 1 < r->n && before(r, r->heap[c + 1], r->heap[c]))
			c++;
		if (!before(r, r->heap[c], p))
			break;
		put(r, i, r->heap[c]);
		i = c;
	}
	put(r, i, p);
}

static int pop(struct robust_turnstile *r)
{
	int top = r->heap[0];
	if (--r->n > 0) {
		put(r, 0, r->heap[r->n]);
		sift_down(r, 0);
	}
	return top;
}

/* ---- death ---------------------------------------------------------------- */

static void cond_init_shared(pthread_cond_t *c)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	check(pthread_cond_init(c, &a));
	pthread_condattr_destroy(&a);
}

static void mutex_init_robust(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	check(pthread_mutex_init(m, &a));
	pthread_mutexattr_destroy(&a);
}

/* Whether slot @p's process died: its `alive` lock is free or owner-dead. */
static bool dead(struct robust_turnstile *r, int p)
{
	int e = pthread_mutex_trylock(&r->procs[p].alive);
	if (e == EBUSY)
		return false;
	if (e == EOWNERDEAD)
		pthread_mutex_consistent(&r->procs[p].alive);
	if (e == 0 || e == EOWNERDEAD)
		pthread_mutex_unlock(&r->procs[p].alive);
	return true;
}

/* Under mu: drop the dead, recompute everything derived, grant what is
 * owed.  Returns a bit set of slots to signal after unlocking. */
static uint64_t repair(struct robust_turnstile *r, int me)
{
	int64_t used = 0;
	uint64_t wake = 0;
	r->repairs++;
	r->n = 0;
	for (int p = 0; p < ROBUST_MAX_PROCS; p++) {
		struct robust_proc *pr = &r->procs[p];
		if (!pr->live)
			continue;
		if (p != me && dead(r, p)) {
			pr->live = 0;
			pr->held = 0;
			pr->wstate = RW_IDLE;
			cond_init_shared(&pr->cond); /* it may have died inside a wait */
			continue;
		}
		used += pr->held + (pr->wstate == RW_GRANTED);
		if (pr->wstate == RW_QUEUED)
			put(r, r->n++, p);
	}
	for (int i = r->n / 2; i-- > 0;)
		sift_down(r, i);
	r->avail = r->ceiling - used;
	while (r->avail > 0 && r->n > 0) {
		int p = pop(r);
		r->avail--;
		r->procs[p].wstate = RW_GRANTED;
		wake |= (uint64_t)1 << p;
	}
	for (int p = 0; p < ROBUST_MAX_PROCS; p++)
		if (r->procs[p].live && r->procs[p].wstate == RW_GRANTED)
			wake |= (uint64_t)1 << p; /* its granter may have died before signalling */
	return wake;
}

static uint64_t lock(struct robust_turnstile *r, int me)
{
	int e = pthread_mutex_lock(&r->mu);
	if (e == EOWNERDEAD) {
		uint64_t wake = repair(r, me);
		pthread_mutex_consistent(&r->mu);
		return wake;
	}
	check(e);
	return 0;
}

static void signal_all(struct robust_turnstile *r, uint64_t wake)
{
	for (int p = 0; wake; p++, wake >>= 1)
		if (wake & 1)
			pthread_cond_signal(&r->procs[p].cond);
}

/* ---- API ------------------------------------------------------------------ */

void robust_init(struct robust_turnstile *r, int64_t ceiling)
{
	mutex_init_robust(&r->mu);
	r->ceiling = r->avail = ceiling;
	r->arrivals = 0;
	r->n = 0;
	r->repairs = 0;
	for (int p = 0; p < ROBUST_MAX_PROCS; p++) {
		struct robust_proc *pr = &r->procs[p];
		mutex_init_robust(&pr->alive);
		cond_init_shared(&pr->cond);
		pr->live = 0;
		pr->held = 0;
		pr->wstate = RW_IDLE;
	}
}

/* The condition variables are not destroyed: glibc's pthread_cond_destroy
 * waits for every waiter to leave, and a killed one never does. */
void robust_destroy(struct robust_turnstile *r)
{
	for (int p = 0; p < ROBUST_MAX_PROCS; p++)
		pthread_mutex_destroy(&r->procs[p].alive);
	pthread_mutex_destroy(&r->mu);
}

void robust_attach(struct robust_turnstile *r, int me)
{
	int e = pthread_mutex_lock(&r->procs[me].alive);
	if (e == EOWNERDEAD)
		pthread_mutex_consistent(&r->procs[me].alive);
	else
		check(e);
	uint64_t wake = lock(r, me);
	if (r->procs[me].live) { /* a dead previous owner's records: dropped */
		r->procs[me].live = 0;
		wake |= repair(r, me);
	}
	r->procs[me].live = 1;
	r->procs[me].held = 0;
	r->procs[me].wstate = RW_IDLE;
	pthread_mutex_unlock(&r->mu);
	signal_all(r, wake);
}

void robust_wait(struct robust_turnstile *r, int me, const ts_claim *claim)
{
	struct robust_proc *pr = &r->procs[me];
	uint64_t wake = lock(r, me);
	if (r->n == 0 && r->avail > 0) {
		r->avail--;
		pr->held++;
	} else {
		pr->key = (struct claimed){ *claim, r->arrivals++ };
		pr->wstate = RW_QUEUED;
		put(r, r->n++, me);
		sift_up(r, r->n - 1);
		while (pr->wstate != RW_GRANTED) {
			int e = pthread_cond_wait(&pr->cond, &r->mu);
			if (e == EOWNERDEAD) {
				wake |= repair(r, me);
				pthread_mutex_consistent(&r->mu);
			} else {
				check(e);
			}
		}
		pr->wstate = RW_IDLE;
		pr->held++;
	}
	pthread_mutex_unlock(&r->mu);
	signal_all(r, wake & ~((uint64_t)1 << me));
}

void robust_return(struct robust_turnstile *r, int me)
{
	uint64_t wake = lock(r, me);
	if (r->procs[me].held > 0) {
		r->procs[me].held--;
		if (r->n > 0) {
			int p = pop(r);
			r->procs[p].wstate = RW_GRANTED;
			wake |= (uint64_t)1 << p;
		} else {
			r->avail++;
		}
	}
	pthread_mutex_unlock(&r->mu);
	/* after unlocking: the woken waiter does not run into our lock */
	signal_all(r, wake);
}

int robust_queued(struct robust_turnstile *r, int me)
{
	uint64_t wake = lock(r, me);
	int n = r->n;
	pthread_mutex_unlock(&r->mu);
	signal_all(r, wake);
	return n;
}

void robust_recover(struct robust_turnstile *r, int me)
{
	uint64_t wake = lock(r, me);
	wake |= repair(r, me);
	pthread_mutex_unlock(&r->mu);
	signal_all(r, wake);
}
