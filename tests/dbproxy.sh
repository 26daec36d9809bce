#!/bin/sh
# SPDX-License-Identifier: MIT
# The dbproxy example against real SQLite databases, small enough for make
# check: every answer right, every pass, slot and connection back.
exec ./examples/dbproxy --shards 3 --pool 2 --clients 8 --jobs 3 --queries 4 --rows 2000
