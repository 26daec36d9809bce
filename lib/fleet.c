/* SPDX-License-Identifier: MIT */
/* Fleet ceilings over etcd: one ceiling divided among live members by
 * demand, admission still local.
 *
 * KEYS under the fleet's prefix P:
 *   P/ledger        {"ceiling":C,"shares":{"member":s,...}}: THE TRUTH.  Written
 *                   only by a transaction that compares its mod_revision with
 *                   the one its writer read (CAS), so every write starts from
 *                   the latest ledger.
 *   P/members/NAME  {"held":h,"bands":[[band,waiting],...]} under NAME's lease:
 *                   it exists exactly while the lease lives.
 *
 * THE INVARIANT: the passes admitted by all members together never exceed C.
 * It rests on three rules, each kept by one place below:
 *   1. Sum of shares <= C in every ledger (grow(): a member raises its own
 *      share only by CAS, by at most C minus the sum it read).
 *   2. A live member's local ceiling never exceeds its ledger share:
 *      growing writes the ledger first and then raises the local ceiling;
 *      shrinking lowers the local ceiling first, and publishes the smaller
 *      share only as max(target, held): passes held stay counted
 *      (shrink()).
 *   3. A member's share is taken away only once its lease has expired, and
 *      a member admits nobody new once half its lease has gone by without
 *      a renewal (fresh_until: counted from before the renewal was sent,
 *      so it ends before etcd's expiry, which counts from when etcd got
 *      it).  reclaim() drops the shares of members whose member key is
 *      gone, in a CAS that also compares each such key absent; a member
 *      that rejoins puts its key back first, so its share is either still
 *      its own or already gone, never both.
 * The assumption (documented): no pass is held longer than the lease, as
 * a member cut off keeps what it holds until it is returned.
 *
 * SHARES FOLLOW DEMAND.  Every member computes the same targets from the
 * same ledger and member keys (fleet_targets()): each member's held
 * passes first, then the waiting callers band by band, best band first
 * (split in proportion within a band when room runs out), then what is
 * left evenly, so an idle member keeps room for a burst.  A member moves
 * only its own share: down when another member's target is above its
 * share (somebody needs room), up while the ledger has room.  One look
 * per tick (FLEET_TICK_NS), one etcd range read and, when something
 * changed, one write.
 *
 * FAIL CLOSED.  No renewal for half the lease (etcd gone, a partition, a
 * SIGSTOPped or frozen process): the local ceiling goes to 0 at the first
 * look after the deadline, which is the first thing a member does when it
 * wakes (before any network call).  A lease found gone on renewal: the
 * member rejoins (a new lease, its key back) and keeps whatever share the
 * ledger still gives it.
 *
 * Model: tests/model/fleet.pml (members that grow, shrink, die and lose
 * their lease; a ledger with CAS). */
#include <turnstile/fleet.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "etcd.h"
#include "fleet_targets.h"
#include "probe.h"

/* A look every tick while shares move, every idle tick at rest: at rest a
 * member costs one range read per idle tick and a renewal per third of
 * the lease (about 5.5 requests/s with the default lease). */
#define FLEET_TICK_NS ((int64_t)100000000)
#define FLEET_IDLE_TICK_NS ((int64_t)250000000)
#define FLEET_MAX_BANDS 16
#define FLEET_MAX_NAME 200

struct ts_fleet {
	ts_turnstile *local;
	struct etcd *etcd;
	char *ledger_key, *member_key, *members_prefix, *name;
	int64_t lease_ns, lease_id;
	pthread_t thread;
	pthread_mutex_t mu; /* everything below, and the etcd client */
	pthread_cond_t cv;
	bool stop;
	int64_t share;        /* ours in the ledger, as last read or written */
	int64_t local_ceiling; /* what local's ceiling is now */
	int64_t fresh_until;  /* admit only before this (rule 3) */
	int64_t next_renewal;
	int64_t members;      /* live members seen at the last look */
	char *published;      /* our member key's value, as last put */
};

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The only writer of local's ceiling (rule 2's local half). */
static void set_local(ts_fleet *f, int64_t ceiling)
{
	if (ceiling == f->local_ceiling)
		return;
	ts_turnstile_resize(f->local, ceiling);
	f->local_ceiling = ceiling;
}

