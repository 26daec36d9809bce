/* SPDX-License-Identifier: MIT */
/* Free after the last return is safe (DESIGN.md, as POSIX semaphores): the
 * moment every wait has returned and every pass or item is back, the object
 * may be freed, even while the thread that granted, put, resized, closed or
 * fired is still inside that call.
 *
 * Each scenario widens the releaser's window with test hooks: right after
 * the grant (or the cancel flag) a spurious futex wake lets the waiter see
 * its outcome without the lock, as a spinning waiter or a futex timeout
 * would; then, just before the releaser's unlock (or before the firer's
 * nudge), the hook waits for the waiter to finish — free included — within
 * WINDOW_NS.  A waiter that finishes inside that window is counted: it
 * freed the object while the releaser was about to touch it again (ASan
 * reports the write; the count fails the test in every build). */
#include <errno.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hook.h"
#include "spinlock.h"
#include "testutil.h"
#include "waiter.h"

#define ROUNDS 400
#define WINDOW_NS 300000

static _Atomic(void *) target;  /* the object whose release is widened */
static _Atomic int waiter_done; /* the waiter returned and freed */
static _Atomic int early;       /* ...while its releaser was in the window */

/* The hooks run under the releaser's lock, where the library itself never
 * makes a system call (fault-injection builds check that in futex.h), so
 * the test's own wake goes to the kernel directly. */
static void spurious_wake(void *word)
{
	syscall(SYS_futex, word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1, NULL, NULL, 0);
}

static void wait_out_window(void)
{
	int64_t end = ts_now_ns() + WINDOW_NS;
	while (ts_now_ns() < end)
		if (atomic_load(&waiter_done)) {
			atomic_fetch_add(&early, 1);
			return;
		}
}

static void widen(enum ts_hook_point point, void *obj)
{
	switch (point) {
	case TS_HOOK_GRANTED:
		spurious_wake(obj); /* before the real one, after the unlock */
		break;
	case TS_HOOK_UNLOCKING:
		if (obj == atomic_load(&target))
			wait_out_window();
		break;
	case TS_HOOK_FIRING:
		if (obj == atomic_load(&target)) {
			ts_cancel *c = obj;
			spin_lock(&c->private_lock);
			void *first = c->private_waiters ? &c->private_waiters->state : NULL;
			spin_unlock(&c->private_lock);
			if (first) /* by address: it may have left since */
				spurious_wake(first);
			wait_out_window();
		}
		break;
	default:
		break;
	}
}

static void arm(void *obj)
{
	atomic_store(&waiter_done, 0);
	atomic_store(&target, obj);
	atomic_store(&ts_hook, widen);
}

static void disarm(void)
{
	atomic_store(&ts_hook, NULL);
	atomic_store(&target, NULL);
}

static const ts_claim claim = { 0, 0, 0 };

/* ---- turnstile: the waiter returns its pass (if any) and frees ---------- */

static void *turnstile_waiter(void *p)
{
	ts_turnstile *t = p;
	ts_pass pass;
	int r = ts_turnstile_wait(t, &claim, 0, NULL, &pass);
	cr_assert(r == 0 || r == ESHUTDOWN);
	ts_pass_return(&pass);
	ts_turnstile_free(t); /* the last user: every wait returned, every pass back */
	atomic_store(&waiter_done, 1);
	return NULL;
}

enum release { BY_RETURN, BY_RESIZE, BY_CLOSE };

static void turnstile_rounds(enum release how)
{
	atomic_store(&early, 0);
	for (int i = 0; i < ROUNDS; i++) {
		ts_turnstile *t = ts_turnstile_new(how == BY_RETURN ? 1 : 0);
		ts_pass held;
		pthread_t th;
		if (how == BY_RETURN)
			cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &held), 0);
		start_thread(&th, turnstile_waiter, t);
		WAIT_FOR(queued(t) == 1);
		arm(t);
		if (how == BY_RETURN)
			ts_pass_return(&held);
		else if (how == BY_RESIZE)
			ts_turnstile_resize(t, 1);
		else
			ts_turnstile_close(t);
		disarm();
		join_bounded(th); /* t is gone now */
	}
	cr_assert_eq(atomic_load(&early), 0,
		     "%d waiters freed the turnstile while its releaser was still inside",
		     atomic_load(&early));
}

Test(free_after_last_return, turnstile_freed_by_a_waiter_granted_by_a_return)
{
	turnstile_rounds(BY_RETURN);
}

