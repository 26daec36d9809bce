/* SPDX-License-Identifier: MIT */
/* pgproxy: clients and server connections.
 *
 * A client is served by one loop thread.  At the first message of a
 * transaction it queues for a turn on its pool's turnstile (its band, then
 * the transaction's age), then takes a server connection from the pool's
 * waitlist (or is handed a creation slot: TS_CREATE, and connects without
 * blocking).  The pass encloses the connection: both go back when the
 * server says ReadyForQuery 'I' and nothing of the client's is left in
 * flight.  Server connections move between loops through the waitlist, so
 * epoll never points at one: a server's fd is watched through `sw`, a
 * watch embedded in the client using it, and every event is only a hint
 * (death is decided by read/write results, never by stale event bits).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <unistd.h>

#include "pgproxy.h"

#define container_of(p, T, m) ((T *)(void *)((char *)(p)-offsetof(T, m)))

#define PROTO_30 196608
#define SSL_REQUEST 80877103
#define GSSENC_REQUEST 80877104
#define CANCEL_REQUEST 80877102
#define MAX_STARTUP 10000
#define MAX_INSPECTED (1024 * 1024) /* server messages read whole */

/* The portal an injected Execute names, so that the server's "portal does
 * not exist" error can be recognized and replaced (see reject_named). */
#define MARKER "pgproxy-named-statement-refused"

enum cstate {
	C_STARTUP,    /* before the startup packet */
	C_IDLE,       /* between transactions: no pass, no server */
	C_WAIT_TURN,  /* queued on the pool's turnstile */
	C_WAIT_CONN,  /* holds a pass, queued on the pool's waitlist */
	C_CONNECTING, /* holds a pass and a creation slot, connecting */
	C_LINKED,     /* holds a pass and a server connection */
	C_ADMIN,      /* the admin console */
};

struct server {
	struct pool *pool;
	int fd;
	enum { S_CONNECTING, S_STARTUP, S_READY } state;
	char user[NAME_LEN];
	int32_t pid, key;
	struct buf in, out;
	uint32_t in_left;  /* rest of the server message being relayed */
	struct buf params; /* startup ParameterStatus, until cached */
};

struct client {
	struct watch w;  /* the client's socket */
	struct watch sw; /* the socket of the server connection it uses */
	struct client *prev, *next, *cancel_next;
	enum cstate state;
	bool login;          /* acquiring only to learn the server's parameters */
	bool closing;        /* flush what is queued, then close */
	bool skipping;       /* dropping messages up to a Sync (refused batch) */
	bool marker_pending; /* an injected Execute's error is to be replaced */
	bool fwd_since_sync; /* extended-protocol messages forwarded since Sync */
	bool queued;         /* counted in pool->waiting[band] */
	bool admin_refused;  /* admin console: refused an extended batch */
	char status;         /* the last ReadyForQuery status relayed */
	char user[NAME_LEN], db[NAME_LEN], app[NAME_LEN], refused_name[NAME_LEN];
	int band;
	struct pool *pool;
	struct server *srv;
	ts_async node;
	ts_pass pass;
	int64_t acq_start, deadline;
	struct buf in, out;
	uint32_t in_left; /* rest of the client message being forwarded... */
	bool in_drop;     /* ...or dropped */
	int pending_z;    /* Sync/Query/FunctionCall forwarded, not yet answered */
	int32_t id, key, srv_pid, srv_key; /* cancel keys (cancel_mu) */
	bool registered;
};

struct canceller {
	struct watch w;
	unsigned char msg[16];
};

static void client_drive(struct client *c);
static void client_close(struct client *c);
static void start_acquire(struct client *c);
static void got_turn(struct client *c);
static void update_masks(struct client *c);

static void client_fatal(struct client *c, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---------------------------------------------------------------- cancel keys */

#define CANCEL_BUCKETS 1024
static pthread_mutex_t cancel_mu = PTHREAD_MUTEX_INITIALIZER;
static struct client *cancel_tab[CANCEL_BUCKETS];
static int32_t cancel_next_id;

void cancel_register(struct client *c, int32_t *pid, int32_t *key)
{
	uint32_t k = 0;
	if (getrandom(&k, sizeof(k), 0) != sizeof(k))
		k = (uint32_t)ts_now_ns() * 2654435761u;
	pthread_mutex_lock(&cancel_mu);
	if (++cancel_next_id <= 0)
		cancel_next_id = 1;
	c->id = cancel_next_id;
	c->key = (int32_t)k;
	c->srv_pid = c->srv_key = 0;
	struct client **head = &cancel_tab[c->id % CANCEL_BUCKETS];
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
	for (struct client **p = &cancel_tab[c->id % CANCEL_BUCKETS]; *p; p = &(*p)->cancel_next)
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
	for (struct client *c = cancel_tab[pid % CANCEL_BUCKETS]; c; c = c->cancel_next)
		if (c->id == pid && c->key == key && c->srv_pid) {
			*srv_pid = c->srv_pid;
			*srv_key = c->srv_key;
			found = true;
			break;
		}
	pthread_mutex_unlock(&cancel_mu);
	return found;
}

/* ---------------------------------------------------------------- sockets */

/* Writes what the socket takes: bytes written, or -1 on a broken socket. */
static ssize_t flush_buf(int fd, struct buf *b)
{
	ssize_t total = 0;
	while (buf_len(b)) {
		ssize_t n = send(fd, buf_data(b), buf_len(b), MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			buf_consume(b, (size_t)n);
			total += n;
		} else if (n < 0 && errno == EINTR) {
			continue;
		} else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			break;
		} else {
			return -1;
		}
	}
	return total;
}

