/* SPDX-License-Identifier: MIT */
/* pgproxy: pools.
 *
 * A pool is a database: one turnstile (shard `id` of the proxy's set)
 * orders its transactions, and its ceiling bounds the server connections
 * of all its users together (`conns`).  Idle connections are kept per
 * user (a connection is logged in as one user): a client takes its own
 * user's, makes a new one while the pool is under its ceiling, and only
 * at the ceiling closes another user's idle connection to make room.
 *
 * The pass encloses the connection: a connection is taken with a pass
 * held and goes back (or is destroyed) before the pass is returned.  So
 * when a client holds a pass, the connections of the other holders are at
 * most size - 1, and a pool at its ceiling has an idle connection for
 * every holder still without one: pool_reserve_conn finds room.
 *
 * Lifetimes: a pool and its users are made when a client logs in and held
 * by counts (clients and server connections).  A user with neither left is
 * freed; so is a pool no login ever succeeded on, so failed logins to
 * made-up databases leave nothing behind.  A pool a login succeeded on is
 * a real database: it stays, with the size RESIZE gave it.
 * Locks: pools_mu, then a pool's mu, then the library's.  No connection is
 * destroyed with either held (server_destroy drops counts). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pgproxy.h"

static struct pool *pool_new(int id, const char *db, int *err)
{
	struct pool *p = calloc(1, sizeof(*p));
	if (!p) {
		*err = ENOMEM;
		return NULL;
	}
	if (P.worker >= 0) {
		/* --processes: slot @id's shared turnstiles, the ceiling
		 * every worker's pool for @db shares */
		p->turns = procs_turns(id);
		p->conn_turns = procs_conns(id);
		*err = !p->turns || !p->conn_turns ? ENOMEM
		       : ts_turnstile_closed(p->turns) ? ESHUTDOWN
							: 0;
		atomic_store(&p->size, procs_pool_size(id));
	} else if (P.cfg.fleet.on) {
		/* --fleet: no turn and no connection until fleet.c's thread
		 * has joined and follows the share (p->size, the turns' ceiling) */
		snprintf(p->db, sizeof(p->db), "%s", db);
		p->id = id;
		*err = ts_set_resize(P.set, id, 0);
		p->turns = ts_set_turnstile(P.set, id);
		if (!*err && ts_set_closed(P.set))
			*err = ESHUTDOWN;
		if (!*err)
			*err = fleet_attach(p);
	} else {
		/* A freed pool's shard keeps its turnstile, idle: resizing it
		 * again sets the ceiling for the new database. */
		*err = ts_set_resize(P.set, id, P.cfg.pool_size); /* ESHUTDOWN once closed */
		p->turns = ts_set_turnstile(P.set, id);
		atomic_store(&p->size, P.cfg.pool_size);
	}
	if (*err) {
		free(p);
		return NULL;
	}
	p->id = id;
	snprintf(p->db, sizeof(p->db), "%s", db);
	pthread_mutex_init(&p->mu, NULL);
	return p;
}

/* Under pools_mu: @p's slot is this process's no more (with --processes,
 * the slot may name another database from the moment it is released, so
 * that happens with the local slot freed, under the same lock; with
 * --fleet, its member leaves). */
static void pool_unlist(struct pool *p)
{
	if (p->fleet)
		fleet_detach(p);
	if (P.pools[p->id] == p)
		P.pools[p->id] = NULL;
	if (P.worker >= 0)
		procs_pool_release(p->id);
}

static void pool_free(struct pool *p)
{
	pthread_mutex_destroy(&p->mu);
	free(p);
}

/* A reference taken under pools_mu (p->refs++) to use @p unlocked, given
 * back: the last one frees a pool no login succeeded on. */
static void pool_unref(struct pool *p)
{
	pthread_mutex_lock(&P.pools_mu);
	pthread_mutex_lock(&p->mu);
	bool gone = --p->refs == 0 && !atomic_load(&p->logged_in);
	pthread_mutex_unlock(&p->mu);
	if (gone)
		pool_unlist(p);
	pthread_mutex_unlock(&P.pools_mu);
	if (gone)
		pool_free(p);
}

