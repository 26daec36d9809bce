/* SPDX-License-Identifier: MIT */
/* Event-loop waiters: libturnstile's async waits against what a careful
 * libuv user writes by hand, in one process, implementations alternating
 * run by run.
 *
 * The scenario: L libuv loop threads each serving N clients that never
 * block, plus B blocking threads, all queueing for one turnstile of
 * ceiling C in (band, since, seq, arrival) order; bands are drawn at
 * random per wait (0..2).  A client that gets its pass holds it for HOLD ns
 * of busy-work on its loop, returns it and queues again at once.
 *
 *   turnstile  ts_turnstile_wait_async on the loops, one ts_notifier per
 *              loop whose fd a uv_poll_t watches (the poll callback calls
 *              ts_notifier_dispatch) and a uv_prepare_t that calls
 *              ts_notifier_before_poll (the loop's own hand-offs without
 *              the fd, man 3 ts_notifier); ts_turnstile_wait on the
 *              blocking threads.
 *   libuv      one pthread mutex over a binary heap of every waiter (band,
 *              since, seq, arrival) and a count of free passes.  A return
 *              pops the best waiter: a loop client is appended to its
 *              loop's granted list (under the same mutex) and, when that
 *              list was empty, the loop is woken with uv_async_send (its
 *              callback takes the list and runs the clients); a blocking
 *              thread is woken through its own semaphore, after the
 *              unlock.
 *
 * Measured after a warm-up, for --ms: completions/s (every pass granted
 * and returned, loop clients and blocking threads), the loop clients' wait
 * from queueing to callback (p50, p99; blocking threads' p99 apart), fd
 * writes per loop completion (turnstile: the notifiers' fd_writes over
 * their completions; libuv: uv_async_send calls over loop completions) and
 * heap allocations per wait (alloc_count.c, measured phase only).
 *
 * Then an order check per implementation: ceiling 1, the same waiters.
 * Every waiter registers its claim before it queues and deregisters when
 * admitted; a holder, before returning, waits (under the audit lock, which
 * freezes registrations) until the implementation's queue holds exactly
 * the registered waiters, so at that return the best waiting claim is
 * known.  The admitted one then checks that no claim registered before
 * that return beats its own.
 *
 * The run ends by draining: nobody queues again, every queued waiter is
 * still granted and returns, and each loop stops when its last client is
 * done.  A drain that does not finish in 20 s (a lost callback, a hang) is
 * reported with what is still outstanding, and the program exits 3.
 *
 *   async_loop [--repeats R] [--ms D] [--csv FILE] [--impl NAME] [--quick]
 *              [--clients N] [--blocking B] [--conc C] [--hold NS]
 *              [--audit-ms D] [--no-audit]
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include <turnstile.h>

#include "alloc_count.h"
#include "comparators.h"
#include "stats.h"
#include "timing.h"

#define LOOPS 2
#define MAX_BLOCKING 16
#define BANDS 3
#define WARMUP_MS 20
#define DRAIN_LIMIT_NS (20 * (int64_t)1000000000)

static struct {
	int repeats, ms, audit_ms;
	const char *csv, *impl;
	int clients, blocking, conc;
	int64_t hold;
	bool quick, audit;
} opt = { 5, 100, 0, NULL, NULL, 1000, 2, 8, 1000, false, true };

static FILE *csv;

enum impl { I_TURNSTILE, I_LIBUV, N_IMPLS };
static const char *impl_name[N_IMPLS] = { "turnstile", "libuv" };

static bool impl_selected(int i)
{
	return !opt.impl || !strcmp(opt.impl, impl_name[i]);
}

/* ---- helpers --------------------------------------------------------------- */

static unsigned xorshift(unsigned *s)
{
	unsigned x = *s;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return *s = x;
}


/* Quantile @p (0..1) of the merged samples of @k sets, in microseconds. */
static double merged_quantile(struct samples *const *sets, int k, double p)
{
	int total = 0;
	for (int i = 0; i < k; i++)
		total += sets[i]->n;
	if (!total)
		return 0;
	double *all = malloc(sizeof(double) * (size_t)total);
	int j = 0;
	for (int i = 0; i < k; i++)
		for (int m = 0; m < sets[i]->n; m++)
			all[j++] = sets[i]->v[m];
	double q = quantile(all, total, p) / 1000;
	free(all);
	return q;
}

