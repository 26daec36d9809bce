/* SPDX-License-Identifier: MIT */
/* Model of the process-shared turnstile (lib/shared.c) as the C code runs
 * it: the truth records (a process slot's word, a waiter slot's state, the
 * ceiling), the lock-free fast take and return on a process's own word,
 * the segment lock with its takeover from a dead owner, the slow paths
 * under it (take_locked, the enqueue that drains every cache, grant_heads,
 * a woken waiter's settle, the slow return), rebuild() after a takeover or
 * from a sweep, and the death of any one process between any two of its
 * steps.  tests/model/check.sh checks it exhaustively in several
 * configurations and shows, by seeded mutations, that each check can
 * fail.  Change the protocol there, change it here.
 *
 * C (lib/shared.c)                             here
 * -------------------------------------------  -------------------------------
 * an attached process                          an actor: Actor(me); actor NA
 *                                              is the master of the final
 *                                              ts_shared_recover (init)
 * procs[p].word = held | cache<<32 | DRAINED   pheld[p], pcache[p], pdr[p]:
 *                                              one word, one step each
 * procs[p].state PROC_FREE / PROC_LIVE         pstate[p]
 * the byte p's open-file-description lock      pbyte[p] = actor + 1 holding
 * (proc_alive: the kernel's word)              it, 0 none; dropped at death
 * slots[s].state FREE/QUEUED/SLEEPING/GRANTED  ws[a]: one waiter slot per
 * slots[s].proc                                actor (one wait at a time),
 *                                              wproc[a]
 * seg->ceiling                                 CEIL (no resize, no close)
 * seg->avail, nqueued, the heap (derived)      avail, qlen, queue[]: FIFO (the
 *                                              heap's order is tested in C:
 *                                              tests/shared_order.c)
 * seg->lock = gen << 32 | CONTENDED | slot + 1  lockw = gen << 4 | CONT | slot + 1
 * h->me set (registered)                       reg
 * futex_wait on a slot (waiter_park)           asleep[a]: cleared by a wake,
 *                                              at a deadline (DLMASK), at the
 *                                              end of a slice
 * struct wakeups, wakeups_flush                wk (bitmask), flush()
 *
 * Every C atomic operation (a CAS loop: one step acting on the current
 * value) and every store is one step: a process may die between any two
 * of them.  Under the lock, reads of lock-held (derived) data are merged
 * into the next step, and consecutive writes of derived data only (avail,
 * nqueued, the heap) are merged: rebuild() recomputes all of them, so a
 * death between them is a death before or after both.
 *
 * ts_lib_shared_wait  fast take: CAS cache-1,held+1 if !DRAINED && cache>0;
 *                     else wait_queued: seg_lock; take_locked; enqueue
 *                     (the first collects every cache WITH DRAINED; state
 *                     QUEUED: STEP 9; heap; grant_heads; unlock_and_wake);
 *                     park in slices (waiter_park: load, CAS
 *                     QUEUED->SLEEPING, deadline?, futex_wait; a slice's end
 *                     sweeps); settle (STEP 10; seg_lock; queued: unlink,
 *                     ETIMEDOUT; GRANTED: held+1 (STEP 11); slot FREE;
 *                     maybe_undrain; unlock_and_wake)
 * take_locked         queue empty? avail<=0: collect_all(no drain); avail>0:
 *                     avail-1, held+1 (STEP 8), maybe_undrain
 * collect_cache       CAS cache := 0 (| DRAINED), then avail += cache; every
 *                     live slot, STEP 2 between two
 * grant_heads         while avail>0 && queued: pop the head, avail-1 (STEP
 *                     3), exchange GRANTED (a wake if it was SLEEPING, STEP 4)
 * ts_lib_shared_return fast: CAS held-1,cache+1 if !DRAINED && held>0; else
 *                     seg_lock; CAS held-1 (STEP 12); avail+1; grant_heads;
 *                     maybe_undrain; unlock_and_wake
 * maybe_undrain       our DRAINED clear if nobody queued and avail >= 0
 * seg_lock            CAS 0 -> id (the first try and the spins); else
 *                     loop: CAS 0 -> id|CONTENDED; or set CONTENDED and
 *                     futex_wait a slice on the value; at its end, the
 *                     owner dead (proc_alive: our own slot once registered,
 *                     else someone else holds its byte), CAS that value ->
 *                     id|CONTENDED, and rebuild.  The look at the owner and
 *                     the CAS are two steps, as in C.
 * seg_unlock          exchange 0 (STEP 1); the futex wake is abstracted: a
 *                     locker waits until the word is 0 or its owner dead
 * rebuild             per LIVE slot whose process is dead: word := 0
 *                     (STEP 5), state FREE; per waiter slot: owner not LIVE:
 *                     FREE; GRANTED: counted; queued: into the heap; per
 *                     LIVE slot: count held + cache; avail = ceiling -
 *                     counted; queued (or avail < 0): collect_all(DRAINED);
 *                     then nqueued and the heap; grant_heads; a wake per
 *                     GRANTED slot
 * sweep               at a slice's end, if anyone is dead: recover_now
 *                     (seg_lock, rebuild, unlock_and_wake).  The next_sweep_ns
 *                     gate (who sweeps when) is abstracted: every slice end
 *                     may sweep.
 * register_proc       NEWCOMER: an actor that attaches after the victim died
 *                     takes its byte (the only slot: max_processes full) and
 *                     so its lock identity; seg_lock; rebuild; word (DRAINED
 *                     if queued or avail < 0); state LIVE (STEP 7); me set;
 *                     unlock_and_wake
 * ts_shared_recover   init, at the end: the master's recover_now
 *
 * DEATH: the Killer kills one actor of VICTIMS at any moment (or none):
 * its steps stop (every actor's body is `unless` its death), the kernel
 * drops its byte.  A dead actor may have been anywhere: inside the lock,
 * between the two writes of a settle, between a CAS on a cache and the
 * avail it feeds, holding passes, queued, granted but not settled, or
 * idle after its last call with a pass in its cache.
 *
 * SLICES: a sleeping waiter's futex_wait returns when woken, at its
 * deadline (DLMASK), or at the end of a slice of recover_ns / 2.  A slice
 * end is modelled only where it can change something (its slot is no
 * longer SLEEPING: a granter died before its wake; or someone is dead: the
 * sweep recovers), so a waiter nothing can help stays blocked, and spin's
 * end-state check reports it: ASLEEP FOREVER is an invalid end state.
 *
 * CHECKED:
 *  - every state (Monitor): passes LIVE processes have (held in the word
 *    of a slot whose records are a live actor's, plus GRANTED slots of
 *    live actors not yet moved into held) never exceed the ceiling; at
 *    most one live actor inside the lock (MUTEX);
 *  - no barging: a fast take or fast return never succeeds while a waiter
 *    is seen queued (qlen > 0: the snapshot's count), so a pass is never
 *    taken, nor parked in a cache, past a published waiter;
 *  - a grant's exchange always meets a queued slot (no double grant); a
 *    settle under the lock never finds its slot FREE; a real slow return
 *    always finds held > 0;
 *  - at the end (every live actor finished its script, the Killer done):
 *    with nobody dead unrecovered, avail + the live records == ceiling
 *    already; after the master's recover_now: lock free, nobody queued,
 *    no slot of a dead actor left, no pass held, avail + caches ==
 *    ceiling (nothing lost, nothing doubled);
 *  - invalid end states: a waiter asleep forever, a locker stuck.
 *
 * MUTATIONS (-DMUT_x; check.sh requires each to be caught):
 * REBUILD_TRUSTS_AVAIL (rebuild adds a dead process's records back to the
 * stored avail instead of recomputing it), FAST_RETURN_IGNORES_DRAINED,
 * FIRST_ENQUEUE_NO_DRAIN, PUBLISH_BEFORE_DRAIN (the first waiter is in the
 * heap before the drain: lib/shared.c before this check, found by the
 * order audit of bench/shared), SETTLE_WITHOUT_LOCK (a granted waiter moves its
 * pass into held and frees its slot without the lock), REBUILD_KEEPS_DEAD_
 * GRANTED (a dead process's GRANTED slot is counted as a live one's and
 * kept), UNDRAIN_WHILE_QUEUED (maybe_undrain ignores the queue), NO_SWEEP
 * (a slice's end does not look for the dead), LOCK_NO_GEN (the lock's
 * generation stands still: the takeover ABA above).
 *
 * THE LOCK'S GENERATION (found by this model in lib/shared.c 75c955a, where
 * the lock word was only the owner's slot + 1): with NEWCOMER (a process
 * attaching after the victim died gets its slot, as when a prefork master
 * respawns a killed worker) a waiter that saw the dead owner and was
 * preempted before its takeover CAS found the newcomer's identical word
 * (same slot, so the same id) and took the lock over from a live process:
 * two in the lock, then a pass doubled.  Now every unlock and takeover
 * moves a generation on (seg_unlock, seg_lock_counting), so the stale CAS
 * fails; MUT_LOCK_NO_GEN keeps the generation still, and the reuse row
 * catches it.  The generation is modelled with NEWCOMER only: without it
 * no lock identity is ever reused, and a counter would only multiply the
 * states.
 *
 * ABSTRACTED: memory order (sequentially consistent steps); the lock's
 * futex (a locker waits until the word is 0, or until CONTENDED is set and
 * the owner is dead: the futex_wait's slice; the unlock's wake); the spin
 * phase of waiter_park; the heap's order (FIFO: order is
 * tests/shared_order.c's business); claims, timestamps and the sweep's
 * schedule; several threads per process (one per actor); close, resize,
 * fork, detach (ts_turnstile_free), EAGAIN/EUSERS, scribbles; the wake
 * batch (never full: at most 3 waiters). */

