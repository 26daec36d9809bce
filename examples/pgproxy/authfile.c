/* SPDX-License-Identifier: MIT */
/* pgproxy: the auth file (--auth-file), in pgbouncer's userlist format.
 *
 *   "user" "password"
 *   "user" "SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>"
 *   "user" "md5<32 hex digits>"        (md5(password || user), server side only)
 *
 * A '"' inside a quoted field is written twice; lines that are empty or
 * begin with ';' or '#' are comments.  Anything else is an error that
 * names its line: a file with one is refused whole (at start: pgproxy
 * does not start; on SIGHUP: the old table stays, with a log line).
 *
 * The table is replaced, never edited: a reload parses the new file
 * completely, then swaps it in under `mu`.  Lookups copy an entry out
 * under `mu`, so no login ever sees half of two files.  Three things are
 * learnt after loading and written back under `mu`: the SCRAM keys made
 * for a plain password at its first login, the ClientKey a client proved
 * against a SCRAM secret (which is what lets pgproxy answer the server's
 * SCRAM for that user, as pgbouncer does), and the keys derived from a
 * password for the server's salt (so only a user's first server
 * connection pays PBKDF2's 4096 rounds).  All carry over a reload for an
 * entry whose secret did not change. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "pgproxy.h"

#define AUTH_FILE_MAX (16 << 20)

struct entry {
	char user[NAME_LEN];
	struct auth_entry a;
	bool keys_made; /* SECRET_PLAIN: a.keys hold keys for its password */
};

struct table {
	struct entry *e; /* sorted by user */
	size_t n;
	uint64_t gen;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct table cur;
static char path[4096];
static unsigned char mock_secret[32]; /* an unknown user's salt comes from it */

static void table_free(struct table *t)
{
	if (t->e)
		OPENSSL_cleanse(t->e, t->n * sizeof(*t->e));
	free(t->e);
	*t = (struct table){ 0 };
}

static int by_user(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->user, ((const struct entry *)b)->user);
}

/* A quoted field at *p: its text (with "" as ") into out. */
static bool quoted(const char **p, char *out, size_t cap)
{
	const char *s = *p;
	size_t n = 0;
	if (*s++ != '"')
		return false;
	for (;;) {
		if (*s == '"' && s[1] == '"') {
			s++;
		} else if (*s == '"') {
			break;
		} else if (!*s || *s == '\n' || (unsigned char)*s < 0x20) {
			return false;
		}
		if (n + 1 >= cap)
			return false;
		out[n++] = *s++;
	}
	out[n] = 0;
	*p = s + 1;
	return true;
}

