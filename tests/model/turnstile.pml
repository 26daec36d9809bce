/* SPDX-License-Identifier: MIT */
/* Model of the turnstile's protocol as the C code runs it: the state word
 * and its fast paths (include/turnstile/fastpath.h), the lock, queue,
 * drain, leave, resize and close (lib/turnstile.c), parking and the grant
 * exchange (lib/waiter.c, lib/waiter.h), the cancel token (lib/cancel.c)
 * and free after the last return (lib/busy.h).  tests/model/check.sh checks
 * it exhaustively in several configurations and shows, by seeded mutations,
 * that each check can fail.  Change the protocol there, change it here.
 *
 * C                                            here
 * -------------------------------------------  -------------------------------
 * t->word = available<<2 | CLOSED | WAITERS    avail (signed), cbit, wbit
 * t->ceiling_units, t->queue (lock held)       ceiling, queue[]/qlen: FIFO (all
 *                                              claims equal; the skiplist's
 *                                              order is tested in C)
 * t->lock (spinlock.h, a futex mutex)          lk: lock() waits until free
 * t->busy (busy.h)                             busy
 * waiter.state QUEUED/SLEEPING/GRANTED/CLOSED  st[w] (0/1/3/4; LOAD is the
 *                                              waitlist's: waitlist.pml)
 * futex_wait(&state, SLEEPING, deadline)       asleep[w] = (st[w] == SLEEPING);
 *                                              returns when a wake clears it,
 *                                              or on timeout (a waiter with a
 *                                              deadline), or spuriously (SPUR
 *                                              times per waiter)
 * futex_wake(&state) (wakeups_flush)           asleep[w] = false: by address,
 *                                              never a touch of the object
 * struct wakeups, WAKE_BATCH                   wk (set of waiters), FULL at WB
 *                                              (1: every batch path is taken)
 * ts_cancel: private_fired 0/1/2, lock, list   flag, tlock, reg[w]
 *
 * Every C atomic operation is one step; a CAS loop is one step that acts
 * on the current value (a failed CAS changes nothing and is retried).
 * Steps under the lock that touch only lock-held data (queue, ceiling) are
 * merged into the next atomic operation: nobody else can see between them.
 *
 * ts_private_take_fast   fired? slow path : CAS -UNIT if !WAITERS && !CLOSED
 *                        && available > 0
 * ts_private_give_back_fast  read ceiling_units; CAS +UNIT if !WAITERS &&
 *                        available < that ceiling (it may be stale)
 * ts_private_wait_slow   CLOSED (relaxed read)? ESHUTDOWN; fired? ECANCELED
 * enqueue                lock; CLOSED? ESHUTDOWN; !WAITERS && available > 0?
 *                        take; deadline? ETIMEDOUT; set WAITERS (CAS, if
 *                        clear) + insert; spin = head at arrival; unlock
 * ts_lib_cancel_watch /_unwatch   one step under the token's lock
 * ts_lib_waiter_park     spin phase (head at arrival; its many reads are
 *                        one read at any moment, as a read that sees nothing
 *                        changes nothing): final? / fired? / deadline? /
 *                        budget out -> park.  Park: load +
 *                        CAS QUEUED->SLEEPING (one step: a failed CAS
 *                        reloads); then fired? CANCELED; deadline? TIMEDOUT;
 *                        futex_wait; again
 * wait_queued            unwatch; negative: leave(); final (GRANTED,
 *                        CLOSED): return at once, without the lock
 * leave                  lock; final? keep it : unlink self, clear WAITERS if
 *                        the queue is empty; unlock
 * ts_private_return_slow lock; available >= ceiling? ignore (a copy: asserted
 *                        never to happen to a real return); +UNIT; drain
 *                        unless CLOSED; unlock_and_wake
 * drain                  while available > 0 && queue: batch full? more;
 *                        unlink head; its deadline passed? exchange
 *                        EXPIRED (no pass moves); else -UNIT, exchange
 *                        GRANTED; collect a wake
 *                        if it was SLEEPING (one step: WAITERS is set, the
 *                        head is only unlinked under the lock); queue empty?
 *                        clear WAITERS
 * unlock_and_wake        more? busy_enter (under the lock); unlock; wake;
 *                        while more: lock, drain unless CLOSED, unlock,
 *                        wake; then busy_leave if it entered
 * ts_turnstile_resize    lock; ceiling = n; word += n - old ceiling; drain
 *                        unless CLOSED; unlock_and_wake
 * ts_turnstile_close     lock; set CLOSED; unlink + exchange CLOSED up to a
 *                        batch; clear WAITERS once empty, else busy_enter
 *                        (first gap only, under the lock); unlock; wake;
 *                        again while any left; busy_leave if it entered
 * ts_cancel_fire         CAS 0->FIRING; nudge_batch (lock; per registered
 *                        waiter, batch not full: CAS SLEEPING->QUEUED, collect;
 *                        unlock; wake) while a batch filled; store FIRED
 * ts_cancel_destroy      waits while FIRING
 * ts_turnstile_free      lock; unlock; busy_wait_idle; free
 *
 * WHY FREE TAKES THE LOCK.  With a free that only waited while busy, the
 * model found four ways to free the turnstile while a call still touched
 * it, each one a thread that learns of the last effect without the lock
 * while the call that made it still holds the lock (its unlock, or the
 * rest of its drain, comes after):
 *  - a slow return that finds nobody queued (a waiter timed out in
 *    between) adds its pass under the lock: a fast take sees it, the taker
 *    returns it on the fast path, and frees;
 *  - a resize with nobody queued: a fast take sees the pass it added;
 *  - a close with nobody queued: a wait reads CLOSED without the lock
 *    (ESHUTDOWN), and frees;
 *  - a granted (or closed-out) waiter that returns as soon as it sees its
 *    state, before its granter unlocks.
 * The cure chosen: ts_turnstile_free passes through the lock, so every
 * call whose effect it knows of has unlocked, or has entered busy (under
 * the lock, before the unlock that opens its first gap) — hence no busy
 * marks on paths without gaps, and no pass through the lock in the waiter.
 * Taking the lock costs free only.  (The cure first modelled — a slow
 * return finding nobody queued retries the fast path, resize and close are
 * always busy, every woken waiter passes through its granter's lock — also
 * passed, but puts a lock round trip on every woken waiter's path; it is
 * no longer modelled.)  MUT_RETURN_DRAINS_CLOSED (a slow return between the
 * batches of a close grants a waiter it has not reached yet), MUT_FREE_WITHOUT_LOCK,
 * MUT_FREE_WITHOUT_BUSY_WAIT
 * and MUT_BUSY_AFTER_UNLOCK show that each part of the cure is needed.
 *
 * CHECKED (assertions; an invalid end state is a waiter asleep forever or a
 * call that cannot finish):
 *  - Monitor, in every state: a queued waiter implies WAITERS; with the
 *    lock free, WAITERS iff someone is queued, and (outside a busy gap)
 *    WAITERS implies available <= 0; held + available == ceiling.
 *  - fast take and fast return never act while a waiter is queued;
 *  - a grant or close exchange never meets a final state (no double grant)
 *    nor a waiter that has returned; a leaver is linked (never unlinked
 *    twice); a nudge never touches a waiter that has returned;
 *  - FREE AFTER THE LAST RETURN: each call's effect (a return, a resize, a
 *    close) is its linearization point; ghosts carry what each thread has
 *    observed through the word's RMWs, the lock and a node's state.  A
 *    thread whose calls have all returned and that knows (through the
 *    library, or by joining threads whose calls have all returned) that
 *    every other call has taken effect frees the turnstile
 *    (ts_turnstile_free: lock, unlock, wait while busy); any later touch
 *    of the word, ceiling, lock or busy count by anyone fails.  The cancel
 *    token likewise (destroyed by the last of its waiters, after the
 *    fire's FIRING);
 *  - NEVER AFTER THE DEADLINE: a waiter is never granted once its
 *    deadline has passed (Clock passes each deadline at any moment; a
 *    waiter times out only after it);
 *  - at the end: queue empty, WAITERS clear, every pass free and none
 *    held (no pass lost or doubled), busy 0.
 *
 * MUTATIONS (-DMUT_x; check.sh requires each to be caught): CANCEL_BEFORE_
 * SLEEP, CLEAR_OUTSIDE_LOCK, GRANT_AFTER_UNLOCK, WAKE_LOST, FAST_TAKE_
 * BARGES; FREE_WITHOUT_LOCK (free only waits while busy: one of the four
 * above), FREE_WITHOUT_BUSY_WAIT (free only passes through the lock: it
 * overtakes a close or drain between its batches), BUSY_AFTER_UNLOCK
 * (busy marked just after the unlock that opens a gap: free passes through
 * the lock in that window), GRANT_EXPIRED (drain grants a head whose
 * deadline has passed: the rule before issue 21).
 *
 * THE FRESHNESS GUARD (-DGUARD; ts_private_turnstile_guard, the fleet's):
 * the turnstile starts guarded (WAITERS set for good); a Guard thread
 * lets the guard's instant pass at any moment (stale), moves it (lock;
 * fresh again; drain; unlock_and_wake), and lifts it as its last call
 * (lock; unguarded; WAITERS follows the queue; drain).  Enqueue takes a
 * pass only with the queue empty and the guard fresh; drain grants
 * nothing while stale (C reads the clock once per wake batch; batches of
 * one here).  CHECKED: no pass is taken or granted while stale, by any
 * path; the invariants above, with WAITERS set for good while guarded (a
 * free pass may sit beside a queue while stale); no waiter is left
 * asleep (a move drains).  MUTATIONS: GUARD_TAKE_STALE (enqueue ignores
 * the clock), GUARD_DRAIN_STALE (drain ignores it), GUARD_CLEARS_WAITERS
 * (leave clears WAITERS while guarded: the fast take then takes on a
 * stale guard), GUARD_NO_DRAIN (moving and lifting the guard drain
 * nothing: a waiter queued while stale sleeps on).
 *
 * ABSTRACTED: memory order (every step is sequentially consistent: the
 * happens-before of issue 11 section 1 is for TSan, not for this model);
 * the spinlock's futex sleeping (a lock that waits) and the futex_wake an
 * unlock owes a sleeper on the lock (by address, after the unlock's
 * exchange: harmless on freed memory, futex.h); the skiplist order
 * (FIFO); spin_policy (the head at arrival may spin, and may stop at once);
 * the probes, hooks and waiting counter; claims and timestamps; EINVAL. */

