/* SPDX-License-Identifier: MIT */
/* Process-shared turnstiles (turnstile/shared.h) against what a user would
 * put in shared memory instead:
 *
 *   turnstile       ts_shared_format on a memfd; every process attaches
 *                   (or, in the recovery scenario, uses the master's handle
 *                   across fork)
 *   robust_pthread  robust_turnstile.c: a robust process-shared mutex over a
 *                   count and a heap of waiters in claim order, a
 *                   process-shared condition variable per waiter, repair on
 *                   EOWNERDEAD
 *   sysv_undo       a System V semaphore, semop with SEM_UNDO (the kernel
 *                   gives a dead holder's unit back; no order)
 *   sem_t           a POSIX semaphore in a shared mapping (no order, nothing
 *                   back from the dead)
 *   robust_mutex    uncontended only: a robust process-shared mutex
 *                   lock+unlock
 *
 *   shared uncontended [--repeats R] [--iters N]
 *        wait+return in one process, ns/op (median, min-max of R repeats,
 *        implementations alternating); CSV on stdout
 *   shared count IMPL [--iters N]
 *        IMPL N times between callgrind start/stop requests
 *   shared syscalls IMPL [--iters N]
 *        IMPL N times between two marker calls write(-1, "ts-bench-begin")
 *        and write(-1, "ts-bench-end"): run under strace -f, the lines in
 *        between are the system calls of the loop
 *   shared handoff [--repeats R] [--ms D] [--procs P] [--conc C] [--hold NS]
 *                  [--impl NAME] [--csv FILE]
 *        P processes each looping wait, busy hold, return
 *   shared audit [--procs P] [--conc C] [--rounds N] [--csv FILE]
 *        order audit across processes, from a log in shared memory
 *   shared recover [--kills K] [--recover-ms M[,M...]] [--csv FILE]
 *        8 processes waiting, the holder killed with SIGKILL: time until
 *        its pass reaches the next waiter
 *
 * See bench/README.md. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/sem.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <valgrind/callgrind.h>

#include <turnstile.h>

#include "comparators.h"
#include "futex_count.h"
#include "robust_turnstile.h"
#include "stats.h"
#include "timing.h"

#define MAXP ROBUST_MAX_PROCS

static struct {
	int repeats, ms, procs, conc, rounds, kills;
	long iters;
	int64_t hold;
	const char *csv, *impl, *recover_ms;
	bool quick;
} opt = { 5, 100, 8, 2, 0, 0, 2000000, 1000, NULL, NULL, "100,20", false };

static FILE *csv;

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void *shm_alloc(size_t n)
{
	void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		die("mmap");
	return m;
}

/* Process-shared futex on a word of a shared mapping (a start barrier). */
static void shared_futex_wait(_Atomic uint32_t *w, uint32_t v, int64_t timeout_ns)
{
	struct timespec ts = { timeout_ns / 1000000000, timeout_ns % 1000000000 };
	syscall(SYS_futex, w, FUTEX_WAIT, v, timeout_ns ? &ts : NULL, NULL, 0);
}