static bool md5_secret(const char *s)
{
	if (strncmp(s, "md5", 3) || strlen(s) != 35)
		return false;
	for (int i = 3; i < 35; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

static bool parse_line(const char *line, struct entry *e, const char **why)
{
	const char *p = line;
	memset(e, 0, sizeof(*e));
	*why = "expected \"user\" \"secret\"";
	if (!quoted(&p, e->user, sizeof(e->user))) {
		if (*p == '"')
			*why = "the user name is unterminated or longer than 63 bytes";
		return false;
	}
	if (!e->user[0]) {
		*why = "an empty user name";
		return false;
	}
	if (*p != ' ' && *p != '\t')
		return false;
	while (*p == ' ' || *p == '\t')
		p++;
	if (!quoted(&p, e->a.secret, sizeof(e->a.secret))) {
		*why = "the secret is missing, unterminated, or longer than 1023 bytes";
		return false;
	}
	while (*p == ' ' || *p == '\t' || *p == '\r')
		p++;
	if (*p) {
		*why = "something after the secret";
		return false;
	}
	const char *s = e->a.secret;
	if (!s[0]) {
		*why = "an empty password (it would never authenticate)";
		return false;
	}
	if (!strncmp(s, "SCRAM-SHA-256$", 14)) {
		e->a.kind = SECRET_SCRAM;
		if (!scram_parse_secret(s, &e->a.keys)) {
			*why = "a SCRAM-SHA-256 secret that does not parse (SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>, base64)";
			return false;
		}
	} else if (md5_secret(s)) {
		e->a.kind = SECRET_MD5;
	} else {
		e->a.kind = SECRET_PLAIN;
		for (const char *c = s; *c; c++)
			if ((unsigned char)*c >= 0x80) {
				/* SASLprep would have to normalise it for SCRAM */
				*why = "a password with non-ASCII characters (give its SCRAM-SHA-256 secret instead)";
				return false;
			}
	}
	return true;
}

/* Parses the file into *t: 0, or -1 with the reason in err. */
static int load(const char *file, struct table *t, char *err, size_t errlen)
{
	*t = (struct table){ 0 };
	FILE *f = fopen(file, "re");
	if (!f) {
		snprintf(err, errlen, "cannot open %s: %s", file, strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s is not a regular file", file);
		fclose(f);
		return -1;
	}
	if (st.st_mode & (S_IWGRP | S_IRWXO)) {
		/* as libpq refuses a .pgpass others may read */
		snprintf(err, errlen, "%s has mode %04o: other users may read or change it (chmod 600 or 640)",
			 file, (unsigned)(st.st_mode & 07777));
		fclose(f);
		return -1;
	}
	if (st.st_size > AUTH_FILE_MAX) {
		snprintf(err, errlen, "%s is larger than %d bytes", file, AUTH_FILE_MAX);
		fclose(f);
		return -1;
	}
	char line[NAME_LEN * 2 + AUTH_SECRET_MAX * 2 + 16];
	size_t cap = 0;
	int lineno = 0, rc = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		size_t len = strlen(line);
		if (len && line[len - 1] == '\n') {
			line[--len] = 0;
		} else if (!feof(f)) {
			snprintf(err, errlen, "%s line %d: longer than %zu bytes", file, lineno, sizeof(line) - 2);
			rc = -1;
			break;
		}
		const char *p = line;
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p || *p == ';' || *p == '#' || !strcmp(p, "\r"))
			continue;
		if (t->n == cap) {
			size_t ncap = cap ? 2 * cap : 16;
			struct entry *ne = realloc(t->e, ncap * sizeof(*ne));
			if (!ne) {
				snprintf(err, errlen, "%s: out of memory", file);
				rc = -1;
				break;
			}
			t->e = ne;
			cap = ncap;
		}
		const char *why;
		if (!parse_line(p, &t->e[t->n], &why)) {
			snprintf(err, errlen, "%s line %d: %s", file, lineno, why);
			rc = -1;
			break;
		}
		t->n++;
	}
	if (!rc && ferror(f)) {
		snprintf(err, errlen, "cannot read %s", file);
		rc = -1;
	}
	OPENSSL_cleanse(line, sizeof(line));
	fclose(f);
	if (!rc && t->n) {
		qsort(t->e, t->n, sizeof(*t->e), by_user);
		for (size_t i = 1; i < t->n; i++)
			if (!strcmp(t->e[i - 1].user, t->e[i].user)) {
				snprintf(err, errlen, "%s: user \"%s\" appears twice", file, t->e[i].user);
				rc = -1;
				break;
			}
	}
	if (rc)
		table_free(t);
	return rc;
}

/* A name's salt for keys pgproxy makes: from a secret made at start (and
 * inherited by --processes' workers), so stable for the process's life. */
static void salt_for(const char *user, unsigned char salt[16])
{
	unsigned char d[SCRAM_KEY_LEN];
	unsigned int len = sizeof(d);
	HMAC(EVP_sha256(), mock_secret, sizeof(mock_secret), (const unsigned char *)user, strlen(user), d, &len);
	memcpy(salt, d, 16);
}

static struct entry *find(const struct table *t, const char *user)
{
	struct entry key;
	snprintf(key.user, sizeof(key.user), "%s", user);
	return t->n ? bsearch(&key, t->e, t->n, sizeof(*t->e), by_user) : NULL;
}

int authfile_open(const char *file, char *err, size_t errlen)
{
	if (RAND_bytes(mock_secret, sizeof(mock_secret)) != 1) {
		snprintf(err, errlen, "no random bytes for SCRAM");
		return -1;
	}
	snprintf(path, sizeof(path), "%s", file);
	return load(path, &cur, err, errlen);
}

size_t authfile_users(void)
{
	pthread_mutex_lock(&mu);
	size_t n = cur.n;
	pthread_mutex_unlock(&mu);
	return n;
}

void authfile_reload(void)
{
	if (!path[0])
		return;
	char err[512];
	struct table t;
	if (load(path, &t, err, sizeof(err)) != 0) {
		fprintf(stderr, "pgproxy: SIGHUP: the auth file is not reloaded (the old one stays): %s\n", err);
		return;
	}
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < t.n; i++) { /* what was learnt of an unchanged secret */
		struct entry *old = find(&cur, t.e[i].user);
		if (old && old->a.kind == t.e[i].a.kind && !strcmp(old->a.secret, t.e[i].a.secret)) {
			t.e[i].a = old->a;
			t.e[i].keys_made = old->keys_made;
		}
	}
	t.gen = cur.gen + 1;
	struct table gone = cur;
	cur = t;
	pthread_mutex_unlock(&mu);
	table_free(&gone);
	fprintf(stderr, "pgproxy: SIGHUP: the auth file is reloaded: %zu users\n", t.n);
}

