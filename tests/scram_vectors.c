/* SPDX-License-Identifier: MIT */
/* pgproxy's SCRAM-SHA-256 (examples/pgproxy/scram.c): both roles against
 * the worked example of RFC 7677 section 3, a round trip between them,
 * channel binding (SCRAM-SHA-256-PLUS) and its refusals, a secret in
 * PostgreSQL's format, and every malformed peer message refused
 * without a proof being computed from it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "pgproxy.h"

static int failures;
#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "scram_vectors:%d: FAIL: %s\n", __LINE__, #cond); \
			failures++;                                                  \
		}                                                                    \
	} while (0)

/* RFC 7677, section 3: user "user", password "pencil" */
static const char rfc_client_nonce[] = "rOprNGfwEbeRWgbNEkqO";
static const char rfc_bare[] = "n=user,r=rOprNGfwEbeRWgbNEkqO";
static const char rfc_server_first[] =
	"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
static const char rfc_client_final[] = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
				       "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
static const char rfc_server_final[] = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

static struct scram_keys rfc_keys(void)
{
	struct scram_keys k = { .iter = 4096 };
	unsigned char ck[SCRAM_KEY_LEN];
	long n = b64_decode("W22ZaJ0SNY7soEsUEjb6gQ==", 24, k.salt, sizeof(k.salt));
	CHECK(n == 16);
	k.saltlen = (size_t)n;
	CHECK(scram_keys_from_password("pencil", &k, ck));
	return k;
}

/* pgproxy's client past its first message, with the RFC's nonce */
static struct scram_client rfc_client(void)
{
	struct scram_client s = { .step = 1 };
	strcpy(s.nonce, rfc_client_nonce);
	strcpy(s.bare, rfc_bare);
	return s;
}

/* pgproxy as the client of the RFC's server (its nonce fixed) */
static void client_role(void)
{
	struct scram_client s = rfc_client();
	struct scram_creds cr = { .password = "pencil" };
	char out[512];
	const char *why;
	int n = scram_client_final(&s, rfc_server_first, strlen(rfc_server_first), &cr, out, sizeof(out), &why);
	CHECK(n == (int)strlen(rfc_client_final) && !strcmp(out, rfc_client_final));
	CHECK(scram_client_check(&s, rfc_server_final, strlen(rfc_server_final), &why) == 0);

	/* the same from the secret and the ClientKey a client proved */
	struct scram_client t = rfc_client();
	struct scram_creds kc = { .have_keys = true, .keys = rfc_keys() };
	CHECK(scram_keys_from_password("pencil", &kc.keys, kc.client_key));
	n = scram_client_final(&t, rfc_server_first, strlen(rfc_server_first), &kc, out, sizeof(out), &why);
	CHECK(n > 0 && !strcmp(out, rfc_client_final));
	/* ...but not for a server whose salt is another */
	struct scram_client u = rfc_client();
	static const char other_salt[] =
		"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=X22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
	CHECK(scram_client_final(&u, other_salt, strlen(other_salt), &kc, out, sizeof(out), &why) ==
	      SCRAM_MISMATCH);
	/* with the password too, keys that do not fit are derived again
	 * (and handed back); keys that fit are used as they are */
	struct scram_client u2 = rfc_client();
	struct scram_creds both = kc;
	both.password = "pencil";
	CHECK(scram_client_final(&u2, other_salt, strlen(other_salt), &both, out, sizeof(out), &why) > 0);
	CHECK(both.derived && both.keys.salt[0] != kc.keys.salt[0]);
	struct scram_client u3 = rfc_client();
	struct scram_creds fit = kc;
	fit.password = "not the password";
	CHECK(scram_client_final(&u3, rfc_server_first, strlen(rfc_server_first), &fit, out, sizeof(out), &why) > 0);
	CHECK(!fit.derived && !strcmp(out, rfc_client_final));

	/* a forged server signature, a server error, messages out of order */
	struct scram_client v = rfc_client();
	CHECK(scram_client_final(&v, rfc_server_first, strlen(rfc_server_first), &cr, out, sizeof(out), &why) > 0);
	static const char forged[] = "v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";
	CHECK(scram_client_check(&v, forged, strlen(forged), &why) == SCRAM_FAIL);
	CHECK(scram_client_check(&v, rfc_server_final, strlen(rfc_server_final), &why) == SCRAM_BAD);
	struct scram_client w = { .step = 0 };
	CHECK(scram_client_final(&w, rfc_server_first, strlen(rfc_server_first), &cr, out, sizeof(out), &why) ==
	      SCRAM_BAD);
	static const char *bad_first[] = {
		"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",      /* nonce not extended */
		"r=XOprNGfwEbeRWgbNEkqOabc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",   /* not ours */
		"r=rOprNGfwEbeRWgbNEkqOabc,s=W22ZaJ0SNY7soEsUEjb6gQ=,i=4096",    /* bad base64 */
		"r=rOprNGfwEbeRWgbNEkqOabc,s=,i=4096",                           /* no salt */
		"r=rOprNGfwEbeRWgbNEkqOabc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=0",      /* iterations */
		"r=rOprNGfwEbeRWgbNEkqOabc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=-1",
		"r=rOprNGfwEbeRWgbNEkqOabc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=99999999999",
		"r=rOprNGfwEbeRWgbNEkqOabc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096x",
		"s=W22ZaJ0SNY7soEsUEjb6gQ==,r=rOprNGfwEbeRWgbNEkqOabc,i=4096",   /* order */
		"m=ext,r=rOprNGfwEbeRWgbNEkqOabc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
		"",
	};
	for (size_t i = 0; i < sizeof(bad_first) / sizeof(bad_first[0]); i++) {
		struct scram_client x = rfc_client();
		int r = scram_client_final(&x, bad_first[i], strlen(bad_first[i]), &cr, out, sizeof(out), &why);
		if (r != SCRAM_BAD)
			fprintf(stderr, "  accepted server-first \"%s\"\n", bad_first[i]);
		CHECK(r == SCRAM_BAD);
	}
}