static void shared_futex_wake(_Atomic uint32_t *w)
{
	syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* A fresh turnstile file of ceiling @conc. */
static int turnstile_file(int64_t conc, int64_t recover_ns)
{
	int fd = memfd_create("ts-bench", MFD_CLOEXEC);
	if (fd < 0)
		die("memfd_create");
	ts_shared_limits lim = { 64, 64, recover_ns };
	int e = ts_shared_format(fd, conc, &lim);
	if (e) {
		errno = e;
		die("ts_shared_format");
	}
	return fd;
}

/* ---- the implementations behind one interface --------------------------- */

enum pk { P_TURNSTILE, P_ROBUST, P_SYSV, P_SEM, P_MUTEX, N_PK };
#define N_CONTENDED P_MUTEX /* robust_mutex is a lock, not a turnstile */
static const char *pk_name[N_PK] = { "turnstile", "robust_pthread", "sysv_undo", "sem_t",
				     "robust_mutex" };

union semun {
	int val;
	struct semid_ds *buf;
	unsigned short *array;
};

/* Lives in shared memory: made by the parent before the fork. */
struct pgate {
	enum pk kind;
	int fd, semid;
	sem_t sem;
	pthread_mutex_t mutex;
	struct robust_turnstile rt;
};

/* One process's view. */
struct plocal {
	struct pgate *g;
	ts_turnstile *t;
	int id;
};

static void pgate_init(struct pgate *g, enum pk k, int64_t conc, int64_t recover_ns)
{
	g->kind = k;
	switch (k) {
	case P_TURNSTILE: g->fd = turnstile_file(conc, recover_ns); break;
	case P_ROBUST: robust_init(&g->rt, conc); break;
	case P_SYSV:
		if ((g->semid = semget(IPC_PRIVATE, 1, IPC_CREAT | 0600)) < 0)
			die("semget");
		if (semctl(g->semid, 0, SETVAL, (union semun){ .val = (int)conc }) < 0)
			die("semctl");
		break;
	case P_SEM:
		if (sem_init(&g->sem, 1, (unsigned)conc) < 0)
			die("sem_init");
		break;
	case P_MUTEX: {
		pthread_mutexattr_t a;
		pthread_mutexattr_init(&a);
		pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
		pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
		pthread_mutex_init(&g->mutex, &a);
		pthread_mutexattr_destroy(&a);
		break;
	}
	default: abort();
	}
}

static void pgate_destroy(struct pgate *g)
{
	switch (g->kind) {
	case P_TURNSTILE: close(g->fd); break;
	case P_ROBUST: robust_destroy(&g->rt); break;
	case P_SYSV: semctl(g->semid, 0, IPC_RMID); break;
	case P_SEM: sem_destroy(&g->sem); break;
	case P_MUTEX: pthread_mutex_destroy(&g->mutex); break;
	default: abort();
	}
}

static void pgate_attach(struct plocal *l, struct pgate *g, int id)
{
	l->g = g;
	l->id = id;
	l->t = NULL;
	if (g->kind == P_TURNSTILE && !(l->t = ts_shared_attach(g->fd)))
		die("ts_shared_attach");
	if (g->kind == P_ROBUST)
		robust_attach(&g->rt, id);
}

static void pgate_detach(struct plocal *l)
{
	if (l->t)
		ts_turnstile_free(l->t);
}

static void semop1(int semid, short delta)
{
	struct sembuf b = { 0, delta, SEM_UNDO };
	while (semop(semid, &b, 1) != 0)
		if (errno != EINTR)
			die("semop");
}

static void pgate_wait(struct plocal *l, const ts_claim *c, ts_pass *p)
{
	struct pgate *g = l->g;
	switch (g->kind) {
	case P_TURNSTILE:
		if (ts_turnstile_wait(l->t, c, 0, NULL, p) != 0)
			abort();
		break;
	case P_ROBUST: robust_wait(&g->rt, l->id, c); break;
	case P_SYSV: semop1(g->semid, -1); break;
	case P_SEM:
		while (sem_wait(&g->sem) != 0)
			;
		break;
	default: abort();
	}
}

static void pgate_return(struct plocal *l, ts_pass *p)
{
	struct pgate *g = l->g;
	switch (g->kind) {
	case P_TURNSTILE: ts_pass_return(p); break;
	case P_ROBUST: robust_return(&g->rt, l->id); break;
	case P_SYSV: semop1(g->semid, 1); break;
	case P_SEM: sem_post(&g->sem); break;
	default: abort();
	}
}

/* Waiters queued inside the implementation now (-1: it has no queue). */
static int pgate_queued(struct plocal *l)
{
	int64_t w;
	switch (l->g->kind) {
	case P_TURNSTILE:
		ts_turnstile_snapshot(l->t, NULL, &w);
		return (int)w;
	case P_ROBUST: return robust_queued(&l->g->rt, l->id);
	default: return -1;
	}
}

static bool selected(int k)
{
	return !opt.impl || !strcmp(opt.impl, pk_name[k]);
}

/* ---- processes ------------------------------------------------------------ */

static pid_t spawn(int (*fn)(void *, int), void *arg, int id)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0)
		_exit(fn(arg, id));
	return pid;
}

/* Reap @pid; false (and a message) unless it exited 0. */
static bool reap(pid_t pid, const char *what)
{
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			die("waitpid");
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return true;
	fprintf(stderr, "%s: child %d %s %d\n", what, (int)pid,
		WIFSIGNALED(st) ? "killed by signal" : "exited", WIFSIGNALED(st) ? WTERMSIG(st)
										: WEXITSTATUS(st));
	return false;
}

/* ---- samples -------------------------------------------------------------- */


/* ---- scenario 1: uncontended, one process --------------------------------- */

static struct pgate *ug[N_PK];
static struct plocal ul[N_PK];
static const ts_claim uclaim = { 0, 0, 0 };

static void run_turnstile(long n)
{
	ts_turnstile *t = ul[P_TURNSTILE].t;
	for (long i = 0; i < n; i++) {
		ts_pass p;
		if (ts_turnstile_wait(t, &uclaim, 0, NULL, &p) != 0)
			abort();
		ts_pass_return(&p);
	}
}

static void run_robust(long n)
{
	struct robust_turnstile *r = &ug[P_ROBUST]->rt;
	for (long i = 0; i < n; i++) {
		robust_wait(r, 0, &uclaim);
		robust_return(r, 0);
	}
}

static void run_sysv(long n)
{
	int id = ug[P_SYSV]->semid;
	for (long i = 0; i < n; i++) {
		semop1(id, -1);
		semop1(id, 1);
	}
}

static void run_sem(long n)
{
	sem_t *s = &ug[P_SEM]->sem;
	for (long i = 0; i < n; i++) {
		sem_wait(s);
		sem_post(s);
	}
}

