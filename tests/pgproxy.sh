#!/bin/sh
# SPDX-License-Identifier: MIT
# examples/pgproxy against a real PostgreSQL server, driven by PostgreSQL's
# own clients: a throwaway cluster in a scratch folder, listening on a Unix
# socket there only (no TCP), started and stopped here.  The proxy listens
# on 127.0.0.1 at a port the kernel picks (its log line names it).
# Everything that waits for something polls it with a deadline.
# Skipped (exit 77) where no server, psql or pgbench is installed.
set -eu
name=pgproxy
. "$(dirname "$0")/pglib.sh"

# For `via_bg ... &`: exec, so that $! is psql itself (signals reach it), not
# a subshell running a function
via_bg() { exec psql -X -h 127.0.0.1 -p "$port" "$@"; }
# SHOW POOLS column for database postgres: 2 size, 3 in use, 4 server
# connections, 5 idle, 6 waiting
pool() { admin 'SHOW POOLS' | awk -F'|' -v col="$1" '$1 == "postgres" { print $col }'; }
pool_is() { [ "$(pool "$1")" = "$2" ]; }
server_conns() { direct -Atc "select count(*) from pg_stat_activity where $proxy_conns $1" postgres; }
server_conns_is() { [ "$(server_conns "$1")" "$2" "$3" ]; }
# Every idle server connection of the proxy's, closed by the server
# (pg_terminate_backend, as an administrator or idle_session_timeout does):
# none may be handed to the next client.  Prints how many were closed.
kill_idle_servers() {
	killed=$(direct -Atc "select count(pg_terminate_backend(pid)) from pg_stat_activity
			      where $proxy_conns and state = 'idle'" postgres)
	[ "$killed" -ge 1 ] || fail "no idle server connection to close"
	within 10 server_conns_is "and state = 'idle'" -eq 0 || fail "the closed backends did not exit"
	echo "$killed"
}

# A psql whose input the test writes line by line (fd 3).
start_scripted() {
	rm -f "$data/fifo"
	mkfifo "$data/fifo"
	via_bg -v ON_ERROR_STOP=1 postgres <"$data/fifo" >"$data/$1.out" 2>&1 &
	scripted_pid=$!
	exec 3>"$data/fifo"
}

start_cluster
create_sampler
direct -qc 'create table shutdown_check (v int)' postgres

# ---- proxy A: pool 4, bands, 5 s wait timeout, 2 loop threads
start_proxy --pool-size 4 --band application_name=interactive:0 --band user=batch:2 \
	--default-band 1 --wait-timeout 5s --threads 2

pgbench -i -s 1 -h 127.0.0.1 -p "$port" postgres >"$data/init.log" 2>&1 ||
	{ cat "$data/init.log"; fail "pgbench -i through the proxy"; }
ok "pgbench -i through the proxy"

for mode in simple extended; do
	sample_start
	status=0
	pgbench -c 16 -j 2 -T 5 -M "$mode" -h 127.0.0.1 -p "$port" postgres >"$data/bench.log" 2>&1 || status=$?
	sample_max
	[ "$status" -eq 0 ] || { cat "$data/bench.log"; fail "pgbench -M $mode exited $status"; }
	grep -q '^number of failed transactions: 0 ' "$data/bench.log" ||
		{ cat "$data/bench.log"; fail "pgbench -M $mode: failed transactions"; }
	[ "$max" -ge 1 ] && [ "$max" -le 4 ] ||
		fail "pgbench -M $mode: $max server connections at once, pool size 4"
	ok "pgbench -c 16 -j 2 -T 5 -M $mode: $(grep '^number of transactions actually' "$data/bench.log" |
		sed 's/.*: //') transactions, 0 failed, $(grep '^tps' "$data/bench.log" | sed 's/ (.*//'), at most $max server connections (pool size 4)"
done

# ---- psql through the proxy gives what psql gives directly
cat >"$data/query.sql" <<'EOF'
select 1 as x, 'text' as y, 2.5::numeric as z;
EOF
cat >"$data/rollback.sql" <<'EOF'
begin;
insert into shutdown_check values (-1);
select 1/0;
select 2;
rollback;
select count(*) as after_rollback from shutdown_check;
EOF
cat >"$data/describe.sql" <<'EOF'
\d pgbench_accounts
\dt
EOF
cat >"$data/copy.sql" <<'EOF'
begin;
create temp table copied (a int, b text) on commit drop;
\copy copied from stdin
1	one
2	two, with "quotes"
3	\N
\.
copy copied to stdout;
select count(*), count(b) from copied;
commit;
copy (select * from pgbench_accounts order by aid limit 2000) to stdout;
EOF
for f in query rollback describe copy; do
	direct -f "$data/$f.sql" postgres >"$data/$f.direct" 2>&1 || true
	via -f "$data/$f.sql" postgres >"$data/$f.via" 2>&1 || true
	cmp -s "$data/$f.direct" "$data/$f.via" ||
		{ diff "$data/$f.direct" "$data/$f.via" | head -20; fail "psql -f $f.sql differs through the proxy"; }