#ifndef NW
#define NW 3            /* waiters (at most 3) */
#endif
#ifndef NR
#define NR 1            /* releasers: threads holding a pass at the start */
#endif
#ifndef CEIL
#define CEIL 1          /* the ceiling at the start */
#endif
#ifndef DLMASK
#define DLMASK 1        /* waiters with a deadline (it passes any time: Clock) */
#endif
#ifndef CXMASK
#define CXMASK 0        /* waiters watching the cancel token */
#endif
#ifndef RS1
#define RS1 (-1)        /* a resizer's first and second ceiling, -1: none */
#endif
#ifndef RS2
#define RS2 (-1)
#endif
#ifndef CLOSER
#define CLOSER 0        /* a thread closes the turnstile */
#endif
#ifndef CANCELLER
#define CANCELLER 0     /* a thread fires the token */
#endif
#ifndef SPUR
#define SPUR 0          /* spurious futex returns per waiter */
#endif
#ifndef WB
#define WB 1            /* WAKE_BATCH */
#endif
#ifndef GUARD
#define GUARD 0         /* a freshness guard and its Guard thread (no resizer) */
#endif

#define DL(w) (((DLMASK) >> (w)) & 1)
#define CX(w) (((CXMASK) >> (w)) & 1)
#define NRS ((RS1 >= 0) + (RS2 >= 0) + GUARD)   /* the Guard has the resizer's id */

