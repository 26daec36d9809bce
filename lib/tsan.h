/* SPDX-License-Identifier: MIT */
/* Private: tell ThreadSanitizer about happens-before edges it cannot see
 * because they go through code it did not instrument (liburcu publishes
 * hash-table nodes with its own barriers).  No-ops in other builds. */
#ifndef TS_LIB_TSAN_H
#define TS_LIB_TSAN_H

#if defined(__SANITIZE_THREAD__)
#define TS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TS_TSAN 1
#endif
#endif

#ifdef TS_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define tsan_acquire(addr) __tsan_acquire(addr)
#define tsan_release(addr) __tsan_release(addr)
#else
#define tsan_acquire(addr) ((void)(addr))
#define tsan_release(addr) ((void)(addr))
#endif

#endif
