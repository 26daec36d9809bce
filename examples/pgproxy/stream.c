/* SPDX-License-Identifier: MIT */
/* pgproxy: byte queues, socket reads and writes, framing.
 *
 * Framing: a type byte, then a big-endian int32 length that counts itself
 * but not the type.  frame_peek hands a message on only once its header is
 * whole, with its length checked; relay_step moves a body as it arrives,
 * so a body larger than any buffer streams through and nothing waits for
 * bytes that will never be read.  Every move is counted in the queues'
 * `moved`, which is how a connection's driver tells progress. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "pgproxy.h"

/* Buffers that grew past this for a large row or a COPY are given back
 * once empty, so an idle connection does not keep megabytes. */
#define BUF_KEEP (256 * 1024)

bool buf_reserve(struct buf *b, size_t n)
{
	if (b->oom)
		return false;
	if (b->cap - b->w >= n)
		return true;
	if (b->r > 0) { /* compact first: offsets into the queue do not survive this */
		memmove(b->p, b->p + b->r, b->w - b->r);
		b->w -= b->r;
		b->r = 0;
		if (b->cap - b->w >= n)
			return true;
	}
	size_t cap = b->cap ? b->cap : 4096;
	while (cap - b->w < n)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p) {
		b->oom = true;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

void buf_put(struct buf *b, const void *d, size_t n)
{
	if (!n || !buf_reserve(b, n))
		return;
	memcpy(b->p + b->w, d, n);
	b->w += n;
	b->moved += n;
}

void buf_consume(struct buf *b, size_t n)
{
	b->r += n;
	b->moved += n;
	if (b->r == b->w) {
		b->r = b->w = 0;
		if (b->cap > BUF_KEEP) {
			free(b->p);
			b->p = NULL;
			b->cap = 0;
		}
	}
}

void buf_free(struct buf *b)
{
	free(b->p);
	*b = (struct buf){ 0 };
}

uint32_t get32(const void *p)
{
	const unsigned char *u = p;
	return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

uint16_t get16(const void *p)
{
	const unsigned char *u = p;
	return (uint16_t)(u[0] << 8 | u[1]);
}

void put32(void *p, uint32_t v)
{
	unsigned char *u = p;
	u[0] = (unsigned char)(v >> 24);
	u[1] = (unsigned char)(v >> 16);
	u[2] = (unsigned char)(v >> 8);
	u[3] = (unsigned char)v;
}

int frame_peek(const struct buf *b, struct msg *m)
{
	size_t avail = buf_len(b);
	if (avail < 5)
		return FRAME_MORE;
	const char *p = buf_data(b);
	m->type = p[0];
	m->len = get32(p + 1);
	if (m->len < 4 || m->len > MAX_MSG)
		return FRAME_BAD;
	m->total = (size_t)m->len + 1;
	m->p = p;
	m->have = avail < m->total ? avail : m->total;
	return FRAME_MSG;
}

void relay_step(struct relay *rl, struct buf *from, struct buf *to, size_t bound)
{
	size_t n = buf_len(from);
	if (n > rl->left)
		n = rl->left;
	if (!rl->drop && to) {
		if (buf_len(to) >= bound)
			return;
		if (n > bound - buf_len(to))
			n = bound - buf_len(to);
		buf_put(to, buf_data(from), n);
		if (to->oom)
			return;
	}
	buf_consume(from, n);
	rl->left -= n;
}

int sock_read(int fd, struct tls *t, struct buf *b, size_t limit)
{
	if (t && t->ssl)
		return tls_read(t, b, limit);
	int got = 0;
	while (buf_len(b) < limit) {
		size_t want = limit - buf_len(b) < READ_CHUNK ? limit - buf_len(b) : READ_CHUNK;
		if (!buf_reserve(b, want))
			return -1;
		ssize_t n = recv(fd, b->p + b->w, want, MSG_DONTWAIT);
		if (n > 0) {
			b->w += (size_t)n;
			b->moved += (size_t)n;
			got = 1;
			if ((size_t)n < want) /* drained: epoll says when more comes */
				break;
		} else if (n == 0) { /* what came before the end is handled first */
			return got ? 1 : -1;
		} else if (errno == EINTR) {
			continue;
		} else if (errno == EAGAIN || errno == EWOULDBLOCK) {
			break;
		} else {
			return -1;
		}
	}
	return got;
}

int sock_send(int fd, struct tls *t, struct buf *b)
{
	if (t && t->ssl)
		return tls_write(t, b);
	while (buf_len(b)) {
		ssize_t n = send(fd, buf_data(b), buf_len(b), MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0)
			buf_consume(b, (size_t)n);
		else if (n < 0 && errno == EINTR)
			continue;
		else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		else
			return -1;
	}
	return 0;
}
