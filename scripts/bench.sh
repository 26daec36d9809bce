#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job: installs what is missing, builds everything (optimised, no
# sanitizers) and runs the benchmark comparison against pthread variants.
# Quick by default; pass --full for the long run.  Tables go to stdout, raw
# CSV to results/.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=--quick
for a in "$@"; do
	case $a in
	--full) mode="" ;;
	--quick) mode=--quick ;;
	*) echo "usage: scripts/bench.sh [--quick|--full]" >&2; exit 2 ;;
	esac
done

scripts/deps.sh
[ -x configure ] && [ configure -nt configure.ac ] || autoreconf -fi
mkdir -p build/release
(cd build/release && ../../configure -q >/dev/null)
make -C build/release -j"$(nproc)" -s
RESULTS="$PWD/results" make -C build/release -s bench BENCH_ARGS="$mode"
