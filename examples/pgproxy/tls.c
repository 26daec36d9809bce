/* SPDX-License-Identifier: MIT */
/* pgproxy: TLS with OpenSSL, for clients (--tls-cert, --tls-key: pgproxy
 * is the TLS server) and to the server (sslmode= in --server).
 *
 * A connection's TLS is a `struct tls` beside its fd: reads and writes go
 * through SSL_read and SSL_write on the non-blocking socket, and the
 * handshake happens inside them (SSL_set_accept_state or
 * SSL_set_connect_state), so the rest of pgproxy never sees it.  Two
 * things differ from a plain socket, and both are kept here:
 *   - a TLS call may need the other direction (a read that must write a
 *     handshake flight, a write that must wait for the peer's handshake):
 *     read_needs and write_needs say what the last call of each direction
 *     waits for, and tls_events turns "it wants to read / to write" into
 *     the epoll events to watch, so a write blocked on a read watches
 *     EPOLLIN, not an always-ready EPOLLOUT (which would spin the loop),
 *     and a direction the bounds have stopped watches nothing;
 *   - OpenSSL reads ahead (one read for a record's header and body, and
 *     whatever follows it), so it may hold bytes, decrypted or not, that
 *     epoll cannot see: tls_pending tells, and the drivers read again
 *     while it does.  A read that got less than it asked for and left
 *     nothing in OpenSSL stops there, as a plain one does: the socket is
 *     most likely empty, and if not epoll says so.
 * Writes use partial writes on a moving buffer (the queue may compact
 * between a refused write and its retry).  A struct tls belongs to its
 * connection, so only that connection's loop thread touches it; the two
 * contexts are made at start, before any thread or worker, and only read
 * after. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "pgproxy.h"

static SSL_CTX *client_side; /* pgproxy as the server of its clients */
static SSL_CTX *server_side; /* pgproxy as a client of the server */
static unsigned char cert_hash[EVP_MAX_MD_SIZE]; /* tls-server-end-point */
static unsigned cert_hash_len;

static const char *ssl_error(void)
{
	static _Thread_local char text[256];
	unsigned long e = ERR_get_error();
	if (!e)
		return "no more detail";
	ERR_error_string_n(e, text, sizeof(text));
	ERR_clear_error();
	return text;
}

/* RFC 5929's tls-server-end-point: the certificate's hash with its
 * signature's digest, SHA-256 in place of MD5 or SHA-1. */
static bool end_point_hash(X509 *cert)
{
	int md_nid, pk_nid;
	if (!OBJ_find_sigid_algs(X509_get_signature_nid(cert), &md_nid, &pk_nid))
		return false;
	const EVP_MD *md = md_nid == NID_md5 || md_nid == NID_sha1 ? EVP_sha256() : EVP_get_digestbynid(md_nid);
	return md && X509_digest(cert, md, cert_hash, &cert_hash_len);
}

/* A context either side starts from: TLS 1.2 or later, partial writes on
 * a moving buffer, no renegotiation. */
static SSL_CTX *new_ctx(const SSL_METHOD *method, char *err, size_t errlen)
{
	SSL_CTX *ctx = SSL_CTX_new(method);
	if (!ctx || !SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION)) {
		snprintf(err, errlen, "cannot make a TLS context: %s", ssl_error());
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
	SSL_CTX_set_read_ahead(ctx, 1);
	return ctx;
}

int tls_setup_clients(const char *cert, const char *key, char *err, size_t errlen)
{
	SSL_CTX *ctx = new_ctx(TLS_server_method(), err, errlen);
	if (!ctx)
		return -1;
	if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
		snprintf(err, errlen, "--tls-cert %s: %s", cert, ssl_error());
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
		snprintf(err, errlen, "--tls-key %s: %s", key, ssl_error());
		goto fail;
	}
	if (!end_point_hash(SSL_CTX_get0_certificate(ctx))) {
		snprintf(err, errlen, "--tls-cert %s: no digest for its signature algorithm", cert);
		goto fail;
	}
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_num_tickets(ctx, 0); /* nothing to resume: no ticket to write after the handshake */
	client_side = ctx;
	return 0;
fail:
	SSL_CTX_free(ctx);
	return -1;
}

int tls_setup_server(const char *sslmode, const char *rootcert, char *err, size_t errlen)
{
	SSL_CTX *ctx = new_ctx(TLS_client_method(), err, errlen);
	if (!ctx)
		return -1;
	if (!strcmp(sslmode, "verify-full")) {
		if (!rootcert[0] ? SSL_CTX_set_default_verify_paths(ctx) != 1
				 : SSL_CTX_load_verify_locations(ctx, rootcert, NULL) != 1) {
			snprintf(err, errlen, "sslrootcert %s: %s", rootcert[0] ? rootcert : "(the system's)",
				 ssl_error());
			SSL_CTX_free(ctx);
			return -1;
		}
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	}
	server_side = ctx;
	return 0;
}