struct upool *upool_get(const char *db, const char *user, int *err)
{
	*err = 0;
	pthread_mutex_lock(&P.pools_mu);
	struct pool *p = NULL;
	int free_id = -1;
	for (int i = 0; i < MAX_POOLS && !p; i++) {
		if (P.pools[i] && !strcmp(P.pools[i]->db, db))
			p = P.pools[i];
		else if (!P.pools[i] && free_id < 0)
			free_id = i;
	}
	bool made = false;
	if (!p) {
		if (P.worker >= 0) /* the slot every worker names @db by */
			free_id = procs_pool_claim(db, err);
		else if (free_id < 0)
			*err = ENOSPC;
		if (free_id >= 0 && (p = pool_new(free_id, db, err)))
			made = true;
		else if (free_id >= 0 && P.worker >= 0)
			procs_pool_release(free_id);
		if (!p) {
			pthread_mutex_unlock(&P.pools_mu);
			return NULL;
		}
	}
	pthread_mutex_lock(&p->mu);
	struct upool *u = p->users;
	while (u && strcmp(u->user, user))
		u = u->next;
	if (!u && (u = calloc(1, sizeof(*u)))) {
		/* The pass bounds the connections in use and `conns` the ones
		 * made: the waitlist needs no cap of its own. */
		if (!(u->conns = ts_waitlist_new(0, 0))) {
			free(u);
			u = NULL;
		} else {
			u->pool = p;
			snprintf(u->user, sizeof(u->user), "%s", user);
			u->next = p->users;
			p->users = u;
			p->refs++;
		}
	}
	if (u)
		u->refs++;
	pthread_mutex_unlock(&p->mu);
	if (made && u) {
		P.pools[p->id] = p;
	} else if (made) {
		pool_unlist(p);
		pool_free(p);
	}
	pthread_mutex_unlock(&P.pools_mu);
	if (!u)
		*err = ENOMEM;
	return u;
}

void upool_put(struct upool *u)
{
	struct pool *p = u->pool;
	pthread_mutex_lock(&P.pools_mu);
	pthread_mutex_lock(&p->mu);
	bool gone = --u->refs == 0; /* no client, no connection: none idle either */
	if (gone) {
		for (struct upool **q = &p->users; *q; q = &(*q)->next)
			if (*q == u) {
				*q = u->next;
				break;
			}
		p->refs--;
	}
	bool pool_gone = gone && p->refs == 0 && !atomic_load(&p->logged_in);
	pthread_mutex_unlock(&p->mu);
	if (pool_gone)
		pool_unlist(p);
	pthread_mutex_unlock(&P.pools_mu);
	if (gone) {
		ts_waitlist_free(u->conns);
		buf_free(&u->defaults);
		free(u);
	}
	if (pool_gone)
		pool_free(p);
}

/* Takes an idle connection of a user other than `not` (NULL: any),
 * oldest first, to close it. */
static struct server *take_idle_other(struct pool *p, const struct upool *not)
{
	void *item = NULL;
	pthread_mutex_lock(&p->mu);
	for (struct upool *u = p->users; u && !item; u = u->next)
		if (u != not)
			ts_waitlist_try_take_oldest(u->conns, &item, NULL, NULL);
	pthread_mutex_unlock(&p->mu);
	return item;
}

bool pool_reserve_conn(struct upool *u)
{
	struct pool *p = u->pool;
	for (int tries = 0; tries < 8; tries++) {
		int64_t n = atomic_load(&p->conns);
		while (n < atomic_load(&p->size))
			if (atomic_compare_exchange_weak(&p->conns, &n, n + 1))
				return true;
		struct server *victim = take_idle_other(p, u);
		if (!victim)
			return false; /* one is on its way back: the caller tries again */
		server_destroy(victim);
	}
	return false;
}

void pool_release_conn(struct pool *p) { atomic_fetch_sub(&p->conns, 1); }

bool pool_close_idle_other(struct upool *u)
{
	struct server *victim = take_idle_other(u->pool, u);
	if (victim)
		server_destroy(victim);
	return victim != NULL;
}

void pool_mark_logged_in(struct pool *p)
{
	atomic_store(&p->logged_in, true);
	if (P.worker >= 0)
		procs_pool_logged_in(p->id);
}