static int64_t held_now(ts_fleet *f)
{
	int64_t avail;
	ts_turnstile_snapshot(f->local, &avail, NULL);
	return f->local_ceiling - avail;
}

static bool fresh(const ts_fleet *f)
{
	return now_ns() < f->fresh_until;
}

/* Rule 3's clock, checked before every etcd call of a look and before
 * every raise of the local ceiling: not fresh, fail closed now.  With a
 * call's timeout a sixth of the lease, a member fails closed at most that
 * long after its deadline (half the lease), well before etcd's expiry. */
static bool still_fresh(ts_fleet *f)
{
	if (fresh(f))
		return true;
	if (f->local_ceiling)
		TS_PROBE2(fleet__closed, f, f->local_ceiling);
	set_local(f, 0);
	return false;
}

/* --- the ledger ------------------------------------------------------------ */

struct ledger {
	int64_t ceiling, rev; /* rev: its mod_revision, 0 when absent */
	json_object *shares;  /* name -> share (owned by doc) */
	json_object *doc;
};

static void ledger_free(struct ledger *l)
{
	if (l->doc)
		json_object_put(l->doc);
	memset(l, 0, sizeof(*l));
}

static int ledger_parse(struct ledger *l, const struct etcd_kv *kv)
{
	json_object *c;
	memset(l, 0, sizeof(*l));
	l->doc = json_tokener_parse(kv->value);
	if (!l->doc || !json_object_is_type(l->doc, json_type_object) ||
	    !json_object_object_get_ex(l->doc, "ceiling", &c) ||
	    !json_object_object_get_ex(l->doc, "shares", &l->shares) ||
	    !json_object_is_type(l->shares, json_type_object)) {
		ledger_free(l);
		return EPROTO;
	}
	l->ceiling = json_object_get_int64(c);
	l->rev = kv->mod_rev;
	return l->ceiling < 0 ? EPROTO : 0;
}

static int64_t ledger_share(const struct ledger *l, const char *name)
{
	json_object *s;
	return json_object_object_get_ex(l->shares, name, &s) ? json_object_get_int64(s) : 0;
}

static int64_t ledger_sum(const struct ledger *l)
{
	int64_t sum = 0;
	json_object_object_foreach(l->shares, k, v)
	{
		(void)k;
		sum += json_object_get_int64(v);
	}
	return sum;
}

/* CAS: write the ledger with @name's share set (or removed, when @share <
 * 0) if it is still at l->rev.  *@won: whether it was. */
static int ledger_write(ts_fleet *f, struct ledger *l, const char *name, int64_t share,
			bool *won)
{
	json_object *cmps = json_object_new_array(), *ops = json_object_new_array();
	if (share < 0)
		json_object_object_del(l->shares, name);
	else
		json_object_object_add(l->shares, name, json_object_new_int64(share));
	ts_lib_etcd_cmp(cmps, f->ledger_key, "MOD", l->rev);
	ts_lib_etcd_op_put(ops, f->ledger_key,
			   json_object_to_json_string_ext(l->doc, JSON_C_TO_STRING_PLAIN), 0);
	return ts_lib_etcd_txn(f->etcd, cmps, ops, NULL, won);
}

/* --- one look: read, reclaim, move our share ------------------------------ */

struct view {
	struct ledger ledger;
	struct etcd_kv *kvs;
	size_t n;
	struct fleet_member *m; /* live members, ledger order irrelevant */
	size_t nm;
};

static void view_free(struct view *v)
{
	ledger_free(&v->ledger);
	ts_lib_etcd_kvs_free(v->kvs, v->n);
	for (size_t i = 0; i < v->nm; i++)
		free(v->m[i].bands);
	free(v->m);
	memset(v, 0, sizeof(*v));
}

