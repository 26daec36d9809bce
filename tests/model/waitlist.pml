/* SPDX-License-Identifier: MIT */
/* Model of the waitlist's protocol as lib/waitlist.c runs it: one lock, a
 * FIFO queue of takers, a LIFO ready stack, creation slots capped at
 * max_items, loads run outside the lock, and the hand-over rule of
 * DESIGN.md ("Waitlist hand-over to loaders"): an item goes to the oldest
 * taker that is NOT loading.  Parking, the grant exchange, the cancel token
 * and free after the last return are as in turnstile.pml (lib/waiter.c,
 * lib/waiter.h, lib/cancel.c, lib/busy.h).  tests/model/check.sh checks it
 * exhaustively in several configurations and shows, by seeded mutations,
 * that the checks can fail.  Change the protocol there, change it here.
 *
 * C                                            here
 * -------------------------------------------  -------------------------------
 * w->lock, w->busy, w->closed                  lk, busy, closed
 * w->created (slots in use), max_items         created, MAXI (no limit: a cap
 *                                              no run reaches)
 * w->ready[], n_ready (items are alike)        nready
 * w->head..tail (struct taker links)           queue[]/qlen
 * taker.w.state QUEUED/SLEEPING/LOAD/          st[t] (0/1/2/3/4)
 *   GRANTED/CLOSED
 * taker.loading                                loading[t]
 * taker.item                                   (items are alike: counted)
 * oldest_idle()                                OLDEST_IDLE
 * futex, wakeups, cancel token                 as in turnstile.pml
 *
 * ts_waitlist_take       lock; ready? pop it; refuse: closed ESHUTDOWN, fired
 *                        ECANCELED, deadline ETIMEDOUT; join the tail;
 *                        slot free? loading, created++, state LOAD : spin =
 *                        oldest idle; unlock; watch; park(wake_at LOAD)
 * ts_lib_waiter_park     as turnstile.pml, returning at LOAD as well
 * run_load               outside the lock: succeeds, or fails (FAILMASK)
 * finish_load            lock; loading = false; state CLOSED or LOAD (an item
 *                        never reaches a loader: asserted); failed: created--,
 *                        unlink unless closed out, pass_slot, the error;
 *                        made: keep it (unlink unless closed out), asserting
 *                        nobody idle is older (the header's INVARIANTS);
 *                        unlock; wake
 * settle                 (GRANTED or CLOSED seen without the lock) loading
 *                        (CLOSED overwrote LOAD)? lock, give the slot back
 *                        (drop_slot), unlock, wake : return at once
 * leave                  lock; GRANTED? keep the item : CLOSED? ESHUTDOWN :
 *                        unlink; loading? drop_slot; unlock; wake
 * pass_slot              open and a slot free: oldest idle taker gets it:
 *                        created++, loading, exchange LOAD
 * ts_waitlist_put        lock; closed? false (the caller then discards it);
 *                        oldest idle taker? unlink, exchange GRANTED : push;
 *                        unlock; wake.  (grow_ready, its unlock and relock
 *                        when the stack is full, is not modelled: room is
 *                        unbounded and allocation never fails)
 * ts_waitlist_discard    lock; created--; pass_slot; unlock; wake
 * ts_waitlist_close      as turnstile.pml's close (no WAITERS bit): batches,
 *                        busy across the gaps (entered under the lock);
 *                        a loader in LOAD owes no wake, so only sleeping
 *                        takers fill a batch
 * ts_waitlist_free       lock; unlock; busy_wait_idle; free (as
 *                        ts_turnstile_free)
 *
 * Threads: takers (each gives its item back with put, or discards it,
 * DISCMASK), putters (hold an item at the start and put it), a closer, a
 * canceller.
 *
 * CHECKED (assertions; an invalid end state is a taker asleep forever):
 *  - Monitor, in every state: never more than max_items created; created ==
 *    ready + held + loading (no item lost or given twice; an item in a
 *    granted node counts as held); with the lock free (and no close
 *    between its batches): an idle queued taker waits only while every slot
 *    is in use, and only while nothing is ready;
 *  - an item is never handed to a loading taker (give, finish_load), and a
 *    loader that made an item is the oldest idle taker;
 *  - NEVER AFTER THE DEADLINE: neither an item nor a slot is ever handed
 *    to a taker whose deadline has passed (Clock passes each at any
 *    moment; a taker times out only after it); "idle" above means idle
 *    and not past its deadline;
 *  - a grant never meets a final state nor a taker that has returned; a
 *    leaver is linked; free after the last return as in turnstile.pml
 *    (effects: put, discard, close; free passes through the lock, then
 *    waits while busy); the token's destroy likewise;
 *  - at the end: queue empty, every item ready, busy 0.
 *
 * MUTATIONS (-DMUT_x; check.sh requires each to be caught): LOADER_GETS_
 * ITEM (the code before issue 11: put and a finished load hand the item to
 * the head taker, loading or not, and a loader whose item went to an older
 * taker queues again without a slot), FAILED_LOAD_NO_PASS,
 * FREE_WITHOUT_BUSY_WAIT (free overtakes a close between its batches:
 * needs two takers asleep at the close, check.sh's close-batches),
 * GIVE_EXPIRED (put and a freed slot go to the oldest idle taker, past its
 * deadline or not: the rule before issue 21).
 *
 * ABSTRACTED: as turnstile.pml; max_waiters (EAGAIN); try_take and stats
 * (lock, read, unlock); the ready stack's growth; item identities (items
 * are counted, which is enough to see one lost or doubled).
 *
 * FREE'S LOCK IS NOT LOAD-BEARING HERE, unlike the turnstile's:
 * -DMUT_FREE_WITHOUT_LOCK (free only waits while busy) is not caught in
 * any configuration, so check.sh does not run it.  Every effect (put,
 * discard, close) is made under the lock, and every outcome a taker sees
 * without the lock leads some user back under the lock, after the unlock
 * of the call that made it, before anyone may free: an item (GRANTED, or
 * made by a load closed out) must be put back or discarded; a slot (CLOSED
 * overwrote LOAD) is given back in settle; and a taker closed out while
 * idle had every slot held by other users or their loads, whose give-backs
 * come later.  An idle taker closed out in a later batch is covered by
 * busy.  Free keeps the lock anyway: it is the turnstile's rule, it costs
 * free only, and it keeps the lifetime argument from resting on the slot
 * accounting. */

