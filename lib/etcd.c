/* SPDX-License-Identifier: MIT */
/* etcd's JSON gateway, the calls a fleet member makes (etcd.h). */
#include "etcd.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "boottime.h"

#define ETCD_MAX_ENDPOINTS 16
#define ETCD_MAX_ANSWER (8u << 20) /* a ledger of thousands of members fits */

struct etcd {
	CURL *curl;
	char *urls[ETCD_MAX_ENDPOINTS];
	int nurls, current; /* the endpoint that answered last is tried first */
	long timeout_ms;
	char *buf;
	size_t len, cap;
	bool overflow;
	_Atomic uint64_t requests; /* read by tests from any thread */
	int64_t deadline_ms; /* 0: none */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result = CURLE_FAILED_INIT;

static void curl_init(void)
{
	curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* @endpoints, comma-separated, into @urls (trailing slashes dropped): how
 * many, or -1 (ENOMEM; what was made is freed). */
static int parse_endpoints(const char *endpoints, char **urls)
{
	char *list = strdup(endpoints), *save = NULL;
	int n = 0;
	if (!list)
		return -1;
	for (char *u = strtok_r(list, ",", &save); u && n < ETCD_MAX_ENDPOINTS;
	     u = strtok_r(NULL, ",", &save)) {
		while (*u == ' ')
			u++;
		size_t len = strlen(u);
		while (len && u[len - 1] == '/')
			u[--len] = '\0';
		if (len && !(urls[n++] = strdup(u))) {
			while (n--)
				free(urls[n]);
			free(list);
			return -1;
		}
	}
	free(list);
	return n;
}

static bool curl_ready(void)
{
	pthread_once(&curl_once, curl_init);
	return curl_init_result == CURLE_OK;
}

struct etcd *ts_lib_etcd_new(const char *endpoints, int64_t timeout_ns)
{
	if (!curl_ready()) {
		errno = ENOMEM;
		return NULL;
	}
	if (!endpoints) {
		errno = EINVAL;
		return NULL;
	}
	struct etcd *e = calloc(1, sizeof(*e));
	if (!e || (e->nurls = parse_endpoints(endpoints, e->urls)) < 0) {
		free(e);
		errno = ENOMEM;
		return NULL;
	}
	e->timeout_ms = timeout_ns / 1000000 > 0 ? (long)(timeout_ns / 1000000) : 1;
	if (!e->nurls || !(e->curl = curl_easy_init())) {
		int err = e->nurls ? ENOMEM : EINVAL;
		ts_lib_etcd_free(e);
		errno = err;
		return NULL;
	}
	return e;
}

void ts_lib_etcd_free(struct etcd *e)
{
	if (!e)
		return;
	if (e->curl)
		curl_easy_cleanup(e->curl);
	for (int i = 0; i < e->nurls; i++)
		free(e->urls[i]);
	free(e->buf);
	free(e);
}

/* Bounded: an answer above ETCD_MAX_ANSWER is refused (EPROTO), never
 * grown without end. */
static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
	struct etcd *e = arg;
	size_t add = size * n;
	if (e->len + add + 1 > ETCD_MAX_ANSWER) {
		e->overflow = true;
		return 0;
	}
	if (e->len + add + 1 > e->cap) {
		size_t cap = e->cap ? e->cap : 4096;
		while (cap < e->len + add + 1)
			cap *= 2;
		char *b = realloc(e->buf, cap);
		if (!b)
			return 0;
		e->buf = b;
		e->cap = cap;
	}
	memcpy(e->buf + e->len, p, add);
	e->len += add;
	e->buf[e->len] = '\0';
	return add;
}

/* As the member's freshness: a suspend counts. */
static int64_t boottime_ms(void) { return boottime_ns() / 1000000; }

/* One POST to one endpoint within @budget_ms: 0 (answer in e->buf), or
 * why not. */
static int post(struct etcd *e, const char *url, const char *body, long budget_ms, long *status)
{
	struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
	if (!hdr)
		return ENOMEM;
	CURL *c = e->curl;
	curl_easy_reset(c);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, e);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, budget_ms);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, budget_ms);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM */
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	e->len = 0;
	e->overflow = false;
	CURLcode r = curl_easy_perform(c);
	curl_slist_free_all(hdr);
	*status = 0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
	if (r == CURLE_OK)
		return 0;
	if (e->overflow)
		return EPROTO;
	if (r == CURLE_OUT_OF_MEMORY)
		return ENOMEM;
	return r == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : ECONNREFUSED;
}

