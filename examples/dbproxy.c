/* SPDX-License-Identifier: MIT */
/* dbproxy: libturnstile in the shape of a database proxy, over SQLite.
 *
 * Several shards, each a database file with its own pool of connections
 * (a ts_waitlist, created lazily by the taking thread) and its own
 * turnstile (a ts_set sized to the pool).  Client threads run jobs of
 * several queries at mixed bands; every query of a job takes its turn on
 * the job's claim, so a job in progress beats jobs that started later, on
 * every shard it visits.  The pass ENCLOSES the connection: it is taken
 * before the connection and returned only after the statement is finalized
 * and the connection is back in the pool.
 *
 *   dbproxy [--dir DIR] [--shards N] [--pool P] [--clients C] [--jobs J]
 *           [--queries Q] [--rows R] [--pg CONNINFO]
 *
 * With --pg (when built with libpq) the shards are tables of a PostgreSQL
 * database instead of SQLite files; everything else is the same.
 *
 * Prints per-band query and job latency and the order jobs finished in;
 * exits non-zero if any query returned a wrong answer or any pass, slot or
 * connection went missing. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sqlite3.h>
#ifdef TS_HAVE_LIBPQ
#include <libpq-fe.h>
#endif
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <turnstile.h>

#define BANDS 3
static const char *band_name[BANDS] = { "interactive", "normal", "batch" };

static struct {
	const char *dir;
	int shards, pool, clients, jobs, queries, rows;
	const char *pg;
} opt = { NULL, 3, 2, 12, 4, 4, 5000, NULL };

struct shard {
	char path[4096];
	ts_waitlist *conns;
	_Atomic int opened;
	int64_t expected_sum; /* sum(id * 7 % 1000) over all rows */
};

static struct shard *shards;
static ts_set *turns;
static _Atomic int wrong, failures;

/* Latency samples per band (queries and jobs), and the finish order. */
struct samples {
	pthread_mutex_t mu;
	int64_t *v;
	int n, cap;
};
static struct samples query_lat[BANDS], job_lat[BANDS];
static pthread_mutex_t order_mu = PTHREAD_MUTEX_INITIALIZER;
static int *finish_order, n_finished;

static void record(struct samples *s, int64_t ns)
{
	pthread_mutex_lock(&s->mu);
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 256;
		s->v = realloc(s->v, sizeof(int64_t) * (size_t)s->cap);
	}
	s->v[s->n++] = ns;
	pthread_mutex_unlock(&s->mu);
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static double pct(struct samples *s, double p)
{
	if (!s->n)
		return 0;
	qsort(s->v, (size_t)s->n, sizeof(int64_t), cmp64);
	return (double)s->v[(int)(p * (s->n - 1))] / 1e6;
}

/* A backend: how to make a shard, open a connection to it (the pool's
 * load: on the taking thread, no lock held), read a query to the end, and
 * close a connection. */
struct backend {
	const char *name;
	void (*create)(int shard);
	int (*open)(void *shard, void **conn);
	int64_t (*query)(void *conn, int shard); /* sum(id * 7 % 1000), or -1 */
	void (*close)(void *conn);
};

static int sqlite_open(void *arg, void **item)
{
	struct shard *sh = arg;
	sqlite3 *db;
	if (sqlite3_open_v2(sh->path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) !=
	    SQLITE_OK) {
		sqlite3_close(db);
		return EIO;
	}
	sqlite3_busy_timeout(db, 5000);
	atomic_fetch_add(&sh->opened, 1);
	*item = db;
	return 0;
}

static int64_t expected_sum(void)
{
	int64_t sum = 0;
	for (int r = 1; r <= opt.rows; r++)
		sum += (int64_t)r * 7 % 1000;
	return sum;
}

static void sqlite_create(int i)
{
	struct shard *sh = &shards[i];
	snprintf(sh->path, sizeof(sh->path), "%s/shard%d.db", opt.dir, i);
	unlink(sh->path);
	sqlite3 *db;
	if (sqlite3_open(sh->path, &db) != SQLITE_OK) {
		fprintf(stderr, "dbproxy: cannot create %s\n", sh->path);
		exit(1);
	}
	sqlite3_exec(db, "CREATE TABLE items(id INTEGER PRIMARY KEY, payload TEXT);"
			 "BEGIN;", NULL, NULL, NULL);
	sqlite3_stmt *ins;
	sqlite3_prepare_v2(db, "INSERT INTO items VALUES (?, ?)", -1, &ins, NULL);
	for (int r = 1; r <= opt.rows; r++) {
		sqlite3_bind_int(ins, 1, r);
		sqlite3_bind_text(ins, 2, "payload of a row, read in full", -1, SQLITE_STATIC);
		sqlite3_step(ins);
		sqlite3_reset(ins);
	}
	sqlite3_finalize(ins);
	sqlite3_exec(db, "COMMIT;", NULL, NULL, NULL);
	sqlite3_close(db);
}