void tls_free_all(void)
{
	SSL_CTX_free(client_side);
	SSL_CTX_free(server_side);
	client_side = server_side = NULL;
}

bool tls_offered(void) { return client_side != NULL; }

const unsigned char *tls_end_point(size_t *n)
{
	*n = cert_hash_len;
	return cert_hash;
}

int tls_accept(struct tls *t, int fd)
{
	if (!(t->ssl = SSL_new(client_side)) || SSL_set_fd(t->ssl, fd) != 1) {
		SSL_free(t->ssl);
		t->ssl = NULL;
		return -1;
	}
	SSL_set_accept_state(t->ssl);
	return 0;
}

int tls_connect(struct tls *t, int fd, const char *host, bool verify)
{
	if (!(t->ssl = SSL_new(server_side)) || SSL_set_fd(t->ssl, fd) != 1)
		goto fail;
	unsigned char ip[16];
	bool literal = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
	if (!literal && !SSL_set_tlsext_host_name(t->ssl, host)) /* no SNI for an address (RFC 6066) */
		goto fail;
	/* verify-full: the certificate must name the host, as an address
	 * (an iPAddress entry) or a DNS name */
	if (verify && !(literal ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), host)
				: SSL_set1_host(t->ssl, host)))
		goto fail;
	SSL_set_connect_state(t->ssl);
	return 0;
fail:
	SSL_free(t->ssl);
	t->ssl = NULL;
	return -1;
}

void tls_end(struct tls *t)
{
	if (!t->ssl)
		return;
	if (!t->broken && SSL_is_init_finished(t->ssl))
		(void)SSL_shutdown(t->ssl); /* close_notify, best effort: no waiting for the peer's */
	SSL_free(t->ssl);
	ERR_clear_error();
	t->ssl = NULL;
	t->read_needs = t->write_needs = 0;
	t->broken = false;
}

bool tls_ssl_pending(const struct tls *t) { return SSL_has_pending(t->ssl); }

bool tls_ssl_handshaking(const struct tls *t) { return !SSL_is_init_finished(t->ssl); }

/* What an SSL call's failure means: 0 try again when *needs says, -1
 * broken. */
static int tls_retry(struct tls *t, int r, uint32_t *needs)
{
	switch (SSL_get_error(t->ssl, r)) {
	case SSL_ERROR_WANT_READ:
		*needs = EPOLLIN;
		return 0;
	case SSL_ERROR_WANT_WRITE:
		*needs = EPOLLOUT;
		return 0;
	default: /* closed, refused handshake, bad record: the connection is done */
		t->broken = true;
		return -1;
	}
}

int tls_read(struct tls *t, struct buf *b, size_t limit)
{
	int got = 0;
	bool handshaking = !SSL_is_init_finished(t->ssl);
	t->read_needs = 0;
	while (buf_len(b) < limit) {
		size_t want = limit - buf_len(b) < READ_CHUNK ? limit - buf_len(b) : READ_CHUNK;
		if (!buf_reserve(b, want))
			return -1;
		ERR_clear_error(); /* SSL_get_error reads the thread's queue */
		int n = SSL_read(t->ssl, b->p + b->w, (int)want);
		if (n > 0) {
			b->w += (size_t)n;
			b->moved += (size_t)n;
			got = 1;
			if ((size_t)n < want && !SSL_has_pending(t->ssl))
				break; /* drained: epoll says when more comes */
		} else if (tls_retry(t, n, &t->read_needs) == 0) {
			break;
		} else {
			return got ? 1 : -1; /* what came before the end is handled first */
		}
	}
	/* A write that waited to read may have been freed by what this read
	 * took in (the handshake it waited for finished here, or records
	 * came): watched for EPOLLIN still, it would wait for bytes the peer
	 * never sends, as the peer waits for ours.  EPOLLOUT, which comes at
	 * once, has it tried again; it says again if it still needs to read. */
	if (t->write_needs == EPOLLIN && (got || (handshaking && SSL_is_init_finished(t->ssl))))
		t->write_needs = 0;
	return got;
}

int tls_write(struct tls *t, struct buf *b)
{
	if (!buf_len(b))
		return 0; /* no call: what the last one waited for still stands */
	t->write_needs = 0;
	while (buf_len(b)) {
		size_t len = buf_len(b) > (1u << 30) ? 1u << 30 : buf_len(b);
		ERR_clear_error();
		int n = SSL_write(t->ssl, buf_data(b), (int)len);
		if (n > 0)
			buf_consume(b, (size_t)n);
		else if (tls_retry(t, n, &t->write_needs) == 0)
			break;
		else
			return -1;
	}
	return 0;
}

const char *tls_verify_error(const struct tls *t)
{
	long v = t->ssl ? SSL_get_verify_result(t->ssl) : X509_V_OK;
	return v == X509_V_OK ? NULL : X509_verify_cert_error_string(v);
}
