/* SPDX-License-Identifier: MIT */
/* Model of event-loop (async) waiters as the C code runs them: an async
 * node in a turnstile's queue (TAKE 0) or a waitlist's (TAKE 1), granted
 * under the queue lock by another thread and pushed on its notifier's
 * completion stack (lib/notifier.c ts_lib_async_complete), the kick and the
 * granter's hold released after the unlock (ts_lib_notifier_release), the
 * loop's dispatch (signalled held at 1 while it runs, rounds of collect
 * and run, a last look after clearing it), its ts_async_cancel (withdraw,
 * or collect the stack and hand on what the node got), ts_lib_async_begin's
 * look at the cancel flag after watching, the cancel token's fire
 * withdrawing async nodes under the queue lock (lib/cancel.c nudge_batch),
 * deadlines expired by dispatch, and ts_notifier_free (EBUSY from a
 * callback) after the last callback (lib/notifier.c, lib/async.c,
 * lib/async.h, lib/turnstile.c, lib/waitlist.c).  Queues, passes, items,
 * slots, close and the cancel token are as in turnstile.pml and
 * waitlist.pml, reduced to what an async node meets; blocking waiters are
 * those models' business.
 * tests/model/check.sh checks it exhaustively in several configurations
 * and shows, by seeded mutations, that each check can fail.  Change the
 * protocol there, change it here.
 *
 * C                                            here
 * -------------------------------------------  -------------------------------
 * t->word, ceiling (TAKE 0)                    avail, wbit, cbit, CEIL
 * w->closed, created, n_ready (TAKE 1)         closed, created, nready, MAXI
 * the queue's lock, its queue, busy            lk, queue[]/qlen (FIFO), busy
 * async_waiter(a)->state                       st[a]: QUEUED, then one final
 *                                              state GRANTED, CLOSED, CREATE,
 *                                              CANCELLED or EXPIRED
 * n->stack (Treiber stack), stack_next         stk[]/stklen, in push order
 * n->signalled                                 sig
 * n->evfd (nonblocking eventfd)                fdr: readable; a read drains it
 * n->holds                                     holds
 * n->ready_head..tail, a->in_ready             rdy[]/rlen, inr[a]
 * n->pending, a->pending                       pending, pend[a]
 * n->dispatching                               being inside dispatch()
 * DISPATCH_ROUNDS (16)                         ROUNDS (4)
 * n->heap (deadline heap), a->heap_slot        hp[a]
 * a deadline passing (the timerfd)             dlp[a], set by the loop at any
 *                                              moment (time passes); timerfd
 *                                              readable: TIMER
 * struct wakeups (async entries), WAKE_BATCH   ents, kick (node bitmasks), FULL
 *                                              at WB
 * ts_cancel: private_fired, lock, list         flag, tlock, reg[a]
 *
 * Every C atomic operation is one step, as in turnstile.pml; steps under
 * the queue lock that touch only lock-held data are merged into the next
 * atomic operation.  The loop's own data (ready list, heap, pending) is
 * touched by the loop thread alone, so its steps are merged likewise.
 *
 * ts_lib_async_complete  (under the queue lock, the node unlinked) store
 *                        the final state; holds++; push; exchange
 *                        signalled 0->1 decides the kick; an entry in wk
 * wakeups_flush          per entry: kick? write the eventfd; holds--
 * ts_turnstile_wait_async  take_fast (fired: skip; CAS -UNIT if !WAITERS &&
 *                        !CLOSED && available > 0: 0, fn will not run);
 *                        CLOSED? fired?; enqueue (lock; CLOSED? ESHUTDOWN;
 *                        free pass? 0; deadline passed? ETIMEDOUT; WAITERS +
 *                        insert; unlock); EINPROGRESS: begin
 * ts_waitlist_take_async lock; ready? pop (0); closed? fired? deadline?
 *                        refused; slot free? created++, TS_CREATE; else join
 *                        the tail; unlock; begin
 * ts_lib_async_begin     pending, track (heap if a deadline); watch the
 *                        token; fired? withdraw(CANCELLED, no push): withdrawn
 *                        now? unwatch, untrack, ECANCELED (fn will not run)
 * withdraw               lock; state < FINAL? unlink (WAITERS cleared when
 *                        the queue empties), and: the fire completes it
 *                        (push), the loop stores the state (no push); unlock
 * ts_async_cancel        withdraw(CANCELLED, no push); found final: collect
 *                        the stack unless in_ready, unready, hand on (GRANTED
 *                        turn: ts_pass_return; GRANTED take: hand_back =
 *                        put even if closed; CREATE: give the slot back);
 *                        unwatch; untrack
 * ts_notifier_dispatch   drain the eventfd; exchange signalled to 1 (held
 *                        there while dispatch runs); collect (exchange the
 *                        stack with NULL, oldest first to the ready list);
 *                        expire (a heap node whose deadline passed: out of
 *                        the heap, withdraw(EXPIRED, no push), withdrawn
 *                        now? ready); then up to ROUNDS (DISPATCH_ROUNDS)
 *                        rounds: run_ready (as many as were ready at the
 *                        round's start: unready, untrack, unwatch, not
 *                        pending, fn), load the stack, empty? stop, else
 *                        collect; then exchange signalled to 0; the ready
 *                        list or (a load) the stack not empty, and its own
 *                        exchange takes signalled 0 -> 1? write the eventfd
 * the callback           (the loop's code) may cancel another pending node;
 *                        a pass is returned, an item put back or discarded,
 *                        a slot (TS_CREATE) made into an item and put, or
 *                        discarded (CBDISC); the last one may call
 *                        ts_notifier_free (FREECB)
 * ts_notifier_free       EBUSY while pending or dispatching (so from a
 *                        callback); else wait for holds == 0, free
 * ts_pass_return, drain, ts_turnstile_close, put_item, free_slot,
 * pass_slot (an async taker is unlinked with CREATE), ts_waitlist_close
 *                        as turnstile.pml and waitlist.pml (a drain here
 *                        never fills a batch with a pass still free, so
 *                        unlock_and_wake is unlock and flush: asserted)
 * ts_cancel_fire         flag = FIRING; nudge_batch: token lock; per watched
 *                        node, batch not full: its state (an unlocked load)
 *                        final? skip it; else withdraw(CANCELLED, push), the
 *                        queue lock nested in the token's; unlock; flush;
 *                        again while a batch filled; FIRED
 *
 * WHY NO WAKE-UP IS LOST (lib/async.h NO LOST WAKE-UP).  A kick is owed by
 * the one whose exchange takes signalled from 0 to 1; whoever finds 1
 * writes nothing.  Only a dispatch's final exchange sets signalled back to
 * 0, and a granter pushes before its exchange, so one that finds 1 pushed
 * before the next final clear; until then either a dispatch runs (its
 * claim set the 1) or the fd is readable or about to be (a kick owed or
 * written and not drained: the drain is a dispatch's, before its clear).
 * That dispatch's collects take the node, or its look after the clear
 * finds it: on the stack, or on the ready list where a callback's
 * ts_async_cancel collected it after the round's budget was set, or where
 * the last of the ROUNDS collected it; it then writes the fd unless
 * someone took signalled 0 -> 1 after the clear (who writes).  So the look
 * after the final clear carries the protocol (END_NO_LOOK,
 * LOOK_BEFORE_CLEAR, END_STACK_ONLY below), and a granter that pushes
 * while dispatch runs writes nothing.  The dispatch before commit cc02589
 * cleared signalled first, drained the eventfd after, ran one round and
 * then looked at the ready list only: a write it drained could belong to a
 * granter whose 0 -> 1 came after the clear, leaving signalled 1 with the
 * fd empty, and the next push (a callback returning its pass is enough)
 * owed no kick: the loop asleep for good (OLD_DISPATCH).  ts_notifier_free
 * from a callback is EBUSY: nothing is pending in the last callback, yet
 * dispatch reads and writes the notifier after fn returns
 * (FREE_IN_CALLBACK, with FREECB).
 *
 * CHECKED (assertions; an invalid end state is a loop asleep forever with
 * a wait pending, or a call that cannot finish):
 *  - Monitor, in every state: no pass lost or doubled (held + available ==
 *    ceiling; for a waitlist created == ready + held, never above
 *    max_items); with the queue lock free, WAITERS iff a node is queued,
 *    and a queued node means no free pass (turnstile), nothing ready and
 *    no free slot (waitlist), outside a close's gaps;
 *  - NO LOST WAKE-UP, in every state: while the loop waits for its fd, a
 *    completion on the stack or a node on the ready list means the fd is
 *    readable, or a kick is owed (decided, not yet written), or a granter
 *    has begun a completion and not yet made its exchange;
 *  - a completion never meets a final state (nothing granted twice) nor a
 *    node the library has given back (its callback begun, or its cancel
 *    returned), and never pushes a node twice; the fire touches only
 *    live nodes;
 *  - no callback after ts_async_cancel returned, and on its return the
 *    node is on neither the stack nor the ready list;
 *  - exactly one callback for each wait that returned EINPROGRESS and was
 *    not withdrawn by the loop (ts_async_cancel, begin's ECANCELED), none
 *    for the others;
 *  - nobody touches the notifier (hold, push, exchange, kick, release,
 *    dispatch's own reads after a callback) after ts_notifier_free, which
 *    the loop calls once nothing is pending and dispatch has returned
 *    (from the last callback: EBUSY, with FREECB);
 *  - at the end: queue empty, every pass free (available == ceiling) or
 *    every item ready, stack and ready list empty, holds 0, no kick owed.
 *
 * MUTATIONS (-DMUT_x; check.sh requires each to be caught):
 * SIGNAL_BEFORE_PUSH (the exchange on signalled before the push),
 * PUSH_AFTER_UNLOCK (the push and the exchange after the queue unlock),
 * CANCEL_NO_COLLECT (ts_async_cancel finding a final state only unreadies
 * the node, without collecting the stack), RELEASE_BEFORE_KICK (the hold
 * released before the kick's write: free overlaps the write),
 * BEGIN_NO_RECHECK (ts_lib_async_begin does not look at the flag after
 * watching: a fire that walked the token's list just before is lost),
 * FREE_IN_CALLBACK (ts_notifier_free without the dispatching check: the
 * last callback frees it under dispatch), END_NO_LOOK (dispatch ends at
 * its final clear: a push made after its last look at the stack, finding
 * signalled held at 1, is never announced), LOOK_BEFORE_CLEAR (the final
 * look, then the clear: a push in between), END_STACK_ONLY (the final
 * look skips the ready list), OLD_DISPATCH (the dispatch before cc02589,
 * above).
 *
 * NOT LOAD-BEARING: the claim (exchange signalled to 1 after the drain).
 * Without it (-DNO_CLAIM: granters that push during dispatch may still
 * take 0 -> 1 and write) and with it moved before the drain (tried by
 * hand, no switch here), every configuration passes: the final clear and
 * look alone keep each wake-up; the claim saves fd writes.  The number of rounds: ROUNDS 4 (16 in
 * the C code: what the bound is does not matter, only that a call can
 * stop with work left), 1 in one configuration (nodes collected by the
 * last round are left on the ready list for the next call, announced by
 * dispatch's own write).
 *
 * ABSTRACTED: safety only (a livelock, dispatch called forever running
 * nothing, is not searched for); memory order (sequentially consistent
 * steps); the claims' order (FIFO); blocking waiters in the same queue
 * (turnstile.pml, waitlist.pml: an async node is granted by the same code,
 * through the seam waiter_grant); the object's own free after the last
 * callback (its granters' last touch of it is their unlock or their busy,
 * as there: after it they touch only the notifier, which this model
 * follows); the token's destroy; a node queued again from its callback;
 * the timerfd's arming and reading (a passed deadline makes it readable
 * until dispatch expires it; expire reading a timer left armed after the
 * heap emptied is against spinning, a liveness matter); the eventfd's
 * count (readable or not); holds' BUSY_WAITED bit (busy.h: free waits for
 * a count of 0, the last release's wake is the futex's business); the
 * nested queue lock's deferred wake (no lock here sleeps) and
 * nudge_batch's room for two entries (a batch counts nodes, WB); counters,
 * probes, hooks; EINVAL, EAGAIN, ENOMEM (the heap always grows), EBUSY
 * but ts_notifier_free's from a callback. */

