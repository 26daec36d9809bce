/* SPDX-License-Identifier: MIT */
/* pgproxy: a transaction-pooling PostgreSQL proxy whose pools admit
 * transactions by priority band, then age, through libturnstile's
 * event-loop waiters.  Shared declarations of its four files:
 *
 *   main.c    options, pools, loop threads, accept, shutdown, cancel keys
 *   conn.c    clients and server connections: startup, turn and
 *             connection taking, the relay, release, faults
 *   proto.c   buffers and protocol 3.0 messages
 *   admin.c   the admin console (database "pgproxy") and band statistics
 */
#ifndef PGPROXY_H
#define PGPROXY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <turnstile.h>

#define MAX_BANDS 16     /* bands 0..15 */
#define MAX_POOLS 256    /* databases seen since start */
#define NAME_LEN 64      /* PostgreSQL's NAMEDATALEN */
#define HIGH_WATER 65536 /* stop reading a side while this much waits to be written */

/* ---- buffers (proto.c) ---- */

/* A byte queue: data is p[r..w).  Failed growth sets oom, which callers
 * check once after composing (the connection is then closed). */
struct buf {
	char *p;
	size_t r, w, cap;
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

/* Messages are composed in place: msg_begin writes the type and a length
 * placeholder and returns where it is; msg_end fills it in. */
size_t msg_begin(struct buf *b, char type);
void msg_end(struct buf *b, size_t at);
void msg_u8(struct buf *b, uint8_t v);
void msg_i16(struct buf *b, int v);
void msg_i32(struct buf *b, int32_t v);
void msg_str(struct buf *b, const char *s);

void send_error(struct buf *b, const char *severity, const char *sqlstate, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void send_ready(struct buf *b, char status);
void send_param(struct buf *b, const char *name, const char *value);

/* An ErrorResponse's fields that pgproxy reads or rewrites. */
struct pg_error {
	char severity[16], code[6], message[512];
};
void parse_error(const char *body, size_t len, struct pg_error *e);

/* ---- configuration and shared state (main.c) ---- */

enum rule_key { KEY_APP, KEY_USER };
struct band_rule {
	enum rule_key key;
	char name[NAME_LEN];
	int band;
};

struct config {
	char *listen_host, *listen_dir;
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
};

/* Server connections' startup ParameterStatus messages, per user (the
 * server reports is_superuser and session_authorization per user). */
struct user_params {
	struct user_params *next;
	char user[NAME_LEN];
	struct buf msgs; /* raw 'S' messages */
};

/* A pool: one database.  Its turnstile (shard `id` of the proxy's set)
 * orders transactions; its waitlist holds the idle server connections. */
struct pool {
	int id;
	char db[NAME_LEN];
	ts_turnstile *turns;
	ts_waitlist *conns;
	_Atomic int64_t size;              /* the ceiling, as RESIZE last set it */
	_Atomic int64_t waiting[MAX_BANDS]; /* clients queued for a turn, by band */
	pthread_mutex_t mu;                /* guards params */
	struct user_params *params;
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
	struct pool *pools[MAX_POOLS];
	_Atomic int npools;
	struct sockaddr_storage server_addr;
	socklen_t server_addrlen;
	int listen_fd[2], nlisten;
	char unix_path[256];
	struct loop *loops;
	_Atomic bool shutting_down;
	_Atomic uint64_t seq;
	struct band_stats bands[MAX_BANDS];
	int max_band;
};
extern struct proxy P;

struct pool *pool_get(const char *db, int *err); /* creates it on first use */
struct pool *pool_find(const char *db);
void begin_shutdown(void);
void hist_add(struct band_stats *s, int64_t ns);
double hist_pct(const struct band_stats *s, double p); /* ms */

/* ---- loops and connections (main.c, conn.c) ---- */

enum kind { K_LISTEN, K_NOTIFIER, K_WAKE, K_SIGNAL, K_CLIENT, K_SERVER, K_CANCEL };

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
	struct watch notify_w, wake_w, signal_w, listen_w[2];
	struct client *clients; /* every client of this loop, doubly linked */
	int nclients, ncancels;
	struct watch *zombies;  /* freed after the current batch of events */
	bool stopping;          /* this loop has seen the shutdown */
};

void watch_set(struct watch *w, uint32_t mask);
void watch_close(struct watch *w); /* deregister, close the fd, free after the batch */
void loop_wake_all(void);

/* conn.c */
struct client *client_new(struct loop *l, int fd);
void client_event(struct client *c, uint32_t events);
void server_event(struct watch *w, uint32_t events);
void cancel_event(struct watch *w, uint32_t events);
void client_shutdown(struct client *c); /* the proxy is stopping */
bool client_idle_for_shutdown(const struct client *c);
struct client *client_next(struct client *c);
void conn_free(struct watch *w);
void server_drop_idle(void *item); /* close an idle server connection (not its slot) */

/* Cancel keys handed out in BackendKeyData (main.c). */
void cancel_register(struct client *c, int32_t *pid, int32_t *key);
void cancel_unregister(struct client *c);
void cancel_set_server(struct client *c, int32_t pid, int32_t key);
bool cancel_lookup(int32_t pid, int32_t key, int32_t *srv_pid, int32_t *srv_key);

/* admin.c */
void admin_query(struct buf *out, const char *sql);

#endif
