/* SPDX-License-Identifier: MIT */
/* Private: the turnstile's layout.  The state word, its encoding and the
 * no-barging invariant are in include/turnstile/fastpath.h, whose inline
 * fast paths read the word as the struct's first member. */
#ifndef TS_LIB_TURNSTILE_IMPL_H
#define TS_LIB_TURNSTILE_IMPL_H

#include <stdatomic.h>
#include <stddef.h>

#include <turnstile/turnstile.h>

#include "skiplist.h"
#include "waiter.h"

#define WORD_WAITERS TS_PRIVATE_WORD_WAITERS
#define WORD_CLOSED TS_PRIVATE_WORD_CLOSED
#define WORD_UNIT TS_PRIVATE_WORD_UNIT

struct ts_turnstile {
	/* the fast paths' line: struct ts_private_turnstile_head */
	_Alignas(64) _Atomic uint64_t word;
	_Atomic int64_t ceiling_units; /* ceiling << 2, written under lock */
	_Alignas(64) _Atomic uint32_t lock;
	_Atomic int64_t waiting;      /* queue length, for snapshots */
	_Atomic uint32_t busy;        /* calls between unlocks (busy.h) */
	struct spin_policy spin;      /* does the head's spin pay here? */
	struct skiplist queue;        /* under lock */
	/* Process-shared turnstiles (shared.c): this struct is then only a
	 * handle whose word reads WAITERS|CLOSED for ever, so the inlined fast
	 * paths always call the library, which sends the call to shared.c. */
	struct shared_handle *shared;
	/* The freshness guard (turnstile.c): 0, or admit nobody at or after
	 * this CLOCK_BOOTTIME instant.  Under lock. */
	int64_t guard_until;
};

/* shared.c: every turnstile call on a shared handle. */
int ts_lib_shared_wait(ts_turnstile *t, const ts_claim *claim, int64_t deadline_ns,
		       ts_cancel *cancel, ts_pass *pass);
void ts_lib_shared_return(ts_turnstile *t);
int ts_lib_shared_resize(ts_turnstile *t, int64_t concurrency);
void ts_lib_shared_close(ts_turnstile *t);
bool ts_lib_shared_closed(const ts_turnstile *t);
int64_t ts_lib_shared_ceiling(const ts_turnstile *t);
void ts_lib_shared_snapshot(const ts_turnstile *t, int64_t *available, int64_t *waiting);
int ts_lib_shared_waiting_by_band(const ts_turnstile *t, int *bands, int64_t *waiting, int max);

void ts_lib_shared_free(ts_turnstile *t);
/* Event-loop waits on a shared handle (async.c): queue a slot told by
 * @doorbell (0, ESHUTDOWN, ECANCELED, ETIMEDOUT, EAGAIN, EUSERS, or
 * EINPROGRESS with *@slot); whether its state is final (no lock); settle
 * it under the lock (GRANTED: the pass is the caller's; CLOSED; QUEUED:
 * still queued, or withdrawn now when @withdraw); sweep for the dead. */
int ts_lib_shared_enqueue_async(ts_turnstile *t, const ts_claim *claim, int64_t deadline_ns,
				ts_cancel *cancel, uint64_t doorbell, uint32_t *slot,
				ts_pass *pass);
bool ts_lib_shared_slot_final(const ts_turnstile *t, uint32_t slot);
uint32_t ts_lib_shared_settle(ts_turnstile *t, uint32_t slot, bool withdraw);
void ts_lib_shared_poll(ts_turnstile *t);
int64_t ts_lib_shared_recover_ns(const ts_turnstile *t);
/* What this registration's passes name as their turnstile. */
ts_turnstile *ts_lib_shared_pass_name(ts_turnstile *t);
_Static_assert(offsetof(struct ts_turnstile, word) ==
		       offsetof(struct ts_private_turnstile_head, word) &&
	       offsetof(struct ts_turnstile, ceiling_units) ==
		       offsetof(struct ts_private_turnstile_head, ceiling_units),
	       "fastpath.h reads the word and the ceiling as the first members");

/* Counting waiters per band for ts_turnstile_waiting_by_band, fed bands in
 * ascending order: the first @max distinct bands are told, all counted. */
struct band_tally {
	int *bands;
	int64_t *waiting;
	int max, seen, last;
};

static inline void band_tally_add(struct band_tally *bt, int band)
{
	if (bt->seen && bt->last == band) {
		if (bt->seen <= bt->max)
			bt->waiting[bt->seen - 1]++;
		return;
	}
	if (bt->seen < bt->max) {
		bt->bands[bt->seen] = band;
		bt->waiting[bt->seen] = 1;
	}
	bt->last = band;
	bt->seen++;
}

/* A queued caller: its skiplist links and its waiter — on a blocking
 * caller's stack, or inside an event-loop node (async.h). */
struct turn_waiter {
	struct skip_node link;
	waiter w;
	int64_t deadline_ns; /* 0: none; passed: never granted (drain) */
};


/* The queue's primitives for waiters told by their own operation
 * (async.c builds event-loop waits on them; turnstile.c knows no loop). */
int ts_lib_turnstile_enqueue(ts_turnstile *t, struct turn_waiter *tw, int64_t now,
			     int64_t deadline_ns);
struct wakeups;
uint32_t ts_lib_turnstile_withdraw(ts_turnstile *t, struct turn_waiter *tw, uint32_t outcome,
				   struct wakeups *wk);

static inline int64_t word_available(uint64_t w)
{
	return (int64_t)w >> 2; /* arithmetic shift: gcc and clang define it */
}

/* Read under the lock (resize is the only writer, under it too). */
static inline int64_t turnstile_ceiling(const struct ts_turnstile *t)
{
	return atomic_load_explicit(&t->ceiling_units, memory_order_relaxed) >> 2;
}

#endif