#ifndef NA
#define NA 2            /* actors (processes), at most 3, newcomer included */
#endif
#ifndef CEIL
#define CEIL 1          /* the ceiling */
#endif
#ifndef IT0
#define IT0 2           /* wait+return rounds of actor 0, 1, 2 */
#endif
#ifndef IT1
#define IT1 2
#endif
#ifndef IT2
#define IT2 1
#endif
#ifndef DLMASK
#define DLMASK 0        /* actors whose waits have a deadline */
#endif
#ifndef VICTIMS
#define VICTIMS 7       /* actors that may die (one at most per run) */
#endif
#ifndef NEWCOMER
#define NEWCOMER 0      /* actor NA-1 attaches into the dead VICTIM's slot */
#endif
#ifndef VICTIM
#define VICTIM 1        /* NEWCOMER: whose slot it takes */
#endif

#define NPS (NA - NEWCOMER)     /* process slots (max_processes) */
#define MASTER NA               /* the final recover's actor */
#define ITER(a) ((a) == 0 -> IT0 : ((a) == 1 -> IT1 : IT2))
#define DL(a) (((DLMASK) >> (a)) & 1)
#define VICT(a) (((VICTIMS) >> (a)) & 1)
#define B(a) (1 << (a))

/* waiter slot states (waiter.h; SLOT_FREE is 255: >= FINAL too) */
#define QUEUED 0
#define SLEEPING 1
#define GRANTED 3
#define WFREE 5
#define PFREE 0
#define LIVE 1
#define OK 1
#define NONE 255

