/* SPDX-License-Identifier: MIT */
/* pgproxy: a pass per server connection, where another process or
 * machine has a say in the ceiling (--processes: every worker's
 * connections share one conns turnstile; --fleet: the pool's conns
 * turnstile is a fleet member, its ceiling the share).
 *
 * A client that holds a turn and finds no idle connection takes a conns
 * pass and connects; at the ceiling it first waits a little for one of
 * its own connections to come back (client.c, CONN_PATIENCE_NS), then
 * queues on conns, ordered as its transaction's claim.  The demand for
 * closes is that queue, plus the passes held above a ceiling that was
 * lowered (RESIZE, a smaller fleet share), less the closes already in
 * flight for it (each worker's own count; a close's pass reaches the
 * queue only once the server has hung up).  Whoever has an idle
 * connection claims a unit of demand and closes it (loop 0 every
 * SHARE_NS, and whenever one goes idle).  Two workers claiming the last
 * unit at once close one too many, no more.  A queued waiter always finds
 * one: turns and conns have one ceiling (a fleet's turns follow its share
 * after it), so while it holds a turn and no connection, some connection
 * is idle or on its way back, and the demand stays above zero until a
 * close is in flight for it.
 *
 * A conns pass goes back only once the server has hung up (EOF on the
 * closed connection, which PostgreSQL sends after the backend has left
 * pg_stat_activity and freed its max_connections slot), or after
 * LINGER_NS: else a connection closed here and made elsewhere would
 * overlap on the server, above the ceiling. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pgproxy.h"

/* Without --processes, this process's count is the only one. */
static _Atomic int32_t closing_here[MAX_POOLS];

static _Atomic int32_t *closing(int slot)
{
	return P.worker >= 0 ? procs_closing(slot) : &closing_here[slot];
}

/* Closes wanted for slot @slot's conns turnstile, not yet in flight. */
static int64_t demand(int slot, ts_turnstile *conns)
{
	int64_t avail, waiting;
	ts_turnstile_snapshot(conns, &avail, &waiting);
	int64_t d = waiting + (avail < 0 ? -avail : 0);
	return d - (P.worker >= 0 ? procs_closing_all(slot) : atomic_load(&closing_here[slot]));
}

bool conns_claim_close(int slot, ts_turnstile *conns)
{
	if (demand(slot, conns) <= 0)
		return false;
	atomic_fetch_add(closing(slot), 1);
	return true;
}

void conns_close_done(int slot) { atomic_fetch_sub(closing(slot), 1); }

#define LINGER_NS ((int64_t)2000 * 1000000)

/* A closed server connection whose conns pass waits for the server's EOF.
 * Made by any loop's thread, then loop 0's (linger_mu orders the two). */
struct closer {
	struct watch w;
	ts_pass pass;
	int close_for; /* the slot whose demand it was made for, or -1 */
	int64_t deadline;
	struct closer *next;
};

static pthread_mutex_t linger_mu = PTHREAD_MUTEX_INITIALIZER;
static struct closer *lingering;
static bool loops_gone; /* loop 0 has left: nobody would watch */
static void lingering_drop(void);

/* With no loop left to watch: wait here for the server's EOF, until
 * @deadline at most (at exit only, where blocking harms nobody). */
static void await_hangup(int fd, int64_t deadline)
{
	char junk[4096];
	for (;;) {
		int64_t left = deadline - ts_now_ns();
		struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };
		if (left <= 0 || poll(&p, 1, (int)(left / 1000000) + 1) < 0)
			return;
		ssize_t n = recv(fd, junk, sizeof(junk), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
			return;
	}
}

/* The pass back, then the demand it met no longer in flight (in that
 * order: the queue shrinks before the count does, so nobody closes twice). */
static void pass_back(ts_pass *pass, int close_for)
{
	ts_pass_return(pass);
	if (close_for >= 0)
		conns_close_done(close_for);
}

void conns_linger(int fd, ts_pass *pass, int close_for)
{
	struct closer *k = calloc(1, sizeof(*k));
	pthread_mutex_lock(&linger_mu);
	shutdown(fd, SHUT_WR);
	if (!k || loops_gone) { /* nobody to watch: wait for the hang-up here */
		pthread_mutex_unlock(&linger_mu);
		free(k);
		await_hangup(fd, ts_now_ns() + LINGER_NS);
		close(fd);
		pass_back(pass, close_for);
		return;
	}
	k->w = (struct watch){ .kind = K_CLOSER, .fd = fd, .loop = &P.loops[0] };
	k->pass = *pass;
	k->close_for = close_for;
	*pass = (ts_pass)TS_PASS_NONE;
	k->deadline = ts_now_ns() + LINGER_NS;
	k->next = lingering;
	lingering = k;
	watch_set(&k->w, EPOLLIN | EPOLLRDHUP);
	pthread_mutex_unlock(&linger_mu);
}

/* Under linger_mu, on loop 0: the pass back, the closer to the zombies. */
static void closer_done(struct closer *k)
{
	for (struct closer **q = &lingering; *q; q = &(*q)->next)
		if (*q == k) {
			*q = k->next;
			break;
		}
	pass_back(&k->pass, k->close_for);
	watch_close(&k->w);
}

void conns_closer_event(struct watch *w)
{
	struct closer *k = container_of(w, struct closer, w);
	char junk[4096];
	ssize_t n;
	pthread_mutex_lock(&linger_mu);
	while ((n = recv(w->fd, junk, sizeof(junk), MSG_DONTWAIT)) > 0)
		; /* a goodbye message, perhaps */
	if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
		closer_done(k);
	pthread_mutex_unlock(&linger_mu);
}

void conns_closer_free(struct watch *w) { free(container_of(w, struct closer, w)); }

/* Loop 0, often: a server that has not hung up within LINGER_NS is
 * counted gone anyway. */
static void lingering_expire(void)
{
	int64_t now = ts_now_ns();
	pthread_mutex_lock(&linger_mu);
	for (struct closer *k = lingering, *next; k; k = next) {
		next = k->next;
		if (now >= k->deadline) {
			fprintf(stderr, "pgproxy: a server connection closed %.0f s ago has not hung "
					"up: counted gone\n", (double)LINGER_NS / 1e9);
			closer_done(k);
		}
	}
	pthread_mutex_unlock(&linger_mu);
}

/* At exit: every pass back once its server has hung up (or its time is
 * up), so no other process or proxy opens one more on the server
 * meanwhile. */
static void lingering_drop(void)
{
	pthread_mutex_lock(&linger_mu);
	while (lingering) {
		struct closer *k = lingering;
		lingering = k->next;
		await_hangup(k->w.fd, k->deadline);
		pass_back(&k->pass, k->close_for);
		close(k->w.fd);
		free(k);
	}
	pthread_mutex_unlock(&linger_mu);
}

void conns_tick(void) { lingering_expire(); }

/* Loop 0 has left its loop (the others may still run): closes wait for
 * their hang-up where they are made, and those lingering are waited for
 * now. */
void conns_loops_gone(void)
{
	pthread_mutex_lock(&linger_mu);
	loops_gone = true;
	pthread_mutex_unlock(&linger_mu);
	lingering_drop();
}
