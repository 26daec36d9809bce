#!/bin/sh
# SPDX-License-Identifier: MIT
# Symbol hygiene: the shared library exports exactly the functions the
# public headers declare with TS_API — nothing hidden leaks out (hidden
# visibility by default), and nothing declared is missing.
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
lib=.libs/libturnstile.so
[ -f "$lib" ] || { echo "symbols: $lib not built" >&2; exit 1; }
exported=$(mktemp) declared=$(mktemp)
trap 'rm -f "$exported" "$declared"' EXIT
nm -D --defined-only "$lib" | awk '{ print $3 }' | grep -v '^_' | sort -u > "$exported"
grep -ho '^TS_API [^(]*(' "$src"/include/turnstile/*.h |
	sed -E 's/.*[ *]([A-Za-z_0-9]+)\($/\1/' | sort -u > "$declared"
if ! diff -u "$declared" "$exported"; then
	echo "symbols: exported symbols differ from the headers' TS_API declarations (- declared, + exported)" >&2
	exit 1
fi
echo "symbols: $(wc -l < "$exported") exported, all declared in include/turnstile/"
