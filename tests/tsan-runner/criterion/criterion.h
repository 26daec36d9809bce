/* SPDX-License-Identifier: MIT */
/* Single-process stand-in for the part of Criterion the tests use, for the
 * ThreadSanitizer build only.  Criterion's sandbox maps a shared arena at
 * addresses TSan reserves for itself and aborts before running any test
 * ("Could not initialize inheritable arena", Criterion issue #274, with gcc
 * and clang alike), so under TSan the same test sources are compiled
 * against this header and run one after another in one process, printing
 * TAP for Automake's driver.  A failed assertion prints where and exits. */
#ifndef TS_TSAN_RUNNER_CRITERION_H
#define TS_TSAN_RUNNER_CRITERION_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

void tsr_register(const char *suite, const char *name, void (*fn)(void));
_Noreturn void tsr_fail(const char *file, int line, const char *what);

#define Test(suite, name, ...)                                               \
	static void suite##_##name(void);                                     \
	__attribute__((constructor)) static void suite##_##name##_reg(void)  \
	{                                                                     \
		tsr_register(#suite, #name, suite##_##name);                  \
	}                                                                     \
	static void suite##_##name(void)

#define TSR_CHECK(cond, text)                                                 \
	do {                                                                  \
		if (!(cond))                                                  \
			tsr_fail(__FILE__, __LINE__, text);                   \
	} while (0)

#define cr_assert(c, ...) TSR_CHECK((c), #c)
#define cr_assert_not(c, ...) TSR_CHECK(!(c), "!(" #c ")")
#define cr_assert_null(p, ...) TSR_CHECK((p) == NULL, #p " == NULL")
#define cr_assert_not_null(p, ...) TSR_CHECK((p) != NULL, #p " != NULL")
#define cr_assert_eq(a, b, ...) TSR_CHECK((a) == (b), #a " == " #b)
#define cr_assert_neq(a, b, ...) TSR_CHECK((a) != (b), #a " != " #b)
#define cr_assert_lt(a, b, ...) TSR_CHECK((a) < (b), #a " < " #b)
#define cr_assert_leq(a, b, ...) TSR_CHECK((a) <= (b), #a " <= " #b)
#define cr_assert_gt(a, b, ...) TSR_CHECK((a) > (b), #a " > " #b)
#define cr_assert_str_eq(a, b, ...) TSR_CHECK(strcmp((a), (b)) == 0, #a " == " #b)
#define cr_assert_geq(a, b, ...) TSR_CHECK((a) >= (b), #a " >= " #b)
#define cr_log_info(...) (printf("# "), printf(__VA_ARGS__), printf("\n"))

#endif
