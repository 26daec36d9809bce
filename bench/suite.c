/* SPDX-License-Identifier: MIT */
/* The benchmark suite: libturnstile against what a user would write with
 * pthreads.  Every scenario alternates implementations run by run, repeats
 * each configuration, and reports medians (min–max) and each figure as a
 * ratio to the strict pthread turnstile of the same run.
 *
 *   suite SCENARIO [--repeats R] [--ms D] [--csv FILE] [--impl NAME]
 *                  [--threads T] [--conc C] [--hold NS] [--quick]
 *
 * Scenarios: handoff, priority, jobfifo, pool, audit (see bench/README.md).
 * Markdown goes to stdout, one CSV row per configuration and
 * implementation to --csv. */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <turnstile.h>

#include "comparators.h"
#include "futex_count.h"
#include "mutex_pool.h"
#include "sem_pool.h"
#include "stats.h"
#include "timing.h"

/* ---- options ------------------------------------------------------------ */

static struct {
	int repeats, ms;
	const char *csv, *impl;
	int threads, conc;
	int64_t hold;
	bool quick;
} opt = { 5, 100, NULL, NULL, 0, 0, -1, false };

static FILE *csv;

/* ---- the turnstile implementations behind one interface ---------------- */

enum kind { K_TURNSTILE, K_STRICT, K_NAIVE, K_SEM, N_KINDS };
static const char *kind_name[N_KINDS] = { "turnstile", "strict_pthread", "naive_pthread", "sem_t" };

struct gate {
	enum kind kind;
	ts_turnstile *ts;
	struct strict_turnstile strict;
	struct naive_turnstile naive;
	sem_t sem;
};

static struct gate *gate_new(enum kind k, int64_t conc)
{
	struct gate *g = calloc(1, sizeof(*g));
	g->kind = k;
	switch (k) {
	case K_TURNSTILE: g->ts = ts_turnstile_new(conc); break;
	case K_STRICT: strict_init(&g->strict, conc); break;
	case K_NAIVE: naive_init(&g->naive, conc); break;
	case K_SEM: sem_init(&g->sem, 0, (unsigned)conc); break;
	default: abort();
	}
	return g;
}

static void gate_free(struct gate *g)
{
	switch (g->kind) {
	case K_TURNSTILE: ts_turnstile_free(g->ts); break;
	case K_STRICT: strict_destroy(&g->strict); break;
	case K_NAIVE: naive_destroy(&g->naive); break;
	case K_SEM: sem_destroy(&g->sem); break;
	default: abort();
	}
	free(g);
}

static void gate_wait(struct gate *g, const ts_claim *c, ts_pass *p)
{
	switch (g->kind) {
	case K_TURNSTILE:
		if (ts_turnstile_wait(g->ts, c, 0, NULL, p) != 0)
			abort();
		break;
	case K_STRICT: strict_wait(&g->strict, c); break;
	case K_NAIVE: naive_wait(&g->naive, c); break;
	case K_SEM:
		while (sem_wait(&g->sem) != 0)
			;
		break;
	default: abort();
	}
}

static void gate_return(struct gate *g, ts_pass *p)
{
	switch (g->kind) {
	case K_TURNSTILE: ts_pass_return(p); break;
	case K_STRICT: strict_return(&g->strict); break;
	case K_NAIVE: naive_return(&g->naive); break;
	case K_SEM: sem_post(&g->sem); break;
	default: abort();
	}
}

/* Callers queued inside the implementation right now (the audit's view). */
static int gate_queued(struct gate *g)
{
	int n = -1;
	int64_t w;
	switch (g->kind) {
	case K_TURNSTILE:
		ts_turnstile_snapshot(g->ts, NULL, &w);
		n = (int)w;
		break;
	case K_STRICT:
		pthread_mutex_lock(&g->strict.mu);
		n = g->strict.n;
		pthread_mutex_unlock(&g->strict.mu);
		break;
	case K_NAIVE:
		pthread_mutex_lock(&g->naive.mu);
		n = g->naive.n;
		pthread_mutex_unlock(&g->naive.mu);
		break;
	default:
		break; /* sem_t exposes no queue */
	}
	return n;
}

static bool kind_selected(int k)
{
	return !opt.impl || !strcmp(opt.impl, kind_name[k]);
}

/* ---- measurement helpers ------------------------------------------------ */


