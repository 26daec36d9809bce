#!/bin/sh
# SPDX-License-Identifier: MIT
# make check: replay pgproxy's fuzz corpus through the harness's plain
# build (tests/fuzz/pgproxy_fuzz: no libFuzzer, its own main()): every seed
# whole and at its split points, and each hand-made seed's stream of at
# most PGPROXY_SPLIT_MAX bytes (default 400) also a byte at a time and in
# every split in two, the client's bytes compared to whole delivery.  Outside
# make check (no built harness) it builds one with $CC into a scratch
# folder.  The regress-* seeds reproduce fixed findings
# (tests/fuzz/pgproxy-regressions.txt).
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
corpus=$src/tests/fuzz/pgproxy-corpus
bin=./tests/fuzz/pgproxy_fuzz
if [ ! -x "$bin" ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	mkdir -p "$tmp/include/turnstile"
	part() { sed -n "s/^m4_define(\[ts_$1\], \[\([0-9]*\)\])\$/\1/p" "$src/configure.ac"; }
	sed -e "s/@TS_VERSION_MAJOR@/$(part major)/g" -e "s/@TS_VERSION_MINOR@/$(part minor)/g" \
		-e "s/@TS_VERSION_PATCH@/$(part patch)/g" "$src/include/turnstile/version.h.in" \
		> "$tmp/include/turnstile/version.h"
	pg=$src/examples/pgproxy
	build() { # with ASan and UBSan where the compiler has them
		# shellcheck disable=SC2046
		${CC:-cc} -std=c11 -O1 -g -D_GNU_SOURCE -DTS_BUILDING_LIBRARY "$@" -I"$tmp/include" \
			-I"$src/include" -I"$src/lib" -I"$pg" $(pkg-config --cflags liburcu-bp liburcu-cds) \
			"$src/tests/fuzz/pgproxy_fuzz.c" $(ls "$pg"/*.c | grep -v '/main\.c$') \
			$(ls "$src"/lib/*.c | grep -v -e '/fleet' -e '/etcd\.c$') \
			$(pkg-config --libs liburcu-bp liburcu-cds libssl libcrypto) -pthread -o "$tmp/pgproxy_fuzz"
	}
	build -fsanitize=address,undefined -fno-sanitize-recover=all 2>/dev/null || build
	bin=$tmp/pgproxy_fuzz
fi
# The hand-made seeds also a byte at a time and in every split in two;
# what the fuzzer kept (fuzz-*) whole and at its own split points, unless
# PGPROXY_SPLIT_ALL=1.
set --
for f in "$corpus"/*; do
	case $f in */fuzz-*) ;; *) [ -f "$f" ] && set -- "$@" "$f" ;; esac
done
"$bin" "$@"
set --
for f in "$corpus"/fuzz-*; do
	[ -f "$f" ] && set -- "$@" "$f"
done
[ $# -eq 0 ] && exit 0
if [ "${PGPROXY_SPLIT_ALL:-}" = 1 ]; then
	"$bin" "$@"
else
	PGPROXY_SPLIT_MAX=0 "$bin" "$@"
fi
# and every input as tests/fuzz/run.sh's fuzzing reads it, each half with
# its mode forced (a seed's own mode byte then means nothing)
set --
for f in "$corpus"/*; do
	[ -f "$f" ] && set -- "$@" "$f"
done
for mode in client server sasl; do
	PGPROXY_FUZZ_MODE=$mode PGPROXY_SPLIT_MAX=0 "$bin" "$@"
done
