#!/bin/sh
# SPDX-License-Identifier: MIT
# Exhaustive check of the wake-up protocol models with spin:
#   tests/model/turnstile.pml  the word and its fast paths, lock, drain,
#                              leave, resize, close, the cancel token, free
#                              after the last return (free takes the lock,
#                              then waits while busy), the freshness guard
#   tests/model/waitlist.pml   creation slots, loads, hand-over to the oldest
#                              taker that is not loading, put, discard,
#                              close, free as the turnstile's
#   tests/model/async.pml      event-loop nodes: grant and push under the
#                              queue lock, kick and hold after it, dispatch
#                              (signalled held, rounds, a last look after
#                              the clear), ts_async_cancel (withdraw or
#                              collect, hand on), the fire, deadlines,
#                              notifier free (EBUSY from a callback)
#   tests/model/shared.pml     process-shared turnstiles (lib/shared.c):
#                              per-process words and their fast paths, the
#                              segment lock and its takeover from a dead
#                              owner, take/enqueue/grant/settle/return under
#                              it, rebuild, the sweep; one process may die
#                              between any two of its steps
# Every configuration below is searched exhaustively (no bitstate): safety
# (assertions, and invalid end states: a waiter asleep forever, a call that
# cannot finish).  Then every seeded protocol mutation must be CAUGHT (spin
# reports an error): the checks can fail.  One line per configuration and
# per mutation; exit status non-zero if a configuration has an error or a
# mutation is not caught, with the counterexample printed.
#
# Usage: tests/model/check.sh [workdir]        (scripts/test.sh: build/model)
# MODEL_ONLY=model: only that model's rows (MODEL_ONLY=shared).
# MODEL_JOBS: searches run at once (2).  MODEL_CFLAGS: for pan.c (-O0:
# gcc -O2 spends ~11 s compiling each pan.c, longer than most searches).
set -eu

here=$(cd "$(dirname "$0")" && pwd)

# kind|model|name|spin flags|what it covers
table() {
	rows | awk -F'|' -v m="${MODEL_ONLY:-}" 'm == "" || $2 == m'
}

