/* SPDX-License-Identifier: MIT */
/* pgproxy: --processes N, a master and N worker processes on one port.
 *
 * Before it forks, the master makes what the workers share:
 *   - a directory under /dev/shm with two process-shared turnstiles per
 *     pool slot: turns-NNN orders the pool's transactions across every
 *     worker (its ceiling is the pool size), conns-NNN holds one pass per
 *     server connection open in any worker (the same ceiling), so the
 *     database never sees more than the pool size from all of them;
 *   - a table in shared memory naming each slot's database;
 *   - the TCP port, bound with SO_REUSEPORT and never listened on, so it
 *     stays ours while workers come and go (each worker binds and listens
 *     on its own SO_REUSEPORT socket: the kernel spreads connections), and
 *     the Unix socket, which the workers inherit and share.
 * Then it waits for signals.  SIGCHLD: the dead worker's passes go back
 * and its waits leave the queues (ts_shared_recover on every named slot),
 * its clients are gone with it, and a new worker takes its place (after a
 * second when the dead one lived less than a second).  SIGTERM or SIGINT
 * (also sent by a worker's SHUTDOWN): every worker is asked to shut down,
 * and once they have, the directory goes.  SIGHUP: the master and every
 * worker read the auth file again.
 *
 * Server connections live in one process each, and the turn may go to a
 * client of any worker: conns.c says how a worker's client waits for a
 * connection's place and who closes one for it.
 *
 * Cancel keys name their worker (the low bits of the proxy's pid for the
 * client); a worker given another's forwards the request as a datagram to
 * that worker's abstract Unix socket. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <turnstile/shared.h>
#include <unistd.h>

#include "pgproxy.h"

struct slot {
	char db[NAME_LEN];      /* written before named is set, under the table's lock */
	_Atomic bool named;
	_Atomic bool logged_in; /* a login succeeded: the slot stays named */
	_Atomic uint64_t users; /* bit w: worker w has a pool for it */
	_Atomic int64_t size;   /* the ceiling RESIZE last set */
};

struct worker_entry {
	_Atomic pid_t pid;
	int64_t started_ns, restart_at;
	_Atomic uint32_t starts;
	_Atomic bool ready;     /* listening */
	_Atomic int64_t clients; /* connected now */
	_Atomic int32_t closing[MAX_POOLS]; /* closes made for demand, in flight */
};

/* Shared anonymous memory, made before the first fork. */
struct table {
	pthread_mutex_t mu; /* robust: a worker killed holding it leaves it usable */
	pid_t master;
	struct worker_entry w[MAX_PROCESSES];
	struct slot slot[MAX_POOLS];
};

static struct table *T;
static char dir[64];
static int peer_fds[MAX_PROCESSES]; /* each worker's cancel datagrams, bound by the master */
static int peer_fd = -1;             /* this worker's */
/* This process's handles, attached at first use: [0] turns, [1] conns. */
static ts_turnstile *handles[MAX_POOLS][2];
static pthread_mutex_t handles_mu = PTHREAD_MUTEX_INITIALIZER;

static void table_lock(void)
{
	if (pthread_mutex_lock(&T->mu) == EOWNERDEAD) /* every write keeps the table whole */
		pthread_mutex_consistent(&T->mu);
}

static void table_unlock(void) { pthread_mutex_unlock(&T->mu); }

static void file_name(char *out, size_t n, int slot, int which)
{
	snprintf(out, n, "%s/%s-%03d", dir, which ? "conns" : "turns", slot);
}

/* This process's handle on a slot's turnstile (NULL: attach failed, logged). */
static ts_turnstile *handle(int slot, int which)
{
	pthread_mutex_lock(&handles_mu);
	ts_turnstile *t = handles[slot][which];
	if (!t) {
		char path[128];
		file_name(path, sizeof(path), slot, which);
		int fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd >= 0) {
			t = handles[slot][which] = ts_shared_attach(fd);
			close(fd);
		}
		if (!t)
			fprintf(stderr, "pgproxy: cannot attach %s: %s\n", path, strerror(errno));
	}
	pthread_mutex_unlock(&handles_mu);
	return t;
}

