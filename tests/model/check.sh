#!/bin/sh
# SPDX-License-Identifier: MIT
# Exhaustive check of tests/model/turnstile.pml with spin, in both its
# configurations: safety (assertions) and invalid end states (a waiter
# asleep forever).  Prints states explored; fails on any error.
set -e
model=$(cd "$(dirname "$0")" && pwd)/turnstile.pml
work=${1:-$(mktemp -d)}
mkdir -p "$work"
cd "$work"
for config in DEFAULT CANCEL_ONLY; do
	spin -D$config -a "$model" >/dev/null
	cc -O2 -DSAFETY -DCOLLAPSE -w -o pan pan.c
	./pan -m100000 > pan.$config.out 2>&1 || true
	echo "model $config: $(grep -E 'errors:' pan.$config.out | sed 's/.*errors/errors/'), $(grep -E 'states, stored' pan.$config.out | awk '{print $1}') states, $(grep -E 'transitions' pan.$config.out | awk '{print $1}') transitions"
	if ! grep -q "errors: 0" pan.$config.out; then
		cat pan.$config.out
		spin -D$config -t -p "$model" | tail -40
		exit 1
	fi
done
