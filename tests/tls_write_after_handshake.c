/* SPDX-License-Identifier: MIT */
/* pgproxy's TLS to the server (examples/pgproxy/tls.c), stepped by hand
 * over a socketpair against an in-process OpenSSL server: a write that
 * waited for the server's handshake flight is retried once a read has
 * taken that flight in.
 *
 * The hang it pins (a29090a): server_startup_io writes the startup
 * packet, then reads.  SSL_write sends the ClientHello and waits to read
 * (write_needs = EPOLLIN).  When the server's flight arrives before the
 * SSL_read that follows, that read finishes the handshake, and nothing
 * more will come from a server that now waits for our bytes.  If the
 * write's wait still said EPOLLIN, the loop would watch for bytes that
 * never come, and the server for ours, until --server-connect-timeout.
 * So: before the flight, a read leaves the write waiting for EPOLLIN;
 * after the read that finishes the handshake, the write's wait is gone
 * (tls_events asks for EPOLLOUT, which comes at once), the retried write
 * goes through, and the server reads exactly what was written. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "pgproxy.h"

static int failures;
#define CHECK(cond)                                                                          \
	do {                                                                                 \
		if (!(cond)) {                                                               \
			fprintf(stderr, "tls_write_after_handshake:%d: FAIL: %s\n", __LINE__, \
				#cond);                                                      \
			failures++;                                                          \
		}                                                                            \
	} while (0)

static void die(const char *what)
{
	fprintf(stderr, "tls_write_after_handshake: %s\n", what);
	ERR_print_errors_fp(stderr);
	exit(99); /* a hard error: the harness could not be set up */
}

/* The test server's context: a fresh P-256 key and a self-signed
 * certificate for it, made in memory (the client side does not verify). */
static SSL_CTX *server_ctx(void)
{
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *cert = X509_new();
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	if (!key || !cert || !ctx)
		die("cannot make the test server's key, certificate or context");
	X509_NAME *name = X509_get_subject_name(cert);
	if (!ASN1_INTEGER_set(X509_get_serialNumber(cert), 1) ||
	    !X509_gmtime_adj(X509_getm_notBefore(cert), -60) ||
	    !X509_gmtime_adj(X509_getm_notAfter(cert), 3600) || !X509_set_pubkey(cert, key) ||
	    !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost",
					-1, -1, 0) ||
	    !X509_set_issuer_name(cert, name) || !X509_sign(cert, key, EVP_sha256()) ||
	    SSL_CTX_use_certificate(ctx, cert) != 1 || SSL_CTX_use_PrivateKey(ctx, key) != 1)
		die("cannot make the test server's certificate");
	SSL_CTX_set_num_tickets(ctx, 0); /* nothing after the handshake but our bytes */
	X509_free(cert);
	EVP_PKEY_free(key);
	return ctx;
}

/* One step of the server's handshake: true once it is done. */
static bool server_step(SSL *s)
{
	int r = SSL_do_handshake(s);
	if (r == 1)
		return true;
	int e = SSL_get_error(s, r);
	if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
		die("the test server's handshake failed");
	return false;
}

int main(void)
{
	static const char startup[] = "a startup packet, as server_startup_io writes it";
	char err[256];
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv))
		die("socketpair");
	if (tls_setup_server("require", "", err, sizeof(err)))
		die(err);
	SSL_CTX *sctx = server_ctx();
	SSL *srv = SSL_new(sctx);
	if (!srv || SSL_set_fd(srv, sv[1]) != 1)
		die("the test server's SSL");
	SSL_set_accept_state(srv);

	struct tls t = { 0 };
	struct buf out = { 0 }, in = { 0 };
	if (tls_connect(&t, sv[0], "127.0.0.1", false))
		die("tls_connect");

	/* The write sends the ClientHello and must wait for the reply. */
	buf_put(&out, startup, sizeof(startup));
	CHECK(tls_write(&t, &out) == 0);
	CHECK(buf_len(&out) == sizeof(startup));
	CHECK(t.write_needs == EPOLLIN);
	CHECK(tls_events(&t, true, true) == EPOLLIN);

	/* A read before the flight has come takes nothing: the write still
	 * waits for EPOLLIN (clearing it here would spin the loop). */
	CHECK(tls_read(&t, &in, 4096) == 0);
	CHECK(t.write_needs == EPOLLIN);
	CHECK(tls_handshaking(&t));

	/* The server answers with its whole flight, then waits for ours. */
	CHECK(!server_step(srv));

	/* The read that takes the flight in finishes our handshake: the
	 * write may go now, so it no longer waits for EPOLLIN. */
	CHECK(tls_read(&t, &in, 4096) == 0);
	CHECK(!tls_handshaking(&t));
	CHECK(t.write_needs != EPOLLIN);
	CHECK(tls_events(&t, true, true) & EPOLLOUT);

	/* EPOLLOUT comes at once: the retried write goes through, and the
	 * server gets exactly the startup packet. */
	CHECK(tls_write(&t, &out) == 0);
	CHECK(buf_len(&out) == 0);
	CHECK(t.write_needs == 0);
	bool done = false;
	for (int i = 0; i < 4 && !done; i++)
		done = server_step(srv);
	CHECK(done);
	char got[sizeof(startup) + 16];
	int n = SSL_read(srv, got, (int)sizeof(got));
	CHECK(n == (int)sizeof(startup));
	CHECK(n == (int)sizeof(startup) && !memcmp(got, startup, sizeof(startup)));

	tls_end(&t);
	SSL_free(srv);
	SSL_CTX_free(sctx);
	tls_free_all();
	buf_free(&out);
	buf_free(&in);
	close(sv[0]);
	close(sv[1]);
	if (failures)
		return 1;
	printf("tls_write_after_handshake: a write that waited for the handshake goes once a read finishes it\n");
	return 0;
}