#ifndef TAKE
#define TAKE 0          /* 0: turnstile turns, 1: waitlist takes */
#endif
#ifndef NA
#define NA 2            /* async nodes on the loop (at most 3) */
#endif
#ifndef NG
#define NG 1            /* granters: releasers holding a pass each (TAKE 0),
			   putters holding an item each (TAKE 1) */
#endif
#ifndef CEIL
#define CEIL 1          /* TAKE 0: the ceiling (>= NG) */
#endif
#ifndef MAXI
#define MAXI 1          /* TAKE 1: max_items (>= NG) */
#endif
#ifndef GDISC
#define GDISC 0         /* TAKE 1: granters that discard their item (a slot) */
#endif
#ifndef CBDISC
#define CBDISC 0        /* TAKE 1: nodes whose callback discards its item or slot */
#endif
#ifndef DLMASK
#define DLMASK 0        /* nodes with a deadline */
#endif
#ifndef CXMASK
#define CXMASK 0        /* nodes watching the cancel token */
#endif
#ifndef LCXMASK
#define LCXMASK 0       /* nodes the loop cancels (ts_async_cancel) once,
			   at some moment while pending, maybe in a callback */
#endif
#ifndef CANCELLER
#define CANCELLER 0     /* a thread fires the token */
#endif
#ifndef CLOSER
#define CLOSER 0        /* a thread closes the turnstile or waitlist */
#endif
#ifndef SPURD
#define SPURD 0         /* dispatch calls with nothing readable */
#endif
#ifndef FREECB
#define FREECB 0        /* the last callback calls ts_notifier_free */
#endif
#ifndef WB
#define WB 1            /* WAKE_BATCH */
#endif
#ifndef ROUNDS
#define ROUNDS 4        /* DISPATCH_ROUNDS */
#endif