/* A member key's demand; a value we cannot read counts as no demand. */
static void parse_demand(struct fleet_member *m, const char *value)
{
	json_object *doc = json_tokener_parse(value), *held, *bands;
	if (!doc)
		return;
	if (json_object_object_get_ex(doc, "held", &held))
		m->held = json_object_get_int64(held);
	if (json_object_object_get_ex(doc, "bands", &bands) &&
	    json_object_is_type(bands, json_type_array)) {
		size_t n = json_object_array_length(bands);
		if (n > FLEET_MAX_BANDS)
			n = FLEET_MAX_BANDS;
		m->bands = calloc(n ? n : 1, sizeof(*m->bands));
		for (size_t i = 0; m->bands && i < n; i++) {
			json_object *pair = json_object_array_get_idx(bands, i);
			if (!json_object_is_type(pair, json_type_array) ||
			    json_object_array_length(pair) != 2)
				continue;
			m->bands[m->nbands].band =
				(int)json_object_get_int64(json_object_array_get_idx(pair, 0));
			m->bands[m->nbands++].waiting =
				json_object_get_int64(json_object_array_get_idx(pair, 1));
		}
	}
	if (m->held < 0)
		m->held = 0;
	json_object_put(doc);
}

static int read_view(ts_fleet *f, struct view *v, const char *prefix)
{
	int64_t rev;
	memset(v, 0, sizeof(*v));
	int err = ts_lib_etcd_range_prefix(f->etcd, prefix, &v->kvs, &v->n, &rev);
	if (err)
		return err;
	v->m = calloc(v->n ? v->n : 1, sizeof(*v->m));
	if (!v->m) {
		view_free(v);
		return ENOMEM;
	}
	size_t plen = strlen(f->members_prefix);
	for (size_t i = 0; i < v->n; i++) {
		struct etcd_kv *kv = &v->kvs[i];
		if (!strcmp(kv->key, f->ledger_key)) {
			if ((err = ledger_parse(&v->ledger, kv))) {
				view_free(v);
				return err;
			}
		} else if (!strncmp(kv->key, f->members_prefix, plen) && kv->key[plen]) {
			struct fleet_member *m = &v->m[v->nm++];
			m->name = kv->key + plen;
			parse_demand(m, kv->value);
		}
	}
	if (!v->ledger.doc) {
		view_free(v);
		return ENOENT; /* nobody made the fleet, or it was deleted */
	}
	return 0;
}

static bool is_member(const struct view *v, const char *name)
{
	for (size_t i = 0; i < v->nm; i++)
		if (!strcmp(v->m[i].name, name))
			return true;
	return false;
}

/* Rule 3: drop the shares of members whose key is gone, each compared
 * absent in the same CAS. */
static int reclaim(ts_fleet *f, struct view *v, bool *wrote)
{
	json_object *cmps = json_object_new_array(), *ops = json_object_new_array();
	int dead = 0;
	*wrote = false;
	ts_lib_etcd_cmp(cmps, f->ledger_key, "MOD", v->ledger.rev);
	json_object *names = json_object_new_array();
	json_object_object_foreach(v->ledger.shares, name, share)
	{
		(void)share;
		if (!is_member(v, name)) {
			char key[FLEET_MAX_NAME + 512];
			snprintf(key, sizeof(key), "%s%s", f->members_prefix, name);
			ts_lib_etcd_cmp(cmps, key, "VERSION", 0);
			json_object_array_add(names, json_object_new_string(name));
			dead++;
		}
	}
	if (!dead) {
		json_object_put(cmps);
		json_object_put(ops);
		json_object_put(names);
		return 0;
	}
	for (size_t i = 0; i < json_object_array_length(names); i++)
		json_object_object_del(v->ledger.shares,
				       json_object_get_string(json_object_array_get_idx(names, i)));
	json_object_put(names);
	ts_lib_etcd_op_put(ops, f->ledger_key,
			   json_object_to_json_string_ext(v->ledger.doc, JSON_C_TO_STRING_PLAIN),
			   0);
	return ts_lib_etcd_txn(f->etcd, cmps, ops, NULL, wrote);
}

/* Rule 2, shrinking: local first, then the ledger, never below held. */
static int shrink(ts_fleet *f, struct view *v, int64_t target, bool *wrote)
{
	set_local(f, target);
	int64_t held = held_now(f), share = held > target ? held : target;
	if (share >= f->share) {
		*wrote = false;
		return 0;
	}
	int err = ledger_write(f, &v->ledger, f->name, share, wrote);
	if (!err && *wrote) {
		TS_PROBE3(fleet__share, f, f->share, share);
		f->share = share;
	}
	return err;
}