void pools_share(void)
{
	enum { BATCH = 64 };
	struct server *doomed[BATCH];
	int n = 0;
	pthread_mutex_lock(&P.pools_mu);
	for (int i = 0; i < MAX_POOLS && n < BATCH; i++) {
		struct pool *p = P.pools[i];
		if (!p || !p->conn_turns)
			continue;
		if (P.worker >= 0) /* --fleet: fleet.c follows the share */
			atomic_store(&p->size, procs_pool_size(p->id));
		while (n < BATCH && conns_claim_close(p->id, p->conn_turns)) {
			struct server *s = take_idle_other(p, NULL);
			if (!s) { /* for a worker that has one */
				conns_close_done(p->id);
				break;
			}
			s->close_for = p->id;
			doomed[n++] = s;
		}
	}
	pthread_mutex_unlock(&P.pools_mu);
	for (int i = 0; i < n; i++) /* unlocked: destroying drops counts */
		server_destroy(doomed[i]);
}

void pool_put_server(struct server *s)
{
	struct pool *p = s->up->pool;
	int64_t now = ts_now_ns();
	bool old = P.cfg.lifetime_ns && now - s->created_ns >= P.cfg.lifetime_ns;
	s->idle_since_ns = now;
	if (p->conn_turns && conns_claim_close(p->id, p->conn_turns))
		s->close_for = p->id; /* another worker's waiter wants it more */
	if (s->close_for >= 0 || s->dirty || s->broken || old || atomic_load(&p->conns) > atomic_load(&p->size) ||
	    buf_len(&s->in) || tls_holds(&s->tls) || tls_broken(&s->tls) ||
	    buf_len(&s->out) || s->rl.left || s->rq_len || !ts_waitlist_put(s->up->conns, s))
		server_destroy(s);
}

static void pool_trim(struct pool *p)
{
	while (atomic_load(&p->conns) > atomic_load(&p->size)) {
		struct server *s = take_idle_other(p, NULL);
		if (!s)
			return; /* busy ones go when their transaction ends */
		server_destroy(s);
	}
}

static bool expired(void *item, void *arg)
{
	const struct server *s = item;
	int64_t now = *(const int64_t *)arg;
	return s->broken || /* the server closed it (or spoke) while idle */
	       (P.cfg.idle_timeout_ns && now - s->idle_since_ns >= P.cfg.idle_timeout_ns) ||
	       (P.cfg.lifetime_ns && now - s->created_ns >= P.cfg.lifetime_ns);
}

void pools_reap(void)
{
	enum { BATCH = 64 };
	struct server *doomed[BATCH];
	int n;
	do {
		n = 0;
		int64_t now = ts_now_ns();
		pthread_mutex_lock(&P.pools_mu);
		for (int i = 0; i < MAX_POOLS && n < BATCH; i++) {
			struct pool *p = P.pools[i];
			if (!p)
				continue;
			pthread_mutex_lock(&p->mu);
			for (struct upool *u = p->users; u && n < BATCH; u = u->next) {
				void *item;
				while (n < BATCH && ts_waitlist_try_take_oldest(u->conns, &item, expired, &now))
					doomed[n++] = item;
			}
			pthread_mutex_unlock(&p->mu);
		}
		pthread_mutex_unlock(&P.pools_mu);
		for (int i = 0; i < n; i++) /* unlocked: destroying drops counts */
			server_destroy(doomed[i]);
	} while (n == BATCH);
}

int pool_resize(const char *db, int64_t size)
{
	pthread_mutex_lock(&P.pools_mu);
	struct pool *p = NULL;
	for (int i = 0; i < MAX_POOLS && !p; i++)
		if (P.pools[i] && !strcmp(P.pools[i]->db, db))
			p = P.pools[i];
	/* --processes: the database may have no pool in this worker, but in
	 * another (the admin console's connection landed here by chance) */
	if (p && p->fleet) {
		/* --fleet: the fleet's ceiling, for every member; the share
		 * follows (not under pools_mu: etcd calls) */
		p->refs++;
		pthread_mutex_unlock(&P.pools_mu);
		int err = fleet_resize(p, size);
		pool_unref(p);
		return err;
	}
	int err = P.worker >= 0 ? procs_pool_resize(db, size)
		  : !p		? ENOENT
				: ts_set_resize(P.set, p->id, size);
	if (!err && p)
		atomic_store(&p->size, size);
	pthread_mutex_unlock(&P.pools_mu);
	/* Idle connections above the new size go now (pools_reap trims on
	 * every tick, from the loop); busy ones when their transaction ends. */
	return err;
}