static void die(const char *what, int err)
{
	fprintf(stderr, "async_loop: %s: %s\n", what, err ? ts_strerror(err) : "failed");
	exit(3);
}

/* ---- the shared state of one run ------------------------------------------ */

enum phase { WARMUP, MEASURE, DRAIN };

/* A waiter in the libuv comparator's heap: a loop client or a blocking
 * thread. */
struct qent {
	struct claimed key; /* first: the heap's entry (comparators.h) */
	struct loop *loop; /* NULL: a blocking thread, woken through sem */
	struct qent *next; /* the loop's granted list */
	sem_t *sem;
};

struct client {
	ts_async node; /* turnstile */
	struct qent q; /* libuv (q.key.claim is the claim for both) */
	struct loop *loop;
	int64_t queued_at;
	ts_pass pass;        /* a pass taken at once while the loop starts */
	struct client *next; /* the loop's list of those */
	int slot;            /* audit */
	unsigned rng;
};

struct counts {
	long completions; /* passes granted and returned, measured phase */
	long waits;       /* waits begun, measured phase */
	long sends;       /* uv_async_send calls made by this thread, measured phase */
};

struct loop {
	struct run *r;
	int id;
	uv_loop_t uv;
	uv_poll_t poll;     /* turnstile */
	uv_prepare_t prepare; /* turnstile: ts_notifier_before_poll */
	ts_notifier *n;     /* turnstile */
	uv_async_t async;   /* libuv */
	struct qent *granted_head, *granted_tail; /* libuv, under r->mu */
	struct client *clients;
	struct client *started; /* clients that got a pass at once at the start */
	int outstanding; /* clients not finished (the drain) */
	uint64_t seq;
	struct counts c;
	ts_notifier_counters at_measure, at_drain;
	int seen_phase;
	struct samples s;
	pthread_t th;
};

struct blocker {
	struct run *r;
	int id, slot;
	struct qent q;
	sem_t sem;
	unsigned rng;
	uint64_t seq;
	struct counts c;
	struct samples s;
	pthread_t th;
};

struct audit {
	pthread_mutex_t mu;
	int registered;
	uint64_t ticket, return_ticket;
	struct audit_entry {
		ts_claim claim;
		uint64_t ticket;
		bool waiting;
	} *e;
	int n_entries;
	long admissions, violations, verified, unverified;
};

struct run {
	enum impl impl;
	int conc;
	int64_t hold;
	bool audit;
	_Atomic int phase;
	pthread_barrier_t start;
	ts_turnstile *ts;
	/* libuv comparator */
	pthread_mutex_t mu;
	int64_t free_passes;
	uint64_t arrivals;
	int n;
	struct claimed **heap; /* qents */
	_Atomic int loops_done, closing;
	struct loop loops[LOOPS];
	struct blocker blockers[MAX_BLOCKING];
	struct audit a;
};

static int phase_of(struct run *r)
{
	return atomic_load_explicit(&r->phase, memory_order_relaxed);
}

/* ---- the libuv comparator's queue ------------------------------------------ */

/* Take a free pass (true) or queue @w (false: a grant will tell it). */
static bool uvq_wait(struct run *r, struct qent *w)
{
	pthread_mutex_lock(&r->mu);
	if (r->free_passes > 0 && r->n == 0) {
		r->free_passes--;
		pthread_mutex_unlock(&r->mu);
		return true;
	}
	w->key.arrival = r->arrivals++;
	claim_heap_push(r->heap, &r->n, &w->key);
	pthread_mutex_unlock(&r->mu);
	return false;
}

/* Return a pass: straight to the best waiter, else back to the count. */
static void uvq_return(struct run *r, struct counts *c)
{
	struct loop *wake = NULL;
	sem_t *post = NULL;

	pthread_mutex_lock(&r->mu);
	if (r->n) {
		struct qent *w = (struct qent *)claim_heap_pop(r->heap, &r->n);
		if (w->loop) {
			struct loop *l = w->loop;
			w->next = NULL;
			if (l->granted_tail)
				l->granted_tail->next = w;
			else
				l->granted_head = w, wake = l; /* empty -> not: wake it */
			l->granted_tail = w;
		} else {
			post = w->sem;
		}
	} else {
		r->free_passes++;
	}
	pthread_mutex_unlock(&r->mu);
	if (wake) {
		if (phase_of(r) == MEASURE)
			c->sends++;
		uv_async_send(&wake->async);
	}
	if (post)
		sem_post(post);
}

