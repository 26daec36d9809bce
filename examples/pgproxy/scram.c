/* SPDX-License-Identifier: MIT */
/* pgproxy: SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL speaks it, in
 * both roles, and MD5 passwords towards the server.
 *
 * Every function here reads a message a network peer sent, so each one
 * parses strictly: an attribute out of place, a nonce that is not the one
 * agreed, base64 that does not decode to the expected length, or anything
 * longer than SCRAM_MSG_MAX is refused before any of it is used.  Nothing
 * here allocates; the exchanges keep what they must remember in fixed
 * arrays.  Secrets are compared in constant time (CRYPTO_memcmp) and wiped
 * when an exchange ends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "pgproxy.h"

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t b64_encode(const unsigned char *in, size_t n, char *out)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)in[i + 1] << 8;
		if (i + 2 < n)
			v |= in[i + 2];
		out[o++] = b64chars[v >> 18 & 63];
		out[o++] = b64chars[v >> 12 & 63];
		out[o++] = i + 1 < n ? b64chars[v >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? b64chars[v & 63] : '=';
	}
	out[o] = 0;
	return o;
}

static int b64_value(char ch)
{
	const char *p = ch ? strchr(b64chars, ch) : NULL;
	return p ? (int)(p - b64chars) : -1;
}

/* Strict: whole quads, padding only at the end, no other characters;
 * -1 if it is not base64 or would not fit in `cap` bytes. */
long b64_decode(const char *in, size_t n, unsigned char *out, size_t cap)
{
	if (n % 4)
		return -1;
	size_t o = 0;
	for (size_t i = 0; i < n; i += 4) {
		int v[4], pad = 0;
		for (int j = 0; j < 4; j++) {
			if (in[i + j] == '=' && i + 4 == n && j >= 2) {
				v[j] = 0;
				pad++;
			} else if (pad || (v[j] = b64_value(in[i + j])) < 0) {
				return -1;
			}
		}
		uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
		if (o + 3 - (size_t)pad > cap)
			return -1;
		out[o++] = (unsigned char)(w >> 16);
		if (pad < 2)
			out[o++] = (unsigned char)(w >> 8);
		if (pad < 1)
			out[o++] = (unsigned char)w;
	}
	return (long)o;
}

static void hmac(const unsigned char *key, size_t klen, const void *d, size_t n, unsigned char out[SCRAM_KEY_LEN])
{
	unsigned int len = SCRAM_KEY_LEN;
	HMAC(EVP_sha256(), key, (int)klen, d, n, out, &len);
}

bool scram_keys_from_password(const char *password, struct scram_keys *k, unsigned char client_key[SCRAM_KEY_LEN])
{
	unsigned char salted[SCRAM_KEY_LEN];
	/* PostgreSQL SASLpreps the password first; for ASCII, what pgproxy
	 * accepts in its auth file, that changes nothing (README). */
	if (!PKCS5_PBKDF2_HMAC(password, (int)strlen(password), k->salt, (int)k->saltlen, k->iter, EVP_sha256(),
			       SCRAM_KEY_LEN, salted))
		return false;
	hmac(salted, sizeof(salted), "Client Key", 10, client_key);
	SHA256(client_key, SCRAM_KEY_LEN, k->stored);
	hmac(salted, sizeof(salted), "Server Key", 10, k->server);
	OPENSSL_cleanse(salted, sizeof(salted));
	return true;
}

/* "SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>", as
 * PostgreSQL stores it in pg_authid and pgbouncer reads it. */
bool scram_parse_secret(const char *s, struct scram_keys *k)
{
	static const char tag[] = "SCRAM-SHA-256$";
	if (strncmp(s, tag, sizeof(tag) - 1))
		return false;
	s += sizeof(tag) - 1;
	char *end;
	long iter = strtol(s, &end, 10);
	if (end == s || *end != ':' || iter < 1 || iter > SCRAM_ITER_MAX || *s == '-' || *s == '+')
		return false;
	const char *salt = end + 1, *dollar = strchr(salt, '$');
	if (!dollar)
		return false;
	const char *stored = dollar + 1, *colon = strchr(stored, ':');
	if (!colon)
		return false;
	const char *server = colon + 1;
	long n = b64_decode(salt, (size_t)(dollar - salt), k->salt, sizeof(k->salt));
	if (n < 1)
		return false;
	k->saltlen = (size_t)n;
	k->iter = (int)iter;
	return b64_decode(stored, (size_t)(colon - stored), k->stored, SCRAM_KEY_LEN) == SCRAM_KEY_LEN &&
	       b64_decode(server, strlen(server), k->server, SCRAM_KEY_LEN) == SCRAM_KEY_LEN;
}