done
direct -c 'select 1 as a; select 2 as b' postgres >"$data/multi.direct" 2>&1
via -c 'select 1 as a; select 2 as b' postgres >"$data/multi.via" 2>&1
cmp -s "$data/multi.direct" "$data/multi.via" || fail "a multi-statement query differs through the proxy"
grep -q 'division by zero' "$data/rollback.via" && grep -q '^2	two, with "quotes"$' "$data/copy.via" &&
	grep -q '^ *3 | *2$' "$data/copy.via" ||
	fail "the psql scripts did not run as expected"
ok "psql: a query, an error in a transaction then ROLLBACK, \\d, COPY in and out, a multi-statement query: same as direct"

if pgbench -M prepared -c 1 -t 1 -h 127.0.0.1 -p "$port" postgres >"$data/prepared.log" 2>&1 ||
	! grep -q 'named prepared statements are not supported' "$data/prepared.log"; then
	cat "$data/prepared.log"
	fail "pgbench -M prepared was not refused clearly"
fi
ok "named prepared statements (pgbench -M prepared) get: $(grep -o 'ERROR:  pgproxy: named[^;]*' "$data/prepared.log" | head -1)"

# ---- RESIZE grows and shrinks a live pool under load
admin 'RESIZE postgres 2' >/dev/null
pgbench -c 8 -j 2 -T 15 -S -h 127.0.0.1 -p "$port" postgres >"$data/resize.log" 2>&1 &
loadgen=$!
within 10 server_conns_is '' -eq 2 || fail "RESIZE 2: the pool did not fill to 2 under load"
admin 'RESIZE postgres 6' >/dev/null
within 10 server_conns_is '' -eq 6 || fail "RESIZE 6: $(server_conns '') server connections, not 6"
admin 'RESIZE postgres 1' >/dev/null
within 10 server_conns_is '' -le 1 || fail "RESIZE 1: $(server_conns '') server connections, not 1"
within 10 pool_is 3 1 || fail "RESIZE 1: $(pool 3) passes in use"
admin 'RESIZE postgres 4' >/dev/null
status=0
wait "$loadgen" || status=$?
[ "$status" -eq 0 ] && grep -q '^number of failed transactions: 0 ' "$data/resize.log" ||
	{ cat "$data/resize.log"; fail "pgbench under RESIZE"; }
ok "RESIZE under load (pgbench -c 8 -S): 2 -> 6 -> 1 server connections, 0 failed transactions"

# ---- a queued client that hangs up leaves no trace; CancelRequest
admin 'RESIZE postgres 1' >/dev/null
via_bg -c 'select pg_sleep(60)' postgres >"$data/cancel.out" 2>&1 &
sleeper=$!
within 10 server_conns_is "and state = 'active' and query = 'select pg_sleep(60)'" -eq 1 ||
	fail "the pg_sleep(60) query did not start"
via_bg -c 'select 1' postgres >/dev/null 2>&1 &
queued=$!
within 10 pool_is 6 1 || fail "the second client is not queued (waiting $(pool 6))"
kill -KILL "$queued"
wait "$queued" 2>/dev/null || true
within 3 pool_is 6 0 || fail "a queued client hung up: still $(pool 6) waiting"
# withdrawn, not timed out (this proxy's --wait-timeout is 5 s)
timed_out=$(admin 'SHOW BANDS' | awk -F'|' '{ n += $4 } END { print n }')
[ "$timed_out" = 0 ] || fail "$timed_out waits timed out; the queued client was not withdrawn"
ok "a queued client that disconnects leaves the queue at once (SHOW POOLS waiting 1 -> 0, no timeout)"

t0=$(now_ms)
kill -INT "$sleeper" # psql sends a CancelRequest, which the proxy forwards
status=0
wait "$sleeper" || status=$?
elapsed=$(($(now_ms) - t0))
grep -q 'canceling statement due to user request' "$data/cancel.out" ||
	{ cat "$data/cancel.out"; fail "CancelRequest did not reach the server connection"; }
[ "$elapsed" -lt 1000 ] || fail "CancelRequest took $elapsed ms"
within 5 pool_is 3 0 || fail "the cancelled client still holds its pass"
ok "CancelRequest (psql on SIGINT) stops pg_sleep(60) through the proxy in $elapsed ms"

