/* SPDX-License-Identifier: MIT */
/* Private: the two futex operations the library parks with. */
#ifndef TS_LIB_FUTEX_H
#define TS_LIB_FUTEX_H

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "hook.h"

/* Sleep while *word == expected, until woken or until the absolute
 * CLOCK_MONOTONIC deadline (0: none).  Returns 0 or an errno (EAGAIN: the
 * word had changed, ETIMEDOUT, EINTR).  Callers must re-check their
 * condition: spurious returns are allowed. */
static inline int futex_wait(_Atomic uint32_t *word, uint32_t expected,
			     int64_t deadline_ns)
{
	struct timespec ts, *tp = NULL;

	TS_CHECK_NO_LOCK_HELD("futex_wait");
	if (deadline_ns > 0) {
		ts.tv_sec = deadline_ns / 1000000000;
		ts.tv_nsec = deadline_ns % 1000000000;
		tp = &ts;
	}
	/* WAIT_BITSET takes an absolute CLOCK_MONOTONIC timeout. */
	if (syscall(SYS_futex, word, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG,
		    expected, tp, NULL, FUTEX_BITSET_MATCH_ANY) == 0)
		return 0;
	return errno;
}

/* Wake up to @n sleepers on @word.  Safe on an address whose owner has
 * already returned: the kernel only hashes the address, and every sleeper
 * tolerates spurious wake-ups. */
static inline void futex_wake(_Atomic uint32_t *word, int n)
{
	TS_CHECK_NO_LOCK_HELD("futex_wake");
	syscall(SYS_futex, word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, n, NULL, NULL, 0);
}

#endif
