/* SPDX-License-Identifier: MIT */
/* A pre-fork server's master and workers sharing one ceiling per database.
 *
 * The master lays out one process-shared turnstile per database in a memfd
 * and forks N workers, which inherit the handles.  Each worker serves
 * "requests": it waits for a pass to the database the request needs (the
 * band says interactive or batch), holds it while it "queries", and
 * returns it.  However many workers there are, no database ever sees more
 * than its ceiling of concurrent queries, and interactive requests go
 * first.  The master reaps workers on SIGCHLD, calls ts_shared_recover so
 * a crashed worker's passes come back at once, and starts a replacement.
 *
 *   prefork [--workers N] [--seconds S] [--crash [--kills K]]
 *
 * --crash kills one worker with SIGKILL every second, to show that its
 * passes come back.  At the end the master closes the turnstiles (the
 * workers see ESHUTDOWN and exit), and checks that every pass is back.
 * Exit status 0 when it is, 1 otherwise. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <turnstile.h>

#define MAX_WORKERS 64

struct database {
	const char *name;
	int64_t ceiling;
	ts_turnstile *t;
};

static struct database dbs[] = { { "orders", 3, NULL }, { "reports", 1, NULL } };
#define NDBS (sizeof(dbs) / sizeof(dbs[0]))

/* Counters the workers share with the master (a MAP_SHARED page). */
struct counters {
	_Atomic long served[NDBS][2]; /* per database, per band */
};
static struct counters *counters;

static void spin_ns(int64_t ns)
{
	int64_t end = ts_now_ns() + ns;
	while (ts_now_ns() < end)
		;
}

/* A worker: serve requests until the turnstiles close. */
static int worker(int id)
{
	unsigned seed = (unsigned)getpid();
	for (;;) {
		size_t d = (size_t)rand_r(&seed) % NDBS;
		int band = rand_r(&seed) % 4 == 0; /* one request in four is batch */
		ts_claim claim = { band, ts_now_ns(), (uint64_t)id };
		ts_pass pass;
		int r = ts_turnstile_wait(dbs[d].t, &claim, 0, NULL, &pass);
		if (r == ESHUTDOWN)
			return 0;
		if (r) {
			fprintf(stderr, "worker %d: %s\n", id, ts_strerror(r));
			return 1;
		}
		spin_ns(band ? 200000 : 50000); /* the query */
		ts_pass_return(&pass);
		atomic_fetch_add(&counters->served[d][band], 1);
	}
}

static pid_t start_worker(int id)
{
	pid_t pid = fork();
	if (pid == 0)
		_exit(worker(id));
	return pid;
}

int main(int argc, char **argv)
{
	int nworkers = 8, seconds = 3, min_kills = 0;
	bool crash = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--workers") && i + 1 < argc)
			nworkers = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--crash"))
			crash = true;
		else if (!strcmp(argv[i], "--kills") && i + 1 < argc)
			min_kills = atoi(argv[++i]); /* and run on until K were killed */
		else {
			fprintf(stderr, "usage: prefork [--workers N] [--seconds S] [--crash [--kills K]]\n");
			return 2;
		}
	}
	if (nworkers < 1 || nworkers > MAX_WORKERS || seconds < 1) {
		fprintf(stderr, "prefork: 1 to %d workers, at least 1 second\n", MAX_WORKERS);
		return 2;
	}
	counters = mmap(NULL, sizeof(*counters), PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (counters == MAP_FAILED)
		return perror("mmap"), 1;
	for (size_t d = 0; d < NDBS; d++) {
		int fd = memfd_create(dbs[d].name, MFD_CLOEXEC);
		int r = fd < 0 ? errno : ts_shared_format(fd, dbs[d].ceiling, NULL);
		if (r || !(dbs[d].t = ts_shared_attach(fd))) {
			fprintf(stderr, "prefork: %s: %s\n", dbs[d].name, ts_strerror(r ? r : errno));
			return 1;
		}
		close(fd); /* the handle keeps the file */
	}

	/* SIGCHLD is taken synchronously, in the master's loop. */
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	pid_t pids[MAX_WORKERS];
	for (int i = 0; i < nworkers; i++)
		pids[i] = start_worker(i);

	int64_t end = ts_now_ns() + (int64_t)seconds * 1000000000, next_crash = ts_now_ns();
	long crashes = 0, reaped_kills = 0;
	int64_t recovered = 0;
	bool stopping = false;
	int alive = nworkers;
	while (alive > 0) {
		int64_t now = ts_now_ns();
		if (!stopping && now >= end && (!crash || reaped_kills >= min_kills)) {
			stopping = true;
			for (size_t d = 0; d < NDBS; d++)
				ts_turnstile_close(dbs[d].t); /* every worker gets ESHUTDOWN */
		}
		if (crash && !stopping && now >= next_crash) {
			kill(pids[crashes % nworkers], SIGKILL);
			crashes++;
			next_crash = now + 1000000000;
		}
		struct timespec tick = { 0, 100000000 };
		if (sigtimedwait(&chld, NULL, &tick) < 0)
			continue;
		int status;
		pid_t pid;
		while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
			int64_t back = 0;
			for (size_t d = 0; d < NDBS; d++) {
				int64_t n;
				ts_shared_recover(dbs[d].t, &n); /* at once, not after recover_ns */
				back += n;
			}
			recovered += back;
			for (int i = 0; i < nworkers; i++)
				if (pids[i] == pid) {
					if (WIFSIGNALED(status)) {
						printf("worker %d killed by signal %d: %lld pass(es) back\n",
						       i, WTERMSIG(status), (long long)back);
						reaped_kills++;
					}
					if (stopping)
						alive--;
					else
						pids[i] = start_worker(i);
				}
		}
	}

	int failed = 0;
	for (size_t d = 0; d < NDBS; d++) {
		int64_t available, waiting;
		ts_turnstile_snapshot(dbs[d].t, &available, &waiting);
		printf("%-8s ceiling %lld: served %ld interactive, %ld batch; %lld free at the end\n",
		       dbs[d].name, (long long)dbs[d].ceiling, atomic_load(&counters->served[d][0]),
		       atomic_load(&counters->served[d][1]), (long long)available);
		failed |= available != dbs[d].ceiling || waiting != 0;
		ts_turnstile_free(dbs[d].t);
	}
	printf("%ld worker(s) killed, %lld pass(es) recovered\n", crashes, (long long)recovered);
	return failed;
}
