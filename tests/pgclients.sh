#!/bin/sh
# SPDX-License-Identifier: MIT
# The client stacks people use against PostgreSQL, run directly and through
# examples/pgproxy, their transcripts compared case by case: PgJDBC,
# asyncpg, psycopg 3, psycopg2 and node-postgres, each one program in
# tests/pgclients/ that prints "== CASE" and then the case's results (rows,
# SQLSTATEs, never timings).  A case passes when the proxy's transcript is
# the direct one, byte for byte.  Every program also runs 4 connections at
# once against a pool of 2, so that server connections are shared.
#
#   PGPROXY_CLIENT_FLAGS   the proxy's flags (default below)
#   PGCLIENTS_ALLOW_OLD=1  a flag the proxy rejects is dropped (with a note)
#                          instead of failing the test
#   PGCLIENTS_PGBOUNCER=1  also through pgbouncer (pool_mode=transaction,
#                          default_pool_size=2): reported, never a failure
#   PGCLIENTS_STACKS       which stacks (default: jdbc asyncpg psycopg psycopg2, the
#                          Debian ones; make check runs node apart,
#                          tests/pgclients_node.sh, since it needs the npm registry)
#   PGCLIENTS_TIMEOUT      seconds for one program run (120); PGCLIENTS_CASE_TIMEOUT
#                          seconds for one case inside it (10; after 2 cases time
#                          out, a program runs no more: a wedged proxy costs ~30 s a stack)
#   PGCLIENTS_NODE_DIR     where node-postgres is (or gets npm-installed);
#                          default ${XDG_CACHE_HOME:-~/.cache}/libturnstile/pgclients-node
#
# Direct runs use the cluster's Unix socket, except PgJDBC's (no Unix
# sockets in PgJDBC): a byte-for-byte TCP relay to that socket
# (pgclients/relay.py).  Exit 1 when a case fails (direct, or through the
# proxy), 77 when nothing failed but a stack's toolchain is missing (named).
name=pgclients
. "$(dirname "$0")/pglib.sh"
src=$(cd "$(dirname "$0")" && pwd)/pgclients
py=/usr/bin/python3 # Debian's, with python3-asyncpg, -psycopg, -psycopg2
flags=${PGPROXY_CLIENT_FLAGS---pool-size 2 --max-prepared 100 --threads 2}
stacks=${PGCLIENTS_STACKS-jdbc asyncpg psycopg psycopg2}
prog_timeout=${PGCLIENTS_TIMEOUT:-120}
PGCLIENTS_CASE_TIMEOUT=${PGCLIENTS_CASE_TIMEOUT:-10}
jar=${PGCLIENTS_JDBC_JAR:-/usr/share/java/postgresql.jar}
node_pg_version=8.23.1
node_dir=${PGCLIENTS_NODE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/libturnstile/pgclients-node}
db=pgclients
export TZ=UTC PGCLIENTS_CASE_TIMEOUT PYTHONDONTWRITEBYTECODE=1
t_start=$(now_ms)
mkdir -p "$data/out"

# ---- which toolchains are here
skipped='' available=''
skip() { skipped="$skipped $1"; echo "$name: SKIP: $1: $2"; }
for s in $stacks; do
	case $s in
	jdbc)
		if ! command -v java >/dev/null; then skip jdbc "no java (default-jdk-headless)"
		elif [ ! -r "$jar" ]; then skip jdbc "no $jar (libpostgresql-jdbc-java)"
		else available="$available $s"; fi ;;
	asyncpg | psycopg | psycopg2)
		if [ ! -x "$py" ]; then skip "$s" "no $py"
		elif ! "$py" -c "import $s" 2>/dev/null; then skip "$s" "$py has no $s (python3-$s)"
		else available="$available $s"; fi ;;
	node)
		if ! command -v node >/dev/null; then skip node "no node (nodejs)"
		else
			if [ ! -f "$node_dir/node_modules/pg/package.json" ] ||
				! grep -q "\"version\": \"$node_pg_version\"" "$node_dir/node_modules/pg/package.json"; then
				if command -v npm >/dev/null; then
					mkdir -p "$node_dir"
					timeout 120 npm install --prefix "$node_dir" --no-audit --no-fund --no-save \
						--loglevel=error "pg@$node_pg_version" >"$data/npm.log" 2>&1 ||
						sed 's/^/  npm: /' "$data/npm.log" | tail -n 5
				fi
			fi
			if [ -f "$node_dir/node_modules/pg/package.json" ]; then available="$available $s"
			else skip node "no node-postgres in $node_dir (npm install pg@$node_pg_version failed or no npm)"; fi
		fi ;;
	*) echo "$name: unknown stack $s"; exit 1 ;;
	esac
