/* SPDX-License-Identifier: MIT */
/* A fleet member for tests/fleet.sh: a local turnstile joined to a fleet,
 * THREADS clients looping wait / hold / return, and a board in a shared
 * file that every member maps:
 *   - holders: passes held now across ALL members, counted at every
 *     admission (after the wait returns) and before every return, so it
 *     never over-reports; an admission that finds it above the ceiling is
 *     a violation, counted and kept;
 *   - per member (its --slot): how many clients are active (the test moves
 *     load by writing it), the share and the live members it sees, its
 *     admissions so far.
 * Usage: fleet_member --board FILE --slot N --endpoints URLS --key KEY
 *                     --ceiling C [--lease-ms L] [--threads T] [--band B]
 *                     [--hold-us H] [--idle-us I]
 * Runs until SIGTERM (then leaves the fleet) or SIGKILL. */
#include <turnstile.h>
#include <turnstile/fleet.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fleet_board.h"
#include "fleet_targets.h" /* ts_lib_fleet_requests: linked with the fleet's objects */

static struct board *board;
static struct board_member *me;
static ts_turnstile *local;
static int band, hold_us = 1000, idle_us;
static _Atomic int stopping; /* set by the SIGTERM handler (lock-free), read by every thread */

static void on_term(int sig)
{
	(void)sig;
	stopping = 1;
}

static void pause_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
	nanosleep(&ts, NULL);
}

static void *client(void *arg)
{
	int index = (int)(intptr_t)arg;
	while (!stopping) {
		if (index >= atomic_load(&me->active)) {
			pause_us(2000); /* idle: this client has no work now */
			continue;
		}
		ts_pass p;
		ts_claim c = { band, ts_now_ns(), 0 };
		int r = ts_turnstile_wait(local, &c, ts_now_ns() + 200000000, NULL, &p);
		if (r == ETIMEDOUT)
			continue;
		if (r) {
			fprintf(stderr, "fleet_member %d: wait: %s\n", atomic_load(&me->slot), strerror(r));
			exit(2);
		}
		atomic_fetch_add(&me->holding, 1);
		int64_t h = atomic_fetch_add(&board->holders, 1) + 1;
		if (h > atomic_load(&board->ceiling)) {
			atomic_fetch_add(&board->violations, 1);
			atomic_store(&board->worst, h);
		}
		atomic_fetch_add(&me->admitted, 1);
		pause_us(hold_us);
		atomic_fetch_sub(&board->holders, 1);
		atomic_fetch_sub(&me->holding, 1);
		ts_pass_return(&p);
		if (idle_us)
			pause_us(idle_us); /* think time: demand comes and goes */
	}
	return NULL;
}

struct listing {
	int64_t self, shares, waiting;
};

static void count_member(const ts_fleet_member_info *m, void *arg)
{
	struct listing *l = arg;
	l->self += m->self;
	l->shares += m->share;
	for (int i = 0; i < m->nbands; i++)
		l->waiting += m->waiting[i];
}

int main(int argc, char **argv)
{
	static const struct option opts[] = { { "board", 1, 0, 'b' },	  { "slot", 1, 0, 's' },
					      { "endpoints", 1, 0, 'e' }, { "key", 1, 0, 'k' },
					      { "ceiling", 1, 0, 'c' },	  { "lease-ms", 1, 0, 'l' },
					      { "threads", 1, 0, 't' },	  { "band", 1, 0, 'B' },
					      { "hold-us", 1, 0, 'h' },	  { "idle-us", 1, 0, 'i' },
					      { 0, 0, 0, 0 } };
	const char *path = NULL;
	char name[32];
	int slot = -1, threads = 8, o;
	ts_fleet_config cfg = { 0 };
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'b': path = optarg; break;
		case 's': slot = atoi(optarg); break;
		case 'e': cfg.endpoints = optarg; break;
		case 'k': cfg.key = optarg; break;
		case 'c': cfg.ceiling = atoll(optarg); break;
		case 'l': cfg.lease_ns = atoll(optarg) * 1000000; break;
		case 't': threads = atoi(optarg); break;
		case 'B': band = atoi(optarg); break;
		case 'h': hold_us = atoi(optarg); break;
		case 'i': idle_us = atoi(optarg); break;
		default: return 64;
		}
	}
	if (!path || slot < 0 || slot >= BOARD_MEMBERS || threads < 1 || threads > 64)
		return 64;
	int fd = open(path, O_RDWR);
	board = fd < 0 ? MAP_FAILED : mmap(NULL, sizeof(*board), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (board == MAP_FAILED) {
		perror("fleet_member: board");
		return 1;
	}
	me = &board->m[slot];
	atomic_store(&me->slot, slot);
	snprintf(name, sizeof(name), "member-%d", slot);
	cfg.member = name;
	signal(SIGTERM, on_term);
	local = ts_turnstile_new(0);
	/* A join that no etcd node answered in time (a loaded machine: each
	 * call has a sixth of the lease, each endpoint its slice of that) is
	 * tried again, as pgproxy does; what happened is said in the log */
	ts_fleet *f = NULL;
	for (int tries = 1; !f; tries++) {
		int64_t t0 = ts_now_ns();
		f = ts_fleet_join(local, &cfg);
		int err = errno;
		int64_t took_ms = (ts_now_ns() - t0) / 1000000;
		if (f) {
			if (tries > 1 || took_ms > 1000)
				fprintf(stderr, "fleet_member %d: joined at try %d, after %lld ms\n", slot,
					tries, (long long)took_ms);
			break;
		}
		fprintf(stderr, "fleet_member %d: join: %s after %lld ms (try %d)\n", slot,
			strerror(err), (long long)took_ms, tries);
		if ((err != ETIMEDOUT && err != ECONNREFUSED) || tries == 20)
			return 1;
		pause_us(100000);
	}
	atomic_store(&me->pid, (int64_t)getpid());
	pthread_t th[64];
	for (int i = 0; i < threads; i++)
		pthread_create(&th[i], NULL, client, (void *)(intptr_t)i);
	while (!stopping) {
		int64_t share, members;
		ts_fleet_share(f, &share, &members);
		atomic_store(&me->share, share);
		atomic_store(&me->members, members);
		atomic_store(&me->requests, (int64_t)ts_lib_fleet_requests(f));
		atomic_store(&me->closings, (int64_t)ts_lib_fleet_closings(f));
		atomic_store(&me->watches, (int64_t)ts_lib_fleet_watch_setups(f));
		struct listing l = { 0 };
		int n = ts_fleet_members(f, count_member, &l);
		atomic_store(&me->listed_self, l.self);
		atomic_store(&me->listed_shares, l.shares);
		atomic_store(&me->listed_waiting, l.waiting);
		atomic_store(&me->listed, n);
		/* the test asks member 0 to resize the fleet (and moves the
		 * board's ceiling itself: at once for a grow, once the shares
		 * fit for a shrink) */
		int64_t want = atomic_load(&board->resize_to);
		if (slot == 0 && want > 0 && want != atomic_load(&board->resized) &&
		    ts_fleet_resize(f, want) == 0)
			atomic_store(&board->resized, want);
		pause_us(5000); /* the board is sampled, not synchronised on */
	}
	for (int i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	ts_fleet_leave(f);
	atomic_store(&me->share, 0);
	atomic_store(&me->left, 1);
	ts_turnstile_free(local);
	return 0;
}