/* POST @req (consumed) to @path; *@resp is the parsed answer (json_object_put
 * it).  ETIMEDOUT also when the deadline leaves no time. */
static int call(struct etcd *e, const char *path, json_object *req, json_object **resp)
{
	const char *body = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
	int err = body ? ECONNREFUSED : ENOMEM;
	/* The timeout is the whole call's, over every endpoint tried: a
	 * member's look must end within its bound (fleet.c, rule 3). */
	int64_t end = boottime_ms() + e->timeout_ms;
	if (e->deadline_ms && e->deadline_ms < end)
		end = e->deadline_ms;
	*resp = NULL;
	for (int k = 0; body && k < e->nurls; k++) {
		int i = (e->current + k) % e->nurls;
		char url[512];
		/* each endpoint left gets its slice of the time left: one that
		 * accepts and never answers (a frozen or cut-off node) must not
		 * eat the time of the live ones after it */
		long status, budget = (long)(end - boottime_ms()) / (e->nurls - k);
		if (budget <= 0) {
			err = ETIMEDOUT;
			break;
		}
		if ((size_t)snprintf(url, sizeof(url), "%s%s", e->urls[i], path) >= sizeof(url)) {
			err = EINVAL;
			break;
		}
		atomic_fetch_add_explicit(&e->requests, 1, memory_order_relaxed);
		err = post(e, url, body, budget, &status);
		if (err == ENOMEM || err == EPROTO)
			break;
		if (err)
			continue; /* this endpoint is down: the next */
		if (status >= 500) {
			err = ECONNREFUSED; /* a node without a leader, say */
			continue;
		}
		e->current = i;
		*resp = status == 200 && e->len ? json_tokener_parse(e->buf) : NULL;
		err = *resp && json_object_is_type(*resp, json_type_object) ? 0 : EPROTO;
		if (err && *resp) {
			json_object_put(*resp);
			*resp = NULL;
		}
		break;
	}
	json_object_put(req);
	return err;
}

void ts_lib_etcd_set_deadline(struct etcd *e, int64_t deadline_ns)
{
	e->deadline_ms = deadline_ns > 0 ? deadline_ns / 1000000 : 0;
}

uint64_t ts_lib_etcd_requests(const struct etcd *e)
{
	return atomic_load_explicit(&e->requests, memory_order_relaxed);
}

/* --- base64, as the gateway carries keys and values ------------------- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const void *data, size_t n)
{
	const unsigned char *s = data;
	char *out = malloc(4 * ((n + 2) / 3) + 1), *o = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
			     (i + 2 < n ? s[i + 2] : 0);
		*o++ = b64[v >> 18 & 63];
		*o++ = b64[v >> 12 & 63];
		*o++ = i + 1 < n ? b64[v >> 6 & 63] : '=';
		*o++ = i + 2 < n ? b64[v & 63] : '=';
	}
	*o = '\0';
	return out;
}

static int b64_value(char c)
{
	const char *p = c ? strchr(b64, c) : NULL;
	return p ? (int)(p - b64) : -1;
}

/* NULL for what is not base64 (an answer we do not trust is refused). */
static char *b64_decode(const char *s, size_t *len)
{
	size_t n = strlen(s);
	if (n % 4)
		return NULL;
	char *out = malloc(n / 4 * 3 + 1);
	size_t o = 0;
	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i += 4) {
		int v[4];
		for (int k = 0; k < 4; k++)
			v[k] = s[i + k] == '=' && i + 4 == n && k >= 2 ? 0 : b64_value(s[i + k]);
		if (v[0] < 0 || v[1] < 0 || v[2] < 0 || v[3] < 0 ||
		    (s[i + 2] == '=' && s[i + 3] != '=')) {
			free(out);
			return NULL;
		}
		uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
			     (uint32_t)v[3];
		out[o++] = (char)(w >> 16);
		if (s[i + 2] != '=')
			out[o++] = (char)(w >> 8 & 255);
		if (s[i + 3] != '=')
			out[o++] = (char)(w & 255);
	}
	out[o] = '\0';
	*len = o;
	return out;
}

static void add_b64(json_object *o, const char *field, const char *s)
{
	char *b = b64_encode(s, strlen(s));
	json_object_object_add(o, field, b ? json_object_new_string(b) : NULL);
	free(b);
}

/* int64 fields come as JSON strings; a missing one is 0 (proto3 omits
 * zero values). */