/* Reads what is there, up to HIGH_WATER buffered: 1 if something was
 * read, 0 if nothing, -1 on end of stream or error.  A short read means
 * the socket is drained (epoll is level-triggered and will say when more
 * comes), which saves the read that would only say EAGAIN. */
static int read_buf(int fd, struct buf *b)
{
	int got = 0;
	while (buf_len(b) < HIGH_WATER) {
		if (!buf_reserve(b, 16384))
			return -1;
		size_t room = b->cap - b->w;
		ssize_t n = recv(fd, b->p + b->w, room, MSG_DONTWAIT);
		if (n > 0) {
			b->w += (size_t)n;
			got = 1;
			if ((size_t)n < room)
				break;
		} else if (n == 0) {
			return -1;
		} else if (errno == EINTR) {
			continue;
		} else if (errno == EAGAIN || errno == EWOULDBLOCK) {
			break;
		} else {
			return -1;
		}
	}
	return got;
}

/* ---------------------------------------------------------------- servers */

/* Close a server connection and give its creation slot back (every server
 * connection was made through a TS_CREATE slot). */
static void server_destroy(struct server *s)
{
	if (s->fd >= 0) {
		if (s->state == S_READY) /* tell the server: no "unexpected EOF" in its log */
			(void)send(s->fd, "X\0\0\0\4", 5, MSG_NOSIGNAL | MSG_DONTWAIT);
		close(s->fd);
	}
	struct pool *pool = s->pool;
	buf_free(&s->in);
	buf_free(&s->out);
	buf_free(&s->params);
	free(s);
	ts_waitlist_discard(pool->conns);
}

void server_drop_idle(void *item)
{
	server_destroy(item);
}

/* Unhook the server from the client (and from this loop's epoll). */
static struct server *client_unhook(struct client *c)
{
	struct server *s = c->srv;
	watch_set(&c->sw, 0);
	c->sw.fd = -1;
	c->srv = NULL;
	return s;
}

/* An idle connection taken from the pool is usable when it was made for
 * this user and the server has not closed it (or said anything) since. */