#define DL(a) (((DLMASK) >> (a)) & 1)
#define CX(a) (((CXMASK) >> (a)) & 1)
#define LCX(a) (((LCXMASK) >> (a)) & 1)
#define GD(g) (((GDISC) >> (g)) & 1)
#define CBD(a) (((CBDISC) >> (a)) & 1)
#define B(p) (1 << (p))

#define QUEUED 0
#define GRANTED 3
#define CLOSEDST 4
#define CREATE 5
#define CANCELLED 6
#define EXPIRED 7
#define FINAL GRANTED
/* what a wait_async call returned */
#define INPROG 10
#define IMMEDIATE 11    /* 0 with a pass or item, TS_CREATE: fn will not run */
#define REFUSED 12      /* ESHUTDOWN, ECANCELED, ETIMEDOUT: fn will not run */
#define NONE 255

/* the object */
bool lk;
byte busy;
byte queue[3];
byte qlen;
#if TAKE == 0
short avail = CEIL - NG;
bool wbit, cbit;
#else
bool closed;
byte created = NG;      /* the putters hold one item each at the start */
byte nready;
#endif
/* the nodes */
byte st[NA];
/* the notifier: shared */
byte stk[3];
byte stklen;
bool sig, fdr;
byte holds;
/* the notifier: the loop's */
byte rdy[3];
byte rlen;
bool inr[NA];
byte pending;
bool pend[NA];
bool hp[NA];
bool dlp[NA];
/* the cancel token */
byte flag;
bool tlock;
bool reg[NA];
/* ghosts */
byte held = NG;         /* passes (items, slots) out of the object */
byte owed;              /* kicks decided and not yet written */
byte preex;             /* completions begun whose exchange is not made */
bool lwait;             /* the loop waits for its fd */
bool notifier_freed;            /* ts_notifier_free done */
bool dead[NA];          /* the library gave the node back */
bool cancelled[NA];     /* ts_async_cancel returned for it */
byte cb[NA];            /* callbacks run */
bool nocb[NA];          /* no callback may run: at once, refused, cancelled */
byte done;              /* threads finished */