#ifndef NT
#define NT 3            /* takers (at most 3) */
#endif
#ifndef MAXI
#define MAXI 1          /* max_items */
#endif
#ifndef NPUT
#define NPUT 1          /* putters, holding an item each at the start */
#endif
#ifndef DLMASK
#define DLMASK 1
#endif
#ifndef CXMASK
#define CXMASK 0
#endif
#ifndef FAILMASK
#define FAILMASK 0
#endif
#ifndef DISCMASK
#define DISCMASK 0
#endif
#ifndef CLOSER
#define CLOSER 0
#endif
#ifndef CANCELLER
#define CANCELLER 0
#endif
#ifndef SPUR
#define SPUR 0
#endif
#ifndef WB
#define WB 1
#endif

#define DL(w) (((DLMASK) >> (w)) & 1)
#define CX(w) (((CXMASK) >> (w)) & 1)
#define LF(w) (((FAILMASK) >> (w)) & 1)
#define DISC(w) (((DISCMASK) >> (w)) & 1)

#define QUEUED 0
#define SLEEPING 1
#define LOAD 2
#define GRANTED 3
#define CLOSEDST 4
#define FINAL GRANTED
#define TIMEDOUT 5
#define CANCELED 6
#define LOADERR 7
#define NONE 255

#define PUTTER0 NT
#define CLOSERID (NT + NPUT)
#define NP (NT + NPUT + 1)
#define B(p) (1 << (p))
#define USERS ((B(NT + NPUT) - 1) | (CLOSER -> B(CLOSERID) : 0))

/* the waitlist */
bool lk;
byte busy;
bool closed;
byte created = NPUT;    /* the putters hold one item each at the start */
byte nready;
byte queue[3];
byte qlen;
/* the takers' nodes */
byte st[NT];
bool loading[NT];
bool asleep[NT];
/* the cancel token */
byte flag;
bool tlock;
bool reg[NT];
/* ghosts */
byte held = NPUT;       /* items out of the pool: with a user, or in a granted node */
bool freeing, freed, tfreed;
bool unlinked_twice;
bool dead[NT];
bool expired[NT];       /* the taker's deadline has passed (Clock) */
byte cxopen;
byte ended;
byte know[NP];
byte lknow;
byte nknow[NT];

