/* SPDX-License-Identifier: MIT */
/* Fuzzing pgproxy's client- and server-side protocol handling in-process.
 *
 * Linked with every examples/pgproxy/ source but main.c, this file provides
 * what main.c would (struct proxy P, watch_set, watch_close, the loop) and
 * plays both ends: the client, on a socketpair handed to client_new, and a
 * deterministic fake PostgreSQL server, on a Unix socket that P.server_addr
 * names.  The fake server answers the startup with AuthenticationOk,
 * ParameterStatus, BackendKeyData and ReadyForQuery 'I', then every
 * frontend message by a fixed rule (Parse '1', Bind '2', Describe 't'+'T'
 * or 'n', Execute 'D' rows + 'C', Close '3', Sync 'Z', Query 'T' 'D' 'C'
 * 'Z', SET with ParameterStatus, COPY in and out, errors that skip to the
 * Sync as PostgreSQL does, FATAL and a close for an unknown message).
 *
 * An input is a header, then a client stream:
 *   [0] flags: bits 0-1 the stream: 0 raw bytes after the harness's own
 *       startup packet, 1 and 3 generated (well-formed messages chosen by
 *       the bytes), 2 raw bytes with no startup packet (the startup parser
 *       is fuzzed); bit 2 hostile server mode (PGPROXY_FUZZ_MODE=client or
 *       server forces it off or on; PGPROXY_FUZZ_MODE=sasl forces it off
 *       and has the proxy check the client with SCRAM-SHA-256, so the
 *       stream after the startup packet is its SASL messages)
 *   [1] --max-prepared: 0 0 1 2 3 4 8 100 by its low 3 bits
 *   [2] the startup packet's variant (application_name, client_encoding,
 *       DateStyle, TimeZone, extra_float_digits, protocol 3.2 + _pq_.)
 *   [3] split points: low 3 bits n, then n 16-bit values, each a fraction
 *       of the stream's length (so they fit any stream)
 *   hostile mode only: [trigger] [template] [n] and n payload bytes: the
 *       fake server adds (or replaces its answer with) hostile bytes after
 *       its trigger-th answer (every trigger+1-th with template bit 7),
 *       then closes with template bit 6
 *   the rest: the stream, or the generator's program
 *
 * Checks per input, each a finding (abort) when it fails:
 *   - no crash, out-of-bounds access or undefined behaviour (ASan, UBSan),
 *     and no leak of the harness or the proxy (LSan)
 *   - the loop goes quiet: after each piece, epoll_wait(0) rounds run until
 *     nothing moves for 3 rounds; events without bytes moving for
 *     BUSY_LIMIT rounds (a spin), or ROUND_LIMIT rounds, are findings
 *   - with a well-behaved server: no stall (client input the proxy never
 *     reads, server output it never reads), no client left waiting for a
 *     turn or a connection, no request the proxy still waits an answer to
 *     when the server has answered everything, and the server never sees a
 *     Bind or Describe of a pgproxy_N statement it lacks, nor a Parse of
 *     one it has
 *   - split invariance: the bytes the client receives with its stream
 *     delivered whole equal those with the stream delivered in pieces
 *     (each piece, then the loop to quiescence), BackendKeyData masked;
 *     compared for valid streams (known message types after the harness's
 *     startup, a well-behaved server) the proxy did not close
 *   - after each run (the client closed, idle connections freed with
 *     pools_free) every client, server connection and pool is gone and
 *     every pass is back
 *
 * Known findings in the proxy (tests/fuzz/pgproxy-corpus/known/README) are
 * looked past, each where it is marked "Known finding N", unless
 * PGPROXY_FUZZ_STRICT names N ("all": every one).  PGPROXY_FUZZ_TRACE=1
 * prints what the fake server receives, PGPROXY_FUZZ_VERBOSE=1 what the
 * client gets, PGPROXY_FUZZ_DUMP=file writes the client stream.
 *
 * Built two ways: with clang -fsanitize=fuzzer (tests/fuzz/run.sh) it is a
 * libFuzzer target; otherwise its main() replays the files named on the
 * command line, and each stream of at most PGPROXY_SPLIT_MAX bytes (default
 * 400) is also delivered a byte at a time and in every split in two
 * (tests/fuzz/pgproxy_replay.sh, make check). */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "pgproxy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define ROUND_LIMIT 200000 /* rounds per settle */
#define BUSY_LIMIT 2000    /* rounds with events but nothing moving */
#define QUIET_ROUNDS 3
#define MAX_FCONN 64

struct proxy P;
static struct loop L;
static bool hostile;       /* this input's server is hostile */
static bool verbose;
/* PGPROXY_FUZZ_STRICT: the known findings (numbered as in
 * tests/fuzz/pgproxy-corpus/known/README) not looked past: "all" (the
 * default, since all are fixed), "none", or a list such as "1,4" */
static unsigned strict_mask;
#define STRICT(n) ((strict_mask >> (n)) & 1u)
static uint64_t moved;     /* bytes the harness moved, either side */
static char sock_dir[64], sock_path[108];
static int srv_lfd = -1;

static void finding(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void finding(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "pgproxy_fuzz: FINDING: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

/* ---------------------------------------------------------------- byte queues */

struct hb {
	char *p;
	size_t r, w, cap;
};

static size_t hb_len(const struct hb *b) { return b->w - b->r; }
static char *hb_data(const struct hb *b)
{
	static char empty[1];
	return b->p ? b->p + b->r : empty;
}

static void hb_put(struct hb *b, const void *d, size_t n)
{
	if (!n)
		return;
	if (b->cap - b->w < n && b->r) {
		memmove(b->p, b->p + b->r, b->w - b->r);
		b->w -= b->r;
		b->r = 0;
	}
	if (b->cap - b->w < n) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap - b->w < n)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			fprintf(stderr, "pgproxy_fuzz: out of memory\n");
			abort();
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->w, d, n);
	b->w += n;
}

static void hb_consume(struct hb *b, size_t n)
{
	b->r += n;
	if (b->r == b->w)
		b->r = b->w = 0;
}

static void hb_free(struct hb *b)
{
	free(b->p);
	*b = (struct hb){ 0 };
}

static void put_be32(char *p, uint32_t v)
{
	p[0] = (char)(v >> 24);
	p[1] = (char)(v >> 16);
	p[2] = (char)(v >> 8);
	p[3] = (char)v;
}