ts_turnstile *procs_turns(int slot) { return handle(slot, 0); }
ts_turnstile *procs_conns(int slot) { return handle(slot, 1); }

static int resize_both(int slot, int64_t size)
{
	ts_turnstile *t = handle(slot, 0), *c = handle(slot, 1);
	int err = t && c ? ts_turnstile_resize(t, size) : ENOMEM;
	if (!err)
		err = ts_turnstile_resize(c, size);
	return err;
}

int procs_pool_claim(const char *db, int *err)
{
	int found = -1, free_slot = -1;
	uint64_t me = (uint64_t)1 << P.worker;
	table_lock();
	for (int i = 0; i < MAX_POOLS && found < 0; i++) {
		if (atomic_load(&T->slot[i].named) && !strcmp(T->slot[i].db, db))
			found = i;
		else if (!atomic_load(&T->slot[i].named) && free_slot < 0)
			free_slot = i;
	}
	*err = 0;
	if (found < 0 && free_slot >= 0) {
		/* nobody has it: its turnstiles are idle, and take the
		 * configured size back from the database it named before */
		struct slot *s = &T->slot[free_slot];
		*err = resize_both(free_slot, P.cfg.pool_size);
		if (!*err) {
			snprintf(s->db, sizeof(s->db), "%s", db);
			atomic_store(&s->size, P.cfg.pool_size);
			atomic_store(&s->logged_in, false);
			atomic_store(&s->named, true);
			found = free_slot;
		}
	} else if (found < 0) {
		*err = ENOSPC;
	}
	if (found >= 0)
		atomic_fetch_or(&T->slot[found].users, me);
	table_unlock();
	return found;
}

/* Under the table's lock: a slot nobody has and no login succeeded on is
 * free again (failed logins to made-up databases leave nothing). */
static void slot_maybe_free(struct slot *s)
{
	if (!atomic_load(&s->users) && !atomic_load(&s->logged_in)) {
		atomic_store(&s->named, false);
		s->db[0] = 0;
	}
}

void procs_pool_release(int slot)
{
	table_lock();
	atomic_fetch_and(&T->slot[slot].users, ~((uint64_t)1 << P.worker));
	slot_maybe_free(&T->slot[slot]);
	table_unlock();
}

/* This worker's count of closes in flight for slot @slot's demand, and
 * every worker's together (conns.c). */
_Atomic int32_t *procs_closing(int slot) { return &T->w[P.worker].closing[slot]; }

int64_t procs_closing_all(int slot)
{
	int64_t n = 0;
	for (int w = 0; w < P.cfg.processes; w++)
		n += atomic_load(&T->w[w].closing[slot]);
	return n;
}

void procs_pool_logged_in(int slot) { atomic_store(&T->slot[slot].logged_in, true); }

/* Each slot a login succeeded on, in slot order, with its database (copied
 * under the table's lock; @fn runs without it). */
void procs_each_pool(void (*fn)(int slot, const char *db, void *arg), void *arg)
{
	for (int i = 0; i < MAX_POOLS; i++) {
		char db[NAME_LEN] = "";
		table_lock();
		if (atomic_load(&T->slot[i].named) && atomic_load(&T->slot[i].logged_in))
			snprintf(db, sizeof(db), "%s", T->slot[i].db);
		table_unlock();
		if (db[0])
			fn(i, db, arg);
	}
}

int64_t procs_pool_size(int slot) { return atomic_load(&T->slot[slot].size); }

/* A worker killed between the two resizes leaves the ceilings apart until
 * the next RESIZE (said in the README). */
int procs_pool_resize(const char *db, int64_t size)
{
	int err = ENOENT;
	table_lock();
	for (int i = 0; i < MAX_POOLS && err == ENOENT; i++)
		if (atomic_load(&T->slot[i].named) && !strcmp(T->slot[i].db, db) &&
		    atomic_load(&T->slot[i].logged_in) && !(err = resize_both(i, size)))
			atomic_store(&T->slot[i].size, size);
	table_unlock();
	return err;
}