/* ---- the order audit (ceiling 1) ------------------------------------------- */

static int queued_now(struct run *r)
{
	if (r->impl == I_TURNSTILE) {
		int64_t w;
		ts_turnstile_snapshot(r->ts, NULL, &w);
		return (int)w;
	}
	pthread_mutex_lock(&r->mu);
	int n = r->n;
	pthread_mutex_unlock(&r->mu);
	return n;
}

static void audit_register(struct run *r, int slot, const ts_claim *c)
{
	if (!r->audit || phase_of(r) == DRAIN)
		return;
	struct audit *a = &r->a;
	pthread_mutex_lock(&a->mu);
	a->e[slot] = (struct audit_entry){ *c, a->ticket++, true };
	a->registered++;
	pthread_mutex_unlock(&a->mu);
}

static void audit_admitted(struct run *r, int slot)
{
	if (!r->audit)
		return;
	struct audit *a = &r->a;
	pthread_mutex_lock(&a->mu);
	struct audit_entry *me = &a->e[slot];
	if (me->waiting && phase_of(r) != DRAIN) {
		me->waiting = false;
		a->registered--;
		for (int j = 0; j < a->n_entries; j++) {
			struct audit_entry *e = &a->e[j];
			if (j != slot && e->waiting && e->ticket < a->return_ticket &&
			    claim_less(&e->claim, 0, &me->claim, 0)) {
				a->violations++;
				break;
			}
		}
		a->admissions++;
	}
	pthread_mutex_unlock(&a->mu);
}

/* Before a return: wait until every registered waiter is queued (the
 * audit lock keeps new ones out; nobody can be admitted while we hold the
 * only pass), then mark what was registered as known to be waiting. */
static void audit_before_return(struct run *r)
{
	if (!r->audit || phase_of(r) == DRAIN)
		return;
	struct audit *a = &r->a;
	int64_t give_up = ts_now_ns() + 100000000;
	pthread_mutex_lock(&a->mu);
	for (;;) {
		if (queued_now(r) == a->registered) {
			a->return_ticket = a->ticket;
			a->verified++;
			break;
		}
		if (ts_now_ns() > give_up || phase_of(r) == DRAIN) {
			a->return_ticket = 0; /* unknown: the next admission checks nothing */
			a->unverified++;
			break;
		}
		pthread_mutex_unlock(&a->mu);
		sched_yield();
		pthread_mutex_lock(&a->mu);
	}
	pthread_mutex_unlock(&a->mu);
}

/* ---- loop clients ------------------------------------------------------------ */

static void client_queue(struct client *c, bool starting);

static void loop_finish_client(struct loop *l)
{
	if (--l->outstanding)
		return;
	if (l->r->impl == I_TURNSTILE) {
		/* ts_notifier_free waits for any granter still inside its call */
		uv_poll_stop(&l->poll);
		uv_close((uv_handle_t *)&l->poll, NULL);
		uv_prepare_stop(&l->prepare);
		uv_close((uv_handle_t *)&l->prepare, NULL);
	} else {
		/* a granter may be between its unlock and its uv_async_send:
		 * the handle stays open until main says every thread is done */
		atomic_fetch_add(&l->r->loops_done, 1);
	}
}

/* The client holds a pass: count, hold, return; queue again unless
 * draining.  Returns true when the client is to queue again. */
static bool client_holds(struct client *c, ts_pass *pass)
{
	struct loop *l = c->loop;
	struct run *r = l->r;
	int ph = phase_of(r);

	if (ph == MEASURE) {
		sample(&l->s, (double)(ts_now_ns() - c->queued_at));
		l->c.completions++;
	}
	audit_admitted(r, c->slot);
	spin_ns(r->hold);
	audit_before_return(r);
	if (r->impl == I_TURNSTILE)
		ts_pass_return(pass);
	else
		uvq_return(r, &l->c);
	if (phase_of(r) == DRAIN) {
		loop_finish_client(l);
		return false;
	}
	return true;
}

