/* SPDX-License-Identifier: MIT */
/* pgproxy: a transaction-pooling PostgreSQL proxy whose pools admit
 * transactions by band, then age (libturnstile's event-loop waiters).
 *
 *   pgproxy --listen 127.0.0.1:6433 [--listen /dir] --server 'host=/run/postgresql port=5432'
 *           [--pool-size 4] [--band application_name=NAME:BAND | user=NAME:BAND]...
 *           [--default-band B] [--wait-timeout 5s] [--threads N] [--processes N]
 *           [--fleet 'endpoints=http://etcd:2379 key=/pgproxy ceiling=12']
 *
 * This file: options, pools, the loop threads, accept, shutdown (a
 * master and its workers: processes.c).  See README.md in this folder for
 * what is supported. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "pgproxy.h"

struct proxy P;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: pgproxy --listen HOST:PORT [--listen /socket/dir] --server 'host=H port=P [password=W]'\n"
		"               [--pool-size N] [--band application_name=NAME:BAND] [--band user=NAME:BAND]\n"
		"               [--default-band B] [--wait-timeout DURATION] [--threads N] [--processes N]\n"
		"               [--max-prepared N] [--fleet 'endpoints=URL[,URL] key=/PREFIX ceiling=N']\n"
		"               [--client-login-timeout D] [--server-connect-timeout D]\n"
		"               [--server-idle-timeout D] [--server-lifetime D] [--ignore-startup-parameters P,...]\n"
		"               (--auth-file FILE [--auth-type scram-sha-256] | --auth-type trust)\n"
		"               [--admin-users U,...] [--stats-users U,...]\n"
		"               [--tls-cert FILE --tls-key FILE [--tls-require]]\n"
		"  --auth-file FILE     users and their passwords or SCRAM secrets (pgbouncer's userlist\n"
		"                       format; mode 600 or 640): clients prove theirs with SCRAM-SHA-256,\n"
		"                       and pgproxy logs in to the server with it (SCRAM, MD5 or password);\n"
		"                       re-read on SIGHUP\n"
		"  --auth-type T        scram-sha-256 (the default with --auth-file), or trust: anyone\n"
		"                       who reaches the port is whoever they say\n"
		"  --admin-users U,...  may use the admin console, RESIZE and SHUTDOWN included\n"
		"  --stats-users U,...  may use the admin console's SHOW commands\n"
		"  --tls-cert, --tls-key  PEM certificate (chain) and key: SSLRequest answered 'S'\n"
		"  --tls-require        clients must use TLS (CancelRequest excepted)\n"
		"  --server sslmode=disable|prefer|require|verify-full [sslrootcert=FILE]: TLS to the server\n"
		"  --pool-size N        server connections per database, the turnstile's ceiling (default 4)\n"
		"  --band KEY=NAME:BAND clients whose application_name or user is NAME queue in BAND\n"
		"                       (0 first, up to %d; the first matching rule wins)\n"
		"  --default-band B     band of clients no rule matches (default 1)\n"
		"  --wait-timeout D     give up on a queued transaction after D (5s, 200ms; 0: never)\n"
		"  --threads N          event-loop threads (default 1)\n"
		"  --processes N        N worker processes on one port (SO_REUSEPORT), each with\n"
		"                       --threads loops, sharing each pool's ceiling and queue; a\n"
		"                       dead worker is replaced (default: this process alone)\n"
		"  --fleet SPEC         each database's ceiling shared with every pgproxy given the same\n"
		"                       key, through etcd: endpoints=URL[,URL...] key=/PREFIX ceiling=N\n"
		"                       [lease=5s] [member=NAME]; --pool-size is not used (SHOW FLEET)\n"
		"  --max-prepared N     named prepared statements kept per server connection (0: refused;\n"
		"                       default 0)\n"
		"  --client-login-timeout D    close a client that has not logged in after D (default 60s)\n"
		"  --server-connect-timeout D  give up making a server connection after D (default 15s)\n"
		"  --server-idle-timeout D     close a server connection idle for D (default 600s; 0: never)\n"
		"  --server-lifetime D         retire a server connection older than D when idle\n"
		"                              (default 3600s; 0: never)\n"
		"  --ignore-startup-parameters P,...  startup parameters to ignore instead of refusing\n"
		"admin console: psql -h HOST -p PORT pgproxy -c 'SHOW POOLS' (SHOW BANDS, SHOW FLEET, RESIZE db N, SHUTDOWN)\n",
		MAX_BANDS - 1);
}

static void die(const char *fmt, const char *arg)
{
	fprintf(stderr, "pgproxy: ");
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
	exit(2);
}

static long parse_int(const char *s, long lo, long hi, const char *what)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "pgproxy: %s must be a whole number in [%ld, %ld], not \"%s\"\n", what,
			lo, hi, s);
		exit(2);
	}
	return v;
}

/* "5s", "200ms", "1.5s", "250us", "2min"; a bare number is seconds. */
static int64_t parse_duration(const char *opt, const char *s)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	double unit = 1e9;
	if (errno || end == s || !(v >= 0 && v <= 1e9)) { /* NaN too */
		fprintf(stderr, "pgproxy: %s takes a duration such as 5s or 200ms, not \"%s\"\n", opt, s);
		exit(2);
	}
	if (!strcmp(end, "ms"))
		unit = 1e6;
	else if (!strcmp(end, "us"))
		unit = 1e3;
	else if (!strcmp(end, "min"))
		unit = 60e9;
	else if (strcmp(end, "s") && *end) {
		fprintf(stderr, "pgproxy: %s takes a duration such as 5s or 200ms, not \"%s\"\n", opt, s);
		exit(2);
	}
	return (int64_t)(v * unit);
}

