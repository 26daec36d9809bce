/* SPDX-License-Identifier: MIT */
/* Notifier: one per event-loop thread — the completion stack granters push
 * to, the fd that tells the loop, its deadline heap, and dispatch.  The
 * protocol and who owns what: lib/async.h. */
#include <turnstile/async.h>

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "async.h"
#include "busy.h"
#include "doorbell.h"
#include "hook.h"
#include "probe.h"

struct ts_notifier {
	/* written by granting threads */
	_Alignas(64) _Atomic(struct async_node *) stack;
	_Atomic uint32_t signalled; /* 1: the fd is written, or a dispatch runs (async.h) */
	_Atomic uint32_t holds;     /* granters between push and release (busy.h) */
	_Atomic uint64_t completions, fd_writes;
	/* LOOP-LOCAL: the loop calls ts_notifier_before_poll on every turn;
	 * which thread it is (this_thread()), 0 before the first call.
	 * Written by the loop only when it changes. */
	_Atomic uint64_t loop_thread;
	/* the loop thread's alone */
	_Alignas(64) int epfd, evfd, tfd;
	bool dispatching;
	size_t pending;
	struct async_node *ready_head, *ready_tail;
	struct async_node **heap; /* min-heap of pending deadlines */
	size_t heap_len, heap_room;
	int64_t armed_at; /* the timerfd's deadline, 0: disarmed */
	uint64_t callbacks, timeouts;
	/* doorbell waits (ASYNC_SHARED_TURN, doorbell.h) */
	_Atomic uint32_t poked; /* a doorbell wait's token fired: look */
	int dbfd;               /* the doorbell, -1 until first used */
	uint64_t dbid;
	struct async_node *remote_head;
	int64_t look_at;        /* the next look for the dead (recover_ns / 2) */
};

TS_API ts_notifier *ts_notifier_new(void)
{
	ts_notifier *n = aligned_alloc(64, sizeof(*n));
	if (!n) {
		errno = ENOMEM;
		return NULL;
	}
	*n = (ts_notifier){ .epfd = -1, .evfd = -1, .tfd = -1, .dbfd = -1 };
	n->epfd = epoll_create1(EPOLL_CLOEXEC);
	n->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	n->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN };
	if (n->epfd < 0 || n->evfd < 0 || n->tfd < 0 ||
	    epoll_ctl(n->epfd, EPOLL_CTL_ADD, n->evfd, &ev) ||
	    epoll_ctl(n->epfd, EPOLL_CTL_ADD, n->tfd, &ev)) {
		int err = errno;
		for (int *fd = &n->epfd; fd <= &n->tfd; fd++)
			if (*fd >= 0)
				close(*fd);
		free(n);
		errno = err;
		return NULL;
	}
	return n;
}

TS_API int ts_notifier_free(ts_notifier *n)
{
	if (!n)
		return EINVAL;
	if (n->pending || n->dispatching) /* a callback may not free its own notifier */
		return EBUSY;
	busy_wait_idle(&n->holds); /* a granter may still owe its kick */
	close(n->epfd);
	close(n->evfd);
	close(n->tfd);
	if (n->dbfd >= 0)
		close(n->dbfd);
	free(n->heap);
	free(n);
	return 0;
}

TS_API int ts_notifier_fd(const ts_notifier *n)
{
	if (!n) {
		errno = EINVAL;
		return -1;
	}
	return n->epfd;
}

TS_API void ts_notifier_read_counters(const ts_notifier *n, ts_notifier_counters *out)
{
	if (!out)
		return;
	*out = (ts_notifier_counters){ 0 };
	if (!n)
		return;
	out->callbacks = n->callbacks;
	out->completions = atomic_load_explicit(&n->completions, memory_order_relaxed);
	out->fd_writes = atomic_load_explicit(&n->fd_writes, memory_order_relaxed);
	out->timeouts = n->timeouts;
}

/* --- the granting side (any thread) ------------------------------------ */

static void notifier_release(void *ctx, bool kick);

/* The seam's async half (waiter_grant): under the queue lock of @a. */
void ts_lib_async_complete(struct async_node *a, uint32_t outcome, struct wakeups *wk)
{
	waiter *w = async_waiter(a);

	atomic_store_explicit(&w->state, outcome, memory_order_release);
	ts_hook_at(TS_HOOK_GRANTED, &w->state);
	ts_lib_notifier_push(a, wk);
}

/* A number for the calling thread, never given to another (LOOP-LOCAL:
 * a thread's address would be reused by a later thread). */