/* pgproxy checking the RFC's client (the server nonce fixed) */
static struct scram_verify rfc_verifier(bool known)
{
	struct scram_verify v;
	struct scram_keys k = rfc_keys();
	scram_verify_begin(&v, &k, known, NULL, 0);
	v.step = 1;
	strcpy(v.gs2, "n,,");
	strcpy(v.nonce, "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0");
	strcpy(v.bare, rfc_bare);
	strcpy(v.server_first, rfc_server_first);
	return v;
}

static void verifier_role(void)
{
	char out[512];
	const char *why;
	struct scram_verify v = rfc_verifier(true);
	int n = scram_verify_final(&v, rfc_client_final, strlen(rfc_client_final), out, sizeof(out), &why);
	CHECK(n == (int)strlen(rfc_server_final) && !strcmp(out, rfc_server_final));
	unsigned char ck[SCRAM_KEY_LEN];
	struct scram_keys k = rfc_keys();
	CHECK(scram_keys_from_password("pencil", &k, ck));
	CHECK(!memcmp(v.client_key, ck, SCRAM_KEY_LEN)); /* what the server side is answered with */

	/* an unknown user fails even with the right proof; a wrong proof fails */
	struct scram_verify u = rfc_verifier(false);
	CHECK(scram_verify_final(&u, rfc_client_final, strlen(rfc_client_final), out, sizeof(out), &why) ==
	      SCRAM_FAIL);
	static const char wrong[] = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
				    "p=eHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
	struct scram_verify w = rfc_verifier(true);
	CHECK(scram_verify_final(&w, wrong, strlen(wrong), out, sizeof(out), &why) == SCRAM_FAIL);
	CHECK(scram_verify_final(&w, rfc_client_final, strlen(rfc_client_final), out, sizeof(out), &why) ==
	      SCRAM_BAD); /* one final only */

	static const char *bad_final[] = {
		"c=biws,r=rOprNGfwEbeRWgbNEkqO,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", /* nonce */
		"c=eSws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
		"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", /* binding "y,," not what was sent */
		"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",       /* no proof */
		"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzb", /* short proof */
		"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
		"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=,x=1", /* proof not last */
		"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,c=biws,"
		"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", /* order */
		"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
		"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ==", /* bad base64 */
		"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,,", "c", "=", ",", "",
	};
	for (size_t i = 0; i < sizeof(bad_final) / sizeof(bad_final[0]); i++) {
		struct scram_verify x = rfc_verifier(true);
		int r = scram_verify_final(&x, bad_final[i], strlen(bad_final[i]), out, sizeof(out), &why);
		if (r != SCRAM_BAD)
			fprintf(stderr, "  accepted client-final \"%s\": %d\n", bad_final[i], r);
		CHECK(r == SCRAM_BAD);
	}

	static const char *bad_first[] = {
		"n,,n=,r=",           /* empty nonce */
		"n,,r=abc",           /* no n= */
		"n,a=admin,n=,r=abc", /* authzid */
		"p=tls-server-end-point,,n=,r=abc",
		"x,,n=,r=abc", "n,n=,r=abc", "n,,m=1,n=,r=abc", "n,,n=,r=a,b", "n,,n=,r=ab c", "n,,n=", "n", "",
	};
	for (size_t i = 0; i < sizeof(bad_first) / sizeof(bad_first[0]); i++) {
		struct scram_verify x;
		scram_verify_begin(&x, &k, true, NULL, 0);
		int r = scram_verify_first(&x, false, bad_first[i], strlen(bad_first[i]), out, sizeof(out), &why);
		if (r != SCRAM_BAD)
			fprintf(stderr, "  accepted client-first \"%s\": %d\n", bad_first[i], r);
		CHECK(r == SCRAM_BAD);
	}
	char long_nonce[SCRAM_NONCE_MAX + 32] = "n,,n=,r=";
	memset(long_nonce + 8, 'a', SCRAM_NONCE_MAX + 1);
	long_nonce[8 + SCRAM_NONCE_MAX + 1] = 0;
	struct scram_verify y;
	scram_verify_begin(&y, &k, true, NULL, 0);
	CHECK(scram_verify_first(&y, false, long_nonce, strlen(long_nonce), out, sizeof(out), &why) == SCRAM_BAD);
}