done
[ -n "$available" ] || { echo "$name: no client stack at all:$skipped"; exit 77; }

# ---- the cluster: a UTF8 database with the C locale, whatever the environment
start_cluster -c TimeZone=UTC -c DateStyle=ISO,MDY -c lc_messages=C
direct -qc "create database $db encoding 'UTF8' lc_collate 'C' lc_ctype 'C' template template0" postgres

# ---- the proxy's flags: one it rejects fails the test, or is dropped with PGCLIENTS_ALLOW_OLD=1
# rejected_flag FLAGS: prints the option the proxy refuses, if any
rejected_flag() {
	: >"$data/probe.log"
	# shellcheck disable=SC2086
	timeout 20 "$proxy" --listen 127.0.0.1:0 --server "host=$data port=5432" --auth-type trust $1 \
		>"$data/probe.log" 2>&1 &
	probe=$!
	within 10 grep -qE 'listening on|unknown option|usage' "$data/probe.log" || true
	kill -TERM "$probe" 2>/dev/null || true
	wait "$probe" 2>/dev/null || true
	sed -n 's/.*unknown option \(--*[A-Za-z0-9-]*\).*/\1/p' "$data/probe.log" | head -n 1
}
# without FLAGS OPTION: FLAGS less OPTION and its argument
without() {
	out='' drop=0
	for w in $1; do
		if [ "$drop" = 1 ]; then
			drop=0
			case $w in --*) ;; *) continue ;; esac
		fi
		if [ "$w" = "$2" ]; then drop=1; continue; fi
		out="$out $w"
	done
	echo "${out# }"
}
tries=0
while bad=$(rejected_flag "$flags") && [ -n "$bad" ]; do
	[ "${PGCLIENTS_ALLOW_OLD:-0}" = 1 ] ||
		fail "the proxy rejects $bad (of PGPROXY_CLIENT_FLAGS='$flags'; PGCLIENTS_ALLOW_OLD=1 drops it)"
	flags=$(without "$flags" "$bad")
	echo "$name: note: this proxy rejects $bad: PGCLIENTS_ALLOW_OLD=1, running with '$flags'"
	tries=$((tries + 1))
	[ "$tries" -lt 10 ] || fail "the proxy keeps rejecting flags"
done

# proxy_stop: SIGTERM, then SIGKILL after 10 s; a note when it does not exit 0
proxy_stop() {
	[ -n "$proxy_pid" ] || return 0
	kill -TERM "$proxy_pid" 2>/dev/null || true
	end=$(($(now_ms) + 10000))
	while kill -0 "$proxy_pid" 2>/dev/null && [ "$(now_ms)" -lt "$end" ] &&
		! grep -q 'pgproxy: shut down' "$data/proxy.log"; do sleep 0.05; done
	kill -0 "$proxy_pid" 2>/dev/null && ! grep -q 'pgproxy: shut down' "$data/proxy.log" && {
		echo "$name: note: the proxy did not exit within 10 s of SIGTERM after $1; killed"
		kill -KILL "$proxy_pid" 2>/dev/null || true
	}
	st=0
	wait "$proxy_pid" 2>/dev/null || st=$?
	[ "$st" -eq 0 ] || echo "$name: note: the proxy exited with status $st after $1"
	cp "$data/proxy.log" "$data/out/proxy.$1.log"
	proxy_pid=
}

