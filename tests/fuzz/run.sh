#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fuzz the operation sequences against the reference model with libFuzzer
# (clang), ASan and UBSan, for FUZZ_SECONDS (default 60).  New inputs that
# grow coverage go to a scratch copy of the corpus, not into the repo.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
# the core library's sources (libturnstile-fleet's need libcurl and json-c)
core=$(ls "$src"/lib/*.c | grep -v -e '/fleet' -e '/etcd\.c$')
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
	"$src"/tests/fuzz/fuzz_ops.c $core \
	$(pkg-config --libs liburcu-bp liburcu-cds) -pthread -o "$out/fuzz_ops"
"$out/fuzz_ops" -max_total_time="$secs" -print_final_stats=1 "$out/corpus" 2>&1 |
	tee "$out/fuzz.log" | grep -E "^(stat::number_of_executed_units|stat::new_units_added|Done|==)" || true
grep -q "^Done" "$out/fuzz.log" || { tail -40 "$out/fuzz.log"; exit 1; }

# pgproxy's protocol handling (tests/fuzz/pgproxy_fuzz.c): the harness
# with every examples/pgproxy source but main.c, FUZZ_SECONDS in all.  Its
# new inputs, too, go to a scratch corpus.
pg=$src/examples/pgproxy
mkdir -p "$out/pgproxy-corpus"
find "$src/tests/fuzz/pgproxy-corpus" -maxdepth 1 -type f -exec cp {} "$out/pgproxy-corpus/" \;
clang -std=c11 -O1 -g -D_GNU_SOURCE -DTS_BUILDING_LIBRARY -DTS_LIBFUZZER \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-I"$out/include" -I"$src/include" -I"$src/lib" -I"$pg" $(pkg-config --cflags liburcu-bp liburcu-cds) \
	"$src"/tests/fuzz/pgproxy_fuzz.c $(ls "$pg"/*.c | grep -v '/main\.c$') $core \
	$(pkg-config --libs liburcu-bp liburcu-cds libssl libcrypto) -pthread -o "$out/pgproxy_fuzz"
# Both modes, FUZZ_SECONDS shared between them: the hostile server, and
# the well-behaved one whose split-invariance check found the class of
# tests/fuzz/pgproxy-regressions.txt 8-17 (clean since: 40 minutes and
# 328,000 executions), and sasl: the client checked with SCRAM-SHA-256.
# PGPROXY_FUZZ_MODES="client" (or another) fuzzes one.
half=$(( secs / $(echo ${PGPROXY_FUZZ_MODES:-client server sasl} | wc -w) ))
for mode in ${PGPROXY_FUZZ_MODES:-client server sasl}; do
	PGPROXY_FUZZ_MODE=$mode "$out/pgproxy_fuzz" -max_total_time="$half" -max_len=8192 -timeout=30 \
		-print_final_stats=1 -artifact_prefix="$out/pgproxy-$mode-" "$out/pgproxy-corpus" 2>&1 |
		tee "$out/pgproxy-$mode.log" |
		grep -E "^(stat::number_of_executed_units|stat::new_units_added|Done|==|pgproxy_fuzz: FINDING)" || true
	grep -q "^Done" "$out/pgproxy-$mode.log" || { tail -40 "$out/pgproxy-$mode.log"; exit 1; }
done

# What a peer sends during SCRAM, and the auth file (tests/fuzz/scram_fuzz.c):
# a tenth of FUZZ_SECONDS more, at least 10 s.
mkdir -p "$out/scram-corpus"
cp "$src"/tests/fuzz/scram-corpus/* "$out/scram-corpus/"
clang -std=c11 -O1 -g -D_GNU_SOURCE -DTS_BUILDING_LIBRARY -DTS_LIBFUZZER \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-I"$out/include" -I"$src/include" -I"$src/lib" -I"$pg" $(pkg-config --cflags liburcu-bp liburcu-cds) \
	"$src"/tests/fuzz/scram_fuzz.c "$pg"/scram.c "$pg"/authfile.c $core \
	$(pkg-config --libs liburcu-bp liburcu-cds libcrypto) -pthread -o "$out/scram_fuzz"
tenth=$(( secs / 10 > 10 ? secs / 10 : 10 ))
"$out/scram_fuzz" -max_total_time="$tenth" -max_len=4096 -timeout=30 -print_final_stats=1 \
	-artifact_prefix="$out/scram-" "$out/scram-corpus" 2>&1 | tee "$out/scram.log" |
	grep -E "^(stat::number_of_executed_units|stat::new_units_added|Done|==|scram_fuzz: FINDING)" || true
grep -q "^Done" "$out/scram.log" || { tail -40 "$out/scram.log"; exit 1; }
