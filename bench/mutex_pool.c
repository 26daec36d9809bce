/* SPDX-License-Identifier: MIT */
#include "mutex_pool.h"

#include <stdlib.h>

void mutex_pool_init(struct mutex_pool *p, size_t room)
{
	pthread_mutex_init(&p->mu, NULL);
	p->ready = malloc(room * sizeof(void *));
	p->n_ready = 0;
	p->room = room;
	p->head = p->tail = NULL;
}

void mutex_pool_destroy(struct mutex_pool *p)
{
	pthread_mutex_destroy(&p->mu);
	free(p->ready);
}

void *mutex_pool_take(struct mutex_pool *p)
{
	pthread_mutex_lock(&p->mu);
	if (p->n_ready) {
		void *item = p->ready[--p->n_ready];
		pthread_mutex_unlock(&p->mu);
		return item;
	}
	struct mutex_pool_waiter me = { .done = false, .next = NULL };
	pthread_cond_init(&me.cond, NULL);
	if (p->tail)
		p->tail->next = &me;
	else
		p->head = &me;
	p->tail = &me;
	while (!me.done)
		pthread_cond_wait(&me.cond, &p->mu);
	pthread_mutex_unlock(&p->mu);
	pthread_cond_destroy(&me.cond);
	return me.item;
}

void mutex_pool_put(struct mutex_pool *p, void *item)
{
	pthread_mutex_lock(&p->mu);
	struct mutex_pool_waiter *w = p->head;
	if (w) {
		p->head = w->next;
		if (!p->head)
			p->tail = NULL;
		w->item = item;
		w->done = true;
		pthread_cond_signal(&w->cond);
	} else {
		p->ready[p->n_ready++] = item;
	}
	pthread_mutex_unlock(&p->mu);
}
