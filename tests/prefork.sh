#!/bin/sh
# SPDX-License-Identifier: MIT
# examples/prefork: eight workers share two databases' ceilings while the
# master kills one a second; the example itself checks at the end that
# every pass came back (exit 1 otherwise).  Here: it ran, killed at least
# two workers (it runs on until it has, however slow the machine), and
# said so.
set -e
out=$(./examples/prefork --workers 8 --seconds 3 --crash --kills 2)
echo "$out"
kills=$(echo "$out" | grep -c 'killed by signal 9')
[ "$kills" -ge 2 ] || { echo "prefork: expected at least 2 kills, saw $kills" >&2; exit 1; }
echo "$out" | grep -q '^orders   ceiling 3: .* 3 free at the end$'
echo "$out" | grep -q '^reports  ceiling 1: .* 1 free at the end$'
