/* SPDX-License-Identifier: MIT */
/* Process-shared turnstiles: the contract of <turnstile/shared.h> call by
 * call — format's and attach's errors, the precedence and errors of
 * wait/return/resize/close on an attached handle, detaching, and fork (a
 * child is a process of its own from its first call). */
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>

#include "procs.h"

static const ts_claim claim0 = { 0, 0, 0 };

static void never_called(ts_async *node, int result, void *arg)
{
	(void)node, (void)result, (void)arg;
	abort();
}

static void format_refuses_what_is_not_a_file(void)
{
	int p[2];
	CHECK(pipe(p) == 0);
	CHECK_EQ(ts_shared_format(-1, 1, NULL), EINVAL);
	CHECK_EQ(ts_shared_format(p[0], 1, NULL), EINVAL);
	int dir = open("/", O_RDONLY | O_DIRECTORY);
	CHECK_EQ(ts_shared_format(dir, 1, NULL), EINVAL);
	close(dir);
	close(p[0]);
	close(p[1]);
	CHECK_EQ(ts_shared_format(p[0], 1, NULL), EINVAL); /* closed */
	errno = 0;
	CHECK(ts_shared_attach(-1) == NULL && errno == EINVAL);

	int fd = memfd_create("bad", MFD_CLOEXEC);
	CHECK_EQ(ts_shared_format(fd, -1, NULL), EINVAL);
	CHECK_EQ(ts_shared_format(fd, TS_SHARED_CONCURRENCY_MAX + 1, NULL), EINVAL);
	ts_shared_limits big = { TS_SHARED_MAX_WAITERS + 1, 0, 0 };
	CHECK_EQ(ts_shared_format(fd, 1, &big), EINVAL);
	ts_shared_limits procs = { 0, TS_SHARED_MAX_PROCESSES + 1, 0 };
	CHECK_EQ(ts_shared_format(fd, 1, &procs), EINVAL);
	ts_shared_limits fast = { 0, 0, TS_SHARED_RECOVER_MIN_NS - 1 };
	CHECK_EQ(ts_shared_format(fd, 1, &fast), EINVAL);
	ts_shared_limits neg = { 0, 0, -5 };
	CHECK_EQ(ts_shared_format(fd, 1, &neg), EINVAL);
	struct stat st;
	CHECK(fstat(fd, &st) == 0 && st.st_size == 0); /* a refused format lays nothing out */
	/* not a turnstile: empty, then garbage */
	errno = 0;
	CHECK(ts_shared_attach(fd) == NULL && errno == EINVAL);
	char junk[8192];
	memset(junk, 0x5a, sizeof(junk));
	CHECK(write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk));
	errno = 0;
	CHECK(ts_shared_attach(fd) == NULL && errno == EINVAL);
	close(fd);
}

static void attach_checks_version_and_layout(void)
{
	int fd = turnstile_file(2, NULL);
	uint32_t version;
	CHECK(pread(fd, &version, 4, 8) == 4);
	uint32_t other = version + 1;
	CHECK(pwrite(fd, &other, 4, 8) == 4);
	errno = 0;
	CHECK(ts_shared_attach(fd) == NULL && errno == EPROTO);
	CHECK(pwrite(fd, &version, 4, 8) == 4);
	/* a header whose limits do not match the file's size */
	uint32_t waiters;
	CHECK(pread(fd, &waiters, 4, 12) == 4);
	uint32_t more = waiters * 4;
	CHECK(pwrite(fd, &more, 4, 12) == 4);
	errno = 0;
	CHECK(ts_shared_attach(fd) == NULL && errno == EINVAL);
	CHECK(pwrite(fd, &waiters, 4, 12) == 4);
	/* a file cut short */
	struct stat st;
	CHECK(fstat(fd, &st) == 0);
	CHECK(ftruncate(fd, st.st_size / 2) == 0);
	errno = 0;
	CHECK(ts_shared_attach(fd) == NULL && errno == EINVAL);
	close(fd);
}