/* Rule 1 and rule 2, growing: the ledger first (within its room), then
 * local, and only while fresh. */
static int grow(ts_fleet *f, struct view *v, int64_t target, bool *wrote)
{
	int64_t room = v->ledger.ceiling - ledger_sum(&v->ledger);
	int64_t share = f->share + (target - f->share < room ? target - f->share : room);
	*wrote = false;
	if (share <= f->share)
		return 0;
	int err = ledger_write(f, &v->ledger, f->name, share, wrote);
	if (!err && *wrote) {
		TS_PROBE3(fleet__share, f, f->share, share);
		f->share = share;
		if (still_fresh(f))
			set_local(f, share);
	}
	return err;
}

/* Our member key: our demand now, put when it changed (under our lease);
 * *@changed says whether it did. */
static int publish(ts_fleet *f, bool *changed)
{
	int bands[FLEET_MAX_BANDS];
	int64_t waiting[FLEET_MAX_BANDS];
	int nb = ts_turnstile_waiting_by_band(f->local, bands, waiting, FLEET_MAX_BANDS);
	if (nb > FLEET_MAX_BANDS)
		nb = FLEET_MAX_BANDS; /* the worst bands beyond go unreported */
	json_object *doc = json_object_new_object(), *arr = json_object_new_array();
	int64_t held = held_now(f);
	json_object_object_add(doc, "held", json_object_new_int64(held > 0 ? held : 0));
	for (int i = 0; i < nb; i++) {
		json_object *pair = json_object_new_array();
		json_object_array_add(pair, json_object_new_int64(bands[i]));
		json_object_array_add(pair, json_object_new_int64(waiting[i]));
		json_object_array_add(arr, pair);
	}
	json_object_object_add(doc, "bands", arr);
	const char *value = json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN);
	int err = 0;
	*changed = !f->published || strcmp(f->published, value);
	if (*changed) {
		char *copy = strdup(value);
		err = copy ? ts_lib_etcd_put(f->etcd, f->member_key, value, f->lease_id) : ENOMEM;
		if (!err) {
			free(f->published);
			f->published = copy;
		} else {
			free(copy);
		}
	}
	json_object_put(doc);
	return err;
}

/* Renew the lease when due (rule 3's clock).  Lease gone: rejoin. */
static int join_member_key(ts_fleet *f);

static int renew(ts_fleet *f)
{
	int64_t sent = now_ns(), ttl;
	if (sent < f->next_renewal)
		return 0;
	int err = ts_lib_etcd_lease_keepalive(f->etcd, f->lease_id, &ttl);
	if (err) {
		f->next_renewal = sent + FLEET_TICK_NS;
		return err;
	}
	if (ttl <= 0) {
		/* Expired: our key is gone and our share may be (rule 3).  A new
		 * lease, our key back; the ledger says what is still ours. */
		if ((err = ts_lib_etcd_lease_grant(f->etcd, (f->lease_ns + 999999999) / 1000000000,
						   &f->lease_id)) ||
		    (err = join_member_key(f))) {
			f->next_renewal = sent + FLEET_TICK_NS;
			return err;
		}
		free(f->published);
		f->published = NULL;
		TS_PROBE2(fleet__rejoin, f, f->lease_id);
	}
	f->fresh_until = sent + f->lease_ns / 2;
	f->next_renewal = sent + f->lease_ns / 3;
	return 0;
}

/* One look.  Fails closed first, before any network call, and again
 * between calls.  Returns whether anything moves (our demand, a write, a
 * member short of room, an error): then the next look comes sooner. */
