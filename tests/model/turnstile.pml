/* SPDX-License-Identifier: MIT */
/* Model of the turnstile's park / hand-off / timeout-or-cancel / close
 * protocol (lib/turnstile.c, lib/waiter.c, lib/cancel.c), state for state:
 *
 *   C                                   here
 *   word: available, WAITERS, CLOSED    avail, qlen > 0, closed
 *   waiter.state QUEUED/SLEEPING/       st[w]
 *     GRANTED/CLOSED
 *   futex_wait / futex_wake             asleep[w]: set only if st[w] is
 *                                       still SLEEPING; cleared by a wake
 *   critical section under t->lock      atomic { } (mutual exclusion)
 *   fast paths: CAS on the whole word   one atomic step, WAITERS = qlen > 0
 *
 * Two configurations, each checked exhaustively by spin (tests/model/check.sh):
 *
 *  default      RELEASERS threads start holding every pass and return them;
 *               waiter 0 has a deadline (its futex_wait may return on its
 *               own, and it may give up), waiter 1 watches the cancel token,
 *               waiter 2 does neither; a canceller fires and a closer
 *               closes at any point (one that runs last is the run without
 *               it).  Checked: never more holders than
 *               passes; at the end every pass is free (none lost or
 *               doubled) and the queue is empty; and every waiter finishes
 *               (one asleep forever is an invalid end state).
 *  CANCEL_ONLY  the passes never come back and nobody has a deadline, so
 *               only the cancel can end the waits: a nudge that a waiter
 *               could miss leaves it asleep forever. */

#define CONC 2
#define WAITERS 3
#define RELEASERS 2

#define QUEUED 0
#define SLEEPING 1
#define GRANTED 3
#define CLOSEDST 4

byte avail = 0;          /* the releasers hold every pass at the start */
bool closed = false;
byte holders = RELEASERS;
byte queue[WAITERS];     /* FIFO: all claims equal, arrival decides */
byte qlen = 0;
byte st[WAITERS];
bool asleep[WAITERS];
bool fired = false;
bool watching[WAITERS];
byte done = 0;

inline grant_head(outcome) {
	/* unlink the head, publish the outcome with one exchange, and wake it
	 * (after the lock, in C: the wake is by address only) */
	h = queue[0];
	queue[0] = queue[1]; queue[1] = queue[2]; qlen--;
	old = st[h];
	st[h] = outcome;
	if
	:: old == SLEEPING -> asleep[h] = false
	:: else -> skip
	fi
}

inline release() {
	atomic {
		if
		:: qlen == 0 -> avail++          /* fast path: CAS word+UNIT, no WAITERS */
		:: else ->                       /* return_slow under the lock */
			avail++;
			do
			:: avail > 0 && qlen > 0 -> avail--; grant_head(GRANTED)
			:: else -> break
			od
		fi
	}
}

inline hold() {
	atomic { holders++; assert(holders <= CONC) }
	holders--;
	release()
}

proctype Releaser() {
	byte h, old;
	holders--;
	release();
	atomic { done++ }
}

proctype Waiter(byte me) {
	byte h, old, i;
#ifdef CANCEL_ONLY
	bool deadline = false, cancellable = true;
#else
	bool deadline = me == 0, cancellable = me == 1;
#endif

	/* fast path: a free pass and nobody queued (and open, cancel not fired) */
	atomic {
		if
		:: !closed && !(cancellable && fired) && qlen == 0 && avail > 0 -> avail--; goto holding
		:: else -> skip
		fi
	}
	/* enqueue() under the lock */
	atomic {
		if
		:: closed -> goto finished                      /* ESHUTDOWN */
		:: !closed && qlen == 0 && avail > 0 -> avail--; goto holding
		:: else -> st[me] = QUEUED; queue[qlen] = me; qlen++
		fi
	}
	watching[me] = cancellable;                     /* ts_lib_cancel_watch */
park:
	if
	:: st[me] >= GRANTED -> goto outcome
	:: st[me] == QUEUED ->
		atomic { if :: st[me] == QUEUED -> st[me] = SLEEPING :: else -> goto park fi }
	:: st[me] == SLEEPING -> skip                   /* spurious return earlier */
	fi;
	/* after announcing sleep: the cancel flag, then the deadline */
	if
	:: cancellable && fired -> goto leave            /* cancel_fired_now(): always seen */
	:: else ->
		if
		:: deadline -> goto leave               /* the deadline may have passed */
		:: true -> skip
		fi
	fi;
	/* futex_wait: sleeps only if the word still says SLEEPING */
	atomic { if :: st[me] == SLEEPING -> asleep[me] = true :: else -> skip fi }
	if
	:: !asleep[me] -> skip                          /* woken (or never slept) */
	:: deadline && asleep[me] -> asleep[me] = false /* timed out */
	fi;
	goto park;
leave:
	watching[me] = false;                           /* ts_lib_cancel_unwatch */
	atomic {                                        /* leave() under the lock */
		if
		:: st[me] >= GRANTED -> skip                 /* granted or closed first */
		:: else ->
			i = 0;
			do
			:: queue[i] == me -> break
			:: else -> i++
			od;
			do
			:: i + 1 < qlen -> queue[i] = queue[i + 1]; i++
			:: else -> break
			od;
			qlen--;
			st[me] = QUEUED;
			goto finished                        /* ETIMEDOUT / ECANCELED */
		fi
	}
outcome:
	watching[me] = false;
	if
	:: st[me] == GRANTED -> goto holding
	:: else -> goto finished                        /* ESHUTDOWN */
	fi;
holding:
	hold();
finished:
	atomic { done++ }
}

proctype Canceller() {
	byte i;
	fired = true;
	i = 0;
	do
	:: i < WAITERS ->
		atomic {                                     /* the nudge */
			if
			:: watching[i] && st[i] == SLEEPING -> st[i] = QUEUED; asleep[i] = false
			:: else -> skip
			fi
		};
		i++
	:: else -> break
	od
}

proctype Closer() {
	byte h, old;
	atomic {
		closed = true;
		do
		:: qlen > 0 -> grant_head(CLOSEDST)
		:: else -> break
		od
	}
}

init {
	byte i;
	atomic {
		i = 0;
		do
		:: i < WAITERS -> run Waiter(i); i++
		:: else -> break
		od;
#ifdef CANCEL_ONLY
		run Canceller()
	}
	done == WAITERS;                 /* every waiter ended by the cancel */
	assert(qlen == 0);
	assert(avail == 0 && holders == RELEASERS)
#else
		i = 0;
		do
		:: i < RELEASERS -> run Releaser(); i++
		:: else -> break
		od;
		run Canceller();
		run Closer()
	}
	done == WAITERS + RELEASERS;
	assert(qlen == 0);
	assert(holders == 0);
	assert(avail == CONC)            /* no pass lost or doubled */
#endif
}