Test(free_after_last_return, turnstile_freed_by_a_waiter_granted_by_a_resize)
{
	turnstile_rounds(BY_RESIZE);
}

Test(free_after_last_return, turnstile_freed_by_a_waiter_closed_out)
{
	turnstile_rounds(BY_CLOSE);
}

/* ---- waitlist: the taker gets an item (or is closed out) and frees ------ */

static void *taker(void *p)
{
	ts_waitlist *w = p;
	void *item;
	int r = ts_waitlist_take(w, &item, NULL, NULL, 0, NULL);
	cr_assert(r == 0 || r == ESHUTDOWN);
	ts_waitlist_free(w); /* items are tokens here: nothing to drain */
	atomic_store(&waiter_done, 1);
	return NULL;
}

static void waitlist_rounds(bool by_close)
{
	atomic_store(&early, 0);
	for (int i = 0; i < ROUNDS; i++) {
		ts_waitlist *w = ts_waitlist_new(1, 0);
		void *held;
		pthread_t th;
		cr_assert_eq(ts_waitlist_take(w, &held, NULL, NULL, 0, NULL), 0);
		start_thread(&th, taker, w);
		size_t waiting = 0;
		WAIT_FOR((ts_waitlist_stats(w, NULL, NULL, &waiting), waiting == 1));
		arm(w);
		if (by_close)
			ts_waitlist_close(w);
		else
			ts_waitlist_put(w, held);
		disarm();
		join_bounded(th);
	}
	cr_assert_eq(atomic_load(&early), 0,
		     "%d takers freed the waitlist while its releaser was still inside",
		     atomic_load(&early));
}

Test(free_after_last_return, waitlist_freed_by_a_taker_handed_an_item)
{
	waitlist_rounds(false);
}

Test(free_after_last_return, waitlist_freed_by_a_taker_closed_out)
{
	waitlist_rounds(true);
}

/* ---- cancel token: destroyed by its waiter while the fire runs ---------- */

static ts_turnstile *never_admits;
static _Atomic(ts_cancel *) token;

static void *cancelled_waiter(void *p)
{
	ts_cancel *c = malloc(sizeof(*c));
	ts_pass pass;
	ts_cancel_init(c);
	atomic_store(&token, c);
	cr_assert_eq(ts_turnstile_wait(never_admits, &claim, 0, c, &pass), ECANCELED);
	ts_cancel_destroy(c);
	free(c);
	atomic_store(&waiter_done, 1);
	return p;
}

Test(free_after_last_return, cancel_token_destroyed_by_its_waiter_while_the_fire_runs)
{
	never_admits = ts_turnstile_new(0);
	atomic_store(&early, 0);
	for (int i = 0; i < ROUNDS; i++) {
		pthread_t th;
		atomic_store(&token, NULL);
		start_thread(&th, cancelled_waiter, NULL);
		WAIT_FOR(queued(never_admits) == 1);
		ts_cancel *c = atomic_load(&token);
		arm(c);
		ts_cancel_fire(c);
		disarm();
		join_bounded(th);
	}
	ts_turnstile_free(never_admits);
	cr_assert_eq(atomic_load(&early), 0,
		     "%d tokens were destroyed while their fire was still inside",
		     atomic_load(&early));
}

/* ---- calls that make their effect visible to the lock-free paths --------
 * The model (tests/model/turnstile.pml) found these: with nobody queued, a
 * slow return, a resize or a close is seen by the fast paths (a free pass,
 * the CLOSED bit) before its unlock, so a lock-free user can finish and
 * free without ever being woken.  Here that user runs inside the window. */

enum lockfree_case { SLOW_RETURN_EMPTIED, RESIZE_NOBODY_QUEUED, CLOSE_NOBODY_QUEUED };
static _Atomic int go, released, leaver_done, windows_hit;
static enum lockfree_case lf_case;

static void *lockfree_user(void *p)
{
	ts_turnstile *tt = p;
	ts_pass pass;
	/* go: inside the releaser's window; released: its call returned
	 * without one (the leaver left before the return saw WAITERS) */
	while (!atomic_load(&go) && !atomic_load(&released))
		sched_yield();
	int r = ts_turnstile_wait(tt, &claim, TS_DEADLINE_NOW, NULL, &pass);
	cr_assert(lf_case == CLOSE_NOBODY_QUEUED ? r == ESHUTDOWN : r == 0);
	ts_pass_return(&pass);
	ts_turnstile_free(tt); /* every wait returned, every pass back */
	atomic_store(&waiter_done, 1);
	return NULL;
}