static void run_mutex(long n)
{
	pthread_mutex_t *m = &ug[P_MUTEX]->mutex;
	for (long i = 0; i < n; i++) {
		if (pthread_mutex_lock(m) == EOWNERDEAD)
			pthread_mutex_consistent(m);
		pthread_mutex_unlock(m);
	}
}

static void (*const urun[N_PK])(long) = { run_turnstile, run_robust, run_sysv, run_sem,
					  run_mutex };
/* System calls are ~50x dearer: fewer iterations for the same duration. */
static const int udiv[N_PK] = { 1, 1, 32, 1, 1 };

static void uncontended_setup(void)
{
	for (int k = 0; k < N_PK; k++) {
		ug[k] = shm_alloc(sizeof(struct pgate));
		pgate_init(ug[k], k, 1, 0);
		pgate_attach(&ul[k], ug[k], 0);
	}
}

static void uncontended_teardown(void)
{
	for (int k = 0; k < N_PK; k++) {
		pgate_detach(&ul[k]);
		pgate_destroy(ug[k]);
	}
}

static int find_impl(const char *name)
{
	for (int k = 0; k < N_PK; k++)
		if (!strcmp(pk_name[k], name))
			return k;
	fprintf(stderr, "unknown implementation %s\n", name);
	exit(2);
}

static int scenario_count(const char *name, bool syscalls)
{
	int k = find_impl(name);
	uncontended_setup();
	urun[k](1000); /* warm: resolve PLT entries, register, fill the cache */
	if (syscalls) {
		if (write(-1, "ts-bench-begin", 14) < 0) { /* the marker strace sees */
		}
		urun[k](opt.iters);
		if (write(-1, "ts-bench-end", 12) < 0) {
		}
	} else {
		CALLGRIND_START_INSTRUMENTATION;
		urun[k](opt.iters);
		CALLGRIND_STOP_INSTRUMENTATION;
	}
	uncontended_teardown();
	return 0;
}

static int scenario_uncontended(void)
{
	double ns[N_PK][MAX_REPEATS];
	uncontended_setup();
	for (int k = 0; k < N_PK; k++)
		urun[k](1000);
	for (int r = 0; r < opt.repeats; r++)
		for (int k = 0; k < N_PK; k++) {
			long n = opt.iters / udiv[k] > 0 ? opt.iters / udiv[k] : 1;
			int64_t t0 = ts_now_ns();
			urun[k](n);
			ns[k][r] = (double)(ts_now_ns() - t0) / (double)n;
		}
	uncontended_teardown();
	printf("impl,ns_median,ns_min,ns_max,ratio_to_sysv_undo,repeats,iters\n");
	double base = median(ns[P_SYSV], opt.repeats);
	for (int k = 0; k < N_PK; k++)
		printf("%s,%.2f,%.2f,%.2f,%.4f,%d,%ld\n", pk_name[k], median(ns[k], opt.repeats),
		       minimum(ns[k], opt.repeats), maximum(ns[k], opt.repeats),
		       median(ns[k], opt.repeats) / base, opt.repeats, opt.iters / udiv[k]);
	return 0;
}

/* ---- scenario 2: contended hand-off across processes ---------------------- */

struct child_out {
	long admissions;
	unsigned long futex_waits, futex_wakes;
	struct samples s;
};

struct hrun {
	_Atomic uint32_t ready, go, stop;
	int64_t hold;
	struct pgate g;
	struct child_out out[MAXP];
};

static int handoff_child(void *arg, int id)
{
	struct hrun *h = arg;
	struct child_out *o = &h->out[id];
	struct plocal l;
	pgate_attach(&l, &h->g, id);
	atomic_fetch_add(&h->ready, 1);
	while (!atomic_load(&h->go))
		shared_futex_wait(&h->go, 0, 0);
	unsigned long w0 = atomic_load(&futex_wait_calls), k0 = atomic_load(&futex_wake_calls);
	o->s.seed = (unsigned)id + 1;
	long n = 0;
	while (!atomic_load_explicit(&h->stop, memory_order_relaxed)) {
		ts_pass pass;
		int64_t t0 = ts_now_ns();
		ts_claim c = { 0, t0, (uint64_t)id << 40 | (uint64_t)n };
		pgate_wait(&l, &c, &pass);
		sample(&o->s, (double)(ts_now_ns() - t0));
		spin_ns(h->hold);
		pgate_return(&l, &pass);
		n++;
	}
	o->admissions = n;
	o->futex_waits = atomic_load(&futex_wait_calls) - w0;
	o->futex_wakes = atomic_load(&futex_wake_calls) - k0;
	pgate_detach(&l);
	return 0;
}

static bool failed;

