/* SPDX-License-Identifier: MIT */
/* libturnstile — cancel token.
 *
 * A cancel token ends every wait that was given it: firing it from any thread
 * wakes each such wait, which then returns ECANCELED (unless it was granted
 * first).  A turnstile wait that starts on an already-fired token fails at
 * once, even when a pass is free: a caller that gave up must not take a
 * resource.  A waitlist take still returns an item that is READY (it
 * checks the token only when nothing is, and then fails without loading).
 * An event-loop wait (turnstile/async.h) given the token is completed
 * instead of woken: its callback gets ECANCELED in its notifier's next
 * dispatch (ts_wait_turn_async fails open: 0 with an unissued pass).
 */
#ifndef TURNSTILE_CANCEL_H
#define TURNSTILE_CANCEL_H

#include <turnstile/common.h>

TS_BEGIN_DECLS

struct ts_waiter_;

/* Complete so that it may live on the stack or inside another struct; its
 * members are private. */
typedef struct ts_cancel {
	TS_PRIVATE_ATOMIC(uint32_t) private_fired; /* 0, or firing (1), or fired (2) */
	TS_PRIVATE_ATOMIC(uint32_t) private_lock;
	struct ts_waiter_ *private_waiters; /* waits parked on this token */
} ts_cancel;

/* Static initializer, equivalent to ts_cancel_init(). */
#define TS_CANCEL_INIT { 0, 0, NULL }

/* ts_cancel_init - make @c an unfired token.  Not thread-safe with respect to
 * other uses of @c.  NULL: no-op. */
TS_API void ts_cancel_init(ts_cancel *c);

/* ts_cancel_fire - fire @c and wake every wait currently using it.
 * Idempotent; callable from any thread, concurrently with waits on @c.
 * NULL: no-op. */
TS_API void ts_cancel_fire(ts_cancel *c);

/* ts_cancel_fired - whether @c has been fired.  Thread-safe.  NULL: false. */
TS_API bool ts_cancel_fired(const ts_cancel *c);

/* ts_cancel_destroy - end @c's life.  No wait may still be using it (an
 * event-loop wait uses it until its callback begins or ts_async_cancel
 * returns).  It may run while a ts_cancel_fire of @c on another thread has
 * not returned yet (the waits it ended may return first): it then waits
 * until that fire no longer touches the token, so @c may be freed when
 * this returns.
 * NULL: no-op. */
TS_API void ts_cancel_destroy(ts_cancel *c);

TS_END_DECLS

#endif
