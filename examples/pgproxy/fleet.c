/* SPDX-License-Identifier: MIT */
/* pgproxy: --fleet, each pool's ceiling a fleet ceiling over etcd.
 *
 * A pool's server connections are passes of its conns turnstile (conns.c),
 * which is a member of the fleet at KEY/DATABASE: its ceiling is this
 * proxy's share, so the connections of every proxy given the same key
 * never exceed the fleet's ceiling (idle ones hold their pass too, and a
 * closed one's pass comes back only once the server has hung up).  The
 * member publishes the demand of the pool's turns turnstile, where
 * transactions queue (ts_fleet_demand_from): an idle connection is no
 * demand.  The turns ceiling follows the share, after it: one step per
 * FOLLOW_NS.  A share that shrinks leaves connections above it; conns.c's
 * demand closes them (idle ones at once, busy ones when their transaction
 * ends) and the fleet publishes the smaller share once they are gone.
 *
 * One thread here joins, follows and leaves, so no loop ever waits for
 * etcd.  A pool is made at its first login and its member joins from
 * this thread; until the first share its clients queue (their wait
 * timeout runs).  etcd unreachable at join: tried again every second.
 *
 * RESIZE is made here too: its etcd calls may take seconds.
 *
 * A login to a database that does not exist joins that database's fleet
 * (the server is asked only with a connection, which needs the share)
 * and leaves when the login fails; at most FLEET_UNVOUCHED_MAX such
 * pools at once, and no name with '/' (it would name another fleet's
 * keys).  The ledger of a fleet is left in etcd (it keeps the ceiling):
 * a made-up name leaves a key of some 40 bytes behind.
 *
 * Ownership: a member is made by fleet_attach (a loop thread, pools_mu
 * held) and freed only by this thread, once its pool let it go
 * (fleet_detach, pools_mu held) and no join or resize runs on it.
 * Leaving waits for the conns passes still out (lingering closes), so it
 * runs in a thread of its own; the turnstile is freed after its last pass
 * is back, or kept (and logged) if one never comes.
 * Locks: pools_mu, then fleet_mu; neither is held across an etcd call. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pgproxy.h"

#ifdef PGPROXY_FLEET
#include <turnstile/fleet.h>

#define FOLLOW_NS ((int64_t)10 * 1000000)
#define JOIN_RETRY_NS ((int64_t)1000000000)

struct member {
	struct member *next;
	char db[NAME_LEN];
	int shard;              /* the pool's turns: P.set's shard */
	ts_turnstile *conns;    /* the pool's conn_turns */
	struct pool *pool;      /* NULL once detached */
	ts_fleet *f;            /* NULL until joined */
	int64_t share;          /* what the turns ceiling was set to */
	int64_t retry_at;
	int last_err;           /* logged once per change */
	int busy;               /* joining or resizing: not to be freed */
	int64_t resize_to;      /* RESIZE asked for this ceiling (-1: none) */
};

static pthread_mutex_t fleet_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fleet_cv = PTHREAD_COND_INITIALIZER;
static struct member *members;
static pthread_t thread;
static bool running, stopping;
static int leaving; /* leave threads not yet done (fleet_mu) */

static void pause_ns(int64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000), (long)(ns % 1000000000) };
	nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------- leaving */

/* A detached member: hand the share back, then free the turnstile once
 * every conns pass is home. */
static void *leave_thread(void *arg)
{
	struct member *m = arg;
	if (m->f)
		ts_fleet_leave(m->f); /* waits (at most the lease) for held passes */
	int64_t avail = 0;
	for (int i = 0; i < 500; i++) { /* lingering closes: at most 2 s each */
		ts_turnstile_snapshot(m->conns, &avail, NULL);
		if (avail >= ts_turnstile_ceiling(m->conns))
			break;
		pause_ns(20 * 1000000);
	}
	if (avail >= ts_turnstile_ceiling(m->conns))
		ts_turnstile_free(m->conns);
	else
		fprintf(stderr, "pgproxy: fleet %s%s: a connection's pass never came back: "
				"its turnstile is kept\n", P.cfg.fleet.key, m->db);
	free(m);
	pthread_mutex_lock(&fleet_mu);
	leaving--;
	pthread_cond_broadcast(&fleet_cv);
	pthread_mutex_unlock(&fleet_mu);
	return NULL;
}

/* Under fleet_mu: @m is out of the list; leave in the background (or
 * here, if no thread can be made). */
static void start_leave(struct member *m)
{
	pthread_t t;
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	leaving++;
	if (pthread_create(&t, &a, leave_thread, m)) {
		pthread_mutex_unlock(&fleet_mu);
		leave_thread(m);
		pthread_mutex_lock(&fleet_mu);
	}
	pthread_attr_destroy(&a);
}