#define OBJ assert(!freed)
#define TOK assert(!tfreed)
#define NWK (((wk) & 1) + (((wk) >> 1) & 1) + (((wk) >> 2) & 1))
#define FULL (NWK >= WB)
#define NLOAD (loading[0] + (NT > 1 -> loading[1 % NT] : 0) + (NT > 2 -> loading[2 % NT] : 0))
#define SLOTFREE (created < MAXI)
/* NEVER AFTER THE DEADLINE: a taker whose deadline has passed is handed
 * nothing (lib/waitlist.c, oldest_live) */
#define EXP(t) (DL(t) && expired[(t) % NT])
/* the oldest queued taker that is not loading (and, but in the mutation,
 * not past its deadline) */
#ifdef MUT_GIVE_EXPIRED
#define QI(j) (qlen > j && !loading[queue[j] % NT])
#else
#define QI(j) (qlen > j && !loading[queue[j] % NT] && !EXP(queue[j]))
#endif
#define OLDEST_IDLE (QI(0) -> queue[0] : (QI(1) -> queue[1] : (QI(2) -> queue[2] : NONE)))
/* an idle taker (as QI) queued ahead of @m */
#define LIVE_AHEAD(m) (qlen > 0 && queue[0] != (m) && (QI(0) || (qlen > 1 && queue[1] != (m) && QI(1))))

#define CAPPED (created <= MAXI)
#define CONSERVED (created == nready + held + NLOAD)
#define UNLOCKED_IDLE_ONLY_WHEN_FULL \
	(lk || busy > 0 || closed || OLDEST_IDLE == NONE || !SLOTFREE)
#define UNLOCKED_IDLE_ONLY_WHEN_NONE_READY (lk || nready == 0 || OLDEST_IDLE == NONE)

/* set only when broken, to name the failed check in pan's output */
bool over_max_items, item_lost_or_doubled, idle_taker_waits_with_slot_free,
	idle_taker_waits_with_item_ready;
#define CHECK(ok, broken) if :: !(ok) -> broken = true :: else -> skip fi; assert(!broken)

active proctype Monitor()
{
end:	atomic {
		!(CAPPED && CONSERVED && UNLOCKED_IDLE_ONLY_WHEN_FULL &&
		  UNLOCKED_IDLE_ONLY_WHEN_NONE_READY) ->
		CHECK(CAPPED, over_max_items);
		CHECK(CONSERVED, item_lost_or_doubled);
		CHECK(UNLOCKED_IDLE_ONLY_WHEN_FULL, idle_taker_waits_with_slot_free);
		CHECK(UNLOCKED_IDLE_ONLY_WHEN_NONE_READY, idle_taker_waits_with_item_ready)
	}
}

#define LEARN(x) know[me] = know[me] | (x)
#define effect() LEARN(B(me))
inline lock() { atomic { !lk -> OBJ; lk = true; LEARN(lknow) } }
inline unlock() { atomic { OBJ; lk = false; lknow = lknow | know[me] } }

/* Each deadline passes once, at any moment: a taker times out only after
 * it, and nobody may hand it anything after it. */
active proctype Clock()
{
	byte i;
	do
	:: i < NT -> if :: DL(i) -> expired[i] = true :: else -> skip fi; i++
	:: i >= NT -> break
	od
}

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

inline grant(h, outcome)
{
	assert(!dead[h]);
	old = st[h]; assert(old < FINAL); st[h] = outcome;
	nknow[h] = nknow[h] | know[me];
	if
	:: old == SLEEPING -> wk = wk | B(h)
	:: else -> skip
	fi;
	old = 0
}

inline flush()
{
	do
	:: wk == 0 -> break
	:: wk & 1 -> atomic { asleep[0] = false; wk = wk & 6 }
	:: (wk & 3) == 2 -> atomic { asleep[1] = false; wk = wk & 5 }
	:: (wk & 7) == 4 -> atomic { asleep[2] = false; wk = wk & 3 }
	od
}

/* pass_slot(): lock held */
inline pass_slot()
{
	if
	:: !closed && SLOTFREE ->
		h = OLDEST_IDLE;
		if
		:: h != NONE -> assert(!EXP(h)); created++; loading[h] = true; grant(h, LOAD)
		:: else -> skip
		fi;
		h = 0
	:: else -> skip
	fi
}

