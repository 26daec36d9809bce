/* SPDX-License-Identifier: MIT */
/* Private: a parked waiter — one futex word on the waiter's own stack.
 *
 * Used by the turnstile and the waitlist alike; the queue links live in the
 * structure that embeds it.  The protocol, in one screen:
 *
 *   state  QUEUED ──(waiter, CAS)──> SLEEPING ──futex_wait──┐
 *            ^                           │                   │
 *            └───(cancel fire: nudge)────┘                   │
 *   any non-final ──(granter, exchange, under queue lock)──> final outcome
 *
 * Ownership: while the node is linked in a queue, the queue's lock owns the
 * links and only a holder of that lock may grant it.  The granter unlinks
 * it, writes any payload, then publishes the outcome with ONE atomic
 * exchange; after that exchange it never touches the node again, except
 * futex_wake on its address (harmless if the frame is gone).  The exchange's
 * old value says whether the waiter was asleep: only then is a wake needed.
 * A waiter leaving on its own (timeout, cancel) takes the queue lock and
 * reads its state: a final outcome means it was granted (or closed) first
 * and it is no longer in the queue; otherwise it unlinks itself.  A waiter
 * that saw its final outcome without the lock returns at once: the free
 * functions pass through the queue lock, so they never overtake its
 * granter (LIFETIME in turnstile.c).
 *
 * Model: tests/model/turnstile.pml and waitlist.pml mirror these states
 * step for step (with the word and its WAITERS bit, resize, batches, busy,
 * spurious wake-ups, the cancel nudge, LOAD and the hand-over to loaders)
 * and spin checks them exhaustively, with seeded mutations that must be
 * caught (tests/model/check.sh): no lost or doubled pass or item, no
 * waiter asleep forever, nothing touched after a legal free.  Change the
 * protocol here, change the models there.  How a granted waiter is told
 * is this header's waiter_grant() and nothing else: a parked thread by its
 * futex word, any other kind of waiter by its own `tell` operation (as a
 * Linux wait_queue_entry carries its wake function), so a queue never
 * knows what its sleepers are — an event-loop node (notifier.c) plugs in
 * through waiter_ops without the queues naming it. */
#ifndef TS_LIB_WAITER_H
#define TS_LIB_WAITER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <turnstile/cancel.h>

#include "futex.h"
#include "hook.h"

struct wakeups;
typedef struct ts_waiter_ waiter;

/* How a waiter that is not a parked thread is told (NULL ops: a thread
 * parked on its futex word).  Both run under locks and must not block:
 * `tell` publishes @outcome under the lock of the queue @w was unlinked
 * from, `fire` ends the wait when its cancel token fires (under the
 * token's lock, which nests outside queue locks: spinlock.h); whatever
 * must run after unlocking goes into @wk (wakeups_add_call). */
struct waiter_ops {
	void (*tell)(waiter *w, uint32_t outcome, struct wakeups *wk);
	void (*fire)(waiter *w, struct wakeups *wk);
	/* An event-loop waiter: a waitlist hands it a creation slot to
	 * make the item itself (TS_CREATE) and keeps its place on the ready
	 * stack until its loop dispatches it. */
	bool loop;
};

enum {
	WAITER_QUEUED = 0,   /* linked, owner running (maybe spinning) */
	WAITER_SLEEPING = 1, /* linked, owner in (or entering) futex_wait */
	WAITER_LOAD = 2,     /* waitlist only: given a creation slot, still linked */
	WAITER_GRANTED = 3,  /* final: unlinked, pass or item handed over */
	WAITER_CLOSED = 4,   /* final: unlinked by close */
	/* final states of async nodes only (async.h) */
	WAITER_CREATE = 5,   /* unlinked, given a creation slot (TS_CREATE) */
	WAITER_CANCELLED = 6, /* unlinked by its cancel token's fire */
	WAITER_EXPIRED = 7,  /* unlinked by its loop's dispatch: deadline passed */
};
#define WAITER_FINAL WAITER_GRANTED

