#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# pgproxy --processes measured beside the other ways to spread a proxy over
# two CPUs, on one throwaway cluster, at most 4 server connections in all:
#   (p) pgproxy --processes 2: one shared ceiling of 4, one queue
#   (t) pgproxy --threads 2: one process, two loops
#   (r) two pgbouncers on one port with so_reuseport, default_pool_size 2
#       each (their pools cannot be shared: 2 + 2)
# pgproxy with interactive in band 0 and batch in band 1; pgbouncer FIFO.
#
# The flood (as scripts/proxy-bench.sh's): 32 batch clients (UPDATE +
# pg_sleep(0.002)) and 4 interactive -S clients.  Measured: interactive
# p50/p99, both throughputs, and the most server connections the proxy had
# at once (pg_stat_activity, sampled every 2 ms from a direct session).
# Then (p) again with one of its workers killed -9 halfway through: the
# clients that worker had are lost (pgbench aborts them), the others go on
# with no error.
#
# Every run SECONDS long (20), REPEATS times (3), configurations alternating
# within each repeat; medians (min-max).  Writes
# OUT/proxy-bench-processes.md (OUT: docs, or results/proxy-bench with --quick).
#   scripts/proxy-bench-processes.sh [--quick] [--seconds S] [--repeats R] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD

seconds=20 repeats=3 out=docs
usage() { echo "usage: scripts/proxy-bench-processes.sh [--quick] [--seconds S] [--repeats R] [--out DIR]" >&2; exit 2; }
while [ $# -gt 0 ]; do
	case $1 in
	--quick) seconds=6 repeats=1 out=results/proxy-bench ;;
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

sampler_install

# (r) two pgbouncers, one port
rport=$(free_port)
for i in 1 2; do
	cat >"$work/r$i.ini" <<EOF
[databases]
* = host=$work port=5432
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $rport
so_reuseport = 1
unix_socket_dir =
auth_type = trust
auth_file = $work/users.txt
admin_users = bench
pool_mode = transaction
default_pool_size = 2
max_client_conn = 500
logfile = $work/r$i.log
pidfile = $work/r$i.pid
EOF
done
# every configuration its own user: the sampler counts its connections only
printf '"%s" ""\n' bench bench_p bench_t bench_r >"$work/users.txt"
for k in p t r; do
	psql -X -q -h "$work" -c "create role bench_$k login; grant select, update on pgbench_accounts to bench_$k; grant select on pgbench_branches to bench_$k" postgres
done
[ "$(id -u)" -ne 0 ] || chown postgres "$work"/r?.ini "$work/users.txt"
for i in 1 2; do as_owner pgbouncer -d "$work/r$i.ini"; done
within 10 psql -X -h 127.0.0.1 -p "$rport" -c 'SHOW VERSION' pgbouncer

start_pgproxy() { # name args...: sets port[name]
	local name=$1
	shift
	"$proxy" --listen 127.0.0.1:0 --server "host=$work port=5432" --pool-size 4 \
		--auth-type trust --admin-users bench \
		--band application_name=interactive:0 --band application_name=batch:1 --default-band 1 \
		"$@" 2>"$work/$name.log" &
	pids+=("$!")
	within 10 grep -q 'listening on' "$work/$name.log"
	port[$name]=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/$name.log")
}
declare -A port=([r]=$rport)
start_pgproxy p --processes 2
start_pgproxy t --threads 2
workers() { psql -X -h 127.0.0.1 -p "${port[p]}" -Atc 'SHOW PROCESSES' pgproxy | awk -F'|' '$2 != 0 { print $2 }'; }
two_workers() { [ "$(workers | wc -l)" -eq 2 ]; }
for k in p t r; do # warm every pool
	PGUSER=bench_$k PGAPPNAME=batch pgbench -n -c 8 -t 20 -f "$work/batch.sql" -h 127.0.0.1 -p "${port[$k]}" postgres >/dev/null
done