# ---- a client gone mid-query: the proxy cancels the query before it closes
# the connection (a busy backend reads no Terminate, and would outlive the
# pass of its connection)
via_bg -c 'select pg_sleep(60)' postgres >/dev/null 2>&1 &
sleeper=$!
within 10 server_conns_is "and state = 'active' and query = 'select pg_sleep(60)'" -eq 1 ||
	fail "the pg_sleep(60) query did not start"
t0=$(now_ms)
kill -KILL "$sleeper"
wait "$sleeper" 2>/dev/null || true
within 5 server_conns_is "and query = 'select pg_sleep(60)'" -eq 0 ||
	fail "a client killed mid-query: its backend still runs pg_sleep(60)"
elapsed=$(($(now_ms) - t0))
ok "a client killed mid-query: its backend is cancelled and gone after $elapsed ms"

# ---- a client that disconnects inside a transaction costs that connection
start_scripted intx
echo "begin; insert into shutdown_check values (-2); select 'in transaction';" >&3
within 10 server_conns_is "and state = 'idle in transaction'" -eq 1 || fail "the transaction did not start"
kill -KILL "$scripted_pid"
exec 3>&-
wait "$scripted_pid" 2>/dev/null || true
within 10 server_conns_is "and state = 'idle in transaction'" -eq 0 ||
	fail "a client left inside a transaction: its server connection is still in it"
within 5 pool_is 3 0 || fail "a client left inside a transaction: its pass is still held"
[ "$(via -Atc 'select count(*) from shutdown_check' postgres)" = 0 ] ||
	fail "the abandoned transaction's insert is visible"
ok "a client that disconnects inside a transaction: its server connection is closed (rolled back), the pool goes on"

# ---- a server connection that dies mid-transaction
start_scripted died
echo "begin; select 'in transaction';" >&3
within 10 server_conns_is "and state = 'idle in transaction'" -eq 1 || fail "the transaction did not start"
direct -Atc "select pg_terminate_backend(pid) from pg_stat_activity
	     where $proxy_conns and state = 'idle in transaction'" postgres >/dev/null
echo "select 'after the server died';" >&3
exec 3>&-
wait "$scripted_pid" 2>/dev/null || true
grep -q 'server connection was lost' "$data/died.out" ||
	{ cat "$data/died.out"; fail "no error for a server connection lost mid-transaction"; }
[ "$(via -Atc 'select 42' postgres)" = 42 ] || fail "the pool did not recover from a dead server connection"
ok "a server connection killed mid-transaction: the client gets \"$(grep -o 'pgproxy: the server connection[^"]*' "$data/died.out" | head -1)\", the pool recovers"

# ---- server connections the server closes while idle (two loops: the
# taker's peek finds each closed)
killed=$(kill_idle_servers)
[ "$(via -Atc 'select 42' postgres 2>&1)" = 42 ] || fail "a client was handed a closed server connection"
ok "$killed idle server connections closed by the server: the next client is served on a new one"

admin 'SHOW BANDS' >"$data/bands"
stop_proxy signal
ok "SIGTERM: the proxy exits 0 ($(awk -F'|' '{ n += $3 } END { print n }' "$data/bands") transactions admitted)"

# ---- proxy B: pool 1, 1 s wait timeout; --wait-timeout and SHUTDOWN
start_proxy --pool-size 1 --wait-timeout 1s --threads 2
start_scripted holder
echo "begin; insert into shutdown_check values (1); select 'holding';" >&3
within 10 server_conns_is "and state = 'idle in transaction'" -eq 1 || fail "the holder's transaction did not start"

t0=$(now_ms)
if via -v VERBOSITY=verbose -c 'select 1' postgres >"$data/timeout.out" 2>&1; then
	fail "a queued client was served while the only connection was held"
fi
elapsed=$(($(now_ms) - t0))
grep -q '57014' "$data/timeout.out" && grep -q 'wait-timeout' "$data/timeout.out" ||
	{ cat "$data/timeout.out"; fail "--wait-timeout did not give the 57014 error"; }
[ "$elapsed" -ge 1000 ] && [ "$elapsed" -lt 4000 ] || fail "--wait-timeout 1s ended the wait after $elapsed ms"
ok "--wait-timeout 1s: after $elapsed ms, $(grep -o '57014.*' "$data/timeout.out" | head -1)"

via_bg -c 'select 1' postgres >"$data/queued.out" 2>&1 &
queued=$!
within 10 pool_is 6 1 || fail "the second client is not queued"
admin 'SHUTDOWN' >/dev/null
status=0
wait "$queued" || status=$?
[ "$status" -ne 0 ] && grep -q 'shutting down' "$data/queued.out" ||
	{ cat "$data/queued.out"; fail "SHUTDOWN: the queued client did not get an error"; }
