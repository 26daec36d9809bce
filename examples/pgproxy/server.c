/* SPDX-License-Identifier: MIT */
/* pgproxy: server connections.
 *
 * A connection is made for a client holding a pass (C_CONNECTING), then
 * moves between clients through its user's waitlist.  Its fd is watched
 * through its own `w` (struct server says by which loop, and when): an
 * event goes to its linked client, and is only a hint there (death is
 * decided by read and write results); an event while idle means the
 * server closed it or spoke unasked, and it is not reused.
 *
 * The relay from the server keeps a queue of what its responses answer,
 * one entry per request sent, in order (`rq`).  That is what lets the
 * proxy send requests of its own (SETs of a client's parameters, a Parse
 * of a statement the connection lacks, an eviction's Close) and swallow
 * their answers, answer a request itself in its place in the stream (a
 * ParseComplete for a statement already prepared), and end the client's
 * transaction exactly when the server has answered everything.  An error
 * ends the request it answers, and the server skips every request up to
 * the next Sync: those entries go with it, and what they did to the
 * client's names is undone, as PostgreSQL would not have done it. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "pgproxy.h"

#define PROTO_30 196608
#define SSL_REQUEST_CODE 80877103

static void queue_startup(struct server *s);
#define PARAMS_MAX (64 * 1024) /* a server's startup ParameterStatus, all together */

struct server *server_new(struct upool *u)
{
	struct server *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	if (P.cfg.max_prepared && !(s->stmts = srv_stmts_new(P.cfg.max_prepared))) {
		free(s);
		return NULL;
	}
	upool_hold(u);
	s->up = u;
	s->fd = -1;
	s->w = (struct watch){ .kind = K_SERVER, .fd = -1 };
	s->conn_pass = s->put_pass = (ts_pass)TS_PASS_NONE;
	s->close_for = -1;
	s->created_ns = ts_now_ns();
	return s;
}

static void rq_drop(struct rq *e)
{
	stmt_put(e->stmt);
	free(e->name);
	free(e->why);
	*e = (struct rq){ 0 };
}

/* Who may free a server: with w.loop set, only that loop's thread may
 * destroy it (its client, or with one loop every destroy), and an event of
 * the batch it is in may still point at it: freed after the batch.
 * Without, no loop watches it and none holds an event for it (put after
 * the batch it was let go in): freed now, by any thread. */
static void server_free(struct server *s)
{
	struct loop *l = s->w.loop;
	if (!l) {
		free(s);
		return;
	}
	watch_set(&s->w, 0);
	s->w.fd = -1; /* the fd is closed or lingers (conns.c): not the watch's */
	s->w.dead = true;
	s->w.zombie_next = l->zombies;
	l->zombies = &s->w;
}

/* Close a server connection, give its creation slot and its place under
 * the ceiling back (every connection was made through both). */
void server_destroy(struct server *s)
{
	watch_set(&s->w, 0); /* before the fd is closed or handed on */
	if (s->fd >= 0) {
		if (s->state == S_READY) { /* tell the server: no "unexpected EOF" in its log */
			struct buf bye = { 0 };
			buf_put(&bye, "X\0\0\0\4", 5);
			(void)sock_write(s->fd, &s->tls, &bye);
			buf_free(&bye);
		}
		tls_end(&s->tls);
		if (ts_pass_issued(&s->conn_pass)) /* --processes */
			conns_linger(s->fd, &s->conn_pass, s->close_for);
		else
			close(s->fd);
	} else if (ts_pass_issued(&s->conn_pass) && s->close_for >= 0) {
		conns_close_done(s->close_for); /* no server to wait for */
	}
	struct upool *u = s->up;
	for (unsigned i = 0; i < s->rq_len; i++)
		rq_drop(&s->rq[(s->rq_head + i) % s->rq_cap]);
	free(s->rq);
	buf_free(&s->in);
	buf_free(&s->out);
	buf_free(&s->params);
	srv_stmts_free(s->stmts);
	ts_pass_return(&s->conn_pass); /* --processes: to whoever waits, in any worker */
	server_free(s);
	pool_release_conn(u->pool);
	ts_waitlist_discard(u->conns);
	upool_put(u);
}

/* A connection whose state is known as of less than this ago is taken
 * without the peek, which would be one more system call per transaction
 * on a busy pool: a server that closes it within the window costs the
 * client that transaction (08006), as one closing just after a peek
 * always could.  (pgbouncer's server_check_delay is the same trade, at
 * 30 s.)  Known: given back that recently, or (one loop) watched by its
 * loop, whose last complete poll began that recently.  That poll reported
 * any close before it, and its batch handled idle servers' events first
 * (broken is set); a close after it is the window's. */
