/* SPDX-License-Identifier: MIT */
#include "sem_pool.h"

#include <stdlib.h>

void sem_pool_init(struct sem_pool *p, size_t room)
{
	sem_init(&p->ready_count, 0, 0);
	pthread_mutex_init(&p->mu, NULL);
	p->ready = malloc(room * sizeof(void *));
	p->n_ready = 0;
}

void sem_pool_destroy(struct sem_pool *p)
{
	sem_destroy(&p->ready_count);
	pthread_mutex_destroy(&p->mu);
	free(p->ready);
}

void *sem_pool_take(struct sem_pool *p)
{
	while (sem_wait(&p->ready_count) != 0)
		;
	pthread_mutex_lock(&p->mu);
	void *item = p->ready[--p->n_ready];
	pthread_mutex_unlock(&p->mu);
	return item;
}

void sem_pool_put(struct sem_pool *p, void *item)
{
	pthread_mutex_lock(&p->mu);
	p->ready[p->n_ready++] = item;
	pthread_mutex_unlock(&p->mu);
	sem_post(&p->ready_count);
}
