#!/bin/sh
# SPDX-License-Identifier: MIT
# Fleet ceilings over a real 3-node etcd cluster (tests/etcdlib.sh) with
# real member processes (tests/fleet_member.c), ceiling 12, lease 2 s.
# At every admission of every member the holders across all members are
# counted against the ceiling (a shared board): 0 violations throughout.
# Pinned down, in order:
#   - ts_fleet_demand_from: callers that hold the demand's passes and queue
#     on the local turnstile are published as queued in their bands;
#   - a lone member with the whole ceiling and a queue that fills and
#     empties: at most 10 etcd requests/s, as at rest;
#   - shares follow demand: A with 24 clients, B with 4, C idle (one band:
#     in proportion, 10 and 2); then the load moves from A to C and C's
#     share follows within about a second (each member watches the
#     fleet's keys: set up past the hung endpoints, and again after etcd
#     came back);
#   - etcd traffic: requests per member per second under load and at rest
#     (at most 10 at rest);
#   - a better band gets room first: B's clients in band 0 against A's in 2;
#   - kill -9 of a member: its share comes back once its lease expires;
#   - kill -9 of the etcd leader: members go on, shares still move;
#   - a member SIGSTOPped past its lease: the others take its share; on
#     SIGCONT its clients, given work while it was stopped, admit nobody
#     on the stale share (no violation), and it rejoins;
#   - etcd gone entirely: every member admits nobody new from half a lease
#     on (fail closed); etcd back: admission resumes;
#   - ts_fleet_resize: 12 -> 16 for everyone; ts_fleet_leave hands a
#     member's share back;
#   - throughout, every member's first two endpoints are listeners that
#     accept and never answer (frozen etcd nodes): calls go on to the live
#     endpoints.
set -eu
name=fleet
. "$(dirname "$0")/etcdlib.sh"

board="$etcd_dir/board"
key=/fleet-test/db
lease_ms=2000
member_pids=""
# on a failure, each member's own words too (a join that failed says why)
stop_members() {
	for p in $member_pids; do kill -9 "$p" 2>/dev/null || true; done
	[ "$status" -eq 0 ] || for log in "$etcd_dir"/member*.log; do
		[ -s "$log" ] && { echo "--- $(basename "$log") (last lines)"; tail -n 5 "$log"; }
	done
}
cleanup_hooks=stop_members

tests/fleet_board "$board" init 12
b() { tests/fleet_board "$board" "$@"; }
start_member() { # slot threads band [idle-us]
	tests/fleet_member --board "$board" --slot "$1" --endpoints "$hung,$(etcd_endpoints)" \
		--key "$key" --ceiling 12 --lease-ms "$lease_ms" --threads "$2" --band "$3" \
		--hold-us 2000 --idle-us "${4:-0}" >>"$etcd_dir/member$1.log" 2>&1 &
	member_pids="$member_pids $!"
	eval "member$1=$!"
}
# SIGTERM: the member leaves the fleet and must exit 0 (a sanitizer's
# report at exit fails it too)
leave_member() {
	eval "pid=\$member$1"
	kill -TERM "$pid"
	st=0
	wait "$pid" || st=$?
	[ "$st" -eq 0 ] || { cat "$etcd_dir/member$1.log" >&2; fail "member $1 exited $st on SIGTERM"; }
}
share() { b get share "$1"; }
violations() { b get violations; }
check_bound() {
	v=$(violations)
	[ "$v" -eq 0 ] || fail "$v admissions above the ceiling (worst $(b get worst) holders) $1"
}
# milliseconds since the epoch
now_ms() { date +%s%3N; }

etcd_start
# every member's first two endpoints accept and never answer (frozen etcd
# nodes): each call must go on to the live ones within its time, each
# endpoint taking only its slice of it
hung="$(hung_endpoint 1),$(hung_endpoint 2)"

requests() { echo $(($(b get requests 0) + $(b get requests 1) + $(b get requests 2))); }

# ---- ts_fleet_demand_from: a caller queued on the local turnstile while
# it holds a pass of the demand's is published waiting, not held
tests/fleet_demand "$hung,$(etcd_endpoints)" /fleet-test/demand || fail "fleet_demand"

# ---- a member alone with the whole ceiling (slot 5, then it leaves), its
# queue filling and emptying all the time (24 clients holding 2 ms and
# thinking 2 ms for 12 passes, as a proxy under pgbench -c 16): no change
# of its demand can move a share, so it costs etcd what one at rest does
b set active 24 5
start_member 5 24 2 2000
wait_for '[ "$(share 5)" -eq 12 ]' 10 || fail "a lone member did not get the whole ceiling: $(b shares)"
sleep 1 # past the join's own requests (a measurement, not a wait for anything)
r0=$(b get requests 5); sleep 3; r1=$(b get requests 5)
lone_rate=$(((r1 - r0) * 10 / 3)) # per second, x10
ok "a lone member with the whole ceiling, its queue flipping: $((lone_rate / 10)).$((lone_rate % 10)) etcd requests/s"
[ "$lone_rate" -le 100 ] || fail "a lone member under load made more than 10 etcd requests/s"
check_bound "with a lone member"
b set active 0 5
leave_member 5