void pools_each(void (*fn)(struct pool *p, void *arg), void *arg)
{
	pthread_mutex_lock(&P.pools_mu);
	for (int i = 0; i < MAX_POOLS; i++)
		if (P.pools[i])
			fn(P.pools[i], arg);
	pthread_mutex_unlock(&P.pools_mu);
}

void pools_trim_all(void)
{
	struct pool *list[MAX_POOLS];
	int n = 0;
	pthread_mutex_lock(&P.pools_mu);
	for (int i = 0; i < MAX_POOLS; i++)
		if (P.pools[i] && atomic_load(&P.pools[i]->conns) > atomic_load(&P.pools[i]->size)) {
			P.pools[i]->refs++; /* kept while trimmed unlocked */
			list[n++] = P.pools[i];
		}
	pthread_mutex_unlock(&P.pools_mu);
	for (int i = 0; i < n; i++) {
		pool_trim(list[i]);
		pool_unref(list[i]);
	}
}

/* At exit, every client gone: close the idle connections. */
void pools_free(void)
{
	for (int i = 0; i < MAX_POOLS; i++) {
		struct pool *p = P.pools[i];
		struct server *s;
		if (!p)
			continue;
		/* the last connection of a pool no login succeeded on frees it */
		while (P.pools[i] == p && (s = take_idle_other(p, NULL))) {
			s->w.mask = 0; /* one loop: it was watched idle, by an epoll */
			s->w.loop = NULL; /* set closed with its loop: nothing to undo */
			server_destroy(s);
		}
		if (!P.pools[i]) /* freed with its last user */
			continue;
		if (p->users) {
			fprintf(stderr, "pgproxy: pool %s still has users at exit\n", p->db);
			continue;
		}
		pool_unlist(p);
		pool_free(p);
	}
}

static void close_shared(struct pool *p, void *arg)
{
	ts_turnstile_close(p->turns);
	ts_turnstile_close(p->conn_turns);
}

void begin_shutdown(void)
{
	if (atomic_exchange(&P.shutting_down, true))
		return;
	fprintf(stderr, "pgproxy: shutting down: queued clients get an error, "
			"transactions under way finish\n");
	ts_set_close(P.set); /* queued turns end with ESHUTDOWN */
	if (P.worker >= 0 || P.cfg.fleet.on) /* a wait for a conns pass too */
		pools_each(close_shared, NULL);
	if (P.worker >= 0) /* every worker is shutting down: theirs too */
		procs_request_shutdown();
	loop_wake_all();
}

/* ---------------------------------------------------------------- wait histograms */

/* Log-linear buckets of microseconds: 16 per power of two, so a
 * percentile is within about 3% of the true value. */
static int hist_index(uint64_t us)
{
	if (us < 16)
		return (int)us;
	if (us >= (uint64_t)1 << 36)
		us = ((uint64_t)1 << 36) - 1;
	int e = 63 - __builtin_clzll(us);
	return 16 + (e - 4) * 16 + (int)((us >> (e - 4)) & 15);
}

static double hist_value_us(int i)
{
	if (i < 16)
		return i;
	int e = (i - 16) / 16 + 4, sub = (i - 16) % 16;
	double lo = (double)((uint64_t)(16 + sub) << (e - 4));
	return lo + (double)((uint64_t)1 << (e - 4)) / 2;
}

void hist_add(struct band_stats *s, int64_t ns)
{
	atomic_fetch_add(&s->hist[hist_index(ns > 0 ? (uint64_t)ns / 1000 : 0)], 1);
}

double hist_pct(const struct band_stats *s, double p)
{
	uint64_t counts[HIST_BUCKETS], total = 0;
	for (int i = 0; i < HIST_BUCKETS; i++)
		total += counts[i] = atomic_load(&s->hist[i]);
	if (!total)
		return 0;
	uint64_t rank = (uint64_t)(p * (double)total + 0.999999), seen = 0;
	for (int i = 0; i < HIST_BUCKETS; i++)
		if ((seen += counts[i]) >= rank)
			return hist_value_us(i) / 1000;
	return hist_value_us(HIST_BUCKETS - 1) / 1000;
}

void upool_hold(struct upool *u)
{
	pthread_mutex_lock(&u->pool->mu);
	u->refs++;
	pthread_mutex_unlock(&u->pool->mu);
}
