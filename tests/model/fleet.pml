/* SPDX-License-Identifier: MIT */
/* Model of the fleet protocol (lib/fleet.c): members that grow, shrink,
 * admit and return, lose their lease and rejoin; a ledger changed only by
 * compare-and-swap on its revision; reclaim of an expired member's share.
 * tests/model/check.sh searches it exhaustively and shows, by seeded
 * mutations, that each rule of lib/fleet.c's header is needed.
 *
 * C (lib/fleet.c)                               here
 * --------------------------------------------  --------------------------
 * P/ledger: ceiling, shares, mod_revision       CEIL, sh[], rev
 * P/members/NAME exists (its lease lives)       key[]
 * the local turnstile's ceiling, passes held    lc[], h[]
 * fresh(): renewed within half the lease        !stale[] (the environment
 *                                               ends it: etcd gone, a pause)
 * look(): fails closed first                    failclose: lc = 0, closed[]
 * the local turnstile's guard: no grant at or   Clients admit only while
 * after fresh_until, whoever runs first         !stale[]
 * etcd's expiry of a lease (at the full lease,  expire: only after the member
 * after fresh_until)                            failed closed (closed[]) and
 *                                               its holders returned (the
 *                                               documented assumption)
 * a pause (SIGSTOP, a frozen VM) past the       pause: the lease expires
 * lease: nothing of the member runs             before the fleet thread failed
 *                                               closed; on resume its clients
 *                                               and its thread race
 * renew() finding the lease gone: rejoin        rejoin: key back, fresh, once
 * (look() failed closed before its renew())     failed closed
 * grow(): CAS share += room, then local         grow
 * shrink(): local first, CAS max(target, held)  shrink
 * reclaim(): CAS dropping a share, comparing    reclaim
 * the member's key absent in the same txn
 *
 * Every etcd request is one atomic step (etcd linearises them); a member's
 * own steps between requests are separate steps, so another member may
 * act between them.  Each member's fleet thread runs ROUNDS actions of its
 * choosing; its clients (Clients) admit and return concurrently with it,
 * at any moment, as the local turnstile's callers do.
 *
 * CHECKED (every state): the passes held by all members never exceed the
 * ceiling; sum of shares <= ceiling in every ledger.
 * MUTATIONS (check.sh requires each caught): GROW_NO_CAS (grow writes
 * without comparing the revision), LOCAL_FIRST (grow raises the local
 * ceiling before its CAS), SHRINK_LEDGER_FIRST (shrink publishes before it
 * lowers the local ceiling), RECLAIM_STALE_KEY (reclaim trusts the key's
 * absence as read, not compared at commit: races a rejoin),
 * REJOIN_CACHED_SHARE (a member back from a lost lease admits up to the
 * share it had, not what the ledger gives it now), NO_FAIL_CLOSED (a lease
 * may expire before its member stopped admitting), NO_GUARD (admission
 * reads no clock: a client that runs first after a pause past the lease
 * admits on the stale share before the fleet thread fails closed), RECLAIM_EDITS_VIEW (a
 * reclaim that lost leaves its edit in the view, and the same look grows
 * from it: found by review), PENDING_IGNORED (a shrink whose outcome is
 * unknown, applied by etcd later, is forgotten: the member raises its
 * local ceiling back meanwhile; found by review).
 *
 * UNKNOWN OUTCOMES: a shrink's CAS may time out at the client and still be
 * applied later (its compare checked then: pending[]); until the ledger's
 * revision moves past the one it compared, the member admits at most the
 * smaller share, as lib/fleet.c's pending_rev.
 *
 * TIMING, abstracted: "expire only after the member failed closed" holds
 * because look() checks fresh() before every etcd call and before every
 * raise of the local ceiling, and each call times out within a sixth of
 * the lease: the member fails closed at most a sixth of the lease after
 * its deadline (half the lease), before etcd's expiry (the whole). */

#ifndef NM
#define NM 2
#endif
#ifndef CEIL
#define CEIL 2
#endif
#ifndef ROUNDS
#define ROUNDS 4
#endif

byte sh[NM], lc[NM], h[NM], rev, cached[NM];
byte prev[NM], pshare[NM];   /* a shrink in flight: its compared rev (0: none) */
bool key[NM], stale[NM], closed[NM];

#define SUMH (h[0] + h[1])
#define SUMSH (sh[0] + sh[1])

/* A member's clients: admission and return are local and never wait for
 * the fleet thread. */
proctype Clients(byte i)
{
	do
#ifndef MUT_NO_GUARD
	:: atomic { h[i] < lc[i] && !stale[i] -> h[i]++ }
#else
	:: atomic { h[i] < lc[i] -> h[i]++ }   /* mutation: no clock at admission */
#endif
	:: atomic { h[i] > 0 -> h[i]-- }
	od
}

active proctype Monitor()
{
	do
	:: atomic { assert(SUMH <= CEIL); assert(SUMSH <= CEIL) }
	od
}