/* process slots (index NPS: the master, alive forever, no records) */
byte pheld[4], pcache[4];
bool pdr[4];
byte pstate[4];
byte pbyte[4];          /* the kernel: actor + 1 holding the byte */
byte powner[4];         /* ghost: the actor whose records the slot holds */
/* waiter slots */
byte ws[4];
byte wproc[4];
bool wconv[4];          /* ghost: its pass already moved into held */
bool asleep[4];         /* in futex_wait on its slot */
/* derived, under the lock */
short avail = CEIL;
byte queue[3];
byte qlen;
/* the lock: generation << 4 | CONTENDED | owner's slot + 1.  Without
 * NEWCOMER no lock identity is ever reused, so neither CONTENDED nor the
 * generation can decide a takeover CAS (the word a waiter saw its dead
 * owner in cannot come back): they are modelled with NEWCOMER only, to
 * spare states. */
short lockw;
#if NEWCOMER
#define CONT 8
#ifdef MUT_LOCK_NO_GEN
#define NEXT(w) ((w) & ~15)             /* the generation stands still */
#else
#define NEXT(w) ((((w) >> 4) + 1) << 4) /* LOCK_NEXT: on, owner 0, no CONTENDED */
#endif
#else
#define CONT 0
#define NEXT(w) 0
#endif
#define OWNER(w) (((w) & 7) - 1)
#define FREE(w) (((w) & 7) == 0)
/* the kernel */
bool alive[4];
/* ghosts */
bool cs[4];             /* believes it holds the lock */
bool done[4];
bool killer_over;

