/* SPDX-License-Identifier: MIT */
/* A proxy's loop handing passes to its own clients: one epoll loop thread
 * serving N clients on one turnstile of ceiling C.  A client granted its
 * pass holds it until the loop's next turn (its transaction ends in a
 * socket handler), spins HOLD ns there and returns it, outside dispatch;
 * the pass goes to the next client queued, on the same loop; the client
 * queues again at once.  Two ways to run that loop, alternating run by
 * run in one process:
 *
 *   before_poll  ts_notifier_before_poll before every epoll_wait: the
 *                loop's own hand-offs run there, with no fd write;
 *   fd           dispatch only when the notifier's fd is readable, as every
 *                loop did before before_poll existed (f9ce938): each
 *                hand-off writes the fd and costs a trip through epoll_wait.
 *
 * While clients hold passes their "sockets" have work, so epoll_wait does
 * not block (timeout 0); it blocks only when nobody holds one.  Measured
 * after a warm-up, for --ms: hand-offs/s (passes granted to a queued
 * client), fd writes and epoll_wait calls per hand-off.  At the end every
 * pass is back (checked) and every pending node cancelled.
 *
 *   loop_handoff [--repeats R] [--ms D] [--clients N] [--conc C]
 *                [--hold NS] [--csv FILE]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <turnstile.h>

#include "stats.h"
#include "timing.h"

#define MAX_CLIENTS 1024
#define WARMUP_MS 20

enum mode { M_BEFORE_POLL, M_FD, N_MODES };
static const char *mode_name[N_MODES] = { "before_poll", "fd" };

static struct {
	int repeats, ms, clients, conc;
	int64_t hold;
	const char *csv;
} opt = { 5, 300, 64, 4, 1000, NULL };

struct client {
	ts_async node;
	ts_pass pass;
	bool holding, queued;
	struct run *r;
};

struct run {
	ts_turnstile *t;
	ts_notifier *n;
	struct client c[MAX_CLIENTS];
	bool measuring, draining;
	uint64_t handoffs, epoll_waits;
	int holding;
};

static void die(const char *what, int err)
{
	fprintf(stderr, "loop_handoff: %s: %s\n", what, strerror(err));
	exit(1);
}

static void granted(ts_async *node, int result, void *arg)
{
	struct client *c = arg;
	if (result != 0)
		die("callback result", result);
	c->pass = ts_async_pass(node);
	c->queued = false;
	c->holding = true;
	c->r->holding++;
	if (c->r->measuring)
		c->r->handoffs++;
}

static void queue(struct client *c)
{
	struct run *r = c->r;
	ts_claim claim = { 0, 0, 0 };
	ts_claim_stamp(&claim, 0);
	int e = ts_turnstile_wait_async(r->t, &claim, 0, NULL, r->n, &c->node, granted, c, &c->pass);
	if (e == 0) {
		c->holding = true;
		r->holding++;
	} else if (e == EINPROGRESS) {
		c->queued = true;
	} else {
		die("ts_turnstile_wait_async", e);
	}
}

/* The socket handlers' turn: every holder ends its transaction. */
static void end_transactions(struct run *r)
{
	for (int i = 0; i < opt.clients; i++) {
		struct client *c = &r->c[i];
		if (!c->holding)
			continue;
		spin_ns(opt.hold);
		c->holding = false;
		r->holding--;
		ts_pass_return(&c->pass); /* outside dispatch: to the next queued client */
		if (!r->draining)
			queue(c);
	}
}

struct result {
	double rate, writes, waits;
};

static struct result run_once(enum mode m)
{
	static struct run r;
	memset(&r, 0, sizeof(r));
	r.t = ts_turnstile_new(opt.conc);
	r.n = ts_notifier_new();
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN };
	if (!r.t || !r.n || ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, ts_notifier_fd(r.n), &ev))
		die("setup", errno);
	for (int i = 0; i < opt.clients; i++) {
		r.c[i] = (struct client){ .node = TS_ASYNC_INIT, .r = &r };
		queue(&r.c[i]);
	}
	int64_t start = ts_now_ns(), measure_at = start + WARMUP_MS * 1000000LL,
		end = measure_at + opt.ms * 1000000LL, t0 = 0;
	ts_notifier_counters c0 = { 0 }, c1;
	for (;;) {
		int64_t now = ts_now_ns();
		if (!r.measuring && now >= measure_at) {
			r.measuring = true;
			ts_notifier_read_counters(r.n, &c0);
			t0 = now;
			r.epoll_waits = 0;
		}
		if (now >= end)
			break;
		if (m == M_BEFORE_POLL)
			ts_notifier_before_poll(r.n);
		struct epoll_event got;
		int k = epoll_wait(ep, &got, 1, r.holding ? 0 : -1);
		r.epoll_waits++;
		if (k > 0)
			ts_notifier_dispatch(r.n);
		end_transactions(&r);
	}
	int64_t t1 = ts_now_ns();
	ts_notifier_read_counters(r.n, &c1);
	uint64_t handoffs = r.handoffs, waits = r.epoll_waits;
	/* drain: every pass back, every pending node withdrawn */
	r.measuring = false;
	r.draining = true;
	ts_notifier_before_poll(r.n);
	ts_notifier_dispatch(r.n);
	end_transactions(&r);
	for (int i = 0; i < opt.clients; i++)
		if (r.c[i].queued) {
			int e = ts_async_cancel(&r.c[i].node);
			if (e == EALREADY) /* granted and handed on: to another queued one */
				continue;
			if (e != 0)
				die("ts_async_cancel", e);
		}
	int64_t avail;
	ts_turnstile_snapshot(r.t, &avail, NULL);
	if (avail != opt.conc || r.holding)
		die("a pass was lost", EIO);
	if (ts_notifier_free(r.n))
		die("ts_notifier_free", EBUSY);
	ts_turnstile_free(r.t);
	close(ep);
	double h = handoffs ? (double)handoffs : 1.0;
	return (struct result){ (double)handoffs * 1e9 / (double)(t1 - t0),
				(double)(c1.fd_writes - c0.fd_writes) / h, (double)waits / h };
}

