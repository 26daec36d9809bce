#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# examples/pgproxy measured side by side with pgbouncer, on one throwaway
# cluster (Unix socket only, fsync off), pool size 4 for every proxy:
#
#   flood     an "interactive" pgbench (PGAPPNAME=interactive, 4 clients, -S)
#             beside a "batch" pgbench (PGAPPNAME=batch, 32 clients, each
#             transaction an UPDATE plus pg_sleep(0.002) holding its
#             connection ~2 ms), through
#               (a) pgproxy, interactive in band 0, batch in band 1
#               (b) pgbouncer, pool_mode=transaction, default_pool_size=4
#               (c) pgproxy, one band for all
#             interactive latency p50/p99 (pgbench -l logs) and both
#             throughputs, batch counted over the interactive run's window;
#             then again with the interactive load held to 100/s (-R 100),
#             so that every configuration does the same interactive work
#   overhead  pgbench -S -c 16 -j 2 alone: direct, (b), (c), (a);
#             transactions/s, the proxy's CPU seconds and microseconds
#             per transaction, the machine's context switches per
#             transaction and the CPU the host stole; (c) over (b) in
#             each repeat, whose median is steadier than the ratio of
#             medians on a shared VM
#   tls       pgbench -S -c 16 -j 2 alone with sslmode=require (TLS between
#             pgbench and the proxy; the proxy to the server on its Unix
#             socket as before): (b) with client_tls_sslmode=allow and (c)
#             with --tls-cert, the same instances as the other rows; beside
#             each one's overhead row in the clear
#   users     20 users on one database, one pgbench -S client each, through
#             (c) and (u) pgbouncer with max_db_connections=4 (the same
#             ceiling for all users together): transactions/s and the
#             server connections made (pg_stat_database.sessions)
#
# Every run SECONDS long (20), REPEATS times (3), the configurations
# alternating within each repeat; the table shows the median over repeats
# with min-max.  Writes OUT/proxy-bench-results.md and
# OUT/proxy-bench-latency.png (OUT: docs, or results/proxy-bench with --quick).
#
# --baseline BIN adds (a') and (c'): the same two pgproxy configurations
# run by another pgproxy binary (an earlier version, built elsewhere), in
# the same run, alternating with the others.
#
#   scripts/proxy-bench.sh [--quick] [--seconds S] [--repeats R] [--threads N] [--out DIR] [--baseline BIN]
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD

seconds=20 repeats=3 threads=1 out=docs baseline=
usage() { echo "usage: scripts/proxy-bench.sh [--quick] [--seconds S] [--repeats R] [--threads N] [--out DIR] [--baseline BIN]" >&2; exit 2; }
while [ $# -gt 0 ]; do
	case $1 in
	--quick) seconds=5 repeats=1 out=results/proxy-bench ;;
	--seconds) seconds=$2; shift ;;
	--repeats) repeats=$2; shift ;;
	--threads) threads=$2; shift ;; # pgproxy's loop threads; pgbouncer has one
	--out) out=$2; shift ;;
	--baseline) baseline=$(realpath "$2"); shift ;;
	*) usage ;;
	esac
	shift
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

. scripts/proxy-bench-lib.sh
nusers=20
for i in $(seq -w 1 "$nusers"); do
	psql -X -q -h "$work" -c "create role user$i login; grant select on pgbench_accounts, pgbench_branches to user$i" postgres
done

# one self-signed certificate for both proxies' clients (pgbench does not
# verify it: sslmode=require)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$work/tls.key" \
	-out "$work/tls.crt" -days 2 -subj /CN=localhost >/dev/null 2>&1
chmod 600 "$work/tls.key"
[ "$(id -u)" -ne 0 ] || chown postgres "$work/tls.key" "$work/tls.crt"

