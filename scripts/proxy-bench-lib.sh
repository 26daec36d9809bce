# SPDX-License-Identifier: MIT
# Sourced by scripts/proxy-bench*.sh: builds the release tree, starts a
# throwaway cluster in $work (Unix socket only, fsync off, pgbench scale 10,
# superuser "bench") stopped at exit with every pid in pids[] and every
# pgbouncer whose pidfile is $work/*.pid; helpers within, free_port,
# cpu_ticks, host_ticks/stolen_pct, switches, tps_of, txns, failed_ok, sampler_install/sample_start/sample_max,
# record and med (results in $results); and
# $work/batch.sql, the flood's batch transaction (an UPDATE, then
# pg_sleep(0.002) holding its connection).  The caller is in the project's
# top folder ($top).
scripts/deps.sh
{ [ -x configure ] && [ configure -nt configure.ac ]; } || autoreconf -fi
mkdir -p build/release
(cd build/release && ../../configure -q >/dev/null)
make -C build/release -j2 -s >/dev/null
proxy=$top/build/release/examples/pgproxy/pgproxy

bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
PATH=$bindir:$PATH
command -v pgbouncer >/dev/null || { echo "proxy-bench: pgbouncer is not installed" >&2; exit 1; }

work=$(mktemp -d)
as_owner() { "$@"; }
if [ "$(id -u)" -eq 0 ]; then # neither the server nor pgbouncer runs as root
	chown postgres "$work"
	as_owner() { runuser -u postgres -- "$@"; }
fi
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for f in "$work"/*.pid; do [ ! -f "$f" ] || kill -TERM "$(cat "$f")" 2>/dev/null || true; done
	as_owner pg_ctl -D "$work/db" -m immediate stop >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
export PGUSER=bench
unset PGHOST PGPORT PGDATABASE PGAPPNAME PGOPTIONS
# in the clear unless a row asks for TLS: libpq's default (prefer) would take
# the TLS both proxies offer
export PGSSLMODE=disable

now_ms() { echo $(($(date +%s%N) / 1000000)); }
within() { # SECONDS CMD...: until CMD succeeds, or fail
	local end=$(($(now_ms) + $1 * 1000))
	shift
	until "$@" >/dev/null 2>&1; do
		[ "$(now_ms)" -lt "$end" ] || { echo "proxy-bench: timed out waiting for: $*" >&2; exit 1; }
		sleep 0.1
	done
}
free_port() {
	for p in $(seq 16432 16632); do
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
	echo "proxy-bench: no free port" >&2
	exit 1
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# all CPUs' ticks so far: "stolen total", stolen being the time the
# hypervisor ran another guest (a shared VM's noise; /proc/stat's steal)
host_ticks() { awk '$1 == "cpu" { t = 0; for (i = 2; i <= 9; i++) t += $i; print $9, t }' /proc/stat; }
stolen_pct() { # "stolen total" at the start -> percent of CPU time stolen since
	echo "$1 $2 $(host_ticks)" | awk '{ d = $4 - $2; printf "%.0f", (d > 0 ? ($3 - $1) * 100 / d : 0) }'
}
# context switches so far, all CPUs
switches() { awk '$1 == "ctxt" { print $2 }' /proc/stat; }
tck=$(getconf CLK_TCK)
txns() { sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$1"; }
tps_of() { sed -n 's/^tps = \([0-9.]*\) (without initial.*/\1/p' "$1" | awk '{ printf "%.0f\n", $1 }'; }
failed_ok() { grep -q '^number of failed transactions: 0 ' "$1" || { echo "proxy-bench: failures in $1:" >&2; cat "$1" >&2; exit 1; }; }

echo "proxy-bench: cluster in $work"
as_owner initdb -D "$work/db" -A trust -U bench >/dev/null
as_owner pg_ctl -D "$work/db" -l "$work/server.log" -w -o "-k $work -c listen_addresses= \
	-c fsync=off -c synchronous_commit=off -c max_connections=100" start >/dev/null
pgbench -i -q -s 10 -h "$work" postgres >/dev/null 2>&1
# the flood's batch transaction
cat >"$work/batch.sql" <<'EOF'
\set aid random(1, 1000000)
\set delta random(-5000, 5000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
SELECT pg_sleep(0.002);
END;
EOF

results=$work/results.tsv
: >"$results"
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$results"; }
# the most server connections at once of one configuration (its user),
# sampled every 2 ms (tests/max_server_conns.sql): sampler_install once,
# then sample_start USER ... sample_max, which sets max
sampler_install() { psql -X -q -h "$work" -f tests/max_server_conns.sql postgres; }
sample_start() {
	psql -X -q -h "$work" -c 'delete from sample_stop' postgres
	psql -X -Atc "select max_server_conns('$1')" -h "$work" postgres >"$work/max" &
	sampler=$!
}
sample_max() { # not in a $(...): the sampler is this shell's child
	psql -X -q -h "$work" -c 'insert into sample_stop default values' postgres
	wait "$sampler"
	max=$(cat "$work/max")
}

# medians (and min-max) over repeats
med() { # scenario config metric -> "median (min-max)" or "median"
	awk -F'\t' -v s="$1" -v k="$2" -v m="$3" '$1 == s && $2 == k && $3 == m { print $4 }' "$results" | sort -g |
		awk '{ a[NR] = $1 } END { if (!NR) { print "-"; exit } mid = a[int((NR + 1) / 2)];
			if (NR == 1) print mid; else printf "%s (%s-%s)\n", mid, a[1], a[NR] }'
}
val() { med "$@" | awk '{ print $1 }'; }

# record_flood scenario config repeat dir: from a flood's pgbench logs
# (ilog.* interactive, blog.* batch) the interactive latencies in
# $work/lat.SCENARIO.CONFIG.REPEAT and, over the interactive run's window
# (completion times), both throughputs and interactive p50/p99
record_flood() {
	local sc=$1 k=$2 rep=$3 dir=$4 t0 t1 n_inter n_batch
	cat "$dir"/ilog.* | awk '{ print $3 / 1000 }' | sort -g >"$work/lat.$sc.$k.$rep"
	read -r t0 t1 < <(cat "$dir"/ilog.* | awk 'NR == 1 { lo = hi = $5 + $6 / 1e6 }
		{ t = $5 + $6 / 1e6; if (t < lo) lo = t; if (t > hi) hi = t } END { printf "%.6f %.6f\n", lo, hi }')
	n_inter=$(wc -l <"$work/lat.$sc.$k.$rep")
	n_batch=$(cat "$dir"/blog.* | awk -v lo="$t0" -v hi="$t1" '{ t = $5 + $6 / 1e6 } t >= lo && t <= hi { n++ } END { print n + 0 }')
	record "$sc" "$k" "interactive tps" "$(echo "$n_inter $t0 $t1" | awk '{ printf "%.1f", $1 / ($3 - $2) }')"
	record "$sc" "$k" "batch tps" "$(echo "$n_batch $t0 $t1" | awk '{ printf "%.1f", $1 / ($3 - $2) }')"
	record "$sc" "$k" "interactive p50 ms" "$(awk '{ a[NR] = $1 } END { printf "%.3f", a[int(NR * 0.50 + 0.5)] }' "$work/lat.$sc.$k.$rep")"
	record "$sc" "$k" "interactive p99 ms" "$(awk '{ a[NR] = $1 } END { printf "%.3f", a[int(NR * 0.99 + 0.5)] }' "$work/lat.$sc.$k.$rep")"
}