static _Thread_local uint64_t thread_number;
static _Atomic uint64_t next_thread_number = 1;

static uint64_t this_thread(void)
{
	if (!thread_number)
		thread_number = atomic_fetch_add_explicit(&next_thread_number, 1,
							  memory_order_relaxed);
	return thread_number;
}

/* Push @a, whose final state is published, onto its notifier's stack.
 *
 * LOOP-LOCAL: a push made by the thread that a loop calling
 * ts_notifier_before_poll on every turn last named (a pass returned or an
 * item put from its socket handlers or callbacks) owes no kick — no
 * signalled exchange, no fd write: this very thread runs before_poll (or
 * dispatch) before it can block, and that call looks at the stack.  The
 * thread is read after the push, both seq_cst as are before_poll's store
 * and its look at the stack: if the notifier moved to another loop, either
 * that loop's look comes after our push and finds the node, or our read
 * sees the new loop and we kick as any other thread does. */
void ts_lib_notifier_push(struct async_node *a, struct wakeups *wk)
{
	ts_notifier *n = a->notifier;

	/* The hold first: once pushed, the node may be dispatched and the
	 * notifier freed, but not while we hold it. */
	atomic_fetch_add_explicit(&n->holds, 1, memory_order_relaxed);
	struct async_node *top = atomic_load_explicit(&n->stack, memory_order_relaxed);
	do
		a->stack_next = top;
	while (!atomic_compare_exchange_weak_explicit(&n->stack, &top, a, memory_order_seq_cst,
						      memory_order_relaxed));
	/* @a is the loop's now: not touched again */
	atomic_fetch_add_explicit(&n->completions, 1, memory_order_relaxed);
	bool local = atomic_load_explicit(&n->loop_thread, memory_order_seq_cst) == this_thread();
	bool kick = !local && !atomic_exchange_explicit(&n->signalled, 1, memory_order_acq_rel);
	wakeups_add_call(wk, notifier_release, n, kick);
}

/* A doorbell wait's token fired (token lock held): dispatch must look.
 * The hold keeps the notifier alive until the kick is written. */
void ts_lib_notifier_poke(ts_notifier *n, struct wakeups *wk)
{
	atomic_fetch_add_explicit(&n->holds, 1, memory_order_relaxed);
	atomic_store_explicit(&n->poked, 1, memory_order_release);
	bool kick = !atomic_exchange_explicit(&n->signalled, 1, memory_order_acq_rel);
	wakeups_add_call(wk, notifier_release, n, kick);
}

static void write_fd(ts_notifier *n)
{
	uint64_t one = 1;
	/* A system call: never under a library lock (hook.h), as futex calls. */
	TS_CHECK_NO_LOCK_HELD("the notifier's eventfd write");
	atomic_fetch_add_explicit(&n->fd_writes, 1, memory_order_relaxed);
	/* Cannot fail but on counter overflow (EAGAIN), which still leaves
	 * the fd readable. */
	ssize_t r = write(n->evfd, &one, sizeof(one));
	(void)r;
}

/* After the queue lock is dropped (wakeups_flush): the call the node's
 * tell left in the wake-ups. */
static void notifier_release(void *ctx, bool kick)
{
	ts_notifier *n = ctx;
	ts_hook_at(TS_HOOK_KICKING, n);
	if (kick)
		write_fd(n);
	busy_leave(&n->holds); /* the last touch of n */
}

/* --- doorbell waits (loop thread) --------------------------------------- */

static void arm(ts_notifier *n);

int ts_lib_notifier_doorbell(ts_notifier *n, uint64_t *id)
{
	if (n->dbfd >= 0) {
		*id = n->dbid;
		return 0;
	}
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errno;
	for (int tries = 0; tries < 8; tries++) {
		uint64_t bell;
		struct sockaddr_un a;
		if (getrandom(&bell, sizeof(bell), 0) != (ssize_t)sizeof(bell))
			break;
		if (!bell)
			continue;
		socklen_t len = ts_lib_doorbell_address(bell, &a);
		if (bind(fd, (struct sockaddr *)&a, len) == 0) {
			struct epoll_event ev = { .events = EPOLLIN };
			if (epoll_ctl(n->epfd, EPOLL_CTL_ADD, fd, &ev))
				break;
			n->dbfd = fd;
			*id = n->dbid = bell;
			return 0;
		}
		if (errno != EADDRINUSE)
			break;
	}
	int err = errno ? errno : EIO;
	close(fd);
	return err;
}

