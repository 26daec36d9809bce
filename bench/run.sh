#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs the benchmark suite from a build folder (`make bench` does this):
# Markdown tables on stdout, CSV and SVG plots in $RESULTS (default
# results/).  --quick (the README's main job) takes under 2 minutes on two
# vCPUs; the full run about 8.  See bench/README.md.
set -euo pipefail
quick=0
for a in "$@"; do
	case $a in
	--quick) quick=1 ;;
	*) echo "usage: run.sh [--quick]" >&2; exit 2 ;;
	esac
done
src=$(cd "$(dirname "$0")/.." && pwd)
results=${RESULTS:-$src/results}
mkdir -p "$results"
csv=$results/suite.csv
repeats=5
if [ $quick -eq 1 ]; then
	ms=100; iters=2000000; q=--quick; mode=quick
else
	ms=200; iters=5000000; q=; mode=full
fi
echo "# libturnstile benchmarks ($mode, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $(uname -r))"
echo
echo "Every figure is the median of $repeats repeats with implementations alternating"
echo "run by run; ratios are to the strict pthread turnstile (or the mutex pool) of the"
echo "same run.  Raw data: $results/."

# 1. uncontended: ns/op and callgrind instructions/op
echo
echo "### Uncontended acquire+release ($repeats repeats of $iters ops; instructions from callgrind, 100k ops)"
echo
./bench/uncontended --repeats $repeats --iters $iters > "$results/uncontended.csv"
count_iters=100000
printf 'impl,instructions_per_op\n' > "$results/uncontended_instructions.csv"
for impl in turnstile job set_lookup pthread_mutex sem_t atomic_pair waitlist mutex_pool sem_pool \
	turnstile_async turnstile_fleet; do
	out=$(mktemp)
	valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
		./bench/uncontended --count $impl --iters $count_iters >/dev/null 2>&1
	awk -v n=$count_iters -v i=$impl '/^totals:/ { printf "%s,%.1f\n", i, $2 / n }' "$out" \
		>> "$results/uncontended_instructions.csv"
	rm -f "$out"
done
echo "| implementation | ns/op median | min–max | × pthread_mutex | instructions/op |"
echo "|---|---:|---:|---:|---:|"
join -t, <(tail -n +2 "$results/uncontended.csv" | sort) \
	<(tail -n +2 "$results/uncontended_instructions.csv" | sort) |
	awk -F, '{ printf "| %s | %.1f | %.1f–%.1f | %.2f | %.0f |\n", $1, $2, $3, $4, $5, $8 }'
# The ABI trade (README, "Versions and the ABI"): the same loops calling the
# library's exported functions instead of the inlined fast paths.
noinline=""
for impl in turnstile job; do
	out=$(mktemp)
	valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
		./bench/uncontended_noinline --count $impl --iters $count_iters >/dev/null 2>&1
	noinline="$noinline$(awk -v n=$count_iters -v i=$impl '/^totals:/ { printf " %s %.0f,", i, $2 / n }' "$out")"
	rm -f "$out"
done
echo
echo "Built with -DTS_NO_INLINE (calls into the library, as C++ callers do), instructions/op:${noinline%,}."

# 2-6. the threaded scenarios
echo "scenario,config,impl,metric,median,min,max,ratio,repeats" > "$csv"
for scenario in handoff priority jobfifo pool audit; do
	./bench/suite $scenario $q --repeats $repeats --ms $ms --csv "$csv"
done

# 6b. event-loop waiters against a hand-written libuv comparator (bench/async_loop,
# built when configure finds libuv).  A failure (exit 3: a drain that hung, a
# lost callback) is reported here and in the targets, and the run goes on.
if [ $quick -eq 1 ]; then
	async_repeats=3; async_ms=200
else
	async_repeats=5; async_ms=500
fi
if [ -x ./bench/async_loop ]; then
	err=$(mktemp)
	rc=0
	./bench/async_loop --repeats $async_repeats --ms $async_ms --audit-ms 200 --csv "$csv" \
		2>"$err" || rc=$?
	if [ $rc -ne 0 ]; then
		echo
		echo "**bench/async_loop FAILED (exit $rc)**; the figures of the failed run are missing:"
		echo
		sed 's/^/    /' "$err"
	fi
	cat "$err" >&2
	rm -f "$err"
else
	echo
	echo "### Event-loop waiters: not measured (bench/async_loop needs libuv; configure did not find it)"
fi

# 6c. a loop handing passes to its own clients outside dispatch (pgproxy's
# pattern), with ts_notifier_before_poll and without it (every loop before it)
for c in 1 4; do
	./bench/loop_handoff --repeats $async_repeats --ms $async_ms --conc $c --hold 1000 --csv "$csv"
done