/* the records of slot p are a live actor's */
#define PL(p) ((p) < NPS && alive[powner[p]])
#define PH(p) (PL(p) -> pheld[p] : 0)
#define WG(a) ((a) < NA && alive[a] && ws[a] == GRANTED && !wconv[a] -> 1 : 0)
#define HELD_LIVE (PH(0) + PH(1) + PH(2) + WG(0) + WG(1) + WG(2))
#define INCS(a) (alive[a] && cs[a] -> 1 : 0)
#define MUTEX (INCS(0) + INCS(1) + INCS(2) + INCS(3) <= 1)

/* slot records counted as rebuild counts them: LIVE slots */
#define PR(p) ((p) < NPS && pstate[p] == LIVE -> pheld[p] + pcache[p] : 0)
#define WR(a) ((a) < NA && ws[a] == GRANTED && pstate[wproc[a]] == LIVE -> 1 : 0)
#define EXACT (avail + PR(0) + PR(1) + PR(2) + WR(0) + WR(1) + WR(2) == CEIL)

/* proc_alive(h, p), seen by actor me: our own slot once registered, else
 * whether someone else holds its byte (our own description's lock never
 * conflicts with a GETLK on it) */
#define ALIVE(p) ((reg && (p) == my) || (pbyte[p] != 0 && pbyte[p] != me + 1))
#define DEADP(p) ((p) < NPS && pstate[p] == LIVE && !ALIVE(p))
#define ANYONE_DEAD (DEADP(0) || DEADP(1) || DEADP(2))

/* set only when broken, to name the failed check in pan's output */
bool passes_over_ceiling, two_in_the_lock, granted_not_queued, barged,
	settle_found_slot_free, real_return_ignored, not_exact_at_end,
	left_at_end;
#define CHECK(ok, broken) if :: !(ok) -> broken = true :: else -> skip fi; assert(!broken)

active proctype Monitor()
{
end:	atomic {
#ifndef ONLY_PASSES
		!(HELD_LIVE <= CEIL && MUTEX) ->
#else
		!(HELD_LIVE <= CEIL) ->
#endif
		CHECK(HELD_LIVE <= CEIL, passes_over_ceiling);
#ifndef ONLY_PASSES
		CHECK(MUTEX, two_in_the_lock)
#endif
	}
}

/* the kernel at a death: the actor's steps stop, its bytes' locks go */
inline kill(a)
{
	alive[a] = false;
	if :: pbyte[0] == a + 1 -> pbyte[0] = 0 :: else -> skip fi;
	if :: pbyte[1] == a + 1 -> pbyte[1] = 0 :: else -> skip fi;
	if :: pbyte[2] == a + 1 -> pbyte[2] = 0 :: else -> skip fi
}

/* One death at most: any VICTIMS actor, at any moment (or nobody). */
active proctype Killer()
{
	if
	:: atomic { VICT(0) && alive[0] -> kill(0) }
	:: atomic { VICT(1) && alive[1] -> kill(1) }
	:: atomic { NA > 2 && VICT(2) && alive[2] -> kill(2) }
	:: skip
	fi;
	killer_over = true
}

inline qpop(h)
{
	h = queue[0]; queue[0] = queue[1]; queue[1] = queue[2]; queue[2] = 0; qlen--
}