#define NOT assert(!notifier_freed)
#define NENT (((ents) & 1) + (((ents) >> 1) & 1) + (((ents) >> 2) & 1))
#define FULL (NENT >= WB)
#define ONSTACK(a) ((stklen > 0 && stk[0] == (a)) || (stklen > 1 && stk[1] == (a)) || \
	(stklen > 2 && stk[2] == (a)))
#define TIMER ((hp[0] && dlp[0]) || (NA > 1 && hp[1 % NA] && dlp[1 % NA]) || \
	(NA > 2 && hp[2 % NA] && dlp[2 % NA]))
#define NTHREADS (1 + NG + (CANCELLER != 0) + (CLOSER != 0))

#if TAKE == 0
#define CONSERVED (held + avail == CEIL)
#define UNLOCKED_QUEUE_OK (lk || (wbit == (qlen > 0) && (busy > 0 || !wbit || avail <= 0)))
#else
#define SLOTFREE (created < MAXI)
#define CONSERVED (created == nready + held && created <= MAXI)
#define UNLOCKED_QUEUE_OK (lk || busy > 0 || qlen == 0 || (nready == 0 && !SLOTFREE))
#endif
#define NO_LOST_WAKEUP (!lwait || (stklen == 0 && rlen == 0) || fdr || owed > 0 || preex > 0)

/* set only when broken, to name the failed check in pan's output */
bool pass_or_item_lost_or_doubled, queue_wrong_when_unlocked, lost_wakeup,
	node_touched_after_given_back, node_kept_after_cancel, callback_not_owed,
	callback_count_wrong;
#define CHECK(ok, broken) if :: !(ok) -> broken = true :: else -> skip fi; assert(!broken)

active proctype Monitor()
{
end:	atomic {
		!(CONSERVED && UNLOCKED_QUEUE_OK && NO_LOST_WAKEUP) ->
		CHECK(CONSERVED, pass_or_item_lost_or_doubled);
		CHECK(UNLOCKED_QUEUE_OK, queue_wrong_when_unlocked);
		CHECK(NO_LOST_WAKEUP, lost_wakeup)
	}
}

inline lock() { atomic { !lk -> lk = true } }
inline unlock() { lk = false }

inline qpop(x)
{
	x = queue[0]; queue[0] = queue[1]; queue[1] = queue[2]; queue[2] = 0; qlen--
}

inline qremove(x)
{
	if
	:: qlen > 0 && queue[0] == x -> queue[0] = queue[1]; queue[1] = queue[2]
	:: qlen > 1 && queue[1] == x -> queue[1] = queue[2]
	:: qlen > 2 && queue[2] == x -> skip
	:: else -> assert(false)        /* unlinked twice */
	fi;
	queue[2] = 0; qlen--
}

/* unlink_waiter's WAITERS, lock held */
#if TAKE == 0
#define CLEARW if :: qlen == 0 -> wbit = false :: else -> skip fi
#else
#define CLEARW skip
#endif

/* ts_lib_async_complete, first part (under the queue lock, merged with
 * the unlink): the state, then the hold */
#define COMPLETE1(x, outcome) \
	CHECK(!dead[x], node_touched_after_given_back); \
	assert(st[x] < FINAL); st[x] = outcome; \
	NOT; holds++; preex++

