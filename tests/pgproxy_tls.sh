#!/bin/sh
# SPDX-License-Identifier: MIT
# pgproxy with TLS on both sides (--tls-cert/--tls-key for clients,
# sslmode= in --server), against tests/pglib.sh's throwaway cluster made to
# accept only TLS over TCP (pg_hba.conf: hostssl, scram-sha-256), with
# certificates the test makes (a CA, and a certificate for 127.0.0.1 and
# localhost).  Pinned down:
#   - psql with sslmode=verify-full through the proxy, its session TLS on
#     both sides (\conninfo, pg_stat_ssl); channel_binding=require
#     (SCRAM-SHA-256-PLUS, bound to the proxy's certificate); a client
#     trusting another CA refused; --tls-require refuses clients in the
#     clear;
#   - the client stacks (asyncpg, psycopg 3, psycopg2, PgJDBC,
#     node-postgres where installed) with verify-full, right and wrong
#     passwords;
#   - 20 MB of rows through TLS on both sides, byte for byte as direct;
#     pgbench over TLS with no failed transaction, and again with server
#     connections retired every 200 ms (each made again in time);
#   - a CancelRequest stops a query of a TLS session;
#   - TLS on one side only, either side;
#   - a certificate flight of some 50 KB to a client with a small window
#     (1460-byte MSS, 4 KiB buffer): the handshake completes at once;
#   - no busy loop: a client that stops reading while rows trickle in over
#     TLS, a server silent after its 'S';
#   - towards the server: verify-full with another CA, or with a
#     certificate for another host, refused (the error says why),
#     sslmode=require against a server that answers 'N' refused;
#   - hostile clients: bytes in the clear after an SSLRequest (FATAL 08P01),
#     a broken handshake, a client quiet after 'S' (closed by
#     --client-login-timeout); the proxy lives on.
set -eu
name=pgproxy_tls
pgport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
. "$(dirname "$0")/pglib.sh"
command -v openssl >/dev/null || { echo "$name: no openssl"; exit 77; }

# the certificates: a CA, the proxy's and the server's (one will do), and
# another CA that signed nothing here
mk() { openssl "$@" >/dev/null 2>&1 || fail "openssl $1 failed"; }
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
mk req -x509 $ec -keyout "$data/ca.key" -out "$data/ca.crt" -days 2 -subj /CN=pgproxy-test-ca
mk req -x509 $ec -keyout "$data/other.key" -out "$data/other.crt" -days 2 -subj /CN=another-ca
mk req $ec -keyout "$data/cert.key" -out "$data/cert.csr" -subj /CN=localhost
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$data/san.ext"
mk x509 -req -in "$data/cert.csr" -CA "$data/ca.crt" -CAkey "$data/ca.key" -CAcreateserial \
	-out "$data/cert.crt" -days 2 -extfile "$data/san.ext"
mk req $ec -keyout "$data/elsewhere.key" -out "$data/elsewhere.csr" -subj /CN=elsewhere
printf 'subjectAltName=DNS:elsewhere\n' >"$data/elsewhere.ext"
mk x509 -req -in "$data/elsewhere.csr" -CA "$data/ca.crt" -CAkey "$data/ca.key" -CAcreateserial \
	-out "$data/elsewhere.crt" -days 2 -extfile "$data/elsewhere.ext"
chmod 600 "$data/cert.key"
[ "$(id -u)" -ne 0 ] || chown postgres "$data/cert.key" "$data/cert.crt"

start_cluster -c port="$pgport" -c listen_addresses=127.0.0.1 -c ssl=on \
	-c ssl_cert_file="$data/cert.crt" -c ssl_key_file="$data/cert.key"
direct -q postgres <<'SQL'
SET password_encryption = 'scram-sha-256';
CREATE ROLE alice LOGIN PASSWORD 'alice-pw';
CREATE ROLE bob LOGIN PASSWORD 'bob-pw';
SQL
cat >"$data/db/pg_hba.conf" <<'HBA'
local all pgproxy trust
local all all scram-sha-256
hostssl all all 127.0.0.1/32 scram-sha-256
HBA
as_owner pg_ctl -D "$data/db" reload >/dev/null
within 10 sh -c "! PGPASSWORD=alice-pw psql -X 'host=127.0.0.1 port=$pgport user=alice dbname=postgres sslmode=disable' -Atc 'select 1' 2>/dev/null" ||
	fail "the server takes TCP in the clear"
PGPASSWORD=alice-pw psql -X "host=127.0.0.1 port=$pgport user=alice dbname=postgres sslmode=require" -Atc 'select 1' >/dev/null ||
	fail "the server does not take TLS"

