/* SPDX-License-Identifier: MIT */
/* Private: USDT probes (provider "libturnstile") for bpftrace, perf and
 * SystemTap.  With <sys/sdt.h> a probe is one nop plus an ELF note: nothing
 * runs unless a tracer attaches.  Without it (--disable-usdt, or no
 * systemtap-sdt-dev) a probe still evaluates its arguments, as glibc's do,
 * so both builds compile the same code.  Names follow PostgreSQL's
 * (lock__wait__start): "__" reads as "-" in the tools.
 *
 * The uncontended fast paths are inlined into callers and carry no probe:
 * wait__start/done fire for waits that went to the locked path (the ones
 * that can wait), pass__return for returns that found waiters.  Build the
 * caller with -DTS_NO_INLINE to see those too. */
#ifndef TS_LIB_PROBE_H
#define TS_LIB_PROBE_H

#ifdef TS_HAVE_SDT
#include <sys/sdt.h>
#define TS_PROBE1(name, a) DTRACE_PROBE1(libturnstile, name, a)
#define TS_PROBE2(name, a, b) DTRACE_PROBE2(libturnstile, name, a, b)
#define TS_PROBE3(name, a, b, c) DTRACE_PROBE3(libturnstile, name, a, b, c)
#else
#define TS_PROBE1(name, a) ((void)(a))
#define TS_PROBE2(name, a, b) ((void)(a), (void)(b))
#define TS_PROBE3(name, a, b, c) ((void)(a), (void)(b), (void)(c))
#endif

#endif
