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
 *      it).  No etcd call runs past fresh_until (the client's deadline),
 *      and freshness is checked after every call and before every raise
 *      of the local ceiling, so a member fails closed at its deadline.
 *      reclaim() drops the shares of members whose member key is gone, in
 *      a CAS that also compares each such key absent, on a copy of the
 *      ledger (a lost reclaim leaves the view as read, and the look ends:
 *      nothing is written from a view with a reclaim in it); a member that
 *      rejoins puts its key back first, so its share is either still its
 *      own or already gone, never both.
 * A write whose outcome is unknown (a timeout: etcd may still apply it,
 * its compare checked then) is safe when it grows or reclaims (the ledger
 * then gives us more than we admit); a shrink's is not, so until the
 * ledger's revision moves past the one it compared, the local ceiling is
 * kept at the smaller share (pending_rev).
 * The assumption (documented): no pass is held longer than half the lease,
 * as a member cut off at its deadline keeps what it holds until returned,
 * and its share may be reclaimed from half a lease later.
 *
 * SHARES FOLLOW DEMAND.  Every member computes the same targets from the
 * same ledger and member keys (fleet_targets()): band by band, best band
 * first, the callers waiting there and the held passes of members whose
 * worst queued band it is (a member that queues nobody: its held passes
 * after every band), split in proportion within a band when room runs
 * out; then what is left evenly, so an idle member keeps room for a
 * burst.  A member moves
 * only its own share: down when another member's target is above its
 * share (somebody needs room), up while the ledger has room.  One look
 * per tick (FLEET_TICK_NS while shares move, FLEET_IDLE_TICK_NS at rest,
 * FLEET_SHRINK_TICK_NS while a shrink waits for its holders to return;
 * at once when callers queue that the member key does not tell yet, and
 * on news from the watch, another member's key or the ledger changed,
 * FLEET_NEWS_GAP_NS after the last look ended at the earliest), one etcd
 * range read and, when our demand changed, one write.  The watch (etcd.h,
 * one streamed request on a thread of its own) only says when to look,
 * never what is true: a look reads everything it decides on, so a watch
 * that is down, stalled or late leaves the ticks, and the invariant rests
 * on the ledger's CAS alone.  A change that cannot move a share waits
 * up to FLEET_STALE_NS (it only freshens what ts_fleet_members shows): a
 * member that saw nobody else
 * at its last look, and either holds the whole ceiling (whatever its
 * queue does) or whose demand stays on the same side of its share and
 * whose queue stays empty or not.  A lone member under load so costs what
 * one at rest does (each write is a raft round with fsyncs on every etcd
 * node); a member that joins meanwhile is seen at the next look, which
 * then puts the demand of the moment.
 *
 * FAIL CLOSED.  No renewal for half the lease (etcd gone, a partition, a
 * SIGSTOPped, frozen or suspended process; the clock is CLOCK_BOOTTIME):
 * local grants nothing from the deadline on, whichever thread asks first
 * after a pause (guard()), and the local ceiling goes to 0 at the
 * deadline, or at the first thing the fleet thread does when it wakes
 * after it.  Also at once when the lease is
 * found gone, our key missing, or the ledger missing or unreadable.  A lost
 * lease or key: the member rejoins (a new lease, its key back) and keeps
 * whatever share the ledger still gives it.
 *
 * Model: tests/model/fleet.pml (members that grow, shrink, die and lose
 * their lease; a ledger with CAS). */
#include <turnstile/fleet.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <turnstile/shared.h>

#include "boottime.h"
#include "etcd.h"
#include "fleet_targets.h"
#include "probe.h"

/* A look every tick while shares move, every idle tick at rest: at rest a
 * member costs one range read per idle tick and a renewal per third of
 * the lease (about 5.5 requests/s with the default lease). */
#define FLEET_TICK_NS ((int64_t)100000000)
#define FLEET_IDLE_TICK_NS ((int64_t)250000000)
#define FLEET_SHRINK_TICK_NS ((int64_t)25000000)
/* Between looks, callers newly queued are noticed this often (a local
 * read, no etcd call): a member at rest tells its new demand at once. */
#define FLEET_DEMAND_POLL_NS ((int64_t)25000000)
/* News from the watch, or callers newly queued, start a look at once, but
 * no sooner than this after the last one ended: under load, when every
 * member's demand moves, a member still waits this long between looks (a
 * range read each), and lets go of its lock. */
#define FLEET_NEWS_GAP_NS ((int64_t)50000000)
/* A demand change that cannot move a share is put at most this often. */
#define FLEET_STALE_NS ((int64_t)1000000000)
#define FLEET_MAX_BANDS 16
#define FLEET_MAX_NAME 200
/* Held and queued counts read from etcd are clamped to this: sums of a
 * few thousand members' stay far inside int64_t. */
#define FLEET_COUNT_MAX ((int64_t)1 << 40)

struct ts_fleet {
	ts_turnstile *local;
	struct etcd *etcd;
	char *ledger_key, *member_key, *members_prefix, *prefix, *name;
	int64_t lease_ns, lease_id, ceiling_max;
	pthread_t thread;
	/* the watch of the prefix, on its own thread: it sets news and
	 * signals cv, without the lock (a look holds it for etcd calls) */
	struct etcd_watch *watch;
	_Atomic bool news;
	pthread_mutex_t mu; /* everything below, and the etcd client */
	pthread_cond_t cv;
	bool stop, kick, rejoin;
	int64_t look_ended; /* CLOCK_MONOTONIC, the last look's */
	int64_t share;         /* ours in the ledger, as last read or written */
	int64_t ceiling;       /* the ledger's, as last read */
	int64_t local_ceiling; /* what local's ceiling is now */
	int64_t fresh_until;   /* admit only before this (rule 3; CLOCK_BOOTTIME) */
	int64_t next_renewal;
	int64_t pending_rev, pending_share; /* a shrink of unknown outcome */
	char *published;       /* our member key's value, as last put */
	bool told_queue;       /* ...and it told callers queued */
	bool told_over;        /* ...and a demand above our share then */
	int64_t published_at;  /* ...at this time (boottime_ns) */
	/* what ts_fleet_share tells, without the lock a look holds */
	_Atomic int64_t told_share, told_members;
	_Atomic uint64_t closings; /* rule 3 failed us closed (tests count them) */
	const ts_turnstile *_Atomic demand; /* ts_fleet_demand_from (NULL: local) */
	/* what ts_fleet_members tells: the last look's view of the members,
	 * swapped in whole under seen_mu, which no etcd call is made under */
	pthread_mutex_t seen_mu;
	struct seen *seen;
	size_t nseen;
};

struct seen {
	char *name;
	int64_t share, held;
	int *bands;
	int64_t *waiting;
	int nbands;
};

static void seen_free(struct seen *s, size_t n)
{
	for (size_t i = 0; s && i < n; i++) {
		free(s[i].name);
		free(s[i].bands);
		free(s[i].waiting);
	}
	free(s);
}

/* The only writer of local's ceiling (rule 2's local half).  Recorded only
 * when the turnstile took it, so a failed resize is tried again. */
static void set_local(ts_fleet *f, int64_t ceiling)
{
	if (ceiling == f->local_ceiling || ts_turnstile_resize(f->local, ceiling))
		return;
	f->local_ceiling = ceiling;
	atomic_store_explicit(&f->told_share, ceiling, memory_order_relaxed);
}

/* Rule 3 at the moment of admission: local grants nothing at or after
 * fresh_until, whichever of our threads runs first after a pause (the
 * turnstile reads the clock under its lock; fastpath.h).  Moved at every
 * renewal, which also serves callers that queued on a stale share. */
static void guard(ts_fleet *f)
{
	ts_private_turnstile_guard(f->local, f->fresh_until);
}

static int64_t held_now(ts_fleet *f)
{
	int64_t avail;
	ts_turnstile_snapshot(f->local, &avail, NULL);
	return f->local_ceiling - avail;
}

static bool fresh(const ts_fleet *f)
{
	return boottime_ns() < f->fresh_until;
}

/* Rule 3's clock, checked after every etcd call and before every raise of
 * the local ceiling: not fresh, fail closed now.  While fresh, no call may
 * run past the deadline (the client's); once closed, calls get their
 * whole timeout (renewing is all that matters then). */
static bool still_fresh(ts_fleet *f)
{
	if (fresh(f)) {
		ts_lib_etcd_set_deadline(f->etcd, f->fresh_until);
		return true;
	}
	ts_lib_etcd_set_deadline(f->etcd, 0);
	if (f->local_ceiling) {
		TS_PROBE2(fleet__closed, f, f->local_ceiling);
		atomic_fetch_add_explicit(&f->closings, 1, memory_order_relaxed);
	}
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

static bool int_in(json_object *o, int64_t lo, int64_t hi, int64_t *v)
{
	if (!json_object_is_type(o, json_type_int))
		return false;
	*v = json_object_get_int64(o);
	return *v >= lo && *v <= hi;
}

/* A ledger is trusted only whole: a ceiling and every share integers in
 * range, or EPROTO (and the member fails closed). */
static int ledger_parse(struct ledger *l, const struct etcd_kv *kv)
{
	json_object *c;
	int64_t v;
	if (l->doc)
		return EPROTO; /* the key twice in one answer */
	l->doc = json_tokener_parse(kv->value);
	if (!l->doc || !json_object_is_type(l->doc, json_type_object) ||
	    !json_object_object_get_ex(l->doc, "ceiling", &c) ||
	    !int_in(c, 0, TS_CONCURRENCY_MAX, &l->ceiling) ||
	    !json_object_object_get_ex(l->doc, "shares", &l->shares) ||
	    !json_object_is_type(l->shares, json_type_object)) {
		ledger_free(l);
		return EPROTO;
	}
	json_object_object_foreach(l->shares, name, share)
	{
		(void)name;
		if (!int_in(share, 0, TS_CONCURRENCY_MAX, &v)) {
			ledger_free(l);
			return EPROTO;
		}
	}
	l->rev = kv->mod_rev;
	return 0;
}

static int64_t ledger_share(const struct ledger *l, const char *name)
{
	json_object *s;
	return json_object_object_get_ex(l->shares, name, &s) ? json_object_get_int64(s) : 0;
}

/* Each share is at most 2^60 (ledger_parse): a sum of a few thousand
 * cannot overflow. */
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
 * 0) if it is still at l->rev.  *@won: whether it was.  Writes a copy:
 * the view stays as read. */
static int ledger_write(ts_fleet *f, const struct ledger *l, const char *name, int64_t share,
			bool *won)
{
	json_object *doc = NULL, *shares;
	*won = false;
	if (json_object_deep_copy(l->doc, &doc, NULL) || !doc ||
	    !json_object_object_get_ex(doc, "shares", &shares)) {
		json_object_put(doc);
		return ENOMEM;
	}
	if (share < 0)
		json_object_object_del(shares, name);
	else
		json_object_object_add(shares, name, json_object_new_int64(share));
	json_object *cmps = json_object_new_array(), *ops = json_object_new_array();
	ts_lib_etcd_cmp(cmps, f->ledger_key, "MOD", l->rev);
	ts_lib_etcd_op_put(ops, f->ledger_key,
			   json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN), 0);
	json_object_put(doc);
	int err = ts_lib_etcd_txn(f->etcd, cmps, ops, NULL, won);
	if (!err && *won)
		f->pending_rev = 0; /* the ledger moved past any pending shrink's rev */
	return err;
}