# ---- PgJDBC's direct route: the relay
relay_pid=
stop_relay() { [ -z "$relay_pid" ] || kill -TERM "$relay_pid" 2>/dev/null || true; }
stop_bouncer() { [ ! -f "$data/bouncer.pid" ] || kill -TERM "$(cat "$data/bouncer.pid")" 2>/dev/null || true; }
cleanup_hooks="stop_relay stop_bouncer"
trap 'exit 143' TERM # (pglib.sh's cleanup is an EXIT trap)
trap 'exit 130' INT
trap 'exit 129' HUP
case " $available " in *" jdbc "*)
	"$py" -B "$src/relay.py" "$data/relay.port" "$data/.s.PGSQL.5432" 2>"$data/relay.log" &
	relay_pid=$!
	within 10 test -s "$data/relay.port" || fail "the relay to the Unix socket did not start"
	relay_port=$(cat "$data/relay.port") ;;
esac

# ---- pgbouncer, for comparison only
bouncer=
if [ "${PGCLIENTS_PGBOUNCER:-0}" = 1 ]; then
	if ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ]; then
		echo "$name: note: PGCLIENTS_PGBOUNCER=1 but no pgbouncer"
	else
		PATH=$PATH:/usr/sbin
		for p in $(seq 17432 17632); do
			(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { bport=$p; break; }
		done 2>/dev/null
		[ -n "${bport:-}" ] || bport=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
		cat >"$data/pgbouncer.ini" <<EOF
[databases]
* = host=$data port=5432
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bport
unix_socket_dir =
auth_type = trust
auth_file = $data/users.txt
pool_mode = transaction
default_pool_size = 2
max_client_conn = 200
ignore_startup_parameters = extra_float_digits
logfile = $data/bouncer.log
pidfile = $data/bouncer.pid
EOF
		echo '"pgproxy" ""' >"$data/users.txt"
		[ "$(id -u)" -ne 0 ] || chown postgres "$data/pgbouncer.ini" "$data/users.txt"
		if as_owner pgbouncer -d "$data/pgbouncer.ini" &&
			within 10 psql -X -h 127.0.0.1 -p "$bport" -Atc 'select 1' "$db" >/dev/null 2>&1; then
			bouncer=$(pgbouncer --version 2>/dev/null | head -n 1)
		else
			echo "$name: note: pgbouncer did not start"; tail -n 5 "$data/bouncer.log" 2>/dev/null
		fi
	fi
fi

# run STACK TARGET HOST PORT: the stack's program, its transcript split into $data/out/STACK.TARGET/CASE
run() {
	schema=pgc_$1_$2
	direct -qc "create schema $schema" "$db"
	out=$data/out/$1.$2
	case $1 in
	jdbc) set -- "$1" "$2" java -cp "$jar" "$src/Jdbc.java" "$3" "$4" ;;
	node) set -- "$1" "$2" env NODE_PATH="$node_dir/node_modules" node "$src/node_client.js" "$3" "$4" ;;
	*) set -- "$1" "$2" "$py" -B "$src/$1_client.py" "$3" "$4" ;;
	esac
	shift 2
	st=0
	timeout -k 5 "$prog_timeout" "$@" "$db" "$PGUSER" "$schema" >"$out.txt" 2>"$out.err" || st=$?
	[ "$st" -eq 0 ] || echo "exit status $st$( [ "$st" -ne 124 ] || echo " (timed out after $prog_timeout s)")" >>"$out.err"
	mkdir -p "$out"
	awk -v dir="$out" '/^== /{ if (f) close(f); f = dir "/" $2 } f { print > f }' "$out.txt"
}
# drop_schema STACK TARGET: after the proxy is stopped (a wedged one may hold a lock on it)
drop_schema() {
	PGOPTIONS='-c lock_timeout=10s' direct -qc "drop schema pgc_$1_$2 cascade" "$db" 2>/dev/null ||
		echo "$name: note: could not drop pgc_$1_$2"
}

