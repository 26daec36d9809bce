/* SPDX-License-Identifier: MIT */
/* The library's version at run time. */
#include <turnstile/version.h>

TS_API uint32_t ts_version(void)
{
	return TS_VERSION_NUMBER;
}