static int64_t get_i64(json_object *o, const char *field)
{
	json_object *v;
	return json_object_object_get_ex(o, field, &v) ? json_object_get_int64(v) : 0;
}

/* --- the calls ----------------------------------------------------------- */

int ts_lib_etcd_lease_grant(struct etcd *e, int64_t ttl_s, int64_t *id)
{
	json_object *req = json_object_new_object(), *resp;
	json_object_object_add(req, "TTL", json_object_new_int64(ttl_s));
	int err = call(e, "/v3/lease/grant", req, &resp);
	if (err)
		return err;
	*id = get_i64(resp, "ID");
	json_object_put(resp);
	return *id ? 0 : EPROTO;
}

int ts_lib_etcd_lease_keepalive(struct etcd *e, int64_t id, int64_t *ttl_s)
{
	json_object *req = json_object_new_object(), *resp, *result;
	json_object_object_add(req, "ID", json_object_new_int64(id));
	int err = call(e, "/v3/lease/keepalive", req, &resp);
	if (err)
		return err;
	if (!json_object_object_get_ex(resp, "result", &result)) {
		json_object_put(resp);
		return EPROTO;
	}
	*ttl_s = get_i64(result, "TTL");
	json_object_put(resp);
	return 0;
}

int ts_lib_etcd_lease_revoke(struct etcd *e, int64_t id)
{
	json_object *req = json_object_new_object(), *resp;
	json_object_object_add(req, "ID", json_object_new_int64(id));
	int err = call(e, "/v3/lease/revoke", req, &resp);
	if (!err)
		json_object_put(resp);
	return err;
}

int ts_lib_etcd_put(struct etcd *e, const char *key, const char *value, int64_t lease)
{
	json_object *req = json_object_new_object(), *resp;
	add_b64(req, "key", key);
	add_b64(req, "value", value);
	if (lease)
		json_object_object_add(req, "lease", json_object_new_int64(lease));
	int err = call(e, "/v3/kv/put", req, &resp);
	if (!err)
		json_object_put(resp);
	return err;
}

/* The smallest key after every key with @prefix: the range's end. */
static char *prefix_end(const char *prefix)
{
	char *end = strdup(prefix);
	size_t n = end ? strlen(end) : 0;
	while (n && (unsigned char)end[n - 1] == 0xff)
		end[--n] = '\0';
	if (n)
		end[n - 1]++;
	return end;
}

void ts_lib_etcd_kvs_free(struct etcd_kv *kvs, size_t n)
{
	for (size_t i = 0; kvs && i < n; i++) {
		free(kvs[i].key);
		free(kvs[i].value);
	}
	free(kvs);
}

static int decode_kv(json_object *o, struct etcd_kv *kv)
{
	json_object *k, *v;
	size_t klen;
	memset(kv, 0, sizeof(*kv));
	if (!json_object_object_get_ex(o, "key", &k) || !json_object_is_type(k, json_type_string) ||
	    !(kv->key = b64_decode(json_object_get_string(k), &klen)))
		return EPROTO;
	const char *val = json_object_object_get_ex(o, "value", &v) ? json_object_get_string(v) : "";
	if (!(kv->value = b64_decode(val ? val : "", &kv->value_len)))
		return EPROTO;
	kv->create_rev = get_i64(o, "create_revision");
	kv->mod_rev = get_i64(o, "mod_revision");
	kv->version = get_i64(o, "version");
	kv->lease = get_i64(o, "lease");
	return 0;
}

int ts_lib_etcd_range_prefix(struct etcd *e, const char *prefix, struct etcd_kv **kvs, size_t *n)
{
	json_object *req = json_object_new_object(), *resp, *arr;
	char *end = prefix_end(prefix);
	*kvs = NULL;
	*n = 0;
	if (!end) {
		json_object_put(req);
		return ENOMEM;
	}
	add_b64(req, "key", prefix);
	add_b64(req, "range_end", end);
	free(end);
	int err = call(e, "/v3/kv/range", req, &resp);
	if (err)
		return err;
	size_t count = json_object_object_get_ex(resp, "kvs", &arr) &&
				       json_object_is_type(arr, json_type_array)
			       ? json_object_array_length(arr)
			       : 0;
	*kvs = calloc(count ? count : 1, sizeof(**kvs));
	if (!*kvs)
		err = ENOMEM;
	for (size_t i = 0; !err && i < count; i++, (*n)++)
		err = decode_kv(json_object_array_get_idx(arr, i), &(*kvs)[i]);
	json_object_put(resp);
	if (err) {
		ts_lib_etcd_kvs_free(*kvs, *n); /* the failed entry is counted */
		*kvs = NULL;
		*n = 0;
	}
	return err;
}