static void add_rule(const char *spec)
{
	const char *eq = strchr(spec, '='), *colon = strrchr(spec, ':');
	struct band_rule r = { 0 };
	if (!eq || !colon || colon < eq)
		die("--band takes KEY=NAME:BAND (KEY application_name or user), not \"%s\"", spec);
	size_t klen = (size_t)(eq - spec);
	if (klen == 16 && !strncmp(spec, "application_name", klen))
		r.key = KEY_APP;
	else if (klen == 4 && !strncmp(spec, "user", klen))
		r.key = KEY_USER;
	else
		die("--band: KEY is application_name or user, in \"%s\"", spec);
	size_t nlen = (size_t)(colon - eq - 1);
	if (nlen >= NAME_LEN)
		die("--band: NAME too long in \"%s\"", spec);
	memcpy(r.name, eq + 1, nlen);
	r.band = (int)parse_int(colon + 1, 0, MAX_BANDS - 1, "--band's BAND");
	struct band_rule *rules = realloc(P.cfg.rules, sizeof(*rules) * (size_t)(P.cfg.nrules + 1));
	if (!rules)
		die("%s", "out of memory");
	rules[P.cfg.nrules++] = r;
	P.cfg.rules = rules;
}

/* libpq conninfo style: key=value pairs, values optionally 'quoted'. */
static void parse_server(const char *s)
{
	char key[64], val[256];
	snprintf(P.cfg.server_host, sizeof(P.cfg.server_host), "/var/run/postgresql");
	P.cfg.server_port = 5432;
	while (*s) {
		while (*s == ' ' || *s == '\t')
			s++;
		if (!*s)
			break;
		size_t k = 0, v = 0;
		while (*s && *s != '=' && *s != ' ' && k < sizeof(key) - 1)
			key[k++] = *s++;
		key[k] = 0;
		while (*s == ' ')
			s++;
		if (*s++ != '=')
			die("--server: expected key=value, near \"%s\"", key);
		while (*s == ' ')
			s++;
		if (*s == '\'') {
			for (s++; *s && *s != '\''; s++) {
				if (*s == '\\' && s[1])
					s++;
				if (v < sizeof(val) - 1)
					val[v++] = *s;
			}
			if (*s++ != '\'')
				die("--server: unterminated quote after %s=", key);
		} else {
			while (*s && *s != ' ' && v < sizeof(val) - 1)
				val[v++] = *s++;
		}
		val[v] = 0;
		if (!strcmp(key, "host"))
			snprintf(P.cfg.server_host, sizeof(P.cfg.server_host), "%s", val);
		else if (!strcmp(key, "port"))
			P.cfg.server_port = (int)parse_int(val, 1, 65535, "--server's port");
		else if (!strcmp(key, "password"))
			snprintf(P.cfg.server_password, sizeof(P.cfg.server_password), "%s", val);
		else if (!strcmp(key, "sslmode") && !strcmp(val, "disable"))
			P.cfg.server_sslmode = SSL_DISABLE;
		else if (!strcmp(key, "sslmode") && !strcmp(val, "prefer"))
			P.cfg.server_sslmode = SSL_PREFER;
		else if (!strcmp(key, "sslmode") && !strcmp(val, "require"))
			P.cfg.server_sslmode = SSL_REQUIRE;
		else if (!strcmp(key, "sslmode") && !strcmp(val, "verify-full"))
			P.cfg.server_sslmode = SSL_VERIFY_FULL;
		else if (!strcmp(key, "sslmode"))
			die("--server: sslmode is disable, prefer, require or verify-full, not \"%s\"", val);
		else if (!strcmp(key, "sslrootcert"))
			snprintf(P.cfg.server_rootcert, sizeof(P.cfg.server_rootcert), "%s", val);
		else if (!strcmp(key, "user") || !strcmp(key, "dbname"))
			die("--server: %s comes from each client, not from --server", key);
		else
			die("--server: unknown key \"%s\" (host, port, password, sslmode and sslrootcert are "
			    "understood)", key);
	}
}

