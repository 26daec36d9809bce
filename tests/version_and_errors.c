/* SPDX-License-Identifier: MIT */
/* What the library says about itself: its version, at compile time and at
 * run time, and the meaning of each result it returns. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#include "config.h" /* PACKAGE_VERSION: configure's idea of the version */

Test(version_and_errors, the_running_library_reports_the_version_it_was_built_as)
{
	char expect[32];

	cr_assert_eq(ts_version(), TS_VERSION_NUMBER);
	cr_assert_eq(TS_VERSION_NUMBER,
		     (TS_VERSION_MAJOR << 16) | (TS_VERSION_MINOR << 8) | TS_VERSION_PATCH);
	snprintf(expect, sizeof(expect), "%d.%d.%d", TS_VERSION_MAJOR, TS_VERSION_MINOR,
		 TS_VERSION_PATCH);
	cr_assert_str_eq(expect, TS_VERSION_STRING);
	cr_assert_str_eq(TS_VERSION_STRING, PACKAGE_VERSION);
}

Test(version_and_errors, each_result_reads_in_the_librarys_words)
{
	static const int results[] = { 0, EINVAL, ENOMEM, ETIMEDOUT, ECANCELED, ESHUTDOWN,
				       EAGAIN, EBUSY, EINPROGRESS, ENOENT, EALREADY, TS_CREATE,
				       EUSERS, EPROTO };
	for (size_t i = 0; i < sizeof(results) / sizeof(results[0]); i++) {
		const char *text = ts_strerror(results[i]);
		cr_assert_not_null(text);
		cr_assert(strlen(text) > 0);
		for (size_t j = 0; j < i; j++)
			cr_assert(strcmp(text, ts_strerror(results[j])) != 0,
				  "two results read the same: %s", text);
	}
	cr_assert(strstr(ts_strerror(ESHUTDOWN), "closed"));
	cr_assert_null(strstr(ts_strerror(ESHUTDOWN), "transport"));
	cr_assert(strstr(ts_strerror(ETIMEDOUT), "deadline"));
	cr_assert(strstr(ts_strerror(ECANCELED), "cancel"));
	cr_assert(strstr(ts_strerror(EAGAIN), "waiters"));
	cr_assert(strstr(ts_strerror(TS_CREATE), "creation slot"));
	/* the event-loop results, in the library's terms */
	cr_assert(strstr(ts_strerror(EINPROGRESS), "callback"));
	cr_assert(strstr(ts_strerror(EBUSY), "pending"));
	cr_assert(strstr(ts_strerror(EUSERS), "max_processes"));
	cr_assert(strstr(ts_strerror(EPROTO), "layout"));
	cr_assert(strstr(ts_strerror(ENOENT), "not pending"));
	cr_assert(strstr(ts_strerror(EALREADY), "handed on"));
}

Test(version_and_errors, a_load_functions_own_error_reads_as_the_c_library_says)
{
	cr_assert_str_eq(ts_strerror(ECONNREFUSED), "Connection refused");
	cr_assert_str_eq(ts_strerror(EIO), "Input/output error");
	cr_assert_str_eq(ts_strerror(-2), "unknown error");
	cr_assert_str_eq(ts_strerror(1 << 20), "unknown error");
}
