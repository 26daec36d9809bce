/* SPDX-License-Identifier: MIT */
/* pgproxy: a transaction-pooling PostgreSQL proxy whose pools admit
 * transactions by priority band, then age, through libturnstile's
 * event-loop waiters.  Shared declarations of its files, one room each:
 *
 *   main.c     options, the loop threads, accept (with its EMFILE back-off),
 *              timers, shutdown
 *   stream.c   byte queues, socket reads and writes, and framing: a message
 *              is handed on only once its header is whole, and bodies
 *              larger than a buffer stream through
 *   pkt.c      building messages (lengths computed when the message is
 *              whole, so they cannot go stale) and reading ErrorResponse
 *   pool.c     pools: one turnstile per database, idle server connections
 *              per (database, user), the ceiling, idle and lifetime reaping
 *   params.c   client parameters tracked as pgbouncer does (client_encoding,
 *              DateStyle, TimeZone...), applied to a server connection
 *              before a client's transaction when they differ
 *   prepare.c  named prepared statements in transaction pooling: each
 *              client's names, prepared on whichever server connection runs
 *              them under a proxy-chosen name, an LRU per connection
 *   client.c   a client's life: startup, login, waiting for a turn and a
 *              connection, the client-to-server relay
 *   server.c   a server connection's life: connect, startup, the
 *              server-to-client relay and the queue of expected responses
 *   conns.c    a pass per server connection where others share the ceiling
 *              (--processes, --fleet): who closes one for a waiter, and
 *              the pass held until the server has hung up
 *   fleet.c    --fleet: each pool's connections a fleet member over etcd
 *   cancel.c   cancel keys handed out in BackendKeyData, CancelRequest
 *   authfile.c --auth-file: the users and their secrets, reloaded on SIGHUP
 *   scram.c    SCRAM-SHA-256 in both roles, and MD5 towards the server
 *   watch.c    what a loop watches: epoll registration, freeing after a batch
 *   admin.c    the admin console (database "pgproxy") and band statistics
 */
#ifndef PGPROXY_H
#define PGPROXY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <turnstile.h>

#define MAX_BANDS 16     /* bands 0..15 */
#define MAX_POOLS 256    /* databases with clients or connections at once */
#define MAX_PROCESSES 64 /* --processes; cancel keys carry the worker in their low 6 bits */
#define PROCS_MAX_QUEUED 16384 /* --processes: clients queued per database, all workers */
#define NAME_LEN 64      /* PostgreSQL's NAMEDATALEN */

/* Bounds per connection, stated in README.md.  A side is read while less
 * than IN_BOUND of it is buffered (or while a message that must be read
 * whole, at most WHOLE_MAX, is incomplete); a client's input is not
 * processed, nor its socket read, while OUT_BOUND or more waits to be
 * written to it, so replies the proxy makes itself stay bounded too. */
#define IN_BOUND (64 * 1024)
#define OUT_BOUND (256 * 1024)
#define WHOLE_MAX (1024 * 1024) /* a named Parse, kept to prepare it again */
#define PEEK_MAX 8192           /* the most of a message read before deciding */
#define MAX_MSG 0x3fffffffu     /* PostgreSQL's own limit on a message */

#define container_of(p, T, m) ((T *)(void *)((char *)(p)-offsetof(T, m)))

/* ---------------------------------------------------------------- stream.c */

/* A byte queue: data is p[r..w).  Failed growth sets oom, checked by the
 * connection's driver (which then closes the connection).  `moved` counts
 * bytes put and consumed: a driver makes progress only when some queue's
 * `moved` changed, so no code path can claim progress without bytes. */
struct buf {
	char *p;
	size_t r, w, cap;
	uint64_t moved;
	bool oom;
};

static inline size_t buf_len(const struct buf *b) { return b->w - b->r; }
static inline const char *buf_data(const struct buf *b) { return b->p + b->r; }
bool buf_reserve(struct buf *b, size_t n);
void buf_put(struct buf *b, const void *d, size_t n);
void buf_consume(struct buf *b, size_t n);
void buf_free(struct buf *b);

uint32_t get32(const void *p);
uint16_t get16(const void *p);
void put32(void *p, uint32_t v);

/* The message at the front of a queue, once its 5-byte header is in.  p
 * points at the type byte; have (<= total) bytes of it are buffered. */
struct msg {
	char type;
	uint32_t len;  /* as sent: counts itself, not the type */
	size_t total;  /* len + 1 */
	const char *p;
	size_t have;
};
enum { FRAME_MORE, FRAME_MSG, FRAME_BAD };
/* FRAME_MSG when a header is whole and 4 <= len <= MAX_MSG; FRAME_BAD for
 * a length outside that; FRAME_MORE when fewer than 5 bytes are in. */
int frame_peek(const struct buf *b, struct msg *m);

/* The rest of a message being copied (or dropped) as it arrives: the
 * only way a body larger than what is buffered moves. */