/* --fleet 'endpoints=URL[,URL...] key=/PREFIX ceiling=N [lease=D] [member=NAME]' */
static void parse_fleet(const char *spec)
{
	struct fleet_opts *o = &P.cfg.fleet;
	char copy[2048], *save, *tok;
	if (o->on)
		die("%s", "--fleet given twice");
	o->ceiling = -1;
	if (strlen(spec) >= sizeof(copy))
		die("%s", "--fleet: too long");
	snprintf(copy, sizeof(copy), "%s", spec);
	for (tok = strtok_r(copy, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
		char *eq = strchr(tok, '=');
		if (!eq || eq == tok || !eq[1])
			die("--fleet: expected key=value, not \"%s\"", tok);
		*eq++ = 0;
		if (!strcmp(tok, "endpoints") && strlen(eq) < sizeof(o->endpoints))
			snprintf(o->endpoints, sizeof(o->endpoints), "%s", eq);
		else if (!strcmp(tok, "key") && eq[0] == '/' && strlen(eq) <= 190)
			snprintf(o->key, sizeof(o->key), "%s", eq);
		else if (!strcmp(tok, "member") && strlen(eq) < sizeof(o->member) &&
			 !strpbrk(eq, "/\""))
			snprintf(o->member, sizeof(o->member), "%s", eq);
		else if (!strcmp(tok, "ceiling"))
			o->ceiling = parse_int(eq, 0, 10000, "--fleet's ceiling");
		else if (!strcmp(tok, "lease") &&
			 (o->lease_ns = parse_duration("--fleet's lease", eq)) >= 2000000000 &&
			 o->lease_ns <= (int64_t)3600 * 1000000000)
			;
		else if (!strcmp(tok, "lease"))
			die("%s", "--fleet: lease= is between 2s and 1h");
		else if (!strcmp(tok, "endpoints") || !strcmp(tok, "key") || !strcmp(tok, "member"))
			die("--fleet: %s too long (a key starts with '/' and leaves room for "
			    "\"/DATABASE\": at most 190 bytes; a member has no '/' or '\"')", tok);
		else
			die("--fleet: unknown key \"%s\" (endpoints, key, ceiling, lease, member)", tok);
	}
	if (!o->endpoints[0] || !o->key[0] || o->ceiling < 0)
		die("%s", "--fleet needs endpoints=, key= and ceiling=");
	o->on = true;
}

/* No trust by default: clients are checked against the auth file unless
 * trust is asked for by name. */
static void configure_auth(const char *auth_type)
{
	if (!auth_type && !P.cfg.auth_file[0])
		die("%s", "clients must be authenticated: give --auth-file FILE (SCRAM-SHA-256), or "
			  "--auth-type trust to let in anyone who reaches the port as any user they name");
	P.cfg.auth_scram = !auth_type || !strcmp(auth_type, "scram-sha-256");
	if (P.cfg.auth_scram && !P.cfg.auth_file[0])
		die("%s", "--auth-type scram-sha-256 checks clients against --auth-file FILE: give one");
	char err[600];
	if (P.cfg.auth_file[0] && authfile_open(P.cfg.auth_file, err, sizeof(err)) != 0)
		die("--auth-file: %s", err);
}

static void configure_tls(void)
{
	char err[600];
	if (!P.cfg.tls_cert[0] != !P.cfg.tls_key[0])
		die("%s", "--tls-cert and --tls-key go together");
	if (P.cfg.tls_require && !P.cfg.tls_cert[0])
		die("%s", "--tls-require needs --tls-cert and --tls-key");
	if (P.cfg.tls_cert[0] && tls_setup_clients(P.cfg.tls_cert, P.cfg.tls_key, err, sizeof(err)) != 0)
		die("%s", err);
	if (P.cfg.server_host[0] == '/' && P.cfg.server_sslmode >= SSL_REQUIRE)
		die("%s", "--server: PostgreSQL speaks no TLS on a Unix socket: sslmode=require and "
			  "verify-full need host=ADDRESS");
	if (P.cfg.server_host[0] == '/')
		P.cfg.server_sslmode = SSL_DISABLE; /* prefer: there is nothing to prefer */
	if (P.cfg.server_rootcert[0] && P.cfg.server_sslmode != SSL_VERIFY_FULL)
		die("%s", "--server: sslrootcert= is for sslmode=verify-full");
	const char *modes[] = { "disable", "prefer", "require", "verify-full" };
	if (P.cfg.server_sslmode != SSL_DISABLE &&
	    tls_setup_server(modes[P.cfg.server_sslmode], P.cfg.server_rootcert, err, sizeof(err)) != 0)
		die("--server: %s", err);
}

static bool loopback(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
	if (ss->ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(a) ||
		       (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return true;
}

static void resolve_server(void)
{
	const char *h = P.cfg.server_host;
	if (h[0] == '/') {
		struct sockaddr_un *un = (struct sockaddr_un *)&P.server_addr;
		un->sun_family = AF_UNIX;
		if ((size_t)snprintf(un->sun_path, sizeof(un->sun_path), "%s/.s.PGSQL.%d", h,
				     P.cfg.server_port) >= sizeof(un->sun_path))
			die("--server: socket path too long under %s", h);
		P.server_addrlen = sizeof(*un);
		return;
	}
	char port[16];
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
	snprintf(port, sizeof(port), "%d", P.cfg.server_port);
	int err = getaddrinfo(h, port, &hints, &ai);
	if (err)
		die("--server: cannot resolve the host: %s", gai_strerror(err));
	memcpy(&P.server_addr, ai->ai_addr, ai->ai_addrlen);
	P.server_addrlen = ai->ai_addrlen;
	freeaddrinfo(ai);
}

static bool unix_socket_live(const struct sockaddr_un *un)
{
	int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool live = probe >= 0 && connect(probe, (const struct sockaddr *)un, sizeof(*un)) == 0;
	if (probe >= 0)
		close(probe);
	return live;
}

/* TCP: LISTEN alone; HOLD binds with SO_REUSEPORT and does not listen (the
 * master keeps the port), SHARE binds to the held address and listens. */
enum listen_mode { LISTEN, HOLD, SHARE };

static int listen_on(const char *spec, enum listen_mode mode)
{
	int fd;
	if (spec[0] == '/') {
		struct sockaddr_un un = { .sun_family = AF_UNIX };
		if ((size_t)snprintf(P.unix_path, sizeof(P.unix_path), "%s/.s.PGSQL.%d", spec,
				     P.cfg.listen_port) >= sizeof(un.sun_path))
			die("--listen: socket path too long under %s", spec);
		strcpy(un.sun_path, P.unix_path);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			die("cannot make a Unix socket: %s", strerror(errno));
		if (bind(fd, (struct sockaddr *)&un, sizeof(un)) != 0) {
			/* a stale file left by a crash is replaced; a live socket is not */
			if (errno != EADDRINUSE || unix_socket_live(&un))
				die("cannot listen on %s: in use, or not allowed", P.unix_path);
			unlink(un.sun_path);
			if (bind(fd, (struct sockaddr *)&un, sizeof(un)) != 0)
				die("cannot listen on %s", P.unix_path);
		}
		if (listen(fd, 1024) != 0)
			die("cannot listen on %s", P.unix_path);
		return fd;
	}
	char host[256];
	const char *colon = strrchr(spec, ':');
	if (!colon || (size_t)(colon - spec) >= sizeof(host))
		die("--listen takes HOST:PORT or a socket directory, not \"%s\"", spec);
	parse_int(colon + 1, 0, 65535, "--listen's port");
	memcpy(host, spec, (size_t)(colon - spec));
	host[colon - spec] = 0;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *ai;
	int err = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &ai);
	if (err)
		die("--listen: %s", gai_strerror(err));
	const struct sockaddr *addr = ai->ai_addr;
	socklen_t addrlen = ai->ai_addrlen;
	if (mode == SHARE) { /* the address the master holds (its port, for port 0) */
		addr = (const struct sockaddr *)&P.listen_addr;
		addrlen = P.listen_addrlen;
	}
	fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    (mode != LISTEN && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) ||
	    bind(fd, addr, addrlen) != 0 || (mode != HOLD && listen(fd, 1024) != 0)) {
		fprintf(stderr, "pgproxy: cannot listen on %s: %s\n", spec, strerror(errno));
		exit(1);
	}
	freeaddrinfo(ai);
	return fd;
}

/* ---------------------------------------------------------------- loops */

void loop_wake_all(void)
{
	uint64_t one = 1;
	for (int i = 0; i < P.cfg.threads; i++)
		if (write(P.loops[i].wake_w.fd, &one, sizeof(one)) != sizeof(one))
			perror("pgproxy: waking a loop");
}

static void loop_stop(struct loop *l)
{
	l->stopping = true;
	for (int i = 0; i < P.nlisten; i++)
		watch_set(&l->listen_w[i], 0); /* the fds are closed by main */
	for (struct client *c = l->clients, *next; c; c = next) {
		next = c->next;
		client_shutdown(c);
	}
}

#define TICK_NS ((int64_t)250 * 1000000)  /* timeouts are checked this often */
#define SHARE_NS ((int64_t)10 * 1000000)  /* --processes: connections other workers wait for */
#define EMFILE_PAUSE_NS ((int64_t)1000 * 1000000)

static void accept_pause(struct loop *l, bool on)
{
	l->accept_paused_until = on ? ts_now_ns() + EMFILE_PAUSE_NS : 0;
	for (int i = 0; i < P.nlisten; i++)
		watch_set(&l->listen_w[i], on || l->stopping ? 0 : EPOLLIN | EPOLLEXCLUSIVE);
}

/* Out of descriptors, accept would fail at once for ever (the pending
 * connection stays pending): stop accepting until one is closed, or for a
 * second, and say so at most every 5 s. */
static void out_of_fds(struct loop *l)
{
	static _Atomic int64_t last_log;
	int64_t now = ts_now_ns(), prev = atomic_load(&last_log);
	if (now - prev >= (int64_t)5000 * 1000000 && atomic_compare_exchange_strong(&last_log, &prev, now))
		fprintf(stderr, "pgproxy: accept: %s: not accepting until a connection closes\n",
			strerror(errno));
	accept_pause(l, true);
}

void loop_fd_freed(struct loop *l)
{
	if (l->accept_paused_until)
		accept_pause(l, false);
}

static void accept_clients(struct loop *l, int lfd)
{
	for (int i = 0; i < 64; i++) { /* then let other events in */
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
				out_of_fds(l);
			else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
				 errno != ECONNABORTED)
				fprintf(stderr, "pgproxy: accept: %s\n", strerror(errno));
			return;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* fails on Unix sockets: fine */
		client_new(l, fd);
	}
}

