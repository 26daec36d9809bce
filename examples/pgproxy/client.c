/* SPDX-License-Identifier: MIT */
/* pgproxy: clients.
 *
 * A client is served by one loop thread.  At the first message of a
 * transaction it queues for a turn on its pool's turnstile (its band, then
 * the transaction's age), then takes an idle server connection of its user
 * (or makes one: TS_CREATE and a place under the ceiling, and connects
 * without blocking).  The pass encloses the connection: both go back when
 * the server has answered everything and said ReadyForQuery 'I'.
 *
 * The driver (client_drive) loops while bytes move or the state changes,
 * as counted by the queues and `ticks`; the handlers below never report
 * progress themselves, so none can claim it without consuming input or
 * producing output.  A handler that needs more of a message than is
 * buffered sets `in_need`, which lets the socket be read that far. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "pgproxy.h"

#define SSL_REQUEST 80877103
#define GSSENC_REQUEST 80877104
#define CANCEL_REQUEST 80877102
#define MAX_STARTUP 10000
#define ADMIN_QUERY_MAX 4096
#define SASL_MSG_MAX (5 + 64 + 4 + SCRAM_MSG_MAX) /* a SASL message, whole */

/* The portal an injected Execute names: the server fails it (and aborts
 * the transaction) in order with what came before, and the proxy replaces
 * that error with its own (RQ_MARKER). */
#define MARKER "pgproxy-refused"

static void client_drive(struct client *c);
static void client_close(struct client *c);
static void start_acquire(struct client *c);
static void got_turn(struct client *c);
static void send_login(struct client *c);
static void login_continue(struct client *c);
static bool deallocate_parse(struct client *c, const struct msg *m);
static bool dealloc_unsettled(struct client *c, const char *q, size_t n);

static size_t in_limit(const struct client *c) { return c->in_need > IN_BOUND ? c->in_need : IN_BOUND; }

static void set_state(struct client *c, enum cstate st)
{
	c->state = st;
	c->ticks++;
}

/* ---------------------------------------------------------------- login */

static int band_for(const char *app, const char *user)
{
	for (int i = 0; i < P.cfg.nrules; i++) {
		const struct band_rule *r = &P.cfg.rules[i];
		if (strcmp(r->key == KEY_APP ? app : user, r->name) == 0)
			return r->band;
	}
	return P.cfg.default_band;
}

/* Whether the client's startup values must go through a server first:
 * the server's spelling of them (and whether they are valid at all) is
 * what the client is told. */
static bool login_needs_server(struct client *c)
{
	struct upool *u = c->up;
	bool need = false;
	pthread_mutex_lock(&u->pool->mu);
	if (!u->have_defaults) {
		need = true;
	} else {
		for (int p = 0; p < NPARAMS; p++) {
			if (p == PAR_APPNAME || !c->want.set[p] || !param_reported(p))
				continue; /* extra_float_digits: checked by its first SET */
			if (!u->dparams.set[p] || strcmp(u->dparams.v[p], c->want.v[p]))
				need = true;
		}
		for (int p = 0; p < NPARAMS; p++) /* the rest: this user's defaults */
			if (!c->want.set[p] && u->dparams.set[p] && param_reported(p))
				param_store(&c->want, p, u->dparams.v[p], strlen(u->dparams.v[p]));
	}
	pthread_mutex_unlock(&u->pool->mu);
	return need;
}

static void send_login(struct client *c)
{
	int32_t pid, key;
	struct pkt k;
	pkt_begin(&k, 'R');
	pkt_i32(&k, 0); /* AuthenticationOk: clients are trusted (see README) */
	pkt_end(&k, &c->out);
	if (c->state == C_ADMIN) {
		static const char *params[][2] = {
			{ "server_version", "15.0" }, { "server_encoding", "UTF8" },
			{ "client_encoding", "UTF8" }, { "DateStyle", "ISO, MDY" },
			{ "integer_datetimes", "on" }, { "standard_conforming_strings", "on" },
			{ "TimeZone", "UTC" }, { "is_superuser", "off" },
		};
		for (size_t i = 0; i < sizeof(params) / sizeof(params[0]); i++)
			send_param(&c->out, params[i][0], params[i][1]);
		send_param(&c->out, "application_name", c->want.v[PAR_APPNAME]);
		send_param(&c->out, "session_authorization", c->user);
	} else {
		/* the user's defaults as the server reported them, with the
		 * client's own values of the tracked ones */
		struct upool *u = c->up;
		bool sent[NPARAMS] = { 0 };
		pthread_mutex_lock(&u->pool->mu);
		const char *p = buf_data(&u->defaults), *end = p + buf_len(&u->defaults);
		while (p < end) {
			size_t total = (size_t)get32(p + 1) + 1;
			int t = param_lookup(p + 5);
			if (t >= 0 && c->want.set[t]) {
				send_param(&c->out, param_name(t), c->want.v[t]);
				sent[t] = true;
			} else {
				buf_put(&c->out, p, total);
			}
			p += total;
		}
		pthread_mutex_unlock(&u->pool->mu);
		for (int t = 0; t < NPARAMS; t++)
			if (!sent[t] && c->want.set[t] && param_reported(t))
				send_param(&c->out, param_name(t), c->want.v[t]);
		pool_mark_logged_in(u->pool);
	}
	cancel_register(c, &pid, &key);
	pkt_begin(&k, 'K');
	pkt_i32(&k, pid);
	pkt_i32(&k, key);
	pkt_end(&k, &c->out);
	send_ready(&c->out, 'I');
	c->login_deadline = 0;
}

/* The startup packet's name/value pairs: false (and a FATAL queued) if
 * one cannot be honoured. */
static bool startup_params(struct client *c, const char *kv, const char *end, char *unknown,
			   size_t ulen, int *nunknown)
{
	unknown[0] = 0;
	while (kv < end && *kv) {
		const char *k = kv, *v = k + strnlen(k, (size_t)(end - k)) + 1;
		if (v >= end)
			break;
		size_t vlen = strnlen(v, (size_t)(end - v));
		int p;
		if (!strcmp(k, "user")) {
			snprintf(c->user, sizeof(c->user), "%.*s", (int)vlen, v);
		} else if (!strcmp(k, "database")) {
			snprintf(c->db, sizeof(c->db), "%.*s", (int)vlen, v);
		} else if ((p = param_lookup(k)) >= 0) {
			param_store(&c->want, p, v, vlen);
		} else if (!strcmp(k, "replication")) {
			if (strcmp(v, "false") && strcmp(v, "0") && strcmp(v, "off") && strcmp(v, "no")) {
				client_fatal(c, "0A000", "pgproxy: replication connections are not supported");
				return false;
			}
		} else if (!strncmp(k, "_pq_.", 5)) {
			if (strlen(unknown) + strlen(k) + 2 < ulen) {
				strcat(unknown, k);
				strcat(unknown, "\n");
				(*nunknown)++;
			}
		} else if (!startup_param_ignored(k)) {
			/* pgbouncer's answer: a parameter that would apply to a shared
			 * connection is refused, not silently dropped */
			client_fatal(c, "08P01",
				     "pgproxy: unsupported startup parameter: %s (server connections are shared; "
				     "pgproxy --ignore-startup-parameters %s ignores it)",
				     k, k);
			return false;
		}
		kv = v + vlen + 1;
	}
	return true;
}

/* ---------------------------------------------------------------- SCRAM */

static void send_auth(struct client *c, int32_t code, const char *data, size_t n)
{
	struct pkt k;
	pkt_begin(&k, 'R');
	pkt_i32(&k, code);
	pkt_bytes(&k, data, n);
	pkt_end(&k, &c->out);
}

static void auth_end(struct client *c)
{
	if (c->sasl) {
		scram_verify_end(c->sasl);
		free(c->sasl);
		c->sasl = NULL;
	}
}

/* --auth-type scram-sha-256: AuthenticationSASL, and the exchange runs in
 * C_AUTH.  A user the file does not name (or names with an MD5 secret,
 * which cannot check a SCRAM proof) runs it with mock keys and fails at
 * the end as a wrong password does, so a probe learns nothing. */
