/* SPDX-License-Identifier: MIT */
/* One order across processes: waiters queued from different processes are
 * granted by band, then since, then seq, then arrival; a returned pass goes
 * to the head waiter, never to a newcomer (no barging), even when the
 * returner is the newcomer; a pass parked in one process's cache serves
 * another process's wait; a waiter anyone can see queued is never passed
 * by a process's own cache. */
#include "procs.h"
#include "hook.h"

#define WAITERS 12

struct log {
	_Atomic int n;
	int order[64];
	_Atomic int go;      /* the cache test's turns */
	_Atomic int release; /* the order test's holders may return */
};

static int fd;
static struct log *lg;
static ts_claim claims[WAITERS];

static int queued_waiter(void *arg)
{
	int i = (int)(intptr_t)arg;
	ts_turnstile *t = ts_shared_attach(fd);
	ts_pass p;
	CHECK(t);
	CHECK_EQ(ts_turnstile_wait(t, &claims[i], ts_now_ns() + PATIENCE_NS, NULL, &p), 0);
	lg->order[atomic_fetch_add(&lg->n, 1)] = i;
	/* the head holds its pass until the parent's try is done: else the
	 * whole queue may run through before the try, and find it free */
	POLL_UNTIL(atomic_load(&lg->release));
	ts_pass_return(&p);
	ts_turnstile_free(t);
	return 0;
}

static bool before(const ts_claim *a, int ia, const ts_claim *b, int ib)
{
	if (a->priority != b->priority)
		return a->priority < b->priority;
	if (a->since_ns != b->since_ns)
		return a->since_ns < b->since_ns;
	if (a->seq != b->seq)
		return a->seq < b->seq;
	return ia < ib; /* arrival: spawned in index order */
}

static void granted_in_claim_order_across_processes(void)
{
	fd = turnstile_file(1, NULL);
	ts_turnstile *t = ts_shared_attach(fd);
	ts_pass held, p;
	pid_t kids[WAITERS];
	CHECK_EQ(ts_turnstile_wait(t, &(ts_claim){ 0, 0, 0 }, 0, NULL, &held), 0);
	for (int i = 0; i < WAITERS; i++) {
		/* bands 0..2, sinces and seqs that collide on purpose */
		claims[i] = (ts_claim){ (i * 7) % 3, 1000 + (i * 5) % 4, (uint64_t)((i * 3) % 2) };
		kids[i] = spawn(queued_waiter, (void *)(intptr_t)i);
		POLL_UNTIL(shared_waiting(t) == i + 1); /* arrival order is spawn order */
	}
	ts_pass_return(&held);
	/* the pass went to the head: this process's try finds none */
	CHECK_EQ(ts_turnstile_wait(t, &(ts_claim){ -5, 0, 0 }, TS_DEADLINE_NOW, NULL, &p),
		 ETIMEDOUT);
	atomic_store(&lg->release, 1);
	for (int i = 0; i < WAITERS; i++)
		reap_ok(kids[i]);
	CHECK_EQ(atomic_load(&lg->n), WAITERS);
	for (int k = 1; k < WAITERS; k++) {
		int a = lg->order[k - 1], b = lg->order[k];
		if (!before(&claims[a], a, &claims[b], b)) {
			fprintf(stderr, "granted %d before %d\n", a, b);
			_exit(1);
		}
	}
	CHECK_EQ(shared_available(t), 1);
	ts_turnstile_free(t);
	close(fd);
}

/* Process A takes and returns a pass (the fast path parks it in A's
 * cache) and stays attached; process B's wait must still get it. */
static int cache_owner(void *arg)
{
	(void)arg;
	ts_turnstile *t = ts_shared_attach(fd);
	ts_pass p;
	CHECK_EQ(ts_turnstile_wait(t, &(ts_claim){ 0, 0, 0 }, 0, NULL, &p), 0);
	ts_pass_return(&p);
	CHECK_EQ(ts_turnstile_wait(t, &(ts_claim){ 0, 0, 0 }, 0, NULL, &p), 0);
	ts_pass_return(&p);
	atomic_store(&lg->go, 1);
	POLL_UNTIL(atomic_load(&lg->go) == 2);
	ts_turnstile_free(t);
	return 0;
}