/* Every TICK_NS: login and connect timeouts, clients waiting to retry a
 * connection, the back-off, and (loop 0) idle and old connections. */
static void loop_tick(struct loop *l, int64_t now)
{
	l->next_tick = now + TICK_NS;
	if (l->accept_paused_until && now >= l->accept_paused_until && !l->stopping)
		accept_pause(l, false);
	for (struct client *c = l->clients, *next; c; c = next) {
		next = c->next;
		client_tick(c, now);
	}
	if (l->idx == 0) {
		pools_trim_all();
		pools_reap();
	}
}

static void loop_retries(struct loop *l)
{
	for (struct client *c = l->clients, *next; c; c = next) {
		next = c->next;
		if (c->retry)
			client_retry(c);
	}
}

static bool any_retry(const struct loop *l)
{
	for (const struct client *c = l->clients; c; c = c->next)
		if (c->retry)
			return true;
	return false;
}

/* Events of servers idle when the batch began (watched by their only
 * loop) go first: a close among them marks its connection broken before
 * any handler of this batch can take it from the pool, so server_usable
 * may trust the mark without a peek.  Handled ones are blanked. */
static void idle_server_events_first(struct epoll_event *ev, int n)
{
	for (int i = 0; i < n; i++) {
		struct watch *w = ev[i].data.ptr;
		if (w->kind != K_SERVER || w->dead || container_of(w, struct server, w)->user)
			continue;
		server_event(w, ev[i].events);
		ev[i].data.ptr = NULL;
	}
}

