#!/usr/bin/env bash
# The whole test suite: installs what is missing, then builds and runs
# `make check` three times — plain (-Werror), AddressSanitizer+UBSan, and
# ThreadSanitizer, the sanitizer builds with fault injection at the
# protocol's race windows — each in its own build folder under build/.
# make check includes the Criterion tests and the stress harness.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
[ -x configure ] && [ configure -nt configure.ac ] || autoreconf -fi

jobs=$(nproc)
status=0
for variant in plain address thread; do
	dir=build/$variant
	mkdir -p "$dir"
	args=(--enable-werror)
	[ "$variant" = plain ] || args+=(--enable-sanitizer="$variant" --enable-fault-injection)
	echo "=== $variant: configure ${args[*]}"
	(cd "$dir" && ../../configure -q "${args[@]}" >/dev/null)
	echo "=== $variant: make check"
	if ! make -C "$dir" -j"$jobs" -s check; then
		status=1
		for log in "$dir"/tests/*.log; do
			grep -q '^not ok\|^ERROR\|^FAIL' "$log" 2>/dev/null && cat "$log"
		done
	fi
done

if [ $status -eq 0 ]; then
	echo "all test builds passed (plain, address+undefined, thread)"
fi
exit $status