(
	umask 077
	printf '"alice" "alice-pw"\n"bob" "bob-pw"\n"pgproxy" "admin-pw"\n' >"$data/users.txt"
)
export PGPASSWORD=admin-pw PGSSLMODE=verify-full PGSSLROOTCERT=$data/ca.crt
server="host=127.0.0.1 port=$pgport sslmode=verify-full sslrootcert=$data/ca.crt"
start_proxy --server "$server" --auth-file "$data/users.txt" --auth-type scram-sha-256 --tls-cert "$data/cert.crt" \
	--tls-key "$data/cert.key" --tls-require --threads 2 --max-prepared 100 --client-login-timeout 5s
tls_psql() { PGUSER=alice PGPASSWORD=alice-pw psql -X "host=127.0.0.1 port=$port dbname=postgres $1" -Atc "$2"; }

tls_psql "" '\conninfo' | grep -q 'SSL connection' || fail "the client's session is not TLS"
[ "$(tls_psql "" 'select ssl from pg_stat_ssl where pid = pg_backend_pid()')" = t ] ||
	fail "the proxy's server connection is not TLS"
ok "verify-full through the proxy: TLS to the client and to the server"
[ "$(tls_psql 'channel_binding=require' 'select current_user')" = alice ] ||
	fail "channel_binding=require: SCRAM-SHA-256-PLUS does not log in"
ok "channel binding (SCRAM-SHA-256-PLUS, tls-server-end-point)"
out=$(PGSSLROOTCERT=$data/other.crt tls_psql '' 'select 1' 2>&1) && fail "a client trusting another CA got in"
echo "$out" | grep -q 'certificate verify failed' || fail "another CA: $out"
out=$(tls_psql 'sslmode=disable' 'select 1' 2>&1) && fail "--tls-require let a client in the clear in"
echo "$out" | grep -q 'TLS is required' || fail "in the clear: $out"
ok "a client trusting another CA, or in the clear, is refused"

tried=''
for stack in $(login_stacks); do
	out=$(PGCLIENT_SSLROOTCERT=$data/ca.crt stack_login "$stack" bob bob-pw)
	[ "$out" = "user bob" ] || fail "$stack over TLS, the right password: $out"
	out=$(PGCLIENT_SSLROOTCERT=$data/ca.crt stack_login "$stack" bob bob-pwx)
	case $out in "refused "*) ;; *) fail "$stack over TLS, a wrong password: $out" ;; esac
	out=$(PGCLIENT_SSLROOTCERT=$data/other.crt stack_login "$stack" bob bob-pw)
	case $out in "refused "* | *rror*) ;; *) fail "$stack trusting another CA: $out" ;; esac
	tried="$tried $stack"
done
[ -n "$tried" ] || fail "no client stack to try"
ok "client stacks with verify-full, right and wrong passwords, another CA:$tried"

# 20 MB of rows: records split across reads, bytes OpenSSL holds decrypted
q="select i, repeat(md5(i::text), 31250) from generate_series(1, 20) i"
tls_psql '' "$q" | md5sum >"$data/via.md5"
direct -Atc "$q" postgres | md5sum >"$data/direct.md5"
cmp -s "$data/via.md5" "$data/direct.md5" || fail "20 MB through TLS differ from direct"
cat >"$data/one.sql" <<'SQL'
select 1;
SQL
PGUSER=alice PGPASSWORD=alice-pw PGSSLMODE=require pgbench -n -c 8 -j 2 -T 3 -f "$data/one.sql" \
	-h 127.0.0.1 -p "$port" postgres >"$data/pgbench.log" 2>&1 || { cat "$data/pgbench.log"; fail "pgbench over TLS failed"; }
grep -q 'number of failed transactions: 0 ' "$data/pgbench.log" || fail "pgbench over TLS: $(cat "$data/pgbench.log")"
ok "20 MB of rows byte for byte, and pgbench, over TLS on both sides"

# a CancelRequest (libpq sends it in the clear) stops a TLS session's query
/usr/bin/python3 - "$port" "$data/ca.crt" <<'PY' || fail "the cancel through a TLS session"
import sys, threading, time, psycopg
port, ca = int(sys.argv[1]), sys.argv[2]
c = psycopg.connect(host="127.0.0.1", port=port, user="alice", password="alice-pw", dbname="postgres",
                    sslmode="verify-full", sslrootcert=ca)
