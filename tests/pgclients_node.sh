#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/pgclients.sh for node-postgres alone: its package comes from the
# npm registry at test time (Debian's node-pg conflicts with the nodejs of
# some machines), so where the registry cannot be reached this test alone
# is skipped (77, with npm's error), and the Debian stacks still count.
PGCLIENTS_STACKS=node exec "$(dirname "$0")/pgclients.sh" "$@"
