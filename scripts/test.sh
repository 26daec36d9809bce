#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The whole test suite (the README's test command, and CI's):
#  1. make check three times, each in its own folder under build/ —
#     plain (-Werror), AddressSanitizer+UBSan, and ThreadSanitizer, the
#     sanitizer builds with fault injection at the protocol's race windows.
#     make check runs the Criterion tests, the stress harness (fixed and
#     random seeds) and the fuzz corpus replay.
#  2. valgrind memcheck over the plain build's test programs;
#  3. libFuzzer against the reference model (clang), FUZZ_SECONDS;
#  4. spin's exhaustive check of the wake-up protocol's model;
#  5. make distcheck (the tarball builds, installs and passes make check).
# It installs what is missing first.  Ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh || exit 1
{ [ -x configure ] && [ configure -nt configure.ac ]; } || autoreconf -fi || exit 1

jobs=$(nproc)
passed=0 failed=0
step() { # name command... : run a whole-suite step, counting it once
	echo "=== $1"
	shift
	if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "=== FAILED"; fi
}
count_suite() { # add a build's Automake totals
	local log=$1/test-suite.log p f e
	p=$(awk '/^# PASS:/ {print $3}' "$log" 2>/dev/null)
	f=$(awk '/^# FAIL:/ {print $3}' "$log" 2>/dev/null)
	e=$(awk '/^# ERROR:/ {print $3}' "$log" 2>/dev/null)
	passed=$((passed + ${p:-0}))
	failed=$((failed + ${f:-0} + ${e:-0}))
}

print_failed_logs() { # the logs of a build's failing tests, for CI's output
	local log
	for log in "$1"/tests/*.log "$1"/tests/*/*.log; do
		grep -qE '^(not ok|ERROR|FAIL)' "$log" 2>/dev/null && cat "$log"
	done
	return 0
}
distcheck() { # make distcheck; its own build's failing logs are kept and shown
	make -C build/plain -s distcheck && return 0
	print_failed_logs "$(echo build/plain/libturnstile-*/_build/sub)"
	return 1
}

for variant in plain address thread; do
	dir=build/$variant
	mkdir -p "$dir"
	args=(--enable-werror)
	[ "$variant" = plain ] || args+=(--enable-sanitizer="$variant" --enable-fault-injection)
	echo "=== $variant: configure ${args[*]}"
	if ! (cd "$dir" && ../../configure -q "${args[@]}" >/dev/null) ||
	   ! make -C "$dir" -j"$jobs" -s >/dev/null; then
		echo "=== $variant: build FAILED"
		failed=$((failed + 1))
		continue
	fi
	echo "=== $variant: make check"
	make -C "$dir" -j"$jobs" -s check || print_failed_logs "$dir"
	grep -h "^stress: .*violations" "$dir"/tests/stress/run.log 2>/dev/null | sed "s/^/$variant: /"
	count_suite "$dir"
done

step "memcheck (valgrind) over the unit tests" tests/memcheck.sh build/plain
step "libFuzzer against the reference model (${FUZZ_SECONDS:-60} s)" tests/fuzz/run.sh build/fuzz
step "spin: exhaustive model check of the wake-up protocol" tests/model/check.sh build/model
step "make distcheck" distcheck

echo "test.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
