#!/bin/sh
# SPDX-License-Identifier: MIT
# pgproxy --fleet: three proxies in front of one PostgreSQL (tests/pglib.sh)
# share one ceiling of server connections through a real 3-node etcd
# (tests/etcdlib.sh).  Pinned down:
#   - server connections of the three together never above the ceiling
#     (pg_stat_activity sampled every 2 ms through the whole test), idle
#     ones included, while load is skewed, moves, and a proxy dies;
#   - shares follow the load: the busy proxy gets most of the ceiling, and
#     when the load moves to an idle proxy, the old one closes its idle
#     connections and the new one gets the room;
#   - SHOW FLEET lists every member with its share, held and queued;
#   - a proxy killed with -9: its share comes back after its lease;
#   - RESIZE on one proxy is the fleet's ceiling; SIGTERM leaves cleanly.
set -eu
name=pgproxy_fleet
. "$(dirname "$0")/pglib.sh"
pg_cleanup() {
	for p in $proxy_pids; do kill -9 "$p" 2>/dev/null || true; done
	cleanup_hooks=
	cleanup
}
proxy_pids=
cleanup_hooks=pg_cleanup
. "$(dirname "$0")/etcdlib.sh"

ceiling=6
lease=2s
# start_member NAME: a proxy of the fleet; its port in port_NAME
start_member() {
	"$proxy" --listen 127.0.0.1:0 --server "host=$data port=5432" --threads 2 \
		--auth-type trust --admin-users pgproxy \
		--wait-timeout 30s \
		--fleet "endpoints=$(etcd_endpoints) key=/pgproxy-test ceiling=$ceiling lease=$lease member=$1" \
		2>"$data/proxy-$1.log" &
	eval "pid_$1=$!"
	proxy_pids="$proxy_pids $!"
	within 20 grep -q 'listening on' "$data/proxy-$1.log" || fail "proxy $1 did not start"
	eval "port_$1=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$data/proxy-$1.log")"
}
port_of() { eval "echo \$port_$1"; }
admin_at() { psql -X -h 127.0.0.1 -p "$(port_of "$1")" -Atc "$2" pgproxy; }
# SHOW FLEET on proxy $1: database|member|self|share|held|queued
fleet_rows() { admin_at "$1" 'SHOW FLEET' | awk -F'|' '$1 == "postgres"'; }
share_of() { fleet_rows "$1" | awk -F'|' '$3 == "yes" { print $4 }'; }
shares() { for m in A B C; do printf '%s:%s ' "$m" "$(share_of "$m" 2>/dev/null)"; done; }
bench_at() { # member clients seconds log [pgbench script]: -S by default
	set -- "$@" -S
	[ "$5" = -S ] || set -- "$1" "$2" "$3" "$4" -f "$5"
	pgbench -n -c "$2" -j 2 -T "$3" "$5" ${6:+"$6"} -h 127.0.0.1 -p "$(port_of "$1")" postgres >"$data/$4" 2>&1
}
bench_ok() {
	grep -q '^number of failed transactions: 0 ' "$data/$1" || { cat "$data/$1"; fail "pgbench $1: failed"; }
}

etcd_start
start_cluster
create_sampler
PGAPPNAME=direct pgbench -i -s 1 -h "$data" -p 5432 postgres >"$data/init.log" 2>&1 ||
	{ cat "$data/init.log"; fail "pgbench -i"; }
start_member A
start_member B
start_member C
# the first login to a database joins its fleet
for m in A B C; do via_m=$(port_of $m); psql -X -h 127.0.0.1 -p "$via_m" -Atc 'select 1' postgres >/dev/null; done
within 10 sh -c "[ \$(psql -X -h 127.0.0.1 -p $port_A -Atc 'SHOW FLEET' pgproxy | grep -c '^postgres|') -eq 3 ]" ||
	fail "SHOW FLEET on A: $(fleet_rows A)"
ok "three members: $(fleet_rows A | tr '\n' ' ')"
# a database name with '/' would name another fleet's keys in etcd
out=$(psql -X -h 127.0.0.1 -p "$port_A" -Atc 'select 1' 'postgres/members' 2>&1 || true)
echo "$out" | grep -q "has no fleet" || fail "a database named postgres/members: $out"
ok "a database name with '/' is refused: $(echo "$out" | grep -o 'pgproxy: database.*')"

sample_start
# ---- skewed: A 12 clients, B 2, C none; each transaction holds its
# connection a few ms, as an application's do
cat >"$data/hold.sql" <<'EOF'
\set aid random(1, 100000)
BEGIN;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
SELECT pg_sleep(0.004);
END;
EOF
bench_at A 12 6 a.log "$data/hold.sql" &
a=$!
bench_at B 2 6 b.log "$data/hold.sql" &
b=$!
within 5 sh -c "[ \"\$(psql -X -h 127.0.0.1 -p $port_A -Atc 'SHOW FLEET' pgproxy | awk -F'|' '\$3 == \"yes\" { print \$4 }')\" -ge 4 ]" ||
	fail "A's share with 12 clients against B's 2: $(shares)"