#define QUEUED 0
#define SLEEPING 1
#define GRANTED 3
#define CLOSEDST 4
#define FINAL GRANTED
#define TIMEDOUT 5
#define EXPIREDST 7     /* final: a granter found the deadline passed */
#define CANCELED 6
#define NONE 255

/* thread ids: waiters 0..NW-1, then the releasers, the resizer, the closer */
#define RELEASER0 NW
#define RESIZER (NW + NR)
#define CLOSERID (NW + NR + 1)
#define NP (NW + NR + 2)
#define B(p) (1 << (p))
#define USERS ((B(NW + NR) - 1) | (NRS > 0 -> B(RESIZER) : 0) | \
	(CLOSER -> B(CLOSERID) : 0))

/* the turnstile */
short avail = CEIL - NR;
bool wbit = GUARD, cbit;
bool guarded = GUARD, stale;   /* the guard is set; its instant has passed */
short ceiling = CEIL;
bool lk;
byte busy;
byte queue[3];
byte qlen;
/* the waiters' nodes */
byte st[NW];
bool asleep[NW];
/* the cancel token */
byte flag;
bool tlock;
bool reg[NW];
/* ghosts */
byte held = NR;         /* passes issued and not yet returned */
byte open = NW;         /* waits not yet returned */
bool freeing, freed, tfreed;
bool dead[NW];          /* the waiter's wait returned: its node is dead */
bool expired[NW];       /* the waiter's deadline has passed (Clock) */
bool unlinked_twice;    /* a leaver was not linked */
byte cxopen;            /* the token's waits not yet returned */
byte ended;             /* threads whose calls have all returned */
byte know[NP];          /* whose last call's effect each thread has seen */
byte wknow, lknow;      /* what the word's RMWs, the lock carry */
byte nknow[NW];         /* what a node's state carries */

