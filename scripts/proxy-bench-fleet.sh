#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# pgproxy --fleet measured against what operators do today, on one
# throwaway cluster and a real 3-node etcd on loopback, 12 server
# connections in all:
#   (f) three pgproxies --fleet ceiling=12: one ceiling, shares by demand
#   (b) three pgbouncers, default_pool_size 4 each: 4 + 4 + 4, fixed
#
# The moving load: for SECONDS (10), instance A has 24 clients and B 4,
# C none; then the whole load moves to C (28 clients) for SECONDS more.
# Each transaction holds its connection about 4 ms (BEGIN; a SELECT by key;
# pg_sleep(0.004); END), so connections, not CPUs, bound the throughput.
# Measured: transactions per second over both phases; the most server
# connections at once across the three (pg_stat_activity sampled every
# 2 ms); for (f), how long from C's first queued client (the load has
# moved) until C's share reached 10 (SHOW FLEET, polled every 20 ms), and etcd's requests per second per member
# (etcd's own gRPC counters, all three nodes) under this load and at rest;
# and for each run the share of CPU time the hypervisor gave other guests
# (/proc/stat's steal): on a shared VM a run with some is slowed by it.
#
# Overhead: one pgproxy alone in its fleet against one without --fleet,
# both with ceiling 12, pgbench -S -c 16 for SECONDS, in the same repeat; the
# median of the pairs' ratios as well as the ratio of the medians (a noisy
# VM drifts between repeats), pgproxy's own CPU per transaction, and
# etcd's CPU during each.  Each run has a pgproxy of its own, started for
# it (a long-lived pair showed the one started first 4% slower when both
# were alike), and a control pair of two alike (a: a second run without
# --fleet) shows how far apart alike runs fall.  The three take turns at
# running first, second and third: a run's place alone moved its tps by 12%.
#
# REPEATS (3) times, configurations alternating; medians (min-max).
# Writes OUT/proxy-bench-fleet.md (OUT: docs, or results/proxy-bench with
# --quick).
#   scripts/proxy-bench-fleet.sh [--quick] [--seconds S] [--repeats R] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD

seconds=10 repeats=3 out=docs
usage() { echo "usage: scripts/proxy-bench-fleet.sh [--quick] [--seconds S] [--repeats R] [--out DIR]" >&2; exit 2; }
while [ $# -gt 0 ]; do
	case $1 in
	--quick) seconds=5 repeats=1 out=results/proxy-bench ;;
	--seconds) seconds=$2; shift ;;
	--repeats) repeats=$2; shift ;;
	--out) out=$2; shift ;;
	*) usage ;;
	esac
	shift
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

. scripts/proxy-bench-lib.sh
name=proxy-bench-fleet
cleanup_hooks=cleanup # etcdlib.sh's exit trap runs the cluster's cleanup too
. tests/etcdlib.sh
etcd_start
if "$proxy" --fleet key=/x 2>&1 | grep -q 'built without'; then
	echo "proxy-bench: pgproxy was built without libturnstile-fleet (libcurl, json-c)" >&2
	exit 1
fi

sampler_install
cat >"$work/hold.sql" <<'EOF'
\set aid random(1, 1000000)
BEGIN;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
SELECT pg_sleep(0.004);
END;
EOF

# every configuration its own user: the sampler counts its connections only
printf '"%s" ""\n' bench bench_f bench_b >"$work/users.txt"
for k in f b s; do
	psql -X -q -h "$work" -c "create role bench_$k login; grant select on pgbench_accounts, pgbench_branches to bench_$k" postgres
done
declare -A port
for m in A B C; do
	port[b$m]=$(free_port)
	cat >"$work/b$m.ini" <<EOF
[databases]
* = host=$work port=5432
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port[b$m]}
unix_socket_dir =
auth_type = trust
auth_file = $work/users.txt
pool_mode = transaction
default_pool_size = 4
max_client_conn = 500
logfile = $work/b$m.log
pidfile = $work/b$m.pid
EOF
done
[ "$(id -u)" -ne 0 ] || chown postgres "$work"/b?.ini "$work/users.txt"
for m in A B C; do as_owner pgbouncer -d "$work/b$m.ini"; done