/* --- one look: read, reclaim, move our share ------------------------------ */

struct view {
	struct ledger ledger;
	struct etcd_kv *kvs;
	size_t n;
	struct fleet_member *m; /* live members, in key order */
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

static int64_t count_of(json_object *o)
{
	int64_t v = json_object_is_type(o, json_type_int) ? json_object_get_int64(o) : 0;
	return v < 0 ? 0 : v > FLEET_COUNT_MAX ? FLEET_COUNT_MAX : v;
}

/* A member key's demand; what we cannot read counts as no demand, and
 * counts are clamped (FLEET_COUNT_MAX). */
static void parse_demand(struct fleet_member *m, const char *value)
{
	json_object *doc = json_tokener_parse(value), *held, *bands;
	if (!doc)
		return;
	if (json_object_object_get_ex(doc, "held", &held))
		m->held = count_of(held);
	if (json_object_object_get_ex(doc, "bands", &bands) &&
	    json_object_is_type(bands, json_type_array)) {
		size_t n = json_object_array_length(bands);
		if (n > FLEET_MAX_BANDS)
			n = FLEET_MAX_BANDS;
		m->bands = calloc(n ? n : 1, sizeof(*m->bands));
		for (size_t i = 0; m->bands && i < n; i++) {
			json_object *pair = json_object_array_get_idx(bands, i), *band;
			if (!json_object_is_type(pair, json_type_array) ||
			    json_object_array_length(pair) != 2 ||
			    !json_object_is_type(band = json_object_array_get_idx(pair, 0),
						 json_type_int))
				continue;
			int64_t b = json_object_get_int64(band);
			m->bands[m->nbands].band = b < INT32_MIN ? INT32_MIN : b > INT32_MAX ? INT32_MAX : (int)b;
			m->bands[m->nbands++].waiting = count_of(json_object_array_get_idx(pair, 1));
		}
	}
	json_object_put(doc);
}

/* Everything under the prefix: the ledger (ENOENT: none; EPROTO: not one
 * we trust) and the live members.  A member name is what follows
 * members/, without '/' (a deeper key is nobody). */
static int read_view(ts_fleet *f, struct view *v)
{
	memset(v, 0, sizeof(*v));
	int err = ts_lib_etcd_range_prefix(f->etcd, f->prefix, &v->kvs, &v->n);
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
		} else if (!strncmp(kv->key, f->members_prefix, plen) && kv->key[plen] &&
			   !strchr(kv->key + plen, '/')) {
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

static char *joined(const char *a, const char *b, const char *c)
{
	size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
	char *s = malloc(n);
	if (s)
		snprintf(s, n, "%s%s%s", a, b, c);
	return s;
}

/* Rule 3: drop the shares of members whose key is gone, each compared
 * absent in the same CAS, on a copy.  Returns how many it found dead (the
 * caller's look ends there, whatever the outcome: its view is stale). */
static int reclaim(ts_fleet *f, const struct view *v)
{
	json_object *doc = NULL, *shares, *cmps, *ops;
	int dead = 0;
	json_object_object_foreach(v->ledger.shares, name, share)
	{
		(void)share;
		dead += !is_member(v, name);
	}
	if (!dead || json_object_deep_copy(v->ledger.doc, &doc, NULL) || !doc ||
	    !json_object_object_get_ex(doc, "shares", &shares)) {
		json_object_put(doc);
		return dead;
	}
	cmps = json_object_new_array();
	ops = json_object_new_array();
	ts_lib_etcd_cmp(cmps, f->ledger_key, "MOD", v->ledger.rev);
	json_object_object_foreach(v->ledger.shares, gone, s)
	{
		(void)s;
		char *key = is_member(v, gone) ? NULL : joined(f->members_prefix, gone, "");
		if (key) {
			ts_lib_etcd_cmp(cmps, key, "VERSION", 0);
			json_object_object_del(shares, gone);
			free(key);
		}
	}
	ts_lib_etcd_op_put(ops, f->ledger_key,
			   json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN), 0);
	json_object_put(doc);
	bool won;
	if (!ts_lib_etcd_txn(f->etcd, cmps, ops, NULL, &won) && won)
		f->pending_rev = 0;
	return dead;
}

/* Rule 2, shrinking: local first, then the ledger, never below held.  An
 * outcome we cannot know keeps local at the smaller share until the
 * ledger moves past the revision it compared. */
static int shrink(ts_fleet *f, const struct view *v, int64_t target, bool *wrote)
{
	set_local(f, target);
	int64_t held = held_now(f), share = held > target ? held : target;
	*wrote = false;
	if (share >= f->share)
		return 0;
	int err = ledger_write(f, &v->ledger, f->name, share, wrote);
	if (!err && *wrote) {
		TS_PROBE3(fleet__share, f, f->share, share);
		f->share = share;
	} else if (err) {
		f->pending_rev = v->ledger.rev;
		f->pending_share = share;
	}
	return err;
}

/* Rule 1 and rule 2, growing: the ledger first (within its room), then
 * local, only while fresh. */
static int grow(ts_fleet *f, const struct view *v, int64_t target, bool *wrote)
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

/* Held on @t (the demand's turnstile, not the local one): its ceiling
 * less its free count, two reads apart, so clamped at 0. */
static int64_t held_on(const ts_turnstile *t)
{
	int64_t avail;
	ts_turnstile_snapshot(t, &avail, NULL);
	int64_t held = ts_turnstile_ceiling(t) - avail;
	return held > 0 ? held : 0;
}

/* The last look saw us alone with the whole ceiling: no change of our
 * demand can move a share (nobody to give room to or take it from), and
 * a member that joins is seen at the next look. */
static bool alone_with_all(const ts_fleet *f)
{
	return atomic_load_explicit(&f->told_members, memory_order_relaxed) == 1 &&
	       f->share >= f->ceiling;
}

/* Whether a put of our demand may wait (SHARES FOLLOW DEMAND): the last
 * look saw us alone, and either we hold the whole ceiling or neither our
 * queue's emptiness nor the side of our share our demand is on changed
 * since the last put. */
static bool put_may_wait(const ts_fleet *f, bool queue, bool over)
{
	bool alone = atomic_load_explicit(&f->told_members, memory_order_relaxed) == 1;
	return f->published && boottime_ns() - f->published_at < FLEET_STALE_NS &&
	       (alone_with_all(f) || (alone && queue == f->told_queue && over == f->told_over));
}

/* Callers queued, per band in ascending order, at most FLEET_MAX_BANDS
 * bands (the worst beyond go unreported), and passes held. */
struct demand {
	int bands[FLEET_MAX_BANDS];
	int64_t waiting[FLEET_MAX_BANDS];
	int nbands;
	int64_t held;
};

/* Adds @n callers queued in @band to @d, keeping its bands ascending;
 * returns how many callers it dropped: @n, or those of the worst band
 * pushed out, when @d is full. */
static int64_t demand_add(struct demand *d, int band, int64_t n)
{
	int i = 0;
	while (i < d->nbands && d->bands[i] < band)
		i++;
	if (i < d->nbands && d->bands[i] == band) {
		d->waiting[i] += n;
		return 0;
	}
	if (i == FLEET_MAX_BANDS)
		return n;
	int64_t dropped = d->nbands == FLEET_MAX_BANDS ? d->waiting[FLEET_MAX_BANDS - 1] : 0;
	int keep = d->nbands < FLEET_MAX_BANDS ? d->nbands : FLEET_MAX_BANDS - 1;
	memmove(d->bands + i + 1, d->bands + i, (size_t)(keep - i) * sizeof(*d->bands));
	memmove(d->waiting + i + 1, d->waiting + i, (size_t)(keep - i) * sizeof(*d->waiting));
	d->bands[i] = band;
	d->waiting[i] = n;
	d->nbands = keep + 1;
	return dropped;
}

/* Adds @t's queue to @d; returns how many callers @d tells more. */
static int64_t demand_add_queue(struct demand *d, const ts_turnstile *t)
{
	int bands[FLEET_MAX_BANDS];
	int64_t waiting[FLEET_MAX_BANDS], told = 0;
	int nb = ts_turnstile_waiting_by_band(t, bands, waiting, FLEET_MAX_BANDS);
	if (nb > FLEET_MAX_BANDS)
		nb = FLEET_MAX_BANDS; /* the worst bands beyond go unreported */
	for (int i = 0; i < nb; i++) /* nb < 0, ENOMEM: no queue told this time */
		told += waiting[i] - demand_add(d, bands[i], waiting[i]);
	return told;
}

/* Our demand now: the local turnstile's, or that of the one
 * ts_fleet_demand_from named.  With the latter, a caller queued on the
 * local turnstile holds a pass of it while it waits (a proxy's transaction
 * waiting for a server connection): it is counted waiting in its band,
 * not held.  Held passes count in a member's worst queued band, or below
 * every band when it queues nobody (fleet_targets.c), so were it counted
 * held, a member whose every transaction waits for a connection would
 * tell no queue, get a target of 0 while anyone else queues, and its
 * transactions would wait for as long as the others' load lasts.  The
 * reads are instants apart, so a caller in motion may be miscounted once:
 * demand only steers the shares, and the invariant rests on rules 1-3. */
static void demand_now(ts_fleet *f, struct demand *d)
{
	const ts_turnstile *from = atomic_load_explicit(&f->demand, memory_order_acquire);
	d->nbands = 0;
	demand_add_queue(d, from ? from : f->local);
	if (!from) {
		int64_t held = held_now(f);
		d->held = held > 0 ? held : 0;
		return;
	}
	/* callers the report has no band for stay held: the worst band told */
	int64_t held = held_on(from);
	held -= demand_add_queue(d, f->local);
	d->held = held > 0 ? held : 0;
}

/* Our member key: our demand now, put when it changed (under our lease)
 * and may move a share, or has waited long enough; *@changed says whether
 * it was put. */
static int publish(ts_fleet *f, bool *changed)
{
	struct demand d;
	demand_now(f, &d);
	json_object *doc = json_object_new_object(), *arr = json_object_new_array();
	int64_t demand = d.held;
	json_object_object_add(doc, "held", json_object_new_int64(d.held));
	for (int i = 0; i < d.nbands; i++) {
		demand += d.waiting[i];
		json_object *pair = json_object_new_array();
		json_object_array_add(pair, json_object_new_int64(d.bands[i]));
		json_object_array_add(pair, json_object_new_int64(d.waiting[i]));
		json_object_array_add(arr, pair);
	}
	json_object_object_add(doc, "bands", arr);
	const char *value = json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN);
	int err = 0;
	bool over = demand > f->share;
	*changed = (!f->published || strcmp(f->published, value)) && !put_may_wait(f, d.nbands > 0, over);
	if (*changed) {
		char *copy = strdup(value);
		err = copy ? ts_lib_etcd_put(f->etcd, f->member_key, value, f->lease_id) : ENOMEM;
		if (!err) {
			free(f->published);
			f->published = copy;
			f->told_queue = d.nbands > 0;
			f->told_over = over;
			f->published_at = boottime_ns();
		} else {
			free(copy);
		}
	}
	json_object_put(doc);
	return err;
}