static void auth_begin(struct client *c)
{
	struct auth_entry e;
	struct scram_keys k;
	bool known = authfile_lookup(c->user, &e, true);
	if (known && e.kind == SECRET_MD5) {
		fprintf(stderr, "pgproxy: user \"%s\" has an MD5 secret in the auth file, which cannot check a "
				"SCRAM login: give its password or SCRAM-SHA-256 secret\n", c->user);
		known = false;
	}
	if (known)
		k = e.keys;
	else
		authfile_mock(c->user, &k);
	auth_entry_wipe(&e);
	if (!(c->sasl = malloc(sizeof(*c->sasl)))) {
		client_fatal(c, "53200", "pgproxy: out of memory");
		return;
	}
	size_t cb_len = 0;
	const unsigned char *cb = c->tls.ssl ? tls_end_point(&cb_len) : NULL;
	scram_verify_begin(c->sasl, &k, known, cb, cb_len);
	OPENSSL_cleanse(&k, sizeof(k));
	/* each name ends with a NUL, the list with an empty name */
	static const char plain[] = "SCRAM-SHA-256\0", with_plus[] = "SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0";
	if (c->tls.ssl)
		send_auth(c, 10, with_plus, sizeof(with_plus));
	else
		send_auth(c, 10, plain, sizeof(plain));
	set_state(c, C_AUTH);
}

static void auth_failed(struct client *c)
{
	fprintf(stderr, "pgproxy: login refused: password authentication failed for user \"%s\"\n", c->user);
	client_fatal(c, "28P01", "password authentication failed for user \"%s\"", c->user);
}

/* One SASLInitialResponse or SASLResponse, read whole. */
static void client_auth(struct client *c)
{
	struct msg m;
	int f = frame_peek(&c->in, &m);
	if (f == FRAME_MORE)
		return;
	if (f == FRAME_BAD || m.total > SASL_MSG_MAX) {
		client_fatal(c, "08P01", "pgproxy: invalid SASL message length");
		return;
	}
	if (m.have < m.total) {
		c->in_need = m.total;
		return;
	}
	c->in_need = 0;
	if (m.type == 'X') { /* gave up */
		client_close(c);
		return;
	}
	if (m.type != 'p') {
		client_fatal(c, "08P01", "expected SASL response, got message type %d", (unsigned char)m.type);
		return;
	}
	const char *body = m.p + 5, *end = m.p + m.total;
	char reply[SCRAM_NONCE_MAX + SCRAM_NONCE_LEN + 160];
	const char *why = NULL;
	int n;
	if (c->sasl->step == 0) { /* mechanism, length, client-first-message */
		size_t mlen = strnlen(body, (size_t)(end - body));
		bool plus = body + mlen < end && !strcmp(body, "SCRAM-SHA-256-PLUS") && c->tls.ssl;
		if (body + mlen == end || (!plus && strcmp(body, "SCRAM-SHA-256"))) {
			client_fatal(c, "08P01", "client selected an invalid SASL authentication mechanism");
			return;
		}
		const char *p = body + mlen + 1;
		if (end - p < 4 || (int32_t)get32(p) != end - p - 4) {
			client_fatal(c, "08P01", "malformed SASLInitialResponse");
			return;
		}
		n = scram_verify_first(c->sasl, plus, p + 4, (size_t)(end - p - 4), reply, sizeof(reply), &why);
	} else {
		n = scram_verify_final(c->sasl, body, (size_t)(end - body), reply, sizeof(reply), &why);
	}
	buf_consume(&c->in, m.total);
	if (n == SCRAM_FAIL) {
		auth_failed(c);
	} else if (n < 0) {
		client_fatal(c, n == SCRAM_ERROR ? "XX000" : "08P01", "%s", why);
	} else if (c->sasl->step == 1) {
		send_auth(c, 11, reply, (size_t)n); /* AuthenticationSASLContinue */
		c->ticks++;
	} else {
		send_auth(c, 12, reply, (size_t)n); /* AuthenticationSASLFinal */
		authfile_client_key(c->user, &c->sasl->keys, c->sasl->client_key);
		auth_end(c);
		set_state(c, C_STARTUP);
		login_continue(c);
	}
}

/* An SSLRequest with TLS offered: 'S', alone and in the clear, then the
 * handshake inside the next reads and writes.  Bytes the client sent
 * after its request were not encrypted, and could be injected by anyone
 * on the path (CVE-2021-23214): refused. */