/* Merge per-thread samples and return quantiles p50, p99, p99.9 (ns). */
static void quantiles(struct samples *per, int n_threads, double q[3])
{
	int total = 0;
	for (int i = 0; i < n_threads; i++)
		total += per[i].n;
	double *all = malloc(sizeof(double) * (size_t)(total ? total : 1));
	int k = 0;
	for (int i = 0; i < n_threads; i++)
		for (int j = 0; j < per[i].n; j++)
			all[k++] = per[i].v[j];
	if (!total)
		all[0] = 0, total = 1;
	q[0] = quantile(all, total, 0.50);
	q[1] = quantile(all, total, 0.99);
	q[2] = quantile(all, total, 0.999);
	free(all);
}

/* ---- scenario: contended hand-off --------------------------------------- */

struct handoff {
	struct gate *g;
	int64_t hold;
	_Atomic int stop;
	_Atomic long admissions;
	_Atomic uint64_t seq;
	struct samples *samples;
};

struct worker {
	struct handoff *h;
	int id;
	int band; /* priority scenario: 0 = the high-band trickle */
	int64_t think_ns;
};

static void *handoff_worker(void *p)
{
	struct worker *w = p;
	struct handoff *h = w->h;
	struct samples *s = &h->samples[w->id];
	long n = 0;
	s->seed = (unsigned)w->id + 1;
	while (!atomic_load_explicit(&h->stop, memory_order_relaxed)) {
		ts_pass pass;
		int64_t t0 = ts_now_ns();
		ts_claim c = { w->band, t0, atomic_fetch_add_explicit(&h->seq, 1, memory_order_relaxed) };
		gate_wait(h->g, &c, &pass);
		sample(s, (double)(ts_now_ns() - t0));
		spin_ns(h->hold);
		gate_return(h->g, &pass);
		n++;
		if (w->think_ns) {
			struct timespec ts = { 0, w->think_ns };
			nanosleep(&ts, NULL);
		}
	}
	atomic_fetch_add(&h->admissions, n);
	return NULL;
}

/* One run: threads[] at the given bands; returns admissions/s and fills
 * quantiles for the threads in [q_from, q_to). */
/* Futex calls per admission of the last run_threads (libturnstile only). */
static double last_waits_per_admission, last_wakes_per_admission;

static double run_threads(enum kind k, int conc, int n, const int *bands, const int64_t *think,
			  int64_t hold, int ms, int q_from, int q_to, double q[3])
{
	unsigned long waits0 = atomic_load(&futex_wait_calls), wakes0 = atomic_load(&futex_wake_calls);
	struct handoff h = { .g = gate_new(k, conc), .hold = hold };
	pthread_t *th = malloc(sizeof(*th) * (size_t)n);
	struct worker *w = malloc(sizeof(*w) * (size_t)n);
	h.samples = calloc((size_t)n, sizeof(struct samples));
	for (int i = 0; i < n; i++) {
		w[i] = (struct worker){ &h, i, bands ? bands[i] : 0, think ? think[i] : 0 };
		pthread_create(&th[i], NULL, handoff_worker, &w[i]);
	}
	int64_t t0 = ts_now_ns();
	sleep_ms(ms);
	atomic_store(&h.stop, 1);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	double secs = (double)(ts_now_ns() - t0) / 1e9;
	quantiles(h.samples + q_from, q_to - q_from, q);
	long admitted = atomic_load(&h.admissions);
	double rate = (double)admitted / secs;
	if (admitted) {
		last_waits_per_admission = (double)(atomic_load(&futex_wait_calls) - waits0) / (double)admitted;
		last_wakes_per_admission = (double)(atomic_load(&futex_wake_calls) - wakes0) / (double)admitted;
	}
	if (getenv("SUITE_PRINT_ADMISSIONS"))
		fprintf(stderr, "admissions %ld\n", admitted);
	gate_free(h.g);
	free(h.samples);
	free(w);
	free(th);
	return rate;
}