echo "commit;" >&3
exec 3>&-
status=0
wait "$scripted_pid" || status=$?
grep -q '^COMMIT' "$data/holder.out" || { cat "$data/holder.out"; fail "SHUTDOWN: the open transaction did not commit"; }
stop_proxy shutdown
[ "$(direct -Atc 'select count(*) from shutdown_check where v = 1' postgres)" = 1 ] ||
	fail "SHUTDOWN: the committed row is missing"
ok "SHUTDOWN: the queued client gets \"$(grep -o 'pgproxy is shutting down' "$data/queued.out" | head -1)\", the open transaction commits, the proxy exits 0"

# ---- proxy C: server connection lifecycle
start_proxy --pool-size 2 --server-idle-timeout 1s --server-lifetime 2s
[ "$(via -Atc 'select 1' postgres)" = 1 ] || fail "a query through proxy C"
within 10 server_conns_is '' -eq 0 || fail "--server-idle-timeout 1s: $(server_conns '') idle server connections left"
ok "--server-idle-timeout 1s: the idle server connection is closed"
direct -qc 'create table lifetime_pids (pid int)' postgres
cat >"$data/lifetime.sql" <<'SQL'
insert into lifetime_pids select pg_backend_pid();
SQL
pgbench -n -c 2 -T 5 -f "$data/lifetime.sql" -h 127.0.0.1 -p "$port" postgres >"$data/lifetime.log" 2>&1 ||
	{ cat "$data/lifetime.log"; fail "pgbench under --server-lifetime"; }
pids=$(direct -Atc 'select count(distinct pid) from lifetime_pids' postgres)
[ "$pids" -ge 4 ] || fail "--server-lifetime 2s: $pids server connections served 5 s of load, not retired"
grep -q '^number of failed transactions: 0 ' "$data/lifetime.log" || fail "--server-lifetime: failed transactions"
ok "--server-lifetime 2s: $pids server connections served 5 s of pgbench (retired when idle, 0 failed)"
stop_proxy signal

# ---- proxy D: one loop, which watches its idle server connections: one
# the server closes is dropped at once, without a client asking for it,
# and never handed out
start_proxy --pool-size 3
pgbench -n -c 3 -t 20 -S -h 127.0.0.1 -p "$port" postgres >"$data/idle_kill.log" 2>&1 ||
	{ cat "$data/idle_kill.log"; fail "pgbench through proxy D"; }
idle_servers() { [ "$(pool 5)" -ge 1 ] && [ "$(pool 5)" = "$(pool 4)" ]; }
within 10 idle_servers || fail "proxy D: $(pool 4) server connections, $(pool 5) idle"
killed=$(kill_idle_servers)
within 5 pool_is 4 0 || fail "proxy D kept $(pool 4) server connections the server closed"
[ "$(via -Atc 'select 42' postgres 2>&1)" = 42 ] || fail "a client was handed a closed server connection"
ok "one loop: $killed idle server connections closed by the server are dropped unasked, the next client is served"
stop_proxy signal

# ---- proxy E: a server that accepts and never answers
/usr/bin/python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
print(s.getsockname()[1], flush=True)
conns = []
end = time.time() + 60
s.settimeout(1)
while time.time() < end:
    try: conns.append(s.accept()[0])
    except socket.timeout: pass
' >"$data/silent.port" &
silent=$!
silent_stop() { kill "$silent" 2>/dev/null || true; }
cleanup_hooks="$cleanup_hooks silent_stop"
within 10 test -s "$data/silent.port" || fail "the silent server did not start"
: >"$data/proxy.log"
"$proxy" --listen 127.0.0.1:0 --server "host=127.0.0.1 port=$(cat "$data/silent.port")" \
	--auth-type trust --admin-users pgproxy --server-connect-timeout 1s --client-login-timeout 10s 2>"$data/proxy.log" &
proxy_pid=$!
within 20 grep -q 'listening on' "$data/proxy.log" || fail "proxy E did not start"
port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$data/proxy.log")
t0=$(now_ms)
via -Atc 'select 1' postgres >"$data/silent.out" 2>&1 && fail "a client was served by a silent server"
elapsed=$(($(now_ms) - t0))
grep -q 'server-connect-timeout' "$data/silent.out" || { cat "$data/silent.out"; fail "no --server-connect-timeout error"; }
[ "$elapsed" -lt 4000 ] || fail "--server-connect-timeout 1s took $elapsed ms"
ok "--server-connect-timeout 1s: after $elapsed ms, $(grep -o 'pgproxy: no connection[^"]*' "$data/silent.out" | head -1)"
stop_proxy signal