static void format_is_busy_while_attached_and_users_are_capped(void)
{
	ts_shared_limits two = { 4, 2, 0 };
	int fd = turnstile_file(1, &two);
	ts_turnstile *a = ts_shared_attach(fd);
	CHECK(a && ts_shared_is(a));
	CHECK_EQ(ts_shared_format(fd, 1, NULL), EBUSY);
	ts_turnstile *b = ts_shared_attach(fd); /* a second handle counts as a process */
	CHECK(b);
	errno = 0;
	CHECK(ts_shared_attach(fd) == NULL && errno == EUSERS);
	ts_turnstile_free(b);
	b = ts_shared_attach(fd); /* a detached process's slot is free again */
	CHECK(b);
	ts_turnstile_free(b);
	ts_turnstile_free(a);
	CHECK_EQ(ts_shared_format(fd, 1, NULL), 0); /* nobody attached: not busy */
	close(fd);
}

static void one_process_waits_and_returns(void)
{
	int fd = turnstile_file(2, NULL);
	ts_turnstile *t = ts_shared_attach(fd);
	close(fd); /* the handle keeps its own description */
	CHECK(t);
	ts_pass a, b, c;
	CHECK_EQ(ts_turnstile_wait(t, &claim0, 0, NULL, &a), 0);
	CHECK_EQ(ts_turnstile_wait(t, &claim0, 0, NULL, &b), 0);
	CHECK(ts_pass_issued(&a) && ts_pass_issued(&b));
	CHECK_EQ(shared_available(t), 0);
	CHECK_EQ(ts_turnstile_wait(t, &claim0, TS_DEADLINE_NOW, NULL, &c), ETIMEDOUT);
	CHECK(!ts_pass_issued(&c));
	CHECK_EQ(ts_turnstile_wait(t, &claim0, ts_now_ns() + 2000000, NULL, &c), ETIMEDOUT);
	ts_pass_return(&a);
	ts_pass_return(&a); /* a second return of one pass is a no-op */
	CHECK_EQ(shared_available(t), 1);
	/* the fast path: returned into this process's cache, taken back */
	CHECK_EQ(ts_turnstile_wait(t, &claim0, TS_DEADLINE_NOW, NULL, &a), 0);
	ts_pass_return(&a);
	ts_pass_return(&b);
	CHECK_EQ(shared_available(t), 2);
	ts_pass copy = a;
	ts_pass_return(&copy); /* every pass free: a copy's return is ignored */
	CHECK_EQ(shared_available(t), 2);

	ts_cancel tok = TS_CANCEL_INIT;
	ts_cancel_fire(&tok);
	CHECK_EQ(ts_turnstile_wait(t, &claim0, 0, &tok, &a), ECANCELED); /* even with passes free */

	CHECK_EQ(ts_turnstile_resize(t, TS_SHARED_CONCURRENCY_MAX + 1), EINVAL);
	CHECK_EQ(ts_turnstile_resize(t, -1), EINVAL);
	CHECK_EQ(ts_turnstile_resize(t, 1), 0);
	CHECK_EQ(shared_available(t), 1);
	CHECK_EQ(ts_turnstile_wait(t, &claim0, 0, NULL, &a), 0);
	CHECK_EQ(ts_turnstile_resize(t, 0), 0);
	CHECK_EQ(shared_available(t), -1); /* below what is held */
	ts_pass_return(&a);
	CHECK_EQ(shared_available(t), 0);
	CHECK_EQ(ts_turnstile_resize(t, 3), 0);
	CHECK_EQ(shared_available(t), 3);

	/* an event-loop wait granted at once (the queued ones: shared_async.c) */
	ts_notifier *n = ts_notifier_new();
	ts_async node;
	memset(&node, 0, sizeof(node));
	CHECK(n);
	CHECK_EQ(ts_turnstile_wait_async(t, &claim0, 0, NULL, n, &node, never_called, NULL, &a), 0);
	CHECK(ts_pass_issued(&a));
	ts_pass_return(&a);
	CHECK_EQ(ts_turnstile_wait_async(t, &claim0, TS_DEADLINE_NOW, NULL, n, &node, never_called,
					 NULL, &a),
		 0);
	ts_pass_return(&a);
	CHECK_EQ(ts_notifier_free(n), 0);

	int64_t back = -1;
	CHECK_EQ(ts_shared_recover(t, &back), 0);
	CHECK_EQ(back, 0);
	ts_turnstile *priv = ts_turnstile_new(1);
	CHECK_EQ(ts_shared_recover(priv, &back), EINVAL);
	CHECK(!ts_shared_is(priv) && !ts_shared_is(NULL));
	CHECK_EQ(ts_shared_recover(NULL, NULL), EINVAL);
	ts_turnstile_free(priv);

	CHECK(!ts_turnstile_closed(t));
	CHECK_EQ(ts_turnstile_wait(t, &claim0, 0, NULL, &a), 0);
	ts_turnstile_close(t);
	CHECK(ts_turnstile_closed(t));
	CHECK_EQ(ts_turnstile_wait(t, &claim0, 0, NULL, &b), ESHUTDOWN);
	ts_pass_return(&a); /* passes held may still be returned */
	CHECK_EQ(shared_available(t), 3);
	ts_turnstile_free(t);
}

