/* SPDX-License-Identifier: MIT */
/* pgproxy: the admin console, database "pgproxy" (pgbouncer's convention):
 *
 *   SHOW POOLS        per pool: size, passes in use, server connections,
 *                     idle ones, clients queued in all and per band
 *   SHOW PROCESSES    --processes: per worker, its pid, clients connected
 *                     now and how many times it was started (none without)
 *   SHOW BANDS        per band: admitted, timed out, wait p50/p99/max
 *                     since start (from the first message of a
 *                     transaction to its server connection)
 *   RESIZE db N       the pool's ceiling, live (ts_set_resize); idle
 *                     connections above it are closed
 *   SHUTDOWN          close the set: queued clients get an error, open
 *                     transactions finish, then the proxy exits
 *
 * With --processes each worker answers for itself, but it lists every
 * worker's pools and their numbers are every worker's but idle_conns and
 * the per-band queue, which are the answering worker's; RESIZE and
 * SHUTDOWN act on all of them.
 *
 * Who may log in: users named by --admin-users (every command) and
 * --stats-users (SHOW only), authenticated as any client is.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pgproxy.h"

#define MAX_COLS 32

static void row_description(struct buf *out, const char *const *names, int n)
{
	struct pkt k;
	pkt_begin(&k, 'T');
	pkt_i16(&k, n);
	for (int i = 0; i < n; i++) {
		pkt_str(&k, names[i]);
		pkt_i32(&k, 0);  /* table */
		pkt_i16(&k, 0);  /* column */
		pkt_i32(&k, 25); /* text */
		pkt_i16(&k, -1);
		pkt_i32(&k, -1);
		pkt_i16(&k, 0); /* text format */
	}
	pkt_end(&k, out);
}

static void data_row(struct buf *out, char vals[][64], int n)
{
	struct pkt k;
	pkt_begin(&k, 'D');
	pkt_i16(&k, n);
	for (int i = 0; i < n; i++) {
		pkt_i32(&k, (int32_t)strlen(vals[i]));
		pkt_bytes(&k, vals[i], strlen(vals[i]));
	}
	pkt_end(&k, out);
}

static void command_complete(struct buf *out, const char *tag) { send_complete(out, tag); }

/* One pool's row.  @p is this process's pool for @db (pools_mu held: it
 * stays) or NULL: with --processes, a pool only other workers have served
 * so far, whose shared figures are still every worker's. */
static void pool_row_of(struct buf *out, int slot, const char *db, struct pool *p)
{
	bool shared = P.worker >= 0;
	ts_turnstile *turns = shared ? procs_turns(slot) : p->turns;
	ts_turnstile *conn_turns = shared ? procs_conns(slot) : NULL;
	if (!turns || (shared && !conn_turns)) /* attach failed, logged */
		return;
	char v[MAX_COLS][64];
	int nfixed = 6;
	int64_t avail = 0, waiting = 0;
	int64_t size = shared ? procs_pool_size(slot) : atomic_load(&p->size); /* RESIZEd anywhere */
	size_t idle = 0;
	ts_turnstile_snapshot(turns, &avail, &waiting);
	if (p) {
		pthread_mutex_lock(&p->mu);
		for (struct upool *u = p->users; u; u = u->next) {
			size_t ready = 0;
			ts_waitlist_stats(u->conns, NULL, &ready, NULL);
			idle += ready;
		}
		pthread_mutex_unlock(&p->mu);
	}
	snprintf(v[0], 64, "%s", db);
	snprintf(v[1], 64, "%lld", (long long)size);
	snprintf(v[2], 64, "%lld", (long long)(size - avail));
	int64_t conns = p ? atomic_load(&p->conns) : 0;
	if (conn_turns) { /* every worker's: the passes of conns out */
		int64_t conns_avail;
		ts_turnstile_snapshot(conn_turns, &conns_avail, NULL);
		conns = size - conns_avail;
	}
	snprintf(v[3], 64, "%lld", (long long)conns);
	snprintf(v[4], 64, "%zu", idle);
	snprintf(v[5], 64, "%lld", (long long)waiting);
	for (int b = 0; b <= P.max_band; b++)
		snprintf(v[nfixed + b], 64, "%lld", p ? (long long)atomic_load(&p->waiting[b]) : 0LL);
	data_row(out, v, nfixed + P.max_band + 1);
}

