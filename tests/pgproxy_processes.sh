#!/bin/sh
# SPDX-License-Identifier: MIT
# pgproxy --processes against a real PostgreSQL (tests/pglib.sh): worker
# processes on one port (SO_REUSEPORT) sharing each pool's ceiling and
# queue through process-shared turnstiles (two loop threads each).  Pinned
# down:
#   - server connections of all the workers together never above the pool
#     size (sampled every 2 ms), with clients spread over both workers;
#   - a worker killed with -9 mid-flood loses only its own clients: the
#     other worker's sessions finish with no error, the dead one's passes
#     come back (the whole ceiling runs at once afterwards) and a new
#     worker takes its place;
#   - every worker lists every pool in SHOW POOLS, the new one too;
#   - a cancel request reaches its query whichever worker accepts it;
#   - RESIZE in one worker is every worker's ceiling; SHUTDOWN stops them
#     all and the master removes the turnstiles' directory.
set -eu
name=pgproxy_processes
. "$(dirname "$0")/pglib.sh"

turnstile_dir() { sed -n 's/.*turnstiles in \(.*\)$/\1/p' "$data/proxy.log"; }
remove_dir() { d=$(turnstile_dir); [ -z "$d" ] || rm -rf "$d"; }
cleanup_hooks=remove_dir
# SHOW PROCESSES: worker|pid|clients|starts
processes() { admin 'SHOW PROCESSES'; }
live_workers() { processes | awk -F'|' '$2 != 0' | wc -l; }
pool() { admin 'SHOW POOLS' | awk -F'|' -v col="$1" '$1 == "postgres" { print $col }'; }
via_bg() { exec psql -X -h 127.0.0.1 -p "$port" "$@"; } # $! is psql itself

start_cluster
create_sampler
start_proxy --pool-size 3 --processes 2 --threads 2 --wait-timeout 30s
[ "$(live_workers)" -eq 2 ] || fail "SHOW PROCESSES: $(processes)"
ok "2 workers: $(processes | tr '\n' ' ')"

pgbench -i -s 1 -h 127.0.0.1 -p "$port" postgres >"$data/init.log" 2>&1 ||
	{ cat "$data/init.log"; fail "pgbench -i through the proxy"; }

# ---- one ceiling: 12 clients, spread by the kernel over both workers
sample_start
status=0
pgbench -c 12 -j 2 -T 5 -M extended -h 127.0.0.1 -p "$port" postgres >"$data/bench.log" 2>&1 || status=$?
sample_max
[ "$status" -eq 0 ] || { cat "$data/bench.log"; fail "pgbench exited $status"; }
grep -q '^number of failed transactions: 0 ' "$data/bench.log" ||
	{ cat "$data/bench.log"; fail "pgbench: failed transactions"; }
[ "$max" -ge 1 ] && [ "$max" -le 3 ] ||
	fail "$max server connections at once across 2 workers, pool size 3"
ok "pgbench -c 12 over 2 workers: $(grep '^tps' "$data/bench.log" | sed 's/ (.*//'), at most $max server connections (pool size 3)"

# ---- kill -9 of a worker mid-flood: 8 sessions of short transactions
i=0
while [ $i -lt 400 ]; do echo 'select pg_sleep(0.005);'; i=$((i + 1)); done >"$data/flood.sql"
sessions_running() {
	for s in 1 2 3 4 5 6 7 8; do grep -q '(1 row)' "$data/s$s.out" 2>/dev/null || return 1; done
}
# The pid of the worker with fewer clients, when both have sessions of the
# flood: 2 clients or more each (one may be this admin query's own); empty
# when the kernel put them all on one worker.
pick_victim() {
	processes | awk -F'|' '$3 >= 2 { n++; if (!v || $3 < c) { v = $2; c = $3 } } END { if (n == 2) print v }'
}
two_workers() { [ "$(live_workers)" -eq 2 ]; }
pool_at_rest() { [ "$(pool 3)$(pool 6)" = 00 ]; } # in use, waiting
sleep_query_active() {
	[ "$(direct -Atc "select count(*) from pg_stat_activity where query = 'select pg_sleep(30)' and state = 'active'" postgres)" = 1 ]
}
victim=
for attempt in 1 2 3 4 5; do
	pids=
	for s in 1 2 3 4 5 6 7 8; do
		psql -X -h 127.0.0.1 -p "$port" -v ON_ERROR_STOP=1 -f "$data/flood.sql" postgres \
			>"$data/s$s.out" 2>&1 &
		pids="$pids $!"
	done
	within 20 sessions_running || fail "the flood's sessions did not start"
	victim=$(pick_victim)
	[ -z "$victim" ] || break
	kill $pids 2>/dev/null || true
	wait $pids 2>/dev/null || true