/* heap_remove_slot: wherever it is, if it is there */
inline qremove(w)
{
	if
	:: qlen > 0 && queue[0] == w -> queue[0] = queue[1]; queue[1] = queue[2]; queue[2] = 0; qlen--
	:: qlen > 1 && queue[1] == w -> queue[1] = queue[2]; queue[2] = 0; qlen--
	:: qlen > 2 && queue[2] == w -> queue[2] = 0; qlen--
	:: else -> skip
	fi
}

/* wakeups_flush: by address, never a touch of the records */
inline flush()
{
	do
	:: wk == 0 -> break
	:: wk & 1 -> atomic { asleep[0] = false; wk = wk & 14 }
	:: (wk & 3) == 2 -> atomic { asleep[1] = false; wk = wk & 13 }
	:: (wk & 7) == 4 -> atomic { asleep[2] = false; wk = wk & 11 }
	od
}

/* collect_all(drain): collect_cache on every LIVE slot (CAS: cache 0,
 * DRAINED if drain; then avail += cache), STEP 2 between two */
inline collect_all(drain)
{
	i = 0;
	do
	:: atomic {
		i < NPS ->
		if
		:: pstate[i] == LIVE ->
			c = pcache[i]; pcache[i] = 0; pdr[i] = pdr[i] || drain
		:: else -> c = 0
		fi;
		if :: c == 0 -> i++ :: else -> skip fi
	   };
	   if
	   :: c > 0 -> atomic { avail = avail + c; c = 0; i++ }    /* avail_add */
	   :: else -> skip
	   fi
	:: atomic { i >= NPS -> i = 0 }; break
	od
}

/* maybe_undrain: our DRAINED goes once nobody is queued and avail >= 0 */
inline maybe_undrain()
{
	atomic {
		if
#ifndef MUT_UNDRAIN_WHILE_QUEUED
		:: qlen == 0 && avail >= 0 -> pdr[my] = false
#else
		:: avail >= 0 -> pdr[my] = false        /* mutation: ignores the queue */
#endif
		:: else -> skip
		fi
	}
}

/* grant_heads: pop the head, avail-1 (STEP 3; both derived: one step),
 * exchange GRANTED (a wake owed if it was SLEEPING), STEP 4 */
inline grant_heads()
{
	do
	:: atomic {
		if
		:: avail > 0 && qlen > 0 -> qpop(s); avail--
		:: else -> s = NONE
		fi
	   };
	   if
	   :: s == NONE -> s = 0; break
	   :: else ->
		atomic {
#ifndef ONLY_PASSES
			CHECK(ws[s] == QUEUED || ws[s] == SLEEPING, granted_not_queued);
#endif
			if :: ws[s] == SLEEPING -> wk = wk | B(s) :: else -> skip fi;
			ws[s] = GRANTED;
			s = 0
		}
	   fi
	od
}