# 7. futex system calls per admission, every implementation, under strace
echo
echo "### Futex system calls per admission (T=16 C=2 hold=1us, one 100 ms run each under strace -f; tracing slows every call, so compare the implementations with each other, not with the untraced runs)"
echo
echo "| implementation | admissions | futex calls | per admission |"
echo "|---|---:|---:|---:|"
for impl in turnstile strict_pthread naive_pthread sem_t; do
	trace=$(mktemp); err=$(mktemp)
	SUITE_PRINT_ADMISSIONS=1 strace -f -c -e trace=futex -o "$trace" \
		./bench/suite handoff --impl $impl --threads 16 --conc 2 --hold 1000 \
		--ms 100 --repeats 1 >/dev/null 2>"$err"
	admitted=$(awk '/^admissions/ { s += $2 } END { print s + 0 }' "$err")
	calls=$(awk '$NF == "futex" { print $4 }' "$trace")
	awk -v i=$impl -v a="$admitted" -v c="${calls:-0}" \
		'BEGIN { printf "| %s | %d | %d | %.2f |\n", i, a, c, a ? c / a : 0 }'
	printf 'futex,T=16 C=2 hold=1000ns,%s,futex calls/admission (strace),%s,,,,1\n' \
		$impl "$(awk -v a="$admitted" -v c="${calls:-0}" 'BEGIN { printf "%.4f", a ? c / a : 0 }')" >> "$csv"
	rm -f "$trace" "$err"
done

# 9. process-shared turnstiles (bench/shared): uncontended in one process,
# 8 processes contending, the order audit across processes, recovery from
# kill -9.  Rows go to suite.csv as scenarios shared_*; a failed part (exit
# 3) is reported here and in the targets, and the run goes on.
shared_failed() { # what rc stderr-file
	echo
	echo "**bench/shared $1 FAILED (exit $2)**; its figures are missing:"
	echo
	sed 's/^/    /' "$3"
}
echo
echo "### Process-shared turnstiles: uncontended wait+return in one process ($repeats repeats of $iters ops, SysV 1/32 of that; instructions from callgrind, 100k ops; system calls counted under strace -f between two marker calls, 10k ops)"
echo
shared_impls="turnstile robust_pthread sysv_undo sem_t robust_mutex"
./bench/shared uncontended --repeats $repeats --iters $iters > "$results/shared_uncontended.csv"
printf 'impl,instructions_per_op\n' > "$results/shared_instructions.csv"
printf 'impl,syscalls_per_op\n' > "$results/shared_syscalls.csv"
shared_syscall_iters=10000
for impl in $shared_impls; do
	out=$(mktemp)
	valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
		./bench/shared count $impl --iters $count_iters >/dev/null 2>&1
	awk -v n=$count_iters -v i=$impl '/^totals:/ { printf "%s,%.1f\n", i, $2 / n }' "$out" \
		>> "$results/shared_instructions.csv"
	rm -f "$out"
	# every system call of the loop: the strace lines between the markers
	strace -f -o "$out" ./bench/shared syscalls $impl --iters $shared_syscall_iters \
		>/dev/null 2>&1
	awk -v n=$shared_syscall_iters -v i=$impl '
		/ts-bench-begin/ { on = 1; next } /ts-bench-end/ { on = 0 }
		on && !/resumed>/ { c++ } END { printf "%s,%.4f\n", i, c / n }' "$out" \
		>> "$results/shared_syscalls.csv"
	rm -f "$out"
done
echo "| implementation | ns/op median | min–max | × sysv_undo | instructions/op | × sem_t | system calls/op |"
echo "|---|---:|---:|---:|---:|---:|---:|"
sem_ins=$(awk -F, '$1 == "sem_t" { print $2 }' "$results/shared_instructions.csv")
join -t, <(tail -n +2 "$results/shared_uncontended.csv" | sort) \
	<(tail -n +2 "$results/shared_instructions.csv" | sort) |
	join -t, - <(tail -n +2 "$results/shared_syscalls.csv" | sort) |
	awk -F, -v s="$sem_ins" -v csv="$csv" '{
		printf "| %s | %.1f | %.1f–%.1f | %.3f | %.0f | %.2f | %.2f |\n", $1, $2, $3, $4, $5, $8, $8 / s, $9
		printf "shared_uncontended,P=1,%s,ns/op,%s,%s,%s,%s,%s\n", $1, $2, $3, $4, $5, $6 >> csv
		printf "shared_uncontended,P=1,%s,instructions/op,%s,,,%.4f,1\n", $1, $8, $8 / s >> csv
		printf "shared_uncontended,P=1,%s,syscalls/op,%s,,,,1\n", $1, $9 >> csv
	}'
echo
echo "robust_pthread: the comparator's wait+return (robust mutex, count, heap); robust_mutex: a robust process-shared mutex lock+unlock alone."
for part in handoff audit recover; do
	err=$(mktemp)
	rc=0
	case $part in
	handoff) ./bench/shared handoff --procs 8 --conc 2 --hold 1000 --repeats $repeats --ms $ms \
		--csv "$csv" 2>"$err" || rc=$? ;;
	*) ./bench/shared $part $q --csv "$csv" 2>"$err" || rc=$? ;;
	esac
	[ $rc -eq 0 ] || shared_failed $part $rc "$err"
	cat "$err" >&2
	rm -f "$err"
done

# plots
"$src/bench/plot.sh" "$csv" "$results"

# 8. targets
"$src/bench/targets.sh" "$results"