void procs_request_shutdown(void)
{
	if (getppid() == T->master) /* gone, its pid may be another's */
		kill(T->master, SIGTERM);
}

void procs_ready(void) { atomic_store(&T->w[P.worker].ready, true); }

void procs_clients_add(int n)
{
	if (P.worker >= 0)
		atomic_fetch_add(&T->w[P.worker].clients, n);
}

int procs_each_worker(void (*fn)(int w, pid_t pid, int64_t clients, uint32_t starts, void *arg),
		      void *arg)
{
	for (int w = 0; w < P.cfg.processes; w++)
		fn(w, atomic_load(&T->w[w].pid), atomic_load(&T->w[w].clients),
		   atomic_load(&T->w[w].starts), arg);
	return P.cfg.processes;
}

static bool any_ready(void)
{
	for (int w = 0; w < P.cfg.processes; w++)
		if (atomic_load(&T->w[w].ready))
			return true;
	return false;
}

/* ---------------------------------------------------------------- cancels */

static void peer_addr(struct sockaddr_un *un, socklen_t *len, int worker)
{
	*un = (struct sockaddr_un){ .sun_family = AF_UNIX };
	int n = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1, "pgproxy-%d-%d", (int)T->master,
			 worker);
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int procs_peer_fd(void) { return peer_fd; }

bool procs_cancel_elsewhere(int32_t pid, const unsigned char msg[16])
{
	int owner = (int)((uint32_t)pid % MAX_PROCESSES);
	if (P.worker < 0 || owner == P.worker || owner >= P.cfg.processes)
		return false;
	struct sockaddr_un un;
	socklen_t len;
	peer_addr(&un, &len, owner);
	/* best effort, as a cancel is: a full queue drops it */
	(void)sendto(peer_fd, msg, 16, MSG_DONTWAIT, (struct sockaddr *)&un, len);
	return true;
}

/* Datagrams from our own user only (any local user could send one; the
 * kernel vouches for the sender's uid), 64 at most per event so that a
 * flood cannot hold loop 0. */
void procs_peer_event(struct loop *l)
{
	for (int i = 0; i < 64; i++) {
		unsigned char msg[17];
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(sizeof(struct ucred))];
		} ctl;
		struct iovec iov = { msg, sizeof(msg) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = &ctl,
				     .msg_controllen = sizeof(ctl) };
		ssize_t n = recvmsg(peer_fd, &mh, MSG_DONTWAIT);
		if (n < 0)
			return;
		struct cmsghdr *h = CMSG_FIRSTHDR(&mh);
		struct ucred cred;
		if (n != 16 || !h || h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_CREDENTIALS)
			continue;
		memcpy(&cred, CMSG_DATA(h), sizeof(cred));
		int32_t srv_pid, srv_key;
		if (cred.uid == geteuid() &&
		    cancel_lookup((int32_t)get32(msg + 8), (int32_t)get32(msg + 12), &srv_pid, &srv_key))
			cancel_forward(l, srv_pid, srv_key);
	}
}

/* Before the first fork: each worker's socket, bound for good (a new
 * worker takes its dead predecessor's; nobody else can take the name). */
static void bind_peers(void)
{
	int one = 1;
	for (int w = 0; w < P.cfg.processes; w++) {
		struct sockaddr_un un;
		socklen_t len;
		peer_addr(&un, &len, w);
		peer_fds[w] = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (peer_fds[w] < 0 || setsockopt(peer_fds[w], SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) ||
		    bind(peer_fds[w], (struct sockaddr *)&un, len) != 0) {
			fprintf(stderr, "pgproxy: --processes: the workers' cancel sockets: %s\n",
				strerror(errno));
			exit(1);
		}
	}
}

/* ---------------------------------------------------------------- the master */