# (b) pgbouncer
bport=$(free_port)
cat >"$work/pgbouncer.ini" <<EOF
[databases]
* = host=$work port=5432
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bport
unix_socket_dir =
auth_type = trust
auth_file = $work/users.txt
admin_users = bench
pool_mode = transaction
default_pool_size = 4
max_client_conn = 500
client_tls_sslmode = allow
client_tls_key_file = $work/tls.key
client_tls_cert_file = $work/tls.crt
logfile = $work/bouncer.log
pidfile = $work/bouncer.pid
EOF
echo '"bench" ""' >"$work/users.txt"
for i in $(seq -w 1 "$nusers"); do echo "\"user$i\" \"\"" >>"$work/users.txt"; done
# (u) the same pgbouncer with one ceiling for all users of a database
uport=$(free_port)
[ "$uport" != "$bport" ] || uport=$((bport + 1))
sed -e "s/^listen_port = .*/listen_port = $uport/" -e "s|bouncer\.log|ubouncer.log|" \
	-e "s|bouncer\.pid|ubouncer.pid|" -e 's/^default_pool_size = 4/default_pool_size = 4\nmax_db_connections = 4/' \
	"$work/pgbouncer.ini" >"$work/upgbouncer.ini"
[ "$(id -u)" -ne 0 ] || chown postgres "$work/pgbouncer.ini" "$work/upgbouncer.ini" "$work/users.txt"
as_owner pgbouncer -d "$work/pgbouncer.ini"
within 10 psql -X -h 127.0.0.1 -p "$bport" -c 'SHOW VERSION' pgbouncer
bouncer_pid=$(cat "$work/bouncer.pid")
as_owner pgbouncer -d "$work/upgbouncer.ini"
within 10 psql -X -h 127.0.0.1 -p "$uport" -c 'SHOW VERSION' pgbouncer
ubouncer_pid=$(cat "$work/ubouncer.pid")

# (a) and (c) pgproxy
start_pgproxy() { # name args...: sets started_port and started_pid
	local name=$1 bin=$proxy auth=(--auth-type trust) # clients on loopback, as pgbouncer's here
	shift
	[ "${name#o}" = "$name" ] || { bin=$baseline auth=(); } # older pgproxy: trust, unasked
	"$bin" --listen 127.0.0.1:0 --server "host=$work port=5432" --pool-size 4 \
		--threads "$threads" "${auth[@]}" "$@" 2>"$work/$name.log" &
	started_pid=$!
	pids+=("$started_pid")
	within 10 grep -q 'listening on' "$work/$name.log"
	started_port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/$name.log")
}
start_pgproxy a --band application_name=interactive:0 --band application_name=batch:1 --default-band 1
aport=$started_port apid=$started_pid
start_pgproxy c --default-band 0 --tls-cert "$work/tls.crt" --tls-key "$work/tls.key"
cport=$started_port cpid=$started_pid
declare -A port=([a]=$aport [b]=$bport [c]=$cport [u]=$uport [direct]=5432)
declare -A pid=([a]=$apid [b]=$bouncer_pid [c]=$cpid [u]=$ubouncer_pid)
declare -A host=([a]=127.0.0.1 [b]=127.0.0.1 [c]=127.0.0.1 [direct]=$work)
flood_set="a b c" overhead_set="b c a"
if [ -n "$baseline" ]; then
	start_pgproxy oa --band application_name=interactive:0 --band application_name=batch:1 --default-band 1
	port[oa]=$started_port pid[oa]=$started_pid host[oa]=127.0.0.1
	start_pgproxy oc --default-band 0
	port[oc]=$started_port pid[oc]=$started_pid host[oc]=127.0.0.1
	flood_set="a b c oa oc" overhead_set="b c a oc oa"
fi
# warm every pool: 4 server connections each
for k in $flood_set; do
	PGAPPNAME=batch pgbench -n -c 8 -t 20 -f "$work/batch.sql" -h 127.0.0.1 -p "${port[$k]}" postgres >/dev/null
done