inline push(x)
{
	atomic {
		NOT; CHECK(!dead[x], node_touched_after_given_back); assert(!ONSTACK(x));
		stk[stklen] = x; stklen++
	}
}

/* exchange signalled 0 -> 1 decides the kick; the entry in wk */
inline signal(x)
{
	atomic {
		NOT; preex--;
		if
		:: !sig -> sig = true; owed++; kick = kick | B(x)
		:: else -> skip
		fi;
		ents = ents | B(x)
	}
}

/* ts_lib_async_complete, the rest, still under the lock */
inline complete2(x)
{
#if defined(MUT_PUSH_AFTER_UNLOCK)
	late = late | B(x); ents = ents | B(x)  /* mutation: pushed after unlocking */
#elif defined(MUT_SIGNAL_BEFORE_PUSH)
	signal(x); push(x)                      /* mutation: exchange, then push */
#else
	push(x); signal(x)
#endif
}

inline release(x)
{
#ifndef MUT_RELEASE_BEFORE_KICK
	if :: kick & B(x) -> atomic { NOT; fdr = true; owed-- } :: else -> skip fi;
	atomic { NOT; holds-- }
#else
	atomic { NOT; holds-- };        /* mutation: the hold ends before the kick */
	if :: kick & B(x) -> atomic { NOT; fdr = true; owed-- } :: else -> skip fi
#endif
}

/* wakeups_flush(): after unlocking; ts_lib_notifier_release per entry */
inline flush()
{
#ifdef MUT_PUSH_AFTER_UNLOCK
	f = 0;
	do
	:: f < NA -> if :: late & B(f) -> push(f); signal(f) :: else -> skip fi; f++
	:: else -> break
	od;
	late = 0;
#endif
	f = 0;
	do
	:: f < NA -> if :: ents & B(f) -> release(f) :: else -> skip fi; f++
	:: else -> break
	od;
	ents = 0; kick = 0; f = 0
}

#if TAKE == 0
/* drain(): lock held; more = the batch filled with a pass free and a
 * node still queued */
inline drain()
{
	more = false;
	do
	:: atomic {
		if
		:: avail > 0 && qlen > 0 && !FULL ->
			assert(!cbit); qpop(h); avail--; held++; COMPLETE1(h, GRANTED)
		:: else ->
			if
			:: avail > 0 && qlen > 0 -> more = true
			:: else -> CLEARW
			fi;
			h = NONE
		fi
	   };
	   if
	   :: h == NONE -> h = 0; break
	   :: else -> complete2(h); h = 0
	   fi
	od
}

/* unlock_and_wake(): lock held on entry.  One pass is returned at a time
 * here, so a drain never fills a batch with a pass still free: its gaps
 * (busy, drain again) are turnstile.pml's (resize) */
inline unlock_and_wake()
{
	assert(!more);
	unlock();
	flush()
}

/* ts_pass_return: give_back_fast, else return_slow */
inline return_pass()
{
	atomic {
		if
		:: !wbit && avail < CEIL -> avail++; held--; assert(qlen == 0); more = true
		:: else -> more = false
		fi
	};
	if
	:: more -> more = false
	:: else ->
		lock();
		atomic { assert(avail < CEIL); avail++; held--; more = !cbit };
		if :: more -> drain() :: else -> skip fi;
		unlock_and_wake()
	fi
}
#else
/* pass_slot(): lock held; an async taker leaves the queue with the slot */
inline pass_slot()
{
	atomic {
		if
		:: !closed && SLOTFREE && qlen > 0 ->
			created++; held++; qpop(h); COMPLETE1(h, CREATE)
		:: else -> h = NONE
		fi
	};
	if :: h != NONE -> complete2(h) :: else -> skip fi;
	h = 0
}

/* free_slot(): ts_waitlist_discard, ts_lib_waitlist_give_back_slot */
inline free_slot()
{
	lock();
	atomic { assert(created > 0); created--; held-- };
	pass_slot();
	unlock();
	flush()
}

/* put_item(even_closed): ts_waitlist_put (refused when closed: the
 * caller discards it), ts_lib_waitlist_hand_back (even closed) */
inline put_item(even_closed)
{
	lock();
	atomic {
		if
		:: closed && !(even_closed) -> more = true
		:: else ->
			more = false;
			if
			:: qlen > 0 -> qpop(h); COMPLETE1(h, GRANTED)   /* give() */
			:: else -> nready++; held--; h = NONE
			fi
		fi
	};
	if :: !more && h != NONE -> complete2(h) :: else -> skip fi;
	h = 0;
	unlock();
	flush();
	if :: more -> more = false; free_slot() :: else -> skip fi
}
#endif

/* ---- the loop thread ---------------------------------------------------- */

/* withdraw(a, outcome, NULL): the loop's own, no push; s = the state found */
inline lwithdraw(x, outcome)
{
	lock();
	atomic {
		s = st[x];
		if
		:: s < FINAL -> qremove(x); CLEARW; st[x] = outcome
		:: else -> skip
		fi
	};
	unlock()
}