assert c.pgconn.ssl_in_use
def later():  # once the query runs (polled, 10 s at most), cancel it
    w = psycopg.connect(host="127.0.0.1", port=port, user="alice", password="alice-pw", dbname="postgres",
                        sslmode="verify-full", sslrootcert=ca, autocommit=True)
    end = time.monotonic() + 10
    while time.monotonic() < end:
        if w.execute("select count(*) from pg_stat_activity where state = 'active'"
                     " and query = 'select pg_sleep(30)'").fetchone()[0]:
            c.cancel()
            return
        time.sleep(0.05)
threading.Thread(target=later, daemon=True).start()
t0 = time.monotonic()
try:
    c.execute("select pg_sleep(30)")
    sys.exit("the query was not cancelled")
except psycopg.errors.QueryCanceled:
    print(f"pgproxy_tls: cancelled after {time.monotonic() - t0:.1f} s")
PY
ok "a CancelRequest stops a query of a TLS session"

# no busy loop while TLS waits: a client that stops reading a result
# that trickles in over TLS from the server (the proxy's bounds stop its
# reads: the server ends up blocked writing, ClientWrite)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
idle_cpu() { # PID SECONDS: at most a tenth of one CPU over SECONDS
	t0=$(cpu_ticks "$1")
	sleep "$2" # a measuring window, not synchronisation
	t1=$(cpu_ticks "$1")
	[ $((t1 - t0)) -le $(($2 * $(getconf CLK_TCK) / 10)) ] || { echo "$((t1 - t0)) ticks in $2 s"; return 1; }
}
PGUSER=alice PGPASSWORD=alice-pw psql -X "host=127.0.0.1 port=$port dbname=postgres" -Atc \
	"select repeat('x', 10000), pg_sleep(0.001) from generate_series(1, 20000)" >/dev/null 2>&1 &
slow=$!
alice_waits() { [ "$(direct -Atc "select count(*) from pg_stat_activity where usename = 'alice' and $1" postgres)" = 1 ]; }
within 20 alice_waits "query like 'select repeat%'" || fail "the slow query did not start"
kill -STOP "$slow"
within 20 alice_waits "wait_event = 'ClientWrite'" || fail "the server never waited on the stopped client"
out=$(idle_cpu "$proxy_pid" 2) || fail "a stopped client over TLS spins the proxy: $out"
kill -KILL "$slow"
wait "$slow" 2>/dev/null || true
ok "a client that stops reading over TLS costs the proxy no CPU"

# hostile clients
/usr/bin/python3 - "$port" <<'PY' || fail "hostile TLS clients"
import socket, struct, sys, time
port = int(sys.argv[1])
ssl_request = struct.pack("!ii", 8, 80877103)
def conn():
    return socket.create_connection(("127.0.0.1", port), timeout=10)
def drain(s):
    out = b""
    try:
        while (d := s.recv(4096)):
            out += d
    except (ConnectionResetError, socket.timeout):
        pass
    return out
# bytes in the clear after the SSLRequest, sent with it
s = conn()
startup = b"user\0alice\0database\0postgres\0\0"
s.sendall(ssl_request + struct.pack("!ii", len(startup) + 8, 196608) + startup)
out = drain(s)
assert out[:1] == b"E" and b"C08P01" in out and b"unencrypted data after SSL request" in out, out
# a broken handshake: garbage after 'S'
s = conn()
s.sendall(ssl_request)
assert s.recv(1) == b"S"
s.sendall(b"\x16\x03\x01\x00\x05garbage" * 10)
drain(s)
# quiet after 'S': closed by --client-login-timeout (5 s)
s = conn()
s.sendall(ssl_request)
assert s.recv(1) == b"S"
t0 = time.monotonic()
drain(s)
took = time.monotonic() - t0
assert took < 10, took
print(f"pgproxy_tls: hostile: injection refused, garbage closed, quiet closed after {took:.1f} s")
PY
[ "$(tls_psql '' 'select 1')" = 1 ] || fail "the proxy does not answer after the hostile clients"
ok "hostile: bytes in the clear after SSLRequest, a broken handshake, a quiet one"

# a second proxy: LOGNAME CLIENT-SSLMODE --server-spec [flags]: what alice's
# `select ssl from pg_stat_ssl` through it prints (or its error), exit
# status psql's
try_proxy() {
	log=$1 mode=$2 spec=$3
	shift 3
	"$proxy" --listen 127.0.0.1:0 --server "$spec" --auth-file "$data/users.txt" --admin-users pgproxy \
		--server-connect-timeout 5s "$@" 2>"$data/$log.log" &
	p2=$!
	within 10 grep -q 'listening on' "$data/$log.log" || fail "the second proxy did not start"
	p2port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$data/$log.log")
	st=0
	PGUSER=alice PGPASSWORD=alice-pw PGSSLMODE=$mode psql -X -h 127.0.0.1 -p "$p2port" \
		-Atc 'select ssl from pg_stat_ssl where pid = pg_backend_pid()' postgres 2>&1 || st=$?
	kill -TERM "$p2"
	wait "$p2" || true
	return $st
}

