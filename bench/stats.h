/* SPDX-License-Identifier: MIT */
/* Order statistics over a benchmark's repeats (median, min, max), and a
 * bounded sample of waits per thread. */
#ifndef TS_BENCH_STATS_H
#define TS_BENCH_STATS_H

#include <stdlib.h>
#include <string.h>

#define MAX_REPEATS 64

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The p-quantile (0..1) of n values, nearest rank; sorts a copy. */
static inline double quantile(const double *v, int n, double p)
{
	double *s = malloc(sizeof(double) * (size_t)n);
	memcpy(s, v, sizeof(double) * (size_t)n);
	qsort(s, (size_t)n, sizeof(double), cmp_double);
	int i = (int)(p * (n - 1) + 0.5);
	double q = s[i];
	free(s);
	return q;
}

static inline double median(const double *v, int n) { return quantile(v, n, 0.5); }
static inline double minimum(const double *v, int n) { return quantile(v, n, 0.0); }
static inline double maximum(const double *v, int n) { return quantile(v, n, 1.0); }

/* A bounded sample of wait times per thread (reservoir sampling): every
 * value seen has the same chance to be kept.  Zero it to start. */
#define SAMPLES 8192
struct samples {
	long seen;
	unsigned seed;
	int n;
	double v[SAMPLES];
};

static inline void sample(struct samples *s, double x)
{
	s->seen++;
	if (s->n < SAMPLES) {
		s->v[s->n++] = x;
		return;
	}
	long j = rand_r(&s->seed) % s->seen;
	if (j < SAMPLES)
		s->v[j] = x;
}

#endif