/* Queued event-loop waits are told per band, best band first, as a
 * private turnstile's (the heap is not in band order: copied and sorted). */
static void waiting_by_band_sorts_the_heap(void)
{
	int fd = turnstile_file(0, NULL);
	ts_turnstile *t = ts_shared_attach(fd);
	ts_notifier *n = ts_notifier_new();
	ts_async node[5];
	const int band[5] = { 3, 1, 3, 1, 3 };
	ts_pass p[5];
	int bands[2];
	int64_t waiting[2];
	CHECK(t && n);
	memset(node, 0, sizeof(node));
	for (int i = 0; i < 5; i++)
		CHECK_EQ(ts_turnstile_wait_async(t, &(ts_claim){ band[i], i, 0 }, 0, NULL, n, &node[i],
						 never_called, NULL, &p[i]),
			 EINPROGRESS);
	CHECK_EQ(ts_turnstile_waiting_by_band(t, bands, waiting, 2), 2);
	CHECK(bands[0] == 1 && waiting[0] == 2 && bands[1] == 3 && waiting[1] == 3);
	CHECK_EQ(ts_turnstile_waiting_by_band(t, bands, waiting, 1), 2);
	for (int i = 0; i < 5; i++)
		CHECK_EQ(ts_async_cancel(&node[i]), 0);
	CHECK_EQ(ts_turnstile_waiting_by_band(t, bands, waiting, 2), 0);
	/* the ceiling is the segment's, whoever resized it */
	CHECK_EQ(ts_turnstile_ceiling(t), 0);
	CHECK_EQ(ts_turnstile_resize(t, 7), 0);
	CHECK_EQ(ts_turnstile_ceiling(t), 7);
	CHECK_EQ(ts_notifier_free(n), 0);
	ts_turnstile_free(t);
	close(fd);
}

/* EAGAIN comes at once when max_waiters waits are queued. */
struct queued_arg {
	ts_turnstile *t;
	int result;
};

static void *wait_forever(void *p)
{
	struct queued_arg *q = p;
	ts_pass pass;
	q->result = ts_turnstile_wait(q->t, &claim0, 0, NULL, &pass);
	if (q->result == 0)
		ts_pass_return(&pass);
	return NULL;
}