/* rebuild(), lock held */
inline rebuild()
{
	/* dead processes' words dropped (STEP 5), their slots freed */
	j = 0;
	do
	:: atomic {
		j < NPS ->
		if
		:: pstate[j] == LIVE && !ALIVE(j) ->
#ifdef MUT_REBUILD_TRUSTS_AVAIL
			back = back + pheld[j] + pcache[j];
#endif
			pheld[j] = 0; pcache[j] = 0; pdr[j] = false; d = 1
		:: else -> j++
		fi
	   };
	   if
	   :: d -> atomic { pstate[j] = PFREE; d = 0; j++ }
	   :: else -> skip
	   fi
	:: atomic { j >= NPS -> j = 0 }; break
	od;
	/* waiter slots: a dead owner's freed, GRANTED counted, queued into
	 * the heap */
	do
	:: atomic {
		j < NA ->
		if
		:: ws[j] == WFREE -> skip
#ifdef MUT_REBUILD_KEEPS_DEAD_GRANTED
		:: ws[j] == GRANTED -> rec++    /* mutation: owner not looked at */
		:: ws[j] != WFREE && ws[j] != GRANTED && pstate[wproc[j]] != LIVE -> ws[j] = WFREE
#else
		:: ws[j] != WFREE && pstate[wproc[j]] != LIVE ->
#ifdef MUT_REBUILD_TRUSTS_AVAIL
			if :: ws[j] == GRANTED -> back++ :: else -> skip fi;
#endif
			ws[j] = WFREE
		:: ws[j] == GRANTED && pstate[wproc[j]] == LIVE -> rec++
#endif
		:: (ws[j] == QUEUED || ws[j] == SLEEPING) && pstate[wproc[j]] == LIVE ->
			qm = qm | B(j)
		fi;
		j++
	   }
	:: atomic { j >= NA -> j = 0 }; break
	od;
	/* every LIVE slot's held + cache (invariant under its fast paths) */
	do
	:: atomic { j < NPS -> if :: pstate[j] == LIVE -> rec = rec + pheld[j] + pcache[j] :: else -> skip fi; j++ }
	:: atomic { j >= NPS -> j = 0 }; break
	od;
	/* avail (derived: one step) */
	atomic {
#ifndef MUT_REBUILD_TRUSTS_AVAIL
		avail = CEIL - rec;
#else
		avail = avail + back;           /* mutation: the stored count trusted */
		back = 0;
#endif
		rec = 0
	};
	if
	:: qm != 0 || avail < 0 -> collect_all(true)
	:: else -> skip
	fi;
	/* nqueued and the heap after the drain, as enqueue (derived: one step) */
	atomic {
		qlen = 0; queue[0] = 0; queue[1] = 0; queue[2] = 0;
		if :: qm & 1 -> queue[qlen] = 0; qlen++ :: else -> skip fi;
		if :: qm & 2 -> queue[qlen] = 1; qlen++ :: else -> skip fi;
		if :: qm & 4 -> queue[qlen] = 2; qlen++ :: else -> skip fi;
		qm = 0
	};
	grant_heads();
	/* wakes a dead granter may have owed */
	atomic {
		if :: ws[0] == GRANTED -> wk = wk | 1 :: else -> skip fi;
		if :: ws[1] == GRANTED -> wk = wk | 2 :: else -> skip fi;
		if :: ws[2] == GRANTED -> wk = wk | 4 :: else -> skip fi
	}
}

/* seg_lock: the first CAS 0 -> id (and the spins), else the loop: CAS 0
 * -> id|CONTENDED; or set CONTENDED and futex_wait a slice; at its end,
 * the owner dead (proc_alive), CAS the value waited on -> id|CONTENDED
 * and rebuild.  The look at the owner and the CAS are two steps, as in C. */
inline seg_lock()
{
	if
	:: atomic { FREE(lockw) -> lockw = (lockw & ~15) | ID; cs[me] = true }
	:: else ->
		do
		:: atomic { FREE(lockw) -> lockw = (lockw & ~15) | ID | CONT; cs[me] = true }; break
#if NEWCOMER
		:: atomic { !FREE(lockw) && !(lockw & CONT) -> lockw = lockw | CONT }
#endif
		:: atomic { !FREE(lockw) && (lockw & CONT) == CONT && !ALIVE(OWNER(lockw)) -> v = lockw };
		   atomic {
			if
			:: lockw == v -> lockw = NEXT(v) | ID | CONT; cs[me] = true; tk = true
			:: else -> skip
			fi;
			v = 0
		   };
		   if
		   :: tk -> tk = false; rebuild(); break
		   :: else -> skip
		   fi
		od
	fi
}

/* unlock_and_wake: more_owed read under the lock, seg_unlock (STEP 1),
 * wakeups_flush; again while more were owed */
inline unlock_and_wake()
{
	do
	:: atomic { more = avail > 0 && qlen > 0; lockw = NEXT(lockw); cs[me] = false };
	   flush();
	   if
	   :: !more -> break
	   :: else -> more = false; seg_lock(); grant_heads()
	   fi
	od
}

inline recover_now()
{
	seg_lock();
	rebuild();
	unlock_and_wake()
}

/* take_locked: r = OK with the pass in our held, or NONE */
inline take_locked()
{
	r = NONE;
	if
	:: qlen == 0 ->
		if :: avail <= 0 -> collect_all(false) :: else -> skip fi;
		if
		:: avail > 0 ->
			atomic { avail-- };
			atomic { pheld[my]++ };         /* STEP 8 */
			maybe_undrain();
			r = OK
		:: else -> skip
		fi
	:: else -> skip
	fi
}