static void report(FILE *csv, const char *config, const char *metric,
		   double v[N_MODES][MAX_REPEATS], const char *fmt)
{
	double base = median(v[M_FD], opt.repeats);
	for (int k = 0; k < N_MODES; k++) {
		double m = median(v[k], opt.repeats);
		char med[32], lo[32], hi[32];
		snprintf(med, sizeof(med), fmt, m);
		snprintf(lo, sizeof(lo), fmt, minimum(v[k], opt.repeats));
		snprintf(hi, sizeof(hi), fmt, maximum(v[k], opt.repeats));
		double ratio = base > 0 ? m / base : 0.0;
		printf("| %s | %s | %s | %s | %s–%s | %.2f |\n", config, mode_name[k], metric, med, lo,
		       hi, ratio);
		if (csv)
			fprintf(csv, "loop_handoff,%s,%s,%s,%.6g,%.6g,%.6g,%.4f,%d\n", config,
				mode_name[k], metric, m, minimum(v[k], opt.repeats),
				maximum(v[k], opt.repeats), ratio, opt.repeats);
	}
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--repeats") && v)
			opt.repeats = atoi(v);
		else if (!strcmp(a, "--ms") && v)
			opt.ms = atoi(v);
		else if (!strcmp(a, "--clients") && v)
			opt.clients = atoi(v);
		else if (!strcmp(a, "--conc") && v)
			opt.conc = atoi(v);
		else if (!strcmp(a, "--hold") && v)
			opt.hold = atoll(v);
		else if (!strcmp(a, "--csv") && v)
			opt.csv = v;
		else {
			fprintf(stderr, "usage: loop_handoff [--repeats R] [--ms D] [--clients N] "
					"[--conc C] [--hold NS] [--csv FILE]\n");
			return 2;
		}
		i++;
	}
	if (opt.repeats < 1 || opt.repeats > MAX_REPEATS || opt.ms < 1 || opt.clients < 1 ||
	    opt.clients > MAX_CLIENTS || opt.conc < 1 || opt.conc >= opt.clients || opt.hold < 0) {
		fprintf(stderr, "loop_handoff: repeats 1..%d, clients 2..%d, 1 <= conc < clients\n",
			MAX_REPEATS, MAX_CLIENTS);
		return 2;
	}
	FILE *csv = opt.csv ? fopen(opt.csv, "a") : NULL;
	if (opt.csv && !csv)
		die(opt.csv, errno);
	double rate[N_MODES][MAX_REPEATS], writes[N_MODES][MAX_REPEATS], waits[N_MODES][MAX_REPEATS];
	for (int rep = 0; rep < opt.repeats; rep++)
		for (int j = 0; j < N_MODES; j++) {
			int k = rep % 2 ? N_MODES - 1 - j : j; /* alternate which goes first */
			struct result res = run_once((enum mode)k);
			rate[k][rep] = res.rate;
			writes[k][rep] = res.writes;
			waits[k][rep] = res.waits;
		}
	char config[96];
	snprintf(config, sizeof(config), "L=1x%d C=%d hold=%lldns", opt.clients, opt.conc,
		 (long long)opt.hold);
	printf("\n### A loop handing passes to its own clients (bench/loop_handoff, %d repeats, %d ms each, alternating)\n\n",
	       opt.repeats, opt.ms);
	printf("| config | loop | metric | median | min–max | ratio to fd |\n|---|---|---|---|---|---|\n");
	report(csv, config, "hand-offs/s", rate, "%.0f");
	report(csv, config, "fd writes/hand-off", writes, "%.3f");
	report(csv, config, "epoll_waits/hand-off", waits, "%.3f");
	if (csv)
		fclose(csv);
	return 0;
}
