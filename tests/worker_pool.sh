#!/bin/sh
# SPDX-License-Identifier: MIT
# examples/worker_pool: dedicated workers serve an interactive and a batch
# band through gates on one shard, drained half way and restarted.  The
# example checks by itself that every job was done exactly once and that
# no more than the ceiling of passes was ever held (exit 1 otherwise).
# Here: it exited 0 and its summary says so.
set -e
out=$(./examples/worker_pool)
echo "$out"
echo "$out" | grep -q '^interactive: 400 of 400 done exactly once, '
echo "$out" | grep -q '^batch      : 400 of 400 done exactly once, '
echo "$out" | grep -q '^most passes held at once: [123] of 3; '
echo "$out" | grep -q '^round 2: .* drained with 0 queued$'
echo "$out" | grep -q '^ok: 800 of 800 jobs done exactly once, 0 errors$'
