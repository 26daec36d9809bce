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
	# a hang is a failure, not a stalled run
	if CRITERION_JOBS=1 timeout --signal=KILL 600 valgrind -q --trace-children=yes --error-exitcode=9 \
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
