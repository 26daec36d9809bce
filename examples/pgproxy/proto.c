/* SPDX-License-Identifier: MIT */
/* pgproxy: byte queues and protocol 3.0 messages.  Framing: a type byte,
 * then a big-endian int32 length that counts itself but not the type. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	if (b->r > 0) { /* compact first */
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
	if (!buf_reserve(b, n))
		return;
	memcpy(b->p + b->w, d, n);
	b->w += n;
}

void buf_consume(struct buf *b, size_t n)
{
	b->r += n;
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

size_t msg_begin(struct buf *b, char type)
{
	buf_put(b, &type, 1);
	size_t at = b->w;
	buf_put(b, "\0\0\0\0", 4);
	return at;
}

void msg_end(struct buf *b, size_t at)
{
	if (b->oom)
		return;
	uint32_t len = (uint32_t)(b->w - at);
	unsigned char *p = (unsigned char *)b->p + at;
	p[0] = (unsigned char)(len >> 24);
	p[1] = (unsigned char)(len >> 16);
	p[2] = (unsigned char)(len >> 8);
	p[3] = (unsigned char)len;
}

void msg_u8(struct buf *b, uint8_t v) { buf_put(b, &v, 1); }

void msg_i16(struct buf *b, int v)
{
	unsigned char p[2] = { (unsigned char)(v >> 8), (unsigned char)v };
	buf_put(b, p, 2);
}

void msg_i32(struct buf *b, int32_t v)
{
	uint32_t u = (uint32_t)v;
	unsigned char p[4] = { (unsigned char)(u >> 24), (unsigned char)(u >> 16),
			       (unsigned char)(u >> 8), (unsigned char)u };
	buf_put(b, p, 4);
}

void msg_str(struct buf *b, const char *s) { buf_put(b, s, strlen(s) + 1); }

void send_error(struct buf *b, const char *severity, const char *sqlstate, const char *fmt, ...)
{
	char text[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	size_t at = msg_begin(b, 'E');
	msg_u8(b, 'S');
	msg_str(b, severity);
	msg_u8(b, 'V');
	msg_str(b, severity);
	msg_u8(b, 'C');
	msg_str(b, sqlstate);
	msg_u8(b, 'M');
	msg_str(b, text);
	msg_u8(b, 0);
	msg_end(b, at);
}

void send_ready(struct buf *b, char status)
{
	size_t at = msg_begin(b, 'Z');
	msg_u8(b, (uint8_t)status);
	msg_end(b, at);
}

void send_param(struct buf *b, const char *name, const char *value)
{
	size_t at = msg_begin(b, 'S');
	msg_str(b, name);
	msg_str(b, value);
	msg_end(b, at);
}

void parse_error(const char *body, size_t len, struct pg_error *e)
{
	*e = (struct pg_error){ "ERROR", "XX000", "" };
	size_t i = 0;
	while (i < len && body[i]) {
		char field = body[i++];
		const char *v = body + i;
		size_t n = strnlen(v, len - i);
		switch (field) {
		case 'V': snprintf(e->severity, sizeof(e->severity), "%.*s", (int)n, v); break;
		case 'C': snprintf(e->code, sizeof(e->code), "%.*s", (int)n, v); break;
		case 'M': snprintf(e->message, sizeof(e->message), "%.*s", (int)n, v); break;
		default: break;
		}
		i += n + 1;
	}
}
