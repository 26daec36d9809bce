/* SPDX-License-Identifier: MIT */
/* etcd's JSON gateway, the calls a fleet member makes (etcd.h). */
#include "etcd.h"

#include <errno.h>
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

struct etcd *ts_lib_etcd_new(const char *endpoints, int64_t timeout_ns)
{
	pthread_once(&curl_once, curl_init);
	if (curl_init_result != CURLE_OK) {
		errno = ENOMEM;
		return NULL;
	}
	struct etcd *e = calloc(1, sizeof(*e));
	char *list = endpoints ? strdup(endpoints) : NULL;
	if (!e || !list) {
		free(e);
		free(list);
		errno = endpoints ? ENOMEM : EINVAL;
		return NULL;
	}
	char *save = NULL;
	for (char *u = strtok_r(list, ",", &save); u && e->nurls < ETCD_MAX_ENDPOINTS;
	     u = strtok_r(NULL, ",", &save)) {
		while (*u == ' ')
			u++;
		size_t n = strlen(u);
		while (n && u[n - 1] == '/')
			u[--n] = '\0';
		if (n && !(e->urls[e->nurls++] = strdup(u))) {
			free(list);
			ts_lib_etcd_free(e);
			errno = ENOMEM;
			return NULL;
		}
	}
	free(list);
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