flood() { # scenario config repeat [interactive pgbench args...]
	local sc=$1
	shift
	local k=$1 dir=$work/$sc.$1.$2 rep=$2
	shift 2
	mkdir -p "$dir"
	local c0
	c0=$(cpu_ticks "${pid[$k]}")
	(cd "$dir" && PGAPPNAME=batch exec pgbench -n -c 32 -j 2 -T $((seconds + 2)) -f "$work/batch.sql" -l \
		--log-prefix=blog -h 127.0.0.1 -p "${port[$k]}" postgres >batch.out 2>&1) &
	local bpid=$!
	sleep 1 # warm-up: the flood is in the queue before the interactive run starts
	(cd "$dir" && PGAPPNAME=interactive exec pgbench -n -c 4 -j 1 -T "$seconds" -S -l "$@" \
		--log-prefix=ilog -h 127.0.0.1 -p "${port[$k]}" postgres >inter.out 2>&1)
	wait "$bpid"
	local c1
	c1=$(cpu_ticks "${pid[$k]}")
	failed_ok "$dir/inter.out"
	failed_ok "$dir/batch.out"
	record_flood "$sc" "$k" "$rep" "$dir"
	record "$sc" "$k" "proxy CPU s" "$(echo "$c0 $c1" | awk -v t="$tck" '{ printf "%.2f", ($2 - $1) / t }')"
	echo "proxy-bench: $sc $k repeat $rep: $(tail -n 5 "$results" | cut -f3,4 | tr '\t\n' '= ' )"
}

overhead() { # config repeat
	local k=$1 rep=$2 f=$work/overhead.$1.$2.out c0=0 c1=0 x0 h0 n
	[ "$k" = direct ] || c0=$(cpu_ticks "${pid[$k]}")
	x0=$(switches) h0=$(host_ticks)
	PGAPPNAME=interactive pgbench -n -c 16 -j 2 -T "$seconds" -S -h "${host[$k]}" -p "${port[$k]}" postgres >"$f" 2>&1
	record overhead "$k" "switches/txn" "$(echo "$x0 $(switches) $(txns "$f")" | awk '{ printf "%.2f", $3 ? ($2 - $1) / $3 : 0 }')"
	record overhead "$k" "stolen %" "$(stolen_pct $h0)"
	[ "$k" = direct ] || c1=$(cpu_ticks "${pid[$k]}")
	failed_ok "$f"
	n=$(txns "$f")
	record overhead "$k" "tps" "$(tps_of "$f")"
	if [ "$k" != direct ]; then
		record overhead "$k" "proxy CPU s" "$(echo "$c0 $c1" | awk -v t="$tck" '{ printf "%.2f", ($2 - $1) / t }')"
		record overhead "$k" "proxy CPU us/txn" "$(echo "$c0 $c1 $n" | awk -v t="$tck" '{ printf "%.1f", ($2 - $1) / t * 1e6 / $3 }')"
	fi
	# (c) beside (b) in the same repeat: the machine drifts between repeats
	[ "$k" != c ] || [ -z "${otps[b.$rep]:-}" ] || record overhead c "tps / (b)'s" "$(echo "$(tps_of "$f") ${otps[b.$rep]}" | awk '{ printf "%.3f", $1 / $2 }')"
	[ "$k" != b ] || [ -z "${otps[c.$rep]:-}" ] || record overhead c "tps / (b)'s" "$(echo "${otps[c.$rep]} $(tps_of "$f")" | awk '{ printf "%.3f", $1 / $2 }')"
	otps[$k.$rep]=$(tps_of "$f")
	echo "proxy-bench: overhead $k repeat $rep: $(tps_of "$f") tps"
}
declare -A otps

for r in $(seq 1 "$repeats"); do
	# alternate the order from one repeat to the next
	if [ $((r % 2)) -eq 1 ]; then order=$flood_set; else order=$(echo $flood_set | tr ' ' '\n' | tac | tr '\n' ' '); fi
	for k in $order; do flood flood "$k" "$r"; done
	for k in $order; do flood flood-R100 "$k" "$r" -R 100; done