#define UNCHECKED_REUSE_NS ((int64_t)1000000)

/* The pass encloses the connection (pool.c): s goes back, then *pass. */
void server_put(struct loop *l, struct server *s, ts_pass *pass)
{
	if (P.cfg.threads == 1) { /* stays registered, idle, on its only loop */
		watch_set(&s->w, EPOLLIN | EPOLLRDHUP); /* a linked one's reading mask: mostly no call */
		pool_put_server(s);
		ts_pass_return(pass);
		return;
	}
	/* Another loop may take it from the pool and link or free it: this
	 * loop lets go of it first, and of any event for it in its batch. */
	watch_set(&s->w, 0);
	if (!l->in_batch) {
		s->w.loop = NULL;
		pool_put_server(s);
		ts_pass_return(pass);
		return;
	}
	s->put_pass = *pass; /* returned after s, at the flush */
	*pass = (ts_pass)TS_PASS_NONE;
	s->put_next = l->puts;
	l->puts = s;
}

void server_put_after_batch(struct loop *l)
{
	while (l->puts) {
		struct server *s = l->puts;
		ts_pass pass = s->put_pass;
		l->puts = s->put_next;
		s->put_pass = (ts_pass)TS_PASS_NONE;
		s->w.loop = NULL; /* no event of l's left for it: any loop may have it */
		pool_put_server(s); /* (which may free s) */
		ts_pass_return(&pass);
	}
}