/* pgproxy's client against pgproxy's verifier, random nonces both sides */
static void round_trip(const char *password, const char *tried, bool known, int expect)
{
	struct scram_keys k = { .iter = 4096, .saltlen = 16 };
	unsigned char ck[SCRAM_KEY_LEN];
	memset(k.salt, 0x5a, k.saltlen);
	CHECK(scram_keys_from_password(password, &k, ck));
	struct scram_verify v;
	scram_verify_begin(&v, &k, known, NULL, 0);
	struct scram_client s;
	char first[256], sfirst[512], final[512], sfinal[128];
	const char *why;
	int n = scram_client_first(&s, first, sizeof(first));
	CHECK(n > 0 && !strncmp(first, "n,,n=,r=", 8));
	n = scram_verify_first(&v, false, first, (size_t)n, sfirst, sizeof(sfirst), &why);
	CHECK(n > 0);
	struct scram_creds cr = { .password = tried };
	n = scram_client_final(&s, sfirst, (size_t)n, &cr, final, sizeof(final), &why);
	CHECK(n > 0);
	n = scram_verify_final(&v, final, (size_t)n, sfinal, sizeof(sfinal), &why);
	CHECK(n == expect || (expect > 0 && n > 0));
	if (n > 0)
		CHECK(scram_client_check(&s, sfinal, (size_t)n, &why) == 0);
	scram_verify_end(&v);
}

/* SCRAM-SHA-256-PLUS over TLS: the client binds to the certificate hash
 * it sees; any other hash, or a flag that does not match what was
 * offered and chosen, is refused */
static int plus_exchange(bool offered, bool plus, const char *flag, unsigned char bound_byte)
{
	unsigned char cbind[32], ck[SCRAM_KEY_LEN];
	memset(cbind, 0xab, sizeof(cbind));
	struct scram_keys k = rfc_keys();
	CHECK(scram_keys_from_password("pencil", &k, ck));
	struct scram_verify v;
	scram_verify_begin(&v, &k, true, offered ? cbind : NULL, sizeof(cbind));
	char first[128], sfirst[512], final[512], sfinal[128];
	const char *why;
	snprintf(first, sizeof(first), "%sn=,r=plusnonce", flag);
	int n = scram_verify_first(&v, plus, first, strlen(first), sfirst, sizeof(sfirst), &why);
	if (n < 0)
		return n;
	/* the client's side, written out: c= is the gs2 header and the hash */
	unsigned char c[64];
	size_t gl = strlen(flag);
	memcpy(c, flag, gl);
	memset(c + gl, bound_byte, sizeof(cbind));
	char c64[128], auth[1024], proof64[64];
	b64_encode(c, gl + (flag[0] == 'p' ? sizeof(cbind) : 0), c64);
	const char *r = strstr(sfirst, "r=") + 2;
	int rn = (int)(strchr(r, ',') - r);
	char without[256];
	snprintf(without, sizeof(without), "c=%s,r=%.*s", c64, rn, r);
	snprintf(auth, sizeof(auth), "n=,r=plusnonce,%s,%s", sfirst, without);
	unsigned char sig[SCRAM_KEY_LEN], proof[SCRAM_KEY_LEN];
	unsigned int len = sizeof(sig);
	HMAC(EVP_sha256(), k.stored, SCRAM_KEY_LEN, (const unsigned char *)auth, strlen(auth), sig, &len);
	for (int i = 0; i < SCRAM_KEY_LEN; i++)
		proof[i] = ck[i] ^ sig[i];
	b64_encode(proof, SCRAM_KEY_LEN, proof64);
	snprintf(final, sizeof(final), "%s,p=%s", without, proof64);
	return scram_verify_final(&v, final, strlen(final), sfinal, sizeof(sfinal), &why);
}