/* Median (min–max) of repeats and the ratio to the strict comparator. */
static void report(const char *scenario, const char *config, const char *metric,
		   double v[N_KINDS][MAX_REPEATS], int repeats, const char *unit)
{
	double base = median(v[K_STRICT], repeats);
	for (int k = 0; k < N_KINDS; k++) {
		if (!kind_selected(k))
			continue;
		double m = median(v[k], repeats);
		printf("| %s | %s | %s | %.4g %s | %.4g–%.4g | %.2f |\n", config, kind_name[k], metric,
		       m, unit, minimum(v[k], repeats), maximum(v[k], repeats),
		       kind_selected(K_STRICT) && base > 0 ? m / base : 0.0);
		if (csv)
			fprintf(csv, "%s,%s,%s,%s,%.6g,%.6g,%.6g,%.4f,%d\n", scenario, config,
				kind_name[k], metric, m, minimum(v[k], repeats),
				maximum(v[k], repeats), base > 0 ? m / base : 0.0, repeats);
	}
}

/* A libturnstile-only figure (no comparator measures it the same way). */
static void report_one(const char *scenario, const char *config, const char *metric,
		       double *v, int repeats)
{
	double m = median(v, repeats);
	printf("| %s | turnstile | %s | %.3f | %.3f–%.3f | |\n", config, metric, m,
	       minimum(v, repeats), maximum(v, repeats));
	if (csv)
		fprintf(csv, "%s,%s,turnstile,%s,%.6g,%.6g,%.6g,,%d\n", scenario, config, metric, m,
			minimum(v, repeats), maximum(v, repeats), repeats);
}

static void table_head(const char *title)
{
	printf("\n### %s (%d repeats, alternating; ratio = to strict_pthread)\n\n", title, opt.repeats);
	printf("| config | implementation | metric | median | min–max | ratio |\n");
	printf("|---|---|---|---:|---:|---:|\n");
}

static void scenario_handoff(void)
{
	static const int all_t[] = { 2, 4, 8, 16, 64 }, quick_t[] = { 4, 16 };
	static const int all_c[] = { 1, 2, 8 }, quick_c[] = { 2, 8 };
	static const int64_t all_h[] = { 0, 1000, 10000 }, quick_h[] = { 0, 1000 };
	const int *ts = opt.quick ? quick_t : all_t, *cs = opt.quick ? quick_c : all_c;
	const int64_t *hs = opt.quick ? quick_h : all_h;
	int nt = opt.quick ? 2 : 5, nc = opt.quick ? 2 : 3, nh = opt.quick ? 2 : 3;
	if (opt.threads)
		ts = &opt.threads, nt = 1;
	if (opt.conc)
		cs = &opt.conc, nc = 1;
	if (opt.hold >= 0)
		hs = &opt.hold, nh = 1;

	table_head("Contended hand-off: admissions/s and wait quantiles");
	for (int a = 0; a < nt; a++)
		for (int b = 0; b < nc; b++)
			for (int c = 0; c < nh; c++) {
				double rate[N_KINDS][MAX_REPEATS], p50[N_KINDS][MAX_REPEATS],
					p99[N_KINDS][MAX_REPEATS], p999[N_KINDS][MAX_REPEATS],
					fwait[N_KINDS][MAX_REPEATS], fwake[N_KINDS][MAX_REPEATS];
				memset(fwait, 0, sizeof(fwait));
				memset(fwake, 0, sizeof(fwake));
				for (int r = 0; r < opt.repeats; r++)
					for (int k = 0; k < N_KINDS; k++) {
						double q[3] = { 0, 0, 0 };
						rate[k][r] = kind_selected(k)
							? run_threads(k, cs[b], ts[a], NULL, NULL, hs[c],
								      opt.ms, 0, ts[a], q)
							: 0;
						p50[k][r] = q[0] / 1000;
						p99[k][r] = q[1] / 1000;
						p999[k][r] = q[2] / 1000;
						if (k == K_TURNSTILE) {
							fwait[k][r] = last_waits_per_admission;
							fwake[k][r] = last_wakes_per_admission;
						}
					}
				char config[64];
				snprintf(config, sizeof(config), "T=%d C=%d hold=%lldns", ts[a], cs[b],
					 (long long)hs[c]);
				report("handoff", config, "admissions/s", rate, opt.repeats, "/s");
				report("handoff", config, "wait p50", p50, opt.repeats, "us");
				report("handoff", config, "wait p99", p99, opt.repeats, "us");
				report("handoff", config, "wait p99.9", p999, opt.repeats, "us");
				if (kind_selected(K_TURNSTILE))
					report_one("handoff", config, "futex waits/admission",
						   fwait[K_TURNSTILE], opt.repeats);
				if (kind_selected(K_TURNSTILE))
					report_one("handoff", config, "futex wakes/admission",
						   fwake[K_TURNSTILE], opt.repeats);
			}
}