/* One run: admissions/s; wait quantiles p50, p99, p99.9 in q (ns). */
static double run_handoff(struct hrun *h, enum pk k, double q[3], double *fwait, double *fwake)
{
	pid_t pid[MAXP];
	memset(h, 0, sizeof(*h));
	h->hold = opt.hold;
	pgate_init(&h->g, k, opt.conc, 0);
	for (int i = 0; i < opt.procs; i++)
		pid[i] = spawn(handoff_child, h, i);
	int64_t patience = ts_now_ns() + 10000000000;
	while (atomic_load(&h->ready) < (uint32_t)opt.procs && ts_now_ns() < patience)
		usleep(200);
	int64_t t0 = ts_now_ns();
	atomic_store(&h->go, 1);
	shared_futex_wake(&h->go);
	sleep_ms(opt.ms);
	atomic_store(&h->stop, 1);
	double secs = (double)(ts_now_ns() - t0) / 1e9;
	for (int i = 0; i < opt.procs; i++)
		if (!reap(pid[i], pk_name[k]))
			failed = true;
	pgate_destroy(&h->g);

	long admitted = 0, total = 0;
	unsigned long fw = 0, fk = 0;
	for (int i = 0; i < opt.procs; i++) {
		admitted += h->out[i].admissions;
		total += h->out[i].s.n;
		fw += h->out[i].futex_waits;
		fk += h->out[i].futex_wakes;
	}
	double *all = malloc(sizeof(double) * (size_t)(total ? total : 1));
	int n = 0;
	for (int i = 0; i < opt.procs; i++)
		for (int j = 0; j < h->out[i].s.n; j++)
			all[n++] = h->out[i].s.v[j];
	if (!n)
		all[n++] = 0;
	q[0] = quantile(all, n, 0.50);
	q[1] = quantile(all, n, 0.99);
	q[2] = quantile(all, n, 0.999);
	free(all);
	*fwait = admitted ? (double)fw / (double)admitted : 0;
	*fwake = admitted ? (double)fk / (double)admitted : 0;
	return (double)admitted / secs;
}

/* Median (min–max) over repeats and the ratio to robust_pthread. */
static void report(const char *scenario, const char *config, const char *metric,
		   double v[][MAX_REPEATS], int nk, int repeats, const char *unit)
{
	double base = median(v[P_ROBUST], repeats);
	for (int k = 0; k < nk; k++) {
		if (!selected(k))
			continue;
		double m = median(v[k], repeats);
		double ratio = selected(P_ROBUST) && base > 0 ? m / base : 0.0;
		printf("| %s | %s | %s | %.4g %s | %.4g–%.4g | %.2f |\n", config, pk_name[k], metric,
		       m, unit, minimum(v[k], repeats), maximum(v[k], repeats), ratio);
		if (csv)
			fprintf(csv, "%s,%s,%s,%s,%.6g,%.6g,%.6g,%.4f,%d\n", scenario, config,
				pk_name[k], metric, m, minimum(v[k], repeats),
				maximum(v[k], repeats), ratio, repeats);
	}
}

static void report_one(const char *scenario, const char *config, const char *impl,
		       const char *metric, double *v, int repeats)
{
	double m = median(v, repeats);
	printf("| %s | %s | %s | %.3f | %.3f–%.3f | |\n", config, impl, metric, m,
	       minimum(v, repeats), maximum(v, repeats));
	if (csv)
		fprintf(csv, "%s,%s,%s,%s,%.6g,%.6g,%.6g,,%d\n", scenario, config, impl, metric, m,
			minimum(v, repeats), maximum(v, repeats), repeats);
}

static int scenario_handoff(void)
{
	static double rate[N_CONTENDED][MAX_REPEATS], p50[N_CONTENDED][MAX_REPEATS],
		p99[N_CONTENDED][MAX_REPEATS], p999[N_CONTENDED][MAX_REPEATS],
		fwait[MAX_REPEATS], fwake[MAX_REPEATS];
	struct hrun *h = shm_alloc(sizeof(*h));
	char config[64];
	snprintf(config, sizeof(config), "P=%d C=%d hold=%lldns", opt.procs, opt.conc,
		 (long long)opt.hold);
	for (int r = 0; r < opt.repeats; r++)
		for (int k = 0; k < N_CONTENDED; k++) {
			double q[3] = { 0, 0, 0 }, fw = 0, fk = 0;
			rate[k][r] = selected(k) ? run_handoff(h, k, q, &fw, &fk) : 0;
			p50[k][r] = q[0] / 1000;
			p99[k][r] = q[1] / 1000;
			p999[k][r] = q[2] / 1000;
			if (k == P_TURNSTILE)
				fwait[r] = fw, fwake[r] = fk;
		}
	printf("\n### Process-shared hand-off: %d processes, C=%d, hold %lld ns busy (%d repeats "
	       "of %d ms, alternating; ratio = to robust_pthread)\n\n",
	       opt.procs, opt.conc, (long long)opt.hold, opt.repeats, opt.ms);
	printf("| config | implementation | metric | median | min–max | ratio |\n");
	printf("|---|---|---|---:|---:|---:|\n");
	report("shared_handoff", config, "admissions/s", rate, N_CONTENDED, opt.repeats, "/s");
	report("shared_handoff", config, "wait p50", p50, N_CONTENDED, opt.repeats, "us");
	report("shared_handoff", config, "wait p99", p99, N_CONTENDED, opt.repeats, "us");
	report("shared_handoff", config, "wait p99.9", p999, N_CONTENDED, opt.repeats, "us");
	if (selected(P_TURNSTILE)) {
		report_one("shared_handoff", config, "turnstile", "futex waits/admission", fwait,
			   opt.repeats);
		report_one("shared_handoff", config, "turnstile", "futex wakes/admission", fwake,
			   opt.repeats);
	}
	munmap(h, sizeof(*h));
	return failed ? 3 : 0;
}

