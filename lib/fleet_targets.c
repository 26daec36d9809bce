/* SPDX-License-Identifier: MIT */
/* Shares by demand, best band first (fleet_targets.h). */
#include "fleet_targets.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int64_t ts_lib_fleet_demand(const struct fleet_member *m)
{
	int64_t d = m->held;
	for (size_t b = 0; b < m->nbands; b++)
		d += m->bands[b].waiting > 0 ? m->bands[b].waiting : 0;
	return d;
}

/* The band a member's held passes count in: its worst queued band, or
 * below every band when it queues nobody.  Passes held are not taken
 * back, but as they return their room goes to better bands elsewhere. */
static int held_band(const struct fleet_member *m)
{
	int worst = INT_MAX;
	bool any = false;
	for (size_t b = 0; b < m->nbands; b++)
		if (m->bands[b].waiting > 0 && (!any || m->bands[b].band > worst)) {
			worst = m->bands[b].band;
			any = true;
		}
	return any ? worst : INT_MAX;
}

/* A member's demand in @band: its callers queued there, and its held
 * passes if this is their band. */
static int64_t waiting_in(const struct fleet_member *m, int band)
{
	int64_t d = m->held > 0 && held_band(m) == band ? m->held : 0;
	for (size_t b = 0; b < m->nbands; b++)
		if (m->bands[b].band == band && m->bands[b].waiting > 0)
			d += m->bands[b].waiting;
	return d;
}

/* Members in name order: the same on every member, whatever order its
 * view came in. */
static size_t *by_name(const struct fleet_member *m, size_t n)
{
	size_t *o = malloc((n ? n : 1) * sizeof(*o));
	if (!o)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		size_t j = i;
		while (j > 0 && strcmp(m[o[j - 1]].name, m[i].name) > 0) {
			o[j] = o[j - 1];
			j--;
		}
		o[j] = i;
	}
	return o;
}

/* The lowest band above @after with any demand; false when none. */
static bool next_band(const struct fleet_member *m, size_t n, bool first, int after, int *band)
{
	bool found = false;
	for (size_t i = 0; i < n; i++) {
		for (size_t b = 0; b <= m[i].nbands; b++) {
			int x = b < m[i].nbands ? m[i].bands[b].band : held_band(&m[i]);
			bool demand = b < m[i].nbands ? m[i].bands[b].waiting > 0 : m[i].held > 0;
			if (demand && (first || x > after) && (!found || x < *band)) {
				*band = x;
				found = true;
			}
		}
	}
	return found;
}

/* @room split over one band's queued callers, in proportion; the
 * remainder one each to the largest fractions (ties by name order). */
static void split(const struct fleet_member *m, size_t n, size_t *order, int band,
		  int64_t room, int64_t total, int64_t *targets)
{
	int64_t given = 0;
	for (size_t i = 0; i < n; i++) {
		int64_t g = (int64_t)((__int128)room * waiting_in(&m[i], band) / total);
		targets[i] += g;
		given += g;
	}
	while (given < room) {
		size_t best = SIZE_MAX; /* an index into @m: n shrinks below */
		__int128 best_frac = -1;
		for (size_t k = 0; k < n; k++) {
			size_t i = order[k];
			int64_t w = waiting_in(&m[i], band);
			__int128 frac = (__int128)room * w % total;
			if (w > 0 && frac > best_frac) {
				best = i;
				best_frac = frac;
			}
		}
		if (best == SIZE_MAX)
			break;
		targets[best]++;
		given++;
		/* each member takes at most one of the remainder */
		for (size_t k = 0; k < n; k++)
			if (order[k] == best) {
				memmove(order + k, order + k + 1, (n - k - 1) * sizeof(*order));
				n--;
				break;
			}
	}
}

void ts_lib_fleet_targets(int64_t ceiling, const struct fleet_member *m, size_t n,
			  int64_t *targets)
{
	int64_t room = ceiling;
	for (size_t i = 0; i < n; i++)
		targets[i] = 0;
	size_t *order = by_name(m, n);
	if (!order || room <= 0 || n == 0) {
		free(order);
		return;
	}
	int band = 0;
	for (bool first = true; room > 0 && next_band(m, n, first, band, &band); first = false) {
		/* band INT_MAX is last: nothing lies above it */
		int64_t total = 0;
		for (size_t i = 0; i < n; i++)
			total += waiting_in(&m[i], band);
		if (total <= room) {
			for (size_t i = 0; i < n; i++)
				targets[i] += waiting_in(&m[i], band);
			room -= total;
		} else {
			size_t *scratch = malloc(n * sizeof(*scratch));
			if (scratch) {
				memcpy(scratch, order, n * sizeof(*scratch));
				split(m, n, scratch, band, room, total, targets);
				free(scratch);
			}
			room = 0;
		}
	}
	for (size_t k = 0; room > 0 && k < n; k++) {
		int64_t even = room / (int64_t)(n - k);
		int64_t extra = room % (int64_t)(n - k) ? 1 : 0; /* the remainder by name */
		targets[order[k]] += even + extra;
		room -= even + extra;
	}
	free(order);
}