/* ---- scenario: priority isolation --------------------------------------- */

static void scenario_priority(void)
{
	enum { LOW = 8, N = LOW + 1 };
	int bands[N];
	int64_t think[N];
	for (int i = 0; i < N; i++) {
		bands[i] = i == 0 ? 0 : 1;
		think[i] = i == 0 ? 50000 : 0; /* the high band trickles */
	}
	table_head("Priority isolation: 8 low-band threads flooding, 1 high-band thread "
		   "every ~50us, C=2, hold 1us");
	double p50[N_KINDS][MAX_REPEATS], p99[N_KINDS][MAX_REPEATS];
	for (int r = 0; r < opt.repeats; r++)
		for (int k = 0; k < N_KINDS; k++) {
			double q[3] = { 0, 0, 0 };
			if (kind_selected(k))
				run_threads(k, 2, N, bands, think, 1000, opt.ms, 0, 1, q);
			p50[k][r] = q[0] / 1000;
			p99[k][r] = q[1] / 1000;
		}
	report("priority", "high band", "wait p50", p50, opt.repeats, "us");
	report("priority", "high band", "wait p99", p99, opt.repeats, "us");
}

/* ---- scenario: job FIFO against call FIFO -------------------------------- */

/* An open system: job i arrives at start + i * period whether or not a
 * thread is free, so a backlog forms when the turnstile is busy.  A job's
 * age is its ARRIVAL; its completion time is measured from then. */
#define JOB_CALLS 4
#define JOB_THREADS 32
struct jobs {
	ts_turnstile *t;
	bool per_job; /* true: one claim per job; false: a fresh claim per call */
	int64_t start, period, end;
	_Atomic uint64_t next_job, seq;
	struct samples *done, *span;
};

static void *job_worker(void *p)
{
	struct worker *w = p;
	struct jobs *j = (struct jobs *)w->h;
	struct samples *s = &j->done[w->id], *sp = &j->span[w->id];
	s->seed = (unsigned)w->id + 7;
	sp->seed = (unsigned)w->id + 11;
	for (;;) {
		uint64_t i = atomic_fetch_add(&j->next_job, 1);
		int64_t arrival = j->start + (int64_t)i * j->period;
		if (arrival >= j->end)
			break;
		struct timespec at = { arrival / 1000000000, arrival % 1000000000 };
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR)
			;
		ts_claim job = { 0, arrival, i };
		int64_t first = 0;
		for (int c = 0; c < JOB_CALLS; c++) {
			ts_claim call = { 0, ts_now_ns(), atomic_fetch_add(&j->seq, 1) };
			ts_pass pass;
			ts_turnstile_wait(j->t, j->per_job ? &job : &call, 0, NULL, &pass);
			if (c == 0)
				first = ts_now_ns();
			spin_ns(20000);
			ts_pass_return(&pass);
			spin_ns(5000); /* the job's own work between its calls */
		}
		int64_t end = ts_now_ns();
		sample(s, (double)(end - arrival));
		sample(sp, (double)(end - first));
	}
	return NULL;
}

static void jobfifo_at(int64_t period);

static void scenario_jobfifo(void)
{
	/* 10k jobs/s (40k calls of 25us CPU plus their wake-ups) congests two
	 * vCPUs; 6.7k jobs/s leaves them lightly loaded. */
	jobfifo_at(100000);
	jobfifo_at(150000);
}