static void max_waiters_refuses_with_eagain(void)
{
	ts_shared_limits lim = { 2, 0, 0 };
	int fd = turnstile_file(0, &lim);
	ts_turnstile *t = ts_shared_attach(fd);
	pthread_t th[2];
	struct queued_arg q[2] = { { t, -1 }, { t, -1 } };
	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&th[i], NULL, wait_forever, &q[i]) == 0);
	POLL_UNTIL(shared_waiting(t) == 2);
	ts_pass pass;
	CHECK_EQ(ts_turnstile_wait(t, &claim0, 0, NULL, &pass), EAGAIN);
	ts_turnstile_close(t); /* releases both with ESHUTDOWN */
	for (int i = 0; i < 2; i++) {
		CHECK(pthread_join(th[i], NULL) == 0);
		CHECK_EQ(q[i].result, ESHUTDOWN);
	}
	CHECK_EQ(shared_waiting(t), 0);
	ts_turnstile_free(t);
	close(fd);
}

/* A cancel token fired in this process ends a wait parked in the segment. */
struct cancel_arg {
	ts_turnstile *t;
	ts_cancel *tok;
	_Atomic int result;
};

static void *wait_cancellable(void *p)
{
	struct cancel_arg *c = p;
	ts_pass pass;
	int r = ts_turnstile_wait(c->t, &claim0, 0, c->tok, &pass);
	atomic_store(&c->result, r);
	return NULL;
}

static void cancel_ends_a_parked_wait(void)
{
	int fd = turnstile_file(0, NULL);
	ts_turnstile *t = ts_shared_attach(fd);
	ts_cancel tok = TS_CANCEL_INIT;
	struct cancel_arg c = { t, &tok, -1 };
	pthread_t th;
	CHECK(pthread_create(&th, NULL, wait_cancellable, &c) == 0);
	POLL_UNTIL(shared_waiting(t) == 1);
	ts_cancel_fire(&tok);
	CHECK(pthread_join(th, NULL) == 0);
	CHECK_EQ(c.result, ECANCELED);
	CHECK_EQ(shared_waiting(t), 0);
	ts_cancel_destroy(&tok);
	ts_turnstile_free(t);
	close(fd);
}

/* A child of fork is a process of its own: it cannot return the parent's
 * pass, its own passes are its own, and detaching frees only its own. */
static ts_turnstile *forked_t;
static ts_pass parents_pass;

static int child_of_fork(void *arg)
{
	(void)arg;
	ts_pass mine, more;
	ts_pass_return(&parents_pass); /* not the child's: ignored */
	CHECK_EQ(shared_available(forked_t), 1);
	CHECK_EQ(ts_turnstile_wait(forked_t, &claim0, TS_DEADLINE_NOW, NULL, &mine), 0);
	CHECK_EQ(shared_available(forked_t), 0);
	/* registered and holding one of its own: the parent's copy is still
	 * not the child's, and must not turn the child's into a free one */
	ts_pass copy = parents_pass;
	ts_pass_return(&copy);
	CHECK_EQ(ts_turnstile_wait(forked_t, &claim0, TS_DEADLINE_NOW, NULL, &more), ETIMEDOUT);
	return 0; /* exits holding `mine`: it must come back */
}

static void fork_makes_a_process_of_its_own(void)
{
	int fd = turnstile_file(2, NULL);
	forked_t = ts_shared_attach(fd);
	CHECK_EQ(ts_turnstile_wait(forked_t, &claim0, 0, NULL, &parents_pass), 0);
	reap_ok(spawn(child_of_fork, NULL));
	int64_t back = -1;
	CHECK_EQ(ts_shared_recover(forked_t, &back), 0);
	CHECK_EQ(back, 1); /* the child's pass, not the parent's */
	CHECK_EQ(shared_available(forked_t), 1);
	ts_pass_return(&parents_pass);
	CHECK_EQ(shared_available(forked_t), 2);
	ts_turnstile_free(forked_t);
	close(fd);
}

/* Detaching while holding passes gives them back (and to a waiter). */
static int hold_then_detach(void *arg)
{
	int fd = *(int *)arg;
	ts_turnstile *t = ts_shared_attach(fd);
	ts_pass p;
	CHECK(t);
	CHECK_EQ(ts_turnstile_wait(t, &claim0, 0, NULL, &p), 0);
	POLL_UNTIL(shared_waiting(t) == 1);
	ts_turnstile_free(t);
	return 0;
}

