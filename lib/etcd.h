/* SPDX-License-Identifier: MIT */
/* Private to libturnstile-fleet: the few etcd v3 calls a fleet member
 * makes, through etcd's JSON gateway (POST [endpoint]/v3/..., keys and
 * values base64 in JSON) with libcurl and json-c.
 *
 * One client per member, used by one thread at a time (the member's lock).
 * Every call has a timeout for the whole call: one that fails on one
 * endpoint (refused, timed out, a 5xx) is tried on each of the others,
 * each endpoint left getting its slice of the time left, so a node that
 * refuses, hangs or has lost its leader costs at most its slice, never the
 * member; the endpoint that answered is tried first from then on.  Results: 0 or a
 * positive errno value — ECONNREFUSED or ETIMEDOUT (no endpoint answered),
 * EPROTO (an answer that is not what etcd sends), ENOMEM. */
#ifndef TS_LIB_ETCD_H
#define TS_LIB_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

struct etcd;

/* @endpoints: comma-separated client URLs.  NULL with errno set (EINVAL:
 * no endpoint; ENOMEM). */
struct etcd *ts_lib_etcd_new(const char *endpoints, int64_t timeout_ns);
void ts_lib_etcd_free(struct etcd *e);

/* A deadline (CLOCK_BOOTTIME ns; 0: none) no call may run past, whatever
 * its timeout: a fleet member's freshness (fleet.c, rule 3). */
void ts_lib_etcd_set_deadline(struct etcd *e, int64_t deadline_ns);

/* Requests sent so far (each endpoint tried counts), for the tests'
 * traffic figures. */
uint64_t ts_lib_etcd_requests(const struct etcd *e);

int ts_lib_etcd_lease_grant(struct etcd *e, int64_t ttl_s, int64_t *id);
/* *@ttl_s is 0 when the lease is gone (expired or revoked). */
int ts_lib_etcd_lease_keepalive(struct etcd *e, int64_t id, int64_t *ttl_s);
int ts_lib_etcd_lease_revoke(struct etcd *e, int64_t id);

/* Put @value at @key, under @lease (0: none). */
int ts_lib_etcd_put(struct etcd *e, const char *key, const char *value, int64_t lease);

struct etcd_kv {
	char *key, *value; /* decoded, NUL-terminated */
	size_t value_len;
	int64_t create_rev, mod_rev, version, lease;
};

/* Every key under @prefix (prefix itself included).  Free with
 * ts_lib_etcd_kvs_free. */
int ts_lib_etcd_range_prefix(struct etcd *e, const char *prefix, struct etcd_kv **kvs, size_t *n);
void ts_lib_etcd_kvs_free(struct etcd_kv *kvs, size_t n);

/* A transaction's parts: compares and operations, appended to arrays made
 * by json_object_new_array().  @lease 0: none. */
void ts_lib_etcd_cmp(json_object *cmps, const char *key, const char *target, int64_t value);
void ts_lib_etcd_op_put(json_object *ops, const char *key, const char *value, int64_t lease);
/* Run compares (all EQUAL) and then @success, or @failure (may be NULL);
 * consumes the arrays.  *@succeeded: whether the compares held. */
int ts_lib_etcd_txn(struct etcd *e, json_object *cmps, json_object *success, json_object *failure,
		    bool *succeeded);

/* A stream of JSON messages one after another (a watch's answer), split
 * anywhere between reads: ts_lib_etcd_stream_feed hands each whole message
 * to @message (which returns whether to read on) and keeps a partial one
 * for the next feed.  0, or EPROTO (not JSON, not a message, or one above
 * @max bytes: the stream is not to be trusted further) or ECANCELED
 * (@message said stop); either drops the partial message (the stream
 * starts afresh). */
struct etcd_stream {
	json_tokener *tok;
	size_t partial; /* bytes of the message being read */
	size_t max;
};
int ts_lib_etcd_stream_init(struct etcd_stream *st, size_t max); /* 0 or ENOMEM */
void ts_lib_etcd_stream_reset(struct etcd_stream *st);
void ts_lib_etcd_stream_destroy(struct etcd_stream *st);
int ts_lib_etcd_stream_feed(struct etcd_stream *st, const char *p, size_t len,
			    bool (*message)(json_object *o, void *arg), void *arg);

/* A watch of every key under @prefix, on a connection and a thread of its
 * own: @news(@arg) runs on that thread when the watch is set up (what
 * changed before went unseen) and for each message with an event on a key
 * other than @ignore.  A hint, never the truth: the caller reads what
 * changed.  A stream that ends (its node went away, or lost its leader:
 * the watch asks to be told) is set up again on the same endpoint after
 * 100 ms; an endpoint that does not set it up within @setup_ns, or
 * refuses, is left for the next one, after a pause that grows to 2 s
 * while none sets it up.  A message above 1 MiB ends the stream.  Not
 * noticed: a node that stalls with the connection open (frozen, not
 * dead), until TCP keepalive or its restart ends it.  NULL with errno
 * (EINVAL: no endpoint; ENOMEM; or pthread_create's). */
struct etcd_watch;
struct etcd_watch *ts_lib_etcd_watch_start(const char *endpoints, const char *prefix,
					   const char *ignore, int64_t setup_ns,
					   void (*news)(void *arg), void *arg);
/* Stop the watch, wait for its thread (no @news runs after) and free it.
 * Not from @news. */
void ts_lib_etcd_watch_stop(struct etcd_watch *w);
/* Times the watch was set up (tests: it reconnects), and connections
 * tried (each a request, for the traffic figures). */
uint64_t ts_lib_etcd_watch_setups(const struct etcd_watch *w);
uint64_t ts_lib_etcd_watch_requests(const struct etcd_watch *w);

#endif
