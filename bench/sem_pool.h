/* SPDX-License-Identifier: MIT */
/* Comparator: a sem_t counting ready items over a mutex-guarded stack —
 * no fairness and no lazy creation, the speed floor for a pool. */
#ifndef TS_BENCH_SEM_POOL_H
#define TS_BENCH_SEM_POOL_H

#include <pthread.h>
#include <semaphore.h>
#include <stddef.h>

struct sem_pool {
	sem_t ready_count;
	pthread_mutex_t mu;
	void **ready;
	size_t n_ready;
};

void sem_pool_init(struct sem_pool *p, size_t room);
void sem_pool_destroy(struct sem_pool *p);
void *sem_pool_take(struct sem_pool *p);
void sem_pool_put(struct sem_pool *p, void *item);

#endif
