/* SPDX-License-Identifier: MIT */
/* ts_fleet_demand_from, as a proxy uses it: transactions hold passes of
 * the demand's turnstile T and wait on the member's local turnstile for a
 * connection.  A transaction queued on the local turnstile is published
 * as waiting in its band and taken out of T's held passes; published as
 * held, it ranked below every queued band and the member got no share
 * while another member queued (a proxy's transactions starved).
 *
 * Alone in its fleet (ceiling 2), with T's ceiling 3: three callers in
 * band 1 take a T pass and then wait on the local turnstile (two get a
 * pass, one queues), a fourth in band 2 queues on T.  The member must
 * publish held 2 and one caller queued in each of bands 1 and 2.
 * Usage: fleet_demand ENDPOINTS KEY (tests/fleet.sh runs it against its
 * etcd).  Exit 0, or 1 with what it saw. */
#include <turnstile.h>
#include <turnstile/fleet.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SECOND ((int64_t)1000000000)

static ts_turnstile *local, *demand;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int released; /* under mu: the main thread has seen what it needs */
static int failures; /* under mu */

/* A transaction: a T pass in @band, then a local one, held until released. */
static void *transaction(void *arg)
{
	int band = *(const int *)arg;
	ts_claim c;
	ts_claim_stamp(&c, band);
	ts_pass p = TS_PASS_NONE, conn = TS_PASS_NONE;
	int r = ts_turnstile_wait(demand, &c, ts_now_ns() + 60 * SECOND, NULL, &p);
	if (!r)
		r = ts_turnstile_wait(local, &c, ts_now_ns() + 60 * SECOND, NULL, &conn);
	pthread_mutex_lock(&mu);
	if (r) {
		fprintf(stderr, "fleet_demand: a wait in band %d ended with %s\n", band, strerror(r));
		failures++;
	}
	while (!released)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	ts_pass_return(&conn);
	ts_pass_return(&p);
	return NULL;
}

struct self {
	int64_t held;
	int nbands, bands[4];
	int64_t waiting[4];
};

static void find_self(const ts_fleet_member_info *m, void *arg)
{
	struct self *s = arg;
	if (!m->self)
		return;
	s->held = m->held;
	s->nbands = m->nbands;
	for (int i = 0; i < m->nbands && i < 4; i++) {
		s->bands[i] = m->bands[i];
		s->waiting[i] = m->waiting[i];
	}
}

static bool local_ceiling_is_2(void)
{
	return ts_turnstile_ceiling(local) == 2;
}

static bool band1_in_place(void)
{
	int64_t t_free, local_queued;
	ts_turnstile_snapshot(demand, &t_free, NULL);
	ts_turnstile_snapshot(local, NULL, &local_queued);
	return t_free == 0 && local_queued == 1;
}

/* Polls @done every millisecond for up to 15 s; false, errno ETIMEDOUT,
 * if it never held. */
static bool poll_until(bool (*done)(void))
{
	for (int64_t end = ts_now_ns() + 15 * SECOND; !done();) {
		if (ts_now_ns() > end) {
			errno = ETIMEDOUT;
			return false;
		}
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL); /* a poll, not a synchronisation */
	}
	return true;
}

static int fail(const char *what)
{
	fprintf(stderr, "fleet_demand: %s: %s\n", what, strerror(errno));
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: fleet_demand ENDPOINTS KEY\n");
		return 2;
	}
	ts_fleet_config cfg = { .endpoints = argv[1], .key = argv[2], .member = "demand",
				.ceiling = 2, .lease_ns = 2 * SECOND };
	if (!(local = ts_turnstile_new(0)) || !(demand = ts_turnstile_new(3)))
		return fail("ts_turnstile_new");
	ts_fleet *f = ts_fleet_join(local, &cfg);
	if (!f)
		return fail("ts_fleet_join");
	ts_fleet_demand_from(f, demand);

	/* the whole ceiling first (join may settle on less while an endpoint
	 * hangs); then the three of band 1, all with their T pass and one
	 * queued on local; then the fourth, which finds T full */
	static const int bands[4] = { 1, 1, 1, 2 };
	pthread_t th[4];
	if (!poll_until(local_ceiling_is_2))
		return fail("the lone member's share never reached the ceiling");
	for (int i = 0; i < 4; i++) {
		if (i == 3 && !poll_until(band1_in_place))
			return fail("the three callers of band 1 did not take their places");
		if ((errno = pthread_create(&th[i], NULL, transaction, (void *)&bands[i])))
			return fail("pthread_create");
	}

	/* what the member published, polled with a deadline: it puts a change
	 * within a second (FLEET_STALE_NS) even alone with the whole ceiling */
	struct self s = { 0 };
	bool seen = false;
	for (int64_t end = ts_now_ns() + 15 * SECOND; !seen && ts_now_ns() < end;) {
		memset(&s, 0, sizeof(s));
		ts_fleet_members(f, find_self, &s);
		seen = s.held == 2 && s.nbands == 2 && s.bands[0] == 1 && s.waiting[0] == 1 &&
		       s.bands[1] == 2 && s.waiting[1] == 1;
		if (!seen)
			nanosleep(&(struct timespec){ 0, 20000000 }, NULL); /* a poll, not a synchronisation */
	}
	pthread_mutex_lock(&mu);
	released = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	ts_fleet_leave(f);
	ts_turnstile_free(local);
	ts_turnstile_free(demand);
	if (!seen) {
		fprintf(stderr, "fleet_demand: published held %lld and %d band(s):", (long long)s.held,
			s.nbands);
		for (int i = 0; i < s.nbands && i < 4; i++)
			fprintf(stderr, " %lld in band %d", (long long)s.waiting[i], s.bands[i]);
		fprintf(stderr, "; wanted held 2, 1 queued in band 1 (on the local turnstile), 1 in band 2\n");
		return 1;
	}
	if (failures)
		return 1;
	printf("fleet_demand: held 2, 1 queued in band 1 (waiting for a local pass), 1 in band 2\n");
	return 0;
}