static int make_files(void)
{
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(dir, sizeof(dir), "%s/pgproxy.XXXXXX", base);
	if (!mkdtemp(dir))
		return errno;
	/* clients queued per database, all workers together (2 MiB of file
	 * each, touched as used); up to 4 processes per worker at once: the
	 * dead ones until recovered */
	ts_shared_limits lim = { PROCS_MAX_QUEUED, (uint32_t)(4 * P.cfg.processes + 8), 0 };
	for (int i = 0; i < MAX_POOLS; i++)
		for (int which = 0; which < 2; which++) {
			char path[128];
			file_name(path, sizeof(path), i, which);
			int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
			int err = fd < 0 ? errno : ts_shared_format(fd, P.cfg.pool_size, &lim);
			if (fd >= 0)
				close(fd);
			if (err)
				return err;
		}
	return 0;
}

static void remove_files(void)
{
	for (int i = 0; i < MAX_POOLS; i++)
		for (int which = 0; which < 2; which++) {
			char path[128];
			file_name(path, sizeof(path), i, which);
			unlink(path);
		}
	rmdir(dir);
}

static void recover_all(int dead)
{
	int64_t back = 0;
	for (int i = 0; i < MAX_POOLS; i++) {
		if (!atomic_load(&T->slot[i].named))
			continue;
		for (int which = 0; which < 2; which++) {
			ts_turnstile *t = handle(i, which);
			int64_t n = 0;
			if (t && ts_shared_recover(t, &n) == 0 && which == 0)
				back += n;
		}
	}
	table_lock(); /* the dead worker's pools and closes are its no more */
	for (int i = 0; i < MAX_POOLS; i++) {
		atomic_store(&T->w[dead].closing[i], 0);
		atomic_fetch_and(&T->slot[i].users, ~((uint64_t)1 << dead));
		slot_maybe_free(&T->slot[i]);
	}
	table_unlock();
	if (back)
		fprintf(stderr, "pgproxy: worker %d held %lld turns: back to the queue\n", dead,
			(long long)back);
}

/* In the child: returns to main, which runs the proxy as worker @w. */
static bool start_worker(int w, const sigset_t *oldmask)
{
	struct worker_entry *e = &T->w[w];
	fflush(stderr);
	atomic_store(&e->ready, false);
	atomic_store(&e->clients, 0); /* a dead one's are gone with it */
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "pgproxy: cannot start worker %d: %s\n", w, strerror(errno));
		e->restart_at = ts_now_ns() + (int64_t)1000000000;
		return false;
	}
	if (pid == 0) {
		P.worker = w;
		prctl(PR_SET_PDEATHSIG, SIGTERM); /* a master gone: shut down */
		if (getppid() != T->master)
			exit(1);
		pthread_sigmask(SIG_SETMASK, oldmask, NULL);
		return true;
	}
	atomic_store(&e->pid, pid);
	atomic_fetch_add(&e->starts, 1);
	e->started_ns = ts_now_ns();
	e->restart_at = 0;
	return false;
}

static bool worker_failed; /* one died of a signal or failed while stopping */

static void reap(bool stopping)
{
	int status;
	pid_t pid;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		int w = 0;
		while (w < P.cfg.processes && atomic_load(&T->w[w].pid) != pid)
			w++;
		if (w == P.cfg.processes)
			continue;
		atomic_store(&T->w[w].pid, 0);
		recover_all(w);
		bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
		if (stopping && clean)
			continue;
		const char *then = stopping ? "" : ": starting another";
		if (WIFSIGNALED(status))
			fprintf(stderr, "pgproxy: worker %d (pid %d) killed by signal %d%s\n", w, (int)pid,
				WTERMSIG(status), then);
		else
			fprintf(stderr, "pgproxy: worker %d (pid %d) exited with %d%s\n", w, (int)pid,
				WEXITSTATUS(status), then);
		if (stopping) {
			worker_failed = true;
			continue;
		}
		bool brief = ts_now_ns() - T->w[w].started_ns < (int64_t)1000000000;
		T->w[w].restart_at = ts_now_ns() + (brief ? (int64_t)1000000000 : 0);
	}
}