/* ---- scenario 2b: order audit across processes ----------------------------
 * P processes, ceiling C, random claims.  Every process registers its claim
 * in the log (shared memory, under the audit lock) before it waits and
 * logs its admission when it gets through.  A holder, before returning,
 * waits under the audit lock (which freezes registrations) until every
 * registered waiter is queued inside the implementation and every other
 * running process either waits or holds the other passes; it then logs
 * the return and returns with the audit lock still held, so the waiters
 * queued at that grant are exactly those registered.  Returns are thereby
 * serialised, one grant outstanding at a time.  The parent replays the log:
 * an admission after a return is a violation if a waiter registered at
 * that return has a better claim.  A return that gave up waiting (100 ms)
 * is logged as unsettled and the admission after it is not judged. */

enum { EV_REG, EV_ADM, EV_RET, EV_EXIT };
struct ev {
	int type, proc, settled;
	ts_claim c;
};

struct arun {
	pthread_mutex_t mu;
	int running, conc;
	bool waiting[MAXP];
	long nev, maxev, giveups;
	struct pgate g;
	struct ev log[];
};

static void logev(struct arun *a, int type, int proc, const ts_claim *c, int settled)
{
	if (a->nev < a->maxev)
		a->log[a->nev++] = (struct ev){ type, proc, settled, c ? *c : (ts_claim){ 0, 0, 0 } };
}

static int audit_child(void *arg, int id)
{
	struct arun *a = arg;
	struct plocal l;
	unsigned seed = (unsigned)id * 977u + 1;
	pgate_attach(&l, &a->g, id);
	for (int i = 0; i < opt.rounds; i++) {
		ts_claim c = { rand_r(&seed) % 3, rand_r(&seed) % 1000,
			       (uint64_t)id * 1000000u + (uint64_t)i };
		ts_pass pass;
		pthread_mutex_lock(&a->mu);
		a->waiting[id] = true;
		logev(a, EV_REG, id, &c, 0);
		pthread_mutex_unlock(&a->mu);

		pgate_wait(&l, &c, &pass);

		pthread_mutex_lock(&a->mu);
		a->waiting[id] = false;
		logev(a, EV_ADM, id, &c, 0);
		int64_t give_up = ts_now_ns() + 100000000;
		int settled = 1;
		for (;;) {
			int w = 0;
			for (int j = 0; j < MAXP; j++)
				w += a->waiting[j];
			if (w == pgate_queued(&l) && w >= a->running - a->conc)
				break;
			if (ts_now_ns() > give_up) {
				settled = 0;
				a->giveups++;
				break;
			}
			pthread_mutex_unlock(&a->mu);
			sched_yield();
			pthread_mutex_lock(&a->mu);
		}
		logev(a, EV_RET, id, &c, settled);
		pgate_return(&l, &pass);
		pthread_mutex_unlock(&a->mu);
	}
	/* Detaching frees what this process has cached: an unlogged return,
	 * so it is made under the audit lock and the admission it may lead
	 * to is not judged (the exit disarms, as an unsettled return does). */
	pthread_mutex_lock(&a->mu);
	a->running--;
	pgate_detach(&l);
	logev(a, EV_EXIT, id, NULL, 0);
	pthread_mutex_unlock(&a->mu);
	return 0;
}

static bool claim_better(const ts_claim *x, const ts_claim *y)
{
	return claim_less(x, 0, y, 0);
}