static void detach_gives_passes_back(void)
{
	int fd = turnstile_file(1, NULL);
	ts_turnstile *t = ts_shared_attach(fd);
	ts_pass p;
	CHECK_EQ(ts_turnstile_wait(t, &claim0, 0, NULL, &p), 0);
	pid_t child = spawn(hold_then_detach, &fd);
	ts_pass_return(&p);
	POLL_UNTIL(shared_available(t) == 0); /* the child took it */
	CHECK_EQ(ts_turnstile_wait(t, &claim0, ts_now_ns() + PATIENCE_NS, NULL, &p), 0);
	reap_ok(child);
	ts_pass_return(&p);
	CHECK_EQ(shared_available(t), 1);
	ts_turnstile_free(t);
	close(fd);
}

/* A holder dies and nobody calls ts_shared_recover: waits too short to
 * end a park slice still bring its pass back, within about recover_ns. */
static int hold_and_die(void *arg)
{
	int fd = *(int *)arg;
	ts_turnstile *t = ts_shared_attach(fd);
	ts_pass p;
	CHECK(t);
	CHECK_EQ(ts_turnstile_wait(t, &claim0, 0, NULL, &p), 0);
	return 0;
}

static void short_waits_recover_a_dead_holder(void)
{
	ts_shared_limits lim = { 0, 0, 40000000 }; /* recover_ns 40 ms */
	int fd = turnstile_file(1, &lim);
	ts_turnstile *t = ts_shared_attach(fd);
	reap_ok(spawn(hold_and_die, &fd));
	int64_t start = ts_now_ns();
	ts_pass p;
	int tries = 0;
	while (ts_turnstile_wait(t, &claim0, ts_now_ns() + 5000000, NULL, &p) == ETIMEDOUT) {
		tries++;
		CHECK(ts_now_ns() - start < PATIENCE_NS);
	}
	printf("shared_api: a dead holder's pass came back to 5 ms waits after %.1f ms "
	       "(%d tries, recover_ns 40 ms)\n", (double)(ts_now_ns() - start) / 1e6, tries);
	fflush(stdout);
	ts_pass_return(&p);
	ts_turnstile_free(t);
	close(fd);
}

/* A zombie (exited, not reaped) is dead: its pass comes back before its
 * parent reaps it, and its slot counts for neither EUSERS nor EBUSY. */
static void zombies_are_dead(void)
{
	ts_shared_limits two = { 4, 2, 0 };
	int fd = turnstile_file(1, &two);
	ts_turnstile *t = ts_shared_attach(fd);
	pid_t z = spawn(hold_and_die, &fd); /* attaches: both slots taken */
	POLL_UNTIL(shared_available(t) == 0);
	siginfo_t si;
	CHECK(waitid(P_PID, (id_t)z, &si, WEXITED | WNOWAIT) == 0); /* exited, still a zombie */
	int64_t back = -1;
	CHECK_EQ(ts_shared_recover(t, &back), 0);
	CHECK_EQ(back, 1);
	CHECK_EQ(shared_available(t), 1);
	ts_turnstile *again = ts_shared_attach(fd); /* the zombie's slot is free */
	CHECK(again);
	ts_turnstile_free(again);
	reap_ok(z);
	ts_turnstile_free(t);
	CHECK_EQ(ts_shared_format(fd, 1, NULL), 0); /* nobody attached: not busy */
	close(fd);
}

int main(void)
{
	format_refuses_what_is_not_a_file();
	attach_checks_version_and_layout();
	format_is_busy_while_attached_and_users_are_capped();
	one_process_waits_and_returns();
	max_waiters_refuses_with_eagain();
	waiting_by_band_sorts_the_heap();
	cancel_ends_a_parked_wait();
	fork_makes_a_process_of_its_own();
	detach_gives_passes_back();
	short_waits_recover_a_dead_holder();
	zombies_are_dead();
	printf("shared_api: ok\n");
	return 0;
}
