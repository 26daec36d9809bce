#!/bin/sh
# SPDX-License-Identifier: MIT
# Every man page's EXAMPLE is a complete program that works: render each
# group page as a reader sees it (MANWIDTH=80), cut out its EXAMPLE
# section, compile it as strict C11 against this build and run it.
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
for page in "$src"/man/*.3 "$src"/man/*.7; do
	grep -q '^\.so ' "$page" && continue
	name=$(basename "$page")
	libs=-lturnstile
	case $name in ts_fleet*) # libturnstile-fleet's, where it is built
		[ -f .libs/libturnstile-fleet.so ] || continue
		libs="-lturnstile-fleet -lturnstile" ;;
	esac
	LC_ALL=C.UTF-8 MANWIDTH=80 man -l "$page" 2>/dev/null |
		awk '/^EXAMPLES?$/ { on = 1; next } /^[A-Z][A-Z ]+$/ { on = 0 } on' |
		sed 's/^       //' > "$out/$name.c"
	if [ ! -s "$out/$name.c" ]; then
		echo "man_examples: $name has no example" >&2; status=1; continue
	fi
	if ! ${CC:-cc} -std=c11 -Wall -Wextra -Wpedantic -Werror -pthread $TS_SAN_CFLAGS \
		-I"$PWD/include" -I"$src/include" -o "$out/$name.bin" "$out/$name.c" \
		-L"$PWD/.libs" $libs -Wl,-rpath,"$PWD/.libs"; then
		echo "man_examples: $name: the example does not compile" >&2; status=1; continue
	fi
	if ! (cd "$out" && timeout 60 "./$name.bin" > "$out/$name.out" 2>&1); then
		echo "man_examples: $name: the example failed" >&2; cat "$out/$name.out" >&2
		status=1; continue
	fi
done
[ $status -eq 0 ] && echo "man_examples: every page's example compiles (strict C11) and runs"
exit $status