# TLS on one side only: clients over TLS, the server on its Unix socket;
# clients in the clear, the server over TLS
out=$(try_proxy clientonly verify-full "host=$data port=$pgport" --tls-cert "$data/cert.crt" \
	--tls-key "$data/cert.key") || fail "TLS to clients only: $out"
[ "$out" = f ] || fail "TLS to clients only: the server side says $out"
out=$(try_proxy serveronly disable "$server") || fail "TLS to the server only: $out"
[ "$out" = t ] || fail "TLS to the server only: the server side says $out"
ok "TLS on one side only, either side"

# Server connections made again and again over TLS (retired every 200 ms,
# two loops) under pgbench: every one is made in time.  A connection whose
# first write waited for the handshake, which a read then finished, was
# watched for bytes the server never sent (it waited for ours) until
# --server-connect-timeout, and a client's transaction failed with it (here,
# in 4 of 13 eight-second runs while testing the ThreadSanitizer build, 0
# of 6 in the plain one).
"$proxy" --listen 127.0.0.1:0 --server "$server" --auth-file "$data/users.txt" --auth-type scram-sha-256 \
	--tls-cert "$data/cert.crt" --tls-key "$data/cert.key" --threads 2 --server-lifetime 200ms \
	--server-connect-timeout 5s 2>"$data/churn.log" &
p2=$!
within 10 grep -q 'listening on' "$data/churn.log" || fail "the churning proxy did not start"
p2port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$data/churn.log")
st=0
PGUSER=alice PGPASSWORD=alice-pw PGSSLMODE=require pgbench -n -c 8 -j 2 -T 8 -f "$data/one.sql" \
	-h 127.0.0.1 -p "$p2port" postgres >"$data/churn.out" 2>&1 || st=$?
kill -TERM "$p2"
wait "$p2" || true
[ "$st" -eq 0 ] && grep -q 'number of failed transactions: 0 ' "$data/churn.out" ||
	{ cat "$data/churn.out"; fail "pgbench over TLS with server connections retired every 200 ms"; }
ok "server connections over TLS retired every 200 ms under pgbench: each made again in time ($(grep -o 'tps = [0-9.]*' "$data/churn.out"))"

# a certificate flight larger than the socket takes at once (a leaf of
# some 50 KB; a client that announces a 1460-byte MSS, as over Ethernet,
# and reads through a 4 KiB buffer): the handshake's read must wait for
# the socket to drain (EPOLLOUT), not for bytes the client never sends
# first, or the login stalls until --client-login-timeout
/usr/bin/python3 -c 'print("subjectAltName=DNS:localhost," + ",".join(f"DNS:n{i}.pgproxy-test.invalid" for i in range(3300)))' \
	>"$data/big.ext"
mk req $ec -keyout "$data/big.key" -out "$data/big.csr" -subj /CN=localhost
mk x509 -req -in "$data/big.csr" -CA "$data/ca.crt" -CAkey "$data/ca.key" -CAcreateserial \
	-out "$data/big.crt" -days 2 -extfile "$data/big.ext"
chmod 600 "$data/big.key"
"$proxy" --listen 127.0.0.1:0 --server "host=$data port=$pgport" --auth-type trust --tls-cert "$data/big.crt" \
	--tls-key "$data/big.key" --client-login-timeout 60s 2>"$data/big.log" &
p4=$!
within 10 grep -q 'listening on' "$data/big.log" || fail "the proxy with the large certificate did not start"
p4port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$data/big.log")
cat >"$data/bigflight.py" <<'PY'
import socket, ssl, struct, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1460)
s.settimeout(30)
s.connect(("127.0.0.1", int(sys.argv[1])))
s.sendall(struct.pack("!ii", 8, 80877103))
assert s.recv(1) == b"S"
t0 = time.monotonic()
tls = ssl.create_default_context(cafile=sys.argv[2]).wrap_socket(s, server_hostname="localhost")
took = time.monotonic() - t0
size = len(tls.getpeercert(binary_form=True))
assert size > 40000, f"the certificate is only {size} bytes: the case is not made"
startup = b"user\0pgproxy\0database\0postgres\0\0"
tls.sendall(struct.pack("!ii", len(startup) + 8, 196608) + startup)
assert tls.recv(9)[:1] == b"R", "no authentication answer after the handshake"
assert took < 10, f"the handshake took {took:.1f} s"
print(f"a {size}-byte certificate in {took:.2f} s")
PY
out=$(/usr/bin/python3 "$data/bigflight.py" "$p4port" "$data/ca.crt" 2>&1) ||
	fail "a large certificate flight to a slow reader: $out"
