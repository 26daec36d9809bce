/* SPDX-License-Identifier: MIT */
/* Private to libturnstile-fleet: what share each member should have, from
 * what every member published.  A pure function, so every member computes
 * the same targets from the same view, and tests check it without etcd. */
#ifndef TS_LIB_FLEET_TARGETS_H
#define TS_LIB_FLEET_TARGETS_H

#include <stddef.h>
#include <stdint.h>

struct fleet_band {
	int band;
	int64_t waiting;
};

struct fleet_member {
	const char *name;
	int64_t held, share;      /* passes held; share in the ledger */
	struct fleet_band *bands; /* callers queued per band, ascending */
	size_t nbands;
};

/* Demand: passes held plus callers queued. */
int64_t ts_lib_fleet_demand(const struct fleet_member *m);

/* targets[i] for members m[0..n): demand band by band, best band first
 * (in proportion within the band where room runs out, the remainder to
 * the largest fractions, ties by name), then the rest of @ceiling evenly
 * (the remainder by name), so idle members keep room for a burst.  A
 * member's held passes count in its worst queued band (below every band
 * when it queues nobody): they are not taken back (a member shrinks to
 * max(target, held)), but as they return, their room goes to better
 * bands elsewhere.  Sum of targets = ceiling (0 members: nothing). */
void ts_lib_fleet_targets(int64_t ceiling, const struct fleet_member *m, size_t n,
			  int64_t *targets);

/* Requests this member has sent to etcd (lib/fleet.c; the tests' traffic
 * figures), and how often its clock failed it closed with a share in hand
 * (rule 3: a renewal late, or a pause past half the lease).  Counters, so
 * a test that samples them misses no event however briefly it lasted. */
struct ts_fleet;
uint64_t ts_lib_fleet_requests(const struct ts_fleet *f);
uint64_t ts_lib_fleet_closings(const struct ts_fleet *f);
/* Times its watch of the fleet's keys was set up: 1 from the first, one
 * more each time it connected again (after its etcd node went away). */
uint64_t ts_lib_fleet_watch_setups(const struct ts_fleet *f);

#endif