void ts_lib_etcd_cmp(json_object *cmps, const char *key, const char *target, int64_t value)
{
	json_object *c = json_object_new_object();
	json_object_object_add(c, "target", json_object_new_string(target));
	json_object_object_add(c, "result", json_object_new_string("EQUAL"));
	add_b64(c, "key", key);
	const char *field = !strcmp(target, "MOD")	  ? "mod_revision"
			    : !strcmp(target, "CREATE") ? "create_revision"
							: "version";
	json_object_object_add(c, field, json_object_new_int64(value));
	json_object_array_add(cmps, c);
}

void ts_lib_etcd_op_put(json_object *ops, const char *key, const char *value, int64_t lease)
{
	json_object *op = json_object_new_object(), *put = json_object_new_object();
	add_b64(put, "key", key);
	add_b64(put, "value", value);
	if (lease)
		json_object_object_add(put, "lease", json_object_new_int64(lease));
	json_object_object_add(op, "request_put", put);
	json_object_array_add(ops, op);
}

int ts_lib_etcd_txn(struct etcd *e, json_object *cmps, json_object *success, json_object *failure,
		    bool *succeeded)
{
	json_object *req = json_object_new_object(), *resp, *ok;
	json_object_object_add(req, "compare", cmps);
	json_object_object_add(req, "success", success);
	if (failure)
		json_object_object_add(req, "failure", failure);
	int err = call(e, "/v3/kv/txn", req, &resp);
	if (err)
		return err;
	/* a real boolean only: "false" as a string is not true */
	*succeeded = json_object_object_get_ex(resp, "succeeded", &ok) &&
		     json_object_is_type(ok, json_type_boolean) && json_object_get_boolean(ok);
	json_object_put(resp);
	return 0;
}

/* --- a watch: its own thread and connection ------------------------------ */

/* Between endpoints that failed to set a watch up, a pause from 100 ms
 * doubling to this: a cluster that is down costs a few tries a second. */
#define WATCH_MAX_PAUSE_MS 2000
/* A watch's message is an event batch of member keys and the ledger: far
 * below this (a ledger of ten thousand members), and a bigger one costs a
 * reconnection, not memory (json-c's tree of a message of small items
 * may take 200 times its bytes). */
#define WATCH_MAX_MESSAGE ((size_t)1 << 20)

struct etcd_watch {
	char *urls[ETCD_MAX_ENDPOINTS];
	int nurls, current;
	long setup_ms;      /* an endpoint has this long to set the watch up */
	char *body;         /* the create_request */
	char *ignore;       /* events on this key are no news (base64, as carried) */
	void (*news)(void *arg);
	void *arg;
	CURLM *multi;       /* curl_multi_poll: a stop wakes the thread at once */
	CURL *curl;
	struct etcd_stream stream;
	bool created, failed; /* this connection's: set up; to be dropped */
	_Atomic bool stop;
	_Atomic uint64_t setups, attempts; /* read by tests from any thread */
	pthread_t thread;
};

static bool get_true(json_object *o, const char *field)
{
	json_object *v;
	return json_object_object_get_ex(o, field, &v) && json_object_is_type(v, json_type_boolean) &&
	       json_object_get_boolean(v);
}

/* One message of the stream: whether it is news (the watch set up, or an
 * event on another key than w->ignore); anything but a result drops the
 * connection. */
static bool watch_message(struct etcd_watch *w, json_object *o)
{
	json_object *r, *events;
	if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, "result", &r) ||
	    !json_object_is_type(r, json_type_object) || get_true(r, "canceled")) {
		w->failed = true; /* an error, a cancel (a compaction, say) */
		return false;
	}
	if (get_true(r, "created")) {
		/* whatever changed before this went unseen: news too */
		w->created = true;
		atomic_fetch_add_explicit(&w->setups, 1, memory_order_relaxed);
		return true;
	}
	if (!json_object_object_get_ex(r, "events", &events) ||
	    !json_object_is_type(events, json_type_array))
		return false; /* a progress notice */
	for (size_t i = 0; i < json_object_array_length(events); i++) {
		json_object *kv, *key;
		json_object *ev = json_object_array_get_idx(events, i);
		if (!json_object_object_get_ex(ev, "kv", &kv) ||
		    !json_object_object_get_ex(kv, "key", &key) ||
		    !json_object_is_type(key, json_type_string) ||
		    strcmp(json_object_get_string(key), w->ignore))
			return true;
	}
	return false;
}

