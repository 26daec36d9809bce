/* SPDX-License-Identifier: MIT */
/* kill -9 at random instructions: worker processes run tight wait/return
 * loops on one shared turnstile (deadlines, tries, waits without deadline,
 * several bands) while the parent kills a random one every few
 * milliseconds and starts another.  Checked throughout: the number of
 * current holders across all processes never exceeds the ceiling, and
 * admissions keep coming; at rest, after every worker is dead: available
 * is back to the ceiling and nobody is queued.
 *
 * "Current holders" must not count a dead process, or its passes' next
 * holder would look like one too many.  So a holder marks itself by
 * locking its own robust mutex — after its admission, unlocked before its
 * return — and a holder counts the marks of the others: a mutex whose
 * owner died reads as OWNER_DIED from the moment the kernel walks the dead
 * process's robust list, which it does when the process lets go of its
 * memory, before it closes its files (and so before the turnstile can
 * tell that it died).  The mutexes are glibc's; only this test peeks at
 * their lock word.
 *
 * The marks are read one after another, not at one instant: a mark read
 * held may be let go and another taken before the scan ends, and both
 * would count.  So every admission moves an epoch on before its mark is
 * taken, and a scan counts only if the epoch did not move while it ran:
 * then everyone it counted was admitted before the scan began and still
 * held its mark when read, so all of them held passes at the scan's start.
 *
 * Half the kills are followed by ts_shared_recover (what a master does on
 * SIGCHLD); the other half are left to recovery by the waiters
 * themselves, within recover_ns. */
#include <linux/futex.h>
#include <pthread.h>

#include "procs.h"

#ifndef WORKERS /* -D for other shapes */
#define WORKERS 6
#endif
#ifndef THREADS
#define THREADS 2 /* per worker, on one handle: what ThreadSanitizer sees */
#endif
#ifndef CEILING
#define CEILING 2
#endif
#define MARKS (WORKERS * THREADS)

struct stats {
	_Atomic long admissions, violations, worst, samples;
	_Atomic unsigned long epoch; /* moved on by every admission */
	pthread_mutex_t mark[MARKS];
};

static int fd;
static struct stats *st;
static int seconds = 4;

/* Whether worker @j's mark is held by a live owner. */
static bool marked(int j)
{
	int w = __atomic_load_n(&st->mark[j].__data.__lock, __ATOMIC_SEQ_CST);
	return (w & FUTEX_TID_MASK) && !(w & FUTEX_OWNER_DIED);
}

static void init_mark(int j)
{
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	CHECK(pthread_mutex_init(&st->mark[j], &a) == 0);
	pthread_mutexattr_destroy(&a);
}

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

struct loop_arg {
	ts_turnstile *t;
	int me;
};

static void *loop(void *arg)
{
	struct loop_arg *la = arg;
	ts_turnstile *t = la->t;
	int me = la->me;
	uint64_t x = ((uint64_t)getpid() * 2 + (uint64_t)me) * 0x9e3779b97f4a7c15ull | 1;
	for (;;) {
		uint64_t r = rnd(&x);
		ts_claim c = { (int)(r % 3), (int64_t)(r >> 8 & 1023), r >> 20 & 7 };
		int64_t deadline = r % 4 == 0 ? TS_DEADLINE_NOW
				   : r % 4 == 1 ? ts_now_ns() + (int64_t)(r >> 32 & 0x1fffff)
						: 0;
		ts_pass p;
		int e = ts_turnstile_wait(t, &c, deadline, NULL, &p);
		if (e == ETIMEDOUT)
			continue;
		CHECK_EQ(e, 0);
		atomic_fetch_add(&st->epoch, 1);
		CHECK(pthread_mutex_lock(&st->mark[me]) == 0);
		unsigned long e1 = atomic_load(&st->epoch);
		long holders = 1;
		for (int j = 0; j < MARKS; j++)
			if (j != me)
				holders += marked(j);
		if (atomic_load(&st->epoch) == e1) { /* one instant: e1 */
			atomic_fetch_add(&st->samples, 1);
			if (holders > CEILING)
				atomic_fetch_add(&st->violations, 1);
			long w = atomic_load(&st->worst);
			while (holders > w && !atomic_compare_exchange_weak(&st->worst, &w, holders))
				;
		}
		atomic_fetch_add(&st->admissions, 1);
		for (volatile int k = (int)(r >> 40 & 1023); k > 0; k--)
			;
		CHECK(pthread_mutex_unlock(&st->mark[me]) == 0);
		ts_pass_return(&p);
	}
}