static bool make_nonce(char out[SCRAM_NONCE_LEN + 1])
{
	unsigned char raw[SCRAM_NONCE_RAW];
	if (RAND_bytes(raw, sizeof(raw)) != 1)
		return false;
	b64_encode(raw, sizeof(raw), out);
	return true;
}

/* The next "x=value" of a comma-separated message: the value's bounds in
 * *v and *vn, the rest after its comma in *p.  False if the attribute is
 * not `want` (0: any letter, told in *got). */
static bool attr(const char **p, const char *end, char want, char *got, const char **v, size_t *vn)
{
	const char *s = *p;
	if (end - s < 2 || s[1] != '=' || !(s[0] >= 'a' && s[0] <= 'z') || (want && s[0] != want))
		return false;
	if (got)
		*got = s[0];
	const char *comma = memchr(s + 2, ',', (size_t)(end - s - 2));
	*v = s + 2;
	*vn = (size_t)((comma ? comma : end) - *v);
	*p = comma ? comma + 1 : end;
	return true;
}

/* A nonce: printable ASCII except ','. */
static bool printable(const char *s, size_t n)
{
	if (!n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] < 0x21 || s[i] > 0x7e || s[i] == ',')
			return false;
	return true;
}

/* ------------------------------------------------------------ verifying a client */

void scram_verify_begin(struct scram_verify *v, const struct scram_keys *k, bool known,
			const unsigned char *cbind, size_t cbind_len)
{
	memset(v, 0, sizeof(*v));
	v->keys = *k;
	v->known = known;
	if (cbind && cbind_len <= sizeof(v->cbind)) {
		v->plus_offered = true;
		memcpy(v->cbind, cbind, cbind_len);
		v->cbind_len = cbind_len;
	}
}

/* The gs2 header's channel binding flag against what was offered and
 * chosen (RFC 5802 6, PostgreSQL's messages): NULL if it is consistent. */
static const char *binding_flag(const struct scram_verify *v, bool plus, const char **p, const char *end)
{
	const char *s = *p;
	if (*s == 'p') {
		static const char cb[] = "p=tls-server-end-point,";
		if (!plus)
			return "the client selected SCRAM-SHA-256 without channel binding, but the SCRAM message "
			       "includes channel binding data";
		if ((size_t)(end - s) < sizeof(cb) - 1 || memcmp(s, cb, sizeof(cb) - 1))
			return "unsupported SCRAM channel-binding type (pgproxy binds tls-server-end-point)";
		*p = s + sizeof(cb) - 2;
		return NULL;
	}
	if (*s != 'n' && *s != 'y')
		return "malformed SCRAM message";
	if (plus)
		return "the client selected SCRAM-SHA-256-PLUS, but the SCRAM message does not include "
		       "channel binding data";
	if (*s == 'y' && v->plus_offered) /* it could bind, and saw nothing to bind to: a downgrade */
		return "SCRAM channel binding negotiation error";
	*p = s + 1;
	return NULL;
}

