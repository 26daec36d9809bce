/* SPDX-License-Identifier: MIT */
/* libturnstile-fleet's watch of the fleet's keys (lib/etcd.h), without
 * etcd: the stream parser fed a watch's answer split at every byte, bad
 * and oversized answers refused; then the watch against a scripted HTTP
 * server on loopback standing in for etcd's gateway: it asks to be told
 * when its node loses the leader; news once set up and for others' keys,
 * never for its own; an endpoint that accepts and never answers is left
 * after the set-up time; a stream ended by an error ("no leader") is set
 * up again; stop ends it while the stream is open. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "etcd.h"
#include "testutil.h"

/* ---- the stream parser ---- */

#define CREATED "{\"result\":{\"header\":{\"revision\":\"7\"},\"created\":true}}"
#define EVENT(k) "{\"result\":{\"events\":[{\"kv\":{\"key\":\"" k "\",\"value\":\"e30=\"}}]}}"

struct seen {
	int messages;
	char last[256];
	int stop_at; /* 0: never */
};

static bool count(json_object *o, void *arg)
{
	struct seen *s = arg;
	s->messages++;
	snprintf(s->last, sizeof(s->last), "%s", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	return s->messages != s->stop_at;
}

Test(etcd_watch, the_stream_split_at_every_byte_gives_each_message_once)
{
	static const char stream[] = CREATED "\n" EVENT("L2E=") "\r\n  " EVENT("L2I=") "\n";
	size_t n = strlen(stream);
	struct etcd_stream st;
	cr_assert_eq(ts_lib_etcd_stream_init(&st, 4096), 0);
	for (size_t cut = 0; cut <= n; cut++) { /* two pieces, cut anywhere */
		struct seen s = { 0 };
		cr_assert_eq(ts_lib_etcd_stream_feed(&st, stream, cut, count, &s), 0);
		cr_assert_eq(ts_lib_etcd_stream_feed(&st, stream + cut, n - cut, count, &s), 0);
		cr_assert_eq(s.messages, 3, "cut at %zu: %d messages", cut, s.messages);
		cr_assert(strstr(s.last, "L2I="), "cut at %zu: last %s", cut, s.last);
	}
	struct seen s = { 0 }; /* a byte at a time */
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(ts_lib_etcd_stream_feed(&st, stream + i, 1, count, &s), 0);
	cr_assert_eq(s.messages, 3);
	ts_lib_etcd_stream_destroy(&st);
}

Test(etcd_watch, an_answer_that_is_not_a_stream_of_messages_is_refused)
{
	static const char *const bad[] = { "<html>502</html>", "null\n", "{\"a\":1}}", "{\"a\":[1,}" };
	struct etcd_stream st;
	cr_assert_eq(ts_lib_etcd_stream_init(&st, 1 << 20), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct seen s = { 0 };
		ts_lib_etcd_stream_reset(&st);
		cr_assert_eq(ts_lib_etcd_stream_feed(&st, bad[i], strlen(bad[i]), count, &s), EPROTO,
			     "%s", bad[i]);
	}
	/* a message that never ends: refused once past the bound (1 MiB
	 * here), not grown for ever */
	ts_lib_etcd_stream_reset(&st);
	struct seen s = { 0 };
	static char chunk[65536];
	memset(chunk, 'x', sizeof(chunk));
	cr_assert_eq(ts_lib_etcd_stream_feed(&st, "{\"k\":\"", 6, count, &s), 0);
	int r = 0, chunks = 0;
	while (!r && chunks < 1000) {
		r = ts_lib_etcd_stream_feed(&st, chunk, sizeof(chunk), count, &s);
		chunks++;
	}
	cr_assert_eq(r, EPROTO);
	cr_assert(chunks <= 16 + 1, "refused only after %d chunks of 64 KiB", chunks);
	/* ...and the stream starts afresh after a refusal */
	struct seen again = { 0 };
	cr_assert_eq(ts_lib_etcd_stream_feed(&st, CREATED, strlen(CREATED), count, &again), 0);
	cr_assert_eq(again.messages, 1);
	/* a message that says stop stops the feed there */
	ts_lib_etcd_stream_reset(&st);
	struct seen two = { .stop_at = 1 };
	static const char pair[] = CREATED CREATED;
	cr_assert_eq(ts_lib_etcd_stream_feed(&st, pair, strlen(pair), count, &two), ECANCELED);
	cr_assert_eq(two.messages, 1);
	ts_lib_etcd_stream_destroy(&st);
}

/* ---- the watch against a scripted gateway ---- */

/* Each connection: the request read whole, then an HTTP/1.1 chunked
 * answer: set up, an event on the watcher's own key, one on another's;
 * then the server waits until told to end the stream with the error a
 * node that lost its leader sends. */
struct gateway {
	int fd, port;
	_Atomic int connections, asked_hasleader;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int ended; /* connections told to end so far (under mu) */
	pthread_t th;
};

static void gateway_end(struct gateway *g, int upto)
{
	pthread_mutex_lock(&g->mu);
	g->ended = upto;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

static void send_chunk(int c, const char *s)
{
	char head[32];
	int n = snprintf(head, sizeof(head), "%zx\r\n", strlen(s));
	/* MSG_NOSIGNAL: a watcher that hung up is no SIGPIPE */
	if (send(c, head, (size_t)n, MSG_NOSIGNAL) < 0 || send(c, s, strlen(s), MSG_NOSIGNAL) < 0)
		return;
	send(c, "\r\n", 2, MSG_NOSIGNAL);
}

static bool read_request(struct gateway *g, int c)
{
	char buf[4096];
	size_t have = 0;
	for (;;) {
		ssize_t r = read(c, buf + have, sizeof(buf) - 1 - have);
		if (r <= 0)
			return false;
		have += (size_t)r;
		buf[have] = '\0';
		char *end = strstr(buf, "\r\n\r\n");
		const char *cl = strcasestr(buf, "content-length:");
		if (end && cl && have >= (size_t)(end + 4 - buf) + (size_t)atoi(cl + 15)) {
			if (strcasestr(buf, "\r\nGrpc-Metadata-hasleader: true\r\n"))
				atomic_fetch_add(&g->asked_hasleader, 1);
			return strstr(buf, "POST /v3/watch") && strstr(buf, "create_request");
		}
	}
}

static void *gateway_main(void *arg)
{
	struct gateway *g = arg;
	for (;;) {
		int c = accept(g->fd, NULL, NULL);
		if (c < 0)
			return NULL; /* closed: the test is over */
		int mine = atomic_fetch_add(&g->connections, 1) + 1;
		if (read_request(g, c)) {
			static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
						   "Transfer-Encoding: chunked\r\n\r\n";
			if (send(c, head, sizeof(head) - 1, MSG_NOSIGNAL) > 0) {
				send_chunk(c, CREATED "\n");
				/* "/w/me" and "/w/you", base64 */
				send_chunk(c, EVENT("L3cvbWU=") "\n");
				send_chunk(c, EVENT("L3cveW91") "\n");
				pthread_mutex_lock(&g->mu);
				while (g->ended < mine)
					pthread_cond_wait(&g->cv, &g->mu);
				pthread_mutex_unlock(&g->mu);
				send_chunk(c, "{\"error\":{\"grpc_code\":14,\"http_code\":503,"
					      "\"message\":\"etcdserver: no leader\"}}\n");
			}
		}
		close(c);
	}
}

static int listener(int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	cr_assert(fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof(a)) && !listen(fd, 8) &&
		  !getsockname(fd, (struct sockaddr *)&a, &len));
	*port = ntohs(a.sin_port);
	return fd;
}

static _Atomic int news;
static void on_news(void *arg)
{
	(void)arg;
	atomic_fetch_add(&news, 1);
}

static void *stop_watch(void *w)
{
	ts_lib_etcd_watch_stop(w);
	return NULL;
}

Test(etcd_watch, news_once_set_up_and_for_others_keys_past_a_hung_endpoint_and_a_lost_leader)
{
	struct gateway g = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	int hung_port;
	int hung = listener(&hung_port); /* accepts (the kernel does), never answers */
	g.fd = listener(&g.port);
	cr_assert_eq(pthread_create(&g.th, NULL, gateway_main, &g), 0);
	char endpoints[128];
	snprintf(endpoints, sizeof(endpoints), "http://127.0.0.1:%d,http://127.0.0.1:%d/", hung_port,
		 g.port);
	atomic_store(&news, 0);
	struct etcd_watch *w =
		ts_lib_etcd_watch_start(endpoints, "/w/", "/w/me", 300000000, on_news, NULL);
	cr_assert_not_null(w);

	/* set up on the second endpoint: news for that and for /w/you */
	WAIT_FOR(atomic_load(&news) == 2);
	cr_assert_eq(ts_lib_etcd_watch_setups(w), 1);
	cr_assert_geq(ts_lib_etcd_watch_requests(w), 2, "the hung endpoint was not tried first");

	/* the node loses its leader and says so: set up again (same endpoint) */
	gateway_end(&g, 1);
	WAIT_FOR(atomic_load(&news) == 4);
	cr_assert_eq(ts_lib_etcd_watch_setups(w), 2);
	cr_assert_eq(atomic_load(&g.connections), 2);
	cr_assert_eq(atomic_load(&g.asked_hasleader), 2, "the watch did not ask to hear of a lost leader");

	/* /w/me's event came between the two counted ones of each stream: had
	 * it been news, the count would be 3 per stream.  Stop, with the
	 * second stream open: it returns (polled, not waited for blindly) */
	pthread_t st;
	start_thread(&st, stop_watch, w);
	join_bounded(st);
	cr_assert_eq(atomic_load(&news), 4);
	gateway_end(&g, 1000);
	shutdown(g.fd, SHUT_RDWR);
	close(g.fd);
	pthread_join(g.th, NULL);
	close(hung);
}

Test(etcd_watch, bad_endpoints_are_refused)
{
	errno = 0;
	cr_assert_null(ts_lib_etcd_watch_start(",, ,", "/w/", "/w/me", 1000000, on_news, NULL));
	cr_assert_eq(errno, EINVAL);
}
