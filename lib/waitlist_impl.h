/* SPDX-License-Identifier: MIT */
/* Private: a queued waitlist taker (the queue itself: waitlist.c). */
#ifndef TS_LIB_WAITLIST_IMPL_H
#define TS_LIB_WAITLIST_IMPL_H

#include <stdbool.h>

#include "waiter.h"

/* On a blocking taker's stack, or inside an event-loop node (async.h). */
struct taker {
	struct taker *prev, *next; /* queue links, under the lock */
	waiter w;
	void *item;   /* written before GRANTED is published */
	bool loading; /* holds a creation slot and its load has not returned
			 (blocking takers only: an async one leaves the queue
			 with its slot, TS_CREATE) */
};

#endif