inline untrack(x) { hp[x] = false; pending-- }

/* ts_lib_notifier_collect: the whole stack, oldest first, to the ready list */
inline collect()
{
	atomic {
		k = 0;
		do
		:: k < stklen -> rdy[rlen] = stk[k]; inr[stk[k]] = true; rlen++; stk[k] = 0; k++
		:: else -> break
		od;
		stklen = 0; k = 0
	}
}

inline unready(x)
{
	if
	:: inr[x] ->
		inr[x] = false;
		if
		:: rdy[0] == x -> rdy[0] = rdy[1]; rdy[1] = rdy[2]
		:: rlen > 1 && rdy[1] == x -> rdy[1] = rdy[2]
		:: rlen > 2 && rdy[2] == x -> skip
		:: else -> assert(false)
		fi;
		rdy[2] = 0; rlen--
	:: else -> skip
	fi
}

inline unwatch(x) { if :: CX(x) -> atomic { !tlock -> reg[x] = false } :: else -> skip fi }

/* hand_on(): what a node cancelled after completing got goes on */
inline hand_on()
{
#if TAKE == 0
	if :: s == GRANTED -> return_pass() :: else -> skip fi
#else
	if
	:: s == GRANTED -> put_item(true)
	:: s == CREATE -> free_slot()
	:: else -> skip
	fi
#endif
}

/* ts_async_cancel(c) */
inline acancel()
{
	lwithdraw(c, CANCELLED);
	if
	:: s >= FINAL ->
#ifndef MUT_CANCEL_NO_COLLECT
		if :: !inr[c] -> collect() :: else -> skip fi;
#endif
		unready(c);
		s = st[c];
		hand_on()
	:: else -> skip
	fi;
	unwatch(c);
	atomic {
		untrack(c); pend[c] = false;
		/* on return the library holds no reference to the node */
		CHECK(!ONSTACK(c) && !inr[c], node_kept_after_cancel);
		cancelled[c] = true; dead[c] = true; nocb[c] = true;
		s = 0; c = 0
	}
}

/* the loop's code cancels a pending node it chose to (once each) */
#define CANC(j) (LCX(j) && pend[(j) % NA] && !lcx[(j) % NA])
#define ANYCANC (CANC(0) || (NA > 1 && CANC(1)) || (NA > 2 && CANC(2)))
inline pick()
{
	if
	:: CANC(0) -> c = 0
	:: NA > 1 && CANC(1) -> c = 1
	:: NA > 2 && CANC(2) -> c = 2
	fi
}

/* what the callback does with what it got */
inline use(x)
{
#if TAKE == 0
	if :: r == GRANTED -> return_pass() :: else -> skip fi
#else
	if
	:: (r == GRANTED || r == CREATE) && !CBD(x) -> put_item(false)
	:: (r == GRANTED || r == CREATE) && CBD(x) -> free_slot()
	:: else -> skip
	fi
#endif
}

/* expire(): heap nodes whose deadline passed */
inline expire()
{
	e = 0;
	do
	:: e < NA ->
		if
		:: hp[e] && dlp[e] ->
			hp[e] = false;
			lwithdraw(e, EXPIRED);
			if
			:: s < FINAL -> rdy[rlen] = e; inr[e] = true; rlen++
			:: else -> skip
			fi;
			s = 0
		:: else -> skip
		fi;
		e++
	:: else -> break
	od;
	e = 0
}

/* run_ready(n, ready_count(n)): at most as many callbacks as were ready
 * at the round's start (a callback's cancel may take nodes out, or
 * collect more in: those wait for the next round or call) */
inline run_ready()
{
	budget = rlen;
	do
	:: budget > 0 && rlen > 0 ->
		budget--;
		atomic { a = rdy[0]; unready(a); untrack(a) };
		unwatch(a);
		atomic {
			pend[a] = false; r = st[a];
			assert(r >= FINAL);
			CHECK(!cancelled[a] && !nocb[a] && cb[a] == 0, callback_not_owed);
			cb[a]++; dead[a] = true
		};
		/* the callback: it may cancel another node */
		if
		:: ANYCANC -> pick(); lcx[c] = true; acancel()
		:: true -> skip
		fi;
		use(a);
#if FREECB
		/* the last one may try to free the notifier: nothing pending,
		 * but n->dispatching, so EBUSY; the loop frees it after
		 * dispatch returns */
		if
		:: pending == 0 && !freedcb ->
#ifdef MUT_FREE_IN_CALLBACK
			/* mutation: no dispatching check, freed */
			atomic { holds == 0 -> notifier_freed = true };
			freedcb = true
#else
			skip                                     /* EBUSY */
#endif
		:: true -> skip
		fi;
#endif
		a = 0; r = 0
	:: else -> break
	od;
	budget = 0
}