/* ---------------------------------------------------------------- the thread */

/* One member without a share yet, joined (fleet_mu held on entry and
 * exit, dropped for the join). */
static void join(struct member *m, int64_t now)
{
	char key[512];
	snprintf(key, sizeof(key), "%s%s%s", P.cfg.fleet.key,
		 P.cfg.fleet.key[strlen(P.cfg.fleet.key) - 1] == '/' ? "" : "/", m->db);
	ts_fleet_config cfg = { .endpoints = P.cfg.fleet.endpoints,
				.key = key,
				.member = P.cfg.fleet.member[0] ? P.cfg.fleet.member : NULL,
				.ceiling = P.cfg.fleet.ceiling,
				.lease_ns = P.cfg.fleet.lease_ns };
	m->busy++;
	pthread_mutex_unlock(&fleet_mu);
	ts_fleet *f = ts_fleet_join(m->conns, &cfg);
	int err = f ? 0 : errno;
	if (f)
		ts_fleet_demand_from(f, ts_set_turnstile(P.set, m->shard));
	pthread_mutex_lock(&fleet_mu);
	if (f && !m->pool) /* detached meanwhile: the shard may be another's */
		ts_fleet_demand_from(f, NULL);
	m->busy--;
	m->f = f;
	m->retry_at = now + JOIN_RETRY_NS;
	if (err != m->last_err) {
		if (err == EEXIST)
			fprintf(stderr, "pgproxy: fleet %s: it exists with another ceiling (RESIZEd?): "
					"give --fleet ceiling= its ceiling now\n", key);
		else if (err)
			fprintf(stderr, "pgproxy: fleet %s: join: %s (trying again every second; "
					"its clients wait)\n", key, ts_strerror(err));
		else
			fprintf(stderr, "pgproxy: fleet %s: joined\n", key);
	}
	m->last_err = err;
}

/* A RESIZE, made here for the admin console (fleet_mu held on entry
 * and exit, dropped for the etcd calls). */
static void resize(struct member *m)
{
	int64_t ceiling = m->resize_to;
	ts_fleet *f = m->f;
	m->resize_to = -1;
	m->busy++;
	pthread_mutex_unlock(&fleet_mu);
	int err = ts_fleet_resize(f, ceiling);
	if (err)
		fprintf(stderr, "pgproxy: fleet of %s: RESIZE %lld: %s\n", m->db, (long long)ceiling,
			ts_strerror(err));
	else
		fprintf(stderr, "pgproxy: fleet of %s: ceiling %lld\n", m->db, (long long)ceiling);
	pthread_mutex_lock(&fleet_mu);
	m->busy--;
}

/* The turns ceiling and the pool's size after the share (pools_mu and
 * fleet_mu held: attached members' pools stay). */
static void follow(struct member *m)
{
	int64_t share;
	ts_fleet_share(m->f, &share, NULL);
	if (share == m->share)
		return;
	if (!ts_set_resize(P.set, m->shard, share))
		m->share = share;
	atomic_store(&m->pool->size, share);
}

static void *fleet_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&fleet_mu);
	for (;;) {
		int64_t now = ts_now_ns();
		struct member *m, **q;
		for (m = members; m; m = m->next)
			if (!m->f && m->pool && !m->busy && now >= m->retry_at && !stopping)
				break;
		if (m) { /* one join a round: the list may change meanwhile */
			join(m, now);
			continue;
		}
		for (m = members; m; m = m->next)
			if (m->f && m->pool && !m->busy && m->resize_to >= 0 && !stopping)
				break;
		if (m) {
			resize(m);
			continue;
		}
		for (q = &members; (m = *q);) {
			if (!m->pool && !m->busy) {
				*q = m->next;
				start_leave(m);
			} else {
				q = &m->next;
			}
		}
		if (stopping && !members)
			break;
		pthread_mutex_unlock(&fleet_mu);
		pthread_mutex_lock(&P.pools_mu);
		pthread_mutex_lock(&fleet_mu);
		for (m = members; m; m = m->next)
			if (m->f && m->pool)
				follow(m);
		pthread_mutex_unlock(&P.pools_mu);
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		int64_t at = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + FOLLOW_NS;
		ts = (struct timespec){ (time_t)(at / 1000000000), (long)(at % 1000000000) };
		if (!stopping)
			pthread_cond_timedwait(&fleet_cv, &fleet_mu, &ts);
	}
	while (leaving)
		pthread_cond_wait(&fleet_cv, &fleet_mu);
	pthread_mutex_unlock(&fleet_mu);
	return NULL;
}

/* ---------------------------------------------------------------- the pools' side */

