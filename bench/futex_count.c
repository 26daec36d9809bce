/* SPDX-License-Identifier: MIT */
/* Counts the futex system calls libturnstile makes, exactly and without
 * tracing overhead: the library calls libc's syscall(), so this definition
 * in the benchmark executable interposes it, counts, and forwards to the
 * real one.  glibc's own pthread and sem_t code makes inline system calls
 * that never pass through here; run.sh counts those with strace. */
#include "futex_count.h"

#include <dlfcn.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h> /* declares the syscall() this file defines */

_Atomic unsigned long futex_wait_calls, futex_wake_calls;

long syscall(long nr, ...)
{
	static long (*real)(long, ...);
	va_list ap;
	long a[6];

	va_start(ap, nr);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (nr == SYS_futex) {
		int op = (int)a[1] & FUTEX_CMD_MASK;
		if (op == FUTEX_WAKE)
			atomic_fetch_add_explicit(&futex_wake_calls, 1, memory_order_relaxed);
		else if (op == FUTEX_WAIT || op == FUTEX_WAIT_BITSET)
			atomic_fetch_add_explicit(&futex_wait_calls, 1, memory_order_relaxed);
	}
	if (!real)
		real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
	return real(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