/* Our member key, created under lease @lease; EADDRINUSE when a live
 * member (another lease) has it. */
static int join_member_key(ts_fleet *f, int64_t lease)
{
	json_object *cmps = json_object_new_array(), *ops = json_object_new_array();
	bool won;
	ts_lib_etcd_cmp(cmps, f->member_key, "VERSION", 0);
	ts_lib_etcd_op_put(ops, f->member_key, "{\"held\":0,\"bands\":[]}", lease);
	int err = ts_lib_etcd_txn(f->etcd, cmps, ops, NULL, &won);
	return err ? err : won ? 0 : EADDRINUSE;
}

static int64_t lease_seconds(const ts_fleet *f)
{
	return (f->lease_ns + 999999999) / 1000000000;
}

/* Renew the lease when due (rule 3's clock), or at once when our key
 * went missing (f->rejoin; the look that saw it failed closed).  A live
 * lease gets our key back under it; a lease gone means fail closed and
 * rejoin under a new lease, which becomes ours only once our key is back
 * under it.  Either way the next look reads what the ledger still gives
 * us. */
static int renew(ts_fleet *f)
{
	int64_t sent = boottime_ns(), ttl = 0, lease;
	if (sent < f->next_renewal && !f->rejoin)
		return 0;
	int err = ts_lib_etcd_lease_keepalive(f->etcd, f->lease_id, &ttl);
	if (err)
		goto retry;
	if (ttl > 0 && f->rejoin) {
		if ((err = join_member_key(f, f->lease_id)) && err != EADDRINUSE)
			goto retry;
	} else if (ttl <= 0) {
		f->rejoin = true;
		set_local(f, 0);
		ts_lib_etcd_set_deadline(f->etcd, 0);
		if ((err = ts_lib_etcd_lease_grant(f->etcd, lease_seconds(f), &lease)))
			goto retry;
		if ((err = join_member_key(f, lease))) {
			ts_lib_etcd_lease_revoke(f->etcd, lease);
			goto retry;
		}
		f->lease_id = lease;
	}
	if (f->rejoin) {
		f->rejoin = false;
		free(f->published);
		f->published = NULL;
		f->told_queue = false;
		TS_PROBE2(fleet__rejoin, f, f->lease_id);
	}
	f->fresh_until = sent + f->lease_ns / 2;
	f->next_renewal = sent + f->lease_ns / 3;
	guard(f);
	return 0;
retry:
	f->next_renewal = sent + FLEET_TICK_NS;
	return err;
}