aborted() { grep -c 'aborted' "$1" || true; }
flood() { # scenario config repeat: with scenario "kill", a worker of (p) dies halfway
	local sc=$1 k=$2 rep=$3 dir=$work/$1.$2.$3
	mkdir -p "$dir"
	sample_start "bench_$k"
	export PGUSER=bench_$k
	(cd "$dir" && PGAPPNAME=batch exec pgbench -n -c 32 -j 2 -T $((seconds + 2)) -f "$work/batch.sql" -l \
		--log-prefix=blog -h 127.0.0.1 -p "${port[$k]}" postgres >batch.out 2>&1) &
	local bpid=$!
	sleep 1 # warm-up: the flood is in the queue before the interactive run starts
	(cd "$dir" && PGAPPNAME=interactive exec pgbench -n -c 4 -j 1 -T "$seconds" -S -l \
		--log-prefix=ilog -h 127.0.0.1 -p "${port[$k]}" postgres >inter.out 2>&1) &
	local ipid=$! st=0
	export PGUSER=bench
	if [ "$sc" = kill ]; then
		sleep $((seconds / 2)) # the kill's moment is the load pattern, not synchronisation
		kill -KILL "$(workers | head -n 1)"
	fi
	wait "$ipid" || st=$?
	wait "$bpid" || st=$?
	sample_max
	failed_ok "$dir/inter.out"
	failed_ok "$dir/batch.out"
	if [ "$sc" = kill ]; then
		record "$sc" "$k" "batch clients lost" "$(aborted "$dir/batch.out")"
		record "$sc" "$k" "interactive clients lost" "$(aborted "$dir/inter.out")"
		within 20 two_workers # the master's new worker, before the next run
	elif [ "$st" -ne 0 ]; then
		echo "proxy-bench: pgbench exited $st:" >&2
		cat "$dir/inter.out" "$dir/batch.out" >&2
		exit 1
	fi
	record_flood "$sc" "$k" "$rep" "$dir"
	record "$sc" "$k" "max server conns" "$max"
	echo "proxy-bench: $sc $k repeat $rep: $(grep -P "^$sc\t$k\t" "$results" | tail -n 5 | cut -f3,4 | tr '\t\n' '= ')"
}

for r in $(seq 1 "$repeats"); do
	if [ $((r % 2)) -eq 1 ]; then order="p t r"; else order="r t p"; fi
	for k in $order; do flood flood "$k" "$r"; done
	flood kill p "$r"
done

name_p="(p) pgproxy --processes 2, bands"
name_t="(t) pgproxy --threads 2, bands"
name_r="(r) 2 × pgbouncer $(pgbouncer --version | head -1 | awk '{ print $2 }'), so_reuseport, pool 2 + 2"
report=$out/proxy-bench-processes.md
{
	echo "# pgproxy --processes, side by side"
	echo
	echo "\`scripts/proxy-bench-processes.sh$([ "$seconds" = 20 ] && [ "$repeats" = 3 ] || echo " --seconds $seconds --repeats $repeats")\`," \
		"$(date -u +%Y-%m-%d), $(nproc) vCPUs, PostgreSQL $(postgres --version | awk '{ print $3 }');" \
		"at most 4 server connections in every configuration; each run ${seconds} s, ${repeats} repeat(s)" \
		"alternating; median (min-max) over repeats."
	echo
	echo "Interactive: 4 clients, \`-S\`.  Batch: 32 clients, UPDATE + \`pg_sleep(0.002)\` per transaction."
	echo "Server connections: the most at once, sampled every 2 ms."
	echo
	echo "| configuration | interactive p50 ms | interactive p99 ms | interactive tps | batch tps | max server connections |"
	echo "|---|---:|---:|---:|---:|---:|"
	for k in p t r; do
		n=name_$k
		echo "| ${!n} | $(med flood $k 'interactive p50 ms') | $(med flood $k 'interactive p99 ms') |" \
			"$(med flood $k 'interactive tps') | $(med flood $k 'batch tps') | $(med flood $k 'max server conns') |"
	done
	echo
	echo "## A worker killed with -9 halfway through"
	echo
	echo "(p) again; the kill lands at $((seconds / 2)) s.  pgbench aborts the clients the dead worker had;"
	echo "every other client goes on with no failed transaction (the run fails otherwise)."
	echo
	echo "| batch clients lost (of 32) | interactive clients lost (of 4) | interactive p99 ms | batch tps | max server connections |"
	echo "|---:|---:|---:|---:|---:|"
	echo "| $(med kill p 'batch clients lost') | $(med kill p 'interactive clients lost') | $(med kill p 'interactive p99 ms') |" \
		"$(med kill p 'batch tps') | $(med kill p 'max server conns') |"
} >"$report"
cat "$report"
echo "table: $report"