static void *loop_run(void *arg)
{
	struct loop *l = arg;
	struct epoll_event ev[64];
	const int batch = (int)(sizeof(ev) / sizeof(ev[0]));
	l->next_tick = ts_now_ns() + TICK_NS;
	bool sharer = l->idx == 0 && (P.worker >= 0 || P.cfg.fleet.on);
	int64_t next_share = 0;
	while (!l->stopping || l->nclients || l->ncancels) {
		/* passes and connections this loop gave back to its own
		 * clients (socket handlers): their callbacks run here, with no
		 * eventfd write and no extra trip through epoll */
		ts_notifier_before_poll(l->notifier);
		int64_t before = ts_now_ns();
		int64_t wait_ns = (sharer && next_share < l->next_tick ? next_share : l->next_tick) - before;
		int timeout = any_retry(l) ? 1 : wait_ns <= 0 ? 0 : (int)(wait_ns / 1000000) + 1;
		int n = epoll_wait(l->ep, ev, batch, timeout);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			perror("pgproxy: epoll_wait");
			abort();
		}
		l->in_batch = true;
		l->polled_at = n < batch ? before : 0;
		idle_server_events_first(ev, n);
		for (int i = 0; i < n; i++) {
			struct watch *w = ev[i].data.ptr;
			if (!w || w->dead)
				continue;
			switch (w->kind) {
			case K_LISTEN:
				if (!l->stopping && !l->accept_paused_until)
					accept_clients(l, w->fd);
				break;
			case K_NOTIFIER:
				ts_notifier_dispatch(l->notifier);
				break;
			case K_WAKE: {
				uint64_t v;
				if (read(w->fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
					perror("pgproxy: eventfd");
				break;
			}
			case K_SIGNAL: {
				struct signalfd_siginfo si;
				if (read(w->fd, &si, sizeof(si)) != sizeof(si))
					break;
				if (si.ssi_signo == SIGHUP)
					authfile_reload();
				else
					begin_shutdown();
				break;
			}
			case K_CLIENT:
				client_event((struct client *)(void *)w, ev[i].events);
				break;
			case K_SERVER:
				server_event(w, ev[i].events);
				break;
			case K_CANCEL:
				cancel_event(w, ev[i].events);
				break;
			case K_PEER:
				procs_peer_event(l);
				break;
			case K_CLOSER:
				conns_closer_event(w);
				break;
			}
		}
		l->in_batch = false;
		server_put_after_batch(l);
		loop_retries(l);
		int64_t now = ts_now_ns();
		if (sharer && now >= next_share) {
			next_share = now + SHARE_NS;
			pools_share();
			conns_tick();
		}
		if (now >= l->next_tick)
			loop_tick(l, now);
		if (atomic_load(&P.shutting_down) && !l->stopping)
			loop_stop(l);
		while (l->zombies) {
			struct watch *z = l->zombies;
			l->zombies = z->zombie_next;
			conn_free(z);
		}
	}
	if (sharer)
		conns_loops_gone();
	return NULL;
}

static void loop_init(struct loop *l, int idx, int sigfd)
{
	l->idx = idx;
	l->ep = epoll_create1(EPOLL_CLOEXEC);
	l->notifier = ts_notifier_new();
	int wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (l->ep < 0 || !l->notifier || wfd < 0) {
		perror("pgproxy: loop setup");
		exit(1);
	}
	l->notify_w = (struct watch){ .kind = K_NOTIFIER, .fd = ts_notifier_fd(l->notifier), .loop = l };
	l->wake_w = (struct watch){ .kind = K_WAKE, .fd = wfd, .loop = l };
	watch_set(&l->notify_w, EPOLLIN);
	watch_set(&l->wake_w, EPOLLIN);
	for (int i = 0; i < P.nlisten; i++) {
		/* every loop accepts; EPOLLEXCLUSIVE wakes one per connection */
		l->listen_w[i] = (struct watch){ .kind = K_LISTEN, .fd = P.listen_fd[i], .loop = l };
		watch_set(&l->listen_w[i], EPOLLIN | EPOLLEXCLUSIVE);
	}
	l->signal_w = (struct watch){ .kind = K_SIGNAL, .fd = sigfd, .loop = l };
	if (sigfd >= 0)
		watch_set(&l->signal_w, EPOLLIN);
	if (idx == 0 && P.worker >= 0) { /* cancels other workers were sent */
		l->peer_w = (struct watch){ .kind = K_PEER, .fd = procs_peer_fd(), .loop = l };
		watch_set(&l->peer_w, EPOLLIN);
	}
}

int main(int argc, char **argv)
{
	const char *listens[2] = { 0 };
	int nlistens = 0;
	bool have_server = false;
	const char *auth_type = NULL;
	P.cfg.pool_size = 4;
	P.cfg.default_band = 1;
	P.cfg.threads = 1;
	P.worker = -1;
	P.cfg.wait_timeout_ns = 0;
	P.cfg.login_timeout_ns = 60 * (int64_t)1000000000; /* pgbouncer's defaults */
	P.cfg.connect_timeout_ns = 15 * (int64_t)1000000000;
	P.cfg.idle_timeout_ns = 600 * (int64_t)1000000000;
	P.cfg.lifetime_ns = 3600 * (int64_t)1000000000;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(a, "--tls-require")) { /* takes no value */
			P.cfg.tls_require = true;
			continue;
		}
		if (!v) {
			fprintf(stderr, "pgproxy: %s needs a value\n", a);
			usage(stderr);
			return 2;
		}
		i++;
		if (!strcmp(a, "--listen")) {
			if (nlistens == 2)
				die("%s", "--listen: at most one HOST:PORT and one socket directory");
			listens[nlistens++] = v;
		} else if (!strcmp(a, "--server")) {
			parse_server(v);
			have_server = true;
		} else if (!strcmp(a, "--pool-size")) {
			P.cfg.pool_size = (int)parse_int(v, 1, 10000, "--pool-size");
		} else if (!strcmp(a, "--band")) {
			add_rule(v);
		} else if (!strcmp(a, "--default-band")) {
			P.cfg.default_band = (int)parse_int(v, 0, MAX_BANDS - 1, "--default-band");
		} else if (!strcmp(a, "--wait-timeout")) {
			P.cfg.wait_timeout_ns = parse_duration(a, v);
		} else if (!strcmp(a, "--client-login-timeout")) {
			P.cfg.login_timeout_ns = parse_duration(a, v);
		} else if (!strcmp(a, "--server-connect-timeout")) {
			P.cfg.connect_timeout_ns = parse_duration(a, v);
		} else if (!strcmp(a, "--server-idle-timeout")) {
			P.cfg.idle_timeout_ns = parse_duration(a, v);
		} else if (!strcmp(a, "--server-lifetime")) {
			P.cfg.lifetime_ns = parse_duration(a, v);
		} else if (!strcmp(a, "--max-prepared")) {
			P.cfg.max_prepared = (int)parse_int(v, 0, 100000, "--max-prepared");
		} else if (!strcmp(a, "--ignore-startup-parameters")) {
			if (strlen(v) >= sizeof(P.cfg.ignore_params))
				die("%s", "--ignore-startup-parameters: list too long");
			snprintf(P.cfg.ignore_params, sizeof(P.cfg.ignore_params), "%s", v);
		} else if (!strcmp(a, "--auth-file")) {
			if (strlen(v) >= sizeof(P.cfg.auth_file))
				die("%s", "--auth-file: path too long");
			snprintf(P.cfg.auth_file, sizeof(P.cfg.auth_file), "%s", v);
		} else if (!strcmp(a, "--tls-cert") || !strcmp(a, "--tls-key")) {
			char *dst = a[6] == 'c' ? P.cfg.tls_cert : P.cfg.tls_key;
			if (strlen(v) >= sizeof(P.cfg.tls_cert))
				die("%s: path too long", a);
			snprintf(dst, sizeof(P.cfg.tls_cert), "%s", v);
		} else if (!strcmp(a, "--auth-type")) {
			if (strcmp(v, "trust") && strcmp(v, "scram-sha-256"))
				die("--auth-type is trust or scram-sha-256, not \"%s\"", v);
			auth_type = v;
		} else if (!strcmp(a, "--admin-users") || !strcmp(a, "--stats-users")) {
			char *dst = a[2] == 'a' ? P.cfg.admin_users : P.cfg.stats_users;
			if (strlen(v) >= sizeof(P.cfg.admin_users))
				die("%s: list too long", a);
			snprintf(dst, sizeof(P.cfg.admin_users), "%s", v);
		} else if (!strcmp(a, "--threads")) {
			P.cfg.threads = (int)parse_int(v, 1, 64, "--threads");
		} else if (!strcmp(a, "--processes")) {
			P.cfg.processes = (int)parse_int(v, 1, MAX_PROCESSES, "--processes");
		} else if (!strcmp(a, "--fleet")) {
#ifdef PGPROXY_FLEET
			parse_fleet(v);
#else
			die("%s", "--fleet: this pgproxy was built without libturnstile-fleet "
				  "(configure found no libcurl or json-c)");
#endif
		} else {
			fprintf(stderr, "pgproxy: unknown option %s\n", a);
			usage(stderr);
			return 2;
		}
	}
	if (!nlistens || !have_server) {
		usage(stderr);
		return 2;
	}
	configure_auth(auth_type);
	configure_tls();
	if (P.cfg.fleet.on && P.cfg.processes)
		die("%s", "--fleet with --processes is not supported yet: run one pgproxy per "
			  "fleet member");
	if (P.cfg.fleet.on)
		P.cfg.pool_size = (int)P.cfg.fleet.ceiling; /* the fleet's, shared */
	if (nlistens == 2 && (listens[0][0] == '/') == (listens[1][0] == '/'))
		die("%s", "--listen: at most one HOST:PORT and one socket directory");
	if (nlistens == 2 && listens[0][0] == '/') { /* TCP first: the socket file is named after its port */
		const char *t = listens[0];
		listens[0] = listens[1];
		listens[1] = t;
	}
	P.cfg.listen_port = 6432; /* a socket directory alone: PostgreSQL's usual port */
	resolve_server();
	P.max_band = P.cfg.default_band;
	for (int i = 0; i < P.cfg.nrules; i++)
		if (P.cfg.rules[i].band > P.max_band)
			P.max_band = P.cfg.rules[i].band;

	/* SIGINT and SIGTERM shut down as the admin SHUTDOWN does, through a
	 * signalfd in loop 0; every thread inherits the mask.  SIGHUP re-reads
	 * the auth file there. */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP); /* the auth file, read again */
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	int sigfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);

	pthread_mutex_init(&P.pools_mu, NULL);
	if (sigfd < 0) {
		perror("pgproxy: setup");
		return 1;
	}
	char where[2][300];
	for (int i = 0; i < nlistens; i++) {
		P.listen_fd[P.nlisten++] = listen_on(listens[i], P.cfg.processes ? HOLD : LISTEN);
		if (listens[i][0] == '/') {
			snprintf(where[i], sizeof(where[i]), "%s", P.unix_path);
		} else { /* port 0: the kernel's choice, which the log line tells */
			struct sockaddr_storage ss;
			socklen_t len = sizeof(ss);
			char host[256] = "?";
			getsockname(P.listen_fd[i], (struct sockaddr *)&ss, &len);
			memcpy(&P.listen_addr, &ss, len);
			P.listen_addrlen = len;
			P.cfg.listen_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
									   : ((struct sockaddr_in *)&ss)->sin_port);
			getnameinfo((struct sockaddr *)&ss, len, host, sizeof(host), NULL, 0, NI_NUMERICHOST);
			if (!P.cfg.auth_scram && !loopback(&ss))
				fprintf(stderr, "pgproxy: WARNING: --auth-type trust on %s, which is not a loopback "
						"address: anyone who can reach it logs in as any user\n", host);
			snprintf(where[i], sizeof(where[i]), "%s:%d", host, P.cfg.listen_port);
		}
	}
	char procs[64] = "", size[1400], listening[3072];
	if (P.cfg.processes)
		snprintf(procs, sizeof(procs), " in each of %d processes", P.cfg.processes);
	if (P.cfg.fleet.on)
		snprintf(size, sizeof(size), "fleet ceiling %d at %s/DATABASE over %s",
			 P.cfg.pool_size, P.cfg.fleet.key, P.cfg.fleet.endpoints);
	else
		snprintf(size, sizeof(size), "pool size %d", P.cfg.pool_size);
	snprintf(listening, sizeof(listening),
		 "pgproxy: listening on %s%s%s, server %s port %d, %s, %d thread%s%s\n",
		 where[0], nlistens > 1 ? " and " : "", nlistens > 1 ? where[1] : "",
		 P.cfg.server_host, P.cfg.server_port, size, P.cfg.threads,
		 P.cfg.threads > 1 ? "s" : "", procs);
	if (!P.cfg.processes)
		fputs(listening, stderr);
	if (P.cfg.processes) {
		/* the master says it listens once a worker does */
		if (!procs_start(listening)) { /* the master, once every worker has shut down */
			for (int i = 0; i < P.nlisten; i++)
				close(P.listen_fd[i]);
			if (P.unix_path[0])
				unlink(P.unix_path);
			fprintf(stderr, "pgproxy: shut down\n");
			return 0;
		}
		P.unix_path[0] = 0; /* the master's to remove */
		for (int i = 0; i < nlistens; i++)
			if (listens[i][0] != '/') { /* a socket of its own on the master's port */
				close(P.listen_fd[i]);
				P.listen_fd[i] = listen_on(listens[i], SHARE);
			}
	}
	P.set = ts_set_new();
	P.loops = calloc((size_t)P.cfg.threads, sizeof(*P.loops));
	if (!P.set || !P.loops) {
		perror("pgproxy");
		return 1;
	}
	for (int i = 0; i < P.cfg.threads; i++)
		loop_init(&P.loops[i], i, i == 0 ? sigfd : -1);
	if (P.worker >= 0)
		procs_ready();
	for (int i = 0; i < P.cfg.threads; i++)
		if (pthread_create(&P.loops[i].thread, NULL, loop_run, &P.loops[i]) != 0) {
			perror("pgproxy: pthread_create");
			return 1;
		}

	int status = 0;
	for (int i = 0; i < P.cfg.threads; i++) {
		struct loop *l = &P.loops[i];
		pthread_join(l->thread, NULL);
		int err = ts_notifier_free(l->notifier);
		if (err) { /* a wait left pending: a bug in pgproxy */
			fprintf(stderr, "pgproxy: loop %d: ts_notifier_free: %s\n", i, strerror(err));
			status = 1;
		}
		close(l->wake_w.fd);
		close(l->ep);
	}
	for (int i = 0; i < P.nlisten; i++)
		close(P.listen_fd[i]);
	if (P.unix_path[0])
		unlink(P.unix_path);
	pools_free();
	fleet_stop(); /* every member left, its share handed back */
	if (P.worker >= 0)
		procs_detach();
	ts_set_free(P.set);
	close(sigfd);
	free(P.loops);
	free(P.cfg.rules);
	authfile_close();
	tls_free_all();
	pthread_mutex_destroy(&P.pools_mu);
	if (P.worker >= 0)
		fprintf(stderr, "pgproxy: worker %d: shut down\n", P.worker);
	else
		fprintf(stderr, "pgproxy: shut down\n");
	return status;
}
