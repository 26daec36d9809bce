#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# valgrind memcheck over every unit-test program of a (plain) build folder:
# invalid accesses, uninitialised reads and definite leaks fail the run.
set -uo pipefail
build=${1:?usage: tests/memcheck.sh BUILD_DIR}
src=$(cd "$(dirname "$0")/.." && pwd)
status=0
for t in "$build"/tests/*.test; do
	start=$(date +%s)
	# a hang is a failure, not a stalled run.  --fair-sched=yes: valgrind
	# runs one thread at a time, and its default lock lets a spinning
	# thread keep it while a woken one (a pass holder, a granted waiter)
	# starves for seconds: turnstile_guard's stress once saw a wait go
	# 20 s unserved (a pristine run, 2026-12-03) and turnstile_races ran
	# 62 s; fair, they run 12 s and 10 s
	if CRITERION_JOBS=1 timeout --signal=KILL 600 valgrind -q --fair-sched=yes --trace-children=yes --error-exitcode=9 \
		--leak-check=full --errors-for-leak-kinds=definite \
		--suppressions="$src/tests/valgrind.supp" "$t" >"$t.memcheck" 2>&1; then
		echo "memcheck: clean  $(basename "$t") ($(( $(date +%s) - start )) s)"
	else
		echo "memcheck: ERRORS $(basename "$t")"
		cat "$t.memcheck"
		status=1
	fi
done
exit $status
