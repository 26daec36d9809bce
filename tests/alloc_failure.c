/* SPDX-License-Identifier: MIT */
/* Out of memory never strands a taker and never surfaces from take.  The
 * waitlist allocates only to grow its ready stack, in put and an event-loop
 * take, outside its lock; taking a creation slot, passing one on a discard
 * or a failed load, handing an item to a waiter, and cancelling an
 * event-loop take that already got an item allocate nothing.
 *
 * A plain program that interposes malloc, calloc and realloc (forwarding to
 * glibc's __libc_* entry points) and fails them on the calling thread while
 * `failing` is set.  Sanitizer builds replace the allocator themselves: it
 * exits 77 (Automake's SKIP) there, and runs in the plain build. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <turnstile.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
int main(void)
{
	puts("alloc_failure: the sanitizer owns malloc here: skipped");
	return 77;
}
#else

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

static _Thread_local int failing;
static int failed_calls;
static void (*while_failing)(void); /* runs inside the first failing call */

void *malloc(size_t n)
{
	if (failing) {
		failed_calls++;
		if (while_failing) {
			void (*fn)(void) = while_failing;
			while_failing = NULL;
			fn();
		}
		return NULL;
	}
	return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
	if (failing) {
		failed_calls++;
		return NULL;
	}
	return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
	if (failing) {
		failed_calls++;
		return NULL;
	}
	return __libc_realloc(p, n);
}

static int failures;
#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "alloc_failure.c:%d: %s\n", __LINE__, #cond); \
			failures++;                                                  \
		}                                                                    \
	} while (0)

static int made(void *arg, void **item)
{
	*item = arg;
	return 0;
}

struct taker {
	ts_waitlist *w;
	int result;
	void *item;
};

static void *take_main(void *p)
{
	struct taker *t = p;
	/* a deadline, so a stranded taker fails the test instead of hanging */
	t->result = ts_waitlist_take(t->w, &t->item, made, (void *)0x5107,
				     ts_now_ns() + 5 * (int64_t)1000000000, NULL);
	return NULL;
}

static size_t waiting(ts_waitlist *w)
{
	size_t n;
	ts_waitlist_stats(w, NULL, NULL, &n);
	return n;
}

/* 4: a taker that queues while a put is out growing the ready stack */
static ts_waitlist *late_pool;
static _Atomic int late_go;
static struct taker late = { NULL, -1, NULL };

static void *late_main(void *p)
{
	while (!atomic_load(&late_go))
		sched_yield();
	late.result = ts_waitlist_take(late_pool, &late.item, NULL, NULL,
				       ts_now_ns() + 5 * (int64_t)1000000000, NULL);
	return p;
}

static void queue_the_late_taker(void)
{
	int64_t end = ts_now_ns() + 5 * (int64_t)1000000000;
	atomic_store(&late_go, 1);
	while (waiting(late_pool) != 1 && ts_now_ns() < end)
		sched_yield();
}

static void never_called(ts_async *node, int result, void *arg)
{
	(void)node, (void)result, (void)arg;
	failures++;
}

/* 5: an event-loop take that got an item and is cancelled before its
 * dispatch, with no memory and every place on the ready stack taken but
 * the one the taker kept: the item goes back there; EALREADY, never a
 * failure the caller would have to handle. */
static void cancel_after_the_grant_with_no_memory(void)
{
	ts_waitlist *pool = ts_waitlist_new(1, 0);
	ts_notifier *n = ts_notifier_new();
	ts_async node = TS_ASYNC_INIT;
	void *held = NULL, *got = NULL;

	CHECK(pool && n);
	CHECK(ts_waitlist_take(pool, &held, made, (void *)0xC0, 0, NULL) == 0);
	CHECK(ts_waitlist_take_async(pool, 0, NULL, n, &node, never_called, NULL, &got) ==
	      EINPROGRESS);
	CHECK(ts_waitlist_put(pool, held)); /* to the async taker: granted */
	for (uintptr_t i = 1; i <= 8; i++) /* 8: a whole first stack */
		CHECK(ts_waitlist_put(pool, (void *)i));
	int calls = failed_calls;
	failing = 1;
	int r = ts_async_cancel(&node);
	failing = 0;
	CHECK(r == EALREADY);
	CHECK(failed_calls == calls); /* nothing even tried to allocate */
	CHECK(ts_notifier_dispatch(n) == 0);
	bool back = false;
	int items = 0;
	while (ts_waitlist_try_take(pool, &got)) {
		back |= got == (void *)0xC0;
		items++;
	}
	CHECK(back && items == 9);
	CHECK(ts_notifier_free(n) == 0);
	ts_waitlist_free(pool);
}

int main(void)
{
	ts_waitlist *w = ts_waitlist_new(1, 0);
	void *item = NULL;

	/* 1. a take that gets a creation slot allocates nothing */
	failing = 1;
	CHECK(ts_waitlist_take(w, &item, made, (void *)0xA, 0, NULL) == 0);
	failing = 0;
	CHECK(item == (void *)0xA);

	/* 2. a discard passes the slot to a queued taker without allocating */
	struct taker t = { w, -1, NULL };
	pthread_t th;
	if (pthread_create(&th, NULL, take_main, &t))
		return 1;
	int64_t end = ts_now_ns() + 5 * (int64_t)1000000000;
	while (waiting(w) != 1 && ts_now_ns() < end)
		sched_yield();
	CHECK(waiting(w) == 1);
	failing = 1;
	ts_waitlist_discard(w);
	failing = 0;
	pthread_join(th, NULL);
	CHECK(t.result == 0 && t.item == (void *)0x5107);

	/* 3. a put with nobody waiting and no memory to grow the ready stack:
	 * false, the caller keeps the item; with memory, the same put works */
	failing = 1;
	bool kept = !ts_waitlist_put(w, t.item);
	failing = 0;
	CHECK(kept);
	CHECK(ts_waitlist_put(w, t.item));
	CHECK(ts_waitlist_try_take(w, &item) && item == (void *)0x5107);
	ts_waitlist_free(w);

	/* 4. the growth fails, but a taker queued meanwhile: it gets the item */
	void *held;
	late_pool = ts_waitlist_new(1, 0);
	CHECK(ts_waitlist_take(late_pool, &held, made, (void *)0x1a7e, 0, NULL) == 0);
	pthread_t lt;
	if (pthread_create(&lt, NULL, late_main, NULL))
		return 1;
	while_failing = queue_the_late_taker;
	failing = 1;
	bool put_ok = ts_waitlist_put(late_pool, held);
	failing = 0;
	pthread_join(lt, NULL);
	CHECK(put_ok);
	CHECK(late.result == 0 && late.item == (void *)0x1a7e);
	ts_waitlist_free(late_pool);

	cancel_after_the_grant_with_no_memory();

	CHECK(failed_calls >= 1); /* the put's growth really failed */
	if (failures)
		return 1;
	puts("alloc_failure: no taker stranded, take never ENOMEM, put fails cleanly");
	return 0;
}
#endif
