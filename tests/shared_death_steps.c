/* SPDX-License-Identifier: MIT */
/* Death at every numbered step (fault-injection builds only): lib/shared.c
 * marks each point between two writes of its shared paths with STEP(n),
 * and TS_SHARED_DIE_AT=n:k makes a process _exit there the k-th time it
 * gets there.  For every step and several k, a victim process runs a
 * script that passes every shared path (recovering a process that died,
 * takes under the lock, a queued wait granted by another process,
 * slow returns that grant, a grow and a shrink, a close that ends a
 * waiter, detach) while a helper process loops on wait/return and the
 * parent holds a pass.  After the victim dies the parent recovers, and
 * checks: the helper finishes (no pass lost: it would wait for ever, and
 * it never got a wrong error), and at rest exactly the ceiling's passes
 * can be taken, no more (nothing doubled), with nobody queued.  Every step
 * must have killed the victim at least once: a step the script misses is
 * a failure, not a pass. */
#include <sys/time.h>

#include "procs.h"

#define STEPS 16
#define CEILING 2
#define DIED 86

struct shared_state {
	_Atomic int stop;
	_Atomic int queuing; /* the victim is about to queue behind the parent */
};

static int fd;
static struct shared_state *ss;
static const ts_claim claim0 = { 0, 0, 0 };

/* A child of the victim: its first call registers it, and it dies
 * holding what it got (it may also die at a step: it inherits the
 * victim's TS_SHARED_DIE_AT). */
static ts_turnstile *victims_t;

static int dead_holder(void *arg)
{
	(void)arg;
	ts_pass p;
	ts_turnstile_wait(victims_t, &claim0, TS_DEADLINE_NOW, NULL, &p);
	return 0;
}

static int helper(void *arg)
{
	(void)arg;
	ts_turnstile *t = ts_shared_attach(fd);
	CHECK(t);
	while (!atomic_load(&ss->stop)) {
		ts_pass p;
		int r = ts_turnstile_wait(t, &(ts_claim){ 1, 0, 0 }, 0, NULL, &p);
		if (r == ESHUTDOWN)
			break;
		CHECK_EQ(r, 0);
		ts_pass_return(&p);
	}
	ts_turnstile_free(t);
	return 0;
}

/* The victim's script; with TS_SHARED_DIE_AT set it may die anywhere. */
static int victim(void *arg)
{
	(void)arg;
	ts_turnstile *t = ts_shared_attach(fd);
	ts_pass a, b;
	int64_t back;
	CHECK(t);
	victims_t = t;
	/* a process of its own dies attached: recovered by us */
	pid_t d = spawn(dead_holder, NULL);
	CHECK(waitpid(d, NULL, 0) == d);
	CHECK_EQ(ts_shared_recover(t, &back), 0);
	CHECK_EQ(ts_turnstile_wait(t, &claim0, 0, NULL, &a), 0);
	ts_pass_return(&a); /* to the cache, or to the helper */
	CHECK_EQ(ts_turnstile_wait(t, &claim0, 0, NULL, &a), 0);
	/* the parent and we hold the ceiling: this one queues */
	atomic_store(&ss->queuing, 1);
	CHECK_EQ(ts_turnstile_wait(t, &claim0, 0, NULL, &b), 0);
	ts_pass_return(&a);
	CHECK_EQ(ts_turnstile_resize(t, CEILING + 1), 0);
	CHECK_EQ(ts_turnstile_resize(t, CEILING), 0);
	ts_pass_return(&b);
	/* hold the whole ceiling until the helper queues: the close ends it */
	CHECK_EQ(ts_turnstile_wait(t, &claim0, 0, NULL, &a), 0);
	CHECK_EQ(ts_turnstile_wait(t, &claim0, 0, NULL, &b), 0);
	POLL_UNTIL(shared_waiting(t) >= 1);
	ts_turnstile_close(t);
	ts_pass_return(&a);
	ts_pass_return(&b);
	ts_turnstile_free(t);
	return 0;
}