static void client_start_tls(struct client *c, uint32_t len)
{
	if (buf_len(&c->out))
		return; /* an answer to a GSSENCRequest is still going out: after it */
	buf_consume(&c->in, len);
	if (buf_len(&c->in)) {
		client_fatal(c, "08P01", "received unencrypted data after SSL request");
		return;
	}
	if (send(c->w.fd, "S", 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1 || tls_accept(&c->tls, c->w.fd) != 0) {
		client_close(c);
		return;
	}
	c->ticks++;
}

/* The startup packet (no type byte). */
static void client_startup(struct client *c)
{
	struct buf *in = &c->in;
	if (buf_len(in) < 4)
		return;
	const char *p = buf_data(in);
	uint32_t len = get32(p);
	if (len < 8 || len > MAX_STARTUP) {
		/* as PostgreSQL: no answer to a stream that is not a startup
		 * (a Terminate before the startup packet, say) */
		client_close(c);
		return;
	}
	if (buf_len(in) < len) {
		c->in_need = len;
		return;
	}
	c->in_need = 0;
	uint32_t code = get32(p + 4);
	if (code == SSL_REQUEST && tls_offered() && !c->tls.ssl) {
		client_start_tls(c, len);
		return;
	}
	if ((code == SSL_REQUEST || code == GSSENC_REQUEST) && !c->tls.ssl) {
		buf_consume(in, len);
		buf_put(&c->out, "N", 1); /* no encryption: go on in the clear */
		return;
	}
	if (code == SSL_REQUEST || code == GSSENC_REQUEST) {
		client_fatal(c, "08P01", "pgproxy: an encryption request inside TLS");
		return;
	}
	if (code == CANCEL_REQUEST) {
		int32_t srv_pid, srv_key;
		if (len == 16 && cancel_lookup((int32_t)get32(p + 8), (int32_t)get32(p + 12),
					       &srv_pid, &srv_key))
			cancel_forward(c->w.loop, srv_pid, srv_key);
		else if (len == 16)
			(void)procs_cancel_elsewhere((int32_t)get32(p + 8), (const unsigned char *)p);
		client_close(c); /* a cancel connection gets no answer */
		return;
	}
	if (code >> 16 != 3) {
		client_fatal(c, "0A000", "pgproxy: unsupported frontend protocol %u.%u", code >> 16,
			     code & 0xffff);
		return;
	}
	char unknown[256];
	int nunknown = 0;
	bool ok = startup_params(c, p + 8, p + len, unknown, sizeof(unknown), &nunknown);
	buf_consume(in, len);
	if (!ok)
		return;
	if ((code & 0xffff) > 0 || nunknown) {
		/* NegotiateProtocolVersion: 3.0, and the options it does not know */
		struct pkt k;
		pkt_begin(&k, 'v');
		pkt_i32(&k, 0);
		pkt_i32(&k, nunknown);
		for (char *o = unknown, *nl; (nl = strchr(o, '\n')); o = nl + 1) {
			*nl = 0;
			pkt_str(&k, o);
		}
		pkt_end(&k, &c->out);
	}
	if (!c->user[0]) {
		client_fatal(c, "28000", "no PostgreSQL user name specified in startup packet");
		return;
	}
	if (P.cfg.tls_require && !c->tls.ssl) { /* as a pg_hba.conf of hostssl lines only */
		client_fatal(c, "28000", "pgproxy: user \"%s\": TLS is required (--tls-require): connect with "
					 "sslmode=require or stricter", c->user);
		return;
	}
	if (!c->db[0])
		snprintf(c->db, sizeof(c->db), "%s", c->user);
	if (!c->want.set[PAR_APPNAME]) /* what PostgreSQL reports without one */
		param_store(&c->want, PAR_APPNAME, "", 0);
	c->band = band_for(c->want.v[PAR_APPNAME], c->user);
	if (P.cfg.auth_scram)
		auth_begin(c);
	else
		login_continue(c);
}

/* A client whose identity is settled (trust, or SCRAM done): the admin
 * console, or its pool. */
static void login_continue(struct client *c)
{
	if (!strcmp(c->db, "pgproxy")) {
		if (!user_listed(P.cfg.admin_users, c->user) && !user_listed(P.cfg.stats_users, c->user)) {
			client_fatal(c, "28000", "pgproxy: user \"%s\" may not use the admin console (it is "
						 "named by neither --admin-users nor --stats-users)", c->user);
			return;
		}
		set_state(c, C_ADMIN);
		send_login(c);
		return;
	}
	int err = 0;
	if (!(c->up = upool_get(c->db, c->user, &err))) {
		if (err == ESHUTDOWN)
			client_fatal(c, "57P01", "pgproxy is shutting down");
		else if (err == EINVAL) /* --fleet: the name would be another key */
			client_fatal(c, "3D000", "pgproxy: database \"%s\": a name with '/' has no fleet",
				     c->db);
		else if (err == EBUSY)
			client_fatal(c, "53300", "pgproxy: too many databases with no login yet (at most "
						 "%d joining their fleets at once): try again", FLEET_UNVOUCHED_MAX);
		else
			client_fatal(c, "53300", "pgproxy: cannot make a pool for database \"%s\": %s", c->db,
				     err == ENOSPC ? "too many databases" : strerror(err));
		return;
	}
	if (P.cfg.max_prepared && !(c->stmts = stmt_map_new())) {
		client_fatal(c, "53200", "pgproxy: out of memory");
		return;
	}
	set_state(c, C_IDLE);
	if (login_needs_server(c)) {
		/* The first client of a user learns the defaults from a server
		 * connection; one with values of its own has them checked there. */
		c->login = true;
		start_acquire(c);
	} else {
		send_login(c);
	}
}

/* ---------------------------------------------------------------- acquiring */

/* Refuse the client's current batch: the error is already queued.  A
 * simple query (or function call) is dropped and answered ReadyForQuery;
 * an extended-protocol batch is dropped up to its Sync, answered then. */
static void refuse_batch(struct client *c)
{
	struct msg m;
	if (frame_peek(&c->in, &m) == FRAME_MSG && (m.type == 'Q' || m.type == 'F')) {
		c->rl = (struct relay){ .left = m.total, .drop = true };
		send_ready(&c->out, 'I');
	} else {
		c->skipping = true;
	}
}

static void acquire_failed(struct client *c, int err)
{
	char text[512];
	const char *code = "08000";
	set_state(c, C_IDLE);
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
	} else if (err == EAGAIN) { /* --processes: the shared queue is full */
		code = "53300";
		snprintf(text, sizeof(text),
			 "pgproxy: too many clients queued for database \"%s\" (%d in all workers)", c->db,
			 PROCS_MAX_QUEUED);
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

/* A job's seq: unique across workers too (their claims meet in one queue). */
static uint64_t next_seq(void)
{
	uint64_t n = atomic_fetch_add(&P.seq, 1) + 1;
	return P.worker < 0 ? n : n * MAX_PROCESSES + (uint64_t)P.worker;
}

static void on_turn(ts_async *node, int result, void *arg)
{
	struct client *c = arg;
	atomic_fetch_sub(&c->up->pool->waiting[c->band], 1);
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
	struct pool *pool = c->up->pool;
	int64_t now = ts_now_ns();
	ts_claim claim = { c->band, now, next_seq() };
	c->acq_start = now;
	c->deadline = P.cfg.wait_timeout_ns ? now + P.cfg.wait_timeout_ns : 0;
	c->pass = (ts_pass)TS_PASS_NONE;
	set_state(c, C_WAIT_TURN);
	int r = ts_turnstile_wait_async(pool->turns, &claim, c->deadline, NULL, c->w.loop->notifier,
					&c->node, on_turn, c, &c->pass);
	if (r == EINPROGRESS) {
		atomic_fetch_add(&pool->waiting[c->band], 1);
		c->queued = true;
	} else if (r == 0) {
		got_turn(c);
	} else {
		acquire_failed(c, r);
	}
}

/* The SETs that give the connection this client's parameters go first. */
static void apply_params(struct client *c)
{
	struct server *s = c->srv;
	char sql[2048];
	if (!params_diff_sql(&c->want, &s->have, sql, sizeof(sql))) {
		client_fatal(c, "54000", "pgproxy: the client's parameters are too long to apply");
		return;
	}
	if (!sql[0])
		return;
	struct rq *e = rq_push(s, RQ_QUERY, RQ_SWALLOW | RQ_PARAMS);
	if (!e) {
		s->out.oom = true;
		return;
	}
	struct pkt k;
	pkt_begin(&k, 'Q');
	pkt_str(&k, sql);
	pkt_end(&k, &s->out);
	for (int p = 0; p < NPARAMS; p++) /* unreported: what we set is what it has */
		if (!param_reported(p)) {
			s->have.set[p] = c->want.set[p];
			memcpy(s->have.v[p], c->want.v[p], PARAM_LEN);
		}
}

static void link_server(struct client *c, struct server *s)
{
	c->srv = s;
	s->user = c;
	s->w.loop = c->w.loop; /* unchanged with one loop; else it was unwatched */
	set_state(c, C_LINKED);
	c->status = 'I';
	c->ext_open = c->param_failed = false;
	cancel_set_server(c, s->pid, s->key);
	if (c->login) {
		/* the defaults are known now: the rest of the client's values */
		login_needs_server(c);
	} else {
		struct band_stats *bs = &P.bands[c->band];
		atomic_fetch_add(&bs->admitted, 1);
		hist_add(bs, ts_now_ns() - c->acq_start);
	}
	apply_params(c);
}

/* A taken idle connection: used, or closed (slot back) and taken again. */
static bool take_item(struct client *c, void *item)
{
	struct server *s = item;
	if (server_usable(s)) {
		link_server(c, s);
		return true;
	}
	server_destroy(s);
	return false;
}

/* A new connection, its place under the ceiling taken (and its creation
 * slot, which the connection keeps). */
static void connect_new(struct client *c)
{
	struct server *s = server_new(c->up);
	if (!s) {
		ts_pass_return(&c->conn_pass);
		pool_release_conn(c->up->pool);
		ts_waitlist_discard(c->up->conns);
		ts_pass_return(&c->pass);
		acquire_failed(c, ENOMEM);
		return;
	}
	s->conn_pass = c->conn_pass;
	c->conn_pass = (ts_pass)TS_PASS_NONE;
	set_state(c, C_CONNECTING);
	server_start(c, s);
}

static void conn_failed(struct client *c, int err)
{
	ts_waitlist_discard(c->up->conns);
	ts_pass_return(&c->pass);
	acquire_failed(c, err);
}

static void on_conn(ts_async *node, int result, void *arg)
{
	struct client *c = arg;
	c->conn_queued = false;
	if (result == 0) {
		c->conn_pass = ts_async_pass(node);
		atomic_fetch_add(&c->up->pool->conns, 1);
		connect_new(c);
	} else {
		conn_failed(c, result);
	}
	client_drive(c);
}

#define CONN_PATIENCE_NS ((int64_t)5 * 1000000)

/* --processes: a connection's place is a pass of the pool's conns
 * turnstile, shared by every worker.  Taken at once when free; at the
 * ceiling, first make room here (another user's idle connection), then
 * wait a little for one of this worker's own to come back (no connection
 * moves between workers while this one's will do), then queue, in the
 * order of the transaction's claim, for one another worker closes. */
static void conn_reserve_shared(struct client *c)
{
	struct pool *pool = c->up->pool;
	ts_claim claim = { c->band, c->acq_start, next_seq() };
	c->conn_pass = (ts_pass)TS_PASS_NONE;
	if (ts_turnstile_wait(pool->conn_turns, &claim, TS_DEADLINE_NOW, NULL, &c->conn_pass) == 0 ||
	    (pool_close_idle_other(c->up) &&
	     ts_turnstile_wait(pool->conn_turns, &claim, TS_DEADLINE_NOW, NULL, &c->conn_pass) == 0)) {
		atomic_fetch_add(&pool->conns, 1);
		connect_new(c);
		return;
	}
	if (atomic_load(&pool->conns) > 0 && ts_now_ns() - c->conn_since < CONN_PATIENCE_NS) {
		ts_waitlist_discard(c->up->conns);
		c->retry = true;
		return;
	}
	int r = ts_turnstile_wait_async(pool->conn_turns, &claim, c->deadline, NULL, c->w.loop->notifier,
					&c->node, on_conn, c, &c->conn_pass);
	if (r == EINPROGRESS) {
		c->conn_queued = true;
	} else if (r == 0) {
		atomic_fetch_add(&pool->conns, 1);
		connect_new(c);
	} else {
		conn_failed(c, r);
	}
}

/* A creation slot: a new connection, if the pool has room under its
 * ceiling (or makes it by closing another user's idle connection). */
static void server_create(struct client *c)
{
	if (c->up->pool->conn_turns) {
		conn_reserve_shared(c);
		return;
	}
	if (!pool_reserve_conn(c->up)) {
		/* a connection is on its way back to the pool: try again on
		 * the loop's next turn */
		ts_waitlist_discard(c->up->conns);
		c->retry = true;
		return;
	}
	connect_new(c);
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
	if (!c->retry) /* the turn is new: how long it has waited for a connection */
		c->conn_since = ts_now_ns();
	c->retry = false;
	for (;;) {
		void *item = NULL;
		set_state(c, C_WAIT_CONN);
		int r = ts_waitlist_take_async(c->up->conns, c->deadline, NULL, c->w.loop->notifier,
					       &c->node, on_take, c, &item);
		if (r == 0) {
			if (take_item(c, item))
				return;
			continue;
		}
		if (r == TS_CREATE) {
			server_create(c);
		} else if (r != EINPROGRESS) {
			ts_pass_return(&c->pass);
			acquire_failed(c, r);
		}
		return;
	}
}

void client_retry(struct client *c)
{
	if (c->retry && !c->w.dead && c->state == C_WAIT_CONN) {
		got_turn(c);
		client_drive(c);
	}
}

/* Unhook the server from the client: from here on an event for it is an
 * idle one (server_event) until a client links it again. */
static struct server *client_unhook(struct client *c)
{
	struct server *s = c->srv;
	s->user = NULL;
	c->srv = NULL;
	if (c->registered)
		cancel_set_server(c, 0, 0);
	return s;
}

void client_release(struct client *c)
{
	struct server *s = client_unhook(c);
	set_state(c, C_IDLE);
	server_put(c->w.loop, s, &c->pass);
	if (c->param_failed) {
		const struct pg_error *e = &c->param_err;
		client_fatal(c, e->code[0] ? e->code : "22023", "%s", e->message);
	} else if (atomic_load(&P.shutting_down)) {
		client_fatal(c, "57P01", "pgproxy is shutting down");
	} else if (c->login) {
		c->login = false;
		send_login(c);
	}
}

/* Give back whatever the client holds or waits for: it is leaving. */
static void client_let_go(struct client *c)
{
	switch (c->state) {
	case C_WAIT_TURN:
		/* 0: withdrawn; EALREADY: the pass it got went to the next in line */
		(void)ts_async_cancel(&c->node);
		if (c->queued) {
			atomic_fetch_sub(&c->up->pool->waiting[c->band], 1);
			c->queued = false;
		}
		break;
	case C_WAIT_CONN:
		/* 0: withdrawn; EALREADY: a connection (or conns pass) it got
		 * went to the next taker or back to the pool; ENOENT: it was
		 * retrying */
		(void)ts_async_cancel(&c->node);
		if (c->conn_queued) { /* the creation slot it held */
			ts_waitlist_discard(c->up->conns);
			c->conn_queued = false;
		}
		ts_pass_return(&c->pass);
		break;
	case C_CONNECTING:
	case C_LINKED: {
		/* mid-transaction or half made: the connection's state is
		 * unknown.  A backend still running a query reads no Terminate
		 * until it ends, and its pass may go back before it exits
		 * (conns.c's LINGER_NS): cancel the query first. */
		struct server *s = client_unhook(c);
		if (s->state == S_READY && !server_idle(s))
			cancel_forward(c->w.loop, s->pid, s->key);
		server_destroy(s);
		ts_pass_return(&c->pass);
		break;
	}
	default:
		break;
	}
	c->retry = false;
	if (c->state != C_ADMIN && c->state != C_STARTUP && c->state != C_AUTH)
		set_state(c, C_IDLE);
}

void client_server_failed(struct client *c, const struct pg_error *e)
{
	server_destroy(client_unhook(c));
	ts_pass_return(&c->pass);
	set_state(c, C_IDLE);
	if (c->login) { /* e.g. 3D000: database does not exist */
		client_fatal(c, e->code, "%s", e->message);
		return;
	}
	send_error(&c->out, "ERROR", e->code, "pgproxy: cannot open a server connection: %s",
		   e->message);
	refuse_batch(c);
}

void client_server_failed_msg(struct client *c, const char *code, const char *fmt, ...)
{
	struct pg_error e = { "FATAL", "", "" };
	va_list ap;
	snprintf(e.code, sizeof(e.code), "%s", code);
	va_start(ap, fmt);
	vsnprintf(e.message, sizeof(e.message), fmt, ap);
	va_end(ap);
	client_server_failed(c, &e);
}

void client_server_ready(struct client *c)
{
	link_server(c, c->srv);
}

void client_server_lost(struct client *c, const char *code, const char *why)
{
	server_destroy(client_unhook(c));
	ts_pass_return(&c->pass);
	set_state(c, C_IDLE);
	client_fatal(c, code, "%s", why);
}

/* ---------------------------------------------------------------- the relay */

/* Fails the client's batch in order, on the server, with this error in
 * place of the server's: an Execute of a portal that cannot exist, whose
 * error the relay replaces.  The rest of the batch is dropped to its Sync. */
static void refuse_in_order(struct client *c, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void refuse_in_order(struct client *c, const char *code, const char *fmt, ...)
{
	struct server *s = c->srv;
	char text[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	size_t clen = strlen(code), tlen = n < 0 ? 0 : strlen(text);
	struct rq *e = rq_push(s, RQ_EXECUTE, RQ_MARKER | RQ_SWALLOW);
	char *why = malloc(clen + tlen + 2);
	if (!e || !why) {
		free(why);
		s->out.oom = true;
		return;
	}
	memcpy(why, code, clen + 1);
	memcpy(why + clen + 1, text, tlen + 1);
	e->why = why;
	struct pkt k;
	pkt_begin(&k, 'E');
	pkt_str(&k, MARKER);
	pkt_i32(&k, 0);
	pkt_end(&k, &s->out);
	c->ext_open = true;
	c->skipping = true;
}

static void stmt_server_name(const struct stmt *st, char *out, size_t n)
{
	snprintf(out, n, "pgproxy_%" PRIu64, stmt_id(st));
}

/* A Close of the server's copy of statement `id`, its answer swallowed
 * (never an error, even where the copy is absent). */
static bool close_server_copy(struct server *s, uint64_t id)
{
	char name[32];
	struct pkt k;
	if (!rq_push(s, RQ_CLOSE, RQ_SWALLOW))
		return false;
	snprintf(name, sizeof(name), "pgproxy_%" PRIu64, id);
	pkt_begin(&k, 'C');
	pkt_u8(&k, 'S');
	pkt_str(&k, name);
	pkt_end(&k, &s->out);
	srv_stmts_forget(s->stmts, id);
	return true;
}

/* Prepares the statement on the client's connection under the proxy's
 * name, after a Close of the least recently used one if the connection is
 * full.  `flags`: RQ_SWALLOW for a Parse the proxy adds before a use, or
 * RQ_NAMES for the client's own Parse (whose answer it then gets). */
static bool prepare_on_server(struct client *c, struct stmt *st, uint16_t flags, const char *cname)
{
	struct server *s = c->srv;
	uint64_t ev;
	char name[32];
	struct pkt k;
	/* It has it (or may: s->stmts_unknown), but whether this Parse would
	 * succeed depends on what is still in flight (an aborted transaction
	 * refuses it): ask the server, after a Close of its copy. */
	if ((s->stmts_unknown || srv_stmts_has(s->stmts, stmt_id(st))) && !close_server_copy(s, stmt_id(st)))
		return false;
	if (srv_stmts_add(s->stmts, stmt_id(st), &ev) && !close_server_copy(s, ev))
		return false; /* evicted: its copy goes */
	struct rq *e = rq_push(s, RQ_PARSE, flags | RQ_PREPARES);
	if (!e || (cname && !(e->name = strdup(cname))))
		return false;
	e->stmt = stmt_hold(st);
	if (cname)
		e->reg = stmt_map_reg(c->stmts, cname);
	size_t blen;
	const char *body = stmt_body(st, &blen);
	stmt_server_name(st, name, sizeof(name));
	pkt_begin(&k, 'P');
	pkt_str(&k, name);
	pkt_bytes(&k, body, blen);
	pkt_end(&k, &s->out);
	return true;
}

/* A statement the client names, prepared on its connection before use. */
static bool ensure_prepared(struct client *c, struct stmt *st)
{
	return srv_stmts_has(c->srv->stmts, stmt_id(st)) ||
	       prepare_on_server(c, st, RQ_SWALLOW, NULL);
}

/* Whether `n` bytes of the message are in; if not, the socket may be read
 * that far (the message is handled when they are). */
static bool have(struct client *c, const struct msg *m, size_t n)
{
	if (m->have >= n)
		return true;
	c->in_need = n;
	return false;
}

/* The message at the front, dropped as it arrives. */
static void drop(struct client *c, const struct msg *m)
{
	c->rl = (struct relay){ .left = m->total, .drop = true };
	relay_step(&c->rl, &c->in, NULL, 0);
}

/* The message at the front, forwarded unchanged as it arrives, with what
 * it asks for (kind < 0: nothing answers it). */
static void forward_flags(struct client *c, const struct msg *m, int kind, uint16_t flags)
{
	struct server *s = c->srv;
	if (kind >= 0 && !rq_push(s, (enum rq_kind)kind, flags)) {
		s->out.oom = true;
		return;
	}
	c->rl = (struct relay){ .left = m->total };
	relay_step(&c->rl, &c->in, &s->out, IN_BOUND);
}

static void forward(struct client *c, const struct msg *m, int kind) { forward_flags(c, m, kind, 0); }

static const char *skip_space(const char *p, const char *end)
{
	while (p < end && isspace((unsigned char)*p))
		p++;
	return p;
}

/* A string at p, NUL-terminated before end: its length, or -1. */
static long cstr(const char *p, const char *end)
{
	size_t n = strnlen(p, (size_t)(end - p));
	return p + n < end ? (long)n : -1;
}

static void refuse_unsupported(struct client *c, const char *name)
{
	refuse_in_order(c, "0A000",
			"pgproxy: named prepared statements are not supported in transaction pooling "
			"(statement \"%.64s\"); start pgproxy with --max-prepared N, or use unnamed "
			"statements (pgbench -M extended, not -M prepared)",
			name);
}

static void parse_msg(struct client *c, const struct msg *m)
{
	size_t need = m->total < 5 + PEEK_MAX ? m->total : 5 + PEEK_MAX;
	if (!have(c, m, need))
		return;
	const char *name = m->p + 5;
	long nlen = cstr(name, m->p + need);
	if (nlen < 0) {
		client_fatal(c, "08P01", "pgproxy: invalid Parse message");
		return;
	}
	c->ext_open = true;
	if (!nlen) {
		c->srv->unnamed = true;
		if (P.cfg.max_prepared && m->total <= 5 + PEEK_MAX && need - 6 >= 10 &&
		    !strncasecmp(skip_space(m->p + 6, m->p + need), "deallocate", 10)) {
			long qlen = cstr(m->p + 6, m->p + m->total);
			if (qlen >= 0 && dealloc_unsettled(c, m->p + 6, (size_t)qlen))
				return;
			if (deallocate_parse(c, m))
				return;
		}
		const char *q = skip_space(m->p + 6, m->p + need);
		size_t left = (size_t)(m->p + need - q);
		bool stmts = (left >= 10 && !strncasecmp(q, "deallocate", 10)) ||
			     (left >= 7 && !strncasecmp(q, "discard", 7));
		forward_flags(c, m, RQ_PARSE, stmts ? RQ_STMTS : 0);
		return;
	}
	if (!P.cfg.max_prepared) {
		refuse_unsupported(c, name);
		drop(c, m);
		return;
	}
	if (m->total > WHOLE_MAX) {
		refuse_in_order(c, "54000", "pgproxy: a named statement longer than %d bytes", WHOLE_MAX);
		drop(c, m);
		return;
	}
	if (!have(c, m, m->total))
		return;
	if (rq_unsettled(c->srv, name, NULL) || rq_unsettled(c->srv, NULL, NULL))
		return; /* is the name taken, what has the server?  Its answers tell */
	const char *body = name + nlen + 1;
	struct stmt *st = stmt_get(body, (size_t)(m->p + m->total - body));
	int err = !st ? ENOMEM : stmt_map_find(c->stmts, name) ? EEXIST : stmt_map_add(c->stmts, name, st);
	if (err == EEXIST) {
		refuse_in_order(c, "42P05", "prepared statement \"%s\" already exists", name);
	} else if (err == ENOSPC) {
		refuse_in_order(c, "54000", "pgproxy: too many prepared statements in one session");
	} else if (err) {
		c->out.oom = true;
	} else if (srv_stmts_has(c->srv->stmts, stmt_id(st)) && !c->srv->rq_len && c->status != 'E') {
		/* the connection has it and is in a healthy state: answered here */
		struct rq *e = rq_push(c->srv, RQ_PARSE, RQ_SYNTH | RQ_NAMES);
		if (!e || !(e->name = strdup(name)))
			c->out.oom = true;
		else {
			e->synth = '1';
			e->stmt = stmt_hold(st);
			e->reg = stmt_map_reg(c->stmts, name);
		}
	} else if (!prepare_on_server(c, st, RQ_NAMES, name)) {
		c->out.oom = true;
	}
	stmt_put(st);
	drop(c, m);
}

static void bind_msg(struct client *c, const struct msg *m)
{
	size_t need = m->total < 5 + PEEK_MAX ? m->total : 5 + PEEK_MAX;
	if (!have(c, m, need))
		return;
	const char *portal = m->p + 5, *end = m->p + need;
	long plen = cstr(portal, end), slen = plen < 0 ? -1 : cstr(portal + plen + 1, end);
	if (slen < 0) {
		client_fatal(c, "08P01", "pgproxy: invalid Bind message");
		return;
	}
	const char *sname = portal + plen + 1;
	c->ext_open = true;
	if (!slen) {
		forward(c, m, RQ_BIND);
		return;
	}
	if (P.cfg.max_prepared && rq_unsettled(c->srv, sname, NULL))
		return; /* does the name exist?  Earlier batches' answers tell */
	struct stmt *st = P.cfg.max_prepared ? stmt_map_find(c->stmts, sname) : NULL;
	if (!P.cfg.max_prepared) {
		refuse_unsupported(c, sname);
		drop(c, m);
		return;
	}
	if (!st) {
		refuse_in_order(c, "26000", "prepared statement \"%s\" does not exist", sname);
		drop(c, m);
		return;
	}
	if (rq_unsettled(c->srv, NULL, NULL))
		return; /* whether the server has it: its answers tell */
	char name[32];
	stmt_server_name(st, name, sizeof(name));
	if (!ensure_prepared(c, st) || !rq_push(c->srv, RQ_BIND, 0)) {
		c->out.oom = true;
		return;
	}
	/* the same Bind naming the server's statement: its header and names
	 * written here, the rest streamed */
	size_t head = 5 + (size_t)plen + 1 + (size_t)slen + 1, nlen = strlen(name);
	char hdr[5];
	hdr[0] = 'B';
	put32(hdr + 1, (uint32_t)(m->len - (size_t)slen + nlen));
	struct buf *o = &c->srv->out;
	buf_put(o, hdr, 5);
	buf_put(o, portal, (size_t)plen + 1);
	buf_put(o, name, nlen + 1);
	size_t rest = m->total - head;
	buf_consume(&c->in, head);
	c->rl = (struct relay){ .left = rest };
	relay_step(&c->rl, &c->in, o, IN_BOUND);
}

/* A Close (or DEALLOCATE) of a client's name, answered by the proxy in its
 * place in the stream.  The name goes at once, so what follows it in the
 * stream sees it gone, as the server would; if the server skips the
 * request (an error before it), the name comes back (rq_pop). */
static bool close_name(struct client *c, enum rq_kind kind, char synth, const char *name)
{
	struct rq *e = rq_push(c->srv, kind, RQ_SYNTH | RQ_CLOSES);
	if (!e || !(e->name = strdup(name)))
		return false;
	e->synth = synth;
	struct stmt *st = c->stmts ? stmt_map_find(c->stmts, name) : NULL;
	if (st) {
		e->stmt = stmt_hold(st);
		e->reg = stmt_map_reg(c->stmts, name);
		stmt_map_remove(c->stmts, name);
	}
	return true;
}

/* Describe and Close of a statement: read whole (they are small). */
static void stmt_msg(struct client *c, const struct msg *m)
{
	if (m->total > 5 + PEEK_MAX) {
		client_fatal(c, "08P01", "pgproxy: invalid %s message", m->type == 'D' ? "Describe" : "Close");
		return;
	}
	if (!have(c, m, m->total))
		return;
	const char *name = m->p + 6;
	long nlen = m->total >= 7 ? cstr(name, m->p + m->total) : -1;
	if (nlen < 0 || (m->p[5] != 'S' && m->p[5] != 'P')) {
		client_fatal(c, "08P01", "pgproxy: invalid %s message", m->type == 'D' ? "Describe" : "Close");
		return;
	}
	c->ext_open = true;
	if (m->p[5] == 'P' || !nlen) {
		forward(c, m, m->type == 'D' ? RQ_DESCRIBE : RQ_CLOSE);
		return;
	}
	if (P.cfg.max_prepared && rq_unsettled(c->srv, name, NULL))
		return; /* does the name exist?  Earlier batches' answers tell */
	if (m->type == 'C') { /* answered in order by the proxy */
		if (!close_name(c, RQ_CLOSE, '3', name))
			c->out.oom = true;
		drop(c, m);
		return;
	}
	struct stmt *st = P.cfg.max_prepared ? stmt_map_find(c->stmts, name) : NULL;
	if (!P.cfg.max_prepared)
		refuse_unsupported(c, name);
	else if (!st)
		refuse_in_order(c, "26000", "prepared statement \"%s\" does not exist", name);
	if (!st) {
		drop(c, m);
		return;
	}
	if (rq_unsettled(c->srv, NULL, NULL))
		return;
	char sname[32];
	stmt_server_name(st, sname, sizeof(sname));
	if (!ensure_prepared(c, st) || !rq_push(c->srv, RQ_DESCRIBE, 0)) {
		c->out.oom = true;
		return;
	}
	struct pkt k;
	pkt_begin(&k, 'D');
	pkt_u8(&k, 'S');
	pkt_str(&k, sname);
	pkt_end(&k, &c->srv->out);
	drop(c, m);
}

/* Reads one identifier at *q (unquoted: folded to lower case, as the
 * server does; quoted: as written): false if there is none. */
static bool ident(const char **q, const char *end, char *out, size_t n)
{
	size_t i = 0;
	while (*q < end && isspace((unsigned char)**q))
		(*q)++;
	if (*q < end && **q == '"') {
		for ((*q)++; *q < end && **q && **q != '"'; (*q)++)
			if (i < n - 1)
				out[i++] = **q;
		if (*q >= end || **q != '"')
			return false;
		(*q)++;
	} else {
		while (*q < end && (isalnum((unsigned char)**q) || **q == '_' || **q == '$'))
			if (i < n - 1)
				out[i++] = (char)tolower((unsigned char)*(*q)++);
			else
				(*q)++;
	}
	out[i] = 0;
	return i > 0;
}

/* DEALLOCATE [PREPARE] { name | ALL }, alone in a query text of n bytes:
 * 0 if it is not that, 1 (name set), 2 for ALL. */
static int parse_deallocate(const char *q, size_t n, char *name, size_t nn)
{
	const char *end = q + strnlen(q, n);
	char w[16];
	if (!ident(&q, end, w, sizeof(w)) || strcmp(w, "deallocate"))
		return 0;
	if (!ident(&q, end, name, nn))
		return 0;
	if (!strcmp(name, "prepare") && !ident(&q, end, name, nn))
		return 0;
	int kind = !strcmp(name, "all") ? 2 : 1;
	while (q < end && (isspace((unsigned char)*q) || *q == ';'))
		q++;
	return q == end ? kind : 0;
}

/* Whether a DEALLOCATE in q (n bytes) depends on an earlier batch still
 * unanswered: one that made, closed or prepares the name (or any). */
static bool dealloc_unsettled(struct client *c, const char *q, size_t n)
{
	char name[256];
	int kind = parse_deallocate(q, n, name, sizeof(name));
	return kind && (rq_unsettled(c->srv, NULL, NULL) ||
			(kind == 1 && rq_unsettled(c->srv, name, NULL)));
}

/* DEALLOCATE of the client's own names in a simple query: the proxy
 * answers it, in order (DEALLOCATE ALL too: the connection's statements
 * are the proxy's, other clients' as well).  false: the server is to run
 * it (a name the client does not have gets the server's 26000, and in an
 * aborted transaction the server's 25P02). */
static bool deallocate(struct client *c, const char *q, size_t n)
{
	char name[256];
	int kind = parse_deallocate(q, n, name, sizeof(name));
	if (!kind || (kind == 1 && !stmt_map_find(c->stmts, name)))
		return false;
	if (c->srv->rq_len || c->status == 'E' || c->ext_open || c->srv->unnamed)
		return false; /* whether it succeeds depends on what is in flight; a
			       * simple query also drops the unnamed statement
			       * (regress-13, 16): the server is to run it */
	if (kind == 1) {
		if (!close_name(c, RQ_QUERY, 'C', name))
			c->out.oom = true;
		return true;
	}
	struct rq *e = rq_push(c->srv, RQ_QUERY, RQ_SYNTH | RQ_DEALLOC_ALL);
	if (!e) {
		c->out.oom = true;
		return true;
	}
	e->synth = 'C';
	stmt_map_clear(c->stmts); /* not given back if skipped: a documented limit */
	return true;
}

/* DEALLOCATE name of the client's that the server is to run, in a simple
 * query (while requests are in flight: whether it succeeds, in an aborted
 * transaction, is the server's to say) or in an unnamed Parse (psycopg 3
 * evicting from its cache sends one): the server runs DEALLOCATE of the
 * proxy's name for it, prepared first if the connection lacks it; the rest
 * of a Parse (parameter types) is kept.  q: the query text, qlen bytes.
 * false: not that (DEALLOCATE ALL, a name the client does not have: the
 * server runs it as sent). */
static bool deallocate_rewrite(struct client *c, const struct msg *m, const char *q, size_t qlen)
{
	char name[256], sql[96];
	if (parse_deallocate(q, qlen, name, sizeof(name)) != 1)
		return false;
	struct stmt *st = stmt_map_find(c->stmts, name);
	if (!st)
		return false;
	struct server *s = c->srv;
	uint64_t id = stmt_id(st);
	uint16_t flags = RQ_CLOSES;
	sql[0] = 0;
	if (m->type == 'Q' && (!srv_stmts_has(s->stmts, id) || s->stmts_unknown)) {
		/* Not on this connection (or not known to be).  A Parse of the
		 * proxy's before the client's query would, if it failed (an
		 * aborted transaction), make the server skip the query and all
		 * after it up to a Sync that may never come (regress-17): one
		 * simple query instead, that prepares a stand-in and drops it,
		 * its PREPARE tag not relayed.  A Close first if it may be there. */
		if (s->stmts_unknown && !close_server_copy(s, id))
			goto oom;
		flags |= RQ_QUIET_PREPARE;
		snprintf(sql, sizeof(sql), "PREPARE pgproxy_%" PRIu64 " AS SELECT;", id);
	} else if (m->type == 'P' && !ensure_prepared(c, st)) {
		goto oom;
	}
	struct rq *e = rq_push(s, m->type == 'Q' ? RQ_QUERY : RQ_PARSE, flags);
	if (!e || !(e->name = strdup(name)))
		goto oom;
	/* the name goes now, as close_name's; it comes back if this fails */
	e->stmt = stmt_hold(st);
	e->reg = stmt_map_reg(c->stmts, name);
	size_t at = strlen(sql);
	snprintf(sql + at, sizeof(sql) - at, "DEALLOCATE pgproxy_%" PRIu64, id);
	struct pkt k;
	pkt_begin(&k, m->type);
	if (m->type == 'P')
		pkt_str(&k, "");
	pkt_str(&k, sql);
	if (m->type == 'P') {
		const char *rest = q + qlen + 1;
		pkt_bytes(&k, rest, (size_t)(m->p + m->total - rest));
	}
	pkt_end(&k, &s->out);
	/* the server's copy goes when it runs: what it has is not known in
	 * between, so later prepares close first */
	srv_stmts_forget(s->stmts, id);
	s->stmts_unknown = true;
	stmt_map_remove(c->stmts, name);
	drop(c, m);
	return true;
oom:
	s->out.oom = true; /* the driver closes the client */
	return true;
}

static bool deallocate_parse(struct client *c, const struct msg *m)
{
	const char *q = m->p + 6; /* after the empty name */
	if (m->total > 5 + PEEK_MAX || m->have < m->total || !P.cfg.max_prepared)
		return false;
	long qlen = cstr(q, m->p + m->total);
	return qlen >= 0 && deallocate_rewrite(c, m, q, (size_t)qlen);
}

static void query_msg(struct client *c, const struct msg *m)
{
	size_t need = m->total < 5 + 64 ? m->total : 5 + 64;
	if (!have(c, m, need))
		return;
	const char *q = m->p + 5, *end = m->p + need;
	while (q < end && isspace((unsigned char)*q))
		q++;
	size_t left = (size_t)(end - q);
	if (P.cfg.max_prepared && left >= 10 && !strncasecmp(q, "deallocate", 10) &&
	    m->total <= 5 + PEEK_MAX) {
		if (!have(c, m, m->total))
			return;
		if (dealloc_unsettled(c, m->p + 5, m->total - 5))
			return; /* does the name exist?  Earlier batches' answers tell */
		if (deallocate(c, m->p + 5, m->total - 5)) {
			drop(c, m);
			return;
		}
		if (deallocate_rewrite(c, m, m->p + 5, strnlen(m->p + 5, m->total - 5)))
			return;
	}
	bool discard = left >= 7 && !strncasecmp(q, "discard", 7);
	if (discard) /* parameters reset: not reused */
		c->srv->dirty = true;
	/* what it does to statements shows in its CommandComplete tag: the
	 * prepares that follow wait for it (rq_unsettled) */
	forward_flags(c, m, RQ_QUERY, discard || (left >= 10 && !strncasecmp(q, "deallocate", 10)) ? RQ_STMTS : 0);
}

/* CopyDone or CopyFail.  In an extended-protocol COPY FROM STDIN the
 * server ignores the Syncs that came during the copy (libpq sends one right
 * after the Execute): a marker in the queue shows where the copy ended, so
 * the relay can drop them (server.c); outside such a copy the marker is
 * dropped when it reaches the front. */
static void copy_end(struct client *c, const struct msg *m)
{
	/* pushed whether or not the copy is known to have begun: its
	 * CopyInResponse may still be on its way */
	if (!rq_push(c->srv, RQ_COPY_END, 0)) {
		c->out.oom = true;
		return;
	}
	forward(c, m, -1);
}

/* One message of a client holding a connection. */
static void linked_message(struct client *c, const struct msg *m)
{
	switch (m->type) {
	case 'P': parse_msg(c, m); break;
	case 'B': bind_msg(c, m); break;
	case 'D': case 'C': stmt_msg(c, m); break;
	case 'Q': query_msg(c, m); break;
	case 'S':
		c->ext_open = false;
		forward(c, m, RQ_SYNC);
		break;
	case 'E':
		c->ext_open = true;
		forward(c, m, RQ_EXECUTE);
		break;
	case 'F': forward(c, m, RQ_FUNC); break;
	case 'H': case 'd': forward(c, m, -1); break;
	case 'c': case 'f': copy_end(c, m); break;
	default: /* the server would end the session: so does the proxy, unshared */
		client_fatal(c, "08P01", "invalid frontend message type %d", (unsigned char)m->type);
		break;
	}
}

/* The admin console: simple queries only. */
static void admin_message(struct client *c, const struct msg *m)
{
	switch (m->type) {
	case 'Q':
		if (m->total > 5 + ADMIN_QUERY_MAX) {
			send_error(&c->out, "ERROR", "54000", "pgproxy admin console: a query longer than %d bytes",
				   ADMIN_QUERY_MAX);
			send_ready(&c->out, 'I');
			break;
		}
		if (!have(c, m, m->total))
			return;
		char sql[ADMIN_QUERY_MAX + 1];
		snprintf(sql, sizeof(sql), "%.*s", (int)strnlen(m->p + 5, m->total - 5), m->p + 5);
		admin_query(&c->out, sql, user_listed(P.cfg.admin_users, c->user));
		send_ready(&c->out, 'I');
		break;
	case 'X':
		client_close(c);
		return;
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
	drop(c, m);
}

/* Between transactions a client's own Parse and Close of a named
 * statement need no server: its names are the proxy's to keep, and the
 * statement is prepared on a connection when a transaction first uses it.
 * (A client that prepares synchronously before each statement, as pgbench
 * -M prepared does, would otherwise need a turn to do so while its other
 * connections hold theirs.)  An error in the statement then comes at its
 * first Bind or Describe.  Returns false when the message needs a server. */
static bool idle_stmt_msg(struct client *c, const struct msg *m)
{
	size_t need = m->total < 5 + PEEK_MAX ? m->total : 5 + PEEK_MAX;
	if (m->type == 'C')
		need = m->total;
	if (!P.cfg.max_prepared || m->total > WHOLE_MAX || !have(c, m, need))
		return !P.cfg.max_prepared || m->total > WHOLE_MAX ? false : true;
	const char *p = m->p + 5, *end = m->p + need;
	if (m->type == 'C') {
		long nlen = m->total >= 7 && *p == 'S' ? cstr(p + 1, end) : -1;
		if (nlen <= 0)
			return false;
		stmt_map_remove(c->stmts, p + 1);
		send_simple(&c->out, '3');
		drop(c, m);
		return true;
	}
	long nlen = cstr(p, end);
	if (nlen <= 0)
		return false; /* unnamed (or malformed: the linked path says so) */
	if (!have(c, m, m->total))
		return true;
	const char *body = p + nlen + 1;
	struct stmt *st = stmt_get(body, (size_t)(m->p + m->total - body));
	int err = !st ? ENOMEM : stmt_map_find(c->stmts, p) ? EEXIST : stmt_map_add(c->stmts, p, st);
	stmt_put(st);
	if (err == ENOMEM) {
		c->out.oom = true;
		return true;
	}
	if (err == EEXIST)
		send_error(&c->out, "ERROR", "42P05", "prepared statement \"%s\" already exists", p);
	else if (err)
		send_error(&c->out, "ERROR", "54000", "pgproxy: too many prepared statements in one session");
	else
		send_simple(&c->out, '1');
	drop(c, m);
	if (err)
		c->skipping = true;
	return true;
}

/* Client to server (or to the proxy itself).  Returns when blocked: more
 * input needed, output over its bound, or nothing moved. */
static void client_input(struct client *c)
{
	while (!c->w.dead && !c->closing) {
		if (c->rl.left) {
			relay_step(&c->rl, &c->in, c->rl.drop ? NULL : &c->srv->out, IN_BOUND);
			if (c->rl.left)
				return;
			continue;
		}
		if (buf_len(&c->out) >= OUT_BOUND)
			return;
		if ((c->state != C_IDLE && c->state != C_LINKED && c->state != C_ADMIN) || c->login)
			return; /* a login in progress: what the client sent waits for it */
		struct msg m;
		int f = frame_peek(&c->in, &m);
		if (f == FRAME_MORE)
			return;
		if (f == FRAME_BAD) {
			client_fatal(c, "08P01", "pgproxy: invalid message length");
			return;
		}
		if (c->state == C_LINKED && (rq_full(c->srv) || buf_len(&c->srv->out) >= IN_BOUND))
			return; /* the server catches up first */
		uint64_t mark = c->in.moved + c->out.moved + c->ticks;
		c->in_need = 0;
		if (c->state == C_LINKED && !c->skipping && m.type != 'S' && rq_skips_next(c->srv))
			c->skipping = true; /* the server would skip it: it changes nothing (no
					     * name of the client's is made or closed) */
		if (c->state == C_ADMIN) {
			admin_message(c, &m);
		} else if (c->skipping) {
			if (m.type == 'S') {
				c->skipping = false;
				if (c->state == C_LINKED) {
					c->ext_open = false;
					forward(c, &m, RQ_SYNC);
				} else {
					send_ready(&c->out, 'I');
					drop(c, &m);
				}
			} else {
				drop(c, &m);
			}
		} else if (m.type == 'X') { /* Terminate; in a transaction it costs the connection */
			if (c->state == C_LINKED && c->srv->rq_len)
				return; /* what came before it is answered first, as by the server */
			client_close(c);
			return;
		} else if (c->state == C_IDLE) {
			if (m.type == 'S') /* a Sync with nothing before it */
				send_ready(&c->out, 'I');
			if (m.type == 'S' || m.type == 'H')
				drop(c, &m);
			else if ((m.type != 'P' && m.type != 'C') || !idle_stmt_msg(c, &m))
				start_acquire(c); /* the first message of a transaction */
		} else {
			linked_message(c, &m);
		}
		if (c->w.dead || c->in_need || mark == c->in.moved + c->out.moved + c->ticks)
			return; /* waiting for bytes, or out of memory: the driver decides */
	}
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
	c->node = (ts_async)TS_ASYNC_INIT;
	c->pass = c->conn_pass = (ts_pass)TS_PASS_NONE;
	if (P.cfg.login_timeout_ns)
		c->login_deadline = ts_now_ns() + P.cfg.login_timeout_ns;
	c->next = l->clients;
	if (l->clients)
		l->clients->prev = c;
	l->clients = c;
	l->nclients++;
	procs_clients_add(1);
	watch_set(&c->w, EPOLLIN | EPOLLRDHUP);
	return c;
}

static void client_close(struct client *c)
{
	if (c->w.dead)
		return;
	client_let_go(c);
	cancel_unregister(c);
	auth_end(c);
	tls_end(&c->tls);
	struct loop *l = c->w.loop;
	if (c->prev)
		c->prev->next = c->next;
	else
		l->clients = c->next;
	if (c->next)
		c->next->prev = c->prev;
	l->nclients--;
	procs_clients_add(-1);
	if (c->up) {
		upool_put(c->up);
		c->up = NULL;
	}
	/* Unread input makes close() reset the connection, which can lose
	 * the error just written: read a little of it away first. */
	char sink[4096];
	for (int i = 0; i < 16 && recv(c->w.fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
		;
	watch_close(&c->w);
	loop_fd_freed(l);
}

/* Queue a FATAL error, give back what the client holds, and close once
 * the output is written. */
void client_fatal(struct client *c, const char *code, const char *fmt, ...)
{
	char text[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	send_error(&c->out, "FATAL", code, "%s", text);
	client_let_go(c);
	c->closing = true;
	c->ticks++;
}

static bool client_idle_for_shutdown(const struct client *c)
{
	return c->state == C_STARTUP || c->state == C_AUTH || (c->state == C_IDLE && !c->login) ||
	       c->state == C_ADMIN;
}

void client_shutdown(struct client *c)
{
	/* Queued clients get ESHUTDOWN from the closed set; those holding a
	 * pass finish their transaction and are closed at its end. */
	if (c->w.dead || c->closing || !client_idle_for_shutdown(c))
		return;
	if (c->state == C_ADMIN) { /* the console that said SHUTDOWN has its answer */
		c->closing = true;
		c->ticks++;
	} else {
		client_fatal(c, "57P01", "pgproxy is shutting down");
	}
	client_drive(c);
}

static void update_masks(struct client *c)
{
	bool reading = !c->closing && buf_len(&c->in) < in_limit(c) && buf_len(&c->out) < OUT_BOUND;
	watch_set(&c->w, EPOLLRDHUP | tls_events(&c->tls, reading, buf_len(&c->out) > 0));
	struct server *s = c->srv;
	uint32_t sm = 0;
	if (s && c->state == C_CONNECTING) {
		sm = s->state == S_CONNECTING ? EPOLLOUT : tls_events(&s->tls, true, buf_len(&s->out) > 0);
	} else if (s && c->state == C_LINKED) {
		reading = buf_len(&c->out) < OUT_BOUND && buf_len(&s->in) < IN_BOUND;
		sm = (reading ? EPOLLRDHUP : 0) | tls_events(&s->tls, reading, buf_len(&s->out) > 0);
	}
	if (s)
		watch_set(&s->w, sm);
}

/* The linked server's bytes, as far as the bounds let them in; a lost
 * connection ends the client's transaction after what it said first. */
static void server_read(struct client *c)
{
	if (buf_len(&c->out) >= OUT_BOUND || buf_len(&c->srv->in) >= IN_BOUND)
		return;
	if (sock_read(c->srv->fd, &c->srv->tls, &c->srv->in, IN_BOUND) < 0) {
		server_input(c);
		if (!c->w.dead && c->srv && c->state == C_LINKED)
			client_server_lost(c, "08006", "pgproxy: the server connection was lost during the transaction");
	}
}

/* Bytes OpenSSL decrypted but did not hand over (a read stopped at a
 * bound) raise no epoll event: read them as the bounds allow.  False if
 * the client is gone. */
static bool tls_read_pending(struct client *c)
{
	if (tls_pending(&c->tls) && buf_len(&c->in) < in_limit(c) && buf_len(&c->out) < OUT_BOUND &&
	    sock_read(c->w.fd, &c->tls, &c->in, in_limit(c)) < 0) {
		client_close(c);
		return false;
	}
	if (c->state == C_LINKED && tls_pending(&c->srv->tls))
		server_read(c);
	else if (c->state == C_CONNECTING && tls_pending(&c->srv->tls))
		server_startup_io(c);
	return !c->w.dead;
}

/* What moves: a change in any of these is progress. */
struct mark {
	uint64_t in, out, ticks, sin, sout;
	const struct server *srv;
};

static struct mark mark_of(const struct client *c)
{
	struct mark m = { c->in.moved, c->out.moved, c->ticks, 0, 0, c->srv };
	if (c->srv) {
		m.sin = c->srv->in.moved;
		m.sout = c->srv->out.moved;
	}
	return m;
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
		struct mark before = mark_of(c);
		if (!c->closing && (c->tls.ssl || (c->srv && c->srv->tls.ssl)) && !tls_read_pending(c))
			return;
		if (!c->closing) {
			if (c->state == C_STARTUP)
				client_startup(c);
			else if (c->state == C_AUTH)
				client_auth(c);
			else
				client_input(c);
			if (c->w.dead)
				return;
			if (c->state == C_LINKED)
				server_input(c);
			if (c->w.dead)
				return;
		}
		if (sock_write(c->w.fd, &c->tls, &c->out) < 0) {
			client_close(c);
			return;
		}
		if (c->state == C_LINKED && buf_len(&c->srv->out) &&
		    sock_write(c->srv->fd, &c->srv->tls, &c->srv->out) < 0)
			client_server_lost(c, "08006", "pgproxy: the server connection was lost during the transaction");
		if (c->closing && (!buf_len(&c->out) || tls_handshaking(&c->tls))) {
			/* written, or unwritable: no error goes out before the
			 * handshake, which a silent peer never finishes */
			client_close(c);
			return;
		}
		struct mark after = mark_of(c);
		if (!memcmp(&before, &after, sizeof(before)))
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
	} else if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) ||
		   (c->tls.read_needs == EPOLLOUT && (events & EPOLLOUT))) { /* TLS: a read that waited to write */
		int r = buf_len(&c->out) < OUT_BOUND ? sock_read(c->w.fd, &c->tls, &c->in, in_limit(c)) : 0;
		if (r < 0 || (r == 0 && (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)))) {
			/* gone: queued, it leaves the queue; in a transaction, the
			 * server connection goes with it */
			client_close(c);
			return;
		}
	}
	client_drive(c);
}

/* An event for an idle server connection, which may be stale: a writable
 * hint left from its last transaction, or readable with the bytes already
 * taken in this batch (OpenSSL reads ahead for a client's driver, whose
 * transaction then ended).  Only a hangup, or bytes or an end still in
 * the socket (a peek, on this rare event only), say it is gone. */
static bool server_idle_event_says_gone(const struct server *s, uint32_t events)
{
	if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		return true;
	return (events & EPOLLIN) && !server_socket_quiet(s);
}

void server_event(struct watch *w, uint32_t events)
{
	struct server *s = container_of(w, struct server, w);
	struct client *c = s->user;
	if (!c) { /* idle: closed by the server, or it spoke unasked */
		if (server_idle_event_says_gone(s, events)) {
			s->broken = true;
			watch_set(w, 0); /* level-triggered: no more of it */
		}
		return;
	}
	if (c->w.dead || c->srv != s)
		return; /* stale: the client was closed in this batch */
	if (c->state == C_CONNECTING)
		server_startup_io(c);
	else if (c->state == C_LINKED)
		server_read(c);
	client_drive(c);
}

void client_tick(struct client *c, int64_t now)
{
	if (c->w.dead || c->closing)
		return;
	if (c->login_deadline && now >= c->login_deadline &&
	    (c->state == C_STARTUP || c->state == C_AUTH || c->login)) {
		client_fatal(c, "08006", "pgproxy: no login within --client-login-timeout");
	} else if (c->state == C_CONNECTING && c->srv->deadline_ns && now >= c->srv->deadline_ns) {
		client_server_failed_msg(c, "08001", "pgproxy: no connection to the server within --server-connect-timeout");
	} else {
		return;
	}
	client_drive(c);
}

void conn_free(struct watch *w)
{
	if (w->kind == K_CLIENT) {
		struct client *c = container_of(w, struct client, w);
		buf_free(&c->in);
		buf_free(&c->out);
		stmt_map_free(c->stmts);
		free(c);
	} else if (w->kind == K_SERVER) {
		free(container_of(w, struct server, w));
	} else if (w->kind == K_CANCEL) {
		cancel_free(w);
	} else if (w->kind == K_CLOSER) {
		conns_closer_free(w);
	}
}