struct relay {
	size_t left;
	bool drop;
};
/* Moves what is buffered of the current message, up to the rest of it,
 * into `to` (NULL or drop: away).  Stops early when `to` holds `bound`. */
void relay_step(struct relay *rl, struct buf *from, struct buf *to, size_t bound);

/* A connection's TLS (tls.c): ssl NULL for a plain socket.  read_needs,
 * write_needs: the epoll event the last SSL_read, SSL_write waits for (0:
 * none yet). */
struct ssl_st;
struct tls {
	struct ssl_st *ssl;
	uint32_t read_needs, write_needs;
	bool broken; /* a fatal TLS error: no close_notify */
};

/* Reads what is there while fewer than `limit` bytes are buffered: 1 read
 * something, 0 nothing, -1 end of stream or error.  Through t's TLS when
 * it has one (t may be NULL). */
int sock_read(int fd, struct tls *t, struct buf *b, size_t limit);
/* Writes what the socket takes: 0, or -1 on a broken socket.  Inline,
 * as the driver asks on every pass and mostly has nothing to send. */
int sock_send(int fd, struct tls *t, struct buf *b);
static inline int sock_write(int fd, struct tls *t, struct buf *b)
{
	return buf_len(b) ? sock_send(fd, t, b) : 0;
}
#define READ_CHUNK (16 * 1024)

/* ---------------------------------------------------------------- pkt.c */

/* A message under construction, in a buffer of its own: pkt_end appends
 * it whole to a queue with its length, so nothing that happens to the
 * queue meanwhile (growth, compaction) can make the length wrong. */
struct pkt {
	struct buf b;
	bool startup; /* no type byte: a startup packet */
};
void pkt_begin(struct pkt *k, char type); /* type 0: a startup packet */
void pkt_u8(struct pkt *k, uint8_t v);
void pkt_i16(struct pkt *k, int v);
void pkt_i32(struct pkt *k, int32_t v);
void pkt_str(struct pkt *k, const char *s);
void pkt_bytes(struct pkt *k, const void *d, size_t n);
void pkt_end(struct pkt *k, struct buf *out);