done
[ -n "$victim" ] || fail "the kernel put every session on one worker, five times"
kill -KILL "$victim"
okays=0 lost=0
set -- $pids
for s in 1 2 3 4 5 6 7 8; do
	st=0
	wait "$1" || st=$?
	shift
	if [ "$st" -eq 0 ]; then
		okays=$((okays + 1))
		! grep -q 'ERROR\|FATAL\|error' "$data/s$s.out" || fail "session $s: $(grep -m1 -i error "$data/s$s.out")"
	else
		lost=$((lost + 1))
		grep -q 'connection to server was lost\|server closed the connection' "$data/s$s.out" ||
			fail "session $s failed for another reason: $(tail -n 2 "$data/s$s.out")"
	fi
done
[ "$okays" -ge 1 ] && [ "$lost" -ge 1 ] || fail "$okays sessions finished and $lost were lost"
within 20 grep -q "worker [01] (pid $victim) killed by signal 9" "$data/proxy.log" ||
	fail "the master did not see its worker die"
within 20 two_workers || fail "no new worker: $(processes)"
ok "kill -9 of worker $victim: $okays sessions of the other worker finished with no error, $lost lost; a new worker started"

# The new worker has served no client of postgres yet, and still lists its
# pool, as every worker does (the kernel spreads these 8 admin logins)
for attempt in 1 2 3 4 5 6 7 8; do
	[ "$(pool 2)" = 3 ] || fail "SHOW POOLS without postgres's pool (size 3): $(admin 'SHOW POOLS')"
done

# The dead worker's passes are back: with nothing else running, the whole
# ceiling (3) holds a 1 s transaction each at once, on either worker.
within 20 pool_at_rest || fail "passes or waiters left after the kill: $(admin 'SHOW POOLS')"
start=$(now_ms)
pids=
for s in 1 2 3; do
	via -Atc 'select pg_sleep(1)' postgres >/dev/null &
	pids="$pids $!"
done
wait $pids # not a bare wait: the proxy is a child too
elapsed=$(($(now_ms) - start))
[ "$elapsed" -lt 1900 ] || fail "3 one-second transactions at pool size 3 took $elapsed ms: passes lost"
ok "every pass back: 3 one-second transactions at once took $elapsed ms"

# ---- cancel: psql sends its CancelRequest on a new connection, which the
# kernel gives to either worker; six in a row all reach their query
for attempt in 1 2 3 4 5 6; do
	start=$(now_ms)
	via_bg -c 'select pg_sleep(30)' postgres >"$data/cancel.out" 2>&1 &
	q=$!
	within 20 sleep_query_active || fail "the query to cancel did not start"
	kill -INT "$q"
	st=0
	wait "$q" || st=$?
	grep -q 'canceling statement due to user request' "$data/cancel.out" ||
		fail "cancel $attempt: $(cat "$data/cancel.out")"
	[ $(($(now_ms) - start)) -lt 20000 ] || fail "cancel $attempt took too long"
done
ok "6 cancel requests reached their queries"

# ---- RESIZE in one worker: every worker's ceiling
[ "$(admin 'RESIZE postgres 2')" = RESIZE ] || fail "RESIZE"
for attempt in 1 2 3 4 5 6; do
	[ "$(pool 2)" = 2 ] || fail "a worker still says pool size $(pool 2)"
done
sample_start
status=0
pgbench -c 8 -j 2 -T 3 -S -h 127.0.0.1 -p "$port" postgres >"$data/bench.log" 2>&1 || status=$?
sample_max
[ "$status" -eq 0 ] || { cat "$data/bench.log"; fail "pgbench after RESIZE exited $status"; }
[ "$max" -le 2 ] || fail "after RESIZE postgres 2: $max server connections at once"
ok "RESIZE postgres 2 from one worker: every worker says 2; at most $max server connections"

# ---- SHUTDOWN from one worker stops them all; the directory goes
dir=$(turnstile_dir)
[ -d "$dir" ] || fail "no turnstile directory $dir"
admin 'SHUTDOWN' >/dev/null
stop_proxy none
[ "$(grep -c 'worker [01]: shut down' "$data/proxy.log")" -eq 2 ] || fail "not every worker shut down"
[ ! -e "$dir" ] || fail "$dir left behind"
ok "SHUTDOWN: both workers and the master exited 0, $dir removed"
