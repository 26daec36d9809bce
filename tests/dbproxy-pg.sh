#!/bin/sh
# SPDX-License-Identifier: MIT
# The dbproxy example against a real PostgreSQL server: a throwaway
# cluster in a scratch folder, listening on a Unix socket in that folder
# only (no TCP), started and stopped here.  Skipped (exit 77, reported as a
# skip) where dbproxy was built without libpq or no server is installed.
set -e
[ "$TS_HAVE_LIBPQ" = yes ] || { echo "dbproxy-pg: built without libpq"; exit 77; }
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -x "$bindir/initdb" ] || { echo "dbproxy-pg: no PostgreSQL server installed"; exit 77; }
data=$(mktemp -d)
as_owner() { "$@"; }
if [ "$(id -u)" -eq 0 ]; then # the server refuses to run as root
	chown postgres "$data"
	as_owner() { runuser -u postgres -- "$@"; }
fi
cleanup() { as_owner "$bindir/pg_ctl" -D "$data/db" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$data"; }
trap cleanup EXIT
as_owner "$bindir/initdb" -D "$data/db" -A trust -U dbproxy >/dev/null
as_owner "$bindir/pg_ctl" -D "$data/db" -l "$data/log" -w \
	-o "-k $data -c listen_addresses= -c fsync=off" start >/dev/null
./examples/dbproxy --pg "host=$data user=dbproxy dbname=postgres" \
	--shards 3 --pool 2 --clients 8 --jobs 3 --queries 4 --rows 2000