# ---- shares follow demand
b set active 24 0
b set active 4 1
b set active 0 2
start_member 0 24 2
start_member 1 8 2
start_member 2 24 2
wait_for '[ "$(b get members 0)" -eq 3 ] && [ "$(b get members 2)" -eq 3 ]' 20 ||
	fail "members do not see each other: $(b shares)"
# one band: in proportion to demand, 24:4 of 12 is 10 and 2
wait_for '[ "$(share 0)" -ge 9 ] && [ "$(share 1)" -ge 1 ] && [ "$(share 2)" -eq 0 ]' 10 ||
	fail "shares did not follow demand (A 24 clients, B 4, C 0): $(b shares)"
ok "demand A 24, B 4, C 0: shares $(b shares)"
for slot in 0 1 2; do # past the two endpoints that never answer
	wait_for "[ \$(b get watches $slot) -ge 1 ]" 10 || fail "member $slot never set its watch up"
done
# ts_fleet_members: each member lists all three, itself once, the shares
# within the ceiling, and sees A's callers queued beyond its share
for slot in 0 1 2; do
	wait_for "[ \$(b get listed $slot) -eq 3 ] && [ \$(b get listed_waiting $slot) -gt 0 ]" 5 ||
		fail "member $slot lists $(b get listed $slot) members, $(b get listed_waiting $slot) queued"
	[ "$(b get listed_self $slot)" -eq 1 ] && [ "$(b get listed_shares $slot)" -le 12 ] ||
		fail "member $slot: itself listed $(b get listed_self $slot) times, shares sum $(b get listed_shares $slot)"
done
ok "ts_fleet_members: 3 members in each member's list, itself once, shares sum <= 12"
check_bound "with skewed demand"

# ---- etcd traffic per member: requests over a 3 s window (a measuring
# window, not a wait for anything), under this load and then at rest
r0=$(requests); sleep 3; r1=$(requests)
busy_rate=$(((r1 - r0) * 10 / 9)) # per member per second, x10
b set active 0 0
b set active 0 1
wait_for '[ "$(b get holders)" -eq 0 ]' 10 || fail "holders never drained"
sleep 1 # let the last publishes pass before the window (a measurement, not a wait for anything)
r0=$(requests); sleep 3; r1=$(requests)
rest_rate=$(((r1 - r0) * 10 / 9))
ok "etcd requests per member per second: $((busy_rate / 10)).$((busy_rate % 10)) under load, $((rest_rate / 10)).$((rest_rate % 10)) at rest"
[ "$rest_rate" -le 100 ] || fail "more than 10 requests/s per member at rest"
b set active 24 0
b set active 4 1

t0=$(now_ms)
b set active 0 0
b set active 24 2
wait_for '[ "$(share 2)" -ge 7 ]' 10 || fail "C's share did not follow the load: $(b shares)"
moved=$(($(now_ms) - t0))
ok "load moved from A to C: C's share >= 7 after $moved ms ($(b shares))"
[ "$moved" -le 3000 ] || fail "shares took $moved ms to follow the load (target about 1 s)"
check_bound "while the load moved"

# ---- a better band first: B's clients in band 0 (a member of its own)
leave_member 1
[ "$(b get left 1)" -eq 1 ] || fail "B did not leave"
start_member 3 8 0
b set active 8 3
b set active 24 0
wait_for '[ "$(share 3)" -ge 8 ]' 10 ||
	fail "band 0 did not get its room before band 2: $(b shares)"
ok "band 0 (8 clients) against band 2 (48): its share $(share 3) ($(b shares))"
check_bound "with bands"

# ---- kill -9 of a member: its share returns after its lease
before=$(share 3)
kill -9 "$member3"
wait "$member3" 2>/dev/null || true
b dead 3 # its holders died with it
t0=$(now_ms)
wait_for '[ "$(($(share 0) + $(share 2)))" -ge 12 ]' 10 ||
	fail "the killed member's share never came back: $(b shares)"
ok "member killed holding $before: its share back after $(($(now_ms) - t0)) ms (lease $lease_ms ms)"
check_bound "after a kill"

# ---- kill -9 of the etcd leader
leader=$(etcd_leader)
[ -n "$leader" ] || fail "no etcd leader found"
etcd_kill "$leader"
b set active 0 2
b set active 24 0
t0=$(now_ms)
wait_for '[ "$(share 0)" -ge 7 ]' 15 || fail "shares stopped moving without the leader: $(b shares)"
ok "etcd leader e$leader killed: shares still move ($(($(now_ms) - t0)) ms: $(b shares))"
check_bound "without the leader"
etcd_restart "$leader"
wait_for etcd_healthy 30 || fail "etcd e$leader did not come back"