/* give() / hand_out(): lock held; the item moves from its holder to @h */
inline give(h)
{
#ifndef MUT_LOADER_GETS_ITEM
	assert(!loading[h]);
#endif
	assert(!EXP(h)); /* a deadline means never after it */
	qremove(h); grant(h, GRANTED)
}

#ifdef MUT_LOADER_GETS_ITEM
#define HANDEE (qlen > 0 -> queue[0] : NONE)
#else
#define HANDEE OLDEST_IDLE
#endif

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
		/* ts_waitlist_free */
#ifndef MUT_FREE_WITHOUT_LOCK
		lock(); unlock();
#endif
#ifndef MUT_FREE_WITHOUT_BUSY_WAIT
		atomic { busy == 0 -> freed = true; assert(held == 0); more = false }
#else
		atomic { freed = true; assert(held == 0); more = false }
#endif
	:: else -> skip
	fi
}

/* ts_waitlist_put, or ts_waitlist_discard (a put refused by a closed
 * list is followed by a discard) */
inline put_back(discard)
{
	lock();
	atomic {
		OBJ;
		if
		:: !discard && !closed ->
			h = HANDEE;
			if
			:: h != NONE -> give(h)
			:: else -> nready++; held--
			fi;
			h = 0; effect(); more = false
		:: else -> more = !discard   /* refused: discard it */
		fi;
		if
		:: discard -> assert(created > 0); created--; held--; pass_slot(); effect()
		:: else -> skip
		fi
	};
	unlock();
	flush();
	if
	:: more ->
		lock();
		atomic { OBJ; assert(created > 0); created--; held--; pass_slot(); effect(); more = false };
		unlock();
		flush()
	:: else -> skip
	fi
}

