/* SPDX-License-Identifier: MIT */
/* Set: shard id -> turnstile, in a liburcu RCU hash table.
 *
 * RCU flavor: urcu-bp.  Its readers register themselves lazily inside
 * rcu_read_lock, so the library's callers never have to call
 * rcu_register_thread; the other flavors (memb, qsbr, signal) require every
 * reading thread to register, which a library cannot impose on its users.
 * Its read side costs a little more than memb's, and ts_wait_turn pays it
 * only on a job's first turn on a shard (the job caches the pointer).
 *
 * Entries are added under the set's mutex and never removed before
 * ts_set_free, so a turnstile pointer read under the read lock stays valid
 * after it is dropped; no grace period is ever waited for.  Memory is one
 * entry per shard in use plus the table's buckets, whatever the ids.
 *
 * FORK: liburcu runs the table's resizes and its call_rcu work on threads
 * of its own, which a child of fork() does not have; cds_lfht_destroy in
 * such a child waits for them for ever.  The first ts_set_new registers
 * liburcu's fork hooks with pthread_atfork, so callers do nothing.  Both
 * pairs are needed: the call_rcu one pauses and re-creates the worker the
 * table uses, the bp one the reader registry.  call_rcu's is taken first
 * (its worker may be inside a grace period, which needs the registry). */
#include <turnstile/set.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include <urcu/urcu-bp.h>
#include <urcu/rculfhash.h>

#include "tsan.h"

struct ts_set {
	struct cds_lfht *table;
	pthread_mutex_t lock; /* serialises resize (create) against close */
	_Atomic bool closed;
};

struct shard_entry {
	struct cds_lfht_node node;
	int shard;
	ts_turnstile *turnstile;
	struct shard_entry *next_freed; /* ts_set_free's list */
};

static void before_fork(void)
{
	urcu_bp_call_rcu_before_fork();
	urcu_bp_before_fork();
}

static void after_fork_parent(void)
{
	urcu_bp_after_fork_parent();
	urcu_bp_call_rcu_after_fork_parent();
}

static void after_fork_child(void)
{
	urcu_bp_after_fork_child();
	urcu_bp_call_rcu_after_fork_child();
}

static pthread_once_t fork_hooks_once = PTHREAD_ONCE_INIT;
static int fork_hooks_error;