done
tls() { # config repeat: the overhead run, over TLS
	local k=$1 f=$work/tls.$1.$2.out c0 c1
	c0=$(cpu_ticks "${pid[$k]}")
	PGSSLMODE=require PGAPPNAME=interactive pgbench -n -c 16 -j 2 -T "$seconds" -S -h "${host[$k]}" \
		-p "${port[$k]}" postgres >"$f" 2>&1
	c1=$(cpu_ticks "${pid[$k]}")
	failed_ok "$f"
	record tls "$k" "tps" "$(tps_of "$f")"
	record tls "$k" "proxy CPU s" "$(echo "$c0 $c1" | awk -v t="$tck" '{ printf "%.2f", ($2 - $1) / t }')"
	echo "proxy-bench: tls $k repeat $2: $(tps_of "$f") tps"
}
sessions() { psql -X -Atc 'select sum(sessions) from pg_stat_database' -h "$work" postgres; }
users() { # config repeat: every user's pgbench at once
	local k=$1 rep=$2 i s0 s1 tps=0
	s0=$(sessions)
	for i in $(seq -w 1 "$nusers"); do
		PGUSER=user$i pgbench -n -c 1 -T "$seconds" -S -h 127.0.0.1 -p "${port[$k]}" postgres \
			>"$work/users.$k.$rep.$i" 2>&1 &
	done
	wait $(jobs -p | tail -n "$nusers") # the pgbench runs, started last
	s1=$(sessions)
	for i in $(seq -w 1 "$nusers"); do
		failed_ok "$work/users.$k.$rep.$i"
		tps=$(echo "$tps $(tps_of "$work/users.$k.$rep.$i")" | awk '{ print $1 + $2 }')
	done
	record users "$k" "tps" "$tps"
	record users "$k" "connections made" "$((s1 - s0 - 2))"
	echo "proxy-bench: users $k repeat $rep: $tps tps, $((s1 - s0 - 2)) server connections made"
}

for r in $(seq 1 "$repeats"); do
	if [ $((r % 2)) -eq 1 ]; then order="direct $overhead_set"; else order="$(echo $overhead_set | tr ' ' '\n' | tac | tr '\n' ' ') direct"; fi
	for k in $order; do overhead "$k" "$r"; done
done
for r in $(seq 1 "$repeats"); do
	if [ $((r % 2)) -eq 1 ]; then order="c b"; else order="b c"; fi
	for k in $order; do tls "$k" "$r"; done
done
for r in $(seq 1 "$repeats"); do
	if [ $((r % 2)) -eq 1 ]; then order="c u"; else order="u c"; fi
	for k in $order; do users "$k" "$r"; done
done