# ---- a member paused past its lease, with its clients idle: a pass held
# across the pause would be held longer than the lease (the documented
# assumption), so the pause starts with none held
# and nobody short of room, or C would give its share away before the
# pause (room goes back only to a member short of it) and hold no stale
# share: C takes the whole ceiling, then both go idle
b set active 0 0
b set active 12 2
wait_for '[ "$(share 2)" -ge 11 ]' 10 || fail "C has no share to lose: $(b shares)"
b set active 0 2
wait_for '[ "$(b get holding 2)" -eq 0 ]' 10 || fail "C still holds passes"
kill -STOP "$member2"
[ "$(share 2)" -ge 11 ] || fail "C gave its share away before the pause: $(b shares)"
wait_for '[ "$(share 0)" -ge 11 ]' 15 || fail "C's share stayed with it while paused: $(b shares)"
b set active 12 0
wait_for '[ "$(b get holding 0)" -ge 10 ]' 10 || fail "A does not hold its share: $(b shares)"
# C's clients get work while it is stopped: on SIGCONT they all run into
# its stale share at once, racing its fleet thread's first look, while A
# holds about the whole ceiling.  Its guard admits none of them until it
# has renewed (a stale admission is a violation on the board) ...
admitted_before=$(b get admitted 2)
closings_before=$(b get closings 2) # C's last sample: it was fresh then
b set active 12 2
kill -CONT "$member2"
# ... its clock fails it closed (its share is A's now) and it gets room
# back as A shrinks for it.  Closed lasts ~0.1 s on a quiet machine, less
# than this shell's polls may see under load: the member counts it.
wait_for '[ "$(b get closings 2)" -gt "$closings_before" ]' 5 ||
	fail "C never failed closed after SIGCONT: $(b shares)"
wait_for '[ "$(share 2)" -ge 3 ]' 15 || fail "C did not rejoin after SIGCONT: $(b shares)"
[ "$(b get admitted 2)" -gt "$admitted_before" ] || fail "C's clients never ran after SIGCONT"
check_bound "after a pause past the lease, C's clients racing its first look"
ok "C paused past its lease: A took its share; on SIGCONT C failed closed ($(($(b get closings 2) - closings_before))x), its clients admitted nobody on the stale share, C rejoined ($(b shares))"

# ---- etcd gone entirely: fail closed after half a lease
for i in 0 1 2; do etcd_kill $i; done
t0=$(now_ms)
wait_for '[ "$(share 0)" -eq 0 ] && [ "$(share 2)" -eq 0 ]' 5 ||
	fail "members still admit with etcd gone: $(b shares)"
closed=$(($(now_ms) - t0))
ok "etcd gone: every member failed closed after $closed ms (half the lease: $((lease_ms / 2)) ms)"
[ "$closed" -le $((lease_ms / 2 + 500)) ] || fail "failing closed took $closed ms"
wait_for '[ "$(b get holders)" -eq 0 ]' 5 || fail "passes still held with etcd gone"
a0b=$(b get admitted 0) a2b=$(b get admitted 2)
w0=$(b get watches 0) w2=$(b get watches 2)
for i in 0 1 2; do etcd_restart $i; done
wait_for etcd_healthy 30 || fail "etcd did not come back"
wait_for '[ "$(b get admitted 0)" -gt "$a0b" ] || [ "$(b get admitted 2)" -gt "$a2b" ]' 15 ||
	fail "admission did not resume with etcd back: $(b shares)"
ok "etcd back: admission resumed ($(b shares))"
wait_for '[ "$(b get watches 0)" -gt "$w0" ] && [ "$(b get watches 2)" -gt "$w2" ]' 15 ||
	fail "a watch was not set up again after etcd came back: $w0 -> $(b get watches 0), $w2 -> $(b get watches 2)"
ok "etcd back: every member's watch set up again"
check_bound "across the etcd outage"

# ---- ts_fleet_resize 12 -> 16, and leave
b set ceiling 16
b set resize_to 16
wait_for '[ "$(b get resized)" -eq 16 ]' 10 || fail "ts_fleet_resize did not succeed"
wait_for '[ "$(($(share 0) + $(share 2)))" -eq 16 ]' 10 || fail "shares did not grow to 16: $(b shares)"
ok "ts_fleet_resize 12 -> 16: $(b shares)"
leave_member 2
[ "$(b get left 2)" -eq 1 ] || fail "C did not leave"
wait_for '[ "$(share 0)" -eq 16 ]' 10 || fail "C's share did not come back on leave: $(b shares)"
ok "C left: its share handed back at once ($(b shares))"
check_bound "at the end"
leave_member 0
total=0
for i in 0 1 2 3; do total=$((total + $(b get admitted $i))); done
ok "0 admissions above the ceiling in $total"