/* ts_notifier_dispatch: see the header */
inline dispatch()
{
#ifdef MUT_OLD_DISPATCH
	/* mutation: the dispatch before cc02589 */
	atomic { NOT; sig = false };            /* clear */
	atomic { NOT; fdr = false };            /* then drain */
	collect();
	expire();
	run_ready();                            /* one round */
	atomic {                                /* still ready and 0 -> 1? */
		NOT;
		if :: rlen > 0 && !sig -> sig = true; owed++; more = true :: else -> skip fi
	};
	if :: more -> atomic { NOT; fdr = true; owed--; more = false } :: else -> skip fi
#else
	atomic { NOT; fdr = false };            /* read(evfd): drain it */
#ifndef NO_CLAIM
	atomic { NOT; sig = true };             /* exchange(signalled, 1): held */
#endif
	collect();
	expire();
	round = 0;
	do
	:: round < ROUNDS ->
		run_ready();
		round++;
		atomic { NOT; more = (stklen > 0) };    /* load(stack) */
		if
		:: more -> more = false; collect()
		:: else -> break
		fi
	:: else -> break
	od;
	round = 0;
#if defined(MUT_END_NO_LOOK)
	atomic { NOT; sig = false }             /* mutation: cleared, no look */
#else
#if defined(MUT_LOOK_BEFORE_CLEAR)
	atomic { NOT; more = (rlen > 0 || stklen > 0) };   /* mutation: look, */
	atomic { NOT; sig = false };                       /* then clear */
#else
	atomic { NOT; sig = false };            /* exchange(signalled, 0) */
#if defined(MUT_END_STACK_ONLY)
	atomic { NOT; more = (stklen > 0) };    /* mutation: the ready list unlooked */
#else
	atomic { NOT; more = (rlen > 0 || stklen > 0) };   /* ready_head || load(stack) */
#endif
#endif
	if
	:: more ->                              /* exchange(signalled, 1) */
		atomic { NOT; if :: !sig -> sig = true; owed++ :: else -> more = false fi }
	:: else -> skip
	fi;
	if :: more -> atomic { NOT; fdr = true; owed--; more = false } :: else -> skip fi
#endif
#endif
}

/* ts_lib_async_begin(c): r = INPROG or REFUSED */
inline begin()
{
	atomic { pend[c] = true; pending++; hp[c] = DL(c) };
	if
	:: CX(c) ->
		atomic { !tlock -> reg[c] = true };
#ifndef MUT_BEGIN_NO_RECHECK
		if
		:: flag != 0 ->
			lwithdraw(c, CANCELLED);
			if
			:: s < FINAL ->
				unwatch(c);
				untrack(c); pend[c] = false; r = REFUSED
			:: else -> skip
			fi;
			s = 0
		:: else -> skip
		fi
#else
		skip
#endif
	:: else -> skip
	fi
}

/* the _async call for node c */
inline start()
{
#if TAKE == 0
	/* ts_private_take_fast */
	if
	:: CX(c) && flag != 0 -> skip
	:: else ->
		atomic {
			if
			:: !wbit && !cbit && avail > 0 -> avail--; held++; r = IMMEDIATE
			:: else -> skip
			fi
		}
	fi;
	if
	:: r == IMMEDIATE -> skip
	:: else ->
		if
		:: cbit -> r = REFUSED          /* ts_private_wait_slow's checks */
		:: else ->
			if
			:: CX(c) && flag != 0 -> r = REFUSED
			:: else ->
				/* enqueue */
				lock();
				atomic {
					if
					:: cbit -> r = REFUSED
					:: !cbit && !wbit && avail > 0 -> avail--; held++; r = IMMEDIATE
					:: else ->
						if
						:: DL(c) -> r = REFUSED /* deadline passed */
						:: true -> wbit = true; queue[qlen] = c; qlen++; r = INPROG
						fi
					fi
				};
				unlock()
			fi
		fi
	fi;
#else
	lock();
	atomic {
		if
		:: nready > 0 -> nready--; held++; r = IMMEDIATE
		:: else ->
			if
			:: closed -> r = REFUSED
			:: !closed && CX(c) && flag != 0 -> r = REFUSED
			:: !closed && !(CX(c) && flag != 0) && DL(c) -> r = REFUSED
			:: !closed && !(CX(c) && flag != 0) && SLOTFREE ->
				created++; held++; r = IMMEDIATE          /* TS_CREATE */
			:: !closed && !(CX(c) && flag != 0) && !SLOTFREE ->
				queue[qlen] = c; qlen++; r = INPROG
			fi
		fi
	};
	unlock();
#endif
	if :: r == INPROG -> begin() :: else -> skip fi;
	if
	:: r != INPROG ->
		nocb[c] = true; dead[c] = true;
		/* a pass, an item or a slot got at once is used and given back */
		if
		:: r == IMMEDIATE ->
#if TAKE == 0
			return_pass()
#else
			put_item(false)
#endif
		:: else -> skip
		fi
	:: else -> skip
	fi;
	r = 0
}

