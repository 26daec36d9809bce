#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fuzz the operation sequences against the reference model with libFuzzer
# (clang), ASan and UBSan, for FUZZ_SECONDS (default 60).  New inputs that
# grow coverage go to a scratch copy of the corpus, not into the repo.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
secs=${FUZZ_SECONDS:-60}
out=${1:-$src/build/fuzz}
if ! command -v clang >/dev/null; then
	echo "fuzz: clang not installed, libFuzzer run not possible" >&2
	exit 1
fi
mkdir -p "$out/corpus"
cp "$src"/tests/fuzz/corpus/* "$out/corpus/"
# turnstile/version.h is made by configure; make it here from configure.ac
mkdir -p "$out/include/turnstile"
part() { sed -n "s/^m4_define(\[ts_$1\], \[\([0-9]*\)\])\$/\1/p" "$src/configure.ac"; }
sed -e "s/@TS_VERSION_MAJOR@/$(part major)/g" -e "s/@TS_VERSION_MINOR@/$(part minor)/g" \
	-e "s/@TS_VERSION_PATCH@/$(part patch)/g" "$src/include/turnstile/version.h.in" \
	> "$out/include/turnstile/version.h"
clang -std=c11 -O1 -g -D_GNU_SOURCE -DTS_BUILDING_LIBRARY -DTS_LIBFUZZER \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-I"$out/include" -I"$src/include" -I"$src/lib" $(pkg-config --cflags liburcu-bp liburcu-cds) \
	"$src"/tests/fuzz/fuzz_ops.c "$src"/lib/*.c \
	$(pkg-config --libs liburcu-bp liburcu-cds) -pthread -o "$out/fuzz_ops"
"$out/fuzz_ops" -max_total_time="$secs" -print_final_stats=1 "$out/corpus" 2>&1 |
	tee "$out/fuzz.log" | grep -E "^(stat::number_of_executed_units|stat::new_units_added|Done|==)" || true
grep -q "^Done" "$out/fuzz.log" || { tail -40 "$out/fuzz.log"; exit 1; }