start_pgproxy() { # name args...: sets port[name]
	local name=$1
	shift
	"$proxy" --listen 127.0.0.1:0 --server "host=$work port=5432" --auth-type trust \
		--admin-users bench "$@" 2>"$work/$name.log" &
	pids+=("$!")
	within 20 grep -q 'listening on' "$work/$name.log"
	port[$name]=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/$name.log")
}
for m in A B C; do
	start_pgproxy "f$m" --fleet "endpoints=$(etcd_endpoints) key=/bench/fleet ceiling=12 member=$m"
done
for k in fA fB fC bA bB bC; do # warm every pool (a fleet's first login joins it)
	PGUSER=bench_${k:0:1} pgbench -n -c 4 -t 20 -S -h 127.0.0.1 -p "${port[$k]}" postgres >/dev/null
done

fleet_self() { # SHOW FLEET on proxy $1: its own row (database|member|self|share|held|queued)
	psql -X -h 127.0.0.1 -p "${port[$1]}" -Atc 'SHOW FLEET' pgproxy 2>/dev/null |
		awk -F'|' '$1 == "postgres" && $3 == "yes"'
}
# etcd's gRPC requests so far, all nodes (the JSON gateway calls gRPC)
etcd_requests() {
	local total=0 n
	for c in $(etcd_endpoints | tr ',' ' '); do
		n=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1] + "/metrics", timeout=5).read().decode())' "$c" |
			awk '/^grpc_server_started_total/ { s += $NF } END { printf "%.0f\n", s }')
		total=$((total + n))
	done
	echo "$total"
}
bench() { # config instance clients log
	PGUSER=bench_$1 exec pgbench -n -c "$3" -j 2 -T "$seconds" -f "$work/hold.sql" \
		-h 127.0.0.1 -p "${port[$1$2]}" postgres >"$4" 2>&1
}

moving() { # config repeat
	local k=$1 rep=$2 d=$work/moving.$1.$2 r0 t0 t1 follow=- h0
	mkdir -p "$d"
	sample_start "bench_$k"
	h0=$(host_ticks)
	r0=$(etcd_requests)
	t0=$(now_ms)
	bench "$k" A 24 "$d/a.out" &
	local pa=$!
	bench "$k" B 4 "$d/b.out" &
	local pb=$!
	wait "$pa" "$pb"
	local tm=$(now_ms)
	bench "$k" C 28 "$d/c.out" &
	local pc=$!
	if [ "$k" = f ]; then # from C's first queued client to C's share at 10, polled
		local tq=
		while kill -0 "$pc" 2>/dev/null; do
			row=$(fleet_self fC)
			[ -n "$tq" ] || [ -z "$(echo "$row" | cut -d'|' -f6)" ] || tq=$(now_ms)
			if [ -n "$tq" ] && [ "$(echo "$row" | cut -d'|' -f4)" -ge 10 ] 2>/dev/null; then
				follow=$(($(now_ms) - tq))
				break
			fi
			sleep 0.02
		done
	fi
	wait "$pc"
	t1=$(now_ms)
	sample_max
	for f in a b c; do failed_ok "$d/$f.out"; done
	local n=$(($(txns "$d/a.out") + $(txns "$d/b.out") + $(txns "$d/c.out")))
	record moving "$k" tps "$(echo "$n $t0 $t1" | awk '{ printf "%.0f", $1 * 1000 / ($3 - $2) }')"
	record moving "$k" "max server conns" "$max"
	record moving "$k" "stolen %" "$(stolen_pct $h0)"
	if [ "$k" = f ]; then
		record moving f "share follows ms" "$follow"
		record moving f "etcd req/s/member" "$(echo "$(($(etcd_requests) - r0)) $t0 $t1" |
			awk '{ printf "%.1f", $1 * 1000 / ($3 - $2) / 3 }')"
	fi
	local phase=$(for f in a b c; do tps_of "$d/$f.out"; done | tr '\n' ' ')
	echo "proxy-bench: moving $k repeat $rep: $(grep -P "^moving\t$k\t" "$results" | tail -n "$([ "$k" = f ] && echo 5 || echo 3)" |
		cut -f3,4 | tr '\t\n' '= ')(A B C: $phase)"
}