proctype Member(byte i)
{
	byte r, room, want, t, held, n = 0, other = 1 - i;
	bool won, k;
	do
	:: n < ROUNDS -> n++;
		if
		/* grow: read the ledger, CAS its revision, then local */
		:: key[i] && !closed[i] ->
			atomic { r = rev; room = CEIL - SUMSH };
			if
			:: room > 0 ->
				if :: want = 1 :: want = room fi;
#ifdef MUT_LOCAL_FIRST
				lc[i] = sh[i] + want;      /* mutation: local before the CAS */
#endif
				atomic {
#ifndef MUT_GROW_NO_CAS
					won = rev == r;
#else
					won = true;                /* mutation: no compare */
#endif
					if :: won -> sh[i] = sh[i] + want; rev++ :: else -> skip fi
				};
				atomic { if :: won && !stale[i] -> lc[i] = sh[i] :: else -> skip fi }
			:: else -> skip
			fi
		/* shrink: local first, then CAS max(target, held) */
		:: key[i] && sh[i] > 0 ->
			t = sh[i] - 1;
#ifndef MUT_SHRINK_LEDGER_FIRST
			atomic { if :: lc[i] > t -> lc[i] = t :: else -> skip fi };
			atomic { r = rev; held = h[i] };
			if
			:: atomic {
				if
				:: rev == r -> sh[i] = (held > t -> held : t); rev++
				:: else -> skip
				fi
			   }
			/* the client times out; etcd may apply it later (below) */
			:: atomic { prev[i] = r + 1; pshare[i] = (held > t -> held : t) }
			fi
#else
			atomic { r = rev; held = h[i] };
			atomic { if :: rev == r -> sh[i] = (held > t -> held : t); rev++ :: else -> skip fi };
			atomic { if :: lc[i] > t -> lc[i] = t :: else -> skip fi }  /* mutation: too late */
#endif
		/* the environment cuts the member off (etcd gone, a pause) */
		:: !stale[i] && key[i] -> stale[i] = true
		/* look(): not fresh: fail closed, before anything else */
		:: stale[i] && !closed[i] -> atomic { cached[i] = lc[i]; lc[i] = 0; closed[i] = true }
		/* etcd expires the lease: after the member failed closed (its
		 * deadline is half the lease, etcd's the whole) and its holders
		 * returned (the assumption: no hold longer than the lease) */
#ifndef MUT_NO_FAIL_CLOSED
		:: atomic { stale[i] && closed[i] && key[i] && h[i] == 0 -> key[i] = false }
		/* ... or during a pause, before its fleet thread could fail
		 * closed (nothing of it ran; nothing held across it) */
		:: atomic { stale[i] && !closed[i] && key[i] && h[i] == 0 -> key[i] = false }
#else
		:: atomic { stale[i] && key[i] -> key[i] = false }
#endif
		/* renew() finds the lease gone: a new lease, the key back; the
		 * next look reads what the ledger still gives it */
#ifndef MUT_REJOIN_CACHED_SHARE
		:: atomic { !key[i] && closed[i] -> key[i] = true; stale[i] = false; closed[i] = false }
#else
		:: atomic { !key[i] && closed[i] -> key[i] = true; stale[i] = false; closed[i] = false;
			    lc[i] = cached[i] }        /* mutation: the share it had */
#endif
		/* etcd applies (or, its compare failing, drops) the shrink in flight */
		:: atomic { prev[i] != 0 ->
			if :: rev + 1 == prev[i] -> sh[i] = pshare[i]; rev++ :: else -> skip fi;
			prev[i] = 0 }
		/* the look's raise to what the ledger gives, capped by a shrink
		 * in flight while its compare can still hold */
#ifndef MUT_PENDING_IGNORED
		:: atomic { key[i] && !stale[i] &&
			    lc[i] < ((prev[i] != 0 && rev + 1 == prev[i] && pshare[i] < sh[i]) -> pshare[i] : sh[i]) ->
			    lc[i] = ((prev[i] != 0 && rev + 1 == prev[i] && pshare[i] < sh[i]) -> pshare[i] : sh[i]) }
#else
		:: atomic { key[i] && !stale[i] && lc[i] < sh[i] -> lc[i] = sh[i] }
#endif
		/* reclaim the other's share: its key compared absent at commit */
		:: key[i] && !stale[i] && !key[other] && sh[other] > 0 ->
			atomic { r = rev; k = key[other] };
			atomic {
#ifndef MUT_RECLAIM_STALE_KEY
				if :: rev == r && !key[other] -> sh[other] = 0; rev++ :: else -> skip fi
#else
				if :: rev == r && !k -> sh[other] = 0; rev++ :: else -> skip fi
#endif
			};
#ifdef MUT_RECLAIM_EDITS_VIEW
			/* the lost reclaim's edit (the other's share gone) stays in the
			 * view, and the look grows from it: a CAS on the same rev */
			atomic {
				if
				:: rev == r && sh[other] > 0 && CEIL > sh[i] ->
					sh[i] = CEIL; sh[other] = 0; rev++
				:: else -> skip
				fi
			};
			atomic { if :: !stale[i] -> lc[i] = sh[i] :: else -> skip fi }
#endif
			skip
		fi
	:: else -> break
	od
}

init
{
	atomic {
		key[0] = true; key[1] = true;
		run Member(0); run Member(1); run Clients(0); run Clients(1)
	}
}