static void install_fork_hooks(void)
{
	fork_hooks_error = pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

static unsigned long shard_hash(int shard)
{
	uint64_t x = (uint32_t)shard; /* murmur3's 64-bit finaliser */
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return (unsigned long)x;
}

static int shard_match(struct cds_lfht_node *node, const void *key)
{
	struct shard_entry *e = caa_container_of(node, struct shard_entry, node);
	tsan_acquire(e); /* pairs with the release before cds_lfht_add */
	return e->shard == *(const int *)key;
}

TS_API ts_set *ts_set_new(void)
{
	pthread_once(&fork_hooks_once, install_fork_hooks);
	if (fork_hooks_error)
		goto nomem; /* pthread_atfork fails only with ENOMEM */
	ts_set *s = calloc(1, sizeof(*s));
	if (!s)
		goto nomem;
	s->table = cds_lfht_new_flavor(8, 8, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
				       &urcu_bp_flavor, NULL);
	if (!s->table) {
		free(s);
		goto nomem;
	}
	pthread_mutex_init(&s->lock, NULL);
	atomic_init(&s->closed, false);
	return s;
nomem:
	errno = ENOMEM;
	return NULL;
}

static struct shard_entry *lookup(ts_set *s, int shard)
{
	struct cds_lfht_iter iter;

	cds_lfht_lookup(s->table, shard_hash(shard), shard_match, &shard, &iter);
	struct cds_lfht_node *node = cds_lfht_iter_get_node(&iter);
	if (!node)
		return NULL;
	return caa_container_of(node, struct shard_entry, node);
}

TS_API ts_turnstile *ts_set_turnstile(ts_set *s, int shard)
{
	if (!s || shard < 0)
		return NULL;
	urcu_bp_read_lock();
	struct shard_entry *e = lookup(s, shard);
	ts_turnstile *t = e ? e->turnstile : NULL;
	urcu_bp_read_unlock();
	return t;
}

static int create_shard(ts_set *s, int shard, int64_t concurrency)
{
	struct shard_entry *e = malloc(sizeof(*e));
	if (!e)
		return ENOMEM;
	e->turnstile = ts_turnstile_new(concurrency);
	if (!e->turnstile) {
		free(e);
		return ENOMEM;
	}
	e->shard = shard;
	cds_lfht_node_init(&e->node);
	tsan_release(e); /* everything above is visible to whoever finds e */
	urcu_bp_read_lock();
	cds_lfht_add(s->table, shard_hash(shard), &e->node);
	urcu_bp_read_unlock();
	return 0;
}

TS_API int ts_set_resize(ts_set *s, int shard, int64_t concurrency)
{
	if (!s || shard < 0 || concurrency < 0 || concurrency > TS_CONCURRENCY_MAX)
		return EINVAL;
	pthread_mutex_lock(&s->lock);
	int r = ESHUTDOWN;
	if (!atomic_load(&s->closed)) {
		ts_turnstile *t = ts_set_turnstile(s, shard);
		r = t ? ts_turnstile_resize(t, concurrency) : create_shard(s, shard, concurrency);
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* Visit every entry under the read lock. */
static void for_each_entry(ts_set *s, void (*fn)(struct shard_entry *e, void *arg), void *arg)
{
	struct cds_lfht_iter iter;
	struct cds_lfht_node *node;

	urcu_bp_read_lock();
	cds_lfht_first(s->table, &iter);
	while ((node = cds_lfht_iter_get_node(&iter))) {
		struct shard_entry *e = caa_container_of(node, struct shard_entry, node);
		tsan_acquire(e);
		fn(e, arg);
		cds_lfht_next(s->table, &iter);
	}
	urcu_bp_read_unlock();
}

static void close_entry(struct shard_entry *e, void *arg)
{
	ts_turnstile_close(e->turnstile);
}

TS_API void ts_set_close(ts_set *s)
{
	if (!s)
		return;
	/* Under the lock: a resize either created its shard before (and it is
	 * closed here) or sees `closed` and creates nothing. */
	pthread_mutex_lock(&s->lock);
	atomic_store(&s->closed, true);
	for_each_entry(s, close_entry, NULL);
	pthread_mutex_unlock(&s->lock);
}

TS_API bool ts_set_closed(const ts_set *s)
{
	return s && atomic_load(&s->closed);
}

struct snapshot_arg {
	void (*each)(int, int64_t, int64_t, void *);
	void *arg;
};

static void snapshot_entry(struct shard_entry *e, void *p)
{
	struct snapshot_arg *a = p;
	int64_t available, waiting;
	ts_turnstile_snapshot(e->turnstile, &available, &waiting);
	a->each(e->shard, available, waiting, a->arg);
}

TS_API void ts_set_snapshot(ts_set *s, void (*each)(int, int64_t, int64_t, void *), void *arg)
{
	if (!s || !each)
		return;
	struct snapshot_arg a = { each, arg };
	for_each_entry(s, snapshot_entry, &a);
}

TS_API void ts_set_free(ts_set *s)
{
	struct cds_lfht_iter iter;
	struct cds_lfht_node *node;
	struct shard_entry *freed = NULL;

	if (!s)
		return;
	/* A resize or close may still be between its effect and its unlock of
	 * the set's mutex (free after the last return): wait it out. */
	pthread_mutex_lock(&s->lock);
	pthread_mutex_unlock(&s->lock);
	/* Nobody else is inside (the caller's promise).  Unlink every entry,
	 * destroy the table, and only then free the entries: the table never
	 * walks a freed node, and no reader can hold one. */
	urcu_bp_read_lock();
	cds_lfht_for_each(s->table, &iter, node) {
		struct shard_entry *e = caa_container_of(node, struct shard_entry, node);
		cds_lfht_del(s->table, node);
		e->next_freed = freed;
		freed = e;
	}
	urcu_bp_read_unlock();
	cds_lfht_destroy(s->table, NULL);
	while (freed) {
		struct shard_entry *e = freed;
		freed = e->next_freed;
		ts_turnstile_free(e->turnstile);
		free(e);
	}
	pthread_mutex_destroy(&s->lock);
	free(s);
}