static void on_turn(ts_async *node, int result, void *arg)
{
	struct client *c = arg;
	if (result != 0)
		die("async callback result", result);
	ts_pass pass = ts_async_pass(node);
	if (!ts_pass_issued(&pass))
		die("async callback with result 0 but no pass", 0);
	if (client_holds(c, &pass))
		client_queue(c, false);
}

/* Queue @c.  A pass free at once is used at once and the client queues
 * again — except while the loop queues its clients at the start
 * (@starting): then it is kept until every client is queued, or the first
 * client would take a free pass over and over and the others never
 * queue. */
static void client_queue(struct client *c, bool starting)
{
	struct loop *l = c->loop;
	struct run *r = l->r;

	for (;;) {
		c->queued_at = ts_now_ns();
		c->q.key.claim = (ts_claim){ (int)(xorshift(&c->rng) % BANDS), c->queued_at,
					 l->seq++ << 4 | (uint64_t)l->id };
		audit_register(r, c->slot, &c->q.key.claim);
		if (phase_of(r) == MEASURE)
			l->c.waits++;
		ts_pass pass = TS_PASS_NONE;
		if (r->impl == I_TURNSTILE) {
			int e = ts_turnstile_wait_async(r->ts, &c->q.key.claim, 0, NULL, l->n, &c->node,
							on_turn, c, &pass);
			if (e == EINPROGRESS)
				return;
			if (e != 0)
				die("ts_turnstile_wait_async", e);
		} else if (!uvq_wait(r, &c->q)) {
			return;
		}
		/* a free pass at once */
		if (starting) {
			c->pass = pass;
			c->next = l->started;
			l->started = c;
			return;
		}
		if (!client_holds(c, &pass))
			return;
	}
}

/* turnstile: the notifier's fd is readable */
static void on_readable(uv_poll_t *h, int status, int events)
{
	struct loop *l = h->data;
	if (status < 0)
		die(uv_strerror(status), 0);
	int ph = phase_of(l->r);
	if (ph != l->seen_phase) {
		/* the measured window of the notifier's counters */
		if (l->seen_phase == WARMUP)
			ts_notifier_read_counters(l->n, &l->at_measure);
		if (ph == DRAIN)
			ts_notifier_read_counters(l->n, &l->at_drain);
		l->seen_phase = ph;
	}
	ts_notifier_dispatch(l->n);
}

/* turnstile: right before libuv polls, what this loop completed for its
 * own clients (man 3 ts_notifier, "The loop's own hand-offs") */
static void on_prepare(uv_prepare_t *h)
{
	struct loop *l = h->data;
	ts_notifier_before_poll(l->n);
}

/* libuv: clients of this loop were granted */
static void on_async(uv_async_t *h)
{
	struct loop *l = h->data;
	struct run *r = l->r;

	pthread_mutex_lock(&r->mu);
	struct qent *w = l->granted_head;
	l->granted_head = l->granted_tail = NULL;
	pthread_mutex_unlock(&r->mu);
	while (w) {
		struct qent *next = w->next;
		struct client *c = (struct client *)((char *)w - offsetof(struct client, q));
		if (client_holds(c, NULL))
			client_queue(c, false);
		w = next;
	}
	if (atomic_load(&r->closing))
		uv_close((uv_handle_t *)&l->async, NULL);
}

static void *loop_main(void *p)
{
	struct loop *l = p;
	struct run *r = l->r;
	int e;

	if ((e = uv_loop_init(&l->uv)))
		die(uv_strerror(e), 0);
	if (r->impl == I_TURNSTILE) {
		if (!(l->n = ts_notifier_new()))
			die("ts_notifier_new", errno);
		if ((e = uv_poll_init(&l->uv, &l->poll, ts_notifier_fd(l->n))) ||
		    (e = uv_poll_start(&l->poll, UV_READABLE, on_readable)) ||
		    (e = uv_prepare_init(&l->uv, &l->prepare)) ||
		    (e = uv_prepare_start(&l->prepare, on_prepare)))
			die(uv_strerror(e), 0);
		l->poll.data = l;
		l->prepare.data = l;
	} else {
		if ((e = uv_async_init(&l->uv, &l->async, on_async)))
			die(uv_strerror(e), 0);
		l->async.data = l;
	}
	l->outstanding = opt.clients;
	pthread_barrier_wait(&r->start);
	for (int i = 0; i < opt.clients; i++)
		client_queue(&l->clients[i], true);
	while (l->started) {
		struct client *c = l->started;
		l->started = c->next;
		if (client_holds(c, &c->pass))
			client_queue(c, false);
	}
	uv_run(&l->uv, UV_RUN_DEFAULT);
	if (r->impl == I_TURNSTILE) {
		if (l->seen_phase != DRAIN) /* never polled after the measured phase */
			ts_notifier_read_counters(l->n, &l->at_drain);
		if (l->seen_phase == WARMUP)
			l->at_measure = l->at_drain;
		if ((e = ts_notifier_free(l->n)))
			die("ts_notifier_free after the drain", e);
	}
	if ((e = uv_loop_close(&l->uv)))
		die(uv_strerror(e), 0);
	return NULL;
}