rows() {
	cat <<'EOF'
pass|turnstile|grant3|-DNW=3 -DNR=1 -DCEIL=1 -DDLMASK=1 -DSPUR=1|3 waiters (1 with a deadline), ceiling 1, a releaser, spurious wakes
pass|turnstile|cancel|-DNW=2 -DNR=1 -DCEIL=1 -DDLMASK=1 -DCXMASK=2 -DCANCELLER=1 -DSPUR=1|grant vs deadline vs cancel: 2 waiters, a releaser, a fire
pass|turnstile|cancel-only|-DNW=3 -DNR=0 -DCEIL=0 -DDLMASK=0 -DCXMASK=7 -DCANCELLER=1|3 waiters only a fire can end: no nudge lost
pass|turnstile|close|-DNW=2 -DNR=1 -DCEIL=1 -DDLMASK=1 -DCLOSER=1 -DSPUR=1|close vs grant vs deadline, close in batches
pass|turnstile|resize|-DNW=2 -DNR=1 -DCEIL=1 -DDLMASK=2 -DRS1=0 -DRS2=2 -DSPUR=1|resize 1 -> 0 (available < 0) -> 2 (drain in batches)
pass|turnstile|resize-close|-DNW=2 -DNR=0 -DCEIL=0 -DDLMASK=0 -DRS1=2 -DCLOSER=1|a grow from 0 racing close
pass|turnstile|ceiling2|-DNW=2 -DNR=1 -DCEIL=2 -DDLMASK=1 -DRS1=1 -DSPUR=1|ceiling 2 shrunk to 1 under 2 holders, stale ceiling in fast returns
pass|turnstile|guard|-DNW=2 -DNR=1 -DCEIL=1 -DDLMASK=1 -DGUARD=1 -DSPUR=1|the freshness guard of the fleet: 2 waiters (1 with a deadline), a releaser, the instant of the guard passing, its move and its lift at any moment
pass|turnstile|guard-ceiling2|-DNW=2 -DNR=1 -DCEIL=2 -DDLMASK=1 -DGUARD=1|the guard with a pass free at the start: takes under the lock racing the instant
pass|turnstile|guard-close|-DNW=2 -DNR=1 -DCEIL=1 -DDLMASK=1 -DGUARD=1 -DCLOSER=1|the guard vs close (WAITERS kept while guarded) vs a deadline
pass|waitlist|cap1|-DNT=3 -DMAXI=1 -DNPUT=1 -DDLMASK=1 -DSPUR=1|3 takers, max_items 1 (in use), a put
pass|waitlist|slots|-DNT=3 -DMAXI=2 -DNPUT=1 -DDLMASK=1 -DFAILMASK=2 -DDISCMASK=4|max_items 2: loads, a failing load, a discard, slots passed on
pass|waitlist|unlimited|-DNT=3 -DMAXI=3 -DNPUT=0 -DDLMASK=4 -DFAILMASK=1 -DSPUR=1|no cap: 3 loaders, a failing load (issue 11 section 3)
pass|waitlist|cancel|-DNT=2 -DMAXI=1 -DNPUT=1 -DDLMASK=2 -DCXMASK=1 -DCANCELLER=1 -DSPUR=1|put vs deadline vs cancel
pass|waitlist|close|-DNT=2 -DMAXI=2 -DNPUT=1 -DDLMASK=1 -DFAILMASK=2 -DCLOSER=1|close vs a load in flight, a put, a deadline
pass|waitlist|close-batches|-DNT=3 -DMAXI=1 -DNPUT=0 -DDLMASK=4 -DFAILMASK=1 -DCLOSER=1|2 takers asleep: close in batches, vs a load that may fail, a deadline
pass|async|turn-grant|-DTAKE=0 -DNA=2 -DCEIL=1 -DNG=1 -DDLMASK=1 -DLCXMASK=2 -DSPURD=1 -DFREECB=1 -DCLOSER=1|2 async turns: grant vs deadline vs close vs the loop cancel (maybe in a callback), the last callback tries to free the notifier
pass|async|turn-fire|-DTAKE=0 -DNA=3 -DCEIL=1 -DNG=1 -DCXMASK=3 -DCANCELLER=1 -DLCXMASK=4|3 async turns: grant vs a fire that withdraws two vs the loop cancel
pass|async|turn-granters|-DTAKE=0 -DNA=3 -DCEIL=2 -DNG=2 -DLCXMASK=1 -DSPURD=1 -DROUNDS=1|two releasers complete nodes of one notifier at once, kicks and holds overlap, one dispatch round (nodes left ready for the next call)
pass|async|cancel-only|-DTAKE=0 -DNA=2 -DCEIL=0 -DNG=0 -DCXMASK=3 -DCANCELLER=1|2 async turns only a fire can end: begin looks at the flag after watching
pass|async|take|-DTAKE=1 -DNA=3 -DMAXI=2 -DNG=2 -DGDISC=1 -DDLMASK=1 -DLCXMASK=2 -DCBDISC=5|3 async takes, max_items 2: put vs deadline vs cancel, items handed back, discards pass slots as TS_CREATE, a cancelled TS_CREATE gives it back
pass|async|take-close|-DTAKE=1 -DNA=2 -DMAXI=1 -DNG=1 -DCLOSER=1 -DCXMASK=1 -DCANCELLER=1 -DLCXMASK=2|async takes: close vs put vs fire vs the loop cancel
pass|shared|two|-DNA=2 -DCEIL=1 -DIT0=3 -DIT1=2 -DDLMASK=2|2 processes, ceiling 1, 3 and 2 rounds (fast paths, caches, drains), a deadline; either dies anywhere (in the lock, mid-settle, granted, holding)
pass|shared|three|-DNA=3 -DCEIL=1 -DIT0=1 -DIT1=1 -DIT2=1|3 processes, ceiling 1: two queued, takeovers racing, sweeps; any one dies anywhere
pass|shared|ceiling2|-DNA=3 -DCEIL=2 -DIT0=1 -DIT1=1 -DIT2=1 -DDLMASK=4|3 processes, ceiling 2, a deadline; any one dies anywhere
pass|shared|reuse|-DNA=3 -DCEIL=1 -DNEWCOMER=1 -DVICTIMS=2 -DIT0=1 -DIT1=1 -DIT2=1|a process attaches into the slot of one that died holding the lock, while a waiter that saw the dead owner is about to take over: the generation of the lock word makes its stale CAS fail
catch|turnstile|MUT_CANCEL_BEFORE_SLEEP|-DNW=3 -DNR=0 -DCEIL=0 -DDLMASK=0 -DCXMASK=7 -DCANCELLER=1|park checks the cancel flag before announcing SLEEPING
catch|turnstile|MUT_CLEAR_OUTSIDE_LOCK|-DNW=3 -DNR=1 -DCEIL=1 -DDLMASK=1|leave clears WAITERS after unlocking
catch|turnstile|MUT_GRANT_AFTER_UNLOCK|-DNW=3 -DNR=1 -DCEIL=1 -DDLMASK=1|drain unlinks under the lock, publishes GRANTED after unlocking
catch|turnstile|MUT_WAKE_LOST|-DNW=3 -DNR=1 -DCEIL=1 -DDLMASK=1|a grant to a SLEEPING waiter owes no wake
catch|turnstile|MUT_FAST_TAKE_BARGES|-DNW=3 -DNR=1 -DCEIL=1 -DDLMASK=1|the fast take ignores WAITERS
catch|turnstile|MUT_FREE_WITHOUT_LOCK|-DNW=3 -DNR=1 -DCEIL=1 -DDLMASK=1|ts_turnstile_free does not pass through the lock
catch|turnstile|MUT_RETURN_DRAINS_CLOSED|-DNW=2 -DNR=1 -DCEIL=1 -DDLMASK=1 -DCLOSER=1|a slow return between close batches grants a waiter the close has not reached
catch|turnstile|MUT_FREE_WITHOUT_BUSY_WAIT|-DNW=2 -DNR=1 -DCEIL=1 -DDLMASK=1 -DCLOSER=1|ts_turnstile_free does not wait while busy (close in batches)
catch|turnstile|MUT_GRANT_EXPIRED|-DNW=3 -DNR=1 -DCEIL=1 -DDLMASK=1|drain grants a head whose deadline has passed (a deadline must mean never after it)
catch|turnstile|MUT_BUSY_AFTER_UNLOCK|-DNW=2 -DNR=1 -DCEIL=1 -DDLMASK=2 -DRS1=0 -DRS2=2|busy marked after the unlock that opens a gap (drain in batches)
catch|turnstile|MUT_GUARD_TAKE_STALE|-DNW=2 -DNR=1 -DCEIL=1 -DDLMASK=1 -DGUARD=1|enqueue takes a free pass without reading the clock of the guard
catch|turnstile|MUT_GUARD_DRAIN_STALE|-DNW=2 -DNR=1 -DCEIL=1 -DDLMASK=1 -DGUARD=1|drain grants without reading the clock of the guard
catch|turnstile|MUT_GUARD_CLEARS_WAITERS|-DNW=2 -DNR=1 -DCEIL=1 -DDLMASK=1 -DGUARD=1|a waiter leaving clears WAITERS while guarded: the lock-free take opens
catch|turnstile|MUT_GUARD_NO_DRAIN|-DNW=2 -DNR=1 -DCEIL=1 -DDLMASK=1 -DGUARD=1|moving or lifting the guard drains nothing: a waiter queued while stale sleeps on beside a free pass
catch|waitlist|MUT_GIVE_EXPIRED|-DNT=3 -DMAXI=1 -DNPUT=1 -DDLMASK=1 -DSPUR=1|put and a freed slot go to the oldest idle taker even past its deadline
catch|waitlist|MUT_LOADER_GETS_ITEM|-DNT=3 -DMAXI=3 -DNPUT=0 -DDLMASK=4 -DFAILMASK=1|put and a finished load hand the item to the head, loading or not
catch|waitlist|MUT_FAILED_LOAD_NO_PASS|-DNT=3 -DMAXI=2 -DNPUT=1 -DDLMASK=1 -DFAILMASK=2 -DDISCMASK=4|a failed load frees its slot without passing it on
catch|waitlist|MUT_FREE_WITHOUT_BUSY_WAIT|-DNT=3 -DMAXI=1 -DNPUT=0 -DDLMASK=4 -DFAILMASK=1 -DCLOSER=1|ts_waitlist_free does not wait while busy (close in batches)
catch|async|MUT_SIGNAL_BEFORE_PUSH|-DTAKE=0 -DNA=2 -DCEIL=0 -DNG=0 -DCXMASK=3 -DCANCELLER=1|the exchange on signalled before the push
catch|async|MUT_PUSH_AFTER_UNLOCK|-DTAKE=0 -DNA=2 -DCEIL=1 -DNG=1 -DDLMASK=1 -DLCXMASK=2|the push and the exchange after the queue unlock
catch|async|MUT_CANCEL_NO_COLLECT|-DTAKE=0 -DNA=2 -DCEIL=1 -DNG=1 -DLCXMASK=1|ts_async_cancel finding a final state does not collect the stack
catch|async|MUT_RELEASE_BEFORE_KICK|-DTAKE=0 -DNA=2 -DCEIL=1 -DNG=1 -DSPURD=1|the granter releases its hold before writing the eventfd
catch|async|MUT_BEGIN_NO_RECHECK|-DTAKE=0 -DNA=2 -DCEIL=0 -DNG=0 -DCXMASK=3 -DCANCELLER=1|begin does not look at the fired flag after watching the token
catch|async|MUT_FREE_IN_CALLBACK|-DTAKE=0 -DNA=2 -DCEIL=1 -DNG=1 -DFREECB=1|ts_notifier_free without the dispatching check: the last callback frees the notifier while dispatch still uses it
catch|async|MUT_END_NO_LOOK|-DTAKE=0 -DNA=2 -DCEIL=1 -DNG=1 -DDLMASK=1|after the final clear dispatch does not look at the stack or the ready list (a push that found signalled held at 1 is lost)
catch|async|MUT_LOOK_BEFORE_CLEAR|-DTAKE=0 -DNA=2 -DCEIL=1 -DNG=1 -DDLMASK=1|dispatch looks at the stack and the ready list, then clears signalled (a push in between is lost)
catch|async|MUT_END_STACK_ONLY|-DTAKE=0 -DNA=3 -DCEIL=0 -DNG=0 -DCXMASK=7 -DCANCELLER=1 -DLCXMASK=2|the last look skips the ready list (nodes a callback cancel collected after the round budget was set)
catch|async|MUT_OLD_DISPATCH|-DTAKE=0 -DNA=2 -DCEIL=1 -DNG=1 -DDLMASK=1|the dispatch before cc02589: clear signalled, drain the eventfd, one round, write only if still ready
pass|fleet|two|-DNM=2 -DCEIL=2 -DROUNDS=4|2 members, ceiling 2: grow, shrink (its outcome maybe unknown, applied later), admit, return, cut off, fail closed, expire, rejoin, reclaim in any interleaving
pass|fleet|ceiling1|-DNM=2 -DCEIL=1 -DROUNDS=6|ceiling 1, longer runs: one pass moving between two members through the ledger
catch|shared|MUT_REBUILD_TRUSTS_AVAIL|-DNA=2 -DCEIL=1|rebuild adds the records of a dead process back to the stored avail instead of recomputing it (a death between avail and the write of a record)
catch|shared|MUT_FAST_RETURN_IGNORES_DRAINED|-DNA=2 -DCEIL=1|the fast return ignores DRAINED: a pass parked in a cache while a waiter sleeps forever
catch|shared|MUT_FIRST_ENQUEUE_NO_DRAIN|-DNA=2 -DCEIL=1|the first enqueue does not collect and drain the caches (barging, a pass stuck in a cache)
catch|shared|MUT_PUBLISH_BEFORE_DRAIN|-DNA=2 -DCEIL=1|the first waiter is published (queued, in the heap) before the drain: a process not yet drained returns its pass to its own cache and takes it back while the waiter is seen queued (lib/shared.c before this check)
catch|shared|MUT_SETTLE_WITHOUT_LOCK|-DNA=3 -DCEIL=1 -DIT0=1 -DIT1=1 -DIT2=1|a granted waiter moves its pass into held and frees its slot without the lock: the rebuild of a sweep counts the pass twice, a waiter sleeps forever
catch|shared|MUT_REBUILD_KEEPS_DEAD_GRANTED|-DNA=2 -DCEIL=1|rebuild counts the GRANTED slot of a dead process as live and keeps it (the pass is lost)
catch|shared|MUT_UNDRAIN_WHILE_QUEUED|-DNA=2 -DCEIL=1|maybe_undrain ignores the queue: a fast return parks a pass a waiter needs
catch|shared|MUT_NO_SWEEP|-DNA=2 -DCEIL=1|the end of a slice does not look for the dead: the pass of a dead holder never comes back
catch|shared|MUT_LOCK_NO_GEN|-DNA=3 -DCEIL=1 -DNEWCOMER=1 -DVICTIMS=2 -DIT0=1 -DIT1=1 -DIT2=1|the generation of the lock word stands still: a stale takeover CAS takes the lock from a newcomer in the slot of the dead owner (lib/shared.c 75c955a)
catch|fleet|MUT_GROW_NO_CAS|-DNM=2 -DCEIL=2 -DROUNDS=4|grow writes the ledger without comparing its revision: two members grow into the same room
catch|fleet|MUT_LOCAL_FIRST|-DNM=2 -DCEIL=2 -DROUNDS=4|grow raises the local ceiling before its CAS: admissions on room the ledger never gave
catch|fleet|MUT_SHRINK_LEDGER_FIRST|-DNM=2 -DCEIL=2 -DROUNDS=4|shrink publishes the smaller share before it lowers the local ceiling: the other grows into room still admitted from
catch|fleet|MUT_RECLAIM_STALE_KEY|-DNM=2 -DCEIL=2 -DROUNDS=7|reclaim trusts the absence of the member key as it read it, not compared at commit: it takes the share of a member that rejoined meanwhile
catch|fleet|MUT_REJOIN_CACHED_SHARE|-DNM=2 -DCEIL=2 -DROUNDS=7|a member back from a lost lease admits up to the share it had before, not what the ledger gives it now (reclaimed meanwhile)
catch|fleet|MUT_NO_FAIL_CLOSED|-DNM=2 -DCEIL=2 -DROUNDS=5|a lease may expire before its member stopped admitting: its share is reclaimed while it still admits on it
catch|fleet|MUT_RECLAIM_EDITS_VIEW|-DNM=2 -DCEIL=2 -DROUNDS=7|a reclaim that lost (the member rejoined) leaves its edit in the view and the same look grows from it: the rejoined member share is deleted while it admits on it (lib/fleet.c before review)
catch|fleet|MUT_NO_GUARD|-DNM=2 -DCEIL=2 -DROUNDS=5|admission reads no clock: after a pause past the lease, a client that runs before the fleet thread fails closed admits on the stale share the other member has reclaimed
catch|fleet|MUT_PENDING_IGNORED|-DNM=2 -DCEIL=2 -DROUNDS=5|a shrink whose outcome is unknown is forgotten: the member raises its local ceiling back, then etcd applies the shrink and another member grows into the room (lib/fleet.c before review)
EOF
}

