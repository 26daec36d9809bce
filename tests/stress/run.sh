#!/bin/sh
# SPDX-License-Identifier: MIT
# make check's stress test: every scenario with a fixed seed and a random
# one, for a bounded time (STRESS_SECONDS, default 3 s for the mix).
set -e
secs=${STRESS_SECONDS:-3}
random=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
for seed in 12345 "$random"; do
	./tests/stress/stress --scenario mix --seconds "$secs" --seed "$seed"
	for s in timed-try-storm cancelled-head fired-cancel close-vs-timeouts resize-vs-close \
		 resize-handoff free-after-last-return slow-loaders async-loops; do
		./tests/stress/stress --scenario $s --seconds 1 --seed "$seed"
	done
done