static bool look(ts_fleet *f, const char *prefix)
{
	bool changed = true;
	still_fresh(f);
	if (renew(f) || !still_fresh(f) || publish(f, &changed) || !still_fresh(f))
		return true;
	struct view v;
	if (read_view(f, &v, prefix))
		return true;
	bool wrote = false;
	f->members = (int64_t)v.nm;
	if (!still_fresh(f) || reclaim(f, &v, &wrote) || wrote || !still_fresh(f)) {
		view_free(&v);
		return true; /* the ledger moved: the next look starts from it */
	}
	f->share = ledger_share(&v.ledger, f->name);
	if (f->local_ceiling > f->share)
		set_local(f, f->share); /* rule 2, whatever lowered the ledger */
	int64_t target = f->share;
	bool needed = false;
	int64_t *targets = calloc(v.nm ? v.nm : 1, sizeof(*targets));
	if (targets) {
		for (size_t i = 0; i < v.nm; i++)
			v.m[i].share = ledger_share(&v.ledger, v.m[i].name);
		ts_lib_fleet_targets(v.ledger.ceiling, v.m, v.nm, targets);
		/* Hysteresis: room is given back only to a member with callers
		 * queued beyond its share, never to chase a held count. */
		for (size_t i = 0; i < v.nm; i++) {
			if (!strcmp(v.m[i].name, f->name))
				target = targets[i];
			else if (ts_lib_fleet_demand(&v.m[i]) > v.m[i].share &&
				 targets[i] > v.m[i].share)
				needed = true;
		}
		free(targets);
	}
	/* A lowered ceiling leaves the shares above it: everyone shrinks. */
	bool over = ledger_sum(&v.ledger) > v.ledger.ceiling;
	bool moving = changed || needed || over;
	if (target < f->share && (needed || over))
		shrink(f, &v, target, &wrote);
	else if (target > f->share)
		moving |= grow(f, &v, target, &wrote) || wrote;
	else if (f->local_ceiling < f->share && still_fresh(f))
		set_local(f, f->share); /* fresh again after failing closed */
	view_free(&v);
	return moving || wrote;
}

static void *fleet_thread(void *arg)
{
	ts_fleet *f = arg;
	size_t plen = strlen(f->ledger_key) - strlen("ledger");
	char *prefix = strndup(f->ledger_key, plen);
	pthread_mutex_lock(&f->mu);
	while (!f->stop) {
		bool moving = !prefix || look(f, prefix);
		int64_t wake = now_ns() + (moving ? FLEET_TICK_NS : FLEET_IDLE_TICK_NS);
		if (f->fresh_until > now_ns() && f->fresh_until < wake)
			wake = f->fresh_until; /* fail closed on time */
		struct timespec ts = { (time_t)(wake / 1000000000), (long)(wake % 1000000000) };
		while (!f->stop && pthread_cond_timedwait(&f->cv, &f->mu, &ts) == 0)
			;
	}
	pthread_mutex_unlock(&f->mu);
	free(prefix);
	return NULL;
}

/* --- join, resize, share, leave ------------------------------------------- */

/* Our member key, created under our lease; EADDRINUSE when a live member
 * (another lease) has it. */
static int join_member_key(ts_fleet *f)
{
	json_object *cmps = json_object_new_array(), *ops = json_object_new_array();
	bool won;
	ts_lib_etcd_cmp(cmps, f->member_key, "VERSION", 0);
	ts_lib_etcd_op_put(ops, f->member_key, "{\"held\":0,\"bands\":[]}", f->lease_id);
	int err = ts_lib_etcd_txn(f->etcd, cmps, ops, NULL, &won);
	return err ? err : won ? 0 : EADDRINUSE;
}

/* The ledger made by the first member, or checked against ours. */
static int join_ledger(ts_fleet *f, int64_t ceiling)
{
	char value[64];
	json_object *cmps = json_object_new_array(), *ops = json_object_new_array();
	bool won;
	snprintf(value, sizeof(value), "{\"ceiling\":%" PRId64 ",\"shares\":{}}", ceiling);
	ts_lib_etcd_cmp(cmps, f->ledger_key, "CREATE", 0);
	ts_lib_etcd_op_put(ops, f->ledger_key, value, 0);
	int err = ts_lib_etcd_txn(f->etcd, cmps, ops, NULL, &won);
	if (err || won)
		return err;
	struct etcd_kv *kvs;
	size_t n;
	int64_t rev;
	if ((err = ts_lib_etcd_range_prefix(f->etcd, f->ledger_key, &kvs, &n, &rev)))
		return err;
	struct ledger l = { 0 };
	for (size_t i = 0; !err && i < n; i++)
		if (!strcmp(kvs[i].key, f->ledger_key))
			err = ledger_parse(&l, &kvs[i]);
	if (!err)
		err = !l.doc ? EPROTO : l.ceiling != ceiling ? EEXIST : 0;
	ledger_free(&l);
	ts_lib_etcd_kvs_free(kvs, n);
	return err;
}

