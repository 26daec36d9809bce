/* SPDX-License-Identifier: MIT */
/* Fuzzing what a peer sends pgproxy during SCRAM (examples/pgproxy/scram.c)
 * and what an operator writes in the auth file (authfile.c).
 *
 * An input is a selector byte, then bytes:
 *   0  a client-first-message, to a fresh verifier (selector bit 5: over
 *      TLS, SCRAM-SHA-256-PLUS offered; bit 6: the client chose it)
 *   1  a client-final-message, to a verifier past its first step (fixed
 *      nonces, RFC 7677's keys)
 *   2  two client messages, cut at the second byte's fraction of the rest:
 *      first, then (if the first passed) final
 *   3  a server-first-message, to pgproxy's client past its first step,
 *      with a password or (selector bit 4) a secret and ClientKey
 *   4  a server-final-message, after RFC 7677's server-first
 *   5  a secret, as the auth file holds one
 *   6  an auth file, written to a scratch file of mode 600 and loaded
 *
 * Checks: no crash, overflow or undefined behaviour (ASan, UBSan); every
 * step's result is one of its documented values; a message over
 * SCRAM_MSG_MAX is refused; a verifier never accepts a final message for
 * mock keys; what is written fits the buffer given, NUL-terminated.
 *
 * With clang -fsanitize=fuzzer (tests/fuzz/run.sh) a libFuzzer target;
 * otherwise its main() replays the files it is given (make check:
 * tests/fuzz/scram_replay.sh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pgproxy.h"

#define FINDING(...)                                          \
	do {                                                  \
		fprintf(stderr, "scram_fuzz: FINDING: " __VA_ARGS__); \
		fputc('\n', stderr);                          \
		abort();                                      \
	} while (0)

static struct scram_keys rfc_keys;
static bool ready;

static void setup(void)
{
	if (ready)
		return;
	ready = true;
	unsigned char ck[SCRAM_KEY_LEN];
	rfc_keys.iter = 4096;
	rfc_keys.saltlen = (size_t)b64_decode("W22ZaJ0SNY7soEsUEjb6gQ==", 24, rfc_keys.salt, sizeof(rfc_keys.salt));
	if (!scram_keys_from_password("pencil", &rfc_keys, ck))
		FINDING("no keys");
}

static void check_out(int r, const char *out, size_t cap, const char *what)
{
	if (r >= 0 && ((size_t)r >= cap || strlen(out) != (size_t)r))
		FINDING("%s: wrote %d bytes of a %zu-byte buffer, or not terminated", what, r, cap);
	if (r < SCRAM_MISMATCH)
		FINDING("%s: returned %d", what, r);
}

static void verify_final(struct scram_verify *v, const char *d, size_t n, bool known)
{
	char out[128];
	const char *why;
	int r = scram_verify_final(v, d, n, out, sizeof(out), &why);
	check_out(r, out, sizeof(out), "verify_final");
	if (r >= 0 && !known)
		FINDING("a final message was accepted for an unknown user");
	if (r >= 0 && n > SCRAM_MSG_MAX)
		FINDING("verify_final accepted %zu bytes", n);
}

static void auth_file(const uint8_t *d, size_t n)
{
	char path[] = "/tmp/scram_fuzz.XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		FINDING("mkstemp");
	if (write(fd, d, n) != (ssize_t)n)
		FINDING("write");
	close(fd);
	char err[512];
	if (authfile_open(path, err, sizeof(err)) == 0) {
		struct auth_entry e;
		/* every user the file might name, and one it does not */
		(void)authfile_lookup("fuzz", &e, true);
		(void)authfile_lookup("", &e, false);
		authfile_close();
	} else if (!err[0] || strlen(err) >= sizeof(err)) {
		FINDING("a refused file says nothing");
	}
	unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	setup();
	if (size < 1)
		return 0;
	int sel = data[0] & 15;
	const char *d = (const char *)data + 1;
	size_t n = size - 1;
	char out[512];
	const char *why;
	struct scram_verify v;
	switch (sel) {
	case 0:
	case 2: {
		bool known = data[0] & 16;
		static const unsigned char cbind[32] = { 0xab };
		scram_verify_begin(&v, &rfc_keys, known, (data[0] & 32) ? cbind : NULL, sizeof(cbind));
		size_t cut = n;
		if (sel == 2 && n) {
			cut = (size_t)((uint8_t)d[0]) * (n - 1) / 255 + 1;
		}
		int r = scram_verify_first(&v, data[0] & 64, d, cut, out, sizeof(out), &why);
		check_out(r, out, sizeof(out), "verify_first");
		if (r >= 0 && cut > SCRAM_MSG_MAX)
			FINDING("verify_first accepted %zu bytes", cut);
		if (sel == 2)
			verify_final(&v, d + cut, n - cut, known);
		scram_verify_end(&v);
		break;
	}
	case 1:
		scram_verify_begin(&v, &rfc_keys, data[0] & 16, NULL, 0);
		v.step = 1;
		strcpy(v.gs2, "n,,");
		strcpy(v.nonce, "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0");
		strcpy(v.bare, "n=user,r=rOprNGfwEbeRWgbNEkqO");
		strcpy(v.server_first,
		       "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096");
		verify_final(&v, d, n, data[0] & 16);
		break;
	case 3:
	case 4: {
		struct scram_client s = { .step = 1 };
		strcpy(s.nonce, "rOprNGfwEbeRWgbNEkqO");
		strcpy(s.bare, "n=user,r=rOprNGfwEbeRWgbNEkqO");
		struct scram_creds cr = { .password = "pencil" };
		if (data[0] & 16) {
			cr.password = NULL;
			cr.have_keys = true;
			cr.keys = rfc_keys;
			memset(cr.client_key, 7, sizeof(cr.client_key));
		}
		/* iterations are the peer's to choose, and cost CPU: keep the
		 * fuzzer's cases cheap by refusing counts it makes large */
		if (sel == 3 && memmem(d, n, "i=", 2) && !memmem(d, n, "i=4096", 6))
			return 0;
		int r;
		if (sel == 3) {
			r = scram_client_final(&s, d, n, &cr, out, sizeof(out), &why);
			check_out(r, out, sizeof(out), "client_final");
		} else {
			static const char first[] =
				"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
			r = scram_client_final(&s, first, strlen(first), &cr, out, sizeof(out), &why);
			if (r < 0 && !(data[0] & 16))
				FINDING("RFC 7677's server-first refused");
			r = scram_client_check(&s, d, n, &why);
			if (r > 0 || r < SCRAM_MISMATCH)
				FINDING("client_check returned %d", r);
		}
		break;
	}
	case 5: {
		char secret[2048];
		struct scram_keys k;
		if (n >= sizeof(secret))
			return 0;
		memcpy(secret, d, n);
		secret[n] = 0;
		if (scram_parse_secret(secret, &k) && (k.saltlen < 1 || k.saltlen > SCRAM_SALT_MAX || k.iter < 1))
			FINDING("a secret parsed to salt %zu, iterations %d", k.saltlen, k.iter);
		break;
	}
	case 6:
		auth_file(data + 1, n);
		break;
	}
	return 0;
}

#ifndef TS_LIBFUZZER
int main(int argc, char **argv)
{
	int runs = 0;
	for (int i = 1; i < argc; i++) {
		FILE *f = fopen(argv[i], "rb");
		if (!f) {
			perror(argv[i]);
			return 1;
		}
		static uint8_t buf[1 << 16];
		size_t n = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		LLVMFuzzerTestOneInput(buf, n);
		runs++;
	}
	printf("scram_fuzz: replayed %d inputs\n", runs);
	return runs ? 0 : 1;
}
#endif