#define OBJ assert(!freed)
#define TOK assert(!tfreed)
#define NWK (((wk) & 1) + (((wk) >> 1) & 1) + (((wk) >> 2) & 1))
#define FULL (NWK >= WB)

#define QUEUED_HAS_WAITERS (qlen == 0 || wbit)
#define UNLOCKED_WAITERS_IFF_QUEUED (lk || (guarded -> wbit : wbit == (qlen > 0)))
#define UNLOCKED_NO_IDLE_PASS (lk || busy > 0 || avail <= 0 || \
	(guarded -> (qlen == 0 || stale) : !wbit))
#define NOT_STALE assert(!(guarded && stale))   /* at every take and grant */
/* WAITERS follows the queue, unless guarded */
#define FOLLOW_QUEUE if :: qlen == 0 && !guarded -> wbit = false; wrmw() :: else -> skip fi
#define CONSERVED (held + avail == ceiling)

/* set only when broken, to name the failed check in pan's output */
bool queued_without_WAITERS, WAITERS_wrong_when_unlocked,
	pass_free_while_queued, pass_lost_or_doubled;
#define CHECK(ok, broken) if :: !(ok) -> broken = true :: else -> skip fi; assert(!broken)

active proctype Monitor()
{
end:	atomic {
		!(QUEUED_HAS_WAITERS && UNLOCKED_WAITERS_IFF_QUEUED &&
		  UNLOCKED_NO_IDLE_PASS && CONSERVED) ->
		CHECK(QUEUED_HAS_WAITERS, queued_without_WAITERS);
		CHECK(UNLOCKED_WAITERS_IFF_QUEUED, WAITERS_wrong_when_unlocked);
		CHECK(UNLOCKED_NO_IDLE_PASS, pass_free_while_queued);
		CHECK(CONSERVED, pass_lost_or_doubled)
	}
}

#define LEARN(x) know[me] = know[me] | (x)
/* a successful RMW of the word (acq_rel): learn and pass on */
#define wrmw() know[me] = know[me] | wknow; wknow = know[me]
/* the call's effect (its linearization point), carried by the same RMW */
#define effect() LEARN(B(me)); wrmw()

inline lock() { atomic { !lk -> OBJ; lk = true; LEARN(lknow) } }
inline unlock() { atomic { OBJ; lk = false; lknow = lknow | know[me] } }

inline qpop(h)
{
	h = queue[0]; queue[0] = queue[1]; queue[1] = queue[2]; queue[2] = 0; qlen--
}

inline qremove(me)
{
	if
	:: qlen > 0 && queue[0] == me -> queue[0] = queue[1]; queue[1] = queue[2]
	:: qlen > 1 && queue[1] == me -> queue[1] = queue[2]
	:: qlen > 2 && queue[2] == me -> skip
	:: else -> unlinked_twice = true; assert(!unlinked_twice)
	fi;
	queue[2] = 0; qlen--
}