static bool valid_config(const ts_fleet_config *c)
{
	return c && c->endpoints && *c->endpoints && c->key && c->key[0] == '/' &&
	       strlen(c->key) < 256 && c->ceiling >= 0 &&
	       (c->lease_ns == 0 ||
		(c->lease_ns >= TS_FLEET_LEASE_MIN_NS && c->lease_ns <= TS_FLEET_LEASE_MAX_NS)) &&
	       (!c->member || (*c->member && strlen(c->member) <= FLEET_MAX_NAME &&
			       !strchr(c->member, '/') && !strchr(c->member, '"')));
}

static void fleet_free(ts_fleet *f)
{
	ts_lib_etcd_free(f->etcd);
	free(f->ledger_key);
	free(f->member_key);
	free(f->members_prefix);
	free(f->name);
	free(f->published);
	pthread_mutex_destroy(&f->mu);
	pthread_cond_destroy(&f->cv);
	free(f);
}

static char *joined(const char *a, const char *b, const char *c)
{
	size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
	char *s = malloc(n);
	if (s)
		snprintf(s, n, "%s%s%s", a, b, c);
	return s;
}

TS_API ts_fleet *ts_fleet_join(ts_turnstile *local, const ts_fleet_config *cfg)
{
	if (!local || !valid_config(cfg)) {
		errno = EINVAL;
		return NULL;
	}
	ts_fleet *f = calloc(1, sizeof(*f));
	char name[FLEET_MAX_NAME + 1], host[128] = "localhost";
	if (!f) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&f->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&f->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (cfg->member) {
		snprintf(name, sizeof(name), "%s", cfg->member);
	} else {
		gethostname(host, sizeof(host) - 1);
		snprintf(name, sizeof(name), "%s:%ld", host, (long)getpid());
	}
	f->local = local;
	f->lease_ns = cfg->lease_ns ? cfg->lease_ns : (int64_t)5000000000;
	size_t klen = strlen(cfg->key);
	const char *sep = cfg->key[klen - 1] == '/' ? "" : "/";
	f->name = strdup(name);
	f->ledger_key = joined(cfg->key, sep, "ledger");
	f->members_prefix = joined(cfg->key, sep, "members/");
	f->member_key = f->members_prefix ? joined(f->members_prefix, name, "") : NULL;
	/* a call waits at most a sixth of the lease: a look stays well
	 * inside the half lease it may admit for */
	int64_t timeout = f->lease_ns / 6 < 1000000000 ? f->lease_ns / 6 : 1000000000;
	int err = 0;
	if (!f->name || !f->ledger_key || !f->members_prefix || !f->member_key)
		err = ENOMEM;
	else if (!(f->etcd = ts_lib_etcd_new(cfg->endpoints, timeout)))
		err = errno;
	int64_t sent = now_ns();
	if (!err)
		err = ts_lib_etcd_lease_grant(f->etcd, (f->lease_ns + 999999999) / 1000000000,
					      &f->lease_id);
	if (!err)
		err = join_ledger(f, cfg->ceiling);
	if (!err)
		err = join_member_key(f);
	if (err) {
		if (f->lease_id)
			ts_lib_etcd_lease_revoke(f->etcd, f->lease_id);
		fleet_free(f);
		errno = err;
		return NULL;
	}
	f->fresh_until = sent + f->lease_ns / 2;
	f->next_renewal = sent + f->lease_ns / 3;
	ts_turnstile_resize(local, 0); /* the fleet's from here on (share 0) */
	char *prefix = strndup(f->ledger_key, strlen(f->ledger_key) - strlen("ledger"));
	pthread_mutex_lock(&f->mu);
	for (int i = 0; prefix && i < 3 && f->local_ceiling == 0; i++)
		look(f, prefix); /* the first share, when the ledger has room */
	pthread_mutex_unlock(&f->mu);
	free(prefix);
	if ((err = pthread_create(&f->thread, NULL, fleet_thread, f))) {
		ts_lib_etcd_lease_revoke(f->etcd, f->lease_id);
		fleet_free(f);
		errno = err;
		return NULL;
	}
	return f;
}