static void channel_binding(void)
{
	CHECK(plus_exchange(true, true, "p=tls-server-end-point,,", 0xab) > 0);
	CHECK(plus_exchange(true, true, "p=tls-server-end-point,,", 0xac) == SCRAM_BAD); /* another cert */
	CHECK(plus_exchange(true, false, "n,,", 0) > 0);  /* offered, not wanted */
	CHECK(plus_exchange(true, false, "y,,", 0) == SCRAM_BAD); /* offered, yet "not offered": downgrade */
	CHECK(plus_exchange(false, false, "y,,", 0) > 0); /* not offered, and the client says so */
	CHECK(plus_exchange(true, true, "n,,", 0) == SCRAM_BAD);  /* PLUS chosen, no binding */
	CHECK(plus_exchange(true, false, "p=tls-server-end-point,,", 0xab) == SCRAM_BAD);
	CHECK(plus_exchange(false, true, "p=tls-server-end-point,,", 0xab) == SCRAM_BAD); /* not offered */
	CHECK(plus_exchange(true, true, "p=tls-unique,,", 0xab) == SCRAM_BAD);
}

static void secrets(void)
{
	/* PostgreSQL's secret of "pencil" with the RFC's salt: the keys match */
	struct scram_keys k = rfc_keys(), p;
	char stored[64], server[64], secret[256];
	b64_encode(k.stored, SCRAM_KEY_LEN, stored);
	b64_encode(k.server, SCRAM_KEY_LEN, server);
	snprintf(secret, sizeof(secret), "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$%s:%s", stored, server);
	CHECK(scram_parse_secret(secret, &p));
	CHECK(p.iter == 4096 && p.saltlen == 16 && !memcmp(p.stored, k.stored, SCRAM_KEY_LEN) &&
	      !memcmp(p.server, k.server, SCRAM_KEY_LEN));
	static const char *bad[] = {
		"SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$abc:def",
		"SCRAM-SHA-256$0:W22ZaJ0SNY7soEsUEjb6gQ==$",
		"SCRAM-SHA-256$-5:W22ZaJ0SNY7soEsUEjb6gQ==$x:y",
		"SCRAM-SHA-256$4096W22ZaJ0SNY7soEsUEjb6gQ==",
		"SCRAM-SHA-256$4096:$x:y",
		"SCRAM-SHA-1$4096:W22ZaJ0SNY7soEsUEjb6gQ==$x:y",
		"SCRAM-SHA-256$",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(!scram_parse_secret(bad[i], &p));

}

/* MD5 as PostgreSQL computes it ("md5" + md5(md5(password || user) ||
 * salt)), from a password and from its stored secret alike; the expected
 * values come from Python's hashlib. */
static void md5_answers(void)
{
	unsigned char salt[4] = { 9, 8, 7, 6 };
	char a[36], b[36];
	md5_response("pencil", NULL, "user", salt, a);
	md5_response(NULL, "md520c46e3762c864548e296b33c3406aa9", "user", salt, b);
	CHECK(!strcmp(a, "md566368aaa65b472cc4e44758eb2543ced"));
	CHECK(!strcmp(b, "md566368aaa65b472cc4e44758eb2543ced"));
}

int main(void)
{
	client_role();
	verifier_role();
	round_trip("pencil", "pencil", true, 1);
	round_trip("pencil", "pencil", false, SCRAM_FAIL);
	round_trip("pencil", "pencil2", true, SCRAM_FAIL);
	channel_binding();
	secrets();
	md5_answers();
	char b[8];
	unsigned char raw[8];
	CHECK(b64_encode((const unsigned char *)"n,,", 3, b) == 4 && !strcmp(b, "biws"));
	CHECK(b64_decode("biws", 4, raw, sizeof(raw)) == 3 && !memcmp(raw, "n,,", 3));
	CHECK(b64_decode("bi=s", 4, raw, sizeof(raw)) == -1);
	CHECK(b64_decode("biw", 3, raw, sizeof(raw)) == -1);
	CHECK(b64_decode("biws", 4, raw, 2) == -1);
	if (failures) {
		fprintf(stderr, "scram_vectors: %d failures\n", failures);
		return 1;
	}
	printf("scram_vectors: ok\n");
	return 0;
}
