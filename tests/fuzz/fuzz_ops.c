/* SPDX-License-Identifier: MIT */
/* Fuzzing against a reference model.  The input is a program of
 * single-threaded operations on one turnstile and one waitlist (waits that
 * cannot block, returns, resizes, closes, takes, puts, discards, cancels);
 * every result is checked against a small model of what the contract
 * says, and the final counts against the model's.
 *
 * Built two ways: with clang's -fsanitize=fuzzer (tests/fuzz/run.sh) it is
 * a libFuzzer target; otherwise its main() replays the files named on the
 * command line (the seed corpus, in make check). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <turnstile.h>

#define MAX_HELD 16

static void fail(const char *what, int op)
{
	fprintf(stderr, "fuzz_ops: model mismatch at op %d: %s\n", op, what);
	abort();
}
#define EXPECT(cond, op) ((cond) ? (void)0 : fail(#cond, (op)))

struct input {
	const uint8_t *p;
	size_t n;
};

static int next(struct input *in)
{
	if (!in->n)
		return -1;
	in->n--;
	return *in->p++;
}

/* The load: fails with the errno the input chose, or makes a tagged item. */
static int next_item = 1;
static int model_load(void *arg, void **item)
{
	int *fail_with = arg;
	if (*fail_with)
		return *fail_with;
	*item = (void *)(intptr_t)next_item++;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct input in = { data, size };
	int c0 = next(&in), m0 = next(&in);
	if (c0 < 0 || m0 < 0)
		return 0;

	/* turnstile and its model */
	int64_t ceiling = c0 % 5, available = ceiling;
	bool t_closed = false;
	ts_turnstile *t = ts_turnstile_new(ceiling);
	ts_pass held[MAX_HELD];
	int n_held = 0;
	ts_cancel fired = TS_CANCEL_INIT;
	ts_cancel_fire(&fired);
	static const ts_claim claim = { 0, 0, 0 };

	/* waitlist and its model */
	size_t max_items = (size_t)(m0 % 4); /* 0: no limit */
	ts_waitlist *w = ts_waitlist_new(max_items, 0);
	void *ready[256];
	size_t n_ready = 0, created = 0;
	bool w_closed = false;
	void *items[MAX_HELD];
	int n_items = 0;

	for (int op = 0;; op++) {
		int b = next(&in);
		if (b < 0)
			break;
		int arg = next(&in);
		if (arg < 0)
			arg = 0;
		switch (b % 10) {
		case 0: { /* a try: never blocks */
			ts_pass p;
			bool cancel = arg & 1;
			int r = ts_turnstile_wait(t, &claim, TS_DEADLINE_NOW, cancel ? &fired : NULL, &p);
			int expect = t_closed ? ESHUTDOWN : cancel ? ECANCELED : available > 0 ? 0 : ETIMEDOUT;
			EXPECT(r == expect, op);
			EXPECT(ts_pass_issued(&p) == (r == 0), op);
			if (r == 0) {
				available--;
				if (n_held < MAX_HELD)
					held[n_held++] = p;
				else
					ts_pass_return(&p), available++;
			}
			break;
		}
		case 1: /* return a held pass, then return it again */
			if (n_held) {
				ts_pass *p = &held[arg % n_held];
				ts_pass_return(p);
				ts_pass_return(p);
				available++;
				*p = held[--n_held];
			}
			break;
		case 2: { /* return the unissued pass */
			ts_pass none = TS_PASS_NONE;
			ts_pass_return(&none);
			break;
		}
		case 3: { /* resize, sometimes to a bad value */
			int64_t to = arg % 7 - 1;
			int r = ts_turnstile_resize(t, to);
			EXPECT(r == (to < 0 ? EINVAL : 0), op);
			if (to >= 0) {
				available += to - ceiling;
				ceiling = to;
			}
			break;
		}
		case 4:
			ts_turnstile_close(t);
			t_closed = true;
			break;
		case 5: { /* take: from ready, else create if a slot is free */
			void *item = (void *)-1;
			bool slot = !max_items || created < max_items;
			int fail_with = (arg & 3) == 3 ? ECONNREFUSED : 0;
			bool cancel = (arg & 12) == 12;
			int64_t deadline = slot ? 0 : TS_DEADLINE_NOW;
			int r = ts_waitlist_take(w, &item, model_load, &fail_with, deadline,
						 cancel ? &fired : NULL);
			int expect = n_ready ? 0
				   : w_closed ? ESHUTDOWN
				   : cancel ? ECANCELED
				   : !slot ? ETIMEDOUT
				   : fail_with;
			EXPECT(r == expect, op);
			if (n_ready) {
				EXPECT(item == ready[n_ready - 1], op); /* LIFO */
				n_ready--;
			} else if (r == 0) {
				created++;
			} else {
				EXPECT(item == NULL, op);
			}
			if (r == 0 && n_items < MAX_HELD)
				items[n_items++] = item;
			break;
		}
		case 6: /* put a held item */
			if (n_items) {
				void *item = items[--n_items];
				bool ok = ts_waitlist_put(w, item);
				EXPECT(ok == !w_closed, op);
				if (ok && n_ready < 256)
					ready[n_ready++] = item;
				else if (ok)
					fail("model ready stack overflow", op);
			}
			break;
		case 7: /* discard a held item (the caller destroyed it) */
			if (n_items) {
				n_items--;
				ts_waitlist_discard(w);
				if (created)
					created--;
			}
			break;
		case 8: { /* try_take */
			void *item;
			bool got = ts_waitlist_try_take(w, &item);
			EXPECT(got == (n_ready > 0), op);
			if (got) {
				EXPECT(item == ready[--n_ready], op);
				if (n_items < MAX_HELD)
					items[n_items++] = item;
			}
			break;
		}
		default:
			ts_waitlist_close(w);
			w_closed = true;
			break;
		}
		int64_t a, q;
		ts_turnstile_snapshot(t, &a, &q);
		EXPECT(a == available && q == 0, op);
		size_t sc, sr, sq;
		ts_waitlist_stats(w, &sc, &sr, &sq);
		EXPECT(sr == n_ready && sq == 0, op);
		EXPECT(sc == created, op);
		EXPECT(ts_turnstile_closed(t) == t_closed, op);
	}
	while (n_held)
		ts_pass_return(&held[--n_held]);
	int64_t a;
	ts_turnstile_snapshot(t, &a, NULL);
	EXPECT(a == ceiling, -1);
	ts_turnstile_free(t);
	ts_waitlist_free(w);
	return 0;
}

#ifndef TS_LIBFUZZER
/* Replay: run every file named on the command line through the target. */
int main(int argc, char **argv)
{
	int runs = 0;
	for (int i = 1; i < argc; i++) {
		FILE *f = fopen(argv[i], "rb");
		if (!f) {
			perror(argv[i]);
			return 1;
		}
		uint8_t buf[65536];
		size_t n = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		LLVMFuzzerTestOneInput(buf, n);
		runs++;
	}
	printf("fuzz_ops: replayed %d inputs, all matched the model\n", runs);
	return runs ? 0 : 1;
}
#endif