static int scenario_audit(void)
{
	if (!opt.rounds)
		opt.rounds = opt.quick ? 250 : 1000;
	long maxev = (long)opt.procs * (3L * opt.rounds + 1);
	size_t size = sizeof(struct arun) + sizeof(struct ev) * (size_t)maxev;
	struct arun *a = shm_alloc(size);
	printf("\n### Order audit across processes: %d processes, C=%d, %d rounds each, random "
	       "claims; a grant is a violation if a better claim was queued when it was made\n\n",
	       opt.procs, opt.conc, opt.rounds);
	printf("| config | implementation | grants judged | violations | unsettled returns |\n");
	printf("|---|---|---:|---:|---:|\n");
	for (int k = 0; k < 2; k++) { /* turnstile, robust_pthread: the ordered ones */
		if (!selected(k))
			continue;
		memset(a, 0, size);
		pthread_mutexattr_t ma;
		pthread_mutexattr_init(&ma);
		pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
		pthread_mutex_init(&a->mu, &ma);
		pthread_mutexattr_destroy(&ma);
		a->running = opt.procs;
		a->conc = opt.conc;
		a->maxev = maxev;
		pgate_init(&a->g, k, opt.conc, 0);
		pid_t pid[MAXP];
		for (int i = 0; i < opt.procs; i++)
			pid[i] = spawn(audit_child, a, i);
		for (int i = 0; i < opt.procs; i++)
			if (!reap(pid[i], "audit"))
				failed = true;
		pgate_destroy(&a->g);
		pthread_mutex_destroy(&a->mu);

		bool waiting[MAXP] = { false }, snap[MAXP] = { false }, armed = false;
		ts_claim claim[MAXP];
		long judged = 0, violations = 0;
		for (long e = 0; e < a->nev; e++) {
			struct ev *v = &a->log[e];
			switch (v->type) {
			case EV_REG:
				waiting[v->proc] = true;
				claim[v->proc] = v->c;
				break;
			case EV_RET:
				armed = v->settled;
				memcpy(snap, waiting, sizeof(snap));
				break;
			case EV_ADM:
				waiting[v->proc] = false;
				if (!armed)
					break;
				armed = false;
				judged++;
				for (int j = 0; j < opt.procs; j++)
					if (j != v->proc && snap[j] && claim_better(&claim[j], &v->c)) {
						violations++;
						break;
					}
				break;
			case EV_EXIT:
				armed = false;
				break;
			default:
				break;
			}
		}
		char config[32];
		snprintf(config, sizeof(config), "P=%d C=%d", opt.procs, opt.conc);
		printf("| %s | %s | %ld | %ld | %ld |\n", config, pk_name[k], judged, violations,
		       a->giveups);
		if (csv) {
			fprintf(csv, "shared_audit,%s,%s,violations,%ld,%ld,%ld,,1\n", config,
				pk_name[k], violations, violations, violations);
			fprintf(csv, "shared_audit,%s,%s,grants judged,%ld,%ld,%ld,,1\n", config,
				pk_name[k], judged, judged, judged);
			fprintf(csv, "shared_audit,%s,%s,unsettled returns,%ld,%ld,%ld,,1\n",
				config, pk_name[k], a->giveups, a->giveups, a->giveups);
		}
	}
	munmap(a, size);
	return failed ? 3 : 0;
}

/* ---- scenario 3: recovery from kill -9 ------------------------------------
 * Ceiling 1: one holder that sleeps holding its pass, 8 processes queued
 * behind it.  The parent (the master, attached) kills the holder with
 * SIGKILL; the latency is from just before kill(2) to the next waiter's
 * return from its wait (both CLOCK_MONOTONIC).  master: the parent waits
 * for SIGCHLD and calls ts_shared_recover (robust_pthread:
 * robust_recover).  auto: nobody helps; the waiters' own sweeps must
 * notice within recover_ns.  Then the parent reaps the victim, starts a
 * replacement waiter, waits until 8 are queued again and, after a random
 * pause (up to recover_ns / 2 in auto mode, so that the kill lands at any
 * phase of the waiters' slices; up to 2 ms in master mode), kills the new
 * holder. */

#define REC_WAITERS 8

struct rrun {
	_Atomic uint32_t admits;
	_Atomic int64_t t_admit;
	_Atomic int holder_pid, holder_id;
	struct pgate g;
};

static ts_turnstile *rec_t; /* the master's handle, inherited by every child */

static int recover_child(void *arg, int id)
{
	struct rrun *r = arg;
	ts_claim c = { 0, ts_now_ns(), (uint64_t)id };
	ts_pass pass;
	if (r->g.kind == P_TURNSTILE) {
		if (ts_turnstile_wait(rec_t, &c, 0, NULL, &pass) != 0)
			abort();
	} else {
		robust_attach(&r->g.rt, id);
		robust_wait(&r->g.rt, id, &c);
	}
	atomic_store(&r->t_admit, ts_now_ns());
	atomic_store(&r->holder_pid, (int)getpid());
	atomic_store(&r->holder_id, id);
	atomic_fetch_add(&r->admits, 1);
	shared_futex_wake(&r->admits);
	for (;;)
		pause(); /* holding, until killed */
}

static int rec_queued(struct rrun *r, int parent_id)
{
	if (r->g.kind == P_TURNSTILE) {
		int64_t w;
		ts_turnstile_snapshot(rec_t, NULL, &w);
		return (int)w;
	}
	return robust_queued(&r->g.rt, parent_id);
}

static bool wait_admits(struct rrun *r, uint32_t above, int64_t patience_ns)
{
	int64_t end = ts_now_ns() + patience_ns;
	uint32_t v;
	while ((v = atomic_load(&r->admits)) <= above) {
		if (ts_now_ns() > end)
			return false;
		shared_futex_wait(&r->admits, v, 10000000);
	}
	return true;
}

static bool wait_queued(struct rrun *r, int parent_id, int n)
{
	int64_t end = ts_now_ns() + 10000000000;
	while (rec_queued(r, parent_id) < n) {
		if (ts_now_ns() > end)
			return false;
		usleep(200);
	}
	return true;
}

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* One configuration: latencies in ms into lat[], returns how many kills
 * were measured (fewer: a pass never arrived). */
