/* SPDX-License-Identifier: MIT */
/* Skiplist of waiting claims; see skiplist.h for the costs it guarantees. */
#include "skiplist.h"

#include <string.h>

bool ts_lib_claim_before(const ts_claim *a, const ts_claim *b)
{
	if (a->priority != b->priority)
		return a->priority < b->priority;
	if (a->since_ns != b->since_ns)
		return a->since_ns < b->since_ns;
	return a->seq < b->seq;
}

static bool node_before(const struct skip_node *a, const struct skip_node *b)
{
	if (a->key.priority != b->key.priority || a->key.since_ns != b->key.since_ns ||
	    a->key.seq != b->key.seq)
		return ts_lib_claim_before(&a->key, &b->key);
	return a->arrival < b->arrival;
}

void ts_lib_skip_init(struct skiplist *l)
{
	memset(l, 0, sizeof(*l));
	l->head.height = SKIP_LEVELS;
	for (int i = 0; i < SKIP_LEVELS; i++)
		l->head.prev[i] = &l->head;
	l->rng = 0x9e3779b97f4a7c15ull;
}

/* Geometric height with p = 1/4, from a xorshift64 stream (under the lock). */
static int random_height(struct skiplist *l)
{
	uint64_t x = l->rng;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	l->rng = x;
	int h = 1;
	while (h < SKIP_LEVELS && (x & 3) == 0) {
		h++;
		x >>= 2;
	}
	return h;
}

bool ts_lib_skip_insert(struct skiplist *l, struct skip_node *n)
{
	struct skip_node *update[SKIP_LEVELS];
	struct skip_node *x = &l->head;

	n->arrival = l->arrivals++;
	n->height = random_height(l);
	struct skip_node *last = l->head.prev[0];
	if (last == &l->head || !ts_lib_claim_before(&n->key, &last->key)) {
		/* after every node (its arrival is the newest): each level's
		 * last node is its predecessor there */
		for (int i = 0; i < n->height; i++)
			update[i] = l->head.prev[i];
	} else {
		/* levels at or above l->levels are empty: n's predecessor
		 * there is the head */
		for (int i = l->levels; i < n->height; i++)
			update[i] = &l->head;
		for (int i = l->levels - 1; i >= 0; i--) {
			while (x->next[i] && node_before(x->next[i], n))
				x = x->next[i];
			update[i] = x;
		}
	}
	if (n->height > l->levels)
		l->levels = n->height;
	for (int i = 0; i < n->height; i++) {
		n->next[i] = update[i]->next[i];
		n->prev[i] = update[i];
		if (n->next[i])
			n->next[i]->prev[i] = n;
		else
			l->head.prev[i] = n;
		update[i]->next[i] = n;
	}
	l->len++;
	return update[0] == &l->head;
}

void ts_lib_skip_remove(struct skiplist *l, struct skip_node *n)
{
	for (int i = 0; i < n->height; i++) {
		n->prev[i]->next[i] = n->next[i];
		if (n->next[i])
			n->next[i]->prev[i] = n->prev[i];
		else
			l->head.prev[i] = n->prev[i];
	}
	if (--l->len == 0) /* every level is empty again */
		l->levels = 0;
}