/* Every row is read while the caller holds its pass and the connection. */
static int64_t sqlite_query(void *conn, int shard)
{
	sqlite3_stmt *st;
	int64_t sum = 0;
	if (sqlite3_prepare_v2(conn, "SELECT id, payload FROM items ORDER BY id", -1, &st, NULL) !=
	    SQLITE_OK)
		return -1;
	while (sqlite3_step(st) == SQLITE_ROW)
		sum += sqlite3_column_int64(st, 0) * 7 % 1000;
	sqlite3_finalize(st);
	return sum;
}

static void sqlite_close(void *conn)
{
	sqlite3_close(conn);
}

static const struct backend sqlite_backend = { "SQLite", sqlite_create, sqlite_open,
					       sqlite_query, sqlite_close };

#ifdef TS_HAVE_LIBPQ
static int pg_open(void *arg, void **item)
{
	PGconn *c = PQconnectdb(opt.pg);
	if (PQstatus(c) != CONNECTION_OK) {
		fprintf(stderr, "dbproxy: %s", PQerrorMessage(c));
		PQfinish(c);
		return ECONNREFUSED;
	}
	atomic_fetch_add(&((struct shard *)arg)->opened, 1);
	*item = c;
	return 0;
}

static void pg_exec(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
		fprintf(stderr, "dbproxy: %s: %s", sql, PQerrorMessage(c));
		exit(1);
	}
	PQclear(r);
}

static void pg_create(int i)
{
	char sql[256];
	PGconn *c = PQconnectdb(opt.pg);
	if (PQstatus(c) != CONNECTION_OK) {
		fprintf(stderr, "dbproxy: %s", PQerrorMessage(c));
		exit(1);
	}
	snprintf(sql, sizeof(sql), "DROP TABLE IF EXISTS dbproxy_shard%d", i);
	pg_exec(c, sql);
	snprintf(sql, sizeof(sql), "CREATE TABLE dbproxy_shard%d(id int PRIMARY KEY, payload text)", i);
	pg_exec(c, sql);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO dbproxy_shard%d SELECT g, 'payload of a row, read in full' "
		 "FROM generate_series(1, %d) g", i, opt.rows);
	pg_exec(c, sql);
	PQfinish(c);
	snprintf(shards[i].path, sizeof(shards[i].path), "table dbproxy_shard%d", i);
}

static int64_t pg_query(void *conn, int shard)
{
	char sql[128];
	snprintf(sql, sizeof(sql), "SELECT id, payload FROM dbproxy_shard%d ORDER BY id", shard);
	PGresult *r = PQexec(conn, sql);
	int64_t sum = -1;
	if (PQresultStatus(r) == PGRES_TUPLES_OK) {
		sum = 0;
		for (int row = 0; row < PQntuples(r); row++)
			sum += atoll(PQgetvalue(r, row, 0)) * 7 % 1000;
	}
	PQclear(r); /* the rows are read: now the connection is free */
	return sum;
}

static void pg_close(void *conn)
{
	PQfinish(conn);
}

static const struct backend pg_backend = { "PostgreSQL", pg_create, pg_open, pg_query,
					   pg_close };
#endif

static const struct backend *store = &sqlite_backend;

static void create_shard(int i)
{
	struct shard *sh = &shards[i];
	store->create(i);
	sh->expected_sum = expected_sum();
	sh->conns = ts_waitlist_new((size_t)opt.pool, 0);
	if (ts_set_resize(turns, i, opt.pool) != 0) {
		fprintf(stderr, "dbproxy: cannot size shard %d\n", i);
		exit(1);
	}
}

/* One query: turn, connection, statement read to the end, finalize,
 * connection back, pass back — in that order. */
static void query(ts_job *job, int shard, int band)
{
	struct shard *sh = &shards[shard];
	int64_t t0 = ts_now_ns();
	ts_pass pass = ts_wait_turn(job);
	void *conn;
	int err = ts_waitlist_take(sh->conns, &conn, store->open, sh, 0, NULL);
	if (err) {
		fprintf(stderr, "dbproxy: take on shard %d: %s\n", shard, strerror(err));
		atomic_fetch_add(&failures, 1);
		ts_pass_return(&pass);
		return;
	}
	int64_t sum = store->query(conn, shard); /* every row read, the statement done */
	if (sum != sh->expected_sum)
		atomic_fetch_add(&wrong, 1);
	ts_waitlist_put(sh->conns, conn);
	ts_pass_return(&pass);
	record(&query_lat[band], ts_now_ns() - t0);
}