/* ---- blocking threads --------------------------------------------------------- */

static void *blocker_main(void *p)
{
	struct blocker *b = p;
	struct run *r = b->r;

	pthread_barrier_wait(&r->start);
	while (phase_of(r) != DRAIN) {
		int ph = phase_of(r);
		int64_t t0 = ts_now_ns();
		b->q.key.claim = (ts_claim){ (int)(xorshift(&b->rng) % BANDS), t0,
					 b->seq++ << 4 | (uint64_t)(LOOPS + b->id) };
		audit_register(r, b->slot, &b->q.key.claim);
		if (ph == MEASURE)
			b->c.waits++;
		ts_pass pass;
		if (r->impl == I_TURNSTILE) {
			int e = ts_turnstile_wait(r->ts, &b->q.key.claim, 0, NULL, &pass);
			if (e)
				die("ts_turnstile_wait", e);
		} else if (!uvq_wait(r, &b->q)) {
			while (sem_wait(&b->sem))
				;
		}
		if (phase_of(r) == MEASURE) {
			sample(&b->s, (double)(ts_now_ns() - t0));
			b->c.completions++;
		}
		audit_admitted(r, b->slot);
		spin_ns(r->hold);
		audit_before_return(r);
		if (r->impl == I_TURNSTILE)
			ts_pass_return(&pass);
		else
			uvq_return(r, &b->c);
	}
	return NULL;
}

/* ---- one run ------------------------------------------------------------------ */

struct result {
	double rate, blocking_rate, p50, p99, blocking_p99, fd_writes, allocs;
};

static void join_or_report(struct run *r, pthread_t th, int64_t limit, const char *who)
{
	int64_t left = limit - ts_now_ns();
	struct timespec at;
	clock_gettime(CLOCK_REALTIME, &at);
	at.tv_sec += left > 0 ? left / 1000000000 : 0;
	if (pthread_timedjoin_np(th, NULL, &at) == 0)
		return;
	int64_t avail = 0, waiting = 0;
	if (r->ts)
		ts_turnstile_snapshot(r->ts, &avail, &waiting);
	fprintf(stderr,
		"async_loop: HANG (%s): %s did not finish the drain within 20 s\n"
		"  outstanding clients per loop: %d, %d; loops done (libuv): %d\n"
		"  turnstile: %lld passes free, %lld queued; libuv heap: %d queued, %lld free\n",
		impl_name[r->impl], who, r->loops[0].outstanding, r->loops[1].outstanding,
		atomic_load(&r->loops_done), (long long)avail, (long long)waiting, r->n,
		(long long)r->free_passes);
	exit(3);
}

static struct result run_once(enum impl impl, int conc, int ms, bool audit, struct audit *audit_out)
{
	struct run *r = calloc(1, sizeof(*r));
	int waiters = LOOPS * opt.clients + opt.blocking;

	r->impl = impl;
	r->conc = conc;
	r->hold = opt.hold;
	r->audit = audit;
	pthread_barrier_init(&r->start, NULL, (unsigned)(LOOPS + opt.blocking + 1));
	if (impl == I_TURNSTILE) {
		if (!(r->ts = ts_turnstile_new(conc)))
			die("ts_turnstile_new", errno);
	} else {
		pthread_mutex_init(&r->mu, NULL);
		r->free_passes = conc;
		r->heap = calloc((size_t)waiters, sizeof(*r->heap));
	}
	pthread_mutex_init(&r->a.mu, NULL);
	r->a.n_entries = waiters;
	r->a.e = calloc((size_t)waiters, sizeof(*r->a.e));