/* The view's members, copied for ts_fleet_members (on no memory, the
 * previous copy stays). */
static void remember(ts_fleet *f, const struct view *v)
{
	struct seen *s = calloc(v->nm ? v->nm : 1, sizeof(*s));
	bool whole = s != NULL;
	for (size_t i = 0; whole && i < v->nm; i++) {
		const struct fleet_member *m = &v->m[i];
		size_t nb = m->bands ? m->nbands : 0;
		s[i].name = strdup(m->name);
		s[i].share = ledger_share(&v->ledger, m->name);
		s[i].held = m->held;
		s[i].nbands = (int)nb;
		s[i].bands = calloc(nb ? nb : 1, sizeof(int));
		s[i].waiting = calloc(nb ? nb : 1, sizeof(int64_t));
		whole = s[i].name && s[i].bands && s[i].waiting;
		for (size_t b = 0; whole && b < nb; b++) {
			s[i].bands[b] = m->bands[b].band;
			s[i].waiting[b] = m->bands[b].waiting;
		}
	}
	if (!whole) {
		seen_free(s, v->nm);
		return;
	}
	pthread_mutex_lock(&f->seen_mu);
	struct seen *old = f->seen;
	size_t nold = f->nseen;
	f->seen = s;
	f->nseen = v->nm;
	pthread_mutex_unlock(&f->seen_mu);
	seen_free(old, nold);
}