/* Each deadline passes once, at any moment (or, in a run that ends
 * first, not at all): a waiter times out only after it, and no granter
 * may grant after it. */
active proctype Clock()
{
	byte i;
	do
	:: i < NW -> if :: DL(i) -> expired[i] = true :: else -> skip fi; i++
	:: i >= NW -> break
	od
}

/* waiter_grant(): one exchange on an unlinked node; a wake is owed only if
 * it was SLEEPING */
inline grant(h, outcome)
{
	assert(!dead[h]);
	old = st[h]; assert(old < FINAL); st[h] = outcome;
	nknow[h] = nknow[h] | know[me];
#ifndef MUT_WAKE_LOST
	if
	:: old == SLEEPING -> wk = wk | B(h)
	:: else -> skip
	fi;
#else
	if
	:: old == SLEEPING && outcome == CLOSEDST -> wk = wk | B(h)
	:: else -> skip         /* mutation: a granted sleeper is not woken */
	fi;
#endif
	old = 0
}

/* wakeups_flush() */
inline flush()
{
	do
	:: wk == 0 -> break
	:: wk & 1 -> atomic { asleep[0] = false; wk = wk & 6 }
	:: (wk & 3) == 2 -> atomic { asleep[1] = false; wk = wk & 5 }
	:: (wk & 7) == 4 -> atomic { asleep[2] = false; wk = wk & 3 }
	od
}

#ifdef MUT_GRANT_AFTER_UNLOCK
/* mutation: pop under the lock, publish GRANTED after unlocking */
byte pub;
inline publish()
{
	do
	:: pub == 0 -> break
	:: pub & 1 -> atomic { h = 0; grant(h, GRANTED); pub = pub & 6; h = 0 }
	:: (pub & 3) == 2 -> atomic { h = 1; grant(h, GRANTED); pub = pub & 5; h = 0 }
	:: (pub & 7) == 4 -> atomic { h = 2; grant(h, GRANTED); pub = pub & 3; h = 0 }
	od
}
#endif

/* drain(): lock held; more = the batch filled with a pass free and a
 * waiter still queued */
inline drain()
{
	more = false;
	do
	:: atomic {
		OBJ;
		if
#ifndef MUT_GUARD_DRAIN_STALE
		:: avail > 0 && qlen > 0 && !FULL && !(guarded && stale) ->
#else
		:: avail > 0 && qlen > 0 && !FULL ->   /* mutation: no clock */
#endif
			assert(!cbit); /* a closed turnstile admits nobody */
			qpop(h);
#ifndef MUT_GRANT_EXPIRED
			if
			:: DL(h) && expired[h] -> grant(h, EXPIREDST); h = 0
			:: else ->
#endif
				/* a deadline means never after it */
				assert(!(DL(h) && expired[h]));
				NOT_STALE;
				avail--; held++; wrmw();
#ifdef MUT_GRANT_AFTER_UNLOCK
				pub = pub | B(h); h = 0
#else
				grant(h, GRANTED); h = 0
#endif
#ifndef MUT_GRANT_EXPIRED
			fi
#endif
		:: else ->
			if
			:: avail > 0 && qlen > 0 && !(guarded && stale) -> more = true
			:: else -> FOLLOW_QUEUE
			fi;
			h = NONE
		fi
	   };
	   if
	   :: h == NONE -> h = 0; break
	   :: else -> skip
	   fi
	od
}

/* unlock_and_wake(): lock held on entry */
inline unlock_and_wake()
{
	gaps = more;
#ifndef MUT_BUSY_AFTER_UNLOCK
	if
	:: gaps -> atomic { OBJ; busy++ }
	:: else -> skip
	fi;
#else
	old = gaps;
#endif
	do
	:: unlock();
#ifdef MUT_BUSY_AFTER_UNLOCK
	   /* mutation: busy marked after the unlock that opens the gap */
	   if :: old -> atomic { OBJ; busy++; old = 0 } :: else -> skip fi;
#endif
#ifdef MUT_GRANT_AFTER_UNLOCK
	   publish();
#endif
	   flush();
	   if
	   :: !more -> break
	   :: else ->
		lock();
		atomic { OBJ; more = !cbit };
		if
		:: more -> drain()
		:: else -> skip
		fi
	   fi
	od;
	if
	:: gaps -> atomic { OBJ; busy--; gaps = false }
	:: else -> skip
	fi
}