etcd_ticks() { # CPU ticks (1/100 s) all etcd nodes have used so far
	local t=0 i
	for i in 0 1 2; do t=$((t + $(cpu_ticks "$(cat "$etcd_dir/e$i.pid")"))); done
	echo "$t"
}
overhead() { # config repeat: s --fleet alone, n and a without
	local k=$1 o=$work/overhead.$1.$2.out e0 p0 pid n
	if [ "$k" = s ]; then
		start_pgproxy "$k$2" --fleet "endpoints=$(etcd_endpoints) key=/bench/solo ceiling=12 member=solo$2"
	else
		start_pgproxy "$k$2" --pool-size 12
	fi
	pid=${pids[-1]}
	# warm: every server connection made (the member's share is the whole ceiling)
	PGUSER=bench_s pgbench -n -c 16 -t 50 -S -h 127.0.0.1 -p "${port[$k$2]}" postgres >/dev/null
	e0=$(etcd_ticks) p0=$(cpu_ticks "$pid")
	PGUSER=bench_s pgbench -n -c 16 -j 2 -T "$seconds" -S -h 127.0.0.1 -p "${port[$k$2]}" postgres >"$o" 2>&1
	n=$(txns "$o")
	record overhead "$k" "pgproxy CPU ms/1000 txns" "$(echo "$(($(cpu_ticks "$pid") - p0)) $n" |
		awk -v hz="$tck" '{ printf "%.1f", $1 * 1000 / hz * 1000 / $2 }')"
	record overhead "$k" "etcd CPU s" "$(echo "$(($(etcd_ticks) - e0))" | awk '{ printf "%.2f", $1 / 100 }')"
	kill -TERM "$pid"
	wait "$pid" || true
	failed_ok "$o"
	record overhead "$k" tps "$(tps_of "$o")"
}

at_rest() { # the three members, no load, over SECONDS
	local r0 t0
	r0=$(etcd_requests)
	t0=$(now_ms)
	sleep "$seconds" # the window measured, not a synchronisation
	record rest f "etcd req/s/member" "$(echo "$(($(etcd_requests) - r0)) $t0 $(now_ms)" |
		awk '{ printf "%.1f", $1 * 1000 / ($3 - $2) / 4 }')"
}

for r in $(seq 1 "$repeats"); do
	# each of the three runs in each place once every three repeats (where a
	# run falls moves its tps by more than the cost measured)
	if [ $((r % 2)) -eq 1 ]; then order="f b"; else order="b f"; fi
	case $((r % 3)) in 1) solo="s n a" ;; 2) solo="n a s" ;; 0) solo="a s n" ;; esac
	for k in $order; do moving "$k" "$r"; done
	record moving f/b ratio "$(grep -P "^moving\t[fb]\ttps\t" "$results" | tail -n 2 | sort |
		awk '{ t[$2] = $4 } END { printf "%.3f", t["f"] / t["b"] }')"
	for k in $solo; do overhead "$k" "$r"; done
	# s, n and a ran in the same repeat: each ratio cancels the drift between repeats
	record overhead s/n ratio "$(echo "$(tps_of "$work/overhead.s.$r.out") $(tps_of "$work/overhead.n.$r.out")" |
		awk '{ printf "%.3f", $1 / $2 }')"
	record overhead a/n ratio "$(echo "$(tps_of "$work/overhead.a.$r.out") $(tps_of "$work/overhead.n.$r.out")" |
		awk '{ printf "%.3f", $1 / $2 }')"
	at_rest
