/* SPDX-License-Identifier: MIT */
/* Counts heap allocations, exactly and without tracing: these definitions
 * in the benchmark executable interpose the C library's allocator for the
 * whole process (libturnstile, libuv and glibc's own calls), count while
 * alloc_counting is set, and forward to glibc's __libc_ entry points (not
 * dlsym, which itself allocates).  free is not interposed: glibc's frees
 * what these return.  Counting is one relaxed load when off. */
#include "alloc_count.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <malloc.h>

_Atomic unsigned long alloc_calls;
_Atomic bool alloc_counting;

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void *__libc_memalign(size_t align, size_t size);

static inline void count(void)
{
	if (atomic_load_explicit(&alloc_counting, memory_order_relaxed))
		atomic_fetch_add_explicit(&alloc_calls, 1, memory_order_relaxed);
}

void *malloc(size_t size)
{
	count();
	return __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
	count();
	return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
	count();
	return __libc_realloc(p, size);
}

void *aligned_alloc(size_t align, size_t size)
{
	count();
	return __libc_memalign(align, size);
}

void *memalign(size_t align, size_t size)
{
	count();
	return __libc_memalign(align, size);
}

int posix_memalign(void **out, size_t align, size_t size)
{
	count();
	if (align < sizeof(void *) || (align & (align - 1)))
		return EINVAL;
	void *p = __libc_memalign(align, size);
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}