proctype Taker(byte me)
{
	byte r, s, h, old, wk, spur, i, k;
	bool sp, more, err;

	lock();
	atomic {
		OBJ;
		if
		:: nready > 0 -> nready--; held++; r = GRANTED
		:: else ->
			if
			:: closed -> r = CLOSEDST
			:: !closed && CX(me) && flag != 0 -> r = CANCELED
			:: !closed && !(CX(me) && flag != 0) && EXP(me) -> r = TIMEDOUT
			:: !closed && !(CX(me) && flag != 0) && !EXP(me) ->
				loading[me] = SLOTFREE;
				queue[qlen] = me; qlen++;
				if
				:: loading[me] -> created++; st[me] = LOAD
				:: else -> sp = (OLDEST_IDLE == me)
				fi;
				r = QUEUED
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
#ifdef MUT_LOADER_GETS_ITEM
again:
#endif
	/* ts_lib_waiter_park(WAITER_LOAD) */
	if
	:: sp ->
		sp = false;
		if
		:: st[me] >= LOAD -> r = st[me]; goto parked
		:: CX(me) && flag != 0 -> r = CANCELED; goto parked
		:: EXP(me) -> r = TIMEDOUT; goto parked
		:: true -> skip
		fi
	:: else -> skip
	fi;
park:
	atomic {
		s = st[me];
		if
		:: s >= LOAD -> r = s; s = 0; goto parked
		:: s == QUEUED -> st[me] = SLEEPING
		:: s == SLEEPING -> skip
		fi;
		s = 0
	};
	if
	:: CX(me) && flag != 0 -> r = CANCELED; goto parked
	:: !(CX(me) && flag != 0) && EXP(me) -> r = TIMEDOUT; goto parked
	:: !(CX(me) && flag != 0) -> skip
	fi;
	atomic { if :: st[me] == SLEEPING -> asleep[me] = true :: else -> skip fi };
	if
	:: !asleep[me] -> skip
	:: EXP(me) && asleep[me] -> asleep[me] = false
	:: spur < SPUR && asleep[me] -> spur++; asleep[me] = false
	fi;
	goto park;
parked:
	if
	:: r >= LOAD && r <= CLOSEDST -> LEARN(nknow[me])
	:: else -> skip
	fi;
	if
	:: r == LOAD ->
		/* run_load: outside every lock; it may fail */
		if
		:: LF(me) -> err = true
		:: true -> err = false
		fi;
		/* finish_load */
		lock();
		atomic {
			OBJ;
			loading[me] = false;
			s = st[me];
#ifndef MUT_LOADER_GETS_ITEM
			assert(s == LOAD || s == CLOSEDST);   /* never handed an item */
#endif
			if
			:: err ->
				created--;
				if
				:: s == GRANTED -> r = GRANTED
				:: s == CLOSEDST -> r = LOADERR
				:: else -> qremove(me); r = LOADERR
				fi;
#ifndef MUT_FAILED_LOAD_NO_PASS
				pass_slot()
#else
				skip
#endif
			:: !err && s == CLOSEDST -> held++; r = GRANTED   /* keeps what it made */
#ifdef MUT_LOADER_GETS_ITEM
			:: !err && s == GRANTED -> held++; h = HANDEE;   /* the old code: pass ours on */
				if
				:: h != NONE -> give(h)
				:: else -> nready++; held--
				fi;
				h = 0; r = GRANTED
			:: !err && s == LOAD && HANDEE != me ->
				held++; h = HANDEE; give(h); h = 0;
				st[me] = QUEUED; r = QUEUED     /* back to waiting */
			:: !err && s == LOAD && HANDEE == me ->
				held++; qremove(me); r = GRANTED
#else
			:: !err && s == LOAD ->
				held++;
				assert(!LIVE_AHEAD(me));      /* nobody idle and live is older */
				qremove(me); r = GRANTED
#endif
			fi;
			s = 0; err = false
		};
		unlock();
		flush();
#ifdef MUT_LOADER_GETS_ITEM
		if
		:: r == QUEUED -> goto again
		:: else -> skip
		fi
#endif
	:: r == GRANTED || r == CLOSEDST ->
		/* settle(): only a slot that reached us just before the close
		 * (CLOSED overwrote LOAD) takes the lock, to give it back;
		 * otherwise return at once */
		if
		:: loading[me] ->
			lock();
			atomic { OBJ; loading[me] = false; created--; pass_slot() };
			unlock();
			flush()
		:: else -> skip
		fi
	:: r == TIMEDOUT || r == CANCELED ->
		/* leave() */
		lock();
		atomic {
			OBJ;
			s = st[me];
			if
			:: s == GRANTED -> r = GRANTED
			:: s == CLOSEDST -> r = CLOSEDST
			:: else -> qremove(me)
			fi;
			if
			:: loading[me] -> loading[me] = false; created--; pass_slot()
			:: else -> skip
			fi;
			s = 0
		};
		unlock();
		flush()
	fi;
	if
	:: CX(me) -> atomic { !tlock -> TOK; reg[me] = false }
	:: else -> skip
	fi;
returned:
	atomic { dead[me] = true };
	if
	:: r == GRANTED -> put_back(DISC(me))
	:: else -> skip
	fi;
	finish();
	if
	:: CX(me) && CANCELLER -> atomic { cxopen--; more = cxopen == 0 };
		if
		:: more -> atomic { flag != 1 -> tfreed = true; more = false }
		:: else -> skip
		fi
	:: else -> skip
	fi
}

proctype Putter(byte me)
{
	byte h, old, wk, i, k;
	bool more;
	put_back(false);
	finish()
}

proctype Closer(byte me)
{
	byte h, old, wk, i, k;
	bool more, gaps;
	do
	:: lock();
	   atomic { OBJ; if :: !closed -> closed = true; effect() :: else -> skip fi };
	   do
	   :: atomic {
		OBJ;
		if
		:: qlen > 0 && !FULL -> qpop(h); grant(h, CLOSEDST); h = 0
		:: else ->
			more = qlen > 0;
			if
			:: more && !gaps -> gaps = true; busy++
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
		:: tfreed -> goto out
		:: else -> flag = 1
		fi
	};
	do
	:: atomic { !tlock -> TOK; tlock = true };
	   i = 0;
	   do
	   :: i < NT && !FULL ->
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
		:: i < NT -> run Taker(i); cxopen = cxopen + CX(i); i++
		:: else -> break
		od;
		i = 0;
		do
		:: i < NPUT -> run Putter(PUTTER0 + i); i++
		:: else -> break
		od;
		if :: CLOSER -> run Closer(CLOSERID) :: else -> skip fi;
		if :: CANCELLER -> run Canceller() :: else -> skip fi;
		i = 0
	}
	(ended & USERS) == USERS;
	assert(qlen == 0 && held == 0 && busy == 0 && created == nready)
}