	for (int i = 0; i < LOOPS; i++) {
		struct loop *l = &r->loops[i];
		l->r = r;
		l->id = i;
		l->s.seed = (unsigned)i + 1;
		l->clients = calloc((size_t)opt.clients, sizeof(*l->clients));
		for (int k = 0; k < opt.clients; k++) {
			struct client *c = &l->clients[k];
			c->node = (ts_async)TS_ASYNC_INIT;
			c->loop = l;
			c->q.loop = l;
			c->slot = i * opt.clients + k;
			c->rng = (unsigned)(c->slot * 2654435761u) | 1;
		}
	}
	for (int i = 0; i < opt.blocking; i++) {
		struct blocker *b = &r->blockers[i];
		b->r = r;
		b->id = i;
		b->slot = LOOPS * opt.clients + i;
		b->rng = (unsigned)(b->slot * 2654435761u) | 1;
		b->s.seed = (unsigned)(LOOPS + i) + 1;
		sem_init(&b->sem, 0, 0);
		b->q.sem = &b->sem;
	}
	for (int i = 0; i < LOOPS; i++)
		pthread_create(&r->loops[i].th, NULL, loop_main, &r->loops[i]);
	for (int i = 0; i < opt.blocking; i++)
		pthread_create(&r->blockers[i].th, NULL, blocker_main, &r->blockers[i]);

	pthread_barrier_wait(&r->start);
	sleep_ms(WARMUP_MS);
	atomic_store(&alloc_calls, 0);
	atomic_store(&alloc_counting, true);
	atomic_store(&r->phase, MEASURE);
	int64_t t0 = ts_now_ns();
	sleep_ms(ms);
	atomic_store(&r->phase, DRAIN);
	int64_t t1 = ts_now_ns();
	atomic_store(&alloc_counting, false);
	unsigned long allocs = atomic_load(&alloc_calls);

	int64_t limit = t1 + DRAIN_LIMIT_NS;
	for (int i = 0; i < opt.blocking; i++)
		join_or_report(r, r->blockers[i].th, limit, "a blocking thread");
	if (impl == I_LIBUV) {
		while (atomic_load(&r->loops_done) < LOOPS) {
			if (ts_now_ns() > limit)
				join_or_report(r, r->loops[0].th, limit, "a loop");
			sleep_ms(1);
		}
		/* every thread is past its last return: no send is in flight */
		atomic_store(&r->closing, 1);
		for (int i = 0; i < LOOPS; i++)
			uv_async_send(&r->loops[i].async);
	}
	for (int i = 0; i < LOOPS; i++)
		join_or_report(r, r->loops[i].th, limit, "a loop thread");

	struct result res = { 0 };
	struct counts sum = { 0 };
	long loop_completions = 0;
	uint64_t fdw = 0, pushed = 0;
	struct samples *ls[LOOPS], *bs[MAX_BLOCKING];
	for (int i = 0; i < LOOPS; i++) {
		struct loop *l = &r->loops[i];
		sum.completions += l->c.completions;
		sum.waits += l->c.waits;
		sum.sends += l->c.sends;
		loop_completions += l->c.completions;
		fdw += l->at_drain.fd_writes - l->at_measure.fd_writes;
		pushed += l->at_drain.completions - l->at_measure.completions;
		ls[i] = &l->s;
	}
	for (int i = 0; i < opt.blocking; i++) {
		struct blocker *b = &r->blockers[i];
		sum.completions += b->c.completions;
		sum.waits += b->c.waits;
		sum.sends += b->c.sends;
		bs[i] = &b->s;
		sem_destroy(&b->sem);
	}
	res.rate = (double)sum.completions / ((double)(t1 - t0) / 1e9);
	res.blocking_rate = (double)(sum.completions - loop_completions) / ((double)(t1 - t0) / 1e9);
	res.p50 = merged_quantile(ls, LOOPS, 0.50);
	res.p99 = merged_quantile(ls, LOOPS, 0.99);
	res.blocking_p99 = merged_quantile(bs, opt.blocking, 0.99);
	if (impl == I_TURNSTILE)
		res.fd_writes = pushed ? (double)fdw / (double)pushed : 0;
	else
		res.fd_writes = loop_completions ? (double)sum.sends / (double)loop_completions : 0;
	res.allocs = sum.waits ? (double)allocs / (double)sum.waits : 0;
	if (audit_out) {
		*audit_out = r->a;
		audit_out->e = NULL;
	}

