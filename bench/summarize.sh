#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The README's headline figures from several full runs: each figure is the
# median over runs of the per-run medians, with the spread (min–max) of
# those run medians.  Each argument is a results folder of one run
# (`scripts/bench.sh --full`, then copy results/ aside).  Ratios are taken
# within each run, against the comparator of the same run, then summarised.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: bench/summarize.sh RESULTS_DIR..." >&2; exit 2; }

# median and range of the numbers on stdin
stats() { sort -g | awk '{ v[NR] = $1 } END {
	if (!NR) { print "n/a"; exit }
	m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
	printf "%s (%s–%s)", fmt(m), fmt(v[1]), fmt(v[NR]) }
	function fmt(x) { return x >= 1e5 ? sprintf("%.0f k", x / 1e3) : x >= 100 ? sprintf("%.0f", x) : x >= 10 ? sprintf("%.1f", x) : sprintf("%.2f", x) }'; }

suite() { # scenario config impl metric column(5=median, 8=ratio)
	for d in "$@"; do :; done
	local s=$1 c=$2 i=$3 m=$4 col=$5; shift 5
	for d in $dirs; do
		awk -F, -v s="$s" -v c="$c" -v i="$i" -v m="$m" -v k="$col" \
			'$1 == s && $2 == c && $3 == i && $4 == m { print $k }' "$d/suite.csv"
	done | stats
}
uncontended() { # impl file column
	for d in $dirs; do
		awk -F, -v i="$1" -v k="$3" '$1 == i { print $k }' "$d/$2"
	done | stats
}

dirs="$*"
echo "Summary of $# full runs (median of the run medians, min–max across runs):"
echo
echo "| figure | libturnstile | comparator | ratio |"
echo "|---|---:|---:|---:|"
echo "| uncontended wait+return, ns (vs pthread_mutex) | $(uncontended turnstile uncontended.csv 2) | $(uncontended pthread_mutex uncontended.csv 2) | $(uncontended turnstile uncontended.csv 5) |"
echo "| … sem_t, ns / bare atomic pair, ns | $(uncontended sem_t uncontended.csv 2) | $(uncontended atomic_pair uncontended.csv 2) | |"
echo "| … instructions (callgrind; vs sem_t) | $(uncontended turnstile uncontended_instructions.csv 2) | $(uncontended sem_t uncontended_instructions.csv 2) | |"
for conf in "T=16 C=2 hold=1000ns" "T=16 C=8 hold=1000ns" "T=16 C=8 hold=0ns"; do
	echo "| $conf: admissions/s (vs strict_pthread) | $(suite handoff "$conf" turnstile admissions/s 5) | $(suite handoff "$conf" strict_pthread admissions/s 5) | $(suite handoff "$conf" turnstile admissions/s 8) |"
	echo "| $conf: wait p99, µs | $(suite handoff "$conf" turnstile "wait p99" 5) | $(suite handoff "$conf" strict_pthread "wait p99" 5) | $(suite handoff "$conf" turnstile "wait p99" 8) |"
done
echo "| high-band p99 under a low-band flood, µs | $(suite priority "high band" turnstile "wait p99" 5) | $(suite priority "high band" strict_pthread "wait p99" 5) | $(suite priority "high band" turnstile "wait p99" 8) |"
a="L=2x1000 B=2 C=8 hold=1000ns"
echo "| event loop $a: completions/s (vs libuv) | $(suite async "$a" turnstile completions/s 5) | $(suite async "$a" libuv completions/s 5) | $(suite async "$a" turnstile completions/s 8) |"
echo "| event loop $a: wait p99, µs | $(suite async "$a" turnstile "wait p99" 5) | $(suite async "$a" libuv "wait p99" 5) | $(suite async "$a" turnstile "wait p99" 8) |"
echo "| event loop $a: fd writes (libuv: uv_async_send calls) per completion | $(suite async "$a" turnstile "fd writes/completion" 5) | $(suite async "$a" libuv "fd writes/completion" 5) | |"
echo "| uncontended async wait+return, instructions (vs sem_t) | $(uncontended turnstile_async uncontended_instructions.csv 2) | $(uncontended sem_t uncontended_instructions.csv 2) | |"
echo "| uncontended take+put, ns (vs mutex pool) | $(uncontended waitlist uncontended.csv 2) | $(uncontended mutex_pool uncontended.csv 2) | |"
echo "| T=16 takers on 8 items: take+put/s (vs mutex pool) | $(suite pool T=16 waitlist take+put/s 5) | $(suite pool T=16 mutex_pool take+put/s 5) | $(suite pool T=16 waitlist take+put/s 8) |"
h="P=8 C=2 hold=1000ns"
echo "| shared, uncontended wait+return, ns (vs SysV semop SEM_UNDO) | $(suite shared_uncontended P=1 turnstile ns/op 5) | $(suite shared_uncontended P=1 sysv_undo ns/op 5) | $(suite shared_uncontended P=1 turnstile ns/op 8) |"
echo "| … instructions (callgrind; vs sem_t in a shared mapping) | $(suite shared_uncontended P=1 turnstile instructions/op 5) | $(suite shared_uncontended P=1 sem_t instructions/op 5) | $(suite shared_uncontended P=1 turnstile instructions/op 8) |"
echo "| … system calls per wait+return | $(suite shared_uncontended P=1 turnstile syscalls/op 5) | $(suite shared_uncontended P=1 sysv_undo syscalls/op 5) | |"
echo "| shared $h: admissions/s (vs robust_pthread) | $(suite shared_handoff "$h" turnstile admissions/s 5) | $(suite shared_handoff "$h" robust_pthread admissions/s 5) | $(suite shared_handoff "$h" turnstile admissions/s 8) |"
echo "| shared $h: wait p99, µs | $(suite shared_handoff "$h" turnstile "wait p99" 5) | $(suite shared_handoff "$h" robust_pthread "wait p99" 5) | $(suite shared_handoff "$h" turnstile "wait p99" 8) |"
echo "| shared $h: admissions/s, SysV SEM_UNDO / sem_t (no order) | $(suite shared_handoff "$h" sysv_undo admissions/s 5) | $(suite shared_handoff "$h" sem_t admissions/s 5) | |"
for rn in 100 20; do
	echo "| recovery after kill -9 (recover_ns $rn ms), master calls ts_shared_recover on SIGCHLD: p99 ms (vs robust_pthread, master) | $(suite shared_recover "P=8 C=1 recover=${rn}ms master" turnstile "latency p99" 5) | $(suite shared_recover "P=8 C=1 master" robust_pthread "latency p99" 5) | |"
	echo "| recovery after kill -9 (recover_ns $rn ms) by the waiters alone: p99 ms | $(suite shared_recover "P=8 C=1 recover=${rn}ms auto" turnstile "latency p99" 5) | | |"
done