proctype Loop()
{
	byte a, c, e, f, h, k, r, s, budget, round, spurd, ents, kick, late;
	bool more, freedcb;
	bool lcx[NA];

	c = 0;
	do
	:: c < NA -> start(); c++
	:: else -> c = 0; break
	od;
	do
	:: lwait = true;
	   if
	   :: atomic { pending == 0 -> lwait = false }; break
	   /* readable (or a dispatch call with nothing readable, SPURD) */
	   :: atomic {
		(fdr || TIMER || spurd < SPURD) -> lwait = false;
		if :: !(fdr || TIMER) -> spurd++ :: else -> skip fi
	      };
	      dispatch();
	      if :: freedcb -> break :: else -> skip fi
	   /* time passes: a pending deadline is reached */
	   :: atomic { hp[0] && !dlp[0] -> dlp[0] = true }
	   :: atomic { NA > 1 && hp[1 % NA] && !dlp[1 % NA] -> dlp[1 % NA] = true }
	   :: atomic { NA > 2 && hp[2 % NA] && !dlp[2 % NA] -> dlp[2 % NA] = true }
	   /* the loop's code, outside dispatch */
	   :: atomic { ANYCANC -> lwait = false; pick() }; lcx[c] = true; acancel()
	   fi
	od;
	/* ts_notifier_free: nothing pending, not dispatching: not EBUSY */
	assert(pending == 0 && stklen == 0 && rlen == 0);
	if
	:: freedcb -> skip
	:: else ->
		atomic { holds == 0 -> notifier_freed = true }
	fi;
	done++
}

/* ---- other threads --------------------------------------------------------- */

/* a releaser returns its pass / a putter puts its item or discards it */
proctype Granter(byte g)
{
	byte f, h, ents, kick, late;
	bool more;
#if TAKE == 0
	return_pass();
#else
	if
	:: GD(g) -> free_slot()
	:: else -> put_item(false)
	fi;
#endif
	done++
}

proctype Closer()
{
	byte f, h, ents, kick, late;
	bool more, gaps;
	do
	:: lock();
#if TAKE == 0
	   cbit = true;
#else
	   closed = true;
#endif
	   do
	   :: atomic {
		if
		:: qlen > 0 && !FULL -> qpop(h); COMPLETE1(h, CLOSEDST)
		:: else ->
			more = qlen > 0;
			if
			:: !more -> CLEARW
			:: more && !gaps -> gaps = true; busy++
			:: else -> skip
			fi;
			h = NONE
		fi
	      };
	      if
	      :: h == NONE -> h = 0; break
	      :: else -> complete2(h); h = 0
	      fi
	   od;
	   unlock();
	   flush();
	   if :: !more -> break :: else -> skip fi
	od;
	if :: gaps -> busy--; gaps = false :: else -> skip fi;
	done++
}

/* ts_cancel_fire: nudge_batch on async nodes withdraws them (token lock,
 * then queue lock) */
proctype Canceller()
{
	byte i, f, h, s, ents, kick, late;
	bool more;
	flag = 1;
	do
	:: atomic { !tlock -> tlock = true };
	   i = 0;
	   do
	   :: i < NA && !FULL ->
		if
		:: reg[i] ->
			/* a final state seen unlocked stays final: skipped */
			atomic { CHECK(!dead[i], node_touched_after_given_back); s = st[i] };
			if
			:: s < FINAL ->
				lock();         /* nested: token, then queue */
				atomic {
					CHECK(!dead[i], node_touched_after_given_back);
					s = st[i];
					if
					:: s < FINAL -> qremove(i); CLEARW; COMPLETE1(i, CANCELLED); h = i
					:: else -> h = NONE
					fi
				};
				if :: h != NONE -> complete2(h) :: else -> skip fi;
				h = 0;
				unlock()
			:: else -> skip
			fi;
			s = 0
		:: else -> skip
		fi;
		i++
	   :: else -> i = 0; break
	   od;
	   atomic { tlock = false; more = FULL };
	   flush();
	   if :: !more -> break :: else -> skip fi
	od;
	flag = 2;
	done++
}

init
{
	byte g;
	atomic {
		run Loop();
		g = 0;
		do
		:: g < NG -> run Granter(g); g++
		:: else -> break
		od;
		if :: CANCELLER -> run Canceller() :: else -> skip fi;
		if :: CLOSER -> run Closer() :: else -> skip fi;
		g = 0
	}
	done == NTHREADS;
	assert(qlen == 0 && held == 0 && busy == 0 && holds == 0 && owed == 0 && preex == 0);
	assert(stklen == 0 && rlen == 0 && pending == 0);
#if TAKE == 0
	assert(avail == CEIL && !wbit);
#else
	assert(created == nready);
#endif
	/* exactly one callback for each wait that went pending and was not
	 * cancelled; none for the others */
	g = 0;
	do
	:: g < NA -> CHECK(cb[g] + nocb[g] == 1, callback_count_wrong); g++
	:: else -> break
	od
}
