/* SPDX-License-Identifier: MIT */
/* libturnstile — the turnstile's lock-free fast paths, inlined into callers.
 *
 * Included by turnstile.h; nothing here is API.  An uncontended wait+return
 * is two compare-and-swaps on one word, so the cost of two out-of-line
 * calls through the PLT would be a third of the total: callers built with
 * gcc or clang inline these paths, and the library still exports
 * ts_turnstile_wait and ts_pass_return (identical behaviour) for everyone
 * else.  Define TS_NO_INLINE before including to call the library instead
 * (the tests do both).  C++ always calls the library.
 *
 * ABI: the state word is the first member of every turnstile and its
 * encoding below is frozen for the library's major version (see the
 * versioning policy in configure.ac).
 *
 *   word = available << 2 | CLOSED | WAITERS      (available is signed)
 *
 * INVARIANT (no barging): WAITERS is set exactly when the queue is
 * non-empty (or always, while a freshness guard holds: see below), and
 * both change only under the turnstile's lock.  Every
 * operation that raises `available` under the lock hands passes to waiters
 * while it is positive, so whenever the lock is free, WAITERS implies
 * available <= 0 — except between the wake batches of a large grow, when
 * passes owed to queued waiters are still being handed out, and while a
 * freshness guard has passed, when free passes wait for the guard's move
 * (either way the fast paths see WAITERS and go to the lock, which hands
 * them out in order).  These fast paths act only on a word WITHOUT the WAITERS
 * bit, by CAS on the whole word: a fast acquire never takes a pass while
 * anyone is queued, and a fast release never adds a pass a queued waiter
 * should have had — a concurrent enqueue sets WAITERS, their CAS fails,
 * and they take the locked path. */
#ifndef TURNSTILE_FASTPATH_H
#define TURNSTILE_FASTPATH_H

#include <stdbool.h>
#include <stdint.h>

#include <turnstile/common.h>
#include <turnstile/cancel.h>
#include <turnstile/turnstile.h>

TS_BEGIN_DECLS

/* The locked paths, exported for the inlined fast paths only. */
TS_API int ts_private_wait_slow(ts_turnstile *t, const ts_claim *claim, int64_t deadline_ns,
				ts_cancel *cancel, ts_pass *pass);
TS_API void ts_private_return_slow(ts_turnstile *t);
/* For libturnstile-fleet only, not API: from now on grant no pass at or
 * after @until_ns (CLOCK_BOOTTIME), whoever asks first (the fleet keeps it
 * at its member's deadline, so a resumed process admits nobody on a stale
 * share); 0 lifts it.  While set, every wait and return takes the lock.
 * 0, EINVAL, or ENOTSUP (a process-shared handle). */
TS_API int ts_private_turnstile_guard(ts_turnstile *t, int64_t until_ns);

TS_END_DECLS

/* C++ (before C++23) has no <stdatomic.h>: it calls the exported
 * functions, which run the same bodies. */
#ifndef __cplusplus
#include <errno.h>
#include <stdatomic.h>

/* Callers' builds with gcc or clang inline the fast paths: gnu_inline
 * definitions are used only for inlining and never emitted, so an
 * un-inlined call goes to the library's exported definition, which runs
 * the same body.  Inside the library, and for other compilers, the helpers
 * are ordinary static inline functions. */
#if defined(__GNUC__) && !defined(TS_BUILDING_LIBRARY) && !defined(TS_NO_INLINE)
#define TS_PRIVATE_INLINE_FAST_PATHS 1
#define TS_PRIVATE_INLINE extern __inline__ __attribute__((__gnu_inline__, __always_inline__))
#define TS_PRIVATE_HELPER TS_PRIVATE_INLINE
#else
#define TS_PRIVATE_HELPER static inline
#endif

#define TS_PRIVATE_WORD_WAITERS ((uint64_t)1)
#define TS_PRIVATE_WORD_CLOSED ((uint64_t)2)
#define TS_PRIVATE_WORD_UNIT ((uint64_t)4)

/* The turnstile's first cache line, as the fast paths see it.  The ceiling
 * is kept in units (ceiling << 2), so that "available < ceiling" is one
 * signed compare with the word when WAITERS is clear (CLOSED adds 2, below
 * one unit).  Written only under the lock, by resize. */
