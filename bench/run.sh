#!/usr/bin/env bash
# Runs the benchmark suite from a build folder (`make bench` does this) and
# prints Markdown tables; raw CSV goes to $RESULTS (default results/).
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
repeats=7; iters=5000000
[ $quick -eq 1 ] && { repeats=5; iters=2000000; }

echo "## Uncontended acquire+release ($repeats repeats, $iters ops each, alternating)"
echo
./bench/uncontended --repeats $repeats --iters $iters > "$results/uncontended.csv"
count_iters=100000
printf 'impl,instructions_per_op\n' > "$results/uncontended_instructions.csv"
for impl in turnstile job set_lookup pthread_mutex sem_t atomic_pair waitlist mutex_pool sem_pool; do
	out=$(mktemp)
	valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
		./bench/uncontended --count $impl --iters $count_iters >/dev/null 2>&1
	total=$(awk '/^totals:/ {print $2}' "$out")
	rm -f "$out"
	awk -v t="$total" -v n=$count_iters -v i=$impl 'BEGIN { printf "%s,%.1f\n", i, t / n }' \
		>> "$results/uncontended_instructions.csv"
done
echo "| implementation | ns/op median | min–max | × pthread_mutex | instructions/op (callgrind) |"
echo "|---|---:|---:|---:|---:|"
join -t, <(tail -n +2 "$results/uncontended.csv" | sort) \
	<(tail -n +2 "$results/uncontended_instructions.csv" | sort) |
	awk -F, '{ printf "| %s | %.1f | %.1f–%.1f | %.2f | %.0f |\n", $1, $2, $3, $4, $5, $8 }'
echo
