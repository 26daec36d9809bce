/* SPDX-License-Identifier: MIT */
/* Private: the two futex operations the library parks with, on a word of
 * this process (FUTEX_PRIVATE_FLAG) or of a process-shared segment. */
#ifndef TS_LIB_FUTEX_H
#define TS_LIB_FUTEX_H

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
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
static inline int futex_wait_on(_Atomic uint32_t *word, uint32_t expected,
				int64_t deadline_ns, bool shared)
{
	struct timespec ts, *tp = NULL;

	TS_CHECK_NO_LOCK_HELD("futex_wait");
	if (deadline_ns > 0) {
		ts.tv_sec = deadline_ns / 1000000000;
		ts.tv_nsec = deadline_ns % 1000000000;
		tp = &ts;
	}
	/* WAIT_BITSET takes an absolute CLOCK_MONOTONIC timeout. */
	if (syscall(SYS_futex, word, FUTEX_WAIT_BITSET | (shared ? 0 : FUTEX_PRIVATE_FLAG),
		    expected, tp, NULL, FUTEX_BITSET_MATCH_ANY) == 0)
		return 0;
	return errno;
}

static inline int futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t deadline_ns)
{
	return futex_wait_on(word, expected, deadline_ns, false);
}

/* Wake up to @n sleepers on @word.  Safe on an address whose owner has
 * already returned: the kernel only hashes the address, and every sleeper
 * tolerates spurious wake-ups. */
static inline void futex_wake_on(_Atomic uint32_t *word, int n, bool shared)
{
	TS_CHECK_NO_LOCK_HELD("futex_wake");
	syscall(SYS_futex, word, FUTEX_WAKE | (shared ? 0 : FUTEX_PRIVATE_FLAG), n, NULL, NULL, 0);
}

static inline void futex_wake(_Atomic uint32_t *word, int n)
{
	futex_wake_on(word, n, false);
}

#endif