done

ratio() { echo "$1 $2" | awk '{ printf "%.2f", $1 / $2 }'; }
report=$out/proxy-bench-fleet.md
{
	echo "# pgproxy --fleet against fixed pools"
	echo
	echo "\`scripts/proxy-bench-fleet.sh$([ "$seconds" = 10 ] && [ "$repeats" = 3 ] || echo " --seconds $seconds --repeats $repeats")\`," \
		"$(date -u +%Y-%m-%d), $(nproc) vCPUs, PostgreSQL $(postgres --version | awk '{ print $3 }')," \
		"etcd $(etcd --version | awk '/etcd Version/ { print $3 }') (3 nodes on loopback); ${repeats} repeat(s)" \
		"alternating; median (min-max) over repeats."
	echo
	echo "The moving load: A 24 clients and B 4 for ${seconds} s, then all 28 on C for ${seconds} s."
	echo "A transaction holds its connection about 4 ms (a SELECT by key and \`pg_sleep(0.004)\`)."
	echo
	echo "| configuration | tps | max server connections (12 allowed) | C's share at 10, from its first queued client | etcd requests/s per member | CPU stolen by the host |"
	echo "|---|---:|---:|---:|---:|---:|"
	echo "| (f) 3 × pgproxy --fleet ceiling=12 | $(med moving f tps) | $(med moving f 'max server conns') |" \
		"$(med moving f 'share follows ms') ms | $(med moving f 'etcd req/s/member') | $(med moving f 'stolen %') % |"
	echo "| (b) 3 × pgbouncer $(pgbouncer --version | head -1 | awk '{ print $2 }'), pool 4 each | $(med moving b tps) |" \
		"$(med moving b 'max server conns') | - | - | $(med moving b 'stolen %') % |"
	echo
	echo "(f) against (b): $(ratio "$(val moving f tps)" "$(val moving b tps)")× the transactions per second" \
		"(ratio of the medians); $(med moving f/b ratio)× as the median of each repeat's pair."
	echo "At rest, the three members and the lone one: $(med rest f 'etcd req/s/member') etcd requests/s per member."
	echo
	echo "## One member alone: the cost of --fleet"
	echo
	echo "pgbench -S -c 16, ${seconds} s; ceiling 12 in both."
	echo
	echo "| configuration | tps | pgproxy CPU ms per 1000 transactions | etcd CPU s (3 nodes) during the run |"
	echo "|---|---:|---:|---:|"
	echo "| (s) pgproxy --fleet ceiling=12, alone in its fleet | $(med overhead s tps) |" \
		"$(med overhead s 'pgproxy CPU ms/1000 txns') | $(med overhead s 'etcd CPU s') |"
	echo "| (n) pgproxy --pool-size 12 | $(med overhead n tps) | $(med overhead n 'pgproxy CPU ms/1000 txns') |" \
		"$(med overhead n 'etcd CPU s') |"
	echo "| (a) pgproxy --pool-size 12 again: the control | $(med overhead a tps) |" \
		"$(med overhead a 'pgproxy CPU ms/1000 txns') | $(med overhead a 'etcd CPU s') |"
	echo
	echo "With --fleet: $(ratio "$(val overhead s tps)" "$(val overhead n tps)")× the tps without it (ratio of the medians);" \
		"$(med overhead s/n ratio)× as the median of each repeat's pair;" \
		"$(ratio "$(val overhead s 'pgproxy CPU ms/1000 txns')" "$(val overhead n 'pgproxy CPU ms/1000 txns')")× pgproxy's CPU per transaction."
	echo "The control, two alike: $(ratio "$(val overhead a tps)" "$(val overhead n tps)")× (ratio of the medians);" \
		"$(med overhead a/n ratio)× as the median of the pairs: how far apart alike runs fall on this machine."
	echo "The etcd CPU without --fleet is the three other members' at rest and raft's own."
} >"$report"
cat "$report"
echo "table: $report"