/* One look.  Fails closed first, before any network call, and after every
 * one.  Returns whether anything moves (our demand, a write, a member
 * short of room, an error): then the next look comes sooner. */
static bool look(ts_fleet *f)
{
	bool changed = true, wrote = false;
	struct view v;
	still_fresh(f);
	int err = renew(f);
	if (!still_fresh(f) || err)
		return true;
	err = publish(f, &changed);
	if (err == EPROTO) { /* etcd refused our lease: it is gone, and our key
			       * with it, so our share may be reclaimed now */
		set_local(f, 0);
		f->rejoin = true;
	}
	if (!still_fresh(f) || err)
		return true;
	err = read_view(f, &v);
	if (err == ENOENT || err == EPROTO)
		set_local(f, 0); /* no ledger we can trust: nobody new */
	if (!still_fresh(f) || err) {
		if (!err)
			view_free(&v);
		return true;
	}
	atomic_store_explicit(&f->told_members, (int64_t)v.nm, memory_order_relaxed);
	if (!is_member(&v, f->name)) { /* our key is gone: so may be our share */
		set_local(f, 0);
		f->rejoin = true;
		view_free(&v);
		return true;
	}
	if (reclaim(f, &v)) {
		still_fresh(f);
		view_free(&v);
		return true; /* the ledger moved, or may have: start from it */
	}
	f->share = ledger_share(&v.ledger, f->name);
	f->ceiling = v.ledger.ceiling;
	remember(f, &v);
	if (f->pending_rev && v.ledger.rev != f->pending_rev)
		f->pending_rev = 0; /* that shrink can no longer land */
	int64_t cap = f->pending_rev && f->pending_share < f->share ? f->pending_share : f->share;
	if (f->local_ceiling > cap)
		set_local(f, cap); /* rule 2, whatever lowered the ledger */
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
	bool moving = changed || needed || over || f->pending_rev;
	if (target < f->share && (needed || over)) {
		moving |= shrink(f, &v, target, &wrote) != 0;
	} else {
		if (target > f->share)
			moving |= grow(f, &v, target, &wrote) != 0;
		/* back from failing closed, or a grow with no room: what the
		 * ledger gives us is ours to admit */
		if (!wrote && f->local_ceiling < cap && still_fresh(f))
			set_local(f, cap);
	}
	view_free(&v);
	still_fresh(f);
	return moving || wrote;
}

