#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Plots hand-off throughput and p99 wait against thread count (C=2, hold
# 1 us) from suite.csv, one line per implementation, as PNG.
set -euo pipefail
csv=$1 out=$2
command -v gnuplot >/dev/null || { echo "(gnuplot not installed: no plots)"; exit 0; }
for metric in "admissions/s" "wait p99"; do
	name=$(echo "$metric" | tr -c 'a-z0-9\n' '_' | sed 's/_*$//')
	for impl in turnstile strict_pthread naive_pthread sem_t; do
		awk -F, -v m="$metric" -v i="$impl" '$1 == "handoff" && $3 == i && $4 == m &&
			$2 ~ /C=2 hold=1000ns/ { split($2, a, /[= ]/); print a[2], $5, $6, $7 }' "$csv" |
			sort -n > "$out/$name.$impl.dat"
	done
	gnuplot <<GP
set terminal pngcairo size 900,500 font "sans,11" noenhanced
set output "$out/handoff_$name.png"
set title "Contended hand-off, C=2, hold 1 us: $metric (median, min-max)"
set xlabel "threads"
set ylabel "$metric$([ "$metric" = "wait p99" ] && echo " (us)")"
set logscale x 2
set logscale y
set key top left
set grid
plot for [i in "turnstile strict_pthread naive_pthread sem_t"] \
	"$out/$name.".i.".dat" using 1:2:3:4 with yerrorlines title i
GP
	rm -f "$out/$name".*.dat
	echo "plot: $out/handoff_$name.png"
done