	if (impl == I_TURNSTILE) {
		int64_t avail, waiting;
		ts_turnstile_snapshot(r->ts, &avail, &waiting);
		if (avail != conc || waiting != 0) {
			fprintf(stderr, "async_loop: after the drain the turnstile has %lld free "
					"of %d and %lld queued\n",
				(long long)avail, conc, (long long)waiting);
			exit(3);
		}
		ts_turnstile_free(r->ts);
	} else {
		if (r->free_passes != conc || r->n != 0) {
			fprintf(stderr, "async_loop: libuv comparator left %lld free of %d\n",
				(long long)r->free_passes, conc);
			exit(3);
		}
		pthread_mutex_destroy(&r->mu);
		free(r->heap);
	}
	for (int i = 0; i < LOOPS; i++)
		free(r->loops[i].clients);
	pthread_mutex_destroy(&r->a.mu);
	pthread_barrier_destroy(&r->start);
	free(r->a.e);
	free(r);
	return res;
}

/* ---- reporting ------------------------------------------------------------------ */

static void report(const char *scenario, const char *config, const char *metric,
		   double v[N_IMPLS][MAX_REPEATS], int repeats, const char *unit, const char *fmt)
{
	double base = median(v[I_LIBUV], repeats);
	for (int k = 0; k < N_IMPLS; k++) {
		if (!impl_selected(k))
			continue;
		double m = median(v[k], repeats);
		double ratio = impl_selected(I_LIBUV) && base > 0 ? m / base : 0.0;
		char med[32], lo[32], hi[32];
		snprintf(med, sizeof(med), fmt, m);
		snprintf(lo, sizeof(lo), fmt, minimum(v[k], repeats));
		snprintf(hi, sizeof(hi), fmt, maximum(v[k], repeats));
		printf("| %s | %s | %s | %s%s | %s–%s | %.2f |\n", config, impl_name[k], metric, med,
		       unit, lo, hi, ratio);
		if (csv)
			fprintf(csv, "%s,%s,%s,%s,%.6g,%.6g,%.6g,%.4f,%d\n", scenario, config,
				impl_name[k], metric, m, minimum(v[k], repeats),
				maximum(v[k], repeats), ratio, repeats);
	}
}

static void scenario_load(void)
{
	double rate[N_IMPLS][MAX_REPEATS], p50[N_IMPLS][MAX_REPEATS], p99[N_IMPLS][MAX_REPEATS],
		bp99[N_IMPLS][MAX_REPEATS], fdw[N_IMPLS][MAX_REPEATS], allocs[N_IMPLS][MAX_REPEATS];
	memset(rate, 0, sizeof(rate));
	memset(p50, 0, sizeof(p50));
	memset(p99, 0, sizeof(p99));
	memset(bp99, 0, sizeof(bp99));
	memset(fdw, 0, sizeof(fdw));
	memset(allocs, 0, sizeof(allocs));
	for (int rep = 0; rep < opt.repeats; rep++)
		for (int k = 0; k < N_IMPLS; k++) {
			if (!impl_selected(k))
				continue;
			struct result res = run_once(k, opt.conc, opt.ms, false, NULL);
			rate[k][rep] = res.rate;
			p50[k][rep] = res.p50;
			p99[k][rep] = res.p99;
			bp99[k][rep] = res.blocking_p99;
			fdw[k][rep] = res.fd_writes;
			allocs[k][rep] = res.allocs;
			if (getenv("ASYNC_LOOP_VERBOSE"))
				fprintf(stderr, "%s rep %d: %.0f/s (blocking %.0f/s) p50 %.1f p99 %.1f us "
						"blocking p99 %.1f us fdw %.3f allocs %.4f\n",
					impl_name[k], rep, res.rate, res.blocking_rate, res.p50, res.p99,
					res.blocking_p99, res.fd_writes, res.allocs);
		}
	char config[96];
	snprintf(config, sizeof(config), "L=%dx%d B=%d C=%d hold=%lldns", LOOPS, opt.clients,
		 opt.blocking, opt.conc, (long long)opt.hold);
	printf("\n### Event-loop waiters: %d libuv loops x %d clients + %d blocking threads, "
	       "C=%d, hold %lld ns, bands 0-%d at random (%d repeats of %d ms, alternating; "
	       "ratio = to libuv)\n\n",
	       LOOPS, opt.clients, opt.blocking, opt.conc, (long long)opt.hold, BANDS - 1,
	       opt.repeats, opt.ms);
	printf("| config | implementation | metric | median | min–max | ratio |\n");
	printf("|---|---|---|---:|---:|---:|\n");
	report("async", config, "completions/s", rate, opt.repeats, " /s", "%.4g");
	report("async", config, "wait p50", p50, opt.repeats, " us", "%.4g");
	report("async", config, "wait p99", p99, opt.repeats, " us", "%.4g");
	report("async", config, "blocking wait p99", bp99, opt.repeats, " us", "%.4g");
	report("async", config, "fd writes/completion", fdw, opt.repeats, "", "%.3f");
	report("async", config, "allocations/wait", allocs, opt.repeats, "", "%.4f");
}