bool server_socket_quiet(const struct server *s)
{
	char byte;
	ssize_t n = recv(s->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
	return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* An idle connection taken from the pool is usable when it is not past
 * its lifetime and the server has not closed it (or said anything) since. */
bool server_usable(struct server *s)
{
	int64_t now = ts_now_ns();
	if (P.cfg.lifetime_ns && now - s->created_ns >= P.cfg.lifetime_ns)
		return false;
	if (s->broken || tls_holds(&s->tls) || tls_broken(&s->tls))
		return false; /* the server said something, or closed: OpenSSL saw it */
	if (now - s->idle_since_ns < UNCHECKED_REUSE_NS)
		return true;
	if (s->w.mask == (EPOLLIN | EPOLLRDHUP) && s->w.loop->polled_at &&
	    now - s->w.loop->polled_at < UNCHECKED_REUSE_NS)
		return true; /* watched while idle (server_put): a close is marked */
	return server_socket_quiet(s);
}

bool server_idle(const struct server *s)
{
	return !s->rq_len && !buf_len(&s->in) && !buf_len(&s->out) && !s->rl.left;
}

/* ---------------------------------------------------------------- the request queue */

bool rq_full(const struct server *s) { return s->rq_len >= RQ_MAX; }

struct rq *rq_push(struct server *s, enum rq_kind kind, uint16_t flags)
{
	if (s->rq_len == s->rq_cap) {
		unsigned cap = s->rq_cap ? s->rq_cap * 2 : 16;
		struct rq *n = malloc(sizeof(*n) * cap);
		if (!n)
			return NULL;
		for (unsigned i = 0; i < s->rq_len; i++)
			n[i] = s->rq[(s->rq_head + i) % s->rq_cap];
		free(s->rq);
		s->rq = n;
		s->rq_cap = cap;
		s->rq_head = 0;
	}
	struct rq *e = &s->rq[(s->rq_head + s->rq_len++) % s->rq_cap];
	*e = (struct rq){ .kind = (uint8_t)kind, .flags = flags };
	return e;
}

static struct rq *rq_front(struct server *s) { return s->rq_len ? &s->rq[s->rq_head] : NULL; }

/* Whether a Parse was sent after the front request (it may be unnamed). */
static bool rq_parse_after(const struct server *s)
{
	for (unsigned i = 1; i < s->rq_len; i++)
		if (s->rq[(s->rq_head + i) % s->rq_cap].kind == RQ_PARSE)
			return true;
	return false;
}

bool rq_skips_next(const struct server *s)
{
	if (!s->skipping)
		return false;
	for (unsigned i = 0; i < s->rq_len; i++)
		if (s->rq[(s->rq_head + i) % s->rq_cap].kind == RQ_SYNC)
			return false;
	return true;
}

bool rq_unsettled(const struct server *s, const char *name, const struct stmt *st)
{
	/* after an error, the requests before the first Sync are skipped: a
	 * Query among them has no answer before the client's Sync, so waiting
	 * for it would wait for ever */
	unsigned doomed = 0;
	while (s->skipping && doomed < s->rq_len && s->rq[(s->rq_head + doomed) % s->rq_cap].kind != RQ_SYNC)
		doomed++;
	bool sync_after = false;
	for (unsigned i = s->rq_len; i-- > 0;) { /* newest first */
		const struct rq *e = &s->rq[(s->rq_head + i) % s->rq_cap];
		if (e->kind == RQ_SYNC) {
			sync_after = true;
			continue;
		}
		/* a Query's answer comes with its own ReadyForQuery */
		bool answered = sync_after || (e->kind == RQ_QUERY && i >= doomed);
		if (!name && !st && (e->flags & RQ_STMTS) && answered)
			return true;
		if (answered && ((name && (e->flags & (RQ_NAMES | RQ_CLOSES)) && e->name && !strcmp(e->name, name)) ||
					(name && (e->flags & RQ_DEALLOC_ALL)) ||
					(st && (e->flags & RQ_PREPARES) && e->stmt == st) ||
					(!name && !st && ((e->flags & RQ_PREPARES) ||
							  (e->kind == RQ_CLOSE && (e->flags & RQ_SWALLOW))))))
			return true;
	}
	return false;
}

/* How a request ended. */
enum { RQ_DONE, RQ_FAILED, RQ_SKIPPED };

/* The front request is answered, failed by its own error, or skipped
 * after an earlier one: undo what a failed or skipped one did to the
 * client's names.  A Parse that failed leaves the server without the
 * statement.  After a skipped Parse or Close of the proxy's, what the
 * server has is no longer known: every later prepare on it closes first
 * (harmless if absent), and it is retired after the transaction. */
static void rq_pop(struct client *c, int how)
{
	struct server *s = c->srv;
	struct rq *e = rq_front(s);
	bool failed = how != RQ_DONE;
	if (failed && (e->flags & RQ_NAMES) && e->name) {
		if (c->stmts && stmt_map_reg(c->stmts, e->name) == e->reg)
			stmt_map_remove(c->stmts, e->name);
		/* a later Close of the name it never made gives nothing back */
		for (unsigned i = 1; i < s->rq_len; i++) {
			struct rq *l = &s->rq[(s->rq_head + i) % s->rq_cap];
			if ((l->flags & RQ_CLOSES) && l->stmt && l->reg == e->reg && l->name && !strcmp(l->name, e->name)) {
				stmt_put(l->stmt);
				l->stmt = NULL;
			}
		}
	}
	if (failed && (e->flags & RQ_CLOSES) && e->stmt && c->stmts && !stmt_map_find(c->stmts, e->name))
		(void)stmt_map_add(c->stmts, e->name, e->stmt); /* skipped: the name stays */
	if (s->stmts && how == RQ_FAILED && (e->flags & RQ_PREPARES))
		srv_stmts_forget(s->stmts, stmt_id(e->stmt));
	if (s->stmts && how == RQ_SKIPPED &&
	    ((e->flags & RQ_PREPARES) || (e->kind == RQ_CLOSE && (e->flags & RQ_SWALLOW)))) {
		srv_stmts_clear(s->stmts);
		s->stmts_unknown = s->dirty = true;
	}
	rq_drop(e);
	s->rq_head = (s->rq_head + 1) % s->rq_cap;
	s->rq_len--;
}

static bool ends_with_z(const struct rq *e)
{
	return e->kind == RQ_SYNC || e->kind == RQ_QUERY || e->kind == RQ_FUNC;
}

/* Answers the proxy gives itself, once everything before them is
 * answered: skipped (and undone) after an error, as the server would. */
static void rq_settle(struct client *c)
{
	struct server *s = c->srv;
	struct rq *e;
	while ((e = rq_front(s)) && ((e->flags & RQ_SYNTH) || e->kind == RQ_COPY_END)) {
		if (e->kind == RQ_COPY_END) { /* no copy it ended: nothing owed */
			rq_pop(c, RQ_DONE);
			continue;
		}
		if (s->skipping && e->kind != RQ_SYNC) {
			rq_pop(c, RQ_SKIPPED);
			continue;
		}
		switch (e->synth) {
		case '3': /* CloseComplete of a client's statement */
			send_simple(&c->out, '3');
			break;
		case 'C': /* DEALLOCATE, answered as a simple query */
			send_complete(&c->out, e->flags & RQ_DEALLOC_ALL ? "DEALLOCATE ALL" : "DEALLOCATE");
			send_ready(&c->out, c->status ? c->status : 'I');
			break;
		default: /* '1': ParseComplete of a statement this server has */
			send_simple(&c->out, e->synth);
			break;
		}
		rq_pop(c, RQ_DONE);
	}
}

/* ---------------------------------------------------------------- the relay */

/* A ParameterStatus: the server's spelling of a tracked parameter now. */
static void param_status(struct client *c, const struct msg *m)
{
	const char *name = m->p + 5, *end = m->p + m->total;
	size_t nlen = strnlen(name, (size_t)(end - name));
	if (name + nlen + 1 >= end)
		return;
	const char *val = name + nlen + 1;
	int p = param_lookup(name);
	if (p < 0)
		return;
	size_t vlen = strnlen(val, (size_t)(end - val));
	param_store(&c->srv->have, p, val, vlen);
	param_store(&c->want, p, val, vlen);
}

/* A CommandComplete the client's own request earned: DEALLOCATE ALL or
 * DISCARD ALL, however sent, dropped every statement of the session, the
 * proxy's on that connection too. */
static void command_tag(struct client *c, const char *tag, size_t n, bool ours)
{
	struct server *s = c->srv;
	bool dealloc = n >= 15 && !memcmp(tag, "DEALLOCATE ALL", 15);
	bool discard = n >= 12 && !memcmp(tag, "DISCARD ALL", 12);
	if (ours || (!dealloc && !discard))
		return;
	if (s->stmts)
		srv_stmts_clear(s->stmts);
	if (c->stmts)
		stmt_map_clear(c->stmts);
	if (discard) /* parameters reset too: not reused */
		s->dirty = true;
}

/* The refusal that replaces a marker's error. */
static void send_refusal(struct client *c, const char *why)
{
	send_error(&c->out, "ERROR", why, "%s", why + strlen(why) + 1);
}

/* One server message at the front of s->in, header whole: decide what it
 * answers and whether it is relayed.  false: more of it must be read. */
static bool server_message(struct client *c, const struct msg *m)
{
	struct server *s = c->srv;
	struct rq *e = rq_front(s);
	bool swallow = e && (e->flags & RQ_SWALLOW);
	bool pop = false, failed = false;
	switch (m->type) {
	case 'Z':
		if (m->len != 5) {
			client_server_lost(c, "08P01", "pgproxy: invalid ReadyForQuery from the server");
			return true;
		}
		if (m->have < m->total)
			return false;
		/* after an extended-protocol error the server skipped everything
		 * up to the Sync, simple queries and function calls too */
		while (e && (s->skipping ? e->kind != RQ_SYNC : !ends_with_z(e))) {
			rq_pop(c, RQ_SKIPPED);
			e = rq_front(s);
		}
		if (!e) {
			client_server_lost(c, "08P01", "pgproxy: unexpected ReadyForQuery from the server");
			return true;
		}
		swallow = e->flags & RQ_SWALLOW;
		if (!swallow)
			c->status = m->p[5];
		s->skipping = false;
		if (e->kind == RQ_QUERY && !rq_parse_after(s))
			s->unnamed = false; /* a simple query that ran dropped it */
		pop = true;
		failed = e->not_run; /* a DEALLOCATE that did not run gives its name back */
		break;
	case 'S':
		if (m->total <= PEEK_MAX) {
			if (m->have < m->total)
				return false;
			param_status(c, m);
		}
		break;
	case 'E': {
		if (!e) { /* e.g. FATAL from pg_terminate_backend: relay, then it closes */
			s->dirty = true;
			break;
		}
		/* a DEALLOCATE refused in an aborted transaction did not run;
		 * after other errors it may have (a failed implicit commit does
		 * not bring a statement back) */
		bool closes = ends_with_z(e) && (e->flags & RQ_CLOSES);
		if ((e->flags & RQ_PARAMS) || closes) { /* read before any side effect */
			size_t need = m->total < PEEK_MAX ? m->total : PEEK_MAX;
			if (m->have < need)
				return false;
			struct pg_error pe;
			parse_error(m->p + 5, need - 5, &pe);
			if (e->flags & RQ_PARAMS) {
				c->param_err = pe;
				c->param_failed = true;
			}
			e->not_run = closes && !strcmp(pe.code, "25P02");
		}
		if (e->flags & RQ_MARKER) {
			send_refusal(c, e->why);
			swallow = true;
		} else if (!(e->flags & RQ_PARAMS)) {
			swallow = false; /* a Parse the proxy sent for a Bind: the client's error */
		}
		if (!ends_with_z(e)) { /* ends an extended request: skip to Sync */
			pop = failed = true;
			s->skipping = true;
		}
		break;
	}
	case '1': case '2': case '3':
		pop = e && !ends_with_z(e);
		break;
	case 'T': case 'n':
		pop = e && e->kind == RQ_DESCRIBE;
		break;
	case 'C': {
		size_t need = m->total < 5 + 64 ? m->total : 5 + 64;
		if (m->have < need)
			return false;
		command_tag(c, m->p + 5, need - 5, swallow);
		if (e && (e->flags & RQ_QUIET_PREPARE) && need - 5 == 8 && !memcmp(m->p + 5, "PREPARE", 8))
			swallow = true; /* the stand-in of a DEALLOCATE (client.c) */
		pop = e && e->kind == RQ_EXECUTE;
		break;
	}
	case 'I': case 's':
		pop = e && e->kind == RQ_EXECUTE;
		break;
	case 'G': /* CopyInResponse */
		if (e && e->kind == RQ_EXECUTE)
			s->copy_in_ext = true;
		break;
	case 'N': case 'A': /* asynchronous */
		break;
	default:
		if (!e)
			s->dirty = true; /* unexpected: do not reuse the connection */
		break;
	}
	s->rl = (struct relay){ .left = m->total, .drop = swallow };
	relay_step(&s->rl, &s->in, &c->out, OUT_BOUND);
	bool copy_ended = pop && s->copy_in_ext && e->kind == RQ_EXECUTE;
	if (pop)
		rq_pop(c, failed ? RQ_FAILED : RQ_DONE);
	if (copy_ended) {
		/* the Syncs sent during the copy were ignored by the server */
		s->copy_in_ext = false;
		while ((e = rq_front(s)) && (e->kind == RQ_SYNC || e->kind == RQ_COPY_END)) {
			bool end = e->kind == RQ_COPY_END;
			rq_pop(c, RQ_DONE);
			if (end)
				break;
		}
	}
	return true;
}

void server_input(struct client *c)
{
	struct server *s = c->srv;
	while (c->state == C_LINKED && c->srv == s && !c->w.dead) {
		if (s->rl.left) {
			relay_step(&s->rl, &s->in, &c->out, OUT_BOUND);
			if (s->rl.left || c->out.oom)
				return;
			continue;
		}
		rq_settle(c);
		if (buf_len(&c->out) >= OUT_BOUND)
			return;
		struct msg m;
		int f = frame_peek(&s->in, &m);
		if (f == FRAME_MORE)
			break;
		if (f == FRAME_BAD) {
			client_server_lost(c, "08P01", "pgproxy: invalid message length from the server");
			return;
		}
		if (!server_message(c, &m))
			break;
	}
	if (c->state == C_LINKED && c->srv == s && !c->w.dead) {
		rq_settle(c);
		/* The transaction is over when the server is idle and has answered
		 * everything, and no message of the client's is half forwarded. */
		if (c->status == 'I' && !c->ext_open && !c->skipping && !c->rl.left && !c->in_need &&
		    server_idle(s))
			client_release(c);
	}
}

/* ---------------------------------------------------------------- making one */

void server_start(struct client *c, struct server *s)
{
	c->srv = s;
	s->state = S_CONNECTING;
	s->deadline_ns = P.cfg.connect_timeout_ns ? ts_now_ns() + P.cfg.connect_timeout_ns : 0;
	s->fd = socket(P.server_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	s->user = c;
	s->w.fd = s->fd;
	s->w.loop = c->w.loop;
	if (s->fd < 0) {
		client_server_failed_msg(c, "08001", "pgproxy: socket: %s", strerror(errno));
		return;
	}
	if (P.server_addr.ss_family != AF_UNIX) {
		int one = 1;
		setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	if (connect(s->fd, (struct sockaddr *)&P.server_addr, P.server_addrlen) != 0 &&
	    errno != EINPROGRESS) {
		client_server_failed_msg(c, "08001", "pgproxy: cannot connect to the server at %s: %s",
					 P.cfg.server_host, strerror(errno));
		return;
	}
	if (P.cfg.server_sslmode != SSL_DISABLE) { /* SSLRequest first, the startup after its answer */
		struct pkt k;
		pkt_begin(&k, 0);
		pkt_i32(&k, SSL_REQUEST_CODE);
		pkt_end(&k, &s->out);
	} else {
		queue_startup(s);
	}
	/* events come once the connect completes */
}

/* Only user and database: what the server then reports is this user's
 * defaults, and every client's own values are SET on top. */
static void queue_startup(struct server *s)
{
	struct pkt k;
	pkt_begin(&k, 0);
	pkt_i32(&k, PROTO_30);
	pkt_str(&k, "user");
	pkt_str(&k, s->up->user);
	pkt_str(&k, "database");
	pkt_str(&k, s->up->pool->db);
	pkt_u8(&k, 0);
	pkt_end(&k, &s->out);
}

/* S_SSL: the SSLRequest out, then the server's one-byte answer, read
 * alone (anything after it is the server's TLS, or an injection: either
 * way OpenSSL's to judge).  False when the attempt failed (told). */
static bool server_ssl_answer(struct client *c)
{
	struct server *s = c->srv;
	if (sock_write(s->fd, NULL, &s->out) < 0) {
		client_server_failed_msg(c, "08006", "pgproxy: the server closed the connection at its SSLRequest");
		return false;
	}
	if (buf_len(&s->out))
		return true;
	char answer;
	ssize_t n = recv(s->fd, &answer, 1, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return true;
	if (n != 1) {
		client_server_failed_msg(c, "08006", "pgproxy: the server closed the connection at its SSLRequest");
		return false;
	}
	bool verify = P.cfg.server_sslmode == SSL_VERIFY_FULL;
	if (answer == 'S' && tls_connect(&s->tls, s->fd, P.cfg.server_host, verify) != 0) {
		client_server_failed_msg(c, "08006", "pgproxy: cannot start TLS with the server (out of memory?)");
		return false;
	}
	if (answer == 'N' && P.cfg.server_sslmode != SSL_PREFER) {
		client_server_failed_msg(c, "08001", "pgproxy: the server does not accept TLS, and --server asks "
						     "for sslmode=%s", verify ? "verify-full" : "require");
		return false;
	}
	if (answer != 'S' && answer != 'N') {
		client_server_failed_msg(c, "08P01", "pgproxy: the server answered the SSLRequest with neither S nor N");
		return false;
	}
	queue_startup(s);
	s->state = S_STARTUP;
	return true;
}

/* ---------------------------------------------------------------- authentication */

/* What pgproxy proves itself with to the server, for the user of a new
 * connection: the auth file's line, else --server password= (kind PLAIN,
 * or nothing at all: trust). */
static bool server_secret(const char *user, struct auth_entry *e)
{
	if (P.cfg.auth_file[0] && authfile_lookup(user, e, false))
		return true;
	memset(e, 0, sizeof(*e));
	snprintf(e->secret, sizeof(e->secret), "%s", P.cfg.server_password);
	return e->secret[0] != 0;
}

static void send_password(struct server *s, const char *text)
{
	struct pkt k;
	pkt_begin(&k, 'p');
	pkt_str(&k, text);
	pkt_end(&k, &s->out);
}

static bool sasl_has_scram(const char *p, const char *end)
{
	while (p < end && *p) {
		size_t n = strnlen(p, (size_t)(end - p));
		if (p + n == end)
			return false;
		if (!strcmp(p, "SCRAM-SHA-256"))
			return true;
		p += n + 1;
	}
	return false;
}

/* An Authentication message from the server: answered, or false with the
 * client told why (the connection is then gone).  Whichever method the
 * server asks for is answered if the secret allows it; SCRAM-SHA-256
 * works with a SCRAM secret only after a client has logged in with it
 * (its proof gives pgproxy the ClientKey: authfile.c). */
static bool server_auth(struct client *c, const char *body, size_t blen)
{
	struct server *s = c->srv;
	const char *user = s->up->user;
	uint32_t method = blen >= 4 ? get32(body) : 99;
	const char *data = body + 4, *end = body + blen;
	if (method == 0 && (s->scram.step == 1 || s->scram.step == 2)) {
		/* a server that skips SASLFinal has not shown it knows the secret */
		fprintf(stderr, "pgproxy: cannot log in to the server as \"%s\": it said AuthenticationOk before "
				"proving its SCRAM signature\n", user);
		client_server_failed_msg(c, "08P01", "pgproxy: the server said AuthenticationOk in the middle of SCRAM");
		return false;
	}
	if (method == 0) /* AuthenticationOk */
		return true;
	struct auth_entry e;
	bool have = server_secret(user, &e);
	char out[SCRAM_MSG_MAX + 128];
	const char *why = NULL;
	const char *code = "28000";
	if (!have) {
		why = P.cfg.auth_file[0] ? "the server asks for a password, and the auth file has no line for this user"
					 : "the server asks for a password; give one with --auth-file, or password= in --server";
	} else if (method == 3 || method == 5) { /* cleartext, MD5 */
		if (method == 5 && blen != 8) {
			why = "a malformed AuthenticationMD5Password";
			code = "08P01";
		} else if (e.kind == SECRET_SCRAM || (method == 3 && e.kind == SECRET_MD5)) {
			why = method == 3 ? "the server asks for the cleartext password, and the auth file holds only a "
					    "secret for this user: give the password itself"
					  : "the server asks for MD5, and the auth file holds only a SCRAM secret for this "
					    "user: give the password itself, or its md5 secret";
		} else if (method == 3) {
			send_password(s, e.secret);
		} else {
			md5_response(e.secret, e.kind == SECRET_MD5 ? e.secret : NULL, user,
				     (const unsigned char *)data, out);
			send_password(s, out);
		}
	} else if (method == 10) { /* AuthenticationSASL: the mechanisms */
		struct pkt k;
		int n;
		if (!sasl_has_scram(data, end)) {
			why = "the server offers no SASL mechanism pgproxy speaks (it speaks SCRAM-SHA-256)";
		} else if (e.kind == SECRET_MD5) {
			why = "the server asks for SCRAM-SHA-256, and the auth file holds an md5 secret for this user: "
			      "give the password itself, or its SCRAM-SHA-256 secret";
		} else if (e.kind == SECRET_SCRAM && !e.have_client_key) {
			why = "the server asks for SCRAM-SHA-256, and the auth file holds only a SCRAM secret for "
			      "this user, which serves only after a client has logged in with it through "
			      "--auth-type scram-sha-256: give the password itself";
		} else if ((n = scram_client_first(&s->scram, out, sizeof(out))) < 0) {
			why = "could not start SCRAM (no random bytes)";
			code = "XX000";
		} else {
			pkt_begin(&k, 'p'); /* SASLInitialResponse */
			pkt_str(&k, "SCRAM-SHA-256");
			pkt_i32(&k, n);
			pkt_bytes(&k, out, (size_t)n);
			pkt_end(&k, &s->out);
		}
	} else if (method == 11) { /* AuthenticationSASLContinue: server-first */
		struct scram_creds cr = { .password = e.kind == SECRET_PLAIN ? e.secret : NULL };
		if (e.kind == SECRET_SCRAM) {
			cr.have_keys = true;
			cr.keys = e.keys;
			memcpy(cr.client_key, e.client_key, SCRAM_KEY_LEN);
		} else if (e.have_server_keys) {
			cr.have_keys = true;
			cr.keys = e.server_keys;
			memcpy(cr.client_key, e.server_client_key, SCRAM_KEY_LEN);
		}
		const char *swhy = "an AuthenticationSASLContinue out of order";
		int n = e.kind == SECRET_MD5 ? SCRAM_BAD
					     : scram_client_final(&s->scram, data, (size_t)(end - data), &cr, out,
								  sizeof(out), &swhy);
		if (n >= 0 && cr.derived && P.cfg.auth_file[0])
			authfile_server_keys(user, e.secret, &cr.keys, cr.client_key);
		OPENSSL_cleanse(&cr, sizeof(cr));
		if (n >= 0) {
			struct pkt k;
			pkt_begin(&k, 'p'); /* SASLResponse */
			pkt_bytes(&k, out, (size_t)n);
			pkt_end(&k, &s->out);
		} else {
			code = n == SCRAM_BAD ? "08P01" : "28000";
			why = swhy;
		}
	} else if (method == 12) { /* AuthenticationSASLFinal: the server's signature */
		const char *swhy;
		if (scram_client_check(&s->scram, data, (size_t)(end - data), &swhy) < 0) {
			why = swhy;
			code = "08P01";
		}
	} else {
		why = "the server asks for an authentication method pgproxy does not implement (it speaks "
		      "SCRAM-SHA-256, MD5 and password)";
	}
	OPENSSL_cleanse(out, sizeof(out));
	auth_entry_wipe(&e);
	if (!why)
		return true;
	fprintf(stderr, "pgproxy: cannot log in to the server as \"%s\": %s\n", user, why);
	client_server_failed_msg(c, code, "pgproxy: cannot log in to the server as \"%s\": %s", user, why);
	return false;
}

/* Startup: authentication, parameters, BackendKeyData, ReadyForQuery.
 * Each message is read whole, at most PEEK_MAX (an ErrorResponse: its
 * first PEEK_MAX bytes); a larger one ends the attempt. */
static void startup_message(struct client *c, const struct msg *m, bool *done)
{
	struct server *s = c->srv;
	const char *body = m->p + 5;
	size_t blen = m->total - 5;
	switch (m->type) {
	case 'R':
		if (!server_auth(c, body, blen))
			*done = true;
		break;
	case 'S': {
		const char *name = body, *end = m->p + m->total;
		size_t nlen = strnlen(name, blen);
		const char *val = name + nlen + 1;
		if (val >= end || strnlen(val, (size_t)(end - val)) != (size_t)(end - val) - 1 ||
		    buf_len(&s->params) + m->total > PARAMS_MAX) {
			client_server_failed_msg(c, "08P01", "pgproxy: an invalid or oversized ParameterStatus from the server during startup");
			*done = true;
			break;
		}
		int p = param_lookup(name);
		if (p >= 0)
			param_store(&s->have, p, val, strlen(val));
		buf_put(&s->params, m->p, m->total);
		break;
	}
	case 'K':
		if (blen >= 8) {
			s->pid = (int32_t)get32(body);
			s->key = (int32_t)get32(body + 4);
		}
		break;
	case 'E': {
		struct pg_error e;
		parse_error(body, blen, &e);
		client_server_failed(c, &e);
		*done = true;
		break;
	}
	case 'Z':
		s->state = S_READY;
		*done = true;
		break;
	default: /* 'N' notices, 'v' protocol negotiation: nothing to do */
		break;
	}
}

void server_startup_io(struct client *c)
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
			client_server_failed_msg(c, "08001", "pgproxy: cannot connect to the server at %s: %s",
						 P.cfg.server_host, strerror(err));
			return;
		}
		s->state = P.cfg.server_sslmode != SSL_DISABLE ? S_SSL : S_STARTUP;
	}
	if (s->state == S_SSL && (!server_ssl_answer(c) || s->state == S_SSL))
		return;
	bool broken = sock_write(s->fd, &s->tls, &s->out) < 0 || sock_read(s->fd, &s->tls, &s->in, IN_BOUND) < 0;
	bool done = false;
	while (!done) {
		struct msg m;
		int f = frame_peek(&s->in, &m);
		if (f == FRAME_MORE)
			break;
		size_t need = m.type == 'E' && m.total > PEEK_MAX ? PEEK_MAX : m.total;
		if (f == FRAME_BAD || need > PEEK_MAX) {
			client_server_failed_msg(c, "08P01", "pgproxy: invalid or oversized message from the server during startup");
			return;
		}
		if (m.have < need)
			break;
		startup_message(c, &m, &done);
		if (c->srv != s) /* failed: the connection is gone */
			return;
		buf_consume(&s->in, m.total);
	}
	if (s->params.oom || s->in.oom || s->out.oom) {
		client_server_failed_msg(c, "53200", "pgproxy: out of memory");
	} else if (s->state == S_READY && buf_len(&s->in)) {
		client_server_failed_msg(c, "08P01", "pgproxy: unexpected data from the server after its startup");
	} else if (s->state == S_READY) {
		/* a user's first connection tells its defaults */
		struct upool *u = s->up;
		pthread_mutex_lock(&u->pool->mu);
		if (!u->have_defaults) {
			u->defaults = s->params; /* moved */
			s->params = (struct buf){ 0 };
			u->dparams = s->have;
			u->have_defaults = true;
		}
		pthread_mutex_unlock(&u->pool->mu);
		buf_free(&s->params);
		client_server_ready(c);
	} else if (broken && P.cfg.server_sslmode == SSL_VERIFY_FULL && tls_verify_error(&s->tls)) {
		client_server_failed_msg(c, "08006", "pgproxy: the server's certificate is refused (sslmode=verify-full): %s",
					 tls_verify_error(&s->tls));
	} else if (broken && s->tls.ssl) {
		client_server_failed_msg(c, "08006", "pgproxy: TLS with the server failed, or it closed the connection "
						     "during startup");
	} else if (broken) {
		client_server_failed_msg(c, "08006", "pgproxy: the server closed the connection during startup");
	}
}