# One search: compile, run, and leave a summary line in $dir/line and
# "ok" or "bad" in $dir/status.
one() {
	IFS='|' read -r kind model name flags what <<EOF
$1
EOF
	dir=$work/$model.$name
	[ "$kind" != catch ] || flags="$flags -D$name"
	rm -rf "$dir"
	mkdir -p "$dir"
	cd "$dir"
	cp "$here/$model.pml" .
	# shellcheck disable=SC2086 # flags are words
	if ! spin -a $flags "$model.pml" >spin.out 2>&1 ||
	   ! cc ${MODEL_CFLAGS:--O0} -DSAFETY -DCOLLAPSE -w -o pan pan.c >cc.out 2>&1; then
		echo "$model $name: model does not build" >line
		echo bad >status
		return 0
	fi
	start=$(date +%s)
	./pan -m1000000 -c1 >pan.out 2>&1 || true
	secs=$(($(date +%s) - start))
	errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' pan.out)
	states=$(awk '/states, stored/ {print $1; exit}' pan.out)
	why=$(sed -n 's/^pan:1: \(.*\) (at depth.*/\1/p' pan.out | head -1)
	if grep -q 'search depth too small' pan.out; then
		errors=${errors:-0}+depth
	fi
	if [ "$kind" = pass ]; then
		if [ "$errors" = 0 ]; then
			echo "$model $name: 0 errors, $states states, ${secs}s -- $what" >line
			echo ok >status
		else
			echo "$model $name: ERRORS ($why), $states states -- $what" >line
			echo bad >status
		fi
	else
		if [ "$errors" != 0 ] && [ -n "$errors" ]; then
			echo "mutation $model $name: caught ($why) -- $what" >line
			echo ok >status
		else
			echo "mutation $model $name: NOT CAUGHT ($states states) -- $what" >line
			echo bad >status
		fi
	fi
	# shellcheck disable=SC2086
	[ "$kind" = catch ] || [ "$errors" = 0 ] ||
		spin -t -p $flags "$model.pml" >trail.out 2>&1 || true
}