bool authfile_lookup(const char *user, struct auth_entry *out, bool verify_keys)
{
	pthread_mutex_lock(&mu);
	const struct entry *e = find(&cur, user);
	if (e)
		*out = e->a;
	bool need_keys = verify_keys && e && e->a.kind == SECRET_PLAIN && !e->keys_made;
	uint64_t gen = cur.gen;
	pthread_mutex_unlock(&mu);
	if (!e)
		return false;
	if (need_keys) {
		/* a plain password's SCRAM keys, made once (outside the lock:
		 * 4096 rounds of PBKDF2) and kept if the table is unchanged; the
		 * salt is the one the name would have if unknown, so it is the
		 * same in every thread and worker and tells a probe nothing */
		unsigned char ck[SCRAM_KEY_LEN];
		out->keys.iter = SCRAM_ITER_DEFAULT;
		out->keys.saltlen = 16;
		salt_for(user, out->keys.salt);
		bool made = scram_keys_from_password(out->secret, &out->keys, ck);
		OPENSSL_cleanse(ck, sizeof(ck));
		if (!made) {
			auth_entry_wipe(out);
			return false;
		}
		pthread_mutex_lock(&mu);
		struct entry *w = cur.gen == gen ? find(&cur, user) : NULL;
		if (w && !w->keys_made) {
			w->a.keys = out->keys;
			w->keys_made = true;
		}
		pthread_mutex_unlock(&mu);
	}
	return true;
}

void authfile_mock(const char *user, struct scram_keys *k)
{
	/* the same salt for the same unknown name every time, so a probe
	 * cannot tell it from a real user's */
	memset(k, 0, sizeof(*k));
	k->iter = SCRAM_ITER_DEFAULT;
	k->saltlen = 16;
	salt_for(user, k->salt);
	if (RAND_bytes(k->stored, SCRAM_KEY_LEN) != 1) /* matches no proof a client can make */
		memset(k->stored, 0xff, SCRAM_KEY_LEN);
}

void authfile_client_key(const char *user, const struct scram_keys *k, const unsigned char ck[SCRAM_KEY_LEN])
{
	pthread_mutex_lock(&mu);
	struct entry *e = find(&cur, user);
	if (e && e->a.kind == SECRET_SCRAM && !CRYPTO_memcmp(e->a.keys.stored, k->stored, SCRAM_KEY_LEN)) {
		memcpy(e->a.client_key, ck, SCRAM_KEY_LEN);
		e->a.have_client_key = true;
	}
	pthread_mutex_unlock(&mu);
}

void authfile_server_keys(const char *user, const char *password, const struct scram_keys *k,
			  const unsigned char ck[SCRAM_KEY_LEN])
{
	pthread_mutex_lock(&mu);
	struct entry *e = find(&cur, user);
	if (e && e->a.kind == SECRET_PLAIN && !strcmp(e->a.secret, password)) {
		e->a.server_keys = *k;
		memcpy(e->a.server_client_key, ck, SCRAM_KEY_LEN);
		e->a.have_server_keys = true;
	}
	pthread_mutex_unlock(&mu);
}

void auth_entry_wipe(struct auth_entry *e) { OPENSSL_cleanse(e, sizeof(*e)); }

void authfile_close(void)
{
	pthread_mutex_lock(&mu);
	table_free(&cur);
	pthread_mutex_unlock(&mu);
}

bool user_listed(const char *list, const char *user)
{
	size_t n = strlen(user);
	for (const char *p = list; *p;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		if (len == n && !memcmp(p, user, n))
			return true;
		if (!comma)
			break;
		p = comma + 1;
	}
	return false;
}
