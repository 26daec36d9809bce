# SPDX-License-Identifier: MIT
# Sourced by the tests that run examples/pgproxy against a real PostgreSQL
# server: a throwaway cluster in a scratch folder ($data), listening on a
# Unix socket there only (no TCP), started here and stopped at exit; the
# proxy listens on 127.0.0.1 at a port the kernel picks (its log line
# names it).  Everything that waits for something polls it with a deadline.
# The caller sets `name` (the prefix of its messages) before sourcing.
# Exits 77 (skip) where no server, psql or pgbench is installed.
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
for tool in initdb pg_ctl psql pgbench; do
	[ -x "$bindir/$tool" ] || { echo "$name: no $tool (PostgreSQL server and client)"; exit 77; }
done
PATH=$bindir:$PATH
proxy=$(pwd)/examples/pgproxy/pgproxy
[ -x "$proxy" ] || { echo "$name: $proxy not built"; exit 1; }

data=$(mktemp -d)
chmod 755 "$data"
as_owner() { "$@"; }
if [ "$(id -u)" -eq 0 ]; then # the server refuses to run as root
	chown postgres "$data"
	as_owner() { runuser -u postgres -- "$@"; }
fi
proxy_pid=
cleanup_hooks=
cleanup() {
	for h in $cleanup_hooks; do "$h" || true; done
	[ -z "$proxy_pid" ] || kill -KILL "$proxy_pid" 2>/dev/null || true
	exec 3>&- 2>/dev/null || true
	as_owner pg_ctl -D "$data/db" -m immediate stop >/dev/null 2>&1 || true
	rm -rf "$data"
}
trap cleanup EXIT
export PGUSER=pgproxy PGAPPNAME=pgproxy-test PGCONNECT_TIMEOUT=10
unset PGDATABASE PGHOST PGPORT PGOPTIONS PGSERVICE

fail() {
	echo "$name: FAIL: $*" >&2
	[ ! -f "$data/proxy.log" ] || tail -n 50 "$data/proxy.log" | sed 's/^/  proxy log: /' >&2
	exit 1
}
ok() { echo "$name: ok: $*"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# within SECONDS CMD...: run CMD until it succeeds; false after SECONDS
within() {
	end=$(($(now_ms) + $1 * 1000))
	shift
	until "$@"; do
		[ "$(now_ms)" -lt "$end" ] || return 1
		sleep 0.05
	done
}

# Direct sessions name themselves "direct": every other client backend is
# one of the proxy's server connections (which take their clients'
# application_name).
pgport=${pgport:-5432} # the cluster's port (its socket's name; TCP where a test listens there)
direct() { PGAPPNAME=direct psql -X -h "$data" -p "$pgport" "$@"; }
proxy_conns="backend_type = 'client backend' and application_name <> 'direct'"
via() { psql -X -h 127.0.0.1 -p "$port" "$@"; }
admin() { via -Atc "$1" pgproxy; }

# start_cluster [server options...]: initdb (trust, superuser pgproxy) and start
start_cluster() {
	as_owner initdb -D "$data/db" -A trust -U pgproxy >/dev/null
	as_owner pg_ctl -D "$data/db" -l "$data/server.log" -w \
		-o "-k $data -c listen_addresses= -c fsync=off -c max_connections=100 $*" start >/dev/null
}

# start_proxy [pgproxy flags...]: --listen 127.0.0.1:0 and $data, --server the
# cluster, clients trusted and pgproxy the console's admin (flags given
# after these win)
start_proxy() {
	: >"$data/proxy.log"
	"$proxy" --listen 127.0.0.1:0 --listen "$data" --server "host=$data port=$pgport" \
		--auth-type trust --admin-users pgproxy "$@" \
		2>"$data/proxy.log" &
	proxy_pid=$!
	within 20 grep -q 'listening on' "$data/proxy.log" || fail "the proxy did not start"
	port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$data/proxy.log")
	within 20 admin 'SHOW POOLS' >/dev/null || fail "the admin console does not answer"
}
# stop_proxy HOW: the proxy must exit 0 (nothing leaked or left pending)
stop_proxy() {
	[ "$1" = signal ] && kill -TERM "$proxy_pid"
	within 30 sh -c "! kill -0 $proxy_pid 2>/dev/null" || fail "the proxy did not exit"
	status=0
	wait "$proxy_pid" || status=$?
	proxy_pid=
	[ "$status" -eq 0 ] || fail "the proxy exited with status $status"
	grep -q 'pgproxy: shut down' "$data/proxy.log" || fail "no clean shutdown in the log"
}

# The client stacks of tests/pgclients, one login each through the proxy
# at $port (tests/pgclients/login.py, Login.java, login.js):
# stack_login STACK USER PASSWORD prints "user NAME" or "refused ...";
# login_stacks prints the stacks this machine has (and says which not).
kit=$(cd "$(dirname "$0")" && pwd)/pgclients
jar=/usr/share/java/postgresql.jar
node_dir=${PGCLIENTS_NODE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/libturnstile/pgclients-node}
stack_login() {
	case $1 in
	jdbc) java -cp "$jar" "$kit/Login.java" "$port" "$2" "$3" postgres ;;
	node) NODE_PATH=$node_dir/node_modules node "$kit/login.js" "$port" "$2" "$3" postgres ;;
	*) /usr/bin/python3 "$kit/login.py" "$1" "$port" "$2" "$3" postgres ;;
	esac 2>&1 || echo "(exit status $?)"
}
login_stacks() {
	for stack in asyncpg psycopg psycopg2 jdbc node; do
		case $stack in
		jdbc) command -v java >/dev/null && [ -r "$jar" ] || { echo "$name: no PgJDBC here: jdbc not tried" >&2; continue; } ;;
		node) [ -f "$node_dir/node_modules/pg/package.json" ] && command -v node >/dev/null ||
			{ echo "$name: node-postgres not installed yet (tests/pgclients_node.sh installs it): node not tried" >&2; continue; } ;;
		*) /usr/bin/python3 -c "import $stack" 2>/dev/null ||
			{ echo "$name: no python3-$stack in Debian's python3: not tried" >&2; continue; } ;;
		esac
		echo "$stack"
	done
}

# create_sampler: sample_start, then sample_max sets max to the most server
# connections the proxy had at once in between (tests/max_server_conns.sql).
create_sampler() { direct -q -f "$(dirname "$0")/max_server_conns.sql" postgres; }
sample_start() {
	direct -qc 'delete from sample_stop' postgres
	direct -Atc 'select max_server_conns(null)' postgres >"$data/max" &
	sampler=$!
}
sample_max() { # sets max (not in a $(...): the sampler is this shell's child)
	direct -qc 'insert into sample_stop default values' postgres
	wait "$sampler"
	max=$(cat "$data/max")
}