if [ "${1:-}" = --one ]; then
	work=$2
	one "$3"
	exit 0
fi

work=${1:-$(mktemp -d)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
begin=$(date +%s)
table | xargs -P "${MODEL_JOBS:-2}" -I{} "$0" --one "$work" {}

table | while IFS='|' read -r kind model name flags what; do
	cat "$work/$model.$name/line"
done
fail=0
for d in $(table | awk -F'|' -v w="$work" '{print w "/" $2 "." $3}'); do
	if [ "$(cat "$d/status" 2>/dev/null)" != ok ]; then
		fail=1
		echo "---- $(cat "$d/line" 2>/dev/null || echo "$d: no result")"
		[ -f "$d/spin.out" ] && tail -5 "$d/spin.out"
		[ -f "$d/cc.out" ] && tail -5 "$d/cc.out"
		[ -f "$d/pan.out" ] && grep -E '^pan|errors' "$d/pan.out" | head -5
		# the counterexample, without variable dumps and control-flow noise
		[ -f "$d/trail.out" ] &&
			grep -vE '^[[:space:]]+[a-zA-Z_]+(\[[0-9]+\])? = |\[(DO|IF|\.\(goto\)|\(1\)|else|skip)\]|know|\[[ik] = ' \
				"$d/trail.out" | tail -80
	fi
done
echo "model check: $(($(date +%s) - begin))s"
exit $fail