static int run_recover(struct rrun *r, enum pk k, bool master, int64_t recover_ns, double *lat,
		       double *recover_call_ms)
{
	const int parent_id = MAXP - 1;
	pid_t pid[REC_WAITERS + 1] = { 0 }; /* 0: not started (never kill(-1)!) */
	int measured = 0;
	uint64_t x = 0x9e3779b97f4a7c15ull ^ (uint64_t)recover_ns ^ (uint64_t)master;
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	const struct timespec zero = { 0, 0 }, patience = { 5, 0 };

	memset(r, 0, sizeof(*r));
	pgate_init(&r->g, k, 1, recover_ns);
	if (k == P_TURNSTILE) {
		if (!(rec_t = ts_shared_attach(r->g.fd)))
			die("ts_shared_attach");
	} else {
		robust_attach(&r->g.rt, parent_id);
	}
	/* the first holder, then the waiters */
	pid[0] = spawn(recover_child, r, 0);
	if (!wait_admits(r, 0, 10000000000))
		goto lost;
	for (int i = 1; i <= REC_WAITERS; i++)
		pid[i] = spawn(recover_child, r, i);
	if (!wait_queued(r, parent_id, REC_WAITERS))
		goto lost;
	for (int kill_no = 0; kill_no < opt.kills; kill_no++) {
		int64_t pause_ns = master ? (int64_t)(rnd(&x) % 2000000)
					  : (int64_t)(rnd(&x) % (uint64_t)(recover_ns / 2));
		struct timespec ps = { pause_ns / 1000000000, pause_ns % 1000000000 };
		nanosleep(&ps, NULL);
		while (sigtimedwait(&chld, NULL, &zero) > 0)
			;
		uint32_t before = atomic_load(&r->admits);
		int victim_id = atomic_load(&r->holder_id);
		pid_t victim = victim_id >= 0 && victim_id <= REC_WAITERS ? pid[victim_id] : 0;
		if (victim <= 0)
			goto lost;
		int64_t t_kill = ts_now_ns();
		kill(victim, SIGKILL);
		if (master) {
			if (sigtimedwait(&chld, NULL, &patience) != SIGCHLD)
				goto lost;
			if (k == P_TURNSTILE)
				ts_shared_recover(rec_t, NULL);
			else
				robust_recover(&r->g.rt, parent_id);
			recover_call_ms[measured] = (double)(ts_now_ns() - t_kill) / 1e6;
		}
		if (!wait_admits(r, before, 10 * recover_ns + 2000000000))
			goto lost;
		lat[measured++] = (double)(atomic_load(&r->t_admit) - t_kill) / 1e6;
		int st;
		waitpid(victim, &st, 0);
		pid[victim_id] = spawn(recover_child, r, victim_id);
		if (!wait_queued(r, parent_id, REC_WAITERS))
			goto lost;
	}
	goto out;
lost:
	fprintf(stderr, "recover %s %s %lld ms: the pass did not arrive (kill %d)\n", pk_name[k],
		master ? "master" : "auto", (long long)(recover_ns / 1000000), measured + 1);
	failed = true;
out:
	for (int i = 0; i <= REC_WAITERS; i++)
		if (pid[i] > 0) {
			kill(pid[i], SIGKILL);
			waitpid(pid[i], NULL, 0);
		}
	while (sigtimedwait(&chld, NULL, &zero) > 0)
		;
	if (k == P_TURNSTILE) {
		ts_shared_recover(rec_t, NULL);
		ts_turnstile_free(rec_t);
		rec_t = NULL;
	}
	pgate_destroy(&r->g);
	return measured;
}

static void recover_row(const char *config, const char *impl, double *lat, int n,
			double *call_ms, int64_t recover_ns)
{
	if (!n) {
		printf("| %s | %s | 0 | – | – | – | – |\n", config, impl);
		return;
	}
	double p50 = quantile(lat, n, 0.5), p99 = quantile(lat, n, 0.99), mx = maximum(lat, n);
	char call[48] = "–";
	if (call_ms)
		snprintf(call, sizeof(call), "%.3f / %.3f", quantile(call_ms, n, 0.5),
			 maximum(call_ms, n));
	printf("| %s | %s | %d | %.3f | %.3f | %.3f | %s |\n", config, impl, n, p50, p99, mx,
	       call);
	if (csv) {
		fprintf(csv, "shared_recover,%s,%s,latency p50,%.6g,%.6g,%.6g,,%d\n", config, impl,
			p50, minimum(lat, n), mx, n);
		fprintf(csv, "shared_recover,%s,%s,latency p99,%.6g,%.6g,%.6g,,%d\n", config, impl,
			p99, minimum(lat, n), mx, n);
		fprintf(csv, "shared_recover,%s,%s,latency max,%.6g,%.6g,%.6g,,%d\n", config, impl,
			mx, minimum(lat, n), mx, n);
		fprintf(csv, "shared_recover,%s,%s,kills,%d,%d,%d,,1\n", config, impl, n, n, n);
		if (recover_ns)
			fprintf(csv, "shared_recover,%s,%s,recover_ms,%.6g,,,,1\n", config, impl,
				(double)recover_ns / 1e6);
	}
}

