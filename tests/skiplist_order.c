/* SPDX-License-Identifier: MIT */
/* The skiplist keeps waiting claims in (band, since, seq, arrival) order
 * through any mix of inserts and arbitrary removals, emptied and filled
 * again. */
#include <stdlib.h>

#include "skiplist.h"
#include "testutil.h"

#define N 2000

static struct skip_node nodes[N];
static bool linked[N];

static bool before(int a, int b)
{
	if (ts_lib_claim_before(&nodes[a].key, &nodes[b].key))
		return true;
	if (ts_lib_claim_before(&nodes[b].key, &nodes[a].key))
		return false;
	return nodes[a].arrival < nodes[b].arrival;
}

static void check(struct skiplist *l)
{
	size_t count = 0;
	struct skip_node *prev = NULL;
	for (struct skip_node *n = skip_first(l); n; n = n->next[0]) {
		if (prev)
			cr_assert(before((int)(prev - nodes), (int)(n - nodes)),
				  "out of order at %zu", count);
		prev = n;
		count++;
	}
	cr_assert_eq(count, l->len);
	/* every upper level is an ordered sub-list of level 0; every level's
	 * back links mirror its forward ones, and the head's back link is the
	 * level's last node (the tail insert's shortcut relies on it) */
	for (int lv = 0; lv < SKIP_LEVELS; lv++) {
		struct skip_node *last = &l->head;
		for (struct skip_node *n = l->head.next[lv]; n; n = n->next[lv]) {
			cr_assert_eq(n->prev[lv], last, "level %d: a back link is wrong", lv);
			if (n->next[lv])
				cr_assert(before((int)(n - nodes), (int)(n->next[lv] - nodes)));
			last = n;
		}
		cr_assert_eq(l->head.prev[lv], last, "level %d: the head's back link is not the last node", lv);
		/* a search starts below l->levels: nothing may be linked above */
		if (lv >= l->levels)
			cr_assert_null(l->head.next[lv], "level %d is above levels %d but not empty", lv,
				       l->levels);
	}
}

Test(skiplist, random_inserts_and_removals_keep_order)
{
	struct skiplist l;
	ts_lib_skip_init(&l);
	srand(42);
	for (int round = 0; round < 6 * N; round++) {
		int i = rand() % N;
		if (linked[i]) {
			ts_lib_skip_remove(&l, &nodes[i]);
			linked[i] = false;
		} else {
			/* few distinct values so ties (FIFO by arrival) are common */
			nodes[i].key = (ts_claim){ rand() % 3, rand() % 5, (uint64_t)(rand() % 4) };
			bool first = ts_lib_skip_insert(&l, &nodes[i]);
			cr_assert_eq(first, skip_first(&l) == &nodes[i]);
			linked[i] = true;
		}
		if (round % 97 == 0)
			check(&l);
	}
	check(&l);
}

Test(skiplist, equal_claims_leave_in_arrival_order)
{
	struct skiplist l;
	ts_lib_skip_init(&l);
	for (int i = 0; i < 100; i++) {
		nodes[i].key = (ts_claim){ 1, 7, 7 };
		ts_lib_skip_insert(&l, &nodes[i]);
	}
	for (int i = 0; i < 100; i++) {
		struct skip_node *n = skip_first(&l);
		cr_assert_eq(n, &nodes[i]);
		ts_lib_skip_remove(&l, n);
	}
	cr_assert_null(skip_first(&l));
}

/* Emptied, the list searches from the bottom again; filled, from as high
 * as its tallest node: order holds across the round trips. */
Test(skiplist, emptied_and_filled_again_keeps_order)
{
	struct skiplist l;
	ts_lib_skip_init(&l);
	srand(7);
	for (int round = 0; round < 40; round++) {
		int n = round % 2 ? 3 : 500; /* short lists rarely grow tall */
		for (int i = 0; i < n; i++) {
			nodes[i].key = (ts_claim){ rand() % 3, rand() % 50, 0 };
			ts_lib_skip_insert(&l, &nodes[i]);
		}
		check(&l);
		for (int i = 0; i < n; i++) /* not in the list's order */
			ts_lib_skip_remove(&l, &nodes[(i * 7) % n]); /* 7 is prime to 500 and 3 */
		cr_assert_null(skip_first(&l));
		cr_assert_eq(l.levels, 0);
	}
}
