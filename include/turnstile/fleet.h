/* SPDX-License-Identifier: MIT */
/* libturnstile-fleet: one ceiling for many machines.
 *
 * A fleet ceiling divides one number of passes (a database's connection
 * limit) among the live members of a fleet by their demand, through etcd
 * (3.4, its JSON gateway).  Each member keeps admitting through its own
 * local turnstile: admission and return never touch the network.  The
 * fleet only moves the local turnstile's ceiling (ts_turnstile_resize, by
 * delta: passes held stay held).
 *
 * The invariant: the passes admitted by all members together never exceed
 * the ceiling.  Its one assumption: no pass is held longer than half the
 * lease (a member cut off from etcd stops admitting at half the lease
 * after its last renewal, and its share may go to others once the lease
 * has expired, half a lease later: a pass it still holds then counts
 * twice).  Fail closed: with etcd unreachable a member admits within its
 * share for half the lease, then nobody new until etcd answers again.  A
 * member's @local grants no pass past that deadline whichever thread asks
 * first (a process paused past it admits nobody on resume), so while it
 * belongs to a fleet its waits and returns take the turnstile's lock and
 * read the clock (tens of nanoseconds).
 *
 * Link with -lturnstile-fleet -lturnstile (pkg-config turnstile-fleet). */
#ifndef TURNSTILE_FLEET_H
#define TURNSTILE_FLEET_H

#include <stdbool.h>

#include <turnstile/turnstile.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_fleet ts_fleet;

typedef struct ts_fleet_config {
	const char *endpoints; /* etcd client URLs, comma-separated */
	const char *key;       /* the resource's key prefix, e.g. "/pgproxy/appdb" */
	const char *member;    /* unique member name (NULL: "<hostname>:<pid>") */
	int64_t ceiling;       /* passes all members together hold at most (the
				  first member sets it; a later join with another
				  value gets EEXIST) */
	int64_t lease_ns;      /* etcd lease TTL (0: 5 s) */
} ts_fleet_config;

/* Lease bounds: etcd grants no lease shorter than about 2 s. */
#define TS_FLEET_LEASE_MIN_NS ((int64_t)2000000000)
#define TS_FLEET_LEASE_MAX_NS ((int64_t)3600000000000)

/* ts_fleet_join - make @local a member of the fleet at @cfg->key.
 * From here on the fleet owns @local's ceiling (do not resize it
 * yourself): it is set to 0, then to the member's share as etcd grants it;
 * join returns once the first share is settled, so a lone member admits at
 * once (after at most three looks).  A background thread keeps the lease,
 * publishes the demand (passes held and callers queued per band) and
 * moves the share; a second one watches the fleet's keys in etcd (one
 * streamed request), so that another member's change is looked at at
 * once rather than at the next tick.  Passes already held on @local when it joins are in no
 * share: join before admitting.
 * Returns the member, or NULL with errno: EINVAL (NULL @local or @cfg, no
 * endpoints or key, a key not starting with '/' or of 256 bytes or more,
 * a ceiling < 0 or above TS_CONCURRENCY_MAX, a lease outside the
 * bounds above, a member name with '/' or '"' or longer than 200 bytes),
 * ENOTSUP (@local is process-shared: a member is one process, and the
 * others would go on admitting on its share after it died or while it is
 * paused; give each process a member of its own),
 * EEXIST (the fleet exists with another ceiling: a member restarted after
 * ts_fleet_resize must be given the ceiling as it is now), EADDRINUSE (a
 * live member has this name), ECONNREFUSED or ETIMEDOUT (no etcd endpoint
 * answered), EPROTO (an answer etcd would not send), ENOMEM, or the
 * error of pthread_create.  Thread-safe. */
TS_API ts_fleet *ts_fleet_join(ts_turnstile *local, const ts_fleet_config *cfg);

/* ts_fleet_resize - set the fleet's ceiling, for every member.  Growing
 * takes effect as members grow their shares; shrinking, as each member
 * sees it (this one at once, the others when their watch tells them, or at
 * their next look: within 100 ms while shares move, 250 ms at rest):
 * members shrink locally first, and
 * passes already held stay held, so until then the members may admit
 * above the new ceiling.  0, EINVAL (NULL @f, @ceiling < 0 or above
 * TS_CONCURRENCY_MAX), ENOENT (the ledger is gone), EAGAIN (it
 * kept changing over 20 tries), or an etcd error as for ts_fleet_join.
 * Blocks for its etcd calls (each at most a sixth of the lease).
 * Thread-safe. */
TS_API int ts_fleet_resize(ts_fleet *f, int64_t ceiling);

/* ts_fleet_share - this member's share now (the ceiling its local
 * turnstile admits up to; 0 while it fails closed) and the live members
 * it last saw (itself included).  Either out-pointer may be NULL.  0 or
 * EINVAL (NULL @f).  Never blocks.  Thread-safe. */
TS_API int ts_fleet_share(const ts_fleet *f, int64_t *share, int64_t *members);

/* ts_fleet_demand_from - publish @t's demand (passes held on it and
 * callers queued on it, per band) as this member's, instead of the local
 * turnstile's.  For a member whose callers queue on one turnstile while
 * the fleet bounds another: a proxy orders transactions on @t and bounds
 * server connections on the local turnstile, whose passes idle
 * connections hold too (they are no demand).  A caller queued on the
 * local turnstile counts as waiting in its band and is taken out of @t's
 * held passes (it holds one while it waits for a local pass: demand not
 * yet served).  The share still never falls below the passes held on the
 * local turnstile (rule 2 of the protocol).
 * @t must outlive the member or be replaced first; NULL: the local
 * turnstile again.  Takes effect at the next look.  0 or EINVAL (NULL
 * @f).  Never blocks.  Thread-safe. */
TS_API int ts_fleet_demand_from(ts_fleet *f, const ts_turnstile *t);

/* What ts_fleet_members tells of one member, as its last look read it. */
typedef struct ts_fleet_member_info {
	const char *name;
	int64_t share;          /* its share in the ledger */
	int64_t held;           /* passes held, as it published them */
	const int *bands;       /* callers queued: waiting[i] in bands[i], */
	const int64_t *waiting; /* ascending bands */
	int nbands;
	bool self;              /* this member */
} ts_fleet_member_info;

/* ts_fleet_members - call @fn for each live member, in name order, as this
 * member's last look at etcd saw them (at most 100 ms old while shares
 * move, 250 ms at rest; nothing before the first look).  @fn runs under a
 * lock of @f's view: it must not call ts_fleet_* on @f, and what it is
 * given lives only for the call.  @fn NULL: only the count.  Returns how
 * many members were told, or -EINVAL (NULL @f).  Never blocks on etcd.
 * Thread-safe. */
TS_API int ts_fleet_members(const ts_fleet *f,
			    void (*fn)(const ts_fleet_member_info *m, void *arg), void *arg);

/* ts_fleet_leave - leave the fleet: admit nobody new, wait (at most the
 * lease) for the passes held to return while handing the share back as
 * they do, then delete this member's keys and free @f.  The local
 * turnstile is left with ceiling 0 and is the caller's again.  NULL: a
 * no-op.  Not concurrently with another call on @f. */
TS_API void ts_fleet_leave(ts_fleet *f);

#ifdef __cplusplus
}
#endif

#endif