/* Callers queued on the demand's turnstile that our member key does not
 * tell yet, and that could move a share (two loads: no lock, no etcd). */
static bool untold_demand(const ts_fleet *f)
{
	const ts_turnstile *from = atomic_load_explicit(&f->demand, memory_order_acquire);
	int64_t waiting, on_local = 0;
	ts_turnstile_snapshot(from ? from : f->local, NULL, &waiting);
	if (from) /* callers waiting for a local pass are queued too (demand_now) */
		ts_turnstile_snapshot(f->local, NULL, &on_local);
	return waiting + on_local > 0 && !f->told_queue && !alone_with_all(f);
}

/* The watch's thread: another member's key or the ledger changed (our
 * own ledger writes too: one more look after each), or the watch was set
 * up again.  Signalled once per news (not per message); without the lock,
 * so a fleet thread between its look at news and its wait misses it: its
 * wait is at most FLEET_DEMAND_POLL_NS, and it sees news then. */
static void on_news(void *arg)
{
	ts_fleet *f = arg;
	if (!atomic_exchange_explicit(&f->news, true, memory_order_acq_rel))
		pthread_cond_signal(&f->cv);
}

/* Until @at (CLOCK_MONOTONIC, the condition variable's clock), a kick or
 * the stop; or, once FLEET_NEWS_GAP_NS has passed since the last look
 * ended, callers queued that the last publish did not tell, or news from
 * the watch.  Counted from the look's end, so the lock is let go between
 * looks however long they take (a slow etcd; ts_fleet_resize and
 * ts_fleet_leave wait for the lock). */
static void pause_until(ts_fleet *f, int64_t at)
{
	while (!f->stop && !f->kick) {
		int64_t now = ts_now_ns(), until = at - now > FLEET_DEMAND_POLL_NS ? now + FLEET_DEMAND_POLL_NS : at;
		if (now >= at)
			return;
		if ((fresh(f) && untold_demand(f)) || /* etcd cut off: no haste */
		    atomic_load_explicit(&f->news, memory_order_acquire)) {
			int64_t ready = f->look_ended + FLEET_NEWS_GAP_NS;
			if (now >= ready)
				return;
			if (ready < until)
				until = ready;
		}
		struct timespec ts = { (time_t)(until / 1000000000), (long)(until % 1000000000) };
		pthread_cond_timedwait(&f->cv, &f->mu, &ts);
	}
}

