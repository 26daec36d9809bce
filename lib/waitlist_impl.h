/* SPDX-License-Identifier: MIT */
/* Private: a queued waitlist taker (the queue itself: waitlist.c). */
#ifndef TS_LIB_WAITLIST_IMPL_H
#define TS_LIB_WAITLIST_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "waiter.h"

/* On a blocking taker's stack, or inside an event-loop node (async.h). */
struct taker {
	struct taker *prev, *next; /* queue links, under the lock */
	waiter w;
	void *item;   /* written before GRANTED is published */
	int64_t deadline_ns; /* 0: none; passed: never given anything */
	bool loading; /* holds a creation slot and its load has not returned
			 (blocking takers only: an async one leaves the queue
			 with its slot, TS_CREATE) */
};

typedef struct ts_waitlist ts_waitlist;
struct ts_cancel;
struct wakeups;

/* A loop taker's take got a creation slot (TS_CREATE to its caller). */
enum { TAKE_SLOT = -1 };

/* The queue's primitives for takers told by their own operation (async.c
 * builds event-loop takes on them; waitlist.c knows no loop). */
int ts_lib_waitlist_enqueue_loop(ts_waitlist *w, struct taker *n, int64_t deadline_ns,
				 struct ts_cancel *cancel, int no_room, void **item);
/* Withdraw @n if still queued, giving it @outcome, told (@wk non-NULL:
 * another thread's fire) or not (its owner).  Returns the state found under
 * the lock: below WAITER_FINAL means it was withdrawn now.  (The turnstile's
 * twin: ts_lib_turnstile_withdraw.) */
uint32_t ts_lib_waitlist_withdraw(ts_waitlist *w, struct taker *n, uint32_t outcome,
				  struct wakeups *wk);
/* Hand on what a cancelled-after-completion take got.  An item goes to the
 * oldest idle taker or onto the place on the ready stack the taker kept
 * (KEPT PLACES there), closed or not; a slot is given back.  A take's item
 * delivered by dispatch frees its kept place. */
void ts_lib_waitlist_hand_back(ts_waitlist *w, void *item);
void ts_lib_waitlist_give_back_slot(ts_waitlist *w);
void ts_lib_waitlist_delivered(ts_waitlist *w);

#endif