/* Under fleet_mu: members whose pool no login has succeeded on yet. */
static int unvouched(void)
{
	int n = 0;
	for (struct member *m = members; m; m = m->next)
		n += m->pool && !atomic_load(&m->pool->logged_in);
	return n;
}

int fleet_attach(struct pool *p)
{
	if (strchr(p->db, '/'))
		return EINVAL;
	pthread_mutex_lock(&fleet_mu);
	int full = unvouched() >= FLEET_UNVOUCHED_MAX;
	pthread_mutex_unlock(&fleet_mu);
	if (full)
		return EBUSY;
	struct member *m = calloc(1, sizeof(*m));
	if (!m || !(m->conns = ts_turnstile_new(0))) {
		free(m);
		return ENOMEM;
	}
	snprintf(m->db, sizeof(m->db), "%s", p->db);
	m->resize_to = -1;
	m->shard = p->id;
	m->pool = p;
	pthread_mutex_lock(&fleet_mu);
	int err = 0;
	if (!running)
		err = pthread_create(&thread, NULL, fleet_thread, NULL);
	if (!err) {
		running = true;
		m->next = members;
		members = m;
		p->fleet = m;
		p->conn_turns = m->conns;
		pthread_cond_broadcast(&fleet_cv);
	}
	pthread_mutex_unlock(&fleet_mu);
	if (err) {
		ts_turnstile_free(m->conns);
		free(m);
	}
	return err;
}

void fleet_detach(struct pool *p)
{
	pthread_mutex_lock(&fleet_mu);
	struct member *m = p->fleet;
	m->pool = NULL; /* the shard may name another database from now on */
	if (m->f)
		ts_fleet_demand_from(m->f, NULL);
	p->fleet = NULL;
	pthread_cond_broadcast(&fleet_cv);
	pthread_mutex_unlock(&fleet_mu);
}

int fleet_resize(struct pool *p, int64_t ceiling)
{
	pthread_mutex_lock(&fleet_mu);
	struct member *m = p->fleet;
	int err = m->f ? 0 : EAGAIN; /* not joined yet */
	if (!err) {
		m->resize_to = ceiling;
		pthread_cond_broadcast(&fleet_cv);
	}
	pthread_mutex_unlock(&fleet_mu);
	return err;
}

struct show {
	const char *db;
	void (*row)(const char *db, const char *member, bool self, int64_t share, int64_t held,
		    const char *queued, void *arg);
	void *arg;
};

/* A member's queue as "band:count ...", best band first. */
static void show_member(const ts_fleet_member_info *mi, void *arg)
{
	struct show *s = arg;
	char queued[128] = "";
	size_t used = 0;
	for (int i = 0; i < mi->nbands && used < sizeof(queued) - 24; i++)
		used += (size_t)snprintf(queued + used, sizeof(queued) - used, "%s%d:%lld",
					 i ? " " : "", mi->bands[i], (long long)mi->waiting[i]);
	s->row(s->db, mi->name, mi->self, mi->share, mi->held, queued, s->arg);
}

void fleet_each(void (*row)(const char *db, const char *member, bool self, int64_t share,
			    int64_t held, const char *queued, void *arg),
		void *arg)
{
	pthread_mutex_lock(&fleet_mu);
	for (struct member *m = members; m; m = m->next) {
		if (!m->pool)
			continue;
		struct show s = { m->db, row, arg };
		if (!m->f || ts_fleet_members(m->f, show_member, &s) <= 0)
			row(m->db, NULL, false, 0, 0, "", arg); /* not joined, or no look yet */
	}
	pthread_mutex_unlock(&fleet_mu);
}

void fleet_stop(void)
{
	pthread_mutex_lock(&fleet_mu);
	if (!running) {
		pthread_mutex_unlock(&fleet_mu);
		return;
	}
	stopping = true;
	for (struct member *m = members; m; m = m->next)
		m->pool = NULL; /* pools left at exit with users still: theirs go too */
	pthread_cond_broadcast(&fleet_cv);
	pthread_mutex_unlock(&fleet_mu);
	pthread_join(thread, NULL);
	running = false;
}

#else /* built without libturnstile-fleet */

int fleet_attach(struct pool *p) { (void)p; return ENOTSUP; }
void fleet_detach(struct pool *p) { (void)p; }
int fleet_resize(struct pool *p, int64_t ceiling) { (void)p; (void)ceiling; return ENOTSUP; }
void fleet_each(void (*row)(const char *db, const char *member, bool self, int64_t share,
			    int64_t held, const char *queued, void *arg),
		void *arg)
{
	(void)row;
	(void)arg;
}
void fleet_stop(void) {}

#endif