static void jobfifo_at(int64_t period)
{
	printf("\n### Job FIFO: jobs of %d calls arriving every %lld us (open system, %d "
	       "threads), hold 20us, 5us between calls, C=2; completion time from arrival "
	       "(%d repeats, medians)\n\n",
	       JOB_CALLS, (long long)period / 1000, JOB_THREADS, opt.repeats);
	printf("| ordering | completion p50 | p99 | p99.9 | in-progress span p50 | p99 | p99.9 |\n"
	       "|---|---:|---:|---:|---:|---:|---:|\n");
	double p[2][6][MAX_REPEATS];
	for (int r = 0; r < opt.repeats; r++)
		for (int mode = 1; mode >= 0; mode--) {
			struct jobs j = { .t = ts_turnstile_new(2), .per_job = mode, .period = period };
			struct worker w[JOB_THREADS];
			pthread_t th[JOB_THREADS];
			j.done = calloc(JOB_THREADS, sizeof(struct samples));
			j.span = calloc(JOB_THREADS, sizeof(struct samples));
			j.start = ts_now_ns() + 1000000;
			j.end = j.start + (int64_t)opt.ms * 2 * 1000000;
			for (int i = 0; i < JOB_THREADS; i++) {
				w[i] = (struct worker){ (struct handoff *)&j, i, 0, 0 };
				pthread_create(&th[i], NULL, job_worker, &w[i]);
			}
			for (int i = 0; i < JOB_THREADS; i++)
				pthread_join(th[i], NULL);
			double q[3], qs[3];
			quantiles(j.done, JOB_THREADS, q);
			quantiles(j.span, JOB_THREADS, qs);
			for (int i = 0; i < 3; i++) {
				p[mode][i][r] = q[i] / 1000;
				p[mode][3 + i][r] = qs[i] / 1000;
			}
			free(j.done);
			free(j.span);
			ts_turnstile_free(j.t);
		}
	for (int mode = 1; mode >= 0; mode--) {
		const char *name = mode ? "job FIFO (claim per job)" : "call FIFO (claim per call)";
		printf("| %s |", name);
		for (int i = 0; i < 6; i++)
			printf(" %.0f us |", median(p[mode][i], opt.repeats));
		printf("\n");
		static const char *metric[6] = { "completion p50", "completion p99",
						 "completion p99.9", "span p50", "span p99",
						 "span p99.9" };
		if (csv)
			for (int i = 0; i < 6; i++)
				fprintf(csv, "jobfifo,%s every %lldus,turnstile,%s,%.6g,%.6g,%.6g,%.4f,%d\n",
					mode ? "job" : "call", (long long)period / 1000, metric[i],
					median(p[mode][i], opt.repeats), minimum(p[mode][i], opt.repeats),
					maximum(p[mode][i], opt.repeats),
					median(p[mode][i], opt.repeats) / median(p[0][i], opt.repeats),
					opt.repeats);
	}
}

/* ---- scenario: pools ----------------------------------------------------- */

enum pool_kind { P_WAITLIST, P_MUTEX, P_SEM, N_POOLS };
static const char *pool_name[N_POOLS] = { "waitlist", "mutex_pool", "sem_pool" };

struct pool_run {
	enum pool_kind kind;
	ts_waitlist *wl;
	struct mutex_pool mp;
	struct sem_pool sp;
	_Atomic int stop;
	_Atomic long ops;
	struct samples *samples;
};

static void *pool_worker(void *p)
{
	struct worker *w = p;
	struct pool_run *r = (struct pool_run *)w->h;
	struct samples *s = &r->samples[w->id];
	long n = 0;
	s->seed = (unsigned)w->id + 3;
	while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
		void *item = NULL;
		int64_t t0 = ts_now_ns();
		switch (r->kind) {
		case P_WAITLIST: ts_waitlist_take(r->wl, &item, NULL, NULL, 0, NULL); break;
		case P_MUTEX: item = mutex_pool_take(&r->mp); break;
		default: item = sem_pool_take(&r->sp); break;
		}
		sample(s, (double)(ts_now_ns() - t0));
		spin_ns(1000);
		switch (r->kind) {
		case P_WAITLIST: ts_waitlist_put(r->wl, item); break;
		case P_MUTEX: mutex_pool_put(&r->mp, item); break;
		default: sem_pool_put(&r->sp, item); break;
		}
		n++;
	}
	atomic_fetch_add(&r->ops, n);
	return NULL;
}

static double run_pool(enum pool_kind k, int n_threads, double q[3])
{
	enum { ITEMS = 8 };
	struct pool_run r = { .kind = k };
	static int items[ITEMS];
	r.wl = ts_waitlist_new(ITEMS, 0);
	mutex_pool_init(&r.mp, ITEMS);
	sem_pool_init(&r.sp, ITEMS);
	for (int i = 0; i < ITEMS; i++) {
		ts_waitlist_put(r.wl, &items[i]);
		mutex_pool_put(&r.mp, &items[i]);
		sem_pool_put(&r.sp, &items[i]);
	}
	r.samples = calloc((size_t)n_threads, sizeof(struct samples));
	pthread_t *th = malloc(sizeof(*th) * (size_t)n_threads);
	struct worker *w = malloc(sizeof(*w) * (size_t)n_threads);
	for (int i = 0; i < n_threads; i++) {
		w[i] = (struct worker){ (struct handoff *)&r, i, 0, 0 };
		pthread_create(&th[i], NULL, pool_worker, &w[i]);
	}
	int64_t t0 = ts_now_ns();
	sleep_ms(opt.ms);
	atomic_store(&r.stop, 1);
	for (int i = 0; i < n_threads; i++)
		pthread_join(th[i], NULL);
	double rate = (double)atomic_load(&r.ops) / ((double)(ts_now_ns() - t0) / 1e9);
	quantiles(r.samples, n_threads, q);
	ts_waitlist_free(r.wl);
	mutex_pool_destroy(&r.mp);
	sem_pool_destroy(&r.sp);
	free(r.samples);
	free(th);
	free(w);
	return rate;
}

