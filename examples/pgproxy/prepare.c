/* SPDX-License-Identifier: MIT */
/* pgproxy: named prepared statements in transaction pooling.
 *
 * A client's named statement would outlive its transaction on a server
 * connection the next client gets, and be missing on the connection its
 * next transaction gets.  So the proxy keeps, per client, its names for
 * statements (a Parse's body: text and parameter types); the same body
 * from any client is one `struct stmt`, named "pgproxy_<id>" on servers.
 * Each server connection remembers which ids it has prepared, at most
 * --max-prepared, least recently used evicted (Close'd on the server).
 * client.c rewrites Parse, Bind, Describe and Close to those names and
 * prepares a statement on a connection that lacks it just before it is
 * used; server.c swallows the answers to what the proxy sent. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "pgproxy.h"

#define CLIENT_MAX_STMTS 4096 /* names per client (54000 beyond) */

struct stmt {
	struct stmt *next; /* in its registry bucket */
	uint64_t id, hash;
	_Atomic int refs;
	size_t len;
	char body[];
};

#define REG_BUCKETS 4096
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct stmt *reg[REG_BUCKETS];
static uint64_t reg_next_id;

static uint64_t fnv(const char *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	while (n--)
		h = (h ^ (unsigned char)*p++) * 1099511628211ull;
	return h;
}

struct stmt *stmt_get(const char *body, size_t len)
{
	uint64_t h = fnv(body, len);
	pthread_mutex_lock(&reg_mu);
	struct stmt **head = &reg[h % REG_BUCKETS], *s;
	for (s = *head; s; s = s->next)
		if (s->hash == h && s->len == len && !memcmp(s->body, body, len)) {
			atomic_fetch_add(&s->refs, 1);
			break;
		}
	if (!s && (s = malloc(sizeof(*s) + len))) {
		s->id = ++reg_next_id;
		s->hash = h;
		s->len = len;
		atomic_init(&s->refs, 1);
		memcpy(s->body, body, len);
		s->next = *head;
		*head = s;
	}
	pthread_mutex_unlock(&reg_mu);
	return s;
}

struct stmt *stmt_hold(struct stmt *s)
{
	atomic_fetch_add(&s->refs, 1);
	return s;
}

void stmt_put(struct stmt *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&reg_mu);
	if (atomic_fetch_sub(&s->refs, 1) == 1) {
		for (struct stmt **p = &reg[s->hash % REG_BUCKETS]; *p; p = &(*p)->next)
			if (*p == s) {
				*p = s->next;
				break;
			}
		free(s);
	}
	pthread_mutex_unlock(&reg_mu);
}

uint64_t stmt_id(const struct stmt *s) { return s->id; }

const char *stmt_body(const struct stmt *s, size_t *len)
{
	*len = s->len;
	return s->body;
}

/* ---------------------------------------------------------------- a client's names */

#define MAP_BUCKETS 64
struct name_ent {
	struct name_ent *next;
	struct stmt *stmt;
	uint64_t reg; /* which registration: a name may be made, closed, made again */
	char name[];
};
struct stmt_map {
	struct name_ent *b[MAP_BUCKETS];
	int n;
	uint64_t regs;
};

struct stmt_map *stmt_map_new(void) { return calloc(1, sizeof(struct stmt_map)); }

void stmt_map_clear(struct stmt_map *m)
{
	for (int i = 0; i < MAP_BUCKETS; i++)
		while (m->b[i]) {
			struct name_ent *e = m->b[i];
			m->b[i] = e->next;
			stmt_put(e->stmt);
			free(e);
		}
	m->n = 0;
}

void stmt_map_free(struct stmt_map *m)
{
	if (!m)
		return;
	stmt_map_clear(m);
	free(m);
}

static struct name_ent **slot(struct stmt_map *m, const char *name)
{
	struct name_ent **p = &m->b[fnv(name, strlen(name)) % MAP_BUCKETS];
	while (*p && strcmp((*p)->name, name))
		p = &(*p)->next;
	return p;
}

struct stmt *stmt_map_find(struct stmt_map *m, const char *name)
{
	struct name_ent *e = *slot(m, name);
	return e ? e->stmt : NULL;
}

uint64_t stmt_map_reg(struct stmt_map *m, const char *name)
{
	struct name_ent *e = *slot(m, name);
	return e ? e->reg : 0;
}

int stmt_map_add(struct stmt_map *m, const char *name, struct stmt *s)
{
	struct name_ent **p = slot(m, name);
	if (*p)
		return EEXIST;
	if (m->n >= CLIENT_MAX_STMTS)
		return ENOSPC;
	size_t len = strlen(name);
	struct name_ent *e = calloc(1, sizeof(*e) + len + 1);
	if (!e)
		return ENOMEM;
	memcpy(e->name, name, len + 1);
	atomic_fetch_add(&s->refs, 1);
	e->stmt = s;
	e->reg = ++m->regs;
	*p = e;
	m->n++;
	return 0;
}

void stmt_map_remove(struct stmt_map *m, const char *name)
{
	struct name_ent **p = slot(m, name), *e = *p;
	if (!e)
		return;
	*p = e->next;
	stmt_put(e->stmt);
	free(e);
	m->n--;
}

/* ---------------------------------------------------------------- a server's statements */

/* ids in use order: ids[0] least recently used.  Linear: --max-prepared
 * is a few hundred at most, and a lookup is a scan of 8-byte words. */
struct srv_stmts {
	int n, cap;
	uint64_t ids[];
};

struct srv_stmts *srv_stmts_new(int cap)
{
	struct srv_stmts *ss = calloc(1, sizeof(*ss) + sizeof(uint64_t) * (size_t)cap);
	if (ss)
		ss->cap = cap;
	return ss;
}

void srv_stmts_free(struct srv_stmts *ss) { free(ss); }

static int find_id(const struct srv_stmts *ss, uint64_t id)
{
	for (int i = ss->n - 1; i >= 0; i--)
		if (ss->ids[i] == id)
			return i;
	return -1;
}

bool srv_stmts_has(struct srv_stmts *ss, uint64_t id)
{
	int i = find_id(ss, id);
	if (i < 0)
		return false;
	memmove(&ss->ids[i], &ss->ids[i + 1], sizeof(uint64_t) * (size_t)(ss->n - i - 1));
	ss->ids[ss->n - 1] = id;
	return true;
}

bool srv_stmts_add(struct srv_stmts *ss, uint64_t id, uint64_t *evicted)
{
	bool ev = false;
	if (!ss->cap)
		return false;
	if (ss->n == ss->cap) {
		*evicted = ss->ids[0];
		memmove(&ss->ids[0], &ss->ids[1], sizeof(uint64_t) * (size_t)(ss->n - 1));
		ss->n--;
		ev = true;
	}
	ss->ids[ss->n++] = id;
	return ev;
}

void srv_stmts_forget(struct srv_stmts *ss, uint64_t id)
{
	int i = find_id(ss, id);
	if (i < 0)
		return;
	memmove(&ss->ids[i], &ss->ids[i + 1], sizeof(uint64_t) * (size_t)(ss->n - i - 1));
	ss->n--;
}

void srv_stmts_clear(struct srv_stmts *ss) { ss->n = 0; }