/* ts_pass_return: give_back_fast, else return_slow */
inline return_pass()
{
	do
	:: atomic { OBJ; cs = ceiling };
	   atomic {
		OBJ;
		if
		:: !wbit && avail < cs ->
			avail++; held--; assert(qlen == 0); effect(); more = true
		:: else -> more = false
		fi;
		cs = 0
	   };
	   if
	   :: more -> more = false; break
	   :: else -> skip
	   fi;
	   /* ts_private_return_slow */
	   lock();
	   atomic {
		OBJ; assert(avail < ceiling);   /* a real return is never ignored */
		avail++; held--; effect()
	   };
	   /* closed (maybe by a close between its batches): the close, not
	    * this pass, ends whoever is still queued */
#ifdef MUT_RETURN_DRAINS_CLOSED
	   drain();
#else
	   if
	   :: !cbit -> drain()
	   :: else -> skip
	   fi;
#endif
	   unlock_and_wake();
	   break
	od
}

/* This thread's calls have all returned.  If it knows (through what the
 * library showed it, or by joining threads whose calls have all returned)
 * that every other thread's last call has taken effect, it may free the
 * turnstile: ts_turnstile_free waits while busy, then frees. */
inline finish()
{
	d_step {
		ended = ended | B(me);
		i = 0; k = know[me];
		do
		:: i < NP -> if :: ended & B(i) -> k = k | know[i] :: else -> skip fi; i++
		:: else -> break
		od;
		i = 0;
		more = !freeing && ((k | ended) & USERS) == USERS;
		freeing = freeing || more;
		k = 0
	};
	if
	:: more ->
		/* ts_turnstile_free */
#ifndef MUT_FREE_WITHOUT_LOCK
		lock(); unlock();
#endif
#ifndef MUT_FREE_WITHOUT_BUSY_WAIT
		atomic { busy == 0 -> freed = true; assert(held == 0 && open == 0); more = false }
#else
		atomic { freed = true; assert(held == 0 && open == 0); more = false }
#endif
	:: else -> skip
	fi
}

