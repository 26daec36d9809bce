#!/bin/sh
# SPDX-License-Identifier: MIT
# The USDT probes are in the built library (readelf -n lists each as a
# stapsdt note of provider libturnstile) — or, in a --disable-usdt build,
# none is.  Every probe in the library's source has its row (with its
# arguments) in docs/probes.md and its name in libturnstile(7).
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
lib=.libs/libturnstile.so
notes=$(readelf -n "$lib" | awk '/Provider:/ { p = $2 } /Name:/ && p == "libturnstile" { print $2 }' | sort -u)
expected="async__cancel async__done async__queue close create discard pass__return put resize shared__dead shared__recovered shared__takeover take__done take__start wait__done wait__fail wait__start"
# in_source FILES...: the probes those sources fire
in_source() { grep -ho 'TS_PROBE[0-9](\([a-z_]*\)' "$@" | sed 's/.*(//' | sort -u; }
# documented WHAT EXPECTED PAGE FILES...: the sources fire exactly EXPECTED,
# each with its row in docs/probes.md and its name in PAGE
documented() {
	what=$1 want=$2 page=$3
	shift 3
	[ "$(echo $(in_source "$@"))" = "$want" ] ||
		{ echo "probes: $what has $(echo $(in_source "$@")), this test expects $want" >&2; exit 1; }
	for probe in $want; do
		grep -q "^| \`$probe\` |" "$src/docs/probes.md" ||
			{ echo "probes: $probe has no row in docs/probes.md" >&2; exit 1; }
		grep -q "\b$probe\b" "$src/man/$page" ||
			{ echo "probes: $probe missing from $page" >&2; exit 1; }
	done
}
documented lib/ "$expected" libturnstile.7 $(ls "$src"/lib/*.c | grep -v '/fleet\.c$')
# libturnstile-fleet's own, in its library (where it is built)
fleet_expected="fleet__closed fleet__rejoin fleet__share"
documented lib/fleet.c "$fleet_expected" ts_fleet.3 "$src"/lib/fleet.c
if [ "$TS_USDT" = yes ] && [ -f .libs/libturnstile-fleet.so ]; then
	fleet_notes=$(readelf -n .libs/libturnstile-fleet.so |
		awk '/Provider:/ { p = $2 } /Name:/ && p == "libturnstile" { print $2 }' | sort -u)
	[ "$(echo $fleet_notes)" = "$fleet_expected" ] ||
		{ echo "probes: libturnstile-fleet.so has $(echo $fleet_notes), expected $fleet_expected" >&2; exit 1; }
fi
if [ "$TS_USDT" = yes ]; then
	for probe in $expected; do
		echo "$notes" | grep -qx "$probe" || { echo "probes: $probe missing from $lib" >&2; exit 1; }
	done
	echo "probes: $(echo "$notes" | wc -l) USDT probes in $lib: $(echo $notes)"
else
	[ -z "$notes" ] || { echo "probes: --disable-usdt build has probes" >&2; exit 1; }
	echo "probes: none (built with --disable-usdt)"
fi