int scram_verify_first(struct scram_verify *v, bool plus, const char *msg, size_t n, char *out, size_t cap,
		       const char **why)
{
	const char *p = msg, *end = msg + n, *val;
	size_t vn;
	*why = "malformed SCRAM message";
	if (v->step != 0 || n == 0 || n > SCRAM_MSG_MAX || memchr(msg, 0, n))
		return SCRAM_BAD;
	/* gs2-header: the channel binding flag, an empty authzid */
	if ((plus && !v->plus_offered) || (*why = binding_flag(v, plus, &p, end))) {
		if (!*why)
			*why = "the client selected SCRAM-SHA-256-PLUS, which pgproxy did not offer";
		return SCRAM_BAD;
	}
	*why = "malformed SCRAM message";
	if (p >= end || *p++ != ',')
		return SCRAM_BAD;
	if (p < end && *p == 'a') {
		*why = "client uses authorization identity, but it is not supported";
		return SCRAM_BAD;
	}
	if (p >= end || *p++ != ',')
		return SCRAM_BAD;
	size_t gs2len = (size_t)(p - msg);
	memcpy(v->gs2, msg, gs2len);
	v->gs2[gs2len] = 0;
	const char *bare = p;
	if (p < end && *p == 'm') {
		*why = "client requires an unsupported SCRAM extension";
		return SCRAM_BAD;
	}
	/* n=: PostgreSQL takes the user from the startup packet, not here */
	if (!attr(&p, end, 'n', NULL, &val, &vn) || !attr(&p, end, 'r', NULL, &val, &vn) ||
	    !printable(val, vn))
		return SCRAM_BAD;
	if (vn > SCRAM_NONCE_MAX) {
		*why = "the SCRAM client nonce is too long";
		return SCRAM_BAD;
	}
	char tail;
	const char *ev;
	size_t en;
	while (p < end) /* extensions: ignored, as by PostgreSQL */
		if (!attr(&p, end, 0, &tail, &ev, &en))
			return SCRAM_BAD;
	memcpy(v->nonce, val, vn);
	v->nonce[vn] = 0;
	char server_nonce[SCRAM_NONCE_LEN + 1];
	if (!make_nonce(server_nonce)) {
		*why = "could not generate a random nonce";
		return SCRAM_ERROR;
	}
	strcat(v->nonce, server_nonce);
	snprintf(v->bare, sizeof(v->bare), "%.*s", (int)(end - bare), bare);
	char salt[(SCRAM_SALT_MAX + 2) / 3 * 4 + 1];
	b64_encode(v->keys.salt, v->keys.saltlen, salt);
	int len = snprintf(v->server_first, sizeof(v->server_first), "r=%s,s=%s,i=%d", v->nonce, salt, v->keys.iter);
	if (len < 0 || (size_t)len >= sizeof(v->server_first) || (size_t)len >= cap)
		return SCRAM_BAD;
	memcpy(out, v->server_first, (size_t)len + 1);
	v->step = 1;
	return len;
}

int scram_verify_final(struct scram_verify *v, const char *msg, size_t n, char *out, size_t cap,
		       const char **why)
{
	const char *p = msg, *end = msg + n, *val;
	size_t vn;
	*why = "malformed SCRAM message";
	if (v->step != 1 || n == 0 || n > SCRAM_MSG_MAX || memchr(msg, 0, n))
		return SCRAM_BAD;
	v->step = 2;
	/* c=: the gs2 header the client sent first, and with "p=" the
	 * certificate hash of the TLS session it sees */
	unsigned char cb[sizeof(v->gs2) + sizeof(v->cbind)], want[sizeof(cb)];
	size_t gs2len = strlen(v->gs2), wantlen = gs2len;
	memcpy(want, v->gs2, gs2len);
	if (v->gs2[0] == 'p') {
		memcpy(want + gs2len, v->cbind, v->cbind_len);
		wantlen += v->cbind_len;
	}
	if (!attr(&p, end, 'c', NULL, &val, &vn))
		return SCRAM_BAD;
	long cbn = b64_decode(val, vn, cb, sizeof(cb));
	if (cbn < 0 || (size_t)cbn != wantlen || CRYPTO_memcmp(cb, want, wantlen)) {
		*why = "SCRAM channel binding check failed";
		return SCRAM_BAD;
	}
	if (!attr(&p, end, 'r', NULL, &val, &vn))
		return SCRAM_BAD;
	if (vn != strlen(v->nonce) || memcmp(val, v->nonce, vn)) {
		*why = "SCRAM nonce mismatch";
		return SCRAM_BAD;
	}
	/* extensions, then the proof, which must come last */
	const char *proof = NULL;
	size_t pn = 0;
	const char *without_proof_end = NULL;
	while (p < end) {
		const char *at = p;
		char a;
		if (!attr(&p, end, 0, &a, &val, &vn))
			return SCRAM_BAD;
		if (a == 'p') {
			if (p != end)
				return SCRAM_BAD;
			proof = val;
			pn = vn;
			without_proof_end = at - 1; /* before its comma */
		}
	}
	unsigned char client_proof[SCRAM_KEY_LEN];
	if (!proof || b64_decode(proof, pn, client_proof, sizeof(client_proof)) != SCRAM_KEY_LEN)
		return SCRAM_BAD;

	char auth[sizeof(v->bare) + sizeof(v->server_first) + SCRAM_MSG_MAX + 2];
	snprintf(auth, sizeof(auth), "%s,%s,%.*s", v->bare, v->server_first, (int)(without_proof_end - msg), msg);
	unsigned char sig[SCRAM_KEY_LEN], client_key[SCRAM_KEY_LEN], stored[SCRAM_KEY_LEN];
	hmac(v->keys.stored, SCRAM_KEY_LEN, auth, strlen(auth), sig);
	for (int i = 0; i < SCRAM_KEY_LEN; i++)
		client_key[i] = client_proof[i] ^ sig[i];
	SHA256(client_key, SCRAM_KEY_LEN, stored);
	bool match = CRYPTO_memcmp(stored, v->keys.stored, SCRAM_KEY_LEN) == 0;
	if (!v->known || !match) {
		OPENSSL_cleanse(client_key, sizeof(client_key));
		*why = NULL; /* the caller says "password authentication failed" */
		return SCRAM_FAIL;
	}
	memcpy(v->client_key, client_key, SCRAM_KEY_LEN);
	OPENSSL_cleanse(client_key, sizeof(client_key));
	unsigned char server_sig[SCRAM_KEY_LEN];
	hmac(v->keys.server, SCRAM_KEY_LEN, auth, strlen(auth), server_sig);
	char sig64[SCRAM_KEY_B64 + 1];
	b64_encode(server_sig, SCRAM_KEY_LEN, sig64);
	int len = snprintf(out, cap, "v=%s", sig64);
	return len < 0 || (size_t)len >= cap ? SCRAM_BAD : len;
}