int ts_lib_etcd_stream_init(struct etcd_stream *st, size_t max)
{
	st->partial = 0;
	st->max = max;
	return (st->tok = json_tokener_new()) ? 0 : ENOMEM;
}

void ts_lib_etcd_stream_reset(struct etcd_stream *st)
{
	st->partial = 0;
	json_tokener_reset(st->tok);
}

void ts_lib_etcd_stream_destroy(struct etcd_stream *st)
{
	if (st->tok)
		json_tokener_free(st->tok);
	st->tok = NULL;
}

/* A refusal drops the half-read message at once (json-c builds it as it
 * reads: it may hold far more memory than its bytes). */
static int stream_refuse(struct etcd_stream *st, int err)
{
	ts_lib_etcd_stream_reset(st);
	return err;
}

int ts_lib_etcd_stream_feed(struct etcd_stream *st, const char *p, size_t len,
			    bool (*message)(json_object *o, void *arg), void *arg)
{
	size_t off = 0;
	while (off < len) {
		while (!st->partial && off < len && p[off] && strchr(" \t\r\n", p[off]))
			off++;
		if (off == len)
			break;
		size_t left = len - off < INT_MAX ? len - off : INT_MAX;
		json_object *o = json_tokener_parse_ex(st->tok, p + off, (int)left);
		enum json_tokener_error err = json_tokener_get_error(st->tok);
		if (err == json_tokener_continue) {
			st->partial += left;
			off += left;
			if (st->partial > st->max)
				return stream_refuse(st, EPROTO);
			continue;
		}
		if (err != json_tokener_success || !o) {
			json_object_put(o);
			return stream_refuse(st, EPROTO);
		}
		off += json_tokener_get_parse_end(st->tok);
		st->partial = 0;
		json_tokener_reset(st->tok);
		bool more = message(o, arg);
		json_object_put(o);
		if (!more)
			return stream_refuse(st, ECANCELED);
	}
	return 0;
}

/* One message: whether to read on; @news runs for news. */
static bool watch_on_message(json_object *o, void *arg)
{
	struct etcd_watch *w = arg;
	if (watch_message(w, o) && !w->failed)
		w->news(w->arg);
	return !w->failed;
}

/* curl's writes of the stream: a short return aborts the transfer. */
static size_t on_stream(char *p, size_t size, size_t n, void *arg)
{
	struct etcd_watch *w = arg;
	if (ts_lib_etcd_stream_feed(&w->stream, p, size * n, watch_on_message, w)) {
		w->failed = true;
		return 0;
	}
	return size * n;
}

/* One connection to @base: until it ends, fails, is not set up in time,
 * or the watch stops.  Returns whether it was set up. */
static bool watch_once(struct etcd_watch *w, const char *base)
{
	char url[512];
	/* hasleader: a node cut off from its cluster's leader ends the
	 * stream ("no leader") instead of keeping it open and silent */
	struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json"), *h2;
	if (hdr && !(h2 = curl_slist_append(hdr, "Grpc-Metadata-hasleader: true"))) {
		curl_slist_free_all(hdr);
		hdr = NULL;
	}
	if (!hdr || (size_t)snprintf(url, sizeof(url), "%s/v3/watch", base) >= sizeof(url)) {
		curl_slist_free_all(hdr);
		return false;
	}
	CURL *c = w->curl;
	curl_easy_reset(c);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, w->body);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_stream);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, w);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, w->setup_ms);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	/* a peer gone without a word (a partition, a dead host) is dropped
	 * within about ten seconds; a stalled but live node is not noticed */
	curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, 2L);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, 1L);
	w->created = w->failed = false;
	ts_lib_etcd_stream_reset(&w->stream);
	bool added = curl_multi_add_handle(w->multi, c) == CURLM_OK;
	atomic_fetch_add_explicit(&w->attempts, 1, memory_order_relaxed);
	int64_t give_up = boottime_ms() + w->setup_ms;
	while (added && !atomic_load_explicit(&w->stop, memory_order_acquire)) {
		int running = 0;
		if (curl_multi_perform(w->multi, &running) != CURLM_OK || !running || w->failed)
			break;
		int64_t now = boottime_ms();
		if (!w->created && now >= give_up)
			break;
		long wait = !w->created && give_up - now < 1000 ? (long)(give_up - now) : 1000;
		if (curl_multi_poll(w->multi, NULL, 0, (int)wait, NULL) != CURLM_OK)
			break;
	}
	if (added)
		curl_multi_remove_handle(w->multi, c);
	curl_slist_free_all(hdr);
	return w->created;
}