static void *fleet_thread(void *arg)
{
	ts_fleet *f = arg;
	pthread_mutex_lock(&f->mu);
	while (!f->stop) {
		/* news from here on is news to the next look */
		atomic_store_explicit(&f->news, false, memory_order_relaxed);
		bool moving = look(f);
		f->look_ended = ts_now_ns();
		/* a shrink waiting for its holders to fit: they are returning,
		 * and another member waits for the room */
		bool shrinking = fresh(f) && !f->pending_rev && f->local_ceiling < f->share;
		int64_t now = boottime_ns(),
			wake = now + (shrinking ? FLEET_SHRINK_TICK_NS
				      : moving ? FLEET_TICK_NS
					       : FLEET_IDLE_TICK_NS);
		if (f->fresh_until > now && f->fresh_until < wake)
			wake = f->fresh_until; /* fail closed on time */
		pause_until(f, ts_now_ns() + (wake - now));
		f->kick = false;
	}
	pthread_mutex_unlock(&f->mu);
	return NULL;
}

/* --- join, resize, share, leave ------------------------------------------- */

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
	struct view v;
	if ((err = read_view(f, &v)))
		return err == ENOENT ? EPROTO : err;
	err = v.ledger.ceiling != ceiling ? EEXIST : 0;
	view_free(&v);
	return err;
}

static bool valid_config(const ts_fleet_config *c)
{
	return c && c->endpoints && *c->endpoints && c->key && c->key[0] == '/' &&
	       strlen(c->key) < 256 && c->ceiling >= 0 && c->ceiling <= TS_CONCURRENCY_MAX &&
	       (c->lease_ns == 0 ||
		(c->lease_ns >= TS_FLEET_LEASE_MIN_NS && c->lease_ns <= TS_FLEET_LEASE_MAX_NS)) &&
	       (!c->member || (*c->member && strlen(c->member) <= FLEET_MAX_NAME &&
			       !strchr(c->member, '/') && !strchr(c->member, '"')));
}

static void fleet_free(ts_fleet *f)
{
	ts_lib_etcd_watch_stop(f->watch); /* no on_news after this */
	ts_lib_etcd_free(f->etcd);
	free(f->ledger_key);
	free(f->member_key);
	free(f->members_prefix);
	free(f->prefix);
	free(f->name);
	free(f->published);
	seen_free(f->seen, f->nseen);
	pthread_mutex_destroy(&f->seen_mu);
	pthread_mutex_destroy(&f->mu);
	pthread_cond_destroy(&f->cv);
	free(f);
}

TS_API ts_fleet *ts_fleet_join(ts_turnstile *local, const ts_fleet_config *cfg)
{
	if (!local || !valid_config(cfg)) {
		errno = EINVAL;
		return NULL;
	}
	/* A member is one process.  Others admitting through a process-shared
	 * local would go on admitting on its share after it died (its lease
	 * expires, the share is reclaimed) or while it is paused: rule 3 would
	 * not hold for them. */
	if (ts_shared_is(local)) {
		errno = ENOTSUP;
		return NULL;
	}
	ts_fleet *f = calloc(1, sizeof(*f));
	char name[FLEET_MAX_NAME + 1], host[128] = "localhost";
	if (!f) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&f->mu, NULL);
	pthread_mutex_init(&f->seen_mu, NULL);
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
	f->prefix = joined(cfg->key, sep, "");
	f->ledger_key = joined(cfg->key, sep, "ledger");
	f->members_prefix = joined(cfg->key, sep, "members/");
	f->member_key = f->members_prefix ? joined(f->members_prefix, name, "") : NULL;
	/* a call waits at most a sixth of the lease (and never past the
	 * member's deadline: still_fresh) */
	int64_t timeout = f->lease_ns / 6 < 1000000000 ? f->lease_ns / 6 : 1000000000;
	int err = 0;
	if (!f->name || !f->prefix || !f->ledger_key || !f->members_prefix || !f->member_key)
		err = ENOMEM;
	else if (!(f->etcd = ts_lib_etcd_new(cfg->endpoints, timeout)))
		err = errno;
	int64_t sent = boottime_ns();
	if (!err)
		err = ts_lib_etcd_lease_grant(f->etcd, lease_seconds(f), &f->lease_id);
	if (!err)
		err = join_ledger(f, cfg->ceiling);
	if (!err)
		err = join_member_key(f, f->lease_id);
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
	guard(f);
	pthread_mutex_lock(&f->mu);
	for (int i = 0; i < 3 && f->local_ceiling == 0; i++)
		look(f); /* the first share, when the ledger has room */
	pthread_mutex_unlock(&f->mu);
	/* news of other members and of the ledger, so shares move without
	 * waiting for a tick; our own key's changes are none.  Only a hint:
	 * without it (ENOMEM, no thread) the member goes on its ticks */
	f->watch = ts_lib_etcd_watch_start(cfg->endpoints, f->prefix, f->member_key, timeout,
					   on_news, f);
	if ((err = pthread_create(&f->thread, NULL, fleet_thread, f))) {
		set_local(f, 0);
		ts_private_turnstile_guard(local, 0);
		ts_lib_etcd_lease_revoke(f->etcd, f->lease_id);
		fleet_free(f);
		errno = err;
		return NULL;
	}
	return f;
}