name_a="(a) pgproxy, interactive band 0, batch band 1"
name_b="(b) pgbouncer $(pgbouncer --version | head -1 | awk '{ print $2 }'), transaction pooling"
name_c="(c) pgproxy, one band"
name_oa="(a') as (a), the baseline binary"
name_oc="(c') as (c), the baseline binary"
report=$out/proxy-bench-results.md
{
	echo "# pgproxy and pgbouncer, side by side"
	echo
	echo "\`scripts/proxy-bench.sh$([ "$seconds" = 20 ] && [ "$repeats" = 3 ] || echo " --seconds $seconds --repeats $repeats")$([ "$threads" = 1 ] || echo " --threads $threads")\`," \
		"$(date -u +%Y-%m-%d), $(nproc) vCPUs, PostgreSQL $(postgres --version | awk '{ print $3 }')," \
		"pool size 4 in every proxy, pgproxy with $threads loop thread(s);" \
		"each run ${seconds} s, ${repeats} repeat(s) alternating; median (min-max) over repeats."
	[ -z "$baseline" ] || { echo; echo "Baseline binary: \`$baseline\`."; }
	echo
	echo "## Priority under a flood"
	echo
	echo "Interactive: 4 clients, \`-S\`.  Batch: 32 clients, UPDATE + \`pg_sleep(0.002)\` per transaction."
	echo
	echo "| configuration | interactive p50 ms | interactive p99 ms | interactive tps | batch tps | proxy CPU s |"
	echo "|---|---:|---:|---:|---:|---:|"
	for k in $flood_set; do
		n=name_$k
		echo "| ${!n} | $(med flood $k 'interactive p50 ms') | $(med flood $k 'interactive p99 ms') |" \
			"$(med flood $k 'interactive tps') | $(med flood $k 'batch tps') | $(med flood $k 'proxy CPU s') |"
	done
	echo
	echo "The same flood with the interactive load held to 100 transactions/s (\`pgbench -R 100\`, less than"
	echo "pgbouncer's FIFO can serve it), so that every configuration does the same interactive work"
	echo "(latency counts from each transaction's scheduled start):"
	echo
	echo "| configuration | interactive p50 ms | interactive p99 ms | interactive tps | batch tps | proxy CPU s |"
	echo "|---|---:|---:|---:|---:|---:|"
	for k in $flood_set; do
		n=name_$k
		echo "| ${!n} | $(med flood-R100 $k 'interactive p50 ms') | $(med flood-R100 $k 'interactive p99 ms') |" \
			"$(med flood-R100 $k 'interactive tps') | $(med flood-R100 $k 'batch tps') | $(med flood-R100 $k 'proxy CPU s') |"
	done
	echo
	echo "## Overhead"
	echo
	echo "\`pgbench -S -c 16 -j 2\` alone."
	echo
	echo "| configuration | tps | proxy CPU s | proxy CPU µs per transaction | context switches per transaction (machine) | CPU stolen by the host, % |"
	echo "|---|---:|---:|---:|---:|---:|"
	echo "| direct (Unix socket) | $(med overhead direct tps) | | | $(med overhead direct switches/txn) | $(med overhead direct 'stolen %') |"
	for k in $overhead_set; do
		n=name_$k
		echo "| ${!n} | $(med overhead $k tps) | $(med overhead $k 'proxy CPU s') | $(med overhead $k 'proxy CPU us/txn') |" \
			"$(med overhead $k switches/txn) | $(med overhead $k 'stolen %') |"
	done
	echo
	echo "(c)'s tps over (b)'s, each repeat's pair: $(med overhead c "tps / (b)'s")."
	echo
	echo "## TLS"
	echo
	echo "\`PGSSLMODE=require pgbench -S -c 16 -j 2\` alone: TLS from pgbench to the proxy (a self-signed"
	echo "ECDSA P-256 certificate), the proxy to the server on its Unix socket."
	echo
	echo "| configuration | tps in the clear | tps over TLS | TLS / clear | proxy CPU s over TLS |"
	echo "|---|---:|---:|---:|---:|"
	for k in c b; do
		n=name_$k
		echo "| ${!n} | $(med overhead $k tps) | $(med tls $k tps) |" \
			"$(echo "$(val tls $k tps) $(val overhead $k tps)" | awk '{ printf "%.3f", $1 / $2 }') | $(med tls $k 'proxy CPU s') |"
	done
	echo
	echo "## $nusers users on one database"
	echo
	echo "One \`pgbench -S -c 1\` per user, all at once; every proxy holds at most 4 server connections"
	echo "to the database, all users together (pgbouncer: \`max_db_connections = 4\`)."
	echo
	echo "| configuration | tps (all users) | server connections made |"
	echo "|---|---:|---:|"
	echo "| $name_c | $(med users c tps) | $(med users c 'connections made') |"
	echo "| (u) pgbouncer, max_db_connections=4 | $(med users u tps) | $(med users u 'connections made') |"
	echo
	echo "## Targets"
	echo
	p99a=$(val flood a 'interactive p99 ms') p99b=$(val flood b 'interactive p99 ms')
	ba=$(val flood a 'batch tps') bb=$(val flood b 'batch tps')
	fc=$(echo "$(val flood c 'interactive tps') $(val flood c 'batch tps')" | awk '{ print $1 + $2 }')
	fb=$(echo "$(val flood b 'interactive tps') $(val flood b 'batch tps')" | awk '{ print $1 + $2 }')
	oc=$(val overhead c tps) ob=$(val overhead b tps)
	rp99a=$(val flood-R100 a 'interactive p99 ms') rp99b=$(val flood-R100 b 'interactive p99 ms')
	rba=$(val flood-R100 a 'batch tps') rbb=$(val flood-R100 b 'batch tps')
	verdict() { awk "BEGIN { exit !($1) }" && echo "**met**" || echo "**missed**"; }
	echo "| target | measured | |"
	echo "|---|---|---|"
	echo "| interactive p99 through (a) <= 1/5 of (b)'s | $p99a ms vs $p99b ms: $(echo "$p99a $p99b" | awk '{ printf "1/%.1f", $2 / $1 }') | $(verdict "$p99a * 5 <= $p99b") |"
	echo "| batch throughput through (a) >= 90% of (b)'s | $ba vs $bb tps: $(echo "$ba $bb" | awk '{ printf "%.1f%%", 100 * $1 / $2 }') | $(verdict "$ba >= 0.9 * $bb") |"
	echo "| ... at equal interactive load (-R 100): p99 (a) <= 1/5 of (b)'s | $rp99a ms vs $rp99b ms: $(echo "$rp99a $rp99b" | awk '{ printf "1/%.1f", $2 / $1 }') | $(verdict "$rp99a * 5 <= $rp99b") |"
	echo "| ... at equal interactive load (-R 100): batch (a) >= 90% of (b)'s | $rba vs $rbb tps: $(echo "$rba $rbb" | awk '{ printf "%.1f%%", 100 * $1 / $2 }') | $(verdict "$rba >= 0.9 * $rbb") |"
	echo "| (c) throughput >= (b)'s, flood (interactive + batch) | $fc vs $fb tps: $(echo "$fc $fb" | awk '{ printf "%.3fx", $1 / $2 }') | $(verdict "$fc >= $fb") |"
	echo "| (c) throughput >= (b)'s, overhead | $oc vs $ob tps: $(echo "$oc $ob" | awk '{ printf "%.3fx", $1 / $2 }') | $(verdict "$oc >= $ob") |"
	echo "| (c) throughput >= 1.1x (b)'s, overhead (#21) | $(echo "$oc $ob" | awk '{ printf "%.3fx", $1 / $2 }'); pairs' median $(val overhead c "tps / (b)'s")x | $(verdict "$oc >= 1.1 * $ob") |"
	tc=$(val tls c tps) tb=$(val tls b tps)
	echo "| (c) throughput >= (b)'s, over TLS | $tc vs $tb tps: $(echo "$tc $tb" | awk '{ printf "%.3fx", $1 / $2 }') | $(verdict "$tc >= $tb") |"
	if [ -n "$baseline" ]; then
		ooc=$(val overhead oc tps) op99a=$(val flood oa 'interactive p99 ms') oba=$(val flood oa 'batch tps')
		ofc=$(echo "$(val flood oc 'interactive tps') $(val flood oc 'batch tps')" | awk '{ print $1 + $2 }')
		echo "| no loss against the baseline (within 5%): (c) overhead | $oc vs $ooc tps: $(echo "$oc $ooc" | awk '{ printf "%.3fx", $1 / $2 }') | $(verdict "$oc >= 0.95 * $ooc") |"
		echo "| ... (c) flood throughput | $fc vs $ofc tps: $(echo "$fc $ofc" | awk '{ printf "%.3fx", $1 / $2 }') | $(verdict "$fc >= 0.95 * $ofc") |"
		echo "| ... (a) interactive p99 | $p99a ms vs $op99a ms | $(verdict "$p99a <= 1.05 * $op99a") |"
		echo "| ... (a) batch throughput | $ba vs $oba tps: $(echo "$ba $oba" | awk '{ printf "%.3fx", $1 / $2 }') | $(verdict "$ba >= 0.95 * $oba") |"
	fi
} >"$report"
cat "$report"

# Interactive latency distributions, every repeat pooled.
if command -v gnuplot >/dev/null; then
	for sc in flood flood-R100; do
		for k in a b c; do
			cat "$work"/lat.$sc.$k.* | sort -g | awk '{ a[NR] = $1 } END { step = NR > 2000 ? int(NR / 2000) : 1;
				for (i = 1; i <= NR; i += step) print a[i], i / NR; print a[NR], 1 }' >"$work/cdf.$k"
		done
		png=$out/proxy-bench-latency$([ "$sc" = flood ] || echo -R100).png
		gnuplot <<GP
set terminal pngcairo size 900,500 font "sans,11" noenhanced
set output "$png"
set title "Interactive latency beside a batch flood, pool size 4$([ "$sc" = flood ] || echo ", interactive held to 100/s")"
set xlabel "latency, ms (log scale)"
set ylabel "fraction of interactive transactions within x"
set logscale x
set key bottom right
set grid
plot "$work/cdf.a" using 1:2 with lines lw 2 title "$name_a", \
     "$work/cdf.b" using 1:2 with lines lw 2 title "$name_b", \
     "$work/cdf.c" using 1:2 with lines lw 2 title "$name_c"
GP
		echo "plot: $png"
	done
fi
echo "table: $report"