static void pool_row(struct pool *p, void *arg)
{
	if (atomic_load(&p->logged_in)) /* not when only a failed login so far */
		pool_row_of(arg, p->id, p->db, p);
}

/* --processes: every pool a login succeeded on in any worker, so each
 * worker answers with the same pools (a worker started after a kill has
 * served none yet).  A slot's pool here, if any, has the same index. */
static void shared_pool_row(int slot, const char *db, void *arg)
{
	pthread_mutex_lock(&P.pools_mu);
	struct pool *p = P.pools[slot];
	pool_row_of(arg, slot, db, p && !strcmp(p->db, db) ? p : NULL);
	pthread_mutex_unlock(&P.pools_mu);
}

static void show_pools(struct buf *out)
{
	static const char *fixed[] = { "database", "pool_size", "in_use", "server_conns",
				       "idle_conns", "waiting" };
	char names[MAX_COLS][24];
	const char *cols[MAX_COLS];
	int nfixed = 6, ncols = nfixed + P.max_band + 1;
	for (int i = 0; i < nfixed; i++)
		cols[i] = fixed[i];
	for (int b = 0; b <= P.max_band; b++) {
		snprintf(names[b], sizeof(names[b]), "waiting_band%d", b);
		cols[nfixed + b] = names[b];
	}
	row_description(out, cols, ncols);
	if (P.worker >= 0)
		procs_each_pool(shared_pool_row, out);
	else
		pools_each(pool_row, out);
	command_complete(out, "SHOW");
}

static void process_row(int w, pid_t pid, int64_t clients, uint32_t starts, void *arg)
{
	char v[4][64];
	snprintf(v[0], 64, "%d", w);
	snprintf(v[1], 64, "%d", (int)pid);
	snprintf(v[2], 64, "%lld", (long long)clients);
	snprintf(v[3], 64, "%u", starts);
	data_row(arg, v, 4);
}

static void show_processes(struct buf *out)
{
	static const char *cols[] = { "worker", "pid", "clients", "starts" };
	row_description(out, cols, 4);
	if (P.worker >= 0)
		procs_each_worker(process_row, out);
	command_complete(out, "SHOW");
}

static void fleet_row(const char *db, const char *member, bool self, int64_t share, int64_t held,
		      const char *queued, void *arg)
{
	char v[6][64];
	snprintf(v[0], 64, "%s", db);
	snprintf(v[1], 64, "%s", member ? member : "(joining)");
	snprintf(v[2], 64, "%s", self ? "yes" : "no");
	snprintf(v[3], 64, "%lld", (long long)share);
	snprintf(v[4], 64, "%lld", (long long)held);
	snprintf(v[5], 64, "%s", queued);
	data_row(arg, v, 6);
}

/* Each pool's fleet as its member's last look saw it: one row a member. */
static void show_fleet(struct buf *out)
{
	static const char *cols[] = { "database", "member", "self", "share", "held", "queued" };
	row_description(out, cols, 6);
	fleet_each(fleet_row, out);
	command_complete(out, "SHOW");
}