static void *leaver(void *p)
{
	ts_pass pass;
	cr_assert_eq(ts_turnstile_wait(p, &claim, in_ms(5), NULL, &pass), ETIMEDOUT);
	atomic_store(&leaver_done, 1);
	return NULL;
}

static void lockfree_hook(enum ts_hook_point point, void *obj)
{
	if (obj != atomic_load(&target))
		return;
	if (point == TS_HOOK_RETURNING) {
		/* let the queued waiter time out and leave first */
		int64_t end = ts_now_ns() + TEST_PATIENCE_NS;
		while (!atomic_load(&leaver_done) && ts_now_ns() < end)
			sched_yield();
	} else if (point == TS_HOOK_UNLOCKING) {
		atomic_fetch_add(&windows_hit, 1);
		atomic_store(&go, 1);
		wait_out_window();
	}
}

static void lockfree_rounds(enum lockfree_case c)
{
	lf_case = c;
	atomic_store(&early, 0);
	atomic_store(&windows_hit, 0);
	for (int i = 0; i < ROUNDS / 4; i++) {
		ts_turnstile *tt = ts_turnstile_new(c == SLOW_RETURN_EMPTIED ? 1 : 0);
		pthread_t user, left;
		ts_pass held;
		atomic_store(&go, 0);
		atomic_store(&released, 0);
		atomic_store(&leaver_done, 0);
		atomic_store(&waiter_done, 0);
		if (c == SLOW_RETURN_EMPTIED) {
			cr_assert_eq(ts_turnstile_wait(tt, &claim, 0, NULL, &held), 0);
			start_thread(&left, leaver, tt);
			/* WAITERS set: the return goes slow (unless the leaver
			 * is gone by then: that round has no window) */
			WAIT_FOR(queued(tt) == 1 || atomic_load(&leaver_done));
		}
		start_thread(&user, lockfree_user, tt);
		atomic_store(&target, tt);
		atomic_store(&ts_hook, lockfree_hook);
		if (c == SLOW_RETURN_EMPTIED)
			ts_pass_return(&held);
		else if (c == RESIZE_NOBODY_QUEUED)
			ts_turnstile_resize(tt, 1);
		else
			ts_turnstile_close(tt);
		atomic_store(&released, 1);
		disarm();
		join_bounded(user); /* tt is gone now */
		if (c == SLOW_RETURN_EMPTIED)
			join_bounded(left);
	}
	cr_assert_eq(atomic_load(&early), 0,
		     "%d lock-free users freed the turnstile while its releaser was still inside",
		     atomic_load(&early));
	cr_assert_gt(atomic_load(&windows_hit), 0, "no round reached the window");
}

Test(free_after_last_return, turnstile_freed_after_a_slow_return_whose_queue_emptied)
{
	lockfree_rounds(SLOW_RETURN_EMPTIED);
}

Test(free_after_last_return, turnstile_freed_after_a_resize_with_nobody_queued)
{
	lockfree_rounds(RESIZE_NOBODY_QUEUED);
}

Test(free_after_last_return, turnstile_freed_after_a_close_with_nobody_queued)
{
	lockfree_rounds(CLOSE_NOBODY_QUEUED);
}

/* ---- a close waking more waiters than one wake batch -------------------- */

#define CROWD 40
static _Atomic int still_inside;

static void *crowd_member(void *p)
{
	ts_turnstile *t = p;
	ts_pass pass;
	cr_assert_eq(ts_turnstile_wait(t, &claim, 0, NULL, &pass), ESHUTDOWN);
	if (atomic_fetch_sub(&still_inside, 1) == 1)
		ts_turnstile_free(t); /* the last to return frees it */
	return NULL;
}

Test(free_after_last_return, turnstile_freed_by_the_last_of_a_crowd_closed_out)
{
	for (int round = 0; round < 20; round++) {
		ts_turnstile *t = ts_turnstile_new(0);
		pthread_t th[CROWD];
		atomic_store(&still_inside, CROWD);
		for (int i = 0; i < CROWD; i++)
			start_thread(&th[i], crowd_member, t);
		WAIT_FOR(queued(t) == CROWD);
		ts_turnstile_close(t); /* several batches: t is busy across the gaps */
		for (int i = 0; i < CROWD; i++)
			join_bounded(th[i]);
	}
}