failed=0 n_ok=0 n_fail=0 n_bounce=0 n_cases=0
matrix=$data/out/matrix
: >"$matrix"
for s in $available; do
	case $s in
	jdbc) run "$s" direct 127.0.0.1 "$relay_port" ;;
	*) run "$s" direct "$data" 5432 ;;
	esac
	drop_schema "$s" direct
	start_proxy $flags # a new one for each stack: a wedge costs that stack only
	run "$s" proxy 127.0.0.1 "$port"
	proxy_stop "$s"
	drop_schema "$s" proxy
	[ -z "$bouncer" ] || { run "$s" bouncer 127.0.0.1 "$bport"; drop_schema "$s" bouncer; }
	cases=$(sed -n 's/^== //p' "$data/out/$s.direct.txt")
	[ -n "$cases" ] || {
		echo "$name: FAIL: $s: the direct run printed no case"
		sed 's/^/  /' "$data/out/$s.direct.err" | tail -n 20
		failed=1 n_fail=$((n_fail + 1))
		continue
	}
	for c in $cases; do
		n_cases=$((n_cases + 1))
		d=$data/out/$s.direct/$c v=$data/out/$s.proxy/$c b=$data/out/$s.bouncer/$c
		if grep -qE '^(timeout|not run:|exception:|.*: exception:)' "$d"; then
			echo "$name: FAIL: $s $c: the direct run itself failed"
			sed 's/^/  direct: /' "$d" | head -n 10
			tail -n 5 "$data/out/$s.direct.err" | sed 's/^/  stderr: /'
			failed=1 n_fail=$((n_fail + 1))
			printf '%s %s FAIL - -\n' "$s" "$c" >>"$matrix"
			continue
		fi
		if [ -f "$v" ] && cmp -s "$d" "$v"; then
			pr=ok n_ok=$((n_ok + 1))
			echo "$name: ok: $s $c"
		else
			pr=FAIL n_fail=$((n_fail + 1)) failed=1
			echo "$name: FAIL: $s $c: through the proxy, not what it is direct"
			if [ -f "$v" ]; then
				diff "$d" "$v" | sed -n '2,14s/^/  /p'
			else
				echo "  (no such case in the proxy's transcript)"
			fi
			grep -v '^WARNING: ' "$data/out/$s.proxy.err" 2>/dev/null | tail -n 3 | sed 's/^/  stderr: /'
		fi
		br=-
		if [ -n "$bouncer" ]; then
			if [ -f "$b" ] && cmp -s "$d" "$b"; then br=ok n_bounce=$((n_bounce + 1)); else br=differs; fi
			echo "$name: pgbouncer: $s $c: $br"
		fi
		printf '%s %s ok %s %s\n' "$s" "$c" "$pr" "$br" >>"$matrix"
	done
done

echo "$name: matrix (case, direct, pgproxy $flags${bouncer:+, $bouncer}):"
awk '{ printf "  %-9s %-16s %-6s %-6s %s\n", $1, $2, $3, $4, $5 }' "$matrix"
echo "$name: $n_ok of $n_cases cases the same through pgproxy as direct${bouncer:+, $n_bounce through pgbouncer}; $(( ($(now_ms) - t_start) / 1000 )) s"
[ -z "${PGCLIENTS_KEEP:-}" ] || { rm -rf "$PGCLIENTS_KEEP"; cp -r "$data/out" "$PGCLIENTS_KEEP"; echo "$name: transcripts kept in $PGCLIENTS_KEEP"; }
[ "$failed" = 0 ] || exit 1
[ -z "$skipped" ] || { echo "$name: skipped stacks (toolchain missing):$skipped"; exit 77; }
exit 0