/* ts_lib_shared_wait: r = OK with a pass, or NONE (ETIMEDOUT) */
inline wait()
{
	/* the fast take */
	atomic {
		if
		:: !pdr[my] && pcache[my] > 0 ->
			CHECK(qlen == 0, barged);
			pcache[my]--; pheld[my]++; r = OK
		:: else -> r = NONE
		fi
	};
	if
	:: r == OK -> goto got
	:: else -> skip
	fi;
	/* wait_queued */
	seg_lock();
	take_locked();
	if
	:: r == OK -> unlock_and_wake(); goto got
	:: else -> skip
	fi;
	first = (qlen == 0);
#if !defined(MUT_FIRST_ENQUEUE_NO_DRAIN) && !defined(MUT_PUBLISH_BEFORE_DRAIN)
	if
	:: first -> collect_all(true)   /* no barging once published */
	:: else -> skip
	fi;
#endif
	atomic {
		assert(ws[me] == WFREE);
		wproc[me] = my; ws[me] = QUEUED                         /* STEP 9 */
	};
	atomic { queue[qlen] = me; qlen++ };                            /* the heap */
#ifdef MUT_PUBLISH_BEFORE_DRAIN
	if
	:: first -> collect_all(true)   /* mutation: a published waiter's drain */
	:: else -> skip
	fi;
#endif
	first = false;
	grant_heads();
	unlock_and_wake();
	/* ts_lib_waiter_park in slices */
park:
	atomic {
		if
		:: ws[me] >= GRANTED -> goto parked
		:: ws[me] == QUEUED -> ws[me] = SLEEPING
		:: else -> skip
		fi
	};
	if
	:: DL(me) -> goto parked        /* its deadline passed: TIMEDOUT */
	:: true -> skip
	fi;
	atomic { if :: ws[me] == SLEEPING -> asleep[me] = true :: else -> skip fi };
	if
	:: !asleep[me] -> skip                          /* woken */
	:: asleep[me] && DL(me) -> asleep[me] = false   /* its deadline */
#ifndef MUT_NO_SWEEP
	:: asleep[me] && (ws[me] != SLEEPING || ANYONE_DEAD) ->
		/* the slice ended: sweep */
		asleep[me] = false;
		atomic { d = ANYONE_DEAD };
		if
		:: d -> d = 0; recover_now()
		:: else -> skip
		fi
#else
	:: asleep[me] && ws[me] != SLEEPING -> asleep[me] = false  /* mutation: no sweep */
#endif
	fi;
	goto park;
parked:
	/* STEP 10: woken or gave up, not yet settled */
#ifdef MUT_SETTLE_WITHOUT_LOCK
	if
	:: ws[me] == GRANTED ->
		/* mutation: the pass moved into held, the slot freed, without
		 * the lock */
		atomic { pheld[my]++; wconv[me] = true };
		atomic { ws[me] = WFREE; wconv[me] = false };
		r = OK;
		goto got
	:: else -> skip
	fi;
#endif
	seg_lock();
	atomic {
		if
		:: (ws[me] == QUEUED || ws[me] == SLEEPING) && wproc[me] == my ->
			qremove(me); r = NONE                   /* ETIMEDOUT */
		:: ws[me] == GRANTED ->
			pheld[my]++; wconv[me] = true; r = OK   /* STEP 11 */
#ifndef ONLY_PASSES
		:: else -> CHECK(false, settle_found_slot_free)
#else
		:: else -> skip
#endif
		fi
	};
	atomic { if :: wproc[me] == my -> ws[me] = WFREE; wconv[me] = false :: else -> skip fi };
	if
	:: r == OK -> maybe_undrain()
	:: else -> skip
	fi;
	unlock_and_wake();
got:
	skip
}

