#!/bin/sh
# SPDX-License-Identifier: MIT
# The USDT probes are in the built library (readelf -n lists each as a
# stapsdt note of provider libturnstile) — or, in a --disable-usdt build,
# none is.
set -e
lib=.libs/libturnstile.so
notes=$(readelf -n "$lib" | awk '/Provider:/ { p = $2 } /Name:/ && p == "libturnstile" { print $2 }' | sort -u)
expected="async__cancel async__done async__queue close create discard pass__return put resize take__done take__start wait__done wait__fail wait__start"
if [ "$TS_USDT" = yes ]; then
	for probe in $expected; do
		echo "$notes" | grep -qx "$probe" || { echo "probes: $probe missing from $lib" >&2; exit 1; }
	done
	echo "probes: $(echo "$notes" | wc -l) USDT probes in $lib: $(echo $notes)"
else
	[ -z "$notes" ] || { echo "probes: --disable-usdt build has probes" >&2; exit 1; }
	echo "probes: none (built with --disable-usdt)"
fi