/* Each call is bounded by the member's deadline while fresh (still_fresh
 * after each), so holding the lock here never keeps it from failing
 * closed on time. */
TS_API int ts_fleet_resize(ts_fleet *f, int64_t ceiling)
{
	if (!f || ceiling < 0 || ceiling > TS_CONCURRENCY_MAX)
		return EINVAL;
	pthread_mutex_lock(&f->mu);
	int err = EAGAIN;
	for (int tries = 0; tries < 20 && err == EAGAIN; tries++) {
		struct view v;
		still_fresh(f);
		err = read_view(f, &v);
		still_fresh(f);
		if (err)
			break;
		json_object *doc = NULL, *cmps, *ops;
		if (json_object_deep_copy(v.ledger.doc, &doc, NULL) || !doc) {
			json_object_put(doc);
			view_free(&v);
			err = ENOMEM;
			break;
		}
		bool won;
		json_object_object_add(doc, "ceiling", json_object_new_int64(ceiling));
		cmps = json_object_new_array();
		ops = json_object_new_array();
		ts_lib_etcd_cmp(cmps, f->ledger_key, "MOD", v.ledger.rev);
		ts_lib_etcd_op_put(ops, f->ledger_key,
				   json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN), 0);
		json_object_put(doc);
		view_free(&v);
		err = ts_lib_etcd_txn(f->etcd, cmps, ops, NULL, &won);
		still_fresh(f);
		if (!err && !won)
			err = EAGAIN; /* a member moved its share meanwhile */
		else if (!err)
			f->pending_rev = 0;
	}
	f->kick = true; /* the thread looks again now */
	pthread_cond_signal(&f->cv);
	pthread_mutex_unlock(&f->mu);
	return err;
}

/* No lock for these two either: a sampler is never held up by a look. */
uint64_t ts_lib_fleet_requests(const ts_fleet *f)
{
	return ts_lib_etcd_requests(f->etcd) + ts_lib_etcd_watch_requests(f->watch);
}

uint64_t ts_lib_fleet_closings(const ts_fleet *f)
{
	return atomic_load_explicit(&f->closings, memory_order_relaxed);
}

uint64_t ts_lib_fleet_watch_setups(const ts_fleet *f)
{
	return ts_lib_etcd_watch_setups(f->watch);
}

/* No lock: never behind a look's etcd calls. */
TS_API int ts_fleet_share(const ts_fleet *f, int64_t *share, int64_t *members)
{
	if (!f)
		return EINVAL;
	if (share)
		*share = atomic_load_explicit(&f->told_share, memory_order_relaxed);
	if (members)
		*members = atomic_load_explicit(&f->told_members, memory_order_relaxed);
	return 0;
}

TS_API int ts_fleet_demand_from(ts_fleet *f, const ts_turnstile *t)
{
	if (!f)
		return EINVAL;
	/* the local turnstile named is the local demand (NULL): its queue is
	 * not counted twice (demand_now) */
	atomic_store_explicit(&f->demand, t == f->local ? NULL : t, memory_order_release);
	return 0;
}

TS_API int ts_fleet_members(const ts_fleet *f,
			    void (*fn)(const ts_fleet_member_info *m, void *arg), void *arg)
{
	if (!f)
		return -EINVAL;
	ts_fleet *m = (ts_fleet *)f; /* for its lock */
	pthread_mutex_lock(&m->seen_mu);
	int n = (int)m->nseen;
	for (size_t i = 0; fn && i < m->nseen; i++) {
		const struct seen *s = &m->seen[i];
		ts_fleet_member_info info = { s->name,	  s->share, s->held, s->bands,
					      s->waiting, s->nbands, !strcmp(s->name, m->name) };
		fn(&info, arg);
	}
	pthread_mutex_unlock(&m->seen_mu);
	return n;
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
	 * most the lease (a longer hold is the documented assumption), then
	 * our entry deleted (a few tries: the revoke below frees it anyway,
	 * as a reclaim of others then finds our key gone). */
	set_local(f, 0);
	ts_lib_etcd_set_deadline(f->etcd, 0); /* closed: calls get their timeout */
	int64_t end = boottime_ns() + f->lease_ns;
	int deletes = 0;
	for (;;) {
		int64_t held = held_now(f);
		bool done = held <= 0 || boottime_ns() >= end;
		struct view v;
		bool wrote = false;
		renew(f);
		if (!read_view(f, &v)) {
			f->share = ledger_share(&v.ledger, f->name);
			if ((done || held < f->share) &&
			    !ledger_write(f, &v.ledger, f->name, done ? -1 : held, &wrote) && wrote)
				f->share = done ? 0 : held;
			view_free(&v);
		}
		if (done && (wrote || ++deletes >= 3))
			break;
		struct timespec ts = { 0, 20000000 };
		nanosleep(&ts, NULL);
	}
	ts_lib_etcd_lease_revoke(f->etcd, f->lease_id); /* deletes our member key */
	ts_private_turnstile_guard(f->local, 0); /* local is the caller's again (ceiling 0) */
	fleet_free(f);
}