/* ts_lib_shared_return */
inline return_pass()
{
	atomic {
		if
#ifndef MUT_FAST_RETURN_IGNORES_DRAINED
		:: !pdr[my] && pheld[my] > 0 ->
			CHECK(qlen == 0, barged);
			pheld[my]--; pcache[my]++; r = OK
#else
		:: pheld[my] > 0 -> pheld[my]--; pcache[my]++; r = OK  /* mutation */
#endif
		:: else -> r = NONE
		fi
	};
	if
	:: r == OK -> skip
	:: else ->
		seg_lock();
		atomic {
			CHECK(pheld[my] > 0, real_return_ignored);
			pheld[my]--                             /* STEP 12 */
		};
		atomic { avail++ };
		grant_heads();
		maybe_undrain();
		unlock_and_wake()
	fi;
	r = 0
}

/* finished or dead: locals forgotten (states merge) */
inline forget()
{
	my = 0; ID = 0; r = 0; s = 0; v = 0; i = 0; j = 0; c = 0; d = 0;
	wk = 0; qm = 0; it = 0; reg = false; first = false; more = false;
	tk = false; rec = 0; back = 0
}

proctype Actor(byte me)
{
	byte my = me, ID = me + 1, r, s, v, i, j, c, d, wk, qm, it;
	bool reg = true, first, more, tk;
	short rec, back;
	{
		if
		:: NEWCOMER && me == NA - 1 ->
			/* ts_shared_attach: register_proc */
			reg = false; my = NPS; ID = 0;
			if
			:: atomic { !alive[VICTIM] -> pbyte[VICTIM] = me + 1 }   /* F_OFD_SETLK */
				/* STEP 6 */
				my = VICTIM; ID = VICTIM + 1;
				seg_lock();
				rebuild();
				atomic {
					pheld[my] = 0; pcache[my] = 0; pdr[my] = (qlen > 0 || avail < 0);
					powner[my] = me
				};
				atomic { pstate[my] = LIVE };   /* STEP 7 */
				reg = true;
				unlock_and_wake()
			:: atomic { killer_over && alive[VICTIM] -> it = 255 } /* never attaches */
			fi
		:: else -> skip
		fi;
		do
		:: it < ITER(me) ->
			it++;
			wait();
			if
			:: r == OK -> return_pass()
			:: else -> skip
			fi
		:: else -> break
		od;
		atomic { done[me] = true; forget() }
	} unless { atomic { !alive[me] -> forget() } }
}

init
{
	byte me = MASTER, my = NPS, ID = NPS + 1, r, s, v, i, j, c, d, wk, qm;
	bool reg = true, first, more, tk;
	short rec, back;
	atomic {
		i = 0;
		do
		:: i < NPS -> pstate[i] = LIVE; pbyte[i] = i + 1; powner[i] = i; i++
		:: else -> break
		od;
		pbyte[NPS] = 255; powner[NPS] = MASTER; alive[MASTER] = true;
		ws[0] = WFREE; ws[1] = WFREE; ws[2] = WFREE; ws[3] = WFREE;
		i = 0;
		do
		:: i < NA -> alive[i] = true; run Actor(i); i++
		:: else -> break
		od;
		i = 0
	}
	/* every live actor finished; nobody dies any more */
	killer_over && (done[0] || !alive[0]) && (done[1] || !alive[1]) &&
		(NA < 3 || done[2] || !alive[2]);
#ifndef ONLY_PASSES
	atomic {
		if
		:: !ANYONE_DEAD && FREE(lockw) -> CHECK(EXACT, not_exact_at_end)
		:: else -> skip
		fi
	};
	/* ts_shared_recover by a live master */
	recover_now();
	atomic {
		CHECK(EXACT, not_exact_at_end);
		CHECK(FREE(lockw) && qlen == 0 && !ANYONE_DEAD && HELD_LIVE == 0 &&
		      (ws[0] == WFREE || alive[0]) && (ws[1] == WFREE || alive[1]) &&
		      (ws[2] == WFREE || alive[2]) &&
		      ws[0] != QUEUED && ws[0] != SLEEPING && ws[0] != GRANTED &&
		      ws[1] != QUEUED && ws[1] != SLEEPING && ws[1] != GRANTED &&
		      ws[2] != QUEUED && ws[2] != SLEEPING && ws[2] != GRANTED,
		      left_at_end)
	}
#endif
}