/* One run: returns whether the victim died at the step. */
static bool run(int step, int nth)
{
	ts_shared_limits lim = { 16, 16, 4000000 };
	fd = turnstile_file(CEILING, &lim);
	atomic_store(&ss->stop, 0);
	atomic_store(&ss->queuing, 0);
	ts_turnstile *t = ts_shared_attach(fd);
	CHECK(t);
	ts_pass held;
	CHECK_EQ(ts_turnstile_wait(t, &claim0, 0, NULL, &held), 0);
	pid_t h = spawn(helper, NULL);

	char env[32];
	snprintf(env, sizeof(env), "%d:%d", step, nth);
	if (getenv("TS_TEST_VERBOSE"))
		fprintf(stderr, "step %s\n", env);
	setenv("TS_SHARED_DIE_AT", env, 1);
	pid_t v = spawn(victim, NULL);
	unsetenv("TS_SHARED_DIE_AT");
	/* The victim queues behind the parent's pass: once it is about to
	 * (or has died before), hand the pass over.  If it went to a cache
	 * first, the victim's queueing collects it. */
	int status = -1;
	int64_t end = ts_now_ns() + PATIENCE_NS;
	while (!atomic_load(&ss->queuing) && waitpid(v, &status, WNOHANG) == 0)
		CHECK(ts_now_ns() < end);
	ts_pass_return(&held);
	if (status == -1)
		status = reap(v);
	CHECK(status != -1 && WIFEXITED(status));
	bool died = WEXITSTATUS(status) == DIED;
	CHECK(died || WEXITSTATUS(status) == 0);

	int64_t back;
	CHECK_EQ(ts_shared_recover(t, &back), 0);
	atomic_store(&ss->stop, 1);
	reap_ok(h); /* ends: no pass lost, no wrong error */
	CHECK_EQ(ts_turnstile_resize(t, CEILING), 0); /* the victim may have died mid-resize */
	CHECK_EQ(shared_waiting(t), 0);
	CHECK_EQ(shared_available(t), CEILING);
	if (!ts_turnstile_closed(t)) {
		ts_pass p[CEILING + 1];
		for (int i = 0; i < CEILING; i++)
			CHECK_EQ(ts_turnstile_wait(t, &claim0, TS_DEADLINE_NOW, NULL, &p[i]), 0);
		CHECK_EQ(ts_turnstile_wait(t, &claim0, TS_DEADLINE_NOW, NULL, &p[CEILING]),
			 ETIMEDOUT);
		for (int i = 0; i < CEILING; i++)
			ts_pass_return(&p[i]);
	}
	ts_turnstile_free(t);
	close(fd);
	return died;
}

static void tick(int sig)
{
	(void)sig;
}

int main(void)
{
	ss = shared_memory(sizeof(*ss));
	/* A signal every millisecond interrupts the parent's waits for a
	 * dead lock owner (EINTR): takeovers must happen all the same. */
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = tick; /* no SA_RESTART */
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval every_ms = { { 0, 1000 }, { 0, 1000 } };
	setitimer(ITIMER_REAL, &every_ms, NULL);
	int missed = 0, deaths = 0;
	for (int step = 1; step <= STEPS; step++) {
		bool hit = false;
		for (int nth = 1; nth <= 3; nth++)
			if (run(step, nth)) {
				hit = true;
				deaths++;
			}
		/* a step the script reaches only in some interleavings */
		for (int again = 0; again < 8 && !hit; again++)
			if (run(step, 1)) {
				hit = true;
				deaths++;
			}
		if (!hit) {
			fprintf(stderr, "shared_death_steps: step %d never reached\n", step);
			missed++;
		}
	}
	printf("shared_death_steps: %d deaths over %d steps, recovered exactly\n", deaths, STEPS);
	return missed ? 1 : 0;
}