static uint32_t be32(const char *p)
{
	const unsigned char *u = (const unsigned char *)p;
	return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

/* A message built whole, its length filled in at the end. */
struct mb {
	struct hb b;
	size_t at; /* where the length goes */
};

static void mb_begin(struct mb *m, char type)
{
	*m = (struct mb){ 0 };
	if (type)
		hb_put(&m->b, &type, 1);
	m->at = type ? 1 : 0;
	hb_put(&m->b, "\0\0\0\0", 4);
}
static void mb_u8(struct mb *m, uint8_t v) { hb_put(&m->b, &v, 1); }
static void mb_i16(struct mb *m, int v)
{
	char p[2] = { (char)(v >> 8), (char)v };
	hb_put(&m->b, p, 2);
}
static void mb_i32(struct mb *m, uint32_t v)
{
	char p[4];
	put_be32(p, v);
	hb_put(&m->b, p, 4);
}
static void mb_str(struct mb *m, const char *s) { hb_put(&m->b, s, strlen(s) + 1); }
static void mb_bytes(struct mb *m, const void *d, size_t n) { hb_put(&m->b, d, n); }
static void mb_end(struct mb *m, struct hb *out)
{
	put_be32(m->b.p + m->at, (uint32_t)(hb_len(&m->b) - m->at));
	hb_put(out, hb_data(&m->b), hb_len(&m->b));
	hb_free(&m->b);
}

static void put_simple(struct hb *out, char type)
{
	char m[5] = { type, 0, 0, 0, 4 };
	hb_put(out, m, 5);
}

/* ---------------------------------------------------------------- what main.c provides */

void loop_wake_all(void) {}
void loop_fd_freed(struct loop *l) { (void)l; }

/* ---------------------------------------------------------------- the fake server */

struct named {
	char *name, *query;
	long rows_left;
	bool started;
};
struct names {
	struct named *v;
	int n, cap;
};

enum { NPAR = 8 };
static const char *const par_names[NPAR] = {
	"client_encoding", "DateStyle", "TimeZone", "IntervalStyle",
	"standard_conforming_strings", "application_name", "integer_datetimes", "server_version",
};
static const char *const par_defaults[NPAR] = {
	"UTF8", "ISO, MDY", "UTC", "postgres", "on", "", "on", "16.0",
};

struct fconn {
	int fd;
	struct hb in, out;
	bool startup_done, closing, cancel;
	char status;   /* 'I' 'T' 'E' */
	bool explicit_txn, skip, copy_in, copy_simple;
	long copy_rows;
	struct names stmts, portals;
	struct names skipped; /* pgproxy_N Parses skipped after an error */
	char par[NPAR][128];
};

static struct fconn *fconns[MAX_FCONN];
static int nfconn;

/* hostile mode */
static struct {
	unsigned trigger, tmpl;
	const uint8_t *payload;
	size_t plen;
	unsigned answers; /* answers given in this run */
} H;

static struct named *names_find(struct names *ns, const char *name)
{
	for (int i = 0; i < ns->n; i++)
		if (!strcmp(ns->v[i].name, name))
			return &ns->v[i];
	return NULL;
}

static void names_remove(struct names *ns, const char *name)
{
	struct named *e = names_find(ns, name);
	if (!e)
		return;
	free(e->name);
	free(e->query);
	*e = ns->v[--ns->n];
}

static void names_clear(struct names *ns)
{
	for (int i = 0; i < ns->n; i++) {
		free(ns->v[i].name);
		free(ns->v[i].query);
	}
	ns->n = 0;
}

static struct named *names_add(struct names *ns, const char *name, const char *query)
{
	names_remove(ns, name);
	if (ns->n == ns->cap) {
		ns->cap = ns->cap ? ns->cap * 2 : 8;
		ns->v = realloc(ns->v, sizeof(*ns->v) * (size_t)ns->cap);
		if (!ns->v)
			abort();
	}
	struct named *e = &ns->v[ns->n++];
	*e = (struct named){ strdup(name), strdup(query), 0, false };
	if (!e->name || !e->query)
		abort();
	return e;
}

static void f_error(struct fconn *f, const char *sev, const char *code, const char *msg)
{
	struct mb m;
	mb_begin(&m, 'E');
	mb_u8(&m, 'S');
	mb_str(&m, sev);
	mb_u8(&m, 'V');
	mb_str(&m, sev);
	mb_u8(&m, 'C');
	mb_str(&m, code);
	mb_u8(&m, 'M');
	mb_str(&m, msg);
	mb_u8(&m, 0);
	mb_end(&m, &f->out);
}

static void f_param(struct fconn *f, const char *name, const char *val)
{
	struct mb m;
	mb_begin(&m, 'S');
	mb_str(&m, name);
	mb_str(&m, val);
	mb_end(&m, &f->out);
}

static void f_ready(struct fconn *f)
{
	char m[6] = { 'Z', 0, 0, 0, 5, f->status };
	hb_put(&f->out, m, 6);
}

static void f_complete(struct fconn *f, const char *tag)
{
	struct mb m;
	mb_begin(&m, 'C');
	mb_str(&m, tag);
	mb_end(&m, &f->out);
}

static void f_rowdesc(struct fconn *f)
{
	struct mb m;
	mb_begin(&m, 'T');
	mb_i16(&m, 1);
	mb_str(&m, "?column?");
	mb_i32(&m, 0);
	mb_i16(&m, 0);
	mb_i32(&m, 23);
	mb_i16(&m, 4);
	mb_i32(&m, (uint32_t)-1);
	mb_i16(&m, 0);
	mb_end(&m, &f->out);
}

static void f_row(struct fconn *f, long v)
{
	char s[24];
	int n = snprintf(s, sizeof(s), "%ld", v);
	struct mb m;
	mb_begin(&m, 'D');
	mb_i16(&m, 1);
	mb_i32(&m, (uint32_t)n);
	mb_bytes(&m, s, (size_t)n);
	mb_end(&m, &f->out);
}

/* A statement's first word, upper-cased, and the rest. */
static const char *first_word(const char *q, char *w, size_t n)
{
	while (isspace((unsigned char)*q))
		q++;
	size_t i = 0;
	while (*q && !isspace((unsigned char)*q) && *q != ';' && *q != '(') {
		if (i < n - 1)
			w[i++] = (char)toupper((unsigned char)*q);
		q++;
	}
	w[i] = 0;
	return q;
}

static bool has_word(const char *q, const char *w) { return strcasestr(q, w) != NULL; }

static long select_rows(const char *q)
{
	char w[32];
	const char *rest = first_word(q, w, sizeof(w));
	while (isspace((unsigned char)*rest))
		rest++;
	if (!isdigit((unsigned char)*rest))
		return 1;
	long n = strtol(rest, NULL, 10);
	return n > 100 ? 100 : n < 0 ? 0 : n;
}

static int par_index(const char *name)
{
	for (int i = 0; i < NPAR; i++)
		if (!strcasecmp(name, par_names[i]))
			return i;
	return -1;
}

/* SET name TO value, SET name = value, RESET name, RESET ALL: false when
 * the value is refused. */
static bool f_set_value(struct fconn *f, int p, const char *v)
{
	char val[128];
	snprintf(val, sizeof(val), "%s", v);
	if (p == 0) { /* client_encoding: the server's spelling */
		if (!strncasecmp(val, "bogus", 5))
			return false;
		for (char *c = val; *c; c++)
			*c = (char)toupper((unsigned char)*c);
	} else if (p == 2 && !strncasecmp(val, "bogus", 5)) {
		return false;
	} else if (p == 4 && strcasecmp(val, "on") && strcasecmp(val, "off")) {
		return false;
	} else if (p == 5) {
		val[63] = 0; /* NAMEDATALEN */
	} else if (p >= 6) {
		return false; /* not settable */
	}
	if (strcmp(f->par[p], val)) {
		snprintf(f->par[p], sizeof(f->par[p]), "%s", val);
		f_param(f, par_names[p], val);
	}
	return true;
}

static void f_reset_all(struct fconn *f)
{
	for (int p = 0; p < 6; p++)
		f_set_value(f, p, par_defaults[p]);
}

/* The value of a SET: 'quoted' (doubled quotes), E'escaped', or a word. */
static void set_value(const char *s, char *out, size_t n)
{
	size_t i = 0;
	while (isspace((unsigned char)*s))
		s++;
	bool esc = false;
	if ((*s == 'E' || *s == 'e') && s[1] == '\'') {
		esc = true;
		s++;
	}
	if (*s == '\'') {
		for (s++; *s; s++) {
			if (*s == '\'' && s[1] == '\'')
				s++;
			else if (*s == '\'')
				break;
			else if (esc && *s == '\\' && s[1])
				s++;
			if (i < n - 1)
				out[i++] = *s;
		}
	} else {
		while (*s && !isspace((unsigned char)*s) && i < n - 1)
			out[i++] = *s++;
	}
	out[i] = 0;
}

enum { XR_OK, XR_ERR, XR_COPYIN, XR_SUSPENDED };

static int f_set(struct fconn *f, const char *rest, bool reset)
{
	char name[64], val[256] = "";
	const char *r = first_word(rest, name, sizeof(name));
	if (!strcmp(name, "SESSION") || !strcmp(name, "LOCAL"))
		r = first_word(r, name, sizeof(name));
	if (reset) {
		if (!strcmp(name, "ALL"))
			f_reset_all(f);
		else if (par_index(name) >= 0 && par_index(name) < 6)
			f_set_value(f, par_index(name), par_defaults[par_index(name)]);
		f_complete(f, "RESET");
		return XR_OK;
	}
	char *eq = strchr(name, '=');
	if (eq) { /* name=value */
		*eq = 0;
		set_value(strchr(rest, '=') + 1, val, sizeof(val));
	} else {
		while (isspace((unsigned char)*r))
			r++;
		if (!strncasecmp(r, "TO", 2) && (isspace((unsigned char)r[2]) || r[2] == '\''))
			r += 2;
		else if (*r == '=')
			r++;
		set_value(r, val, sizeof(val));
	}
	int p = par_index(name);
	if (p >= 0 && !f_set_value(f, p, val)) {
		f_error(f, "ERROR", "22023", "invalid value for parameter");
		return XR_ERR;
	}
	f_complete(f, "SET");
	return XR_OK;
}

static bool txn_end_word(const char *w)
{
	return !strcmp(w, "COMMIT") || !strcmp(w, "END") || !strcmp(w, "ROLLBACK") ||
	       !strcmp(w, "ABORT");
}

static bool trace; /* PGPROXY_FUZZ_TRACE: what the fake server receives */
/* Known finding 3: a Query (or FunctionCall) after an error in an extended
 * batch, before its Sync, is skipped by PostgreSQL, but the proxy expects
 * its ReadyForQuery (or answers a DEALLOCATE itself): it takes the Sync's
 * as the Query's and waits for ever for the rest.  Set when the fake
 * server skips one, or the stream has a Query in an open batch: unless
 * PGPROXY_FUZZ_STRICT names it, that run is not checked for it (nor
 * compared). */
static bool known3;
/* Known finding 5: a DISCARD ALL (or DEALLOCATE ALL, or one in a longer
 * query) the proxy forwards drops the server's pgproxy_N statements, but
 * the proxy still counts them prepared on that connection: a named Parse
 * pipelined after it is answered by the proxy, and its Bind fails with
 * 26000.  Unless PGPROXY_FUZZ_STRICT names it, the names dropped so are not
 * checked, and the run is not compared. */
static bool known5;

static bool proxy_name(const char *name) { return !strncmp(name, "pgproxy_", 8); }

/* The server drops its statements on the client's word. */
static void f_drop_stmts(struct fconn *f)
{
	for (int i = 0; i < f->stmts.n; i++)
		if (proxy_name(f->stmts.v[i].name)) {
			known5 = true;
			if (!STRICT(5))
				names_add(&f->skipped, f->stmts.v[i].name, "");
		}
	names_clear(&f->stmts);
}

/* One statement; simple: a RowDescription before rows.  A portal's rows
 * are counted down across Executes of at most maxrows. */
static int f_exec(struct fconn *f, const char *q, bool simple, struct named *portal, long maxrows)
{
	char w[32], tag[64];
	const char *rest = first_word(q, w, sizeof(w));
	if (f->status == 'E' && !txn_end_word(w)) {
		f_error(f, "ERROR", "25P02", "current transaction is aborted");
		return XR_ERR;
	}
	if (has_word(q, "error")) {
		f_error(f, "ERROR", "42601", "syntax error");
		return XR_ERR;
	}
	if (!strcmp(w, "SELECT") || !strcmp(w, "VALUES")) {
		long total = select_rows(q), n = total;
		if (portal) {
			if (!portal->started) {
				portal->started = true;
				portal->rows_left = total;
			}
			n = portal->rows_left;
			if (maxrows > 0 && n > maxrows)
				n = maxrows;
		}
		if (simple)
			f_rowdesc(f);
		for (long i = 0; i < n; i++)
			f_row(f, i + 1);
		if (portal) {
			portal->rows_left -= n;
			if (maxrows > 0 && portal->rows_left > 0) {
				put_simple(&f->out, 's');
				return XR_SUSPENDED;
			}
		}
		snprintf(tag, sizeof(tag), "SELECT %ld", n);
		f_complete(f, tag);
		return XR_OK;
	}
	if (!strcmp(w, "BEGIN") || !strcmp(w, "START")) {
		if (f->explicit_txn) {
			struct mb m;
			mb_begin(&m, 'N');
			mb_u8(&m, 'S');
			mb_str(&m, "WARNING");
			mb_u8(&m, 'C');
			mb_str(&m, "25001");
			mb_u8(&m, 'M');
			mb_str(&m, "there is already a transaction in progress");
			mb_u8(&m, 0);
			mb_end(&m, &f->out);
		}
		f->explicit_txn = true;
		f->status = 'T';
		f_complete(f, "BEGIN");
		return XR_OK;
	}
	if (txn_end_word(w)) {
		bool commit = !strcmp(w, "COMMIT") || !strcmp(w, "END");
		f_complete(f, commit && f->status != 'E' ? "COMMIT" : "ROLLBACK");
		f->explicit_txn = false;
		f->status = 'I';
		names_clear(&f->portals);
		return XR_OK;
	}
	if (!strcmp(w, "SET"))
		return f_set(f, rest, false);
	if (!strcmp(w, "RESET"))
		return f_set(f, rest, true);
	if (!strcmp(w, "COPY")) {
		if (has_word(q, "FROM STDIN")) {
			struct mb m;
			mb_begin(&m, 'G');
			mb_u8(&m, 0);
			mb_i16(&m, 1);
			mb_i16(&m, 0);
			mb_end(&m, &f->out);
			f->copy_in = true;
			f->copy_simple = simple;
			f->copy_rows = 0;
			return XR_COPYIN;
		}
		if (has_word(q, "TO STDOUT")) {
			struct mb m;
			mb_begin(&m, 'H');
			mb_u8(&m, 0);
			mb_i16(&m, 1);
			mb_i16(&m, 0);
			mb_end(&m, &f->out);
			for (int i = 0; i < 2; i++) {
				mb_begin(&m, 'd');
				mb_bytes(&m, "row\n", 4);
				mb_end(&m, &f->out);
			}
			put_simple(&f->out, 'c');
			f_complete(f, "COPY 2");
			return XR_OK;
		}
		f_error(f, "ERROR", "42601", "COPY needs STDIN or STDOUT here");
		return XR_ERR;
	}
	if (!strcmp(w, "DISCARD")) {
		if (f->explicit_txn) {
			f_error(f, "ERROR", "25001", "DISCARD ALL cannot run inside a transaction block");
			return XR_ERR;
		}
		f_drop_stmts(f);
		names_clear(&f->portals);
		f_reset_all(f);
		f_complete(f, "DISCARD ALL");
		return XR_OK;
	}
	if (!strcmp(w, "PREPARE")) { /* PREPARE name AS query: the name, unquoted */
		char name[128];
		first_word(rest, name, sizeof(name));
		for (char *c = name; *c; c++)
			*c = (char)tolower((unsigned char)*c);
		if (names_find(&f->stmts, name)) {
			f_error(f, "ERROR", "42P05", "prepared statement already exists");
			return XR_ERR;
		}
		names_add(&f->stmts, name, "");
		f_complete(f, "PREPARE");
		return XR_OK;
	}
	if (!strcmp(w, "DEALLOCATE")) {
		char name[128];
		const char *r = first_word(rest, name, sizeof(name));
		if (!strcmp(name, "PREPARE"))
			first_word(r, name, sizeof(name));
		if (!strcmp(name, "ALL")) {
			f_drop_stmts(f);
			f_complete(f, "DEALLOCATE ALL");
			return XR_OK;
		}
		/* names are case-folded unless quoted: the fake compares folded */
		for (int i = 0; i < f->stmts.n; i++) {
			char folded[128];
			snprintf(folded, sizeof(folded), "%s", f->stmts.v[i].name);
			for (char *c = folded; *c; c++)
				*c = (char)toupper((unsigned char)*c);
			char quoted[130];
			snprintf(quoted, sizeof(quoted), "\"%s\"", folded);
			if (!strcmp(folded, name) || !strcmp(quoted, name)) {
				if (proxy_name(f->stmts.v[i].name)) {
					known5 = true;
					if (!STRICT(5))
						names_add(&f->skipped, f->stmts.v[i].name, "");
				}
				names_remove(&f->stmts, f->stmts.v[i].name);
				f_complete(f, "DEALLOCATE");
				return XR_OK;
			}
		}
		f_error(f, "ERROR", "26000", "prepared statement does not exist");
		return XR_ERR;
	}
	if (!strcmp(w, "TERMINATE")) { /* as pg_terminate_backend() */
		f_error(f, "FATAL", "57P01", "terminating connection due to administrator command");
		f->closing = true;
		return XR_ERR;
	}
	if (!strcmp(w, "NOTIFY")) {
		f_complete(f, "NOTIFY");
		struct mb m;
		mb_begin(&m, 'A');
		mb_i32(&m, 4242);
		mb_str(&m, "chan");
		mb_str(&m, "payload");
		mb_end(&m, &f->out);
		return XR_OK;
	}
	snprintf(tag, sizeof(tag), "%s", w[0] ? w : "OK");
	f_complete(f, tag);
	return XR_OK;
}

/* A simple query: statements split at semicolons outside quotes. */
static void f_query(struct fconn *f, const char *q, size_t n)
{
	char *text = strndup(q, n);
	if (!text)
		abort();
	names_remove(&f->stmts, "");
	names_remove(&f->portals, "");
	bool any = false;
	char *s = text;
	int r = XR_OK;
	while (*s && r == XR_OK) {
		char *e = s, quote = 0;
		for (; *e; e++) {
			if (quote && *e == quote)
				quote = 0;
			else if (!quote && (*e == '\'' || *e == '"'))
				quote = *e;
			else if (!quote && *e == ';')
				break;
		}
		bool last = !*e;
		*e = 0;
		char *t = s;
		while (isspace((unsigned char)*t))
			t++;
		if (*t) {
			any = true;
			r = f_exec(f, t, true, NULL, 0);
		}
		s = last ? e : e + 1;
	}
	free(text);
	if (r == XR_COPYIN || f->closing)
		return; /* ReadyForQuery when the COPY ends */
	if (!any)
		put_simple(&f->out, 'I');
	if (r == XR_ERR && f->explicit_txn)
		f->status = 'E';
	if (!f->explicit_txn) {
		f->status = 'I';
		names_clear(&f->portals);
	}
	f_ready(f);
}

static void f_ext_error(struct fconn *f, const char *code, const char *msg)
{
	f_error(f, "ERROR", code, msg);
	f->skip = true;
	if (f->explicit_txn)
		f->status = 'E';
}

/* A string at p before end: its length, or -1. */
static long f_cstr(const char *p, const char *end)
{
	size_t n = strnlen(p, (size_t)(end - p));
	return p + n < end ? (long)n : -1;
}

static void f_startup(struct fconn *f, const char *p, size_t len)
{
	uint32_t code = len >= 8 ? be32(p + 4) : 0;
	if (code == 80877102) { /* CancelRequest: no answer */
		f->cancel = f->closing = true;
		return;
	}
	const char *db = "";
	for (const char *kv = p + 8, *end = p + len; kv < end && *kv;) {
		long kl = f_cstr(kv, end);
		if (kl < 0)
			break;
		const char *v = kv + kl + 1;
		long vl = v < end ? f_cstr(v, end) : -1;
		if (vl < 0)
			break;
		if (!strcmp(kv, "database"))
			db = v;
		kv = v + vl + 1;
	}
	if (!strncmp(db, "nodb", 4)) {
		f_error(f, "FATAL", "3D000", "database does not exist");
		f->closing = true;
		return;
	}
	struct mb m;
	mb_begin(&m, 'R');
	mb_i32(&m, 0);
	mb_end(&m, &f->out);
	for (int i = 0; i < NPAR; i++) {
		snprintf(f->par[i], sizeof(f->par[i]), "%s", par_defaults[i]);
		f_param(f, par_names[i], par_defaults[i]);
	}
	mb_begin(&m, 'K');
	mb_i32(&m, 1000 + (uint32_t)f->fd);
	mb_i32(&m, 0x5eed);
	mb_end(&m, &f->out);
	f->status = 'I';
	f_ready(f);
	f->startup_done = true;
}


/* One frontend message, whole. */
static void f_message(struct fconn *f, const char *p, size_t total)
{
	char type = p[0];
	const char *b = p + 5, *end = p + total;
	if (trace)
		fprintf(stderr, "  server fd %d gets %c %.*s%s\n", f->fd, isprint((unsigned char)type) ? type : '?',
			(int)(total - 5 > 60 ? 60 : total - 5), b, f->skip ? " (skipped)" : "");
	if (f->copy_in) {
		switch (type) {
		case 'd':
			f->copy_rows++;
			return;
		case 'c': {
			char tag[32];
			snprintf(tag, sizeof(tag), "COPY %ld", f->copy_rows);
			f->copy_in = false;
			f_complete(f, tag);
			break;
		}
		case 'f':
			f->copy_in = false;
			f_error(f, "ERROR", "57014", "COPY from stdin failed");
			if (f->explicit_txn)
				f->status = 'E';
			if (!f->copy_simple)
				f->skip = true;
			break;
		case 'H':
		case 'S':
			return;
		default:
			f->copy_in = false;
			f_error(f, "ERROR", "08P01", "unexpected message type during COPY from stdin");
			if (f->explicit_txn)
				f->status = 'E';
			if (!f->copy_simple)
				f->skip = true;
			break;
		}
		if (f->copy_simple) {
			if (!f->explicit_txn)
				f->status = 'I';
			f_ready(f);
		}
		return;
	}
	if (f->skip && (type == 'Q' || type == 'F'))
		known3 = true;
	if (f->skip && type == 'P' && proxy_name(b))
		names_add(&f->skipped, b, "");
	if (f->skip && type != 'S' && type != 'X')
		return;
	switch (type) {
	case 'P': {
		long nl = f_cstr(b, end), ql = nl < 0 ? -1 : f_cstr(b + nl + 1, end);
		if (ql < 0) {
			f_ext_error(f, "08P01", "invalid Parse message");
			break;
		}
		if (f->status == 'E') {
			if (proxy_name(b)) /* failed: a Bind of it fails as the client's would */
				names_add(&f->skipped, b, "");
			f_ext_error(f, "25P02", "current transaction is aborted");
			break;
		}
		if (*b && names_find(&f->stmts, b)) {
			if (!hostile && (STRICT(3) || !known3) && proxy_name(b))
				finding("the proxy prepared %s on a server connection that has it", b);
			f_ext_error(f, "42P05", "prepared statement already exists");
			break;
		}
		names_add(&f->stmts, b, b + nl + 1);
		names_remove(&f->skipped, b);
		put_simple(&f->out, '1');
		break;
	}
	case 'B': {
		long pl = f_cstr(b, end), sl = pl < 0 ? -1 : f_cstr(b + pl + 1, end);
		if (sl < 0) {
			f_ext_error(f, "08P01", "invalid Bind message");
			break;
		}
		const char *sname = b + pl + 1;
		struct named *st = names_find(&f->stmts, sname);
		if (!st) {
			if (!hostile && (STRICT(3) || !known3) && proxy_name(sname) && !names_find(&f->skipped, sname))
				finding("the proxy bound %s on a server connection that lacks it", sname);
			char msg[160];
			snprintf(msg, sizeof(msg), "prepared statement \"%.100s\" does not exist", sname);
			f_ext_error(f, "26000", msg);
			break;
		}
		if (f->status == 'E') {
			f_ext_error(f, "25P02", "current transaction is aborted");
			break;
		}
		if (*b && names_find(&f->portals, b)) {
			f_ext_error(f, "42P03", "cursor already exists");
			break;
		}
		char *query = strdup(st->query);
		if (!query)
			abort();
		names_add(&f->portals, b, query);
		free(query);
		put_simple(&f->out, '2');
		break;
	}
	case 'D': {
		long nl = total > 6 ? f_cstr(b + 1, end) : -1;
		if (nl < 0 || (b[0] != 'S' && b[0] != 'P')) {
			f_ext_error(f, "08P01", "invalid Describe message");
			break;
		}
		struct named *e = names_find(b[0] == 'S' ? &f->stmts : &f->portals, b + 1);
		if (!e) {
			if (!hostile && (STRICT(3) || !known3) && b[0] == 'S' && proxy_name(b + 1) &&
			    !names_find(&f->skipped, b + 1))
				finding("the proxy described %s on a server connection that lacks it", b + 1);
			f_ext_error(f, b[0] == 'S' ? "26000" : "34000", "does not exist");
			break;
		}
		char w[32];
		first_word(e->query, w, sizeof(w));
		if (b[0] == 'S') {
			int nparams = 0;
			for (const char *c = e->query; *c; c++)
				nparams += *c == '$';
			struct mb m;
			mb_begin(&m, 't');
			mb_i16(&m, nparams);
			for (int i = 0; i < nparams; i++)
				mb_i32(&m, 25);
			mb_end(&m, &f->out);
		}
		if (!strcmp(w, "SELECT") || !strcmp(w, "VALUES"))
			f_rowdesc(f);
		else
			put_simple(&f->out, 'n');
		break;
	}
	case 'E': {
		long pl = f_cstr(b, end);
		if (pl < 0 || b + pl + 5 > end) {
			f_ext_error(f, "08P01", "invalid Execute message");
			break;
		}
		struct named *portal = names_find(&f->portals, b);
		if (!portal) {
			f_ext_error(f, "34000", "portal does not exist");
			break;
		}
		long maxrows = (int32_t)be32(b + pl + 1);
		char *q = strdup(portal->query);
		if (!q)
			abort();
		int r = f_exec(f, q, false, portal, maxrows);
		free(q);
		if (r == XR_ERR) {
			f->skip = true;
			if (f->explicit_txn)
				f->status = 'E';
		}
		break;
	}
	case 'C': {
		long nl = total > 6 ? f_cstr(b + 1, end) : -1;
		if (nl < 0 || (b[0] != 'S' && b[0] != 'P')) {
			f_ext_error(f, "08P01", "invalid Close message");
			break;
		}
		names_remove(b[0] == 'S' ? &f->stmts : &f->portals, b + 1);
		put_simple(&f->out, '3');
		break;
	}
	case 'S':
		f->skip = false;
		if (!f->explicit_txn) {
			f->status = 'I';
			names_clear(&f->portals);
		}
		f_ready(f);
		break;
	case 'H':
		break;
	case 'Q':
		f_query(f, b, total - 5);
		break;
	case 'F': {
		struct mb m;
		mb_begin(&m, 'V');
		mb_i32(&m, (uint32_t)-1);
		mb_end(&m, &f->out);
		if (!f->explicit_txn)
			f->status = 'I';
		f_ready(f);
		break;
	}
	case 'd':
	case 'c':
	case 'f':
		break; /* outside COPY: ignored, as PostgreSQL does */
	case 'X':
		f->closing = true;
		break;
	default:
		f_error(f, "FATAL", "08P01", "invalid frontend message type");
		f->closing = true;
		break;
	}
}

/* Hostile mode: after the trigger-th answer, the template's bytes. */
static void f_hostile(struct fconn *f, size_t unit_start)
{
	unsigned n = H.answers++;
	bool repeat = H.tmpl & 0x80;
	if (repeat ? n % (H.trigger + 1) != H.trigger : n != H.trigger)
		return;
	const uint8_t *pl = H.payload;
	size_t plen = H.plen;
	struct mb m;
	char hdr[5];
	switch ((H.tmpl & 0x3f) % 22) {
	case 0:
		hb_put(&f->out, pl, plen);
		break;
	case 1: /* length 0xFFFFFFFF */
		hb_put(&f->out, "Z\xff\xff\xff\xff", 5);
		break;
	case 2: /* ReadyForQuery of the wrong length */
		hb_put(&f->out, "Z\0\0\0\6II", 7);
		break;
	case 3: /* a huge ParameterStatus, never finished */
		hb_put(&f->out, "S\x3f\xff\xff\xff" "client_encoding\0UT", 23);
		break;
	case 4: { /* a complete ParameterStatus over PEEK_MAX */
		char *v = malloc(20000);
		if (!v)
			abort();
		memset(v, 'x', 19999);
		v[19999] = 0;
		f_param(f, plen && pl[0] & 1 ? "client_encoding" : "application_name", v);
		free(v);
		break;
	}
	case 5: /* truncated, then the connection closes */
		hb_put(&f->out, "D\0\0\x03\xe8" "0123456789", 15);
		f->closing = true;
		break;
	case 6:
		f_ready(f);
		break;
	case 7:
		f_error(f, "FATAL", "57P01", "terminating connection due to administrator command");
		f->closing = true;
		break;
	case 8: /* gone instead of answering */
		f->out.w = f->out.r + unit_start;
		f->closing = true;
		break;
	case 9:
		mb_begin(&m, 'N');
		mb_u8(&m, 'M');
		mb_str(&m, "notice");
		mb_u8(&m, 0);
		mb_end(&m, &f->out);
		mb_begin(&m, 'A');
		mb_i32(&m, 1);
		mb_str(&m, "chan");
		mb_str(&m, "");
		mb_end(&m, &f->out);
		break;
	case 10: /* a length under 4 */
		hdr[0] = plen ? (char)pl[0] : 'C';
		put_be32(hdr + 1, plen > 1 ? pl[1] % 4u : 0);
		hb_put(&f->out, hdr, 5);
		break;
	case 11: /* a huge DataRow, then whatever the payload says */
		hb_put(&f->out, "D\x3f\xff\xff\xf0", 5);
		hb_put(&f->out, pl, plen);
		break;
	case 12:
		put_simple(&f->out, '1');
		put_simple(&f->out, '2');
		put_simple(&f->out, '3');
		f_complete(f, "SELECT 1");
		break;
	case 13: /* BackendKeyData and an authentication request mid-stream */
		mb_begin(&m, 'K');
		mb_i32(&m, 1);
		mb_i32(&m, 2);
		mb_end(&m, &f->out);
		mb_begin(&m, 'R');
		mb_i32(&m, plen ? pl[0] % 13u : 3);
		mb_end(&m, &f->out);
		break;
	case 14: { /* an ErrorResponse over PEEK_MAX */
		char *v = malloc(20000);
		if (!v)
			abort();
		memset(v, 'e', 19999);
		v[19999] = 0;
		f_error(f, "ERROR", "XX000", v);
		free(v);
		break;
	}
	case 15:
		mb_begin(&m, 'T');
		mb_bytes(&m, pl, plen);
		mb_end(&m, &f->out);
		put_simple(&f->out, 'n');
		break;
	case 16: /* the payload instead of the answer */
		f->out.w = f->out.r + unit_start;
		hb_put(&f->out, pl, plen);
		break;
	case 17:
		hb_put(&f->out, "Z\0\0\0\5", 5);
		hb_put(&f->out, plen ? (const char *)pl : "X", 1);
		break;
	case 18: /* just over PostgreSQL's limit */
		hdr[0] = plen ? (char)pl[0] : 'D';
		put_be32(hdr + 1, 0x40000000u);
		hb_put(&f->out, hdr, 5);
		break;
	case 19: { /* the answer cut short, then the connection closes */
		size_t have = hb_len(&f->out) - unit_start;
		size_t cut = have ? (plen ? pl[0] : 1) % have : 0;
		f->out.w = f->out.r + unit_start + cut;
		f->closing = true;
		break;
	}
	case 20:
		f_error(f, "ERROR", "XX000", "unexpected");
		break;
	case 21:
		mb_begin(&m, plen ? (char)pl[0] : 'x');
		if (plen > 1)
			mb_bytes(&m, pl + 1, plen - 1);
		mb_end(&m, &f->out);
		break;
	}
	if (H.tmpl & 0x40)
		f->closing = true;
}

static void f_process(struct fconn *f)
{
	while (!f->closing) {
		size_t avail = hb_len(&f->in);
		const char *p = hb_data(&f->in);
		size_t unit_start = hb_len(&f->out);
		if (!f->startup_done) {
			if (avail < 4)
				return;
			uint32_t len = be32(p);
			if (len < 8 || len > 10000) {
				f->closing = true;
				return;
			}
			if (avail < len)
				return;
			f_startup(f, p, len);
			hb_consume(&f->in, len);
		} else {
			if (avail < 5)
				return;
			uint32_t len = be32(p + 1);
			if (len < 4) {
				f_error(f, "FATAL", "08P01", "invalid message length");
				f->closing = true;
				return;
			}
			if (avail - 1 < len)
				return;
			f_message(f, p, (size_t)len + 1);
			hb_consume(&f->in, (size_t)len + 1);
		}
		if (hostile && !f->cancel)
			f_hostile(f, unit_start);
	}
}

static void f_free(int i)
{
	struct fconn *f = fconns[i];
	close(f->fd);
	hb_free(&f->in);
	hb_free(&f->out);
	names_clear(&f->stmts);
	names_clear(&f->portals);
	names_clear(&f->skipped);
	free(f->stmts.v);
	free(f->portals.v);
	free(f->skipped.v);
	free(f);
	fconns[i] = fconns[--nfconn];
}

/* At rest: nothing more to say, nothing half received, nothing awaited. */
static bool f_at_rest(const struct fconn *f)
{
	return !hb_len(&f->in) && !hb_len(&f->out) && !f->skip && !f->copy_in;
}

static void fake_server_step(void)
{
	for (;;) {
		int fd = accept4(srv_lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			break;
		if (nfconn == MAX_FCONN)
			finding("more than %d server connections at once", MAX_FCONN);
		struct fconn *f = calloc(1, sizeof(*f));
		if (!f)
			abort();
		f->fd = fd;
		f->status = 'I';
		fconns[nfconn++] = f;
		moved++;
	}
	for (int i = 0; i < nfconn; i++) {
		struct fconn *f = fconns[i];
		bool eof = false;
		char buf[65536];
		for (int k = 0; k < 64 && !f->closing; k++) {
			ssize_t n = recv(f->fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (n > 0) {
				if (trace)
					fprintf(stderr, "  server fd %d reads %zd bytes\n", f->fd, n);
				hb_put(&f->in, buf, (size_t)n);
				moved += (uint64_t)n;
			} else {
				eof = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
				break;
			}
		}
		f_process(f);
		while (hb_len(&f->out)) {
			ssize_t n = send(f->fd, hb_data(&f->out), hb_len(&f->out), MSG_NOSIGNAL | MSG_DONTWAIT);
			if (n > 0) {
				hb_consume(&f->out, (size_t)n);
				moved += (uint64_t)n;
			} else {
				if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
					eof = true;
				break;
			}
		}
		if (eof || (f->closing && !hb_len(&f->out))) {
			f_free(i--);
			moved++;
		}
	}
}

/* ---------------------------------------------------------------- the client */

static struct {
	int fd;
	struct hb pend, got;
	bool eof, wclosed;
} C;

static void client_step(void)
{
	while (hb_len(&C.pend) && !C.wclosed) {
		ssize_t n = send(C.fd, hb_data(&C.pend), hb_len(&C.pend), MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			hb_consume(&C.pend, (size_t)n);
			moved += (uint64_t)n;
		} else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
			break;
		} else {
			C.wclosed = true; /* the proxy closed: the rest is not delivered */
			hb_consume(&C.pend, hb_len(&C.pend));
		}
	}
	while (!C.eof) {
		char buf[65536];
		ssize_t n = recv(C.fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n > 0) {
			hb_put(&C.got, buf, (size_t)n);
			moved += (uint64_t)n;
		} else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
			break;
		} else {
			C.eof = true;
			C.wclosed = true;
			hb_consume(&C.pend, hb_len(&C.pend));
			moved++;
		}
	}
}

/* ---------------------------------------------------------------- the loop */

static bool any_retry(void)
{
	for (const struct client *c = L.clients; c; c = c->next)
		if (c->retry)
			return true;
	return false;
}

/* One round of main.c's loop_run, with a timeout of 0, then both ends. */
static int round_once(void)
{
	struct epoll_event ev[64];
	int n = epoll_wait(L.ep, ev, 64, 0);
	if (n < 0) {
		if (errno == EINTR)
			return 1;
		finding("epoll_wait: %s", strerror(errno));
	}
	for (int i = 0; i < n; i++) {
		struct watch *w = ev[i].data.ptr;
		if (w->dead)
			continue;
		switch (w->kind) {
		case K_NOTIFIER:
			ts_notifier_dispatch(L.notifier);
			break;
		case K_CLIENT:
			client_event((struct client *)(void *)w, ev[i].events);
			break;
		case K_SERVER:
			server_event(w, ev[i].events);
			break;
		case K_CANCEL:
			cancel_event(w, ev[i].events);
			break;
		default:
			finding("an event for a watch of kind %d", (int)w->kind);
		}
	}
	for (struct client *c = L.clients, *next; c; c = next) { /* loop_retries */
		next = c->next;
		if (c->retry)
			client_retry(c);
	}
	int64_t now = ts_now_ns(); /* loop_tick: every round here */
	for (struct client *c = L.clients, *next; c; c = next) {
		next = c->next;
		client_tick(c, now);
	}
	pools_trim_all();
	pools_reap();
	if (atomic_load(&P.shutting_down) && !L.stopping) { /* loop_stop */
		L.stopping = true;
		for (struct client *c = L.clients, *next; c; c = next) {
			next = c->next;
			client_shutdown(c);
		}
	}
	while (L.zombies) {
		struct watch *z = L.zombies;
		L.zombies = z->zombie_next;
		conn_free(z);
	}
	fake_server_step();
	client_step();
	return n;
}

static bool fake_server_quiet(void)
{
	for (int i = 0; i < nfconn; i++)
		if (hb_len(&fconns[i]->out))
			return false;
	return true;
}

/* Rounds until nothing moves for QUIET_ROUNDS rounds. */
static void settle(const char *when)
{
	int quiet = 0, busy = 0;
	for (long rounds = 0;; rounds++) {
		if (rounds > ROUND_LIMIT)
			finding("%s: no quiet after %d rounds", when, ROUND_LIMIT);
		uint64_t before = moved;
		int n = round_once();
		if (moved != before) {
			quiet = busy = 0;
			continue;
		}
		if (n == 0 && !any_retry()) {
			busy = 0;
			if (++quiet >= QUIET_ROUNDS)
				return;
		} else if (++busy > BUSY_LIMIT) {
			finding("%s: a spin: %d rounds of events (or retries) with no byte moving", when,
				BUSY_LIMIT);
		}
	}
}

static const char *cstate_name(int st)
{
	static const char *const names[] = { "C_STARTUP", "C_IDLE", "C_WAIT_TURN", "C_WAIT_CONN",
					     "C_CONNECTING", "C_LINKED", "C_ADMIN" };
	return st >= 0 && st <= C_ADMIN ? names[st] : "?";
}

/* At quiescence, with a well-behaved server: nothing is stuck. */
static void check_quiet(const char *when)
{
	if (hostile)
		return;
	if (hb_len(&C.pend) && !C.wclosed)
		finding("%s: a stall: %zu bytes of client input the proxy does not read", when,
			hb_len(&C.pend));
	if (!fake_server_quiet())
		finding("%s: a stall: server output the proxy does not read", when);
	bool at_rest = true;
	for (int i = 0; i < nfconn; i++)
		at_rest = at_rest && f_at_rest(fconns[i]);
	for (const struct client *c = L.clients; c; c = c->next) {
		if (c->w.dead || c->closing)
			continue;
		if (c->state == C_WAIT_TURN || c->state == C_WAIT_CONN || c->state == C_CONNECTING)
			finding("%s: the only client is left in %s", when, cstate_name(c->state));
		if (c->state == C_LINKED && at_rest && (STRICT(3) || !known3) && !c->rl.left && !c->srv->rl.left && c->srv->rq_len)
			finding("%s: the proxy waits for %u answers the server will not send "
				"(front request kind %d flags %d)",
				when, c->srv->rq_len, c->srv->rq[c->srv->rq_head].kind,
				c->srv->rq[c->srv->rq_head].flags);
	}
}

/* ---------------------------------------------------------------- inputs */

struct spec {
	int kind;          /* 0 raw after startup, 1 generated, 2 raw with no startup */
	bool hostile;
	int max_prepared;
	uint8_t variant;
	uint16_t splits[7];
	int nsplits;
	unsigned trigger, tmpl;
	const uint8_t *payload;
	size_t plen;
	struct hb stream;
	size_t startup_len; /* the harness's startup packet at the front */
	bool valid;         /* known message types only: split invariance applies */
	bool q_in_batch;    /* a Query or FunctionCall in an extended batch (known finding 3) */
};

static void c_msg(struct hb *s, char type, const void *body, size_t n)
{
	char hdr[5];
	hdr[0] = type;
	put_be32(hdr + 1, (uint32_t)n + 4);
	hb_put(s, hdr, 5);
	hb_put(s, body, n);
}

static void c_query(struct hb *s, const char *q) { c_msg(s, 'Q', q, strlen(q) + 1); }

static void c_parse(struct hb *s, const char *name, const char *q, int ntypes)
{
	struct mb m;
	mb_begin(&m, 'P');
	mb_str(&m, name);
	mb_str(&m, q);
	mb_i16(&m, ntypes);
	for (int i = 0; i < ntypes; i++)
		mb_i32(&m, 25);
	mb_end(&m, s);
}

static void c_bind(struct hb *s, const char *portal, const char *stmt, int nparams)
{
	struct mb m;
	mb_begin(&m, 'B');
	mb_str(&m, portal);
	mb_str(&m, stmt);
	mb_i16(&m, 0);
	mb_i16(&m, nparams);
	for (int i = 0; i < nparams; i++) {
		mb_i32(&m, 1);
		mb_bytes(&m, "7", 1);
	}
	mb_i16(&m, 0);
	mb_end(&m, s);
}

static void c_two(struct hb *s, char type, char what, const char *name)
{
	struct mb m;
	mb_begin(&m, type);
	mb_u8(&m, (uint8_t)what);
	mb_str(&m, name);
	mb_end(&m, s);
}

static void c_execute(struct hb *s, const char *portal, uint32_t maxrows)
{
	struct mb m;
	mb_begin(&m, 'E');
	mb_str(&m, portal);
	mb_i32(&m, maxrows);
	mb_end(&m, s);
}

/* A query of about n bytes. */
static char *long_query(size_t n)
{
	char *q = malloc(n + 32);
	if (!q)
		abort();
	int at = snprintf(q, 32, "SELECT 2 /*");
	memset(q + at, 'x', n);
	strcpy(q + at + n, "*/");
	return q;
}

static const char *const gen_queries[] = {
	"SELECT 1", "SELECT 2", "SELECT $1", "SELECT 5", "BEGIN", "COMMIT", "SELECT error",
	"SET application_name TO 'gen'", "COPY t TO STDOUT", "VALUES 3", "UPDATE t SET a = 1",
	"select 0",
};
#define GEN_MAX (256 * 1024) /* a generated stream stops growing here */
#define NQ (sizeof(gen_queries) / sizeof(gen_queries[0]))

static void gen_stream(struct hb *s, const uint8_t *p, size_t n)
{
	size_t i = 0;
	char name[16], portal[16];
#define NEXT() (i < n ? p[i++] : 0)
	while (i < n && hb_len(s) < GEN_MAX) {
		uint8_t op = NEXT(), a = NEXT();
		snprintf(name, sizeof(name), "s%u", a % 4u);
		snprintf(portal, sizeof(portal), "p%u", (a >> 2) % 3u);
		const char *q = gen_queries[(a >> 4) % NQ];
		switch (op % 28) {
		case 0: {
			static const char *const qs[] = { "SELECT 1", "SELECT 3", "select 0", "BEGIN", "COMMIT",
							  "ROLLBACK", "SELECT error", "UPDATE t SET a = 1",
							  "SELECT 1; SELECT 2", "NOTIFY chan", "VALUES 1" };
			c_query(s, qs[a % (sizeof(qs) / sizeof(qs[0]))]);
			break;
		}
		case 1:
			c_parse(s, "", q, a & 1);
			break;
		case 2:
		case 3:
			c_parse(s, name, q, (a >> 3) & 1);
			break;
		case 4:
			c_bind(s, "", (a & 0x80) ? name : "", (a >> 6) & 1);
			break;
		case 5:
			c_bind(s, portal, (a & 0x80) ? name : "", 0);
			break;
		case 6:
			c_two(s, 'D', 'S', (a & 0x80) ? name : "");
			break;
		case 7:
			c_two(s, 'D', 'P', (a & 0x80) ? portal : "");
			break;
		case 8:
			c_execute(s, (a & 0x80) ? portal : "", (a & 0x40) ? a % 3u : 0);
			break;
		case 9:
			c_two(s, 'C', 'S', (a & 0x80) ? name : "");
			break;
		case 10:
			c_two(s, 'C', 'P', (a & 0x80) ? portal : "");
			break;
		case 11:
		case 12:
			put_simple(s, 'S');
			break;
		case 13:
			put_simple(s, 'H');
			break;
		case 14: {
			static const char *const qs[] = { "BEGIN", "COMMIT", "ROLLBACK", "END", "START TRANSACTION" };
			c_query(s, qs[a % 5]);
			break;
		}
		case 15: {
			char dq[64];
			static const char *const forms[] = { "DEALLOCATE %s", "DEALLOCATE ALL", "deallocate prepare %s",
							     "DEALLOCATE \"%s\"", "DEALLOCATE %s; SELECT 1",
							     "  DEALLOCATE   %s  ;  " };
			snprintf(dq, sizeof(dq), forms[(a >> 2) % 6], name);
			c_query(s, dq);
			break;
		}
		case 16: {
			static const char *const qs[] = {
				"SET client_encoding TO 'LATIN1'", "SET application_name TO 'x'",
				"SET TimeZone TO 'Europe/Paris'", "RESET ALL", "SET client_encoding = 'bogus'",
				"SET DateStyle TO 'ISO, DMY'", "SET standard_conforming_strings TO off",
				"SET application_name TO 'it''s'", "SET extra_float_digits TO 2",
			};
			c_query(s, qs[a % (sizeof(qs) / sizeof(qs[0]))]);
			break;
		}
		case 17: { /* COPY in */
			c_query(s, "COPY t FROM STDIN");
			for (int k = 0; k < a % 5; k++)
				c_msg(s, 'd', "1\t2\n", 4);
			if (a & 0x80)
				c_msg(s, 'f', "no\0", 3);
			else
				put_simple(s, 'c');
			break;
		}
		case 18:
			c_query(s, "COPY t TO STDOUT");
			break;
		case 19:
			c_query(s, (a & 1) ? "DISCARD ALL" : "discard all");
			break;
		case 20: { /* FunctionCall */
			struct mb m;
			mb_begin(&m, 'F');
			mb_i32(&m, 1598);
			mb_i16(&m, 0);
			mb_i16(&m, 0);
			mb_i16(&m, 0);
			mb_end(&m, s);
			break;
		}
		case 21:
			c_query(s, (a & 1) ? "" : "  ;  ");
			break;
		case 22: { /* long texts: over 64 bytes, over PEEK_MAX, over IN_BOUND */
			static const size_t lens[] = { 70, 300, 8200, 70000 };
			char *lq = long_query(lens[a % 4]);
			if (a & 4)
				c_parse(s, (a & 8) ? name : "", lq, 0);
			else
				c_query(s, lq);
			free(lq);
			break;
		}
		case 23: { /* a batch: Parse/Bind/Execute k times, then Sync */
			int k = 1 + a % 64 * 8;
			for (int j = 0; j < k; j++) {
				c_parse(s, "", "SELECT 1", 0);
				c_bind(s, "", "", 0);
				c_execute(s, "", 0);
			}
			put_simple(s, 'S');
			break;
		}
		case 24: /* a named statement's whole life */
			c_parse(s, name, q, 0);
			c_two(s, 'D', 'S', name);
			c_bind(s, "", name, 0);
			c_execute(s, "", 0);
			c_two(s, 'C', 'S', name);
			put_simple(s, 'S');
			break;
		case 25:
			c_query(s, (a & 1) ? "TERMINATE" : "SELECT 1");
			break;
		case 26: /* Terminate */
			if (a == 0xff)
				put_simple(s, 'X');
			else
				put_simple(s, 'S');
			break;
		case 27: /* COPY in, extended */
			c_parse(s, "", "COPY t FROM STDIN", 0);
			c_bind(s, "", "", 0);
			c_execute(s, "", 0);
			c_msg(s, 'd', "x\n", 2);
			put_simple(s, 'c');
			put_simple(s, 'S');
			break;
		}
	}
#undef NEXT
}

static void build_startup(struct hb *s, uint8_t v)
{
	struct mb m;
	mb_begin(&m, 0);
	mb_i32(&m, (v & 0x80) ? 196610u : 196608u);
	mb_str(&m, "user");
	mb_str(&m, "fuzz");
	mb_str(&m, "database");
	mb_str(&m, "fuzzdb");
	static const char *const apps[] = { NULL, "fuzzapp", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "" };
	static const char *const encs[] = { NULL, "UTF8", "latin1", "bogus" };
	if (apps[v & 3]) {
		mb_str(&m, "application_name");
		mb_str(&m, apps[v & 3]);
	}
	if (encs[(v >> 2) & 3]) {
		mb_str(&m, "client_encoding");
		mb_str(&m, encs[(v >> 2) & 3]);
	}
	if (v & 0x10) {
		mb_str(&m, "DateStyle");
		mb_str(&m, "ISO, DMY");
	}
	if (v & 0x20) {
		mb_str(&m, "TimeZone");
		mb_str(&m, "Europe/Paris");
	}
	if (v & 0x40) {
		mb_str(&m, "extra_float_digits");
		mb_str(&m, "3");
	}
	if (v & 0x80) {
		mb_str(&m, "_pq_.fuzz");
		mb_str(&m, "1");
	}
	mb_u8(&m, 0);
	mb_end(&m, s);
}

/* Known finding 4: the proxy decides whether a client's statement name is
 * taken when a Parse arrives, not in the server's order: a Close (or
 * DEALLOCATE) takes the name away only once answered, and a failed or
 * skipped Parse gives it back only once answered.  So a Parse of the name
 * pipelined after either fails with 42P05 when they arrive together, and
 * succeeds when the first was answered before; a Bind or Describe of a
 * name pipelined after its Close succeeds (the proxy still has it).
 * Unless PGPROXY_FUZZ_STRICT names it, a stream with a named Parse, Bind or
 * Describe after a Close or DEALLOCATE, or a named Parse after a Parse of
 * the same name, is not compared. */
static bool known4;

/* Known frontend message types, lengths in range: split invariance holds. */
static bool q_in_batch;

/* A departure the README lists: the unnamed statement does not outlive a
 * transaction, and whether it is still there after a Sync depends on
 * whether the connection was given back in between, which depends on how
 * the stream arrived (a transaction pipelined after another runs on the
 * same connection).  A stream with a Bind or Describe of the unnamed
 * statement and no unnamed Parse since the last Sync is not compared. */
static bool unnamed_late;

static bool stream_valid(const char *p, size_t n)
{
	size_t i = 0;
	bool ext_open = false;
	bool closed = false;
	bool unnamed_parsed = false; /* since the last Sync */
	char parsed[16][64];
	int nparsed = 0;
	while (i < n) {
		if (n - i < 5)
			return true; /* ends in a header: still fine */
		if (!strchr("PBDCESHQFdcf", p[i]) || !p[i])
			return false;
		uint32_t len = be32(p + i + 1);
		if (len < 4 || len > MAX_MSG)
			return false;
		if ((uint64_t)len + 1 > n - i)
			return true;
		if (p[i] == 'C' && len > 5 && p[i + 5] == 'S' && p[i + 6])
			closed = true;
		if (p[i] == 'Q' && len > 14 && memmem(p + i + 5, len - 4, "eallocate", 9))
			closed = true;
		if (p[i] == 'Q' && len > 14 && memmem(p + i + 5, len - 4, "EALLOCATE", 9))
			closed = true;
		if (strchr("PBDCE", p[i]))
			ext_open = true;
		else if (p[i] == 'S')
			ext_open = unnamed_parsed = false;
		if (p[i] == 'P' && len > 4 && !p[i + 5])
			unnamed_parsed = true;
		if (!unnamed_parsed && p[i] == 'B' && len > 5) { /* the statement after the portal */
			size_t pl = strnlen(p + i + 5, len - 4);
			if (pl + 1 < len - 4 && !p[i + 5 + pl + 1])
				unnamed_late = true;
		}
		if (!unnamed_parsed && p[i] == 'D' && len > 5 && p[i + 5] == 'S' && !p[i + 6])
			unnamed_late = true;
		else if ((p[i] == 'Q' || p[i] == 'F') && ext_open)
			q_in_batch = true;
		if (closed && p[i] == 'B' && len > 5) { /* a Bind of a named statement after a Close */
			size_t pl = strnlen(p + i + 5, len - 4);
			if (pl + 1 < len - 4 && p[i + 5 + pl + 1])
				known4 = true;
		}
		if (closed && p[i] == 'D' && len > 5 && p[i + 5] == 'S' && p[i + 6])
			known4 = true;
		if (p[i] == 'P' && len > 5 && p[i + 5]) {
			const char *nm = p + i + 5;
			size_t nl = strnlen(nm, len - 4);
			if (closed || nl >= sizeof(parsed[0]))
				known4 = true;
			for (int k = 0; k < nparsed && !known4; k++)
				if (!strncmp(parsed[k], nm, nl) && !parsed[k][nl])
					known4 = true;
			if (!known4 && nparsed < 16) {
				memcpy(parsed[nparsed], nm, nl);
				parsed[nparsed++][nl] = 0;
			}
			if (nparsed == 16)
				known4 = true;
		}
		i += (size_t)len + 1;
	}
	return true;
}

static int forced_mode = -1; /* PGPROXY_FUZZ_MODE: 0 client, 1 server, 2 sasl */

static bool parse_spec(struct spec *sp, const uint8_t *d, size_t n)
{
	static const int mp[8] = { 0, 0, 1, 2, 3, 4, 8, 100 };
	*sp = (struct spec){ 0 };
	if (n < 4)
		return false;
	sp->kind = d[0] & 3;
	if (sp->kind == 3)
		sp->kind = 1;
	sp->hostile = forced_mode >= 0 ? forced_mode == 1 : (d[0] & 4) != 0;
	/* sasl: the proxy checks the harness's user with SCRAM, so the stream
	 * after the startup packet is what SASL messages it sends (whose
	 * answers carry a random nonce: never compared) */
	sp->max_prepared = mp[d[1] & 7];
	sp->variant = d[2];
	sp->nsplits = d[3] & 7;
	size_t at = 4;
	if (sp->nsplits == 7)
		sp->nsplits = 6;
	for (int i = 0; i < sp->nsplits; i++, at += 2)
		sp->splits[i] = at + 1 < n ? (uint16_t)(d[at] << 8 | d[at + 1]) : 0;
	if (sp->hostile) {
		sp->trigger = at < n ? d[at] : 0;
		sp->tmpl = at + 1 < n ? d[at + 1] : 0;
		sp->plen = at + 2 < n ? d[at + 2] : 0;
		at += 3;
		if (at > n)
			at = n;
		if (sp->plen > n - at)
			sp->plen = n - at;
		sp->payload = d + at;
		at += sp->plen;
	}
	if (at > n)
		at = n;
	if (sp->kind != 2) {
		build_startup(&sp->stream, sp->variant);
		sp->startup_len = hb_len(&sp->stream);
	}
	if (sp->kind == 1)
		gen_stream(&sp->stream, d + at, n - at);
	else
		hb_put(&sp->stream, d + at, n - at);
	known4 = q_in_batch = unnamed_late = false;
	sp->valid = sp->kind != 2 && !sp->hostile && forced_mode != 2 &&
		    stream_valid(hb_data(&sp->stream) + sp->startup_len, hb_len(&sp->stream) - sp->startup_len);
	if ((known4 && !STRICT(4)) || unnamed_late)
		sp->valid = false;
	sp->q_in_batch = q_in_batch;
	return true;
}

/* BackendKeyData is the proxy's own random key: masked.  Known finding 6:
 * a Bind (or Describe) of a statement whose Parse the server skipped or
 * failed, pipelined behind it, reaches the server under the proxy's name,
 * so the client's 26000 says "pgproxy_N", not its own name, while it gets
 * the proxy's wording when the Parse was answered first.  Unless
 * PGPROXY_FUZZ_STRICT names it, an ErrorResponse is compared by its severity
 * and SQLSTATE only. */
static void normalize(struct hb *b)
{
	struct hb n = { 0 };
	char *p = hb_data(b);
	size_t len = hb_len(b), i = 0;
	while (len - i >= 5) {
		uint32_t ml = be32(p + i + 1);
		if (ml < 4 || (uint64_t)ml + 1 > len - i)
			break;
		if (p[i] == 'K' && ml == 12)
			memset(p + i + 5, 0, 8);
		if (p[i] == 'E' && !STRICT(6)) {
			struct mb m;
			mb_begin(&m, 'E');
			for (size_t k = i + 5; k < i + 1 + ml && p[k];) {
				size_t fl = strnlen(p + k + 1, i + 1 + ml - k - 1);
				if (p[k] == 'S' || p[k] == 'C') {
					mb_u8(&m, (uint8_t)p[k]);
					mb_bytes(&m, p + k + 1, fl);
					mb_u8(&m, 0);
				}
				k += fl + 2;
			}
			mb_u8(&m, 0);
			mb_end(&m, &n);
		} else {
			hb_put(&n, p + i, (size_t)ml + 1);
		}
		i += (size_t)ml + 1;
	}
	hb_put(&n, p + i, len - i);
	hb_free(b);
	*b = n;
}

static void describe(const char *what, const struct hb *b, size_t from)
{
	const char *p = hb_data(b);
	size_t n = hb_len(b), i = 0;
	fprintf(stderr, "%s (%zu bytes):", what, n);
	int shown = 0;
	while (n - i >= 5 && shown < 200) {
		uint32_t len = be32(p + i + 1);
		if (len < 4 || (uint64_t)len + 1 > n - i)
			break;
		if (i + len + 1 > from || shown > 0) {
			if (!shown)
				fprintf(stderr, " ... @%zu", i);
			fprintf(stderr, " %c", isprint((unsigned char)p[i]) ? p[i] : '?');
			if (p[i] == 'E' || p[i] == 'C')
				{ fputc('[', stderr); for (uint32_t k = 0; k < len - 4 && k < 120; k++) fputc(p[i + 5 + k] ? p[i + 5 + k] : '|', stderr); fputc(']', stderr); }
			shown++;
		}
		i += (size_t)len + 1;
	}
	fputc('\n', stderr);
}

struct result {
	struct hb got;
	bool proxy_closed;
	bool tainted; /* a known finding showed: not compared */
};

/* Known finding 2: pools_free destroys a pool's last idle connection,
 * which frees a pool no login succeeded on, then reads the pool again.
 * Unless PGPROXY_FUZZ_STRICT names it, the idle connections are destroyed
 * here first, looking the pool up again after each. */
static void free_idle_servers(void)
{
	if (STRICT(2))
		return;
	for (int i = 0; i < MAX_POOLS; i++) {
		struct pool *p;
		while ((p = P.pools[i])) {
			void *item = NULL;
			pthread_mutex_lock(&p->mu);
			for (struct upool *u = p->users; u && !item; u = u->next)
				ts_waitlist_try_take_oldest(u->conns, &item, NULL, NULL);
			pthread_mutex_unlock(&p->mu);
			if (!item)
				break;
			server_destroy(item);
		}
	}
}

/* One run: the stream in pieces cut at cuts[0..ncuts), the loop to
 * quiescence after each; then the client closed and everything freed. */
static long nruns, ncompared;

static void run(const struct spec *sp, const size_t *cuts, int ncuts, struct result *res)
{
	int sv[2];
	nruns++;
	hostile = sp->hostile;
	P.cfg.max_prepared = sp->max_prepared;
	H.trigger = sp->trigger;
	H.tmpl = sp->tmpl;
	H.payload = sp->payload;
	H.plen = sp->plen;
	H.answers = 0;
	known3 = sp->q_in_batch;
	known5 = false;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
		finding("socketpair: %s", strerror(errno));
	C.fd = sv[1];
	C.eof = C.wclosed = false;
	if (!client_new(&L, sv[0]))
		finding("client_new failed");
	const char *s = hb_data(&sp->stream);
	size_t len = hb_len(&sp->stream), at = 0;
	char when[64];
	/* Known finding 1 (see tests/fuzz/pgproxy-corpus/known/README): input
	 * pipelined after the startup packet is relayed before the login ends.
	 * Unless PGPROXY_FUZZ_STRICT names it, every run cuts its stream at the end
	 * of the harness's startup packet too, so the fuzzer looks past it. */
	size_t *all = malloc(sizeof(*all) * (size_t)(ncuts + 1));
	if (!all)
		abort();
	int nall = 0;
	bool need = !STRICT(1) && sp->startup_len && sp->startup_len < len;
	for (int i = 0; i < ncuts; i++) {
		if (need && cuts[i] >= sp->startup_len) {
			if (cuts[i] > sp->startup_len)
				all[nall++] = sp->startup_len;
			need = false;
		}
		all[nall++] = cuts[i];
	}
	if (need)
		all[nall++] = sp->startup_len;
	cuts = all;
	ncuts = nall;
	for (int i = 0; i <= ncuts; i++) {
		size_t end = i < ncuts ? cuts[i] : len;
		if (end < at || end > len)
			continue;
		hb_put(&C.pend, s + at, end - at);
		at = end;
		snprintf(when, sizeof(when), "piece %d of %d (to byte %zu)", i + 1, ncuts + 1, end);
		settle(when);
		check_quiet(when);
	}
	free(all);
	res->got = C.got;
	C.got = (struct hb){ 0 };
	res->proxy_closed = C.eof;
	res->tainted = (!STRICT(3) && known3) || (!STRICT(5) && known5);
	hb_free(&C.pend);

	/* the client goes, then the pool's idle connections */
	close(C.fd);
	C.fd = -1;
	settle("closing the client");
	if (L.nclients || L.ncancels || L.zombies)
		finding("the client (or a cancel) is not freed after it closed: %d clients, %d cancels",
			L.nclients, L.ncancels);
	free_idle_servers();
	pools_free();
	settle("freeing the pools");
	for (int i = 0; i < MAX_POOLS; i++)
		if (P.pools[i])
			finding("pool %s is left after its clients and connections went", P.pools[i]->db);
	if (nfconn)
		finding("%d server connections are left open after the pools were freed", nfconn);
	if (atomic_load(&P.shutting_down)) { /* SHUTDOWN on the admin console: start again */
		ts_set_free(P.set);
		P.set = ts_set_new();
		if (!P.set)
			abort();
		atomic_store(&P.shutting_down, false);
		L.stopping = false;
	}
}

static void check_passes(int shard, int64_t available, int64_t waiting, void *arg)
{
	(void)arg;
	if (available != P.cfg.pool_size || waiting)
		finding("shard %d: %lld passes free of %d, %lld waiting, with no client left", shard,
			(long long)available, P.cfg.pool_size, (long long)waiting);
}

static void compare(const struct spec *sp, struct result *whole, struct result *split, const char *how)
{
	if (!sp->valid || whole->proxy_closed || split->proxy_closed || whole->tainted || split->tainted)
		return;
	normalize(&whole->got);
	normalize(&split->got);
	ncompared++;
	size_t a = hb_len(&whole->got), b = hb_len(&split->got), i = 0;
	while (i < a && i < b && hb_data(&whole->got)[i] == hb_data(&split->got)[i])
		i++;
	if (i == a && i == b)
		return;
	fprintf(stderr, "pgproxy_fuzz: split invariance broken (%s): first difference at byte %zu\n",
		how, i);
	describe("whole", &whole->got, i);
	describe("split", &split->got, i);
	finding("the client's bytes depend on how its input was split (%s)", how);
}

static bool setup_done;

static void setup(void)
{
	if (setup_done)
		return;
	setup_done = true;
	signal(SIGPIPE, SIG_IGN);
	verbose = getenv("PGPROXY_FUZZ_VERBOSE") != NULL;
	/* every known finding is fixed: none is looked past unless asked */
	const char *st = getenv("PGPROXY_FUZZ_STRICT");
	if (!st || !strcmp(st, "all") || !*st)
		strict_mask = ~0u;
	else if (!strcmp(st, "none"))
		strict_mask = 0;
	else if (st)
		for (char *e; *st; st = *e ? e + 1 : e)
			strict_mask |= 1u << (strtoul(st, &e, 10) & 31);
	trace = getenv("PGPROXY_FUZZ_TRACE") != NULL;
	const char *m = getenv("PGPROXY_FUZZ_MODE");
	if (m && !strcmp(m, "client"))
		forced_mode = 0;
	else if (m && !strcmp(m, "server"))
		forced_mode = 1;
	else if (m && !strcmp(m, "sasl"))
		forced_mode = 2;
	P.cfg.auth_scram = forced_mode == 2;
	snprintf(P.cfg.admin_users, sizeof(P.cfg.admin_users), "fuzz"); /* the console, all of it */
	snprintf(sock_dir, sizeof(sock_dir), "/tmp/pgproxy_fuzz.XXXXXX");
	if (!mkdtemp(sock_dir))
		finding("mkdtemp: %s", strerror(errno));
	snprintf(sock_path, sizeof(sock_path), "%s/.s.PGSQL.5432", sock_dir);
	if (forced_mode == 2) { /* the harness's user, with a password */
		char users[300], err[600];
		snprintf(users, sizeof(users), "%s/users.txt", sock_dir);
		FILE *f = fopen(users, "w");
		if (!f || fputs("\"fuzz\" \"fuzz-pw\"\n", f) < 0 || fclose(f) != 0 || chmod(users, 0600) != 0 ||
		    authfile_open(users, err, sizeof(err)) != 0)
			finding("the auth file: %s", f ? err : strerror(errno));
		unlink(users);
	}
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	snprintf(un.sun_path, sizeof(un.sun_path), "%s", sock_path);
	srv_lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (srv_lfd < 0 || bind(srv_lfd, (struct sockaddr *)&un, sizeof(un)) != 0 ||
	    listen(srv_lfd, 64) != 0)
		finding("cannot listen on %s: %s", sock_path, strerror(errno));
	memcpy(&P.server_addr, &un, sizeof(un));
	P.server_addrlen = sizeof(un);
	snprintf(P.cfg.server_host, sizeof(P.cfg.server_host), "%s", sock_dir);
	P.cfg.server_port = 5432;
	P.cfg.pool_size = 2;
	P.cfg.default_band = 1;
	P.cfg.threads = 1;
	P.worker = -1; /* one process */
	P.max_band = 1;
	pthread_mutex_init(&P.pools_mu, NULL);
	P.set = ts_set_new();
	L.ep = epoll_create1(EPOLL_CLOEXEC);
	L.notifier = ts_notifier_new();
	if (!P.set || L.ep < 0 || !L.notifier)
		finding("setup: %s", strerror(errno));
	L.notify_w = (struct watch){ .kind = K_NOTIFIER, .fd = ts_notifier_fd(L.notifier), .loop = &L };
	watch_set(&L.notify_w, EPOLLIN);
	P.loops = &L;
}

static void cleanup(void)
{
	if (srv_lfd >= 0) {
		close(srv_lfd);
		unlink(sock_path);
		rmdir(sock_dir);
		srv_lfd = -1;
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	setup();
	atexit(cleanup);
	return 0;
}

/* cuts from the spec's fractions: sorted, inside the stream */
static int spec_cuts(const struct spec *sp, size_t *cuts)
{
	size_t len = hb_len(&sp->stream);
	int n = 0;
	for (int i = 0; i < sp->nsplits; i++) {
		size_t c = (size_t)(((uint64_t)sp->splits[i] * len) >> 16);
		if (c == 0 || c >= len)
			continue;
		int j = n++;
		while (j > 0 && cuts[j - 1] > c) {
			cuts[j] = cuts[j - 1];
			j--;
		}
		cuts[j] = c;
	}
	/* no split given: cut just after the startup packet and in the middle */
	if (!sp->nsplits && len > 1) {
		if (sp->startup_len && sp->startup_len < len)
			cuts[n++] = sp->startup_len;
		if (len / 2 > (n ? cuts[n - 1] : 0))
			cuts[n++] = len / 2;
	}
	return n;
}

static void free_spec(struct spec *sp) { hb_free(&sp->stream); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct spec sp;
	setup();
	if (!parse_spec(&sp, data, size))
		return 0;
	size_t cuts[8];
	int ncuts = spec_cuts(&sp, cuts);
	const char *dump = getenv("PGPROXY_FUZZ_DUMP"); /* the client stream, to a file */
	if (dump) {
		FILE *df = fopen(dump, "wb");
		if (df) {
			fwrite(hb_data(&sp.stream), 1, hb_len(&sp.stream), df);
			fclose(df);
		}
	}
	struct result whole = { 0 }, split = { 0 };
	run(&sp, NULL, 0, &whole);
	run(&sp, cuts, ncuts, &split);
	compare(&sp, &whole, &split, "the input's split points");
	ts_set_snapshot(P.set, check_passes, NULL);
	if (verbose)
		fprintf(stderr, "pgproxy_fuzz: kind %d%s, %zu stream bytes, %d cuts, %zu bytes back%s%s\n",
			sp.kind, sp.hostile ? " hostile" : "", hb_len(&sp.stream), ncuts,
			hb_len(&whole.got), whole.proxy_closed ? ", closed by the proxy" : "",
			sp.valid ? "" : ", not compared");
	if (verbose)
		describe("the client got", &whole.got, 0);
	hb_free(&whole.got);
	hb_free(&split.got);
	free_spec(&sp);
	return 0;
}

#ifndef TS_LIBFUZZER
/* Replay: every file named on the command line, whole and at its split
 * points; a stream of at most PGPROXY_SPLIT_MAX bytes (default 400) also
 * a byte at a time and in every split in two, each compared to whole. */
static void replay_splits(const uint8_t *data, size_t size, size_t max)
{
	struct spec sp;
	if (!parse_spec(&sp, data, size))
		return;
	size_t len = hb_len(&sp.stream);
	if (len > max || len < 2) {
		free_spec(&sp);
		return;
	}
	struct result whole = { 0 };
	run(&sp, NULL, 0, &whole);
	size_t *cuts = malloc(sizeof(*cuts) * len);
	if (!cuts)
		abort();
	for (size_t i = 0; i + 1 < len; i++)
		cuts[i] = i + 1;
	struct result r = { 0 };
	struct result w = { 0 };
	run(&sp, cuts, (int)(len - 1), &r);
	hb_put(&w.got, hb_data(&whole.got), hb_len(&whole.got));
	w.proxy_closed = whole.proxy_closed;
	w.tainted = whole.tainted;
	compare(&sp, &w, &r, "a byte at a time");
	hb_free(&w.got);
	hb_free(&r.got);
	for (size_t c = 1; c < len; c++) {
		char how[64];
		snprintf(how, sizeof(how), "in two at byte %zu", c);
		run(&sp, &c, 1, &r);
		hb_put(&w.got, hb_data(&whole.got), hb_len(&whole.got));
		w.proxy_closed = whole.proxy_closed;
		w.tainted = whole.tainted;
		compare(&sp, &w, &r, how);
		hb_free(&w.got);
		hb_free(&r.got);
	}
	ts_set_snapshot(P.set, check_passes, NULL);
	free(cuts);
	hb_free(&whole.got);
	free_spec(&sp);
}

int main(int argc, char **argv)
{
	int runs = 0, split_runs = 0;
	const char *e = getenv("PGPROXY_SPLIT_MAX");
	size_t max = e ? strtoul(e, NULL, 10) : 400;
	setup();
	atexit(cleanup);
	for (int i = 1; i < argc; i++) {
		FILE *f = fopen(argv[i], "rb");
		if (!f) {
			perror(argv[i]);
			return 1;
		}
		struct stat st;
		if (fstat(fileno(f), &st) != 0) {
			perror(argv[i]);
			return 1;
		}
		size_t cap = (size_t)st.st_size + 1;
		uint8_t *buf = malloc(cap);
		if (!buf)
			abort();
		size_t n = fread(buf, 1, cap, f);
		fclose(f);
		if (verbose)
			fprintf(stderr, "pgproxy_fuzz: %s\n", argv[i]);
		LLVMFuzzerTestOneInput(buf, n);
		runs++;
		struct spec sp;
		if (parse_spec(&sp, buf, n)) {
			if (hb_len(&sp.stream) <= max && hb_len(&sp.stream) >= 2)
				split_runs++;
			free_spec(&sp);
		}
		replay_splits(buf, n, max);
		free(buf);
	}
	printf("pgproxy_fuzz: replayed %d inputs (%d also a byte at a time and in every split in two): "
	       "%ld runs, %ld split-invariance comparisons, no finding\n",
	       runs, split_runs, nruns, ncompared);
	return runs ? 0 : 1;
}
#endif