struct ts_private_turnstile_head {
	_Atomic uint64_t word;
	_Atomic int64_t ceiling_units;
};

TS_PRIVATE_HELPER struct ts_private_turnstile_head *ts_private_head(ts_turnstile *t)
{
	return (struct ts_private_turnstile_head *)(void *)t;
}

/* Take a free pass without the lock: only when nobody is queued, the
 * turnstile is open and @cancel has not fired.  false: take the slow path,
 * which also sorts out the closed / cancelled precedence.  Acquire: the
 * pass carries everything its last holder wrote before returning it. */
TS_PRIVATE_HELPER bool ts_private_take_fast(ts_turnstile *t, const ts_cancel *cancel,
					ts_pass *pass)
{
	_Atomic uint64_t *word = &ts_private_head(t)->word;
	uint64_t w;

	if (cancel && atomic_load_explicit(&cancel->private_fired, memory_order_seq_cst))
		return false;
	w = atomic_load_explicit(word, memory_order_relaxed);
	/* with both flag bits clear, w >= one unit is available > 0 */
	while (!(w & (TS_PRIVATE_WORD_WAITERS | TS_PRIVATE_WORD_CLOSED)) &&
	       (int64_t)w >= (int64_t)TS_PRIVATE_WORD_UNIT) {
		if (atomic_compare_exchange_weak_explicit(word, &w, w - TS_PRIVATE_WORD_UNIT,
							  memory_order_acquire,
							  memory_order_relaxed)) {
			pass->private_turnstile = t;
			pass->private_waited_ns = 0;
			return true;
		}
	}
	return false;
}

/* Give a pass back without the lock when nobody is queued and not every
 * pass is free already (a second copy of a returned pass goes to the slow
 * path, which ignores it).  Release: the next holder, whichever path hands
 * it the pass, acquires this word. */
TS_PRIVATE_HELPER bool ts_private_give_back_fast(ts_turnstile *t)
{
	struct ts_private_turnstile_head *head = ts_private_head(t);
	uint64_t w = atomic_load_explicit(&head->word, memory_order_relaxed);
	int64_t ceiling_units = atomic_load_explicit(&head->ceiling_units, memory_order_relaxed);
	_Atomic uint64_t *word = &head->word;

	while (!(w & TS_PRIVATE_WORD_WAITERS) && (int64_t)w < ceiling_units)
		if (atomic_compare_exchange_weak_explicit(word, &w, w + TS_PRIVATE_WORD_UNIT,
							  memory_order_release,
							  memory_order_relaxed))
			return true;
	return false;
}

#define TS_PRIVATE_WAIT_BODY                                                  \
	if (!pass)                                                            \
		return EINVAL;                                                \
	if (!t || !claim) {                                                   \
		pass->private_turnstile = NULL;                               \
		pass->private_waited_ns = 0;                                  \
		return EINVAL;                                                \
	}                                                                     \
	if (ts_private_take_fast(t, cancel, pass))                            \
		return 0;                                                     \
	pass->private_turnstile = NULL;                                       \
	pass->private_waited_ns = 0;                                          \
	return ts_private_wait_slow(t, claim, deadline_ns, cancel, pass);

#define TS_PRIVATE_RETURN_BODY                                                \
	ts_turnstile *t;                                                      \
	if (!p || !p->private_turnstile)                                      \
		return;                                                       \
	t = p->private_turnstile;                                             \
	p->private_turnstile = NULL; /* unissued now: waited_ns is ignored */ \
	if (!ts_private_give_back_fast(t))                                    \
		ts_private_return_slow(t);

#ifdef TS_PRIVATE_INLINE_FAST_PATHS
TS_PRIVATE_INLINE int ts_turnstile_wait(ts_turnstile *t, const ts_claim *claim,
					int64_t deadline_ns, ts_cancel *cancel, ts_pass *pass)
{
	TS_PRIVATE_WAIT_BODY
}

TS_PRIVATE_INLINE void ts_pass_return(ts_pass *p)
{
	TS_PRIVATE_RETURN_BODY
}
#endif

#endif /* !__cplusplus */

#endif