void scram_verify_end(struct scram_verify *v) { OPENSSL_cleanse(v, sizeof(*v)); }

/* ------------------------------------------------------------ to the server */

int scram_client_first(struct scram_client *s, char *out, size_t cap)
{
	memset(s, 0, sizeof(*s));
	if (!make_nonce(s->nonce))
		return SCRAM_ERROR;
	snprintf(s->bare, sizeof(s->bare), "n=,r=%s", s->nonce);
	int len = snprintf(out, cap, "n,,%s", s->bare);
	if (len < 0 || (size_t)len >= cap)
		return SCRAM_ERROR;
	s->step = 1;
	return len;
}

int scram_client_final(struct scram_client *s, const char *msg, size_t n, struct scram_creds *cr,
		       char *out, size_t cap, const char **why)
{
	const char *p = msg, *end = msg + n, *nonce, *salt, *iters;
	size_t nn, sn, in;
	*why = "the server sent a malformed SCRAM message";
	if (n == 0 || n > SCRAM_MSG_MAX || memchr(msg, 0, n) || s->step != 1)
		return SCRAM_BAD;
	s->step = -1; /* one server-first only */
	if (p < end && *p == 'm')
		return SCRAM_BAD;
	if (!attr(&p, end, 'r', NULL, &nonce, &nn) || !attr(&p, end, 's', NULL, &salt, &sn) ||
	    !attr(&p, end, 'i', NULL, &iters, &in))
		return SCRAM_BAD;
	size_t mine = strlen(s->nonce);
	if (nn <= mine || nn > 2 * SCRAM_NONCE_MAX || memcmp(nonce, s->nonce, mine) || !printable(nonce, nn)) {
		*why = "the server's SCRAM nonce does not extend pgproxy's";
		return SCRAM_BAD;
	}
	struct scram_keys k = { 0 };
	long saltn = b64_decode(salt, sn, k.salt, sizeof(k.salt));
	char num[12];
	if (saltn < 1 || in == 0 || in >= sizeof(num))
		return SCRAM_BAD;
	memcpy(num, iters, in);
	num[in] = 0;
	char *e;
	long iter = strtol(num, &e, 10);
	if (*e || num[0] < '1' || num[0] > '9' || iter > SCRAM_ITER_MAX) {
		*why = "the server's SCRAM iteration count is out of range";
		return SCRAM_BAD;
	}
	k.saltlen = (size_t)saltn;
	k.iter = (int)iter;
	unsigned char client_key[SCRAM_KEY_LEN];
	/* keys (a secret and the ClientKey a client proved, or keys derived
	 * before) serve only the salt and iterations they were made with */
	bool keys_fit = cr->have_keys && k.iter == cr->keys.iter && k.saltlen == cr->keys.saltlen &&
			!memcmp(k.salt, cr->keys.salt, k.saltlen);
	if (keys_fit) {
		memcpy(client_key, cr->client_key, SCRAM_KEY_LEN);
		memcpy(k.stored, cr->keys.stored, SCRAM_KEY_LEN);
		memcpy(k.server, cr->keys.server, SCRAM_KEY_LEN);
	} else if (cr->password) {
		if (!scram_keys_from_password(cr->password, &k, client_key)) {
			*why = "SCRAM key derivation failed";
			return SCRAM_ERROR;
		}
		cr->keys = k; /* for the caller to keep: the next connection skips PBKDF2 */
		memcpy(cr->client_key, client_key, SCRAM_KEY_LEN);
		cr->derived = true;
	} else {
		*why = "the server's SCRAM secret for this user differs from the auth file's (salt or "
		       "iterations): put the same secret in the auth file, or the password itself";
		return SCRAM_MISMATCH;
	}
	char without_proof[SCRAM_MSG_MAX + 64];
	snprintf(without_proof, sizeof(without_proof), "c=biws,r=%.*s", (int)nn, nonce);
	char auth[sizeof(s->bare) + SCRAM_MSG_MAX + sizeof(without_proof) + 2];
	snprintf(auth, sizeof(auth), "%s,%.*s,%s", s->bare, (int)n, msg, without_proof);
	unsigned char sig[SCRAM_KEY_LEN], proof[SCRAM_KEY_LEN];
	hmac(k.stored, SCRAM_KEY_LEN, auth, strlen(auth), sig);
	for (int i = 0; i < SCRAM_KEY_LEN; i++)
		proof[i] = client_key[i] ^ sig[i];
	hmac(k.server, SCRAM_KEY_LEN, auth, strlen(auth), s->server_sig);
	OPENSSL_cleanse(client_key, sizeof(client_key));
	OPENSSL_cleanse(&k, sizeof(k));
	char proof64[SCRAM_KEY_B64 + 1];
	b64_encode(proof, SCRAM_KEY_LEN, proof64);
	int len = snprintf(out, cap, "%s,p=%s", without_proof, proof64);
	if (len < 0 || (size_t)len >= cap)
		return SCRAM_ERROR;
	s->step = 2;
	return len;
}

