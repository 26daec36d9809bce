/* SPDX-License-Identifier: MIT */
/* Comparator: the FIFO pool a careful user writes with pthreads — one
 * mutex, a LIFO stack of ready items, and a FIFO queue of waiters each
 * with its own condition variable, so a put wakes exactly the oldest. */
#ifndef TS_BENCH_MUTEX_POOL_H
#define TS_BENCH_MUTEX_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

struct mutex_pool_waiter {
	pthread_cond_t cond;
	void *item;
	bool done;
	struct mutex_pool_waiter *next;
};

struct mutex_pool {
	pthread_mutex_t mu;
	void **ready;
	size_t n_ready, room;
	struct mutex_pool_waiter *head, *tail;
};

void mutex_pool_init(struct mutex_pool *p, size_t room);
void mutex_pool_destroy(struct mutex_pool *p);
void *mutex_pool_take(struct mutex_pool *p);
void mutex_pool_put(struct mutex_pool *p, void *item);

#endif