static int live_workers(void)
{
	int n = 0;
	for (int w = 0; w < P.cfg.processes; w++)
		n += atomic_load(&T->w[w].pid) != 0;
	return n;
}

/* The master's loop; returns only in a new worker (true). */
static bool master_run(int sigfd, const sigset_t *oldmask, const char *listening)
{
	bool stopping = false;
	for (;;) {
		int64_t now = ts_now_ns(), next = 0;
		for (int w = 0; w < P.cfg.processes && !stopping; w++) {
			struct worker_entry *e = &T->w[w];
			if (atomic_load(&e->pid) || !e->restart_at)
				continue;
			if (e->restart_at <= now) {
				if (start_worker(w, oldmask))
					return true;
			} else if (!next || e->restart_at < next) {
				next = e->restart_at;
			}
		}
		if (stopping && !live_workers())
			return false;
		if (listening && any_ready()) {
			fputs(listening, stderr);
			listening = NULL;
		}
		struct pollfd pfd = { .fd = sigfd, .events = POLLIN };
		int timeout = next ? (int)((next - now) / 1000000) + 1 : -1;
		if (listening) /* polled until a worker listens: a few milliseconds */
			timeout = 1;
		if (poll(&pfd, 1, timeout) < 0 && errno != EINTR) {
			perror("pgproxy: poll");
			return false;
		}
		struct signalfd_siginfo si;
		while (read(sigfd, &si, sizeof(si)) == sizeof(si)) {
			if (si.ssi_signo == SIGCHLD) {
				reap(stopping);
			} else if (si.ssi_signo == SIGHUP) {
				/* each worker reads the auth file again, and so does the
				 * master, whose copy a restarted worker starts with */
				authfile_reload();
				for (int w = 0; w < P.cfg.processes; w++)
					if (atomic_load(&T->w[w].pid))
						kill(atomic_load(&T->w[w].pid), SIGHUP);
			} else if (!stopping) {
				stopping = true;
				fprintf(stderr, "pgproxy: shutting down %d workers\n", live_workers());
				for (int w = 0; w < P.cfg.processes; w++)
					if (atomic_load(&T->w[w].pid))
						kill(atomic_load(&T->w[w].pid), SIGTERM);
			}
		}
	}
}

static void *shared_anon(size_t size)
{
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	return m == MAP_FAILED ? NULL : m;
}

bool procs_start(const char *listening)
{
	int err;
	if (!(T = shared_anon(sizeof(*T)))) {
		perror("pgproxy: --processes");
		exit(1);
	}
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&T->mu, &a);
	pthread_mutexattr_destroy(&a);
	T->master = getpid();
	if ((err = make_files())) {
		fprintf(stderr, "pgproxy: --processes: cannot make the turnstile files in %s: %s\n", dir,
			strerror(err));
		remove_files();
		exit(1);
	}
	/* the master removes them at exit; after a kill -9 of the master, who
	 * started it must */
	fprintf(stderr, "pgproxy: the workers' turnstiles in %s\n", dir);
	sigset_t sigs, old;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGCHLD);
	pthread_sigmask(SIG_BLOCK, &sigs, &old);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	int sigfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sigfd < 0) {
		perror("pgproxy: signalfd");
		exit(1);
	}
	bind_peers();
	for (int w = 0; w < P.cfg.processes; w++)
		if (start_worker(w, &old))
			goto worker;
	if (master_run(sigfd, &old, listening))
		goto worker;
	close(sigfd);
	remove_files();
	if (worker_failed)
		exit(1);
	return false;
worker:
	close(sigfd);
	for (int w = 0; w < P.cfg.processes; w++)
		if (w != P.worker)
			close(peer_fds[w]);
	peer_fd = peer_fds[P.worker];
	return true;
}

void procs_detach(void)
{
	for (int i = 0; i < MAX_POOLS; i++)
		for (int which = 0; which < 2; which++)
			if (handles[i][which]) {
				ts_turnstile_free(handles[i][which]);
				handles[i][which] = NULL;
			}
	if (peer_fd >= 0)
		close(peer_fd);
}
