/* SPDX-License-Identifier: MIT */
/* Private: the skiplist that orders a turnstile's waiting claims.
 *
 * Keys are (priority, since_ns, seq, arrival); arrival is stamped at insert
 * from a per-list counter, so every key is unique and equal claims keep
 * FIFO order.  Nodes are doubly linked at every level, and the head's
 * prev[i] is the last node of level i (the head itself when it is empty),
 * so:
 *   first     O(1)        the best claim is head.next[0]
 *   insert    O(log n)    expected (search from the tallest node's top
 *                         level, not SKIP_LEVELS': a queue of a few
 *                         thousand is 5 or 6 levels high); O(1) for
 *                         a claim no better than the last (one band's
 *                         callers in the order they came: the usual case)
 *   remove    O(height)   = O(1) expected, any node, no search
 * Not thread-safe: the turnstile's spinlock guards every call.  Nodes are
 * owned by the caller (they live on waiters' stacks).  Functions shared
 * between the library's files carry the reserved ts_lib_ prefix: the
 * static archive must define no name a caller might also use. */
#ifndef TS_LIB_SKIPLIST_H
#define TS_LIB_SKIPLIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <turnstile/turnstile.h>

/* With p = 1/4 per level, 12 levels keep O(log n) up to ~16M waiters. */
#define SKIP_LEVELS 12

struct skip_node {
	ts_claim key;
	uint64_t arrival;
	int height;
	struct skip_node *next[SKIP_LEVELS];
	struct skip_node *prev[SKIP_LEVELS];
};

struct skiplist {
	struct skip_node head; /* sentinel: next[i] first, prev[i] last of level i */
	uint64_t arrivals;
	uint64_t rng;
	size_t len;
	int levels; /* no node linked is taller: a search starts at levels - 1 */
};

void ts_lib_skip_init(struct skiplist *l);

/* Link @n (with n->key set) in order.  Returns true if it became first. */
bool ts_lib_skip_insert(struct skiplist *l, struct skip_node *n);

/* Unlink @n, which must be linked in @l. */
void ts_lib_skip_remove(struct skiplist *l, struct skip_node *n);

static inline struct skip_node *skip_first(const struct skiplist *l)
{
	return l->head.next[0];
}

/* Whether a sorts strictly before b (used by tests and the audit too). */
bool ts_lib_claim_before(const ts_claim *a, const ts_claim *b);

#endif