/* What ts_lib_waiter_park() returns besides a state >= WAITER_LOAD. */
enum { WAITER_TIMEDOUT = -1, WAITER_CANCELED = -2 };

struct ts_waiter_ {
	_Atomic uint32_t state;
	/* The word the owner parks on and granters publish to: &state, or
	 * for a process-shared turnstile its slot's word in the segment
	 * (shared.c), woken with shared futex operations. */
	_Atomic uint32_t *word;
	bool shared;
	bool spin;         /* may spin before parking: it is next in line */
	signed char spun;  /* set by ts_lib_waiter_park: +1 spin won, -1 spin lost, 0 none */
	/* registration on a cancel token, guarded by the token's lock */
	struct ts_waiter_ *cancel_prev, *cancel_next;
	const struct waiter_ops *ops; /* NULL: a parked thread */
};

static inline void waiter_init(waiter *w, const struct waiter_ops *ops)
{
	atomic_init(&w->state, WAITER_QUEUED);
	w->word = &w->state;
	w->shared = false;
	w->spin = false;
	w->spun = 0;
	w->cancel_prev = w->cancel_next = NULL;
	w->ops = ops;
}

/* Wait until @w's state reaches at least @wake_at (WAITER_FINAL, or
 * WAITER_LOAD where a creation slot should wake it), or the deadline passes
 * (WAITER_TIMEDOUT), or @c fires (WAITER_CANCELED).  Spins first when
 * w->spin, then parks.  The caller still owns the node when this returns
 * a negative value: it must leave the queue under the queue's lock. */
int ts_lib_waiter_park(waiter *w, uint32_t wake_at, int64_t deadline_ns,
		const ts_cancel *c);

/* Whether spinning pays for one queue.  A head waiter's spin is won when
 * its grant arrives while it spins and lost when the budget runs out (it
 * then parks anyway, having burnt CPU).  On two vCPUs a lost spin is worse
 * than useless: it takes the core a holder needs.  So each queue keeps an
 * up/down score of recent outcomes and its head spins only while wins at
 * least match losses — plus one probe in PROBE_EVERY while they do not, so
 * the policy notices when spinning starts to pay again.  Updated racily
 * with relaxed atomics: a lost update only blurs a heuristic. */
#define SPIN_SCORE_MAX 16
#define SPIN_PROBE_EVERY 16

struct spin_policy {
	_Atomic int score;
	_Atomic unsigned probes;
};

static inline bool spin_policy_allows(struct spin_policy *p)
{
	if (atomic_load_explicit(&p->score, memory_order_relaxed) >= 0)
		return true;
	return atomic_fetch_add_explicit(&p->probes, 1, memory_order_relaxed) %
		       SPIN_PROBE_EVERY == 0;
}

static inline void spin_policy_record(struct spin_policy *p, const waiter *w)
{
	if (!w->spun)
		return;
	int s = atomic_load_explicit(&p->score, memory_order_relaxed) + w->spun;
	if (s > SPIN_SCORE_MAX)
		s = SPIN_SCORE_MAX;
	if (s < -SPIN_SCORE_MAX)
		s = -SPIN_SCORE_MAX;
	atomic_store_explicit(&p->score, s, memory_order_relaxed);
}

/* Wake-ups owed after a critical section that granted waiters.  Collected
 * under the lock and issued after unlocking: no system call ever runs
 * under a queue lock.  An entry is a parked thread's futex word (of this
 * process or of a shared segment), or a call a waiter's `tell` left for
 * after the unlock (an event-loop node's notifier: write its fd if this
 * completion made it readable, end the granter's hold on it).  A
 * batch holds WAKE_BATCH; a critical section that could grant more (a
 * close, a large grow) stops when the batch is full, unlocks, wakes, and
 * takes the lock again for the rest — only while a waiter is still queued,
 * so the object cannot have been freed meanwhile. */
