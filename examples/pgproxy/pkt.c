/* SPDX-License-Identifier: MIT */
/* pgproxy: building protocol 3.0 messages, and reading ErrorResponse.
 * A message is built in a buffer of its own and appended whole, with its
 * length, by pkt_end: the length is computed from what was built, never
 * from an offset into a queue that may move under it. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "pgproxy.h"

void pkt_begin(struct pkt *k, char type)
{
	*k = (struct pkt){ .startup = !type };
	char hdr[5] = { type, 0, 0, 0, 0 };
	buf_put(&k->b, type ? hdr : hdr + 1, type ? 5 : 4);
}

void pkt_u8(struct pkt *k, uint8_t v) { buf_put(&k->b, &v, 1); }

void pkt_i16(struct pkt *k, int v)
{
	unsigned char p[2] = { (unsigned char)(v >> 8), (unsigned char)v };
	buf_put(&k->b, p, 2);
}

void pkt_i32(struct pkt *k, int32_t v)
{
	unsigned char p[4];
	put32(p, (uint32_t)v);
	buf_put(&k->b, p, 4);
}

void pkt_str(struct pkt *k, const char *s) { buf_put(&k->b, s, strlen(s) + 1); }

void pkt_bytes(struct pkt *k, const void *d, size_t n) { buf_put(&k->b, d, n); }

void pkt_end(struct pkt *k, struct buf *out)
{
	if (k->b.oom) {
		out->oom = true;
	} else {
		size_t at = k->startup ? 0 : 1;
		put32(k->b.p + at, (uint32_t)(buf_len(&k->b) - at));
		buf_put(out, buf_data(&k->b), buf_len(&k->b));
	}
	buf_free(&k->b);
}

void send_error(struct buf *b, const char *severity, const char *sqlstate, const char *fmt, ...)
{
	char text[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	struct pkt k;
	pkt_begin(&k, 'E');
	pkt_u8(&k, 'S');
	pkt_str(&k, severity);
	pkt_u8(&k, 'V');
	pkt_str(&k, severity);
	pkt_u8(&k, 'C');
	pkt_str(&k, sqlstate);
	pkt_u8(&k, 'M');
	pkt_str(&k, text);
	pkt_u8(&k, 0);
	pkt_end(&k, b);
}

void send_ready(struct buf *b, char status)
{
	char m[6] = { 'Z', 0, 0, 0, 5, status };
	buf_put(b, m, sizeof(m));
}

void send_simple(struct buf *b, char type)
{
	char m[5] = { type, 0, 0, 0, 4 };
	buf_put(b, m, sizeof(m));
}

void send_param(struct buf *b, const char *name, const char *value)
{
	struct pkt k;
	pkt_begin(&k, 'S');
	pkt_str(&k, name);
	pkt_str(&k, value);
	pkt_end(&k, b);
}

void send_complete(struct buf *b, const char *tag)
{
	struct pkt k;
	pkt_begin(&k, 'C');
	pkt_str(&k, tag);
	pkt_end(&k, b);
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