seen="$(shares)"
queued=$(fleet_rows B | awk -F'|' '$2 == "A" { print $6 }')
wait $a
wait $b
bench_ok a.log
bench_ok b.log
# B's transactions wait for connections while A queues: they are demand
# in B's band, so B keeps a share in proportion (about 1 of 6), and each
# of its clients runs at a rate near A's; counted as held passes, they
# ranked below A's queue and B got no share until A's load ended
tps_of() { sed -n 's/^tps = \([0-9.]*\) (without initial.*/\1/p' "$data/$1"; }
tps_a=$(tps_of a.log) tps_b=$(tps_of b.log)
[ -n "$tps_a" ] && [ -n "$tps_b" ] || fail "no tps in pgbench's output: $(cat "$data/a.log" "$data/b.log")"
awk -v a="$tps_a" -v b="$tps_b" 'BEGIN { exit !(b / 2 >= a / 12 / 10) }' ||
	fail "B starved while A queued: B's 2 clients $tps_b tps, A's 12 $tps_a tps (shares $seen)"
ok "A 12 clients, B 2, C 0: shares $seen; B sees A queued \"$queued\"; tps A $tps_a, B $tps_b"

# ---- the load moves to C: A's idle connections close, C gets the room
t0=$(now_ms)
bench_at C 12 5 c.log &
c=$!
within 5 sh -c "[ \"\$(psql -X -h 127.0.0.1 -p $port_C -Atc 'SHOW FLEET' pgproxy | awk -F'|' '\$3 == \"yes\" { print \$4 }')\" -ge 4 ]" ||
	fail "C's share after the load moved: $(shares)"
moved=$(($(now_ms) - t0))
wait $c
bench_ok c.log
ok "load moved to C: C's share >= 4 after $moved ms ($(shares))"

# ---- kill -9 of C under load: A gets its share back after the lease
bench_at C 12 30 c2.log &
c=$!
within 5 sh -c "[ \"\$(psql -X -h 127.0.0.1 -p $port_C -Atc 'SHOW FLEET' pgproxy | awk -F'|' '\$3 == \"yes\" { print \$4 }')\" -ge 4 ]" ||
	fail "C's share under load: $(shares)"
bench_at A 12 8 a2.log &
a=$!
within 5 sh -c "psql -X -h 127.0.0.1 -p $port_A -Atc 'SHOW FLEET' pgproxy | awk -F'|' '\$3 == \"yes\" && \$6 != \"\"' | grep -q ." ||
	fail "A's clients do not queue: $(fleet_rows A | tr '\n' ' ')"
kill -9 "$pid_C"
t0=$(now_ms)
within 10 sh -c "[ \"\$(psql -X -h 127.0.0.1 -p $port_A -Atc 'SHOW FLEET' pgproxy | awk -F'|' '\$3 == \"yes\" { print \$4 }')\" -ge 5 ]" ||
	fail "A's share after C died: $(fleet_rows A | tr '\n' ' ')"
back=$(($(now_ms) - t0))
wait $c || true
wait $a
bench_ok a2.log
sample_max
[ "$max" -ge 1 ] && [ "$max" -le "$ceiling" ] ||
	fail "$max server connections at once across the fleet, ceiling $ceiling"
ok "C killed: A's share back after $back ms (lease $lease); at most $max server connections at once (ceiling $ceiling) over the whole run"

# ---- RESIZE on A is the fleet's ceiling; SIGTERM leaves
admin_at A 'RESIZE postgres 8' >/dev/null
bench_at B 12 4 b2.log &
b=$!
within 5 sh -c "[ \"\$(psql -X -h 127.0.0.1 -p $port_B -Atc 'SHOW FLEET' pgproxy | awk -F'|' '\$3 == \"yes\" { print \$4 }')\" -ge 7 ]" ||
	fail "B's share with the ceiling at 8: $(fleet_rows B | tr '\n' ' ')"
wait $b
bench_ok b2.log
ok "RESIZE postgres 8 on A: B's share $(share_of B) of 8"
kill -TERM "$pid_A"
within 15 sh -c "! kill -0 $pid_A 2>/dev/null" || fail "A did not exit on SIGTERM"
grep -q 'pgproxy: shut down' "$data/proxy-A.log" || fail "no clean shutdown in A's log"
within 5 sh -c "[ \$(psql -X -h 127.0.0.1 -p $port_B -Atc 'SHOW FLEET' pgproxy | grep -c '^postgres|') -eq 1 ]" ||
	fail "A left, B still lists: $(fleet_rows B | tr '\n' ' ')"
ok "A shut down: B lists itself alone"