kill -TERM "$p4"
wait "$p4" || true
ok "a large certificate flight to a client with a small window: $out"

# towards the server: another CA, and a server that says 'N'
refused() { ! try_proxy "$@"; }
out=$(refused otherca disable "host=127.0.0.1 port=$pgport sslmode=verify-full sslrootcert=$data/other.crt") ||
	fail "verify-full with another CA: a server connection was made"
echo "$out" | grep -q "server's certificate is refused" || fail "verify-full with another CA: $out"
/usr/bin/python3 -c '
import socket, sys
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(4)
print(l.getsockname()[1], flush=True)
while True:
    c, _ = l.accept()
    c.recv(8); c.sendall(b"N"); c.close()
' >"$data/says-n.port" &
says_n=$!
within 10 test -s "$data/says-n.port" || fail "the 'N' server did not start"
out=$(refused saysn disable "host=127.0.0.1 port=$(cat "$data/says-n.port") sslmode=require") ||
	fail "sslmode=require against 'N': a server connection was made"
kill "$says_n"
echo "$out" | grep -q 'does not accept TLS' || fail "sslmode=require against 'N': $out"
# ...and one that says 'S' and then nothing: the handshake waits for it
# without a busy loop, and --server-connect-timeout ends the attempt
/usr/bin/python3 -c '
import socket, sys
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(4)
print(l.getsockname()[1], flush=True)
held = []
while True:
    c, _ = l.accept()
    c.recv(8); c.sendall(b"S"); held.append(c)
    print("accepted", flush=True)
' >"$data/says-s.port" &
says_s=$!
within 10 test -s "$data/says-s.port" || fail "the silent 'S' server did not start"
"$proxy" --listen 127.0.0.1:0 --server "host=127.0.0.1 port=$(head -n 1 "$data/says-s.port") sslmode=require" \
	--auth-type trust --server-connect-timeout 4s 2>"$data/says-s.log" &
p3=$!
within 10 grep -q 'listening on' "$data/says-s.log" || fail "the proxy before the silent server did not start"
p3port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$data/says-s.log")
PGSSLMODE=disable PGUSER=alice psql -X -h 127.0.0.1 -p "$p3port" -Atc 'select 1' postgres >"$data/says-s.out" 2>&1 &
silent_client=$!
within 10 grep -q accepted "$data/says-s.port" || fail "the proxy did not connect to the silent server"
out=$(idle_cpu "$p3" 2) || fail "a TLS handshake waiting on a silent server spins the proxy: $out"
wait "$silent_client" && fail "a client got in through a silent server"
grep -q 'server-connect-timeout' "$data/says-s.out" || fail "the silent server: $(cat "$data/says-s.out")"
kill -TERM "$p3" "$says_s"
wait "$p3" || true
# a server whose certificate chains to the CA but names another host
/usr/bin/python3 - "$data/elsewhere.crt" "$data/elsewhere.key" >"$data/elsewhere.port" <<'PY' &
import socket, ssl, sys
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(4)
print(l.getsockname()[1], flush=True)
while True:
    c, _ = l.accept()
    try:
        c.recv(8); c.sendall(b"S")
        ctx.wrap_socket(c, server_side=True).recv(1)
    except (OSError, ssl.SSLError):
        pass
    c.close()
PY
elsewhere=$!
within 10 test -s "$data/elsewhere.port" || fail "the 'elsewhere' server did not start"
out=$(refused elsewhere disable "host=127.0.0.1 port=$(cat "$data/elsewhere.port") sslmode=verify-full sslrootcert=$data/ca.crt") ||
	fail "verify-full with a certificate for another host: a server connection was made"
kill "$elsewhere"
echo "$out" | grep -q "server's certificate is refused.*hostname mismatch\|server's certificate is refused.*IP address mismatch" ||
	fail "verify-full, a certificate for another host: $out"
ok "towards the server: another CA, another host's certificate, 'N' under sslmode=require: refused"

admin SHUTDOWN >/dev/null
stop_proxy admin
ok "clean shutdown"