static void *client(void *arg)
{
	int id = (int)(intptr_t)arg;
	for (int j = 0; j < opt.jobs; j++) {
		int band = (id + j) % BANDS;
		ts_job job = TS_JOB_INIT;
		int64_t start = ts_now_ns();
		for (int q = 0; q < opt.queries; q++) {
			int shard = (id + j + q) % opt.shards; /* a cross-shard job */
			ts_set_prioritize(turns, &job, shard, band);
			query(&job, shard, band);
		}
		record(&job_lat[band], ts_now_ns() - start);
		pthread_mutex_lock(&order_mu);
		finish_order[n_finished++] = id * opt.jobs + j;
		pthread_mutex_unlock(&order_mu);
	}
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: dbproxy [--dir DIR] [--shards N] [--pool P] [--clients C] "
			"[--jobs J] [--queries Q] [--rows R] [--pg CONNINFO]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (i + 1 >= argc)
			usage();
		const char *k = argv[i], *v = argv[++i];
		int n = atoi(v);
		if (!strcmp(k, "--dir"))
			opt.dir = v;
		else if (!strcmp(k, "--shards") && n > 0)
			opt.shards = n;
		else if (!strcmp(k, "--pool") && n > 0)
			opt.pool = n;
		else if (!strcmp(k, "--clients") && n > 0)
			opt.clients = n;
		else if (!strcmp(k, "--jobs") && n > 0)
			opt.jobs = n;
		else if (!strcmp(k, "--queries") && n > 0)
			opt.queries = n;
		else if (!strcmp(k, "--rows") && n > 0)
			opt.rows = n;
		else if (!strcmp(k, "--pg"))
			opt.pg = v;
		else
			usage();
	}
	if (opt.pg) {
#ifdef TS_HAVE_LIBPQ
		store = &pg_backend;
#else
		fprintf(stderr, "dbproxy: built without libpq: --pg is not available\n");
		return 2;
#endif
	}
	char tmpl[] = "/tmp/dbproxy.XXXXXX";
	if (!opt.dir && !(opt.dir = mkdtemp(tmpl))) {
		perror("mkdtemp");
		return 1;
	}
	turns = ts_set_new();
	shards = calloc((size_t)opt.shards, sizeof(*shards));
	finish_order = calloc((size_t)(opt.clients * opt.jobs), sizeof(int));
	for (int b = 0; b < BANDS; b++) {
		pthread_mutex_init(&query_lat[b].mu, NULL);
		pthread_mutex_init(&job_lat[b].mu, NULL);
	}
	for (int i = 0; i < opt.shards; i++)
		create_shard(i);
	printf("dbproxy: %d shards x %d %s connections, %d clients x %d jobs x %d queries of %d "
	       "rows\n",
	       opt.shards, opt.pool, store->name, opt.clients, opt.jobs, opt.queries, opt.rows);

	int64_t t0 = ts_now_ns();
	pthread_t *th = calloc((size_t)opt.clients, sizeof(pthread_t));
	for (int i = 0; i < opt.clients; i++)
		pthread_create(&th[i], NULL, client, (void *)(intptr_t)i);
	for (int i = 0; i < opt.clients; i++)
		pthread_join(th[i], NULL);
	double secs = (double)(ts_now_ns() - t0) / 1e9;

	printf("\n| band | queries | query p50 ms | p99 ms | jobs | job p50 ms | p99 ms |\n"
	       "|---|---:|---:|---:|---:|---:|---:|\n");
	for (int b = 0; b < BANDS; b++)
		printf("| %s | %d | %.2f | %.2f | %d | %.2f | %.2f |\n", band_name[b], query_lat[b].n,
		       pct(&query_lat[b], 0.5), pct(&query_lat[b], 0.99), job_lat[b].n,
		       pct(&job_lat[b], 0.5), pct(&job_lat[b], 0.99));
	printf("\nfirst jobs to finish (client.job):");
	for (int i = 0; i < n_finished && i < 16; i++)
		printf(" %d.%d", finish_order[i] / opt.jobs, finish_order[i] % opt.jobs);
	printf("\n%d queries in %.2f s; ", opt.clients * opt.jobs * opt.queries, secs);

	/* everything back where it belongs */
	int lost = 0;
	for (int i = 0; i < opt.shards; i++) {
		int64_t avail, waiting;
		size_t created, ready;
		ts_turnstile_snapshot(ts_set_turnstile(turns, i), &avail, &waiting);
		ts_waitlist_stats(shards[i].conns, &created, &ready, NULL);
		if (avail != opt.pool || waiting || created != ready || created > (size_t)opt.pool ||
		    atomic_load(&shards[i].opened) != (int)created)
			lost++;
		void *conn;
		while (ts_waitlist_try_take(shards[i].conns, &conn))
			store->close(conn);
		ts_waitlist_free(shards[i].conns);
		if (store == &sqlite_backend)
			unlink(shards[i].path);
		printf("shard %d opened %d connections; ", i, atomic_load(&shards[i].opened));
	}
	printf("\n");
	if (opt.dir == tmpl)
		rmdir(tmpl);
	ts_set_free(turns);
	free(th);
	free(shards);
	free(finish_order);
	for (int b = 0; b < BANDS; b++) {
		free(query_lat[b].v);
		free(job_lat[b].v);
	}
	int bad = atomic_load(&wrong) + atomic_load(&failures) + lost;
	printf("dbproxy: %s (%d wrong answers, %d failures, %d shards with something missing)\n",
	       bad ? "FAILED" : "ok", atomic_load(&wrong), atomic_load(&failures), lost);
	return bad ? 1 : 0;
}
