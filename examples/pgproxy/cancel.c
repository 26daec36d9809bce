/* SPDX-License-Identifier: MIT */
/* pgproxy: cancel keys.  Each client gets its own pid and key in
 * BackendKeyData; a CancelRequest naming them is forwarded, on a new
 * connection, to the server connection that client holds at that moment. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <unistd.h>

#include "pgproxy.h"

#define CANCEL_REQUEST 80877102

struct canceller {
	struct watch w;
	unsigned char msg[16];
};

#define CANCEL_BUCKETS 1024
#define BUCKET(id) (((uint32_t)(id) * 2654435761u) >> 22) /* of 1024 */
static pthread_mutex_t cancel_mu = PTHREAD_MUTEX_INITIALIZER;
static struct client *cancel_tab[CANCEL_BUCKETS];
static int32_t cancel_next_id;

void cancel_register(struct client *c, int32_t *pid, int32_t *key)
{
	uint32_t k = 0;
	if (getrandom(&k, sizeof(k), 0) != sizeof(k))
		k = (uint32_t)ts_now_ns() * 2654435761u;
	pthread_mutex_lock(&cancel_mu);
	/* --processes: the low bits name the worker (procs_cancel_elsewhere) */
	if (++cancel_next_id <= 0 || cancel_next_id >= INT32_MAX / MAX_PROCESSES)
		cancel_next_id = 1;
	c->id = P.worker < 0 ? cancel_next_id : cancel_next_id * MAX_PROCESSES + P.worker;
	c->key = (int32_t)k;
	c->srv_pid = c->srv_key = 0;
	struct client **head = &cancel_tab[BUCKET(c->id)];
	c->cancel_next = *head;
	*head = c;
	c->registered = true;
	pthread_mutex_unlock(&cancel_mu);
	*pid = c->id;
	*key = c->key;
}

void cancel_unregister(struct client *c)
{
	if (!c->registered)
		return;
	pthread_mutex_lock(&cancel_mu);
	for (struct client **p = &cancel_tab[BUCKET(c->id)]; *p; p = &(*p)->cancel_next)
		if (*p == c) {
			*p = c->cancel_next;
			break;
		}
	c->registered = false;
	pthread_mutex_unlock(&cancel_mu);
}

void cancel_set_server(struct client *c, int32_t pid, int32_t key)
{
	pthread_mutex_lock(&cancel_mu);
	c->srv_pid = pid;
	c->srv_key = key;
	pthread_mutex_unlock(&cancel_mu);
}

/* The server connection a client's cancel key names, if it holds one now.
 * As with PostgreSQL itself, a cancel that races the end of the query may
 * land on the connection's next query (another client's, here). */
bool cancel_lookup(int32_t pid, int32_t key, int32_t *srv_pid, int32_t *srv_key)
{
	bool found = false;
	if (pid <= 0)
		return false;
	pthread_mutex_lock(&cancel_mu);
	for (struct client *c = cancel_tab[BUCKET(pid)]; c; c = c->cancel_next)
		if (c->id == pid && c->key == key && c->srv_pid) {
			*srv_pid = c->srv_pid;
			*srv_key = c->srv_key;
			found = true;
			break;
		}
	pthread_mutex_unlock(&cancel_mu);
	return found;
}

/* ---------------------------------------------------------------- forwarding */

void cancel_forward(struct loop *l, int32_t srv_pid, int32_t srv_key)
{
	struct canceller *k = calloc(1, sizeof(*k));
	if (!k)
		return;
	k->w = (struct watch){ .kind = K_CANCEL, .loop = l };
	uint32_t v[4] = { 16, CANCEL_REQUEST, (uint32_t)srv_pid, (uint32_t)srv_key };
	for (int i = 0; i < 4; i++)
		for (int b = 0; b < 4; b++)
			k->msg[i * 4 + b] = (unsigned char)(v[i] >> (24 - 8 * b));
	k->w.fd = socket(P.server_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (k->w.fd < 0 || (connect(k->w.fd, (struct sockaddr *)&P.server_addr, P.server_addrlen) != 0 &&
			    errno != EINPROGRESS)) {
		fprintf(stderr, "pgproxy: cannot forward a cancel request: %s\n", strerror(errno));
		if (k->w.fd >= 0)
			close(k->w.fd);
		free(k);
		return;
	}
	l->ncancels++;
	watch_set(&k->w, EPOLLOUT);
}

void cancel_event(struct watch *w, uint32_t events)
{
	struct canceller *k = container_of(w, struct canceller, w);
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(w->fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0 &&
	    send(w->fd, k->msg, sizeof(k->msg), MSG_NOSIGNAL | MSG_DONTWAIT) != sizeof(k->msg))
		err = errno;
	if (err)
		fprintf(stderr, "pgproxy: cannot forward a cancel request: %s\n", strerror(err));
	w->loop->ncancels--;
	watch_close(w);
	loop_fd_freed(w->loop);
}

void cancel_free(struct watch *w) { free(container_of(w, struct canceller, w)); }