static void show_bands(struct buf *out)
{
	static const char *cols[] = { "band", "clients", "admitted", "timed_out",
				      "wait_p50_ms", "wait_p99_ms", "wait_max_ms" };
	row_description(out, cols, 7);
	for (int b = 0; b <= P.max_band; b++) {
		struct band_stats *s = &P.bands[b];
		char v[7][64];
		size_t used = 0;
		v[1][0] = 0;
		for (int i = 0; i < P.cfg.nrules; i++) {
			const struct band_rule *r = &P.cfg.rules[i];
			if (r->band == b && used < 50)
				used += (size_t)snprintf(v[1] + used, 64 - used, "%s%s=%s", used ? "," : "",
							 r->key == KEY_APP ? "application_name" : "user",
							 r->name);
		}
		if (b == P.cfg.default_band && used < 50)
			snprintf(v[1] + used, 64 - used, "%sothers", used ? "," : "");
		snprintf(v[0], 64, "%d", b);
		snprintf(v[2], 64, "%llu", (unsigned long long)atomic_load(&s->admitted));
		snprintf(v[3], 64, "%llu", (unsigned long long)atomic_load(&s->timed_out));
		snprintf(v[4], 64, "%.3f", hist_pct(s, 0.50));
		snprintf(v[5], 64, "%.3f", hist_pct(s, 0.99));
		snprintf(v[6], 64, "%.3f", hist_pct(s, 1.0));
		data_row(out, v, 7);
	}
	command_complete(out, "SHOW");
}

static void resize(struct buf *out, const char *args)
{
	char db[NAME_LEN + 1];
	long long n;
	char extra;
	if (sscanf(args, "%64s %lld %c", db, &n, &extra) != 2 || n < 0 || n > 10000) {
		send_error(out, "ERROR", "42601", "pgproxy: RESIZE takes a database and a size in [0, 10000]: RESIZE mydb 8");
		return;
	}
	size_t len = strlen(db);
	if (len >= 2 && db[0] == '"' && db[len - 1] == '"') {
		memmove(db, db + 1, len - 2);
		db[len - 2] = 0;
	}
	int err = pool_resize(db, n);
	if (err == ENOENT) {
		send_error(out, "ERROR", "3D000", "pgproxy: no pool for database \"%s\" (a pool is made when its first client connects)", db);
		return;
	}
	if (err == EAGAIN && P.cfg.fleet.on) {
		send_error(out, "ERROR", "55000", "pgproxy: RESIZE: the pool for \"%s\" has not joined "
			   "its fleet yet (or the ledger kept changing): try again", db);
		return;
	}
	if (err) {
		send_error(out, "ERROR", err == ESHUTDOWN ? "57P01" : "22023", "pgproxy: RESIZE: %s",
			   ts_strerror(err));
		return;
	}
	pools_trim_all(); /* idle connections above the new size go now */
	command_complete(out, "RESIZE");
}

static bool admin_allowed(struct buf *out, bool admin, const char *what)
{
	if (!admin)
		send_error(out, "ERROR", "42501", "pgproxy: permission denied: %s needs a user named by --admin-users",
			   what);
	return admin;
}

void admin_query(struct buf *out, const char *sql, bool admin)
{
	char q[1024];
	size_t n = 0;
	while (isspace((unsigned char)*sql))
		sql++;
	while (*sql && n < sizeof(q) - 1)
		q[n++] = *sql++;
	while (n && (isspace((unsigned char)q[n - 1]) || q[n - 1] == ';'))
		n--;
	q[n] = 0;
	if (!n) {
		send_simple(out, 'I'); /* EmptyQueryResponse */
	} else if (!strcasecmp(q, "SHOW POOLS")) {
		show_pools(out);
	} else if (!strcasecmp(q, "SHOW BANDS")) {
		show_bands(out);
	} else if (!strcasecmp(q, "SHOW PROCESSES")) {
		show_processes(out);
	} else if (!strcasecmp(q, "SHOW FLEET")) {
		show_fleet(out);
	} else if (!strncasecmp(q, "RESIZE ", 7)) {
		if (admin_allowed(out, admin, "RESIZE"))
			resize(out, q + 7);
	} else if (!strcasecmp(q, "SHUTDOWN")) {
		if (admin_allowed(out, admin, "SHUTDOWN")) {
			begin_shutdown();
			command_complete(out, "SHUTDOWN");
		}
	} else {
		send_error(out, "ERROR", "42601",
			   "pgproxy admin console: unknown command \"%.100s\" (SHOW POOLS, SHOW BANDS, "
			   "SHOW PROCESSES, SHOW FLEET, RESIZE db N, SHUTDOWN)", q);
	}
}