static bool server_usable(struct server *s, const struct client *c)
{
	char byte;
	if (strcmp(s->user, c->user) != 0)
		return false;
	ssize_t n = recv(s->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
	return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* Back to the pool, or closed when the pool has more connections than
 * RESIZE now allows. */
static void pool_put_server(struct pool *pool, struct server *s)
{
	size_t created = 0;
	ts_waitlist_stats(pool->conns, &created, NULL, NULL);
	if ((int64_t)created > atomic_load(&pool->size) || buf_len(&s->in) || s->in_left ||
	    !ts_waitlist_put(pool->conns, s))
		server_destroy(s);
}

/* ---------------------------------------------------------------- login */

static void send_cached_params(struct client *c)
{
	bool app_sent = false;
	pthread_mutex_lock(&c->pool->mu);
	struct user_params *up = c->pool->params;
	while (up && strcmp(up->user, c->user) != 0)
		up = up->next;
	if (up) {
		const char *p = buf_data(&up->msgs), *end = p + buf_len(&up->msgs);
		while (p < end) {
			size_t total = get32(p + 1) + 1;
			if (strcmp(p + 5, "application_name") == 0) { /* the client's own */
				send_param(&c->out, "application_name", c->app);
				app_sent = true;
			} else {
				buf_put(&c->out, p, total);
			}
			p += total;
		}
	}
	pthread_mutex_unlock(&c->pool->mu);
	if (!app_sent)
		send_param(&c->out, "application_name", c->app);
}

static bool params_cached(struct pool *pool, const char *user)
{
	bool found = false;
	pthread_mutex_lock(&pool->mu);
	for (struct user_params *up = pool->params; up && !found; up = up->next)
		found = strcmp(up->user, user) == 0;
	pthread_mutex_unlock(&pool->mu);
	return found;
}

static void send_login(struct client *c)
{
	int32_t pid, key;
	size_t at = msg_begin(&c->out, 'R');
	msg_i32(&c->out, 0); /* AuthenticationOk: clients are trusted (see README) */
	msg_end(&c->out, at);
	if (c->state == C_ADMIN) {
		static const char *params[][2] = {
			{ "server_version", "15.0" }, { "server_encoding", "UTF8" },
			{ "client_encoding", "UTF8" }, { "DateStyle", "ISO, MDY" },
			{ "integer_datetimes", "on" }, { "standard_conforming_strings", "on" },
			{ "TimeZone", "UTC" }, { "is_superuser", "off" },
		};
		for (size_t i = 0; i < sizeof(params) / sizeof(params[0]); i++)
			send_param(&c->out, params[i][0], params[i][1]);
		send_param(&c->out, "application_name", c->app);
		send_param(&c->out, "session_authorization", c->user);
	} else {
		send_cached_params(c);
	}
	cancel_register(c, &pid, &key);
	at = msg_begin(&c->out, 'K');
	msg_i32(&c->out, pid);
	msg_i32(&c->out, key);
	msg_end(&c->out, at);
	send_ready(&c->out, 'I');
}

static int band_for(const char *app, const char *user)
{
	for (int i = 0; i < P.cfg.nrules; i++) {
		const struct band_rule *r = &P.cfg.rules[i];
		if (strcmp(r->key == KEY_APP ? app : user, r->name) == 0)
			return r->band;
	}
	return P.cfg.default_band;
}

static void start_cancel(struct client *c, int32_t srv_pid, int32_t srv_key);

/* The startup packet: true if something was consumed. */
static bool client_startup(struct client *c)
{
	struct buf *in = &c->in;
	if (buf_len(in) < 8)
		return false;
	const char *p = buf_data(in);
	uint32_t len = get32(p), code = get32(p + 4);
	if (len < 8 || len > MAX_STARTUP) {
		client_fatal(c, "08P01", "pgproxy: invalid startup packet length %u", len);
		return true;
	}
	if (buf_len(in) < len)
		return false;
	if (code == SSL_REQUEST || code == GSSENC_REQUEST) {
		buf_consume(in, len);
		buf_put(&c->out, "N", 1); /* no encryption: go on in the clear */
		return true;
	}
	if (code == CANCEL_REQUEST) {
		int32_t srv_pid, srv_key;
		if (len == 16 && cancel_lookup((int32_t)get32(p + 8), (int32_t)get32(p + 12),
					       &srv_pid, &srv_key))
			start_cancel(c, srv_pid, srv_key);
		client_close(c); /* a cancel connection gets no answer */
		return true;
	}
	if (code >> 16 != 3) {
		client_fatal(c, "0A000", "pgproxy: unsupported frontend protocol %u.%u",
			     code >> 16, code & 0xffff);
		return true;
	}
	/* name/value pairs, then a final NUL */
	const char *kv = p + 8, *end = p + len;
	char unknown_opts[256] = "";
	int nunknown = 0;
	bool replication = false;
	while (kv < end && *kv) {
		const char *k = kv, *v = k + strnlen(k, (size_t)(end - k)) + 1;
		if (v >= end)
			break;
		size_t vlen = strnlen(v, (size_t)(end - v));
		if (strcmp(k, "user") == 0)
			snprintf(c->user, sizeof(c->user), "%.*s", (int)vlen, v);
		else if (strcmp(k, "database") == 0)
			snprintf(c->db, sizeof(c->db), "%.*s", (int)vlen, v);
		else if (strcmp(k, "application_name") == 0)
			snprintf(c->app, sizeof(c->app), "%.*s", (int)vlen, v);
		else if (strcmp(k, "replication") == 0)
			replication = strcmp(v, "false") != 0 && strcmp(v, "0") != 0 &&
				      strcmp(v, "off") != 0;
		else if (strncmp(k, "_pq_.", 5) == 0 &&
			 strlen(unknown_opts) + strlen(k) + 2 < sizeof(unknown_opts)) {
			strcat(unknown_opts, k);
			strcat(unknown_opts, "\n");
			nunknown++;
		}
		/* other options (client_encoding, options, DateStyle...) are not
		 * applied: server connections are shared (see README) */
		kv = v + vlen + 1;
	}
	buf_consume(in, len);
	if ((code & 0xffff) > 0 || nunknown) {
		/* NegotiateProtocolVersion: 3.0, and the options it does not know */
		size_t at = msg_begin(&c->out, 'v');
		msg_i32(&c->out, 0);
		msg_i32(&c->out, nunknown);
		for (char *o = unknown_opts, *nl; (nl = strchr(o, '\n')); o = nl + 1) {
			*nl = 0;
			msg_str(&c->out, o);
		}
		msg_end(&c->out, at);
	}
	if (!c->user[0]) {
		client_fatal(c, "28000", "no PostgreSQL user name specified in startup packet");
		return true;
	}
	if (replication) {
		client_fatal(c, "0A000", "pgproxy: replication connections are not supported");
		return true;
	}
	if (!c->db[0])
		snprintf(c->db, sizeof(c->db), "%s", c->user);
	c->band = band_for(c->app, c->user);
	if (strcmp(c->db, "pgproxy") == 0) {
		c->state = C_ADMIN;
		send_login(c);
		return true;
	}
	int err = 0;
	c->pool = pool_get(c->db, &err);
	if (!c->pool) {
		if (err == ESHUTDOWN)
			client_fatal(c, "57P01", "pgproxy is shutting down");
		else
			client_fatal(c, "53300", "pgproxy: cannot make a pool for database \"%s\": %s",
				     c->db, err == ENOSPC ? "too many databases" : strerror(err));
		return true;
	}
	c->state = C_IDLE;
	if (params_cached(c->pool, c->user)) {
		send_login(c);
	} else {
		/* The first client of a user: a server connection tells the
		 * parameters to replay (and whether the database and user exist). */
		c->login = true;
		start_acquire(c);
	}
	return true;
}

/* ---------------------------------------------------------------- acquiring */

static void refuse_batch(struct client *c);

static void acquire_failed(struct client *c, int err)
{
	char text[512];
	const char *code = "08000";
	c->state = C_IDLE;
	if (err == ESHUTDOWN) {
		client_fatal(c, "57P01", "pgproxy is shutting down");
		return;
	}
	if (err == ETIMEDOUT) {
		atomic_fetch_add(&P.bands[c->band].timed_out, 1);
		code = "57014";
		snprintf(text, sizeof(text),
			 "pgproxy: no server connection for database \"%s\" within --wait-timeout "
			 "(%.0f ms in the queue, band %d)",
			 c->db, (double)(ts_now_ns() - c->acq_start) / 1e6, c->band);
	} else {
		snprintf(text, sizeof(text), "pgproxy: no server connection: %s", ts_strerror(err));
	}
	if (c->login) {
		client_fatal(c, code, "%s", text);
		return;
	}
	send_error(&c->out, "ERROR", code, "%s", text);
	refuse_batch(c);
}

static void on_turn(ts_async *node, int result, void *arg)
{
	struct client *c = arg;
	atomic_fetch_sub(&c->pool->waiting[c->band], 1);
	c->queued = false;
	if (result == 0) {
		c->pass = ts_async_pass(node);
		got_turn(c);
	} else {
		acquire_failed(c, result);
	}
	client_drive(c);
}

static void start_acquire(struct client *c)
{
	int64_t now = ts_now_ns();
	ts_claim claim = { c->band, now, atomic_fetch_add(&P.seq, 1) + 1 };
	c->acq_start = now;
	c->deadline = P.cfg.wait_timeout_ns ? now + P.cfg.wait_timeout_ns : 0;
	c->pass = (ts_pass)TS_PASS_NONE;
	c->state = C_WAIT_TURN;
	int r = ts_turnstile_wait_async(c->pool->turns, &claim, c->deadline, NULL,
					c->w.loop->notifier, &c->node, on_turn, c, &c->pass);
	if (r == EINPROGRESS) {
		atomic_fetch_add(&c->pool->waiting[c->band], 1);
		c->queued = true;
	} else if (r == 0) {
		got_turn(c);
	} else {
		acquire_failed(c, r);
	}
}

static void server_create(struct client *c);
static void link_server(struct client *c, struct server *s);

/* A taken idle connection: used, or closed (slot back) and taken again. */
static bool take_item(struct client *c, void *item)
{
	struct server *s = item;
	if (server_usable(s, c)) {
		link_server(c, s);
		return true;
	}
	server_destroy(s);
	return false;
}

static void on_take(ts_async *node, int result, void *arg)
{
	struct client *c = arg;
	if (result == 0) {
		if (!take_item(c, ts_async_item(node)))
			got_turn(c);
	} else if (result == TS_CREATE) {
		server_create(c);
	} else {
		ts_pass_return(&c->pass);
		acquire_failed(c, result);
	}
	client_drive(c);
}

static void got_turn(struct client *c)
{
	for (;;) {
		void *item = NULL;
		c->state = C_WAIT_CONN;
		int r = ts_waitlist_take_async(c->pool->conns, c->deadline, NULL, c->w.loop->notifier,
					       &c->node, on_take, c, &item);
		if (r == 0) {
			if (take_item(c, item))
				return;
			continue;
		}
		if (r == TS_CREATE)
			server_create(c);
		else if (r != EINPROGRESS) {
			ts_pass_return(&c->pass);
			acquire_failed(c, r);
		}
		return;
	}
}

static void release(struct client *c);

static void link_server(struct client *c, struct server *s)
{
	c->srv = s;
	c->sw.fd = s->fd;
	c->state = C_LINKED;
	c->pending_z = 0;
	c->status = 0;
	c->fwd_since_sync = c->marker_pending = false;
	cancel_set_server(c, s->pid, s->key);
	if (c->login) { /* its parameters are cached now */
		c->login = false;
		release(c);
		if (!c->closing) /* unless shutting down */
			send_login(c);
		return;
	}
	struct band_stats *bs = &P.bands[c->band];
	atomic_fetch_add(&bs->admitted, 1);
	hist_add(bs, ts_now_ns() - c->acq_start);
}

/* The transaction is over: the server connection and the pass go back. */
static void release(struct client *c)
{
	if (c->registered)
		cancel_set_server(c, 0, 0);
	struct server *s = client_unhook(c);
	c->state = C_IDLE;
	pool_put_server(c->pool, s);
	ts_pass_return(&c->pass);
	if (atomic_load(&P.shutting_down))
		client_fatal(c, "57P01", "pgproxy is shutting down");
}

/* Give back whatever the client holds or waits for: it is leaving. */
static void client_let_go(struct client *c)
{
	switch (c->state) {
	case C_WAIT_TURN:
		/* 0: withdrawn; EALREADY: the pass it got went to the next in line */
		(void)ts_async_cancel(&c->node);
		if (c->queued) {
			atomic_fetch_sub(&c->pool->waiting[c->band], 1);
			c->queued = false;
		}
		break;
	case C_WAIT_CONN:
		/* 0: withdrawn; EALREADY: a connection it got went to the next
		 * taker or back to the pool */
		(void)ts_async_cancel(&c->node);
		ts_pass_return(&c->pass);
		break;
	case C_CONNECTING:
	case C_LINKED:
		/* mid-transaction or half made: the connection's state is unknown */
		if (c->registered)
			cancel_set_server(c, 0, 0);
		server_destroy(client_unhook(c));
		ts_pass_return(&c->pass);
		break;
	default:
		break;
	}
	if (c->state != C_ADMIN && c->state != C_STARTUP)
		c->state = C_IDLE;
}

/* ---------------------------------------------------------------- server connections */

static void server_failed(struct client *c, const struct pg_error *e)
{
	server_destroy(client_unhook(c));
	ts_pass_return(&c->pass);
	c->state = C_IDLE;
	if (c->login) { /* e.g. 3D000: database does not exist */
		client_fatal(c, e->code, "%s", e->message);
		return;
	}
	send_error(&c->out, "ERROR", e->code, "pgproxy: cannot open a server connection: %s",
		   e->message);
	refuse_batch(c);
}

static void server_failed_msg(struct client *c, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void server_failed_msg(struct client *c, const char *code, const char *fmt, ...)
{
	struct pg_error e = { "FATAL", "", "" };
	va_list ap;
	snprintf(e.code, sizeof(e.code), "%s", code);
	va_start(ap, fmt);
	vsnprintf(e.message, sizeof(e.message), fmt, ap);
	va_end(ap);
	server_failed(c, &e);
}

static void server_create(struct client *c)
{
	struct server *s = calloc(1, sizeof(*s));
	if (!s) {
		ts_waitlist_discard(c->pool->conns);
		ts_pass_return(&c->pass);
		acquire_failed(c, ENOMEM);
		return;
	}
	s->pool = c->pool;
	s->state = S_CONNECTING;
	snprintf(s->user, sizeof(s->user), "%s", c->user);
	s->fd = socket(P.server_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	c->srv = s;
	c->sw.fd = s->fd;
	c->state = C_CONNECTING;
	if (s->fd < 0) {
		server_failed_msg(c, "08001", "pgproxy: socket: %s", strerror(errno));
		return;
	}
	if (P.server_addr.ss_family != AF_UNIX) {
		int one = 1;
		setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	if (connect(s->fd, (struct sockaddr *)&P.server_addr, P.server_addrlen) != 0 &&
	    errno != EINPROGRESS) {
		server_failed_msg(c, "08001", "pgproxy: cannot connect to the server at %s: %s",
				  P.cfg.server_host, strerror(errno));
		return;
	}
	size_t at = s->out.w;
	msg_i32(&s->out, 0);
	msg_i32(&s->out, PROTO_30);
	msg_str(&s->out, "user");
	msg_str(&s->out, c->user);
	msg_str(&s->out, "database");
	msg_str(&s->out, c->db);
	msg_str(&s->out, "application_name");
	msg_str(&s->out, "pgproxy");
	msg_u8(&s->out, 0);
	msg_end(&s->out, at);
	if (s->out.oom) {
		server_failed_msg(c, "53200", "pgproxy: out of memory");
		return;
	}
	/* events come once the connect completes */
}

static void server_ready(struct client *c)
{
	struct server *s = c->srv;
	struct pool *pool = s->pool;
	s->state = S_READY;
	pthread_mutex_lock(&pool->mu);
	struct user_params *up = pool->params;
	while (up && strcmp(up->user, s->user) != 0)
		up = up->next;
	if (!up && (up = calloc(1, sizeof(*up)))) {
		snprintf(up->user, sizeof(up->user), "%s", s->user);
		up->msgs = s->params; /* moved */
		s->params = (struct buf){ 0 };
		up->next = pool->params;
		pool->params = up;
	}
	pthread_mutex_unlock(&pool->mu);
	buf_free(&s->params);
	link_server(c, s);
}

/* A connection being made: connect, startup packet, authentication,
 * parameters, BackendKeyData, ReadyForQuery. */
static void server_startup_io(struct client *c)
{
	struct server *s = c->srv;
	if (s->state == S_CONNECTING) {
		int err = 0;
		socklen_t len = sizeof(err);
		if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
			err = errno;
		if (err == EINPROGRESS || err == EALREADY)
			return;
		if (err) {
			server_failed_msg(c, "08001", "pgproxy: cannot connect to the server at %s: %s",
					  P.cfg.server_host, strerror(err));
			return;
		}
		s->state = S_STARTUP;
	}
	if (flush_buf(s->fd, &s->out) < 0 || read_buf(s->fd, &s->in) < 0) {
		/* the server may have said why before closing */
		if (buf_len(&s->in) < 5 || buf_data(&s->in)[0] != 'E') {
			server_failed_msg(c, "08006", "pgproxy: the server closed the connection during startup");
			return;
		}
	}
	while (buf_len(&s->in) >= 5) {
		const char *p = buf_data(&s->in);
		uint32_t len = get32(p + 1);
		if (len < 4 || len > MAX_INSPECTED) {
			server_failed_msg(c, "08P01", "pgproxy: invalid message from the server during startup");
			return;
		}
		if (buf_len(&s->in) < (size_t)len + 1)
			break;
		const char *body = p + 5;
		size_t blen = len - 4;
		switch (p[0]) {
		case 'R': {
			uint32_t method = blen >= 4 ? get32(body) : 99;
			if (method == 3 && P.cfg.server_password[0]) {
				size_t at = msg_begin(&s->out, 'p');
				msg_str(&s->out, P.cfg.server_password);
				msg_end(&s->out, at);
				(void)flush_buf(s->fd, &s->out);
			} else if (method == 3) {
				server_failed_msg(c, "28000", "pgproxy: the server asks for a password; give one with password= in --server");
				return;
			} else if (method != 0) {
				server_failed_msg(c, "28000",
						  "pgproxy: the server asks for authentication method %u, which pgproxy does not "
						  "implement (it speaks trust, or password with password= in --server)",
						  method);
				return;
			}
			break;
		}
		case 'S':
			buf_put(&s->params, p, (size_t)len + 1);
			break;
		case 'K':
			if (blen >= 8) {
				s->pid = (int32_t)get32(body);
				s->key = (int32_t)get32(body + 4);
			}
			break;
		case 'E': {
			struct pg_error e;
			parse_error(body, blen, &e);
			server_failed(c, &e);
			return;
		}
		case 'Z':
			buf_consume(&s->in, (size_t)len + 1);
			if (buf_len(&s->in) || s->params.oom) {
				server_failed_msg(c, "08P01", "pgproxy: unexpected data from the server after its startup");
				return;
			}
			server_ready(c);
			return;
		default: /* 'N' notices, 'v' protocol negotiation: nothing to do */
			break;
		}
		buf_consume(&s->in, (size_t)len + 1);
	}
}

/* ---------------------------------------------------------------- cancel requests */

static void start_cancel(struct client *c, int32_t srv_pid, int32_t srv_key)
{
	struct loop *l = c->w.loop;
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
}

/* ---------------------------------------------------------------- the relay */

/* Refuse the client's current batch: the error is already queued.  A
 * simple query (or function call) is dropped and answered ReadyForQuery;
 * an extended-protocol batch is dropped up to its Sync, which is answered
 * then. */
static void refuse_batch(struct client *c)
{
	struct buf *in = &c->in;
	if (buf_len(in) >= 5 && (buf_data(in)[0] == 'Q' || buf_data(in)[0] == 'F')) {
		c->in_left = get32(buf_data(in) + 1) + 1;
		c->in_drop = true;
		send_ready(&c->out, 'I');
	} else {
		c->skipping = true;
	}
}

/* A Parse naming a statement: named statements would outlive the
 * transaction on a server connection that other clients use next.  Out of
 * a transaction the proxy answers itself; inside one, an Execute of a
 * portal that cannot exist makes the server fail (and abort the
 * transaction) in order with what came before, and its error is replaced
 * by this one on the way back. */
static void reject_named(struct client *c, const char *name, size_t max)
{
	snprintf(c->refused_name, sizeof(c->refused_name), "%.*s", (int)strnlen(name, max), name);
	if (c->state == C_LINKED) {
		struct buf *o = &c->srv->out;
		size_t at = msg_begin(o, 'E');
		msg_str(o, MARKER);
		msg_i32(o, 0);
		msg_end(o, at);
		c->marker_pending = true;
		c->fwd_since_sync = true;
	} else {
		send_error(&c->out, "ERROR", "0A000",
			   "pgproxy: named prepared statements are not supported in transaction pooling "
			   "(statement \"%s\"); use unnamed statements (pgbench -M extended, not -M prepared)",
			   c->refused_name);
	}
	c->skipping = true;
}

static void forward(struct client *c, char type, size_t total)
{
	if (type == 'S' || type == 'Q' || type == 'F') {
		c->pending_z++;
		c->fwd_since_sync = false;
	} else if (strchr("PBDECH", type)) {
		c->fwd_since_sync = true;
	}
	c->in_left = (uint32_t)total;
	c->in_drop = false;
}

/* Client to server (or to the proxy itself): true if something moved. */
static bool client_input(struct client *c)
{
	struct buf *in = &c->in;
	bool moved = false;
	for (;;) {
		if (c->w.dead || c->closing || (c->state != C_IDLE && c->state != C_LINKED))
			return moved;
		size_t avail = buf_len(in);
		if (c->in_left) {
			size_t n = avail < c->in_left ? avail : c->in_left;
			if (!n)
				return moved;
			if (!c->in_drop) {
				struct buf *o = &c->srv->out;
				if (buf_len(o) >= HIGH_WATER)
					return moved;
				buf_put(o, buf_data(in), n);
			}
			buf_consume(in, n);
			c->in_left -= (uint32_t)n;
			moved = true;
			continue;
		}
		if (avail < 5)
			return moved;
		const char *p = buf_data(in);
		char type = p[0];
		uint32_t len = get32(p + 1);
		if (len < 4 || len > 0x3fffffff) {
			client_fatal(c, "08P01", "pgproxy: invalid message length");
			return true;
		}
		size_t total = (size_t)len + 1;
		moved = true;
		if (c->skipping) {
			if (type != 'S') {
				c->in_left = (uint32_t)total;
				c->in_drop = true;
				continue;
			}
			c->skipping = false;
			if (c->state == C_LINKED) {
				forward(c, type, total);
			} else {
				buf_consume(in, total);
				send_ready(&c->out, 'I');
			}
			continue;
		}
		if (type == 'X') { /* Terminate; in a transaction it costs the connection */
			client_close(c);
			return true;
		}
		if (type == 'P') {
			size_t need = total < 5 + NAME_LEN ? total : 5 + NAME_LEN;
			if (avail < need)
				return moved;
			if (total > 5 && p[5]) {
				reject_named(c, p + 5, need - 5);
				c->in_left = (uint32_t)total;
				c->in_drop = true;
				continue;
			}
		}
		if (c->state == C_IDLE) {
			if (type == 'S') { /* a Sync with nothing before it */
				buf_consume(in, total);
				send_ready(&c->out, 'I');
			} else if (type == 'H') {
				buf_consume(in, total);
			} else {
				start_acquire(c); /* the first message of a transaction */
			}
			continue;
		}
		forward(c, type, total);
	}
}

/* Server to client: true if something moved.  Releases the connection at
 * ReadyForQuery 'I' once nothing of the client's is in flight. */
static bool server_input(struct client *c)
{
	struct server *s = c->srv;
	struct buf *in = &s->in;
	bool moved = false;
	for (;;) {
		size_t avail = buf_len(in);
		if (s->in_left) {
			size_t n = avail < s->in_left ? avail : s->in_left;
			if (!n || buf_len(&c->out) >= HIGH_WATER)
				break;
			buf_put(&c->out, buf_data(in), n);
			buf_consume(in, n);
			s->in_left -= (uint32_t)n;
			moved = true;
			continue;
		}
		if (avail < 5)
			break;
		const char *p = buf_data(in);
		uint32_t len = get32(p + 1);
		size_t total = (size_t)len + 1;
		if (len < 4 || (p[0] == 'Z' && len != 5)) {
			if (c->registered)
				cancel_set_server(c, 0, 0);
			server_destroy(client_unhook(c));
			ts_pass_return(&c->pass);
			c->state = C_IDLE;
			client_fatal(c, "08P01", "pgproxy: invalid message from the server");
			return true;
		}
		if (p[0] == 'Z') {
			if (avail < total)
				break;
			c->status = p[5];
			if (c->pending_z > 0)
				c->pending_z--;
		} else if (p[0] == 'E' && c->marker_pending && total <= MAX_INSPECTED) {
			if (avail < total)
				break;
			struct pg_error e;
			parse_error(p + 5, len - 4, &e);
			if (strstr(e.message, MARKER)) {
				c->marker_pending = false;
				buf_consume(in, total);
				send_error(&c->out, "ERROR", "0A000",
					   "pgproxy: named prepared statements are not supported in transaction "
					   "pooling (statement \"%s\"); use unnamed statements",
					   c->refused_name);
				moved = true;
				continue;
			}
		}
		s->in_left = (uint32_t)total;
		moved = true;
	}
	if (c->status == 'I' && !c->pending_z && !c->fwd_since_sync && !c->skipping && !c->in_left &&
	    !buf_len(in) && !s->in_left && !buf_len(&s->out)) {
		release(c);
		moved = true;
	}
	return moved;
}

/* ---------------------------------------------------------------- admin console */

static bool admin_input(struct client *c)
{
	struct buf *in = &c->in;
	bool moved = false;
	while (!c->w.dead && !c->closing && buf_len(in) >= 5) {
		const char *p = buf_data(in);
		uint32_t len = get32(p + 1);
		if (len < 4 || len > MAX_INSPECTED) {
			client_fatal(c, "08P01", "pgproxy: invalid message length");
			return true;
		}
		if (buf_len(in) < (size_t)len + 1)
			break;
		moved = true;
		switch (p[0]) {
		case 'Q': {
			char sql[1024];
			snprintf(sql, sizeof(sql), "%.*s", (int)strnlen(p + 5, len - 4), p + 5);
			admin_query(&c->out, sql);
			send_ready(&c->out, 'I');
			break;
		}
		case 'X':
			client_close(c);
			return true;
		case 'S':
			c->admin_refused = false;
			send_ready(&c->out, 'I');
			break;
		case 'H':
			break;
		default:
			if (!c->admin_refused)
				send_error(&c->out, "ERROR", "0A000",
					   "pgproxy admin console: only simple queries (psql -c 'SHOW POOLS')");
			c->admin_refused = true;
			break;
		}
		buf_consume(in, (size_t)len + 1);
	}
	return moved;
}

/* ---------------------------------------------------------------- driving */

struct client *client_new(struct loop *l, int fd)
{
	struct client *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return NULL;
	}
	c->w = (struct watch){ .kind = K_CLIENT, .fd = fd, .loop = l };
	c->sw = (struct watch){ .kind = K_SERVER, .fd = -1, .loop = l };
	c->node = (ts_async)TS_ASYNC_INIT;
	c->pass = (ts_pass)TS_PASS_NONE;
	c->next = l->clients;
	if (l->clients)
		l->clients->prev = c;
	l->clients = c;
	l->nclients++;
	watch_set(&c->w, EPOLLIN | EPOLLRDHUP);
	return c;
}

struct client *client_next(struct client *c) { return c->next; }

static void client_close(struct client *c)
{
	if (c->w.dead)
		return;
	client_let_go(c);
	cancel_unregister(c);
	struct loop *l = c->w.loop;
	if (c->prev)
		c->prev->next = c->next;
	else
		l->clients = c->next;
	if (c->next)
		c->next->prev = c->prev;
	l->nclients--;
	/* Unread input makes close() reset the connection, which can lose
	 * the error just written: read it away first. */
	char sink[4096];
	while (recv(c->w.fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
		;
	watch_close(&c->w);
}

/* Queue a FATAL error (code NULL: already queued), give back what the
 * client holds, and close once the output is written. */
static void client_fatal(struct client *c, const char *code, const char *fmt, ...)
{
	if (code) {
		char text[1024];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(text, sizeof(text), fmt, ap);
		va_end(ap);
		send_error(&c->out, "FATAL", code, "%s", text);
	}
	client_let_go(c);
	c->closing = true;
}

bool client_idle_for_shutdown(const struct client *c)
{
	return c->state == C_STARTUP || c->state == C_IDLE || c->state == C_ADMIN;
}

void client_shutdown(struct client *c)
{
	/* Queued clients get ESHUTDOWN from the closed set; those holding a
	 * pass finish their transaction and are closed at its end. */
	if (c->w.dead || c->closing || !client_idle_for_shutdown(c))
		return;
	if (c->state == C_ADMIN) /* the console that said SHUTDOWN has its answer */
		c->closing = true;
	else
		client_fatal(c, "57P01", "pgproxy is shutting down");
	client_drive(c);
}

static void update_masks(struct client *c)
{
	uint32_t m = EPOLLRDHUP;
	if (!c->closing && buf_len(&c->in) < HIGH_WATER)
		m |= EPOLLIN;
	if (buf_len(&c->out))
		m |= EPOLLOUT;
	watch_set(&c->w, m);
	struct server *s = c->srv;
	uint32_t sm = 0;
	if (s && c->state == C_CONNECTING) {
		sm = s->state == S_CONNECTING ? EPOLLOUT : EPOLLIN | (buf_len(&s->out) ? EPOLLOUT : 0);
	} else if (s && c->state == C_LINKED) {
		if (buf_len(&c->out) < HIGH_WATER && buf_len(&s->in) < HIGH_WATER)
			sm |= EPOLLIN | EPOLLRDHUP;
		if (buf_len(&s->out))
			sm |= EPOLLOUT;
	}
	watch_set(&c->sw, sm);
}

static void server_lost(struct client *c)
{
	if (c->registered)
		cancel_set_server(c, 0, 0);
	server_destroy(client_unhook(c));
	ts_pass_return(&c->pass);
	c->state = C_IDLE;
	client_fatal(c, "08006", "pgproxy: the server connection was lost during the transaction");
}

static void client_drive(struct client *c)
{
	for (;;) {
		if (c->w.dead)
			return;
		if (c->in.oom || c->out.oom || (c->srv && (c->srv->in.oom || c->srv->out.oom))) {
			fprintf(stderr, "pgproxy: out of memory, closing a client\n");
			client_close(c);
			return;
		}
		bool moved = false;
		if (!c->closing) {
			if (c->state == C_STARTUP)
				moved |= client_startup(c);
			else if (c->state == C_ADMIN)
				moved |= admin_input(c);
			else
				moved |= client_input(c);
			if (c->w.dead)
				return;
			if (c->state == C_LINKED)
				moved |= server_input(c);
			if (c->w.dead)
				return;
		}
		ssize_t n = flush_buf(c->w.fd, &c->out);
		if (n < 0) {
			client_close(c);
			return;
		}
		moved |= n > 0;
		if (c->state == C_LINKED && buf_len(&c->srv->out)) {
			n = flush_buf(c->srv->fd, &c->srv->out);
			if (n < 0) {
				server_lost(c);
				continue;
			}
			moved |= n > 0;
		}
		if (c->closing && !buf_len(&c->out)) {
			client_close(c);
			return;
		}
		if (!moved)
			break;
	}
	update_masks(c);
}

void client_event(struct client *c, uint32_t events)
{
	if (c->closing) {
		if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
			client_close(c);
			return;
		}
	} else if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
		int r = buf_len(&c->in) < HIGH_WATER ? read_buf(c->w.fd, &c->in) : 0;
		if (r < 0 || (r == 0 && (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)))) {
			/* gone: queued, it leaves the queue; in a transaction, the
			 * server connection goes with it */
			client_close(c);
			return;
		}
	}
	client_drive(c);
}

void server_event(struct watch *w, uint32_t events)
{
	struct client *c = container_of(w, struct client, sw);
	if (c->w.dead || !c->srv)
		return; /* stale: the connection went back or was closed in this batch */
	if (c->state == C_CONNECTING) {
		server_startup_io(c);
	} else if (c->state == C_LINKED && buf_len(&c->out) < HIGH_WATER) {
		if (read_buf(c->srv->fd, &c->srv->in) < 0) {
			/* relay what it said before it went, then end the client */
			server_input(c);
			if (!c->w.dead && c->srv)
				server_lost(c);
		}
	}
	client_drive(c);
}

void conn_free(struct watch *w)
{
	if (w->kind == K_CLIENT) {
		struct client *c = container_of(w, struct client, w);
		buf_free(&c->in);
		buf_free(&c->out);
		free(c);
	} else if (w->kind == K_CANCEL) {
		free(container_of(w, struct canceller, w));
	}
}