proctype Waiter(byte me)
{
	byte r, s, h, old, wk, spur, i, k;
	short cs;
	bool sp, more, gaps;

	/* ts_private_take_fast */
	if
	:: CX(me) && flag != 0 -> skip
	:: else ->
		atomic {
			OBJ;
			if
#ifndef MUT_FAST_TAKE_BARGES
			:: !wbit && !cbit && avail > 0 ->
#else
			:: !cbit && avail > 0 ->        /* mutation: ignores WAITERS */
#endif
				NOT_STALE;
				avail--; held++; wrmw(); assert(qlen == 0); r = GRANTED; goto returned
			:: else -> skip
			fi
		}
	fi;
	/* ts_private_wait_slow */
	atomic {
		OBJ;
		if
		:: cbit -> LEARN(wknow); r = CLOSEDST; goto returned
		:: else -> skip
		fi
	};
	if
	:: CX(me) && flag != 0 -> r = CANCELED; goto returned
	:: else -> skip
	fi;
	/* enqueue */
	lock();
	atomic {
		OBJ;
		if
		:: cbit -> r = CLOSEDST
		:: !cbit && !wbit && avail > 0 -> avail--; held++; wrmw(); r = GRANTED
#ifndef MUT_GUARD_TAKE_STALE
		:: !cbit && guarded && qlen == 0 && avail > 0 && !stale ->
#else
		:: !cbit && guarded && qlen == 0 && avail > 0 ->   /* mutation: no clock */
#endif
			NOT_STALE; avail--; held++; wrmw(); r = GRANTED
		:: else ->
			if
			:: DL(me) && expired[me] -> r = TIMEDOUT
			:: !(DL(me) && expired[me]) ->
				if :: !wbit -> wbit = true; wrmw() :: else -> skip fi;
				queue[qlen] = me; qlen++;
				sp = (qlen == 1); r = QUEUED
			fi
		fi
	};
	unlock();
	if
	:: r != QUEUED -> goto returned
	:: else -> skip
	fi;
	if
	:: CX(me) -> atomic { !tlock -> TOK; reg[me] = true }
	:: else -> skip
	fi;
	/* ts_lib_waiter_park(WAITER_FINAL) */
	if
	:: sp ->
		sp = false;
		if
		:: st[me] >= FINAL -> r = st[me]; goto parked
		:: CX(me) && flag != 0 -> r = CANCELED; goto parked
		:: DL(me) && expired[me] -> r = TIMEDOUT; goto parked
		:: true -> skip
		fi
	:: else -> skip
	fi;
park:
#ifdef MUT_CANCEL_BEFORE_SLEEP
	if
	:: CX(me) && flag != 0 -> r = CANCELED; goto parked
	:: !(CX(me) && flag != 0) && DL(me) && expired[me] -> r = TIMEDOUT; goto parked
	:: !(CX(me) && flag != 0) -> skip
	fi;
#endif
	atomic {
		s = st[me];
		if
		:: s >= FINAL -> r = s; s = 0; goto parked
		:: s == QUEUED -> st[me] = SLEEPING
		:: s == SLEEPING -> skip
		fi;
		s = 0
	};
#ifndef MUT_CANCEL_BEFORE_SLEEP
	if
	:: CX(me) && flag != 0 -> r = CANCELED; goto parked
	:: !(CX(me) && flag != 0) && DL(me) && expired[me] -> r = TIMEDOUT; goto parked
	:: !(CX(me) && flag != 0) -> skip
	fi;
#endif
	atomic { if :: st[me] == SLEEPING -> asleep[me] = true :: else -> skip fi };
	if
	:: !asleep[me] -> skip
	:: DL(me) && expired[me] && asleep[me] -> asleep[me] = false
	:: spur < SPUR && asleep[me] -> spur++; asleep[me] = false
	fi;
	goto park;
parked:
	if
	:: r == GRANTED || r == CLOSEDST -> LEARN(nknow[me])
	:: else -> skip
	fi;
	if
	:: CX(me) -> atomic { !tlock -> TOK; reg[me] = false }
	:: else -> skip
	fi;
	if
	:: r == TIMEDOUT || r == CANCELED ->
		/* leave() */
		lock();
		atomic {
			OBJ;
			s = st[me];
			if
			:: s >= FINAL -> r = s; LEARN(nknow[me])
			:: else ->
				qremove(me);
#ifdef MUT_CLEAR_OUTSIDE_LOCK
				gaps = qlen == 0
#elif defined(MUT_GUARD_CLEARS_WAITERS)
				/* mutation: the queue alone decides, guarded or not */
				if :: qlen == 0 -> wbit = false; wrmw() :: else -> skip fi
#else
				FOLLOW_QUEUE
#endif
			fi;
			s = 0
		};
		unlock();
#ifdef MUT_CLEAR_OUTSIDE_LOCK
		if :: gaps -> atomic { OBJ; wbit = false; wrmw(); gaps = false } :: else -> skip fi
#endif
	:: else -> skip         /* GRANTED or CLOSED: return at once */
	fi;
returned:
	atomic { dead[me] = true; open-- };
	if
	:: r == GRANTED -> return_pass()
	:: else -> skip
	fi;
	finish();
	/* the token's owner destroys it once the waits using it have returned */
	if
	:: CX(me) && CANCELLER -> atomic { cxopen--; more = cxopen == 0 };
		if
		:: more -> atomic { flag != 1 -> tfreed = true; more = false }
		:: else -> skip
		fi
	:: else -> skip
	fi
}

proctype Releaser(byte me)
{
	byte h, old, wk, i, k;
	short cs;
	bool more, gaps;
	return_pass();
	finish()
}

/* ts_turnstile_resize(n); last: the resizer's last call */
inline resize(n, last)
{
	lock();
	atomic {
		OBJ; avail = avail + n - ceiling; ceiling = n;
		if :: last -> effect() :: else -> wrmw() fi;
		more = !cbit
	};
	if
	:: more -> drain()
	:: else -> skip
	fi;
	unlock_and_wake()
}