void send_error(struct buf *b, const char *severity, const char *sqlstate, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void send_ready(struct buf *b, char status);
void send_param(struct buf *b, const char *name, const char *value);
void send_simple(struct buf *b, char type); /* a message with no body */
void send_complete(struct buf *b, const char *tag);

/* An ErrorResponse's fields that pgproxy reads or rewrites (from the
 * first PEEK_MAX bytes of the message: later fields may be missing). */
struct pg_error {
	char severity[16], code[6], message[512];
};
void parse_error(const char *body, size_t len, struct pg_error *e);

/* ---------------------------------------------------------------- scram.c */

#define SCRAM_KEY_LEN 32
#define SCRAM_KEY_B64 44
#define SCRAM_SALT_MAX 64
#define SCRAM_ITER_DEFAULT 4096
#define SCRAM_ITER_MAX 10000000 /* a peer's count above it is refused (CPU) */
#define SCRAM_NONCE_RAW 18
#define SCRAM_NONCE_LEN 24      /* base64 of SCRAM_NONCE_RAW bytes */
#define SCRAM_NONCE_MAX 256     /* a peer's nonce */
#define SCRAM_MSG_MAX 1024      /* a SCRAM message, either way */

/* Results of the steps below (a step that succeeds returns the length
 * of the message it wrote). */
enum { SCRAM_BAD = -1,      /* malformed or out of order: *why says how (08P01) */
       SCRAM_FAIL = -2,     /* a wrong proof (28P01) */
       SCRAM_ERROR = -3,    /* no randomness or key derivation failed */
       SCRAM_MISMATCH = -4, /* the server's salt is not the secret's */
};

struct scram_keys {
	int iter;
	size_t saltlen;
	unsigned char salt[SCRAM_SALT_MAX];
	unsigned char stored[SCRAM_KEY_LEN], server[SCRAM_KEY_LEN];
};
bool scram_parse_secret(const char *secret, struct scram_keys *k);
/* Keys for a password with k's salt and iterations; its ClientKey too. */
bool scram_keys_from_password(const char *password, struct scram_keys *k,
			      unsigned char client_key[SCRAM_KEY_LEN]);

/* pgproxy checking a client: first its client-first-message (the answer,
 * server-first, goes to out), then its client-final-message (out: the
 * server-final "v=...").  An unknown user runs the same exchange with
 * mock keys (known false) and fails at the end like a wrong password. */
struct scram_verify {
	int step;
	bool known;
	struct scram_keys keys;
	char gs2[32];
	bool plus_offered;                       /* TLS: SCRAM-SHA-256-PLUS offered */
	unsigned char cbind[64];                 /* tls-server-end-point */
	size_t cbind_len;
	char nonce[SCRAM_NONCE_MAX + SCRAM_NONCE_LEN + 1];
	char bare[SCRAM_MSG_MAX + 1];
	char server_first[SCRAM_NONCE_MAX + SCRAM_NONCE_LEN + 160];
	unsigned char client_key[SCRAM_KEY_LEN]; /* proven, after success */
};
/* cbind: over TLS, the certificate hash a client may bind to (NULL: no
 * TLS, no SCRAM-SHA-256-PLUS); plus: the client chose it. */
void scram_verify_begin(struct scram_verify *v, const struct scram_keys *k, bool known,
			const unsigned char *cbind, size_t cbind_len);
int scram_verify_first(struct scram_verify *v, bool plus, const char *msg, size_t n, char *out, size_t cap,
		       const char **why);
int scram_verify_final(struct scram_verify *v, const char *msg, size_t n, char *out, size_t cap,
		       const char **why);
void scram_verify_end(struct scram_verify *v); /* wipes it */

/* pgproxy answering the server's SCRAM: with keys that fit the server's
 * salt and iterations (a secret and the ClientKey a client proved against
 * it, or keys derived before), else with the password, whose keys it then
 * derives into keys and client_key (derived set). */
struct scram_creds {
	const char *password;
	bool have_keys, derived;
	struct scram_keys keys;
	unsigned char client_key[SCRAM_KEY_LEN];
};
struct scram_client {
	int step;
	char nonce[SCRAM_NONCE_LEN + 1];
	char bare[SCRAM_NONCE_LEN + 8];
	unsigned char server_sig[SCRAM_KEY_LEN];
};
int scram_client_first(struct scram_client *s, char *out, size_t cap);
int scram_client_final(struct scram_client *s, const char *server_first, size_t n,
		       struct scram_creds *cr, char *out, size_t cap, const char **why);
int scram_client_check(struct scram_client *s, const char *server_final, size_t n, const char **why);
/* The answer to AuthenticationMD5Password: from a password, or from a
 * "md5..." secret (md5_secret non-NULL). */
void md5_response(const char *password, const char *md5_secret, const char *user,
		  const unsigned char salt[4], char out[36]);
size_t b64_encode(const unsigned char *in, size_t n, char *out);
long b64_decode(const char *in, size_t n, unsigned char *out, size_t cap);

/* ---------------------------------------------------------------- tls.c */

/* At start: the contexts (0, or -1 and why). */
int tls_setup_clients(const char *cert, const char *key, char *err, size_t errlen);
int tls_setup_server(const char *sslmode, const char *rootcert, char *err, size_t errlen);
void tls_free_all(void);
bool tls_offered(void);                            /* --tls-cert given */
const unsigned char *tls_end_point(size_t *n);     /* our certificate's hash, for -PLUS */
int tls_accept(struct tls *t, int fd);             /* after answering 'S' */
int tls_connect(struct tls *t, int fd, const char *host, bool verify); /* after the server's 'S' */
void tls_end(struct tls *t);                       /* close_notify if it can, and free */
/* Inline, as every pass of a client's driver asks them, and a plain
 * connection must not pay a call into tls.c for its "no". */
bool tls_ssl_pending(const struct tls *t);
bool tls_ssl_handshaking(const struct tls *t);
/* bytes OpenSSL holds (read ahead, decrypted or not) that epoll cannot see */
static inline bool tls_holds(const struct tls *t) { return t->ssl && tls_ssl_pending(t); }
/* ...that a read can use now: not the start of a record whose rest the
 * last read waited for (epoll tells when it comes) */
static inline bool tls_pending(const struct tls *t)
{
	return t->ssl && t->read_needs != EPOLLIN && tls_ssl_pending(t);
}
/* closed by the peer, or a TLS error: no more bytes will come */
static inline bool tls_broken(const struct tls *t) { return t->ssl && t->broken; }
/* begun, not finished */
static inline bool tls_handshaking(const struct tls *t) { return t->ssl && tls_ssl_handshaking(t); }
/* The epoll events to watch for a connection that wants to read and/or
 * write: EPOLLIN and EPOLLOUT for a plain one, or what TLS waits for. */
static inline uint32_t tls_events(const struct tls *t, bool reading, bool writing)
{
	if (!t->ssl)
		return (reading ? EPOLLIN : 0) | (writing ? EPOLLOUT : 0);
	uint32_t ev = 0;
	if (reading)
		ev |= t->read_needs == EPOLLOUT ? EPOLLOUT : EPOLLIN;
	if (writing)
		ev |= t->write_needs == EPOLLIN ? EPOLLIN : EPOLLOUT;
	return ev;
}
int tls_read(struct tls *t, struct buf *b, size_t limit);
int tls_write(struct tls *t, struct buf *b);
const char *tls_verify_error(const struct tls *t); /* why the peer's certificate failed, or NULL */

/* ---------------------------------------------------------------- authfile.c */

#define AUTH_SECRET_MAX 1024
enum secret_kind { SECRET_PLAIN, SECRET_MD5, SECRET_SCRAM };
/* One user's line, copied out for a login or a server connection. */
struct auth_entry {
	enum secret_kind kind;
	char secret[AUTH_SECRET_MAX];  /* the password, "md5...", or "SCRAM-SHA-256$..." */
	struct scram_keys keys;        /* SCRAM: the secret's; PLAIN: made for the password */
	bool have_client_key;          /* SCRAM: a client proved it since the file was read */
	unsigned char client_key[SCRAM_KEY_LEN];
	bool have_server_keys;         /* PLAIN: derived for the server's salt */
	struct scram_keys server_keys;
	unsigned char server_client_key[SCRAM_KEY_LEN];
};
int authfile_open(const char *file, char *err, size_t errlen); /* 0, or -1 and why */
void authfile_reload(void);   /* SIGHUP: a bad file keeps the old table (logged) */
void authfile_close(void);
size_t authfile_users(void);
/* false: not in the file.  verify_keys: a plain password's keys for
 * checking a client are wanted (made at the first such lookup). */
bool authfile_lookup(const char *user, struct auth_entry *out, bool verify_keys);
void authfile_mock(const char *user, struct scram_keys *k);     /* an unknown user's keys */
/* A client proved ck against k: kept for the server's SCRAM of that user. */
void authfile_client_key(const char *user, const struct scram_keys *k,
			 const unsigned char ck[SCRAM_KEY_LEN]);
/* Keys derived from a user's password for the server's salt: kept, so the
 * next server connection skips PBKDF2 (SECRET_PLAIN lines only). */
void authfile_server_keys(const char *user, const char *password, const struct scram_keys *k,
			  const unsigned char ck[SCRAM_KEY_LEN]);
void auth_entry_wipe(struct auth_entry *e);
bool user_listed(const char *comma_list, const char *user);

/* ---------------------------------------------------------------- params.c */

/* The parameters tracked per client and per server connection. */
enum param {
	PAR_CLIENT_ENCODING,
	PAR_DATESTYLE,
	PAR_TIMEZONE,
	PAR_INTERVALSTYLE,
	PAR_SCS, /* standard_conforming_strings */
	PAR_APPNAME,
	PAR_EXTRA_FLOAT_DIGITS, /* not reported by the server: startup value only */
	NPARAMS
};
#define PARAM_LEN 128
struct params {
	bool set[NPARAMS];
	char v[NPARAMS][PARAM_LEN];
};
int param_lookup(const char *name);       /* -1: not tracked */
const char *param_name(int p);
bool param_reported(int p);               /* the server reports it (GUC_REPORT) */
void param_store(struct params *ps, int p, const char *v, size_t n);
/* A simple-query text of SETs that take `have` to `want` ("" if equal);
 * false if it does not fit in n bytes. */
bool params_diff_sql(const struct params *want, const struct params *have, char *sql, size_t n);
/* Startup parameters a client may send besides the tracked ones. */
bool startup_param_ignored(const char *name);

/* ---------------------------------------------------------------- configuration */

enum rule_key { KEY_APP, KEY_USER };
struct band_rule {
	enum rule_key key;
	char name[NAME_LEN];
	int band;
};

struct fleet_opts {
	bool on;
	char endpoints[1024], key[256], member[128];
	int64_t ceiling, lease_ns;
};

struct config {
	int listen_port;
	char server_host[256];
	int server_port;
	char server_password[256];
	int pool_size;
	struct band_rule *rules;
	int nrules;
	int default_band;
	int64_t wait_timeout_ns;
	int threads;
	int processes;           /* --processes: workers (0: this process alone) */
	int max_prepared;
	int64_t login_timeout_ns, connect_timeout_ns, idle_timeout_ns, lifetime_ns;
	char ignore_params[512]; /* comma-separated startup parameters to ignore */
	struct fleet_opts fleet;
	bool auth_scram;          /* --auth-type scram-sha-256 (else trust) */
	char tls_cert[4096], tls_key[4096];
	bool tls_require;         /* --tls-require: no login in the clear */
	enum { SSL_DISABLE, SSL_PREFER, SSL_REQUIRE, SSL_VERIFY_FULL } server_sslmode;
	char server_rootcert[4096];
	char auth_file[4096];
	char admin_users[1024], stats_users[1024]; /* comma-separated */
};

/* ---------------------------------------------------------------- pool.c */

struct server;

/* One user's idle server connections in a pool, and the parameters the
 * server reports to a new connection of that user (its defaults). */
struct upool {
	struct upool *next;
	struct pool *pool;
	char user[NAME_LEN];
	ts_waitlist *conns;   /* idle connections: LIFO, oldest at the bottom */
	int refs;             /* clients and server connections (pool->mu) */
	bool have_defaults;   /* the first connection's startup told them */
	struct buf defaults;  /* its raw ParameterStatus messages */
	struct params dparams;
};

/* A pool: one database.  Its turnstile (shard `id` of the proxy's set)
 * orders transactions; `conns` counts its server connections, all users
 * together, against the ceiling `size`. */
struct pool {
	int id;
	char db[NAME_LEN];
	ts_turnstile *turns;
	ts_turnstile *conn_turns;           /* --processes, --fleet: a pass per server connection */
	struct member *fleet;               /* --fleet: conn_turns' place in the fleet (fleet.c) */
	_Atomic int64_t size;               /* the ceiling, as RESIZE last set it */
	_Atomic int64_t conns;              /* server connections, all users (this process's) */
	_Atomic int64_t waiting[MAX_BANDS]; /* clients queued for a turn, by band */
	pthread_mutex_t mu;                 /* guards users and refs */
	struct upool *users;
	int refs;                           /* upools (pools_mu) */
	_Atomic bool logged_in;             /* a login has succeeded: SHOW POOLS lists it */
};

/* Per band, since start. */
#define HIST_BUCKETS 528
struct band_stats {
	_Atomic uint64_t admitted, timed_out;
	_Atomic uint64_t hist[HIST_BUCKETS]; /* wait in µs, log-linear buckets */
};

struct loop;

struct proxy {
	struct config cfg;
	ts_set *set;
	pthread_mutex_t pools_mu;
	struct pool *pools[MAX_POOLS]; /* NULL: a free slot (and shard id) */
	struct sockaddr_storage server_addr;
	socklen_t server_addrlen;
	int listen_fd[2], nlisten;
	struct sockaddr_storage listen_addr; /* --processes: the TCP address the master holds */
	socklen_t listen_addrlen;
	char unix_path[256];
	struct loop *loops;
	_Atomic bool shutting_down;
	_Atomic uint64_t seq;
	int worker;                    /* --processes: this worker's index; -1 otherwise */
	struct band_stats bands[MAX_BANDS];
	int max_band;
};
extern struct proxy P;

/* A user's pool in a database, made on first use and held (refs) until
 * upool_put; ESHUTDOWN once closed, ENOSPC at MAX_POOLS databases. */
struct upool *upool_get(const char *db, const char *user, int *err);
void upool_put(struct upool *u);
void upool_hold(struct upool *u);      /* one more reference */
int pool_resize(const char *db, int64_t size); /* 0, ENOENT, or ts_set_resize's */
void pools_each(void (*fn)(struct pool *p, void *arg), void *arg); /* pools_mu held */
void pools_trim_all(void); /* idle connections above a pool's ceiling closed */
void pools_free(void);
/* A new server connection's place under the ceiling: true if the pool had
 * room or an idle connection of another user was closed to make it. */
bool pool_reserve_conn(struct upool *u);
void pool_release_conn(struct pool *p);  /* a connection was destroyed */
/* Back to its user's idle list, or closed (too many, too old, dirty). */
void pool_put_server(struct server *s);
/* Close idle connections above the ceiling or past their idle time or
 * lifetime (each loop's tick). */
void pools_reap(void);
/* --processes (loop 0, often): close idle connections other workers wait
 * for, and follow RESIZEs made in other workers. */
void pools_share(void);
/* --processes: a local idle connection of a user other than @u closed
 * (its conns pass goes to the queue); false if there was none. */
bool pool_close_idle_other(struct upool *u);
void pool_mark_logged_in(struct pool *p);
void begin_shutdown(void);
void hist_add(struct band_stats *s, int64_t ns);
double hist_pct(const struct band_stats *s, double p); /* ms */

/* ---------------------------------------------------------------- loops */

enum kind { K_LISTEN, K_NOTIFIER, K_WAKE, K_SIGNAL, K_CLIENT, K_SERVER, K_CANCEL, K_PEER, K_CLOSER };

/* What epoll's data.ptr points at: the first member of every watched
 * object. */
struct watch {
	enum kind kind;
	int fd;
	uint32_t mask;   /* registered events; 0: not registered */
	struct loop *loop;
	bool dead;       /* closed in this batch: later events are stale */
	struct watch *zombie_next;
};

struct client;

struct loop {
	int idx;
	pthread_t thread;
	int ep;
	ts_notifier *notifier;
	struct watch notify_w, wake_w, signal_w, peer_w, listen_w[2];
	struct client *clients; /* every client of this loop, doubly linked */
	int nclients, ncancels;
	struct watch *zombies;  /* freed after the current batch of events */
	struct server *puts;    /* servers let go in this batch (more than one loop) */
	bool in_batch;          /* handling epoll_wait's events */
	/* When the last epoll_wait that reported every ready descriptor was
	 * called (0: the batch was full, some may be left): a close of an
	 * idle server watched here before then is handled (server_usable) */
	int64_t polled_at;
	bool stopping;          /* this loop has seen the shutdown */
	int64_t accept_paused_until; /* out of file descriptors: 0 when accepting */
	int64_t next_tick;
};

void watch_set(struct watch *w, uint32_t mask);
void watch_close(struct watch *w); /* deregister, close the fd, free after the batch */
void loop_wake_all(void);
void loop_fd_freed(struct loop *l); /* a descriptor was closed: accept again */

/* ---------------------------------------------------------------- prepare.c */

/* A statement's text and parameter types (a Parse body after its name),
 * shared by every client that prepared the same one; `id` names it on
 * server connections ("pgproxy_<id>"). */
struct stmt;
/* A client's names for its statements. */
struct stmt_map;
/* A server connection's prepared statements, least recently used first. */
struct srv_stmts;

struct stmt *stmt_get(const char *body, size_t len); /* NULL: out of memory */
struct stmt *stmt_hold(struct stmt *s); /* one more reference */
void stmt_put(struct stmt *s);
uint64_t stmt_id(const struct stmt *s);
const char *stmt_body(const struct stmt *s, size_t *len);

struct stmt_map *stmt_map_new(void);
void stmt_map_free(struct stmt_map *m);
struct stmt *stmt_map_find(struct stmt_map *m, const char *name);
uint64_t stmt_map_reg(struct stmt_map *m, const char *name); /* its registration, 0 none */
int stmt_map_add(struct stmt_map *m, const char *name, struct stmt *s); /* 0, EEXIST, ENOSPC, ENOMEM */
void stmt_map_remove(struct stmt_map *m, const char *name);
void stmt_map_clear(struct stmt_map *m);

struct srv_stmts *srv_stmts_new(int cap);
void srv_stmts_free(struct srv_stmts *ss);
bool srv_stmts_has(struct srv_stmts *ss, uint64_t id); /* and marks it used */
/* Records id as prepared; if the set is full, *evicted is the least
 * recently used id (to Close on the server) and true is returned. */
bool srv_stmts_add(struct srv_stmts *ss, uint64_t id, uint64_t *evicted);
void srv_stmts_forget(struct srv_stmts *ss, uint64_t id);
void srv_stmts_clear(struct srv_stmts *ss);

/* ---------------------------------------------------------------- server.c */

/* What a server response answers, in the order requests were sent. */
enum rq_kind {
	RQ_PARSE, RQ_BIND, RQ_DESCRIBE, RQ_EXECUTE, RQ_CLOSE, /* extended */
	RQ_SYNC, RQ_QUERY, RQ_FUNC,                            /* end with 'Z' */
	RQ_COPY_END /* no answer: where an extended COPY FROM STDIN's data ended */
};
enum {
	RQ_SWALLOW = 1, /* sent by the proxy: its responses are not relayed */
	RQ_SYNTH = 2,   /* answered by the proxy, in order: not sent */
	RQ_MARKER = 4,  /* its error is replaced by the refusal in `why` */
	RQ_PARAMS = 8,  /* a SET of tracked parameters (an error ends the client) */
	RQ_PREPARES = 16, /* prepares `stmt` on the server: forgotten if it fails */
	RQ_NAMES = 32,  /* registered `name` for the client: undone if it fails */
	RQ_CLOSES = 64, /* closed the client's `name` (`stmt`): back if skipped */
	RQ_DEALLOC_ALL = 128, /* DEALLOCATE ALL, answered by the proxy */
	RQ_STMTS = 256, /* forwarded DISCARD or DEALLOCATE: statements may go */
	RQ_QUIET_PREPARE = 512, /* its PREPARE's CommandComplete is not relayed */
};
struct rq {
	uint8_t kind;
	uint16_t flags;
	char synth;          /* RQ_SYNTH: the message to make ('1', '3', 'C'...) */
	bool not_run;        /* a Query's error says it did not run: it ends failed */
	struct stmt *stmt;   /* a Parse of it (RQ_PREPARES: on this server) */
	char *name;          /* the client's name it registers or closes */
	uint64_t reg;        /* ...and that name's registration (stmt_map_reg) */
	char *why;           /* RQ_MARKER: SQLSTATE, NUL, message */
};
#define RQ_MAX 16384 /* requests in flight per connection: the client waits beyond */

struct server {
	/* Its socket, watched by the loop of the client using it (w.loop).
	 * Given back with one loop, it stays registered there while idle (no
	 * epoll_ctl per transaction; an idle server's close or stray bytes
	 * come as an event and mark it broken).  With more loops it leaves
	 * the set, and goes back to the pool after the loop's batch when it
	 * was let go inside one (server_put_after_batch): w.loop is NULL from
	 * then on.  With w.loop set it is freed after that loop's batch (only
	 * that loop's thread destroys it), else at once. */
	struct watch w;
	struct client *user;     /* linked (or connecting) client; NULL: idle */
	struct server *put_next; /* a loop's puts after the batch... */
	ts_pass put_pass;        /* ...each with its client's pass, returned after it */
	bool broken;             /* an event came while idle: not reused */
	struct upool *up;
	int fd;
	enum { S_CONNECTING, S_SSL, S_STARTUP, S_READY } state; /* S_SSL: SSLRequest sent */
	struct tls tls;
	int32_t pid, key;
	struct buf in, out;
	struct relay rl;         /* the server message being relayed */
	struct params have;      /* its tracked parameters, as last reported or set */
	struct buf params;       /* startup: the raw ParameterStatus messages */
	struct srv_stmts *stmts; /* prepared under proxy names */
	int64_t created_ns, idle_since_ns, deadline_ns;
	ts_pass conn_pass;       /* --processes: its place under the pool's ceiling */
	int close_for;           /* --processes: closed for this slot's demand (-1: no) */
	bool dirty;              /* DISCARD or an unknown state: not reused */
	bool stmts_unknown;      /* after a skipped prepare: close before preparing */
	bool copy_in_ext;        /* in an Execute's COPY FROM STDIN: Syncs are ignored */
	bool unnamed;            /* may have an unnamed statement (a simple query drops it) */
	/* the requests in flight, a ring */
	struct rq *rq;
	unsigned rq_head, rq_len, rq_cap;
	bool skipping;           /* an error: requests up to the Sync are skipped */
	bool dropping;           /* the message being relayed is the proxy's own */
	struct scram_client scram; /* startup: pgproxy's SCRAM exchange */
};

struct server *server_new(struct upool *u); /* NULL: out of memory */
void server_destroy(struct server *s);      /* closes it and gives its place back */
bool server_usable(struct server *s);
bool server_socket_quiet(const struct server *s); /* a peek: nothing, and no end, in its socket */
/* A server its client let go, linked on loop l, back in the pool, then the
 * client's pass returned (*pass: none after): at once with one loop or
 * outside a batch, else after l's batch (l's thread). */
void server_put(struct loop *l, struct server *s, ts_pass *pass);
void server_put_after_batch(struct loop *l);
/* The proxy's own request on a linked connection (SETs, Parse, Close). */
struct rq *rq_push(struct server *s, enum rq_kind kind, uint16_t flags); /* NULL: oom */
bool rq_full(const struct server *s);
/* Whether a request still unanswered, in an earlier batch (a Sync after
 * it), registered or closed the client's `name`, or prepares `st` on the server (both
 * NULL: prepares or closes any of the proxy's statements there): if that
 * batch fails, they are undone, so what depends on them waits. */
bool rq_unsettled(const struct server *s, const char *name, const struct stmt *st);
/* Whether the server skips what the client sends next: an error came and
 * the Sync it skips to is not sent yet. */
bool rq_skips_next(const struct server *s);
bool server_idle(const struct server *s); /* nothing in flight either way */

/* ---------------------------------------------------------------- client.c */

enum cstate {
	C_STARTUP,    /* before the startup packet */
	C_AUTH,       /* proving who it is (SCRAM), before any pool */
	C_IDLE,       /* between transactions: no pass, no server */
	C_WAIT_TURN,  /* queued on the pool's turnstile */
	C_WAIT_CONN,  /* holds a pass, taking a server connection */
	C_CONNECTING, /* holds a pass and a new server connection's place */
	C_LINKED,     /* holds a pass and a server connection */
	C_ADMIN,      /* the admin console */
};

struct client {
	struct watch w;  /* the client's socket (its server's is in struct server) */
	struct client *prev, *next, *cancel_next;
	enum cstate state;
	bool login;          /* acquiring to learn or check the login's parameters */
	bool closing;        /* flush what is queued, then close */
	bool skipping;       /* dropping messages up to a Sync (a batch refused, or one the server skips) */
	bool queued;         /* counted in pool->waiting[band] */
	bool admin_refused;  /* admin console: refused an extended batch */
	bool ext_open;       /* extended-protocol messages since the last Sync */
	bool retry;          /* at the ceiling with nothing to close yet: try again */
	bool conn_queued;    /* --processes: node waits for a conns pass, slot held */
	bool param_failed;   /* a SET of its parameters failed: param_err says why */
	struct pg_error param_err;
	char status;         /* the last ReadyForQuery status relayed */
	char user[NAME_LEN], db[NAME_LEN];
	int band;
	struct upool *up;
	struct server *srv;
	ts_async node;
	ts_pass pass;
	ts_pass conn_pass;   /* --processes: granted, not yet given to a server */
	int64_t acq_start, deadline, login_deadline;
	int64_t conn_since;  /* --processes: when its turn began waiting for a connection */
	struct buf in, out;
	struct relay rl;     /* the client message being forwarded or dropped */
	size_t in_need;      /* a message to be read whole: its size (0 none) */
	struct params want;  /* its tracked parameters */
	struct stmt_map *stmts;
	struct scram_verify *sasl; /* C_AUTH: the exchange */
	struct tls tls;            /* the client's TLS, after its SSLRequest */
	uint64_t ticks;      /* state changes: progress without bytes */
	int32_t id, key, srv_pid, srv_key; /* cancel keys (cancel.c's lock) */
	bool registered;
};

struct client *client_new(struct loop *l, int fd);
void client_event(struct client *c, uint32_t events);
void server_event(struct watch *w, uint32_t events);
void client_shutdown(struct client *c); /* the proxy is stopping */
void client_tick(struct client *c, int64_t now); /* login and connect timeouts */
void conn_free(struct watch *w);

/* server.c, for client.c: the relay from the server, its startup */
void server_input(struct client *c);
void server_startup_io(struct client *c);
void server_start(struct client *c, struct server *s); /* connect and send startup */
/* client.c, for server.c */
void client_server_ready(struct client *c);     /* startup done: ReadyForQuery */
void client_server_failed(struct client *c, const struct pg_error *e);
void client_server_failed_msg(struct client *c, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void client_release(struct client *c);           /* the transaction ended */
void client_fatal(struct client *c, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void client_server_lost(struct client *c, const char *code, const char *why);
void client_retry(struct client *c);           /* take a connection again */

/* ---------------------------------------------------------------- processes.c */

/* The master: makes the shared turnstiles and table, starts the workers,
 * restarts dead ones.  Returns true in a worker (P.worker set), false in
 * the master once every worker has shut down. */
bool procs_start(const char *listening); /* logged once a worker listens */
void procs_ready(void);                       /* a worker listens */
void procs_clients_add(int n);                /* this worker's client count */
/* SHOW POOLS: @fn for each slot a login succeeded on, in any worker. */
void procs_each_pool(void (*fn)(int slot, const char *db, void *arg), void *arg);
/* SHOW PROCESSES: @fn for each worker (pid 0: being restarted). */
int procs_each_worker(void (*fn)(int w, pid_t pid, int64_t clients, uint32_t starts, void *arg),
		      void *arg);
void procs_detach(void);                      /* a worker's handles, at exit */
ts_turnstile *procs_turns(int slot);          /* a pool slot's turnstiles, */
ts_turnstile *procs_conns(int slot);          /* attached at first use */
int procs_pool_claim(const char *db, int *err); /* the slot naming @db (-1: err) */
void procs_pool_release(int slot);            /* this worker's pool is gone */
void procs_pool_logged_in(int slot);
/* conns.c's counts of closes in flight: this worker's for @slot, and
 * every worker's. */
_Atomic int32_t *procs_closing(int slot);
int64_t procs_closing_all(int slot);
int64_t procs_pool_size(int slot);
int procs_pool_resize(const char *db, int64_t size); /* every worker's; ENOENT */
void procs_request_shutdown(void);            /* the master shuts every worker down */
int procs_peer_fd(void);                       /* cancels forwarded to this worker */
void procs_peer_event(struct loop *l);
/* A CancelRequest for a client of another worker: sent on (true). */
bool procs_cancel_elsewhere(int32_t pid, const unsigned char msg[16]);

/* ---------------------------------------------------------------- conns.c */

/* A pass per server connection (--processes, --fleet: p->conn_turns).
 * true: close an idle connection of slot @slot for its conns demand (then
 * server->close_for = @slot, or conns_close_done if none is idle). */
bool conns_claim_close(int slot, ts_turnstile *conns);
void conns_close_done(int slot);
/* A closed server connection's fd and conns pass: the pass goes back when
 * the server hangs up (loop 0 watches). */
void conns_linger(int fd, ts_pass *pass, int close_for);
void conns_closer_event(struct watch *w);
void conns_closer_free(struct watch *w);
void conns_tick(void);       /* loop 0, every SHARE_NS */
void conns_loops_gone(void); /* at exit: closes linger no more, passes back */

/* ---------------------------------------------------------------- fleet.c */

/* pool_new (pools_mu held): p->conn_turns made, a member of the fleet at
 * KEY/p->db once fleet.c's thread has joined it; 0, EINVAL (a name with
 * '/', which would name another fleet's keys), EBUSY (FLEET_UNVOUCHED_MAX
 * pools no login has succeeded on yet: made-up databases cost etcd
 * requests and keys), ENOMEM or pthread_create's error. */
#define FLEET_UNVOUCHED_MAX 8
int fleet_attach(struct pool *p);
void fleet_detach(struct pool *p);  /* pool_unlist (pools_mu held): it leaves */
/* RESIZE: the fleet's ceiling, set by fleet.c's thread (no loop waits for
 * etcd; the outcome is logged): 0, or EAGAIN (not joined yet). */
int fleet_resize(struct pool *p, int64_t ceiling);
/* SHOW FLEET: @row for each member of each pool's fleet (member NULL: not
 * joined yet, or no look yet). */
void fleet_each(void (*row)(const char *db, const char *member, bool self, int64_t share,
			    int64_t held, const char *queued, void *arg),
		void *arg);
void fleet_stop(void); /* at exit, after pools_free: every member left */

/* ---------------------------------------------------------------- cancel.c */

void cancel_register(struct client *c, int32_t *pid, int32_t *key);
void cancel_unregister(struct client *c);
void cancel_set_server(struct client *c, int32_t pid, int32_t key);
bool cancel_lookup(int32_t pid, int32_t key, int32_t *srv_pid, int32_t *srv_key);
void cancel_forward(struct loop *l, int32_t srv_pid, int32_t srv_key);
void cancel_event(struct watch *w, uint32_t events);
void cancel_free(struct watch *w);

/* ---------------------------------------------------------------- admin.c */

void admin_query(struct buf *out, const char *sql, bool admin); /* admin: --admin-users */

#endif