int scram_client_check(struct scram_client *s, const char *msg, size_t n, const char **why)
{
	const char *p = msg, *end = msg + n, *val;
	size_t vn;
	char a;
	*why = "the server sent a malformed SCRAM message";
	if (s->step != 2 || n == 0 || n > SCRAM_MSG_MAX || !attr(&p, end, 0, &a, &val, &vn))
		return SCRAM_BAD;
	s->step = -1;
	unsigned char sig[SCRAM_KEY_LEN];
	if (a == 'e') {
		*why = "the server refused pgproxy's SCRAM proof";
		return SCRAM_FAIL;
	}
	if (a != 'v' || b64_decode(val, vn, sig, sizeof(sig)) != SCRAM_KEY_LEN)
		return SCRAM_BAD;
	if (CRYPTO_memcmp(sig, s->server_sig, SCRAM_KEY_LEN)) {
		*why = "the server's SCRAM signature is wrong: it does not know this user's secret";
		return SCRAM_FAIL;
	}
	OPENSSL_cleanse(s, sizeof(*s));
	s->step = 3; /* done: a later SASL message is out of order */
	return 0;
}

/* ------------------------------------------------------------ MD5 */

static void md5_hex(const void *a, size_t an, const void *b, size_t bn, char out[33])
{
	unsigned char d[16];
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned int len = 0;
	bool ok = ctx && EVP_DigestInit_ex(ctx, EVP_md5(), NULL) && EVP_DigestUpdate(ctx, a, an) &&
		  EVP_DigestUpdate(ctx, b, bn) && EVP_DigestFinal_ex(ctx, d, &len);
	EVP_MD_CTX_free(ctx);
	if (!ok)
		memset(d, 0, sizeof(d)); /* a proof no server accepts */
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

void md5_response(const char *password, const char *md5_secret, const char *user, const unsigned char salt[4],
		  char out[36])
{
	char inner[33];
	if (md5_secret) /* "md5" + md5(password || user), as pg_authid keeps it */
		snprintf(inner, sizeof(inner), "%s", md5_secret + 3);
	else
		md5_hex(password, strlen(password), user, strlen(user), inner);
	memcpy(out, "md5", 3);
	md5_hex(inner, 32, salt, 4, out + 3);
	OPENSSL_cleanse(inner, sizeof(inner));
}
