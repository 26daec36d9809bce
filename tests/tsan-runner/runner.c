/* SPDX-License-Identifier: MIT */
/* Runs the tests registered by criterion/criterion.h in this folder, in
 * registration order, printing TAP. */
#include "criterion/criterion.h"

#include <stdlib.h>

#define MAX_TESTS 256

static struct {
	const char *suite, *name;
	void (*fn)(void);
} tests[MAX_TESTS];
static int n_tests, current;

void tsr_register(const char *suite, const char *name, void (*fn)(void))
{
	if (n_tests == MAX_TESTS) {
		fprintf(stderr, "tsan-runner: more than %d tests\n", MAX_TESTS);
		abort();
	}
	tests[n_tests].suite = suite;
	tests[n_tests].name = name;
	tests[n_tests].fn = fn;
	n_tests++;
}

_Noreturn void tsr_fail(const char *file, int line, const char *what)
{
	printf("not ok %d - %s::%s\n# %s:%d: assertion failed: %s\n", current + 1,
	       tests[current].suite, tests[current].name, file, line, what);
	fflush(stdout);
	exit(1);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("1..%d\n", n_tests);
	for (current = 0; current < n_tests; current++) {
		tests[current].fn();
		printf("ok %d - %s::%s\n", current + 1, tests[current].suite,
		       tests[current].name);
	}
	return 0;
}