static void a_cached_pass_serves_another_process(void)
{
	fd = turnstile_file(1, NULL);
	atomic_store(&lg->go, 0);
	pid_t a = spawn(cache_owner, NULL);
	POLL_UNTIL(atomic_load(&lg->go) == 1);
	ts_turnstile *t = ts_shared_attach(fd);
	ts_pass p;
	CHECK_EQ(shared_available(t), 1);
	CHECK_EQ(ts_turnstile_wait(t, &(ts_claim){ 0, 0, 0 }, TS_DEADLINE_NOW, NULL, &p), 0);
	CHECK_EQ(shared_available(t), 0);
	atomic_store(&lg->go, 2);
	reap_ok(a);
	ts_pass_return(&p);
	ts_turnstile_free(t);
	close(fd);
}

/* The first waiter, held by the hook in the middle of its drain (the lock
 * held, its own process drained, the parent's not yet) until the parent
 * has looked, returned and tried. */
static void stall_in_drain(enum ts_hook_point point, void *obj)
{
	static bool stalled;
	(void)obj;
	if (point != TS_HOOK_DRAINING || stalled)
		return;
	stalled = true;
	atomic_store(&lg->go, 2);
	/* bounded: a parent blocked on the lock (a bug) must not hang us */
	int64_t end = ts_now_ns() + 2000000000;
	while (atomic_load(&lg->go) != 3 && ts_now_ns() < end)
		sched_yield();
}

static int first_waiter(void *arg)
{
	(void)arg;
	ts_turnstile *t = ts_shared_attach(fd); /* the first slot: drained first */
	ts_pass p;
	CHECK(t);
	atomic_store(&lg->go, 1);
	POLL_UNTIL(shared_available(t) == 0); /* the parent holds the pass */
	atomic_store(&ts_hook, stall_in_drain);
	CHECK_EQ(ts_turnstile_wait(t, &(ts_claim){ 0, 0, 0 }, ts_now_ns() + PATIENCE_NS, NULL, &p),
		 0);
	atomic_store(&ts_hook, NULL);
	ts_pass_return(&p);
	ts_turnstile_free(t);
	return 0;
}

/* While a first waiter drains the processes one by one, a process it has
 * not reached yet may still return a pass to its own cache and take it
 * back; but once anyone can see the waiter queued, no process may: the
 * waiter is published only after the drain (lib/shared.c, enqueue).
 * Published before it, this process saw 1 waiting and took its pass back
 * past it (found by bench/shared's order audit). */
static void a_waiter_seen_queued_is_not_barged_past(void)
{
	fd = turnstile_file(1, NULL);
	atomic_store(&lg->go, 0);
	pid_t w = spawn(first_waiter, NULL);
	POLL_UNTIL(atomic_load(&lg->go) == 1);
	ts_turnstile *t = ts_shared_attach(fd);
	ts_pass p;
	CHECK_EQ(ts_turnstile_wait(t, &(ts_claim){ 0, 0, 0 }, 0, NULL, &p), 0);
	POLL_UNTIL(atomic_load(&lg->go) == 2); /* the waiter is mid-drain */
	int64_t seen = shared_waiting(t);
	ts_pass_return(&p);
	int r = ts_turnstile_wait(t, &(ts_claim){ 0, 0, 0 }, TS_DEADLINE_NOW, NULL, &p);
	atomic_store(&lg->go, 3);
	if (seen > 0 && r == 0) {
		fprintf(stderr, "a pass taken back past a waiter seen queued\n");
		_exit(1);
	}
	CHECK(r == 0 || r == ETIMEDOUT);
	if (r == 0)
		ts_pass_return(&p); /* the drain is over: to the waiter */
	reap_ok(w);
	CHECK_EQ(shared_available(t), 1);
	ts_turnstile_free(t);
	close(fd);
}

int main(void)
{
	lg = shared_memory(sizeof(*lg));
	granted_in_claim_order_across_processes();
	a_cached_pass_serves_another_process();
	a_waiter_seen_queued_is_not_barged_past();
	printf("shared_order: ok\n");
	return 0;
}