/* Sleep @ms, or less when stopped. */
static void watch_pause(struct etcd_watch *w, long ms)
{
	int64_t end = boottime_ms() + ms, now;
	while (!atomic_load_explicit(&w->stop, memory_order_acquire) && (now = boottime_ms()) < end)
		if (curl_multi_poll(w->multi, NULL, 0, (int)(end - now), NULL) != CURLM_OK)
			break; /* cannot wait: pause no more (the caller's pace) */
}

/* The endpoint that set the watch up last, again 100 ms after its stream
 * ends (never a busy loop of reconnections); one that cannot set it up is
 * left for the next, after a pause growing while none can. */
static void *watch_thread(void *arg)
{
	struct etcd_watch *w = arg;
	long pause = 0;
	while (!atomic_load_explicit(&w->stop, memory_order_acquire)) {
		if (watch_once(w, w->urls[w->current])) {
			pause = 100;
		} else {
			w->current = (w->current + 1) % w->nurls;
			pause = pause * 2 < WATCH_MAX_PAUSE_MS ? (pause ? pause * 2 : 100)
							       : WATCH_MAX_PAUSE_MS;
		}
		watch_pause(w, pause);
	}
	return NULL;
}

static void watch_free(struct etcd_watch *w)
{
	for (int i = 0; i < w->nurls; i++)
		free(w->urls[i]);
	if (w->curl)
		curl_easy_cleanup(w->curl);
	if (w->multi)
		curl_multi_cleanup(w->multi);
	ts_lib_etcd_stream_destroy(&w->stream);
	free(w->body);
	free(w->ignore);
	free(w);
}

struct etcd_watch *ts_lib_etcd_watch_start(const char *endpoints, const char *prefix,
					   const char *ignore, int64_t setup_ns,
					   void (*news)(void *arg), void *arg)
{
	if (!curl_ready()) {
		errno = ENOMEM;
		return NULL;
	}
	struct etcd_watch *w = calloc(1, sizeof(*w));
	if (!w || (w->nurls = parse_endpoints(endpoints, w->urls)) < 0) {
		free(w);
		errno = ENOMEM;
		return NULL;
	}
	w->setup_ms = setup_ns / 1000000 > 0 ? (long)(setup_ns / 1000000) : 1;
	w->news = news;
	w->arg = arg;
	json_object *req = json_object_new_object(), *create = json_object_new_object();
	char *end = prefix_end(prefix);
	if (req && create && end) {
		add_b64(create, "key", prefix);
		add_b64(create, "range_end", end);
		json_object_object_add(req, "create_request", create);
		create = NULL;
		const char *body = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
		w->body = body ? strdup(body) : NULL;
	}
	json_object_put(create);
	json_object_put(req);
	free(end);
	w->ignore = b64_encode(ignore, strlen(ignore));
	w->multi = curl_multi_init();
	w->curl = curl_easy_init();
	int err = !w->nurls ? EINVAL
		  : ts_lib_etcd_stream_init(&w->stream, WATCH_MAX_MESSAGE) || !w->body || !w->ignore || !w->multi ||
				  !w->curl
			  ? ENOMEM
		  : pthread_create(&w->thread, NULL, watch_thread, w);
	if (err) {
		watch_free(w);
		errno = err;
		return NULL;
	}
	return w;
}

void ts_lib_etcd_watch_stop(struct etcd_watch *w)
{
	if (!w)
		return;
	atomic_store_explicit(&w->stop, true, memory_order_release);
	curl_multi_wakeup(w->multi);
	pthread_join(w->thread, NULL);
	watch_free(w);
}

uint64_t ts_lib_etcd_watch_setups(const struct etcd_watch *w)
{
	return w ? atomic_load_explicit(&w->setups, memory_order_relaxed) : 0;
}

uint64_t ts_lib_etcd_watch_requests(const struct etcd_watch *w)
{
	return w ? atomic_load_explicit(&w->attempts, memory_order_relaxed) : 0;
}
