/* SPDX-License-Identifier: MIT */
/* Tagged pool items for the waitlist's conservation checks (the races
 * tests and the stress harness).  Every item made is registered by id, so
 * at rest each one is accounted for exactly once — ready, kept by a caller
 * or destroyed — and an item that comes out of the pool foreign, destroyed
 * or already held is caught on the spot.  No Criterion here: the stress
 * harness reports through its own checks. */
#ifndef TS_TEST_TAGGED_H
#define TS_TEST_TAGGED_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <turnstile.h>

#define TAGGED_MAGIC 0x7a66u
#define TAGGED_MAX 100000

struct tagged {
	unsigned magic;
	int id;
	_Atomic int held, dead;
};

static struct tagged *tagged_made[TAGGED_MAX];
static _Atomic int tagged_count;

/* A new item, registered under the next id.  Running out of ids is a bug
 * in the test, not in the library: abort. */
static inline struct tagged *tagged_new(void)
{
	int id = atomic_fetch_add(&tagged_count, 1);
	struct tagged *t = id < TAGGED_MAX ? calloc(1, sizeof(*t)) : NULL;
	if (!t)
		abort();
	t->magic = TAGGED_MAGIC;
	t->id = id;
	tagged_made[id] = t;
	return t;
}

/* Become @t's one holder.  NULL on success, else what is wrong with it. */
static inline const char *tagged_hold(struct tagged *t)
{
	if (t->magic != TAGGED_MAGIC || atomic_load(&t->dead))
		return "a destroyed or foreign item came out of the pool";
	if (atomic_exchange(&t->held, 1) != 0)
		return "an item was given to two callers";
	return NULL;
}

static inline void tagged_release(struct tagged *t)
{
	atomic_store(&t->held, 0);
}

/* The caller destroyed @t (a broken connection): it must never come back. */
static inline void tagged_destroy(struct tagged *t)
{
	atomic_store(&t->dead, 1);
}

/* At rest: take every ready item out of @w.  Each must be live and appear
 * once.  Returns how many came out, or -1 with *why set at the first bad
 * one. */
static inline int tagged_drain(ts_waitlist *w, const char **why)
{
	static bool seen[TAGGED_MAX];
	int drained = 0;
	void *item;

	memset(seen, 0, sizeof(seen));
	while (ts_waitlist_try_take(w, &item)) {
		struct tagged *t = item;
		if (t->magic != TAGGED_MAGIC || atomic_load(&t->dead)) {
			*why = "a destroyed or foreign item was ready";
			return -1;
		}
		if (seen[t->id]) {
			*why = "an item was ready twice";
			return -1;
		}
		seen[t->id] = true;
		drained++;
	}
	return drained;
}

/* Free every item made so far and start the ids again. */
static inline void tagged_free_all(void)
{
	int n = atomic_exchange(&tagged_count, 0);
	for (int i = 0; i < n && i < TAGGED_MAX; i++)
		free(tagged_made[i]);
}

#endif