void ts_lib_notifier_remote_add(ts_notifier *n, struct async_node *a)
{
	a->remote_prev = NULL;
	a->remote_next = n->remote_head;
	if (a->remote_next)
		a->remote_next->remote_prev = a;
	n->remote_head = a;
	a->in_remote = true;
	if (!n->look_at) {
		n->look_at = ts_now_ns() + ts_lib_shared_recover_ns(a->object) / 2;
		arm(n);
	}
}

void ts_lib_notifier_remote_remove(ts_notifier *n, struct async_node *a)
{
	if (!a->in_remote)
		return;
	if (a->remote_prev)
		a->remote_prev->remote_next = a->remote_next;
	else
		n->remote_head = a->remote_next;
	if (a->remote_next)
		a->remote_next->remote_prev = a->remote_prev;
	a->in_remote = false;
	if (!n->remote_head)
		n->look_at = 0;
}

/* The doorbell rang, a token fired, or recover_ns / 2 passed: drain the
 * doorbell, then look at every doorbell wait (a grant publishes its state
 * before it rings, so a state missed here rings again after the drain).
 * When it is time, each one's turnstile is also swept for the dead: a
 * granter that died before ringing, a holder that died. */
static void look_remote(ts_notifier *n, int64_t now)
{
	char buf[64];
	bool rang = false;
	if (n->dbfd >= 0)
		while (recv(n->dbfd, buf, sizeof(buf), MSG_DONTWAIT) >= 0)
			rang = true;
	bool poked = atomic_exchange_explicit(&n->poked, 0, memory_order_acq_rel);
	bool due = n->look_at && now >= n->look_at;
	if (!n->remote_head || !(rang || poked || due))
		return;
	for (struct async_node *a = n->remote_head, *next; a; a = next) {
		next = a->remote_next; /* a look may take @a off the list */
		if (due)
			ts_lib_shared_poll(a->object);
		ts_lib_async_look(a);
	}
	if (due && n->remote_head)
		n->look_at = now + ts_lib_shared_recover_ns(n->remote_head->object) / 2;
}

/* --- the ready list (loop thread) --------------------------------------- */

static void ready_append(ts_notifier *n, struct async_node *a)
{
	a->ready_next = NULL;
	a->ready_prev = n->ready_tail;
	if (n->ready_tail)
		n->ready_tail->ready_next = a;
	else
		n->ready_head = a;
	n->ready_tail = a;
	a->in_ready = true;
}

void ts_lib_notifier_unready(ts_notifier *n, struct async_node *a)
{
	if (!a->in_ready)
		return;
	if (a->ready_prev)
		a->ready_prev->ready_next = a->ready_next;
	else
		n->ready_head = a->ready_next;
	if (a->ready_next)
		a->ready_next->ready_prev = a->ready_prev;
	else
		n->ready_tail = a->ready_prev;
	a->in_ready = false;
}

/* Move every pushed completion to the ready list, oldest first (the stack
 * is newest first). */
void ts_lib_notifier_collect(ts_notifier *n)
{
	struct async_node *a = atomic_exchange_explicit(&n->stack, NULL, memory_order_acquire);
	struct async_node *oldest_first = NULL;

	while (a) {
		struct async_node *next = a->stack_next;
		a->stack_next = oldest_first;
		oldest_first = a;
		a = next;
	}
	for (a = oldest_first; a; a = a->stack_next) {
		/* a granter found its deadline passed: a timeout all the same */
		if (atomic_load_explicit(&async_waiter(a)->state, memory_order_relaxed) ==
		    WAITER_EXPIRED)
			n->timeouts++;
		ready_append(n, a);
	}
}

/* --- the deadline heap (loop thread) ------------------------------------ */

static bool heap_less(const ts_notifier *n, size_t i, size_t j)
{
	return n->heap[i]->deadline_ns < n->heap[j]->deadline_ns;
}

static void heap_swap(ts_notifier *n, size_t i, size_t j)
{
	struct async_node *t = n->heap[i];
	n->heap[i] = n->heap[j];
	n->heap[j] = t;
	n->heap[i]->heap_slot = i + 1;
	n->heap[j]->heap_slot = j + 1;
}