static void scenario_pool(void)
{
	static const int all_t[] = { 4, 16, 64 };
	printf("\n### Pools: T takers on 8 items, hold 1us (%d repeats, alternating; ratio = "
	       "to mutex_pool)\n\n",
	       opt.repeats);
	printf("| config | implementation | metric | median | min–max | ratio |\n");
	printf("|---|---|---|---:|---:|---:|\n");
	for (int a = 0; a < 3; a++) {
		double rate[N_POOLS][MAX_REPEATS], p99[N_POOLS][MAX_REPEATS];
		for (int r = 0; r < opt.repeats; r++)
			for (int k = 0; k < N_POOLS; k++) {
				double q[3];
				rate[k][r] = run_pool(k, all_t[a], q);
				p99[k][r] = q[1] / 1000;
			}
		for (int m = 0; m < 2; m++)
			for (int k = 0; k < N_POOLS; k++) {
				double (*v)[MAX_REPEATS] = m ? p99 : rate;
				double med = median(v[k], opt.repeats), base = median(v[P_MUTEX], opt.repeats);
				printf("| T=%d | %s | %s | %.4g %s | %.4g–%.4g | %.2f |\n", all_t[a],
				       pool_name[k], m ? "wait p99" : "take+put/s", med, m ? "us" : "/s",
				       minimum(v[k], opt.repeats), maximum(v[k], opt.repeats),
				       med / base);
				if (csv)
					fprintf(csv, "pool,T=%d,%s,%s,%.6g,%.6g,%.6g,%.4f,%d\n", all_t[a],
						pool_name[k], m ? "wait p99" : "take+put/s", med,
						minimum(v[k], opt.repeats), maximum(v[k], opt.repeats),
						med / base, opt.repeats);
			}
	}
}

/* ---- scenario: order audit ------------------------------------------------
 * C=1 and T threads.  Before returning its pass, the holder waits until
 * every other running thread is registered AND queued inside the
 * implementation, so at the instant of the return the best waiting claim
 * is known.  The next holder then checks, under the audit lock, that no
 * claim registered before that return is better than its own. */

#define AUDIT_T 8
struct audit {
	struct gate *g;
	pthread_mutex_t mu;
	int registered, running;
	uint64_t ticket, return_ticket;
	struct audit_entry {
		ts_claim claim;
		uint64_t ticket;
		bool waiting;
	} entries[AUDIT_T];
	long violations, admissions;
	int per_thread;
};

struct audit_arg {
	struct audit *a;
	int id;
};

static bool better(const ts_claim *x, const ts_claim *y)
{
	return claim_less(x, 0, y, 0);
}

