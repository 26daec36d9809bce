/* SPDX-License-Identifier: MIT */
/* What share each fleet member should have (lib/fleet_targets.c), without
 * etcd: held passes first, then queued callers best band first (in
 * proportion within a band where room runs out), then the rest evenly;
 * the same targets whatever order the members come in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet_targets.h"

static int failures;
#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                      \
			fputc('\n', stderr);                               \
			failures++;                                        \
		}                                                          \
	} while (0)

static int64_t sum(const int64_t *t, size_t n)
{
	int64_t s = 0;
	for (size_t i = 0; i < n; i++)
		s += t[i];
	return s;
}

static void idle_members_split_evenly(void)
{
	struct fleet_member m[3] = { { "a", 0, 0, NULL, 0 }, { "b", 0, 0, NULL, 0 },
				     { "c", 0, 0, NULL, 0 } };
	int64_t t[3];
	ts_lib_fleet_targets(11, m, 3, t);
	CHECK(t[0] == 4 && t[1] == 4 && t[2] == 3, "%lld %lld %lld", (long long)t[0],
	      (long long)t[1], (long long)t[2]);
}

static void demand_first_then_the_rest(void)
{
	struct fleet_band a_b[] = { { 2, 20 } }, b_b[] = { { 2, 0 } };
	struct fleet_member m[3] = { { "a", 4, 4, a_b, 1 }, { "b", 4, 4, b_b, 1 },
				     { "c", 0, 4, NULL, 0 } };
	int64_t t[3];
	ts_lib_fleet_targets(12, m, 3, t);
	/* a's 4 held + 20 queued in band 2 come before b's 4 held idle */
	CHECK(t[0] == 12 && t[1] == 0 && t[2] == 0, "%lld %lld %lld", (long long)t[0],
	      (long long)t[1], (long long)t[2]);
	ts_lib_fleet_targets(30, m, 3, t);
	/* all demand met (24 + 4), the 2 left evenly */
	CHECK(t[0] == 25 && t[1] == 5 && t[2] == 0, "%lld %lld %lld", (long long)t[0],
	      (long long)t[1], (long long)t[2]);
	CHECK(sum(t, 3) == 30, "sum %lld", (long long)sum(t, 3));
	CHECK(ts_lib_fleet_demand(&m[0]) == 24, "demand %lld", (long long)ts_lib_fleet_demand(&m[0]));
}

static void a_better_band_first(void)
{
	struct fleet_band a_b[] = { { 2, 40 } }, b_b[] = { { 0, 6 } };
	struct fleet_member m[2] = { { "a", 0, 12, a_b, 1 }, { "b", 0, 0, b_b, 1 } };
	int64_t t[2];
	ts_lib_fleet_targets(12, m, 2, t);
	CHECK(t[1] == 6 && t[0] == 6, "band 0 first: %lld %lld", (long long)t[0], (long long)t[1]);
}

static void a_short_band_splits_in_proportion(void)
{
	struct fleet_band a_b[] = { { 1, 30 } }, b_b[] = { { 1, 10 } }, c_b[] = { { 1, 1 } };
	struct fleet_member m[3] = { { "a", 0, 0, a_b, 1 }, { "b", 0, 0, b_b, 1 },
				     { "c", 0, 0, c_b, 1 } };
	int64_t t[3];
	ts_lib_fleet_targets(10, m, 3, t);
	/* 10 * 30/41 = 7.3, 10 * 10/41 = 2.4, 10/41 = 0.24: remainder 1 to b */
	CHECK(t[0] == 7 && t[1] == 3 && t[2] == 0, "%lld %lld %lld", (long long)t[0],
	      (long long)t[1], (long long)t[2]);
}

/* Band 0 queued at one member outranks band 2's held passes at another:
 * the holders are not taken back, but their room goes to band 0. */
static void held_passes_yield_to_a_better_band(void)
{
	struct fleet_band a_b[] = { { 2, 20 } }, b_b[] = { { 0, 8 } };
	struct fleet_member m[2] = { { "a", 12, 12, a_b, 1 }, { "b", 0, 0, b_b, 1 } };
	int64_t t[2];
	ts_lib_fleet_targets(12, m, 2, t);
	CHECK(t[0] == 4 && t[1] == 8, "band 0 first: %lld %lld", (long long)t[0], (long long)t[1]);
}

/* Found by review: the remainder loop lost its place as its list shrank,
 * so c,a,b named in that order got 0/1/0 of 2. */
static void the_remainder_is_all_given_in_any_order(void)
{
	struct fleet_band one[] = { { 0, 1 } };
	struct fleet_member m[3] = { { "c", 0, 0, one, 1 }, { "a", 0, 0, one, 1 },
				     { "b", 0, 0, one, 1 } };
	int64_t t[3];
	ts_lib_fleet_targets(2, m, 3, t);
	CHECK(sum(t, 3) == 2 && t[1] == 1 && t[2] == 1 && t[0] == 0, "%lld %lld %lld",
	      (long long)t[0], (long long)t[1], (long long)t[2]);
}

static void order_does_not_matter(void)
{
	struct fleet_band x[] = { { 0, 3 }, { 3, 9 } }, y[] = { { 3, 9 } }, z[] = { { 1, 2 } };
	struct fleet_member m[3] = { { "m1", 1, 0, x, 2 }, { "m2", 0, 0, y, 1 },
				     { "m3", 2, 0, z, 1 } };
	struct fleet_member r[3] = { m[2], m[0], m[1] };
	int64_t t[3], u[3];
	ts_lib_fleet_targets(13, m, 3, t);
	ts_lib_fleet_targets(13, r, 3, u);
	CHECK(t[0] == u[1] && t[1] == u[2] && t[2] == u[0], "%lld/%lld %lld/%lld %lld/%lld",
	      (long long)t[0], (long long)u[1], (long long)t[1], (long long)u[2], (long long)t[2],
	      (long long)u[0]);
	CHECK(sum(t, 3) == 13, "sum %lld", (long long)sum(t, 3));
}

int main(void)
{
	idle_members_split_evenly();
	demand_first_then_the_rest();
	a_better_band_first();
	a_short_band_splits_in_proportion();
	held_passes_yield_to_a_better_band();
	order_does_not_matter();
	the_remainder_is_all_given_in_any_order();
	if (failures)
		return 1;
	printf("fleet_targets: ok\n");
	return 0;
}