static void heap_up(ts_notifier *n, size_t i)
{
	while (i > 0 && heap_less(n, i, (i - 1) / 2)) {
		heap_swap(n, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static void heap_down(ts_notifier *n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < n->heap_len && heap_less(n, l, m))
			m = l;
		if (r < n->heap_len && heap_less(n, r, m))
			m = r;
		if (m == i)
			return;
		heap_swap(n, i, m);
		i = m;
	}
}

int ts_lib_notifier_reserve(ts_notifier *n)
{
	if (n->heap_len < n->heap_room)
		return 0;
	TS_CHECK_NO_LOCK_HELD("the deadline heap's realloc");
	size_t room = n->heap_room ? 2 * n->heap_room : 64;
	struct async_node **h = realloc(n->heap, room * sizeof(*h));
	if (!h)
		return ENOMEM;
	n->heap = h;
	n->heap_room = room;
	return 0;
}

static void heap_remove(ts_notifier *n, struct async_node *a)
{
	size_t i = a->heap_slot - 1;
	a->heap_slot = 0;
	if (i != --n->heap_len) {
		n->heap[i] = n->heap[n->heap_len];
		n->heap[i]->heap_slot = i + 1;
		heap_up(n, i);
		heap_down(n, i);
	}
}

/* Arm the timerfd for the earliest deadline when that is sooner than what
 * it is armed for.  A later deadline leaves it armed early: it then fires
 * once for nothing and dispatch arms it again. */
static void arm(ts_notifier *n)
{
	if (!n->heap_len && !n->look_at)
		return;
	int64_t d = n->heap_len ? n->heap[0]->deadline_ns : n->look_at;
	if (n->look_at && n->look_at < d)
		d = n->look_at;
	if (n->armed_at && n->armed_at <= d)
		return;
	struct itimerspec its = { .it_value = { d / 1000000000, d % 1000000000 } };
	TS_CHECK_NO_LOCK_HELD("timerfd_settime");
	if (timerfd_settime(n->tfd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
		n->armed_at = d;
}

/* A wait became pending (heap room reserved by ts_lib_notifier_reserve). */
void ts_lib_notifier_track(ts_notifier *n, struct async_node *a)
{
	n->pending++;
	if (a->deadline_ns) {
		n->heap[n->heap_len] = a;
		a->heap_slot = ++n->heap_len;
		heap_up(n, n->heap_len - 1);
		arm(n);
	}
}

/* A wait stops being pending: its callback begins, or it was cancelled. */
void ts_lib_notifier_untrack(ts_notifier *n, struct async_node *a)
{
	if (a->heap_slot)
		heap_remove(n, a);
	n->pending--;
}

/* Read the timerfd once it has fired, whatever is pending now: a wait
 * granted before its deadline leaves the timer armed, and an unread
 * expiry would keep the fd readable (the loop spinning) for nothing.
 * Then withdraw every pending wait whose deadline passed; those withdrawn
 * go to the ready list with ETIMEDOUT.  One whose state was already final
 * is on the stack or the ready list with its outcome.  Either way its
 * deadline leaves the heap. */
static void expire(ts_notifier *n)
{
	if (!n->heap_len && !n->armed_at) {
		arm(n); /* a look for the dead may be due later */
		return;
	}
	int64_t now = ts_now_ns();
	if (n->armed_at && now >= n->armed_at) {
		uint64_t ticks;
		TS_CHECK_NO_LOCK_HELD("the notifier's timerfd read");
		ssize_t r = read(n->tfd, &ticks, sizeof(ticks)); /* EAGAIN is fine */
		(void)r;
		n->armed_at = 0;
	}
	while (n->heap_len && n->heap[0]->deadline_ns <= now) {
		struct async_node *a = n->heap[0];
		heap_remove(n, a);
		uint32_t s = ts_lib_async_withdraw(a, WAITER_EXPIRED, NULL);
		if (s < WAITER_FINAL) {
			n->timeouts++;
			ready_append(n, a);
		}
	}
	arm(n);
}

/* What the callback is told, from the node's final state (recorded for
 * ts_async_result before failing open). */
static int result_of(struct async_node *a, int64_t now)
{
	uint32_t s = atomic_load_explicit(&async_waiter(a)->state, memory_order_acquire);

	a->pass = (ts_pass)TS_PASS_NONE;
	a->item = NULL;
	if (s == WAITER_GRANTED && a->kind != ASYNC_TAKE) {
		a->pass.private_turnstile = a->kind == ASYNC_SHARED_TURN ? a->pass_name : a->object;
		a->pass.private_waited_ns = now - a->start_ns;
	} else if (s == WAITER_GRANTED) {
		a->item = a->q.take.item;
		ts_lib_waitlist_delivered(a->object); /* still pending: the pool is alive */
	}
	a->outcome = ts_lib_async_outcome(s);
	a->completed = true;
	return a->fail_open ? 0 : a->outcome;
}

/* Run the ready list's callbacks, at most @budget of them; returns how
 * many ran.  A callback's cancel may take nodes out of the list. */
static int run_ready(ts_notifier *n, size_t budget)
{
	int ran = 0;
	int64_t now = ts_now_ns();

	while (budget-- && n->ready_head) {
		struct async_node *a = n->ready_head;
		ts_lib_notifier_unready(n, a);
		ts_lib_notifier_untrack(n, a);
		if (a->cancel)
			ts_lib_cancel_unwatch(a->cancel, async_waiter(a));
		a->pending = false;
		int r = result_of(a, now);
		TS_PROBE3(async__done, a->object, r, now - a->start_ns);
		n->callbacks++;
		ran++;
		TS_CHECK_NO_LOCK_HELD("an async callback");
		a->fn((ts_async *)a, r, a->arg); /* a may be gone from here on */
	}
	return ran;
}

static size_t ready_count(const ts_notifier *n)
{
	size_t k = 0;
	for (const struct async_node *a = n->ready_head; a; a = a->ready_next)
		k++;
	return k;
}

/* Rounds of collect-and-run per call: completions that callbacks cause
 * (a pass returned to a node of this loop) run in the same call, without
 * an fd write, but a stream of them cannot keep the loop here forever.
 * Each call that stops at the bound writes the fd for what is left: with
 * callbacks that return their passes at once to clients of the same loop
 * (bench/async_loop), 4 rounds left work in most calls (0.05 writes per
 * completion, 83% of them these), 16 in few (0.024). */
#define DISPATCH_ROUNDS 16

/* What is left after the rounds waits for the next call: make the fd
 * say so (once: only a 0 -> 1 exchange writes). */
static void announce_leftovers(ts_notifier *n)
{
	if ((n->ready_head || atomic_load_explicit(&n->stack, memory_order_acquire) ||
	     atomic_load_explicit(&n->poked, memory_order_acquire)) &&
	    !atomic_exchange_explicit(&n->signalled, 1, memory_order_acq_rel))
		write_fd(n);
}

/* Collect and run, for at most DISPATCH_ROUNDS rounds. */
static int run_rounds(ts_notifier *n)
{
	int ran = 0;
	ts_lib_notifier_collect(n);
	for (int round = 0; round < DISPATCH_ROUNDS; round++) {
		ran += run_ready(n, ready_count(n));
		if (!atomic_load_explicit(&n->stack, memory_order_acquire))
			break;
		ts_lib_notifier_collect(n);
	}
	return ran;
}

/* signalled (NO LOST WAKE-UP in async.h) is held at 1 while dispatch
 * runs, so granters push without writing the fd; at the end it is cleared
 * and the stack looked at once more: a push that came before the clear is
 * seen there (and the fd written for it), one after it writes itself. */
TS_API int ts_notifier_dispatch(ts_notifier *n)
{
	if (!n || n->dispatching)
		return 0;
	n->dispatching = true;
	/* Consume the fd's writes first: what they announced is collected
	 * below (a write landing after this read leaves one spurious
	 * wake-up). */
	uint64_t count;
	TS_CHECK_NO_LOCK_HELD("the notifier's eventfd read");
	ssize_t got = read(n->evfd, &count, sizeof(count)); /* EAGAIN: nothing written */
	(void)got;
	atomic_exchange_explicit(&n->signalled, 1, memory_order_acq_rel);
	look_remote(n, ts_now_ns());
	ts_lib_notifier_collect(n);
	expire(n);
	int ran = run_rounds(n);
	atomic_exchange_explicit(&n->signalled, 0, memory_order_acq_rel);
	announce_leftovers(n);
	n->dispatching = false;
	return ran;
}

/* LOOP-LOCAL (ts_lib_notifier_push): from the first call on, this thread's
 * completions for @n are not announced by the fd, so they are run here,
 * before the loop blocks: no system call when nothing was left, and none
 * at all for what this thread completed.  signalled is not touched (only
 * dispatch clears it), so a kick owed by another thread still lands. */
TS_API int ts_notifier_before_poll(ts_notifier *n)
{
	if (!n || n->dispatching)
		return 0;
	uint64_t me = this_thread();
	if (atomic_load_explicit(&n->loop_thread, memory_order_relaxed) != me)
		atomic_store_explicit(&n->loop_thread, me, memory_order_seq_cst);
	if (!n->ready_head && !atomic_load_explicit(&n->stack, memory_order_seq_cst))
		return 0;
	n->dispatching = true;
	int ran = run_rounds(n);
	announce_leftovers(n);
	n->dispatching = false;
	return ran;
}