TS_API int ts_fleet_resize(ts_fleet *f, int64_t ceiling)
{
	if (!f || ceiling < 0)
		return EINVAL;
	pthread_mutex_lock(&f->mu);
	int err = EAGAIN;
	for (int tries = 0; tries < 20 && err == EAGAIN; tries++) {
		struct etcd_kv *kvs;
		size_t n;
		int64_t rev;
		struct ledger l = { 0 };
		if ((err = ts_lib_etcd_range_prefix(f->etcd, f->ledger_key, &kvs, &n, &rev)))
			break;
		for (size_t i = 0; !err && i < n; i++)
			if (!strcmp(kvs[i].key, f->ledger_key))
				err = ledger_parse(&l, &kvs[i]);
		ts_lib_etcd_kvs_free(kvs, n);
		if (!err && !l.doc)
			err = ENOENT;
		if (!err) {
			json_object *cmps = json_object_new_array(), *ops = json_object_new_array();
			bool won;
			json_object_object_add(l.doc, "ceiling", json_object_new_int64(ceiling));
			ts_lib_etcd_cmp(cmps, f->ledger_key, "MOD", l.rev);
			ts_lib_etcd_op_put(ops, f->ledger_key,
					   json_object_to_json_string_ext(l.doc,
									  JSON_C_TO_STRING_PLAIN),
					   0);
			err = ts_lib_etcd_txn(f->etcd, cmps, ops, NULL, &won);
			if (!err && !won)
				err = EAGAIN; /* a member moved its share meanwhile */
		}
		ledger_free(&l);
	}
	pthread_cond_signal(&f->cv); /* look again now */
	pthread_mutex_unlock(&f->mu);
	return err;
}

uint64_t ts_lib_fleet_requests(const ts_fleet *f)
{
	ts_fleet *m = (ts_fleet *)f; /* for its lock */
	pthread_mutex_lock(&m->mu);
	uint64_t n = ts_lib_etcd_requests(m->etcd);
	pthread_mutex_unlock(&m->mu);
	return n;
}

TS_API int ts_fleet_share(const ts_fleet *f, int64_t *share, int64_t *members)
{
	if (!f)
		return EINVAL;
	ts_fleet *m = (ts_fleet *)f; /* for its lock */
	pthread_mutex_lock(&m->mu);
	if (share)
		*share = m->local_ceiling;
	if (members)
		*members = m->members;
	pthread_mutex_unlock(&m->mu);
	return 0;
}

TS_API void ts_fleet_leave(ts_fleet *f)
{
	if (!f)
		return;
	pthread_mutex_lock(&f->mu);
	f->stop = true;
	pthread_cond_signal(&f->cv);
	pthread_mutex_unlock(&f->mu);
	pthread_join(f->thread, NULL);
	/* Nobody new; the share handed back as the holders return, for at
	 * most the lease (a longer hold is the documented assumption). */
	set_local(f, 0);
	int64_t end = now_ns() + f->lease_ns;
	char *prefix = strndup(f->ledger_key, strlen(f->ledger_key) - strlen("ledger"));
	for (;;) {
		int64_t held = held_now(f);
		bool done = held <= 0 || now_ns() >= end;
		struct view v;
		bool wrote;
		renew(f);
		if (prefix && !read_view(f, &v, prefix)) {
			if (done || held < f->share)
				ledger_write(f, &v.ledger, f->name, done ? -1 : held, &wrote);
			view_free(&v);
		}
		if (done)
			break;
		struct timespec ts = { 0, 20000000 };
		nanosleep(&ts, NULL);
	}
	free(prefix);
	ts_lib_etcd_lease_revoke(f->etcd, f->lease_id); /* deletes our member key */
	fleet_free(f);
}