proctype Resizer(byte me)
{
	byte h, old, wk, i, k;
	bool more, gaps;
	if
	:: RS1 >= 0 -> resize(RS1, RS2 < 0)
	:: else -> skip
	fi;
	if
	:: RS2 >= 0 -> resize(RS2, true)
	:: else -> skip
	fi;
	finish()
}

/* ts_private_turnstile_guard: move (fresh again) or lift; drain */
inline guard_call(lift, last)
{
	lock();
	atomic {
		OBJ;
		if
		:: lift -> guarded = false; FOLLOW_QUEUE
		:: else -> stale = false
		fi;
		if :: last -> effect() :: else -> wrmw() fi;
		more = !cbit
	};
#ifndef MUT_GUARD_NO_DRAIN
	if
	:: more -> drain()
	:: else -> skip
	fi;
#else
	more = false;
#endif
	unlock_and_wake()
}

proctype Guard(byte me)
{
	byte h, old, wk, i, k;
	bool more, gaps;
	/* its instant passes at any moment (or not before the end), then it
	 * is moved; then, last, lifted */
	if
	:: stale = true; guard_call(false, false)
	:: skip
	fi;
	guard_call(true, true);
	finish()
}

proctype Closer(byte me)
{
	byte h, old, wk, i, k;
	bool more, gaps;
	do
	:: lock();
	   atomic { OBJ; if :: !cbit -> cbit = true; effect() :: else -> wrmw() fi };
	   do
	   :: atomic {
		OBJ;
		if
		:: qlen > 0 && !FULL -> qpop(h); grant(h, CLOSEDST); h = 0
		:: else ->
			more = qlen > 0;
			if
			:: !more && !guarded -> wbit = false; wrmw()
			:: !more && guarded -> wrmw()
#ifndef MUT_BUSY_AFTER_UNLOCK
			:: more && !gaps -> gaps = true; busy++
#else
			:: more && !gaps -> gaps = true; old = 1
#endif
			:: else -> skip
			fi;
			h = NONE
		fi
	      };
	      if
	      :: h == NONE -> h = 0; break
	      :: else -> skip
	      fi
	   od;
	   unlock();
#ifdef MUT_BUSY_AFTER_UNLOCK
	   if :: old -> atomic { OBJ; busy++; old = 0 } :: else -> skip fi;
#endif
	   flush();
	   if
	   :: !more -> break
	   :: else -> skip
	   fi
	od;
	if
	:: gaps -> atomic { OBJ; busy--; gaps = false }
	:: else -> skip
	fi;
	finish()
}

proctype Canceller()
{
	byte i, wk;
	bool more;
	atomic {
		if
		:: tfreed -> goto out     /* fired after destroy: the caller's bug */
		:: else -> flag = 1
		fi
	};
	do
	:: atomic { !tlock -> TOK; tlock = true };
	   i = 0;
	   do
	   :: i < NW && !FULL ->
		atomic {
			if
			:: reg[i] && st[i] == SLEEPING ->
				assert(!dead[i]); st[i] = QUEUED; wk = wk | B(i)
			:: else -> skip
			fi;
			i++
		}
	   :: else -> i = 0; break
	   od;
	   atomic { TOK; tlock = false; more = FULL };
	   flush();
	   if
	   :: !more -> break
	   :: else -> skip
	   fi
	od;
	atomic { TOK; flag = 2 };
out:
	skip
}

init
{
	byte i;
	atomic {
		i = 0;
		do
		:: i < NW -> run Waiter(i); cxopen = cxopen + CX(i); i++
		:: else -> break
		od;
		i = 0;
		do
		:: i < NR -> run Releaser(RELEASER0 + i); i++
		:: else -> break
		od;
		if
		:: GUARD -> run Guard(RESIZER)
		:: !GUARD && NRS > 0 -> run Resizer(RESIZER)
		:: else -> skip
		fi;
		if :: CLOSER -> run Closer(CLOSERID) :: else -> skip fi;
		if :: CANCELLER -> run Canceller() :: else -> skip fi;
		i = 0
	}
	(ended & USERS) == USERS;
	assert(qlen == 0 && !wbit && held == 0 && avail == ceiling && busy == 0)
}