#define WAKE_BATCH 16
struct wakeup {
	_Atomic uint32_t *word;            /* futex_wake it, or NULL: */
	void (*call)(void *ctx, bool arg); /* call(ctx, arg) */
	void *ctx;
	bool arg;
	bool shared;                       /* word is in a process-shared segment */
};
struct wakeups {
	int n;
	struct wakeup e[WAKE_BATCH];
};

/* Only the count: the batch itself is written as it fills. */
static inline void wakeups_init(struct wakeups *wk)
{
	wk->n = 0;
}

static inline bool wakeups_full(const struct wakeups *wk)
{
	return wk->n == WAKE_BATCH;
}

/* Caller checks wakeups_full() before each grant that may need a wake. */
static inline void wakeups_add(struct wakeups *wk, _Atomic uint32_t *word)
{
	if (word)
		wk->e[wk->n++] = (struct wakeup){ word, NULL, NULL, false, false };
}

/* A parked waiter's word, private or shared (waiter.word). */
static inline void wakeups_add_waiter(struct wakeups *wk, const waiter *w)
{
	wk->e[wk->n++] = (struct wakeup){ w->word, NULL, NULL, false, w->shared };
}

/* A futex word of a process-shared segment. */
static inline void wakeups_add_shared(struct wakeups *wk, _Atomic uint32_t *word)
{
	wk->e[wk->n++] = (struct wakeup){ word, NULL, NULL, false, true };
}

static inline void wakeups_add_call(struct wakeups *wk, void (*call)(void *, bool), void *ctx,
				    bool arg)
{
	wk->e[wk->n++] = (struct wakeup){ NULL, call, ctx, arg, false };
}

static inline void wakeups_flush(struct wakeups *wk)
{
	for (int i = 0; i < wk->n; i++) {
		TS_FAULT(); /* window: granted, not yet woken */
		if (wk->e[i].word)
			futex_wake_on(wk->e[i].word, 1, wk->e[i].shared);
		else
			wk->e[i].call(wk->e[i].ctx, wk->e[i].arg);
	}
	wk->n = 0;
}

/* A queued waiter whose deadline has passed: a granter ends it with
 * WAITER_EXPIRED instead of granting it (DESIGN.md: a deadline means
 * never after it).  The clock is read only for a waiter that has one. */
static inline bool waiter_expired(int64_t deadline_ns)
{
	return deadline_ns != 0 && ts_now_ns() >= deadline_ns;
}

/* THE SEAM: how a granted waiter is told.  Caller holds the lock of the
 * queue @w was in and has unlinked it (or, for WAITER_LOAD, keeps it
 * linked on purpose), and has checked wakeups_full(@wk).  A parked thread
 * gets @outcome by one atomic exchange, and a futex wake after unlocking
 * if it was asleep; any other waiter by its own tell (an event-loop node
 * is pushed onto its notifier's completion stack, reachable by the loop
 * from this critical section on).  From here on @w may vanish (the
 * granter touches at most the futex word's address, or what its tell
 * left in @wk). */
static inline void waiter_grant(waiter *w, uint32_t outcome, struct wakeups *wk)
{
	if (w->ops) {
		w->ops->tell(w, outcome, wk);
		return;
	}
	_Atomic uint32_t *word = &w->state;
	uint32_t was = atomic_exchange_explicit(word, outcome, memory_order_acq_rel);
	ts_hook_at(TS_HOOK_GRANTED, word);
	wakeups_add(wk, was == WAITER_SLEEPING ? word : NULL);
}

/* Cancel-token registration (cancel.c): a registered waiter is nudged awake
 * when the token fires.  Register before parking, unregister before the
 * node's frame dies: the token's lock is what keeps the firer from touching
 * a dead node. */
void ts_lib_cancel_watch(ts_cancel *c, waiter *w);
void ts_lib_cancel_unwatch(ts_cancel *c, waiter *w);

static inline bool cancel_fired_now(const ts_cancel *c)
{
	return c && atomic_load_explicit(&c->private_fired, memory_order_seq_cst);
}

#endif