static int worker(void *arg)
{
	int w = (int)(intptr_t)arg;
	ts_turnstile *t = ts_shared_attach(fd);
	pthread_t th[THREADS];
	struct loop_arg la[THREADS];
	CHECK(t);
	for (int k = 0; k < THREADS; k++) {
		la[k] = (struct loop_arg){ t, w * THREADS + k };
		CHECK(pthread_create(&th[k], NULL, loop, &la[k]) == 0);
	}
	pthread_join(th[0], NULL); /* never: the parent kills us */
	return 1;
}

int main(void)
{
	const char *s = getenv("TS_SHARED_KILL_SECONDS");
	if (s)
		seconds = atoi(s);
	st = shared_memory(sizeof(*st));
	for (int j = 0; j < MARKS; j++)
		init_mark(j);
	ts_shared_limits lim = { 64, 64, 20000000 };
	fd = turnstile_file(CEILING, &lim);
	ts_turnstile *t = ts_shared_attach(fd);
	CHECK(t);

	pid_t kids[WORKERS];
	for (int i = 0; i < WORKERS; i++)
		kids[i] = spawn(worker, (void *)(intptr_t)i);
	uint64_t x = 0x2545f4914f6cdd1dull;
	long kills = 0, recovered = 0;
	int64_t end = ts_now_ns() + (int64_t)seconds * 1000000000;
	while (ts_now_ns() < end || kills < 10) {
		/* the kills' timing is the load pattern, not synchronisation */
		usleep(1000 + rnd(&x) % 15000);
		int i = (int)(rnd(&x) % WORKERS);
		int status;
		kill(kids[i], SIGKILL);
		CHECK(waitpid(kids[i], &status, 0) == kids[i]);
		CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL); /* no worker failed */
		kills++;
		for (int k = 0; k < THREADS; k++)
			init_mark(i * THREADS + k); /* a new worker, fresh marks */
		if (rnd(&x) & 1) {
			int64_t back;
			CHECK_EQ(ts_shared_recover(t, &back), 0);
			recovered += back;
		}
		long before = atomic_load(&st->admissions);
		kids[i] = spawn(worker, (void *)(intptr_t)i);
		/* progress: admissions go on after every kill (recovered by
		 * the master or, within recover_ns, by the waiters) */
		POLL_UNTIL(atomic_load(&st->admissions) > before);
	}
	for (int i = 0; i < WORKERS; i++) {
		kill(kids[i], SIGKILL);
		waitpid(kids[i], NULL, 0);
	}
	int64_t back;
	CHECK_EQ(ts_shared_recover(t, &back), 0);
	printf("shared_kill: %ld kills, %ld admissions, %ld passes recovered by the master "
	       "(+%lld at rest), worst %ld holders of %d in %ld samples\n",
	       kills, atomic_load(&st->admissions), recovered, (long long)back,
	       atomic_load(&st->worst), CEILING, atomic_load(&st->samples));
	CHECK_EQ(atomic_load(&st->violations), 0);
	CHECK_EQ(shared_available(t), CEILING);
	CHECK_EQ(shared_waiting(t), 0);
	CHECK(kills >= 10);
	CHECK(atomic_load(&st->samples) > 0);
	ts_turnstile_free(t);
	return 0;
}