static void *audit_worker(void *p)
{
	struct audit_arg *arg = p;
	struct audit *a = arg->a;
	unsigned seed = (unsigned)arg->id * 977u + 1;
	for (int i = 0; i < a->per_thread; i++) {
		ts_claim c = { rand_r(&seed) % 3, rand_r(&seed) % 1000,
			       (uint64_t)arg->id * 1000000u + (uint64_t)i };
		pthread_mutex_lock(&a->mu);
		a->entries[arg->id] = (struct audit_entry){ c, a->ticket++, true };
		a->registered++;
		pthread_mutex_unlock(&a->mu);

		ts_pass pass;
		gate_wait(a->g, &c, &pass);

		pthread_mutex_lock(&a->mu);
		a->entries[arg->id].waiting = false;
		a->registered--;
		for (int j = 0; j < AUDIT_T; j++) {
			struct audit_entry *e = &a->entries[j];
			if (j != arg->id && e->waiting && e->ticket < a->return_ticket &&
			    better(&e->claim, &c)) {
				a->violations++;
				break;
			}
		}
		a->admissions++;
		pthread_mutex_unlock(&a->mu);

		/* hold until every other running thread is queued */
		int64_t give_up = ts_now_ns() + 100000000;
		for (;;) {
			pthread_mutex_lock(&a->mu);
			int others = a->running - 1, reg = a->registered;
			pthread_mutex_unlock(&a->mu);
			int q = gate_queued(a->g);
			if (reg >= others && (q < 0 || q >= others))
				break;
			if (ts_now_ns() > give_up)
				break;
			sched_yield();
		}
		if (a->g->kind == K_SEM)
			spin_ns(20000); /* no queue to inspect: give sem_wait callers time */
		pthread_mutex_lock(&a->mu);
		a->return_ticket = a->ticket;
		pthread_mutex_unlock(&a->mu);
		gate_return(a->g, &pass);
	}
	pthread_mutex_lock(&a->mu);
	a->running--;
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

static void scenario_audit(void)
{
	int per_thread = opt.quick ? 40 : 150;
	printf("\n### Order audit: C=1, %d threads, random claims; an admission is a violation "
	       "if a better claim was already queued when the pass was returned\n\n",
	       AUDIT_T);
	printf("| implementation | admissions | violations |\n|---|---:|---:|\n");
	for (int k = 0; k < N_KINDS; k++) {
		if (!kind_selected(k))
			continue;
		struct audit a = { .g = gate_new(k, 1), .running = AUDIT_T, .per_thread = per_thread };
		struct audit_arg args[AUDIT_T];
		pthread_t th[AUDIT_T];
		pthread_mutex_init(&a.mu, NULL);
		for (int i = 0; i < AUDIT_T; i++) {
			args[i] = (struct audit_arg){ &a, i };
			pthread_create(&th[i], NULL, audit_worker, &args[i]);
		}
		for (int i = 0; i < AUDIT_T; i++)
			pthread_join(th[i], NULL);
		printf("| %s | %ld | %ld%s |\n", kind_name[k], a.admissions, a.violations,
		       k == K_SEM ? " (no queue to inspect: approximate)" : "");
		if (csv)
			fprintf(csv, "audit,C=1 T=%d,%s,violations,%ld,%ld,%ld,0,1\n", AUDIT_T,
				kind_name[k], a.violations, a.violations, a.violations);
		pthread_mutex_destroy(&a.mu);
		gate_free(a.g);
	}
}

/* ---- main ----------------------------------------------------------------- */

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s handoff|priority|jobfifo|pool|audit [options]\n", argv[0]);
		return 2;
	}
	const char *scenario = argv[1];
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--quick"))
			opt.quick = true;
		else if (v && !strcmp(a, "--repeats"))
			opt.repeats = atoi(v), i++;
		else if (v && !strcmp(a, "--ms"))
			opt.ms = atoi(v), i++;
		else if (v && !strcmp(a, "--csv"))
			opt.csv = v, i++;
		else if (v && !strcmp(a, "--impl"))
			opt.impl = v, i++;
		else if (v && !strcmp(a, "--threads"))
			opt.threads = atoi(v), i++;
		else if (v && !strcmp(a, "--conc"))
			opt.conc = atoi(v), i++;
		else if (v && !strcmp(a, "--hold"))
			opt.hold = atoll(v), i++;
		else {
			fprintf(stderr, "unknown option %s\n", a);
			return 2;
		}
	}
	if (opt.repeats < 1 || opt.repeats > MAX_REPEATS || opt.ms < 1 ||
	    opt.threads < 0 || opt.threads > COMPARATOR_MAX_WAITERS || opt.conc < 0) {
		fprintf(stderr, "bad option value\n");
		return 2;
	}
	if (opt.csv && !(csv = fopen(opt.csv, "a"))) {
		perror(opt.csv);
		return 1;
	}
	first_thread();
	if (!strcmp(scenario, "handoff"))
		scenario_handoff();
	else if (!strcmp(scenario, "priority"))
		scenario_priority();
	else if (!strcmp(scenario, "jobfifo"))
		scenario_jobfifo();
	else if (!strcmp(scenario, "pool"))
		scenario_pool();
	else if (!strcmp(scenario, "audit"))
		scenario_audit();
	else {
		fprintf(stderr, "unknown scenario %s\n", scenario);
		return 2;
	}
	if (csv)
		fclose(csv);
	return 0;
}