static int scenario_recover(void)
{
	if (!opt.kills)
		opt.kills = opt.quick ? 20 : 100;
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL); /* taken with sigtimedwait */
	struct rrun *r = shm_alloc(sizeof(*r));
	double *lat = malloc(sizeof(double) * (size_t)opt.kills);
	double *call = malloc(sizeof(double) * (size_t)opt.kills);
	printf("\n### Recovery from kill -9: %d processes queued on C=1, the holder killed by the "
	       "master; latency from kill(2) to the next waiter's admission, %d kills per row\n\n",
	       REC_WAITERS, opt.kills);
	printf("| config | implementation | kills | p50 ms | p99 ms | max ms | recover call "
	       "returned, p50 / max ms |\n");
	printf("|---|---|---:|---:|---:|---:|---:|\n");
	char list[64];
	snprintf(list, sizeof(list), "%s", opt.recover_ms);
	for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		int64_t rn = (int64_t)(atof(tok) * 1e6);
		for (int master = 1; master >= 0; master--) {
			if (!selected(P_TURNSTILE))
				break;
			char config[64];
			snprintf(config, sizeof(config), "P=%d C=1 recover=%gms %s", REC_WAITERS,
				 (double)rn / 1e6, master ? "master" : "auto");
			int n = run_recover(r, P_TURNSTILE, master, rn, lat, call);
			recover_row(config, "turnstile", lat, n, master ? call : NULL, rn);
		}
	}
	if (selected(P_ROBUST)) {
		char config[64];
		snprintf(config, sizeof(config), "P=%d C=1 master", REC_WAITERS);
		int n = run_recover(r, P_ROBUST, true, 0, lat, call);
		recover_row(config, "robust_pthread", lat, n, call, 0);
	}
	free(lat);
	free(call);
	munmap(r, sizeof(*r));
	return failed ? 3 : 0;
}

/* ---- main ------------------------------------------------------------------ */

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s uncontended|count IMPL|syscalls IMPL|handoff|audit|recover "
				"[options]\n",
			argv[0]);
		return 2;
	}
	const char *scenario = argv[1], *impl_arg = NULL;
	int i = 2;
	if ((!strcmp(scenario, "count") || !strcmp(scenario, "syscalls")) && argc > 2)
		impl_arg = argv[i++];
	for (; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--quick"))
			opt.quick = true;
		else if (v && !strcmp(a, "--repeats"))
			opt.repeats = atoi(v), i++;
		else if (v && !strcmp(a, "--ms"))
			opt.ms = atoi(v), i++;
		else if (v && !strcmp(a, "--iters"))
			opt.iters = atol(v), i++;
		else if (v && !strcmp(a, "--procs"))
			opt.procs = atoi(v), i++;
		else if (v && !strcmp(a, "--conc"))
			opt.conc = atoi(v), i++;
		else if (v && !strcmp(a, "--hold"))
			opt.hold = atoll(v), i++;
		else if (v && !strcmp(a, "--rounds"))
			opt.rounds = atoi(v), i++;
		else if (v && !strcmp(a, "--kills"))
			opt.kills = atoi(v), i++;
		else if (v && !strcmp(a, "--recover-ms"))
			opt.recover_ms = v, i++;
		else if (v && !strcmp(a, "--impl"))
			opt.impl = v, i++;
		else if (v && !strcmp(a, "--csv"))
			opt.csv = v, i++;
		else {
			fprintf(stderr, "unknown option %s\n", a);
			return 2;
		}
	}
	if (opt.repeats < 1 || opt.repeats > MAX_REPEATS || opt.ms < 1 || opt.iters < 1 ||
	    opt.procs < 1 || opt.procs > MAXP - 1 || opt.conc < 1 || opt.rounds < 0 ||
	    opt.kills < 0) {
		fprintf(stderr, "bad option value\n");
		return 2;
	}
	if (opt.csv && !(csv = fopen(opt.csv, "a")))
		die(opt.csv);
	first_thread();
	int rc;
	if (!strcmp(scenario, "uncontended"))
		rc = scenario_uncontended();
	else if (!strcmp(scenario, "count") && impl_arg)
		rc = scenario_count(impl_arg, false);
	else if (!strcmp(scenario, "syscalls") && impl_arg)
		rc = scenario_count(impl_arg, true);
	else if (!strcmp(scenario, "handoff"))
		rc = scenario_handoff();
	else if (!strcmp(scenario, "audit"))
		rc = scenario_audit();
	else if (!strcmp(scenario, "recover"))
		rc = scenario_recover();
	else {
		fprintf(stderr, "unknown scenario %s\n", scenario);
		return 2;
	}
	if (csv)
		fclose(csv);
	return rc;
}