static void scenario_audit(void)
{
	int ms = opt.audit_ms ? opt.audit_ms : opt.ms;
	printf("\n### Event-loop order check: C=1, %d loops x %d clients + %d blocking threads, "
	       "%d ms each; an admission is a violation if a better claim was queued when the "
	       "pass was returned\n\n",
	       LOOPS, opt.clients, opt.blocking, ms);
	printf("| implementation | admissions | checked returns | unchecked | violations |\n");
	printf("|---|---:|---:|---:|---:|\n");
	for (int k = 0; k < N_IMPLS; k++) {
		if (!impl_selected(k))
			continue;
		struct audit a;
		run_once(k, 1, ms, true, &a);
		printf("| %s | %ld | %ld | %ld | %ld |\n", impl_name[k], a.admissions, a.verified,
		       a.unverified, a.violations);
		if (csv)
			fprintf(csv, "async_audit,C=1 L=%dx%d B=%d,%s,violations,%ld,%ld,%ld,0,1\n",
				LOOPS, opt.clients, opt.blocking, impl_name[k], a.violations,
				a.violations, a.violations);
	}
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--quick"))
			opt.quick = true;
		else if (!strcmp(a, "--no-audit"))
			opt.audit = false;
		else if (v && !strcmp(a, "--repeats"))
			opt.repeats = atoi(v), i++;
		else if (v && !strcmp(a, "--ms"))
			opt.ms = atoi(v), i++;
		else if (v && !strcmp(a, "--audit-ms"))
			opt.audit_ms = atoi(v), i++;
		else if (v && !strcmp(a, "--csv"))
			opt.csv = v, i++;
		else if (v && !strcmp(a, "--impl"))
			opt.impl = v, i++;
		else if (v && !strcmp(a, "--clients"))
			opt.clients = atoi(v), i++;
		else if (v && !strcmp(a, "--blocking"))
			opt.blocking = atoi(v), i++;
		else if (v && !strcmp(a, "--conc"))
			opt.conc = atoi(v), i++;
		else if (v && !strcmp(a, "--hold"))
			opt.hold = atoll(v), i++;
		else {
			fprintf(stderr,
				"usage: %s [--repeats R] [--ms D] [--csv FILE] [--impl turnstile|libuv]\n"
				"       [--quick] [--clients N] [--blocking B] [--conc C] [--hold NS]\n"
				"       [--audit-ms D] [--no-audit]\n",
				argv[0]);
			return 2;
		}
	}
	if (opt.repeats < 1 || opt.repeats > MAX_REPEATS || opt.ms < 1 || opt.audit_ms < 0 ||
	    opt.clients < 1 || opt.blocking < 0 || opt.blocking > MAX_BLOCKING || opt.conc < 1 ||
	    opt.hold < 0 || (opt.impl && strcmp(opt.impl, "turnstile") && strcmp(opt.impl, "libuv"))) {
		fprintf(stderr, "bad option value\n");
		return 2;
	}
	if (opt.csv && !(csv = fopen(opt.csv, "a"))) {
		perror(opt.csv);
		return 1;
	}
	first_thread();
	scenario_load();
	if (opt.audit)
		scenario_audit();
	if (csv)
		fclose(csv);
	return 0;
}
