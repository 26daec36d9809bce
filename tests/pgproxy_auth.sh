#!/bin/sh
# SPDX-License-Identifier: MIT
# pgproxy --auth-file against a real PostgreSQL whose pg_hba.conf asks for
# SCRAM-SHA-256 (MD5 and password for one user each), tests/pglib.sh's
# throwaway cluster.  Pinned down:
#   - clients prove their password with SCRAM-SHA-256 (psql, pgbench with a
#     new connection per transaction, asyncpg, psycopg 3, psycopg2, PgJDBC,
#     node-postgres where installed, and tests/pgproxy_auth.py's client
#     written from the RFCs); a wrong password and an unknown user get the
#     same FATAL 28P01; hostile SASL messages get 08P01 and a close;
#   - pgproxy logs in to the server with SCRAM from a password, with SCRAM
#     from a SCRAM secret copied from pg_authid (the ClientKey a client
#     proved), with MD5 and with a cleartext password; a user whose file
#     line cannot serve (an md5 secret under SCRAM) is refused and logged;
#     a server that skips SASLFinal is refused;
#   - the admin console: --admin-users run everything, --stats-users SHOW
#     only (42501 for the rest), anyone else is refused at login (28000);
#   - SIGHUP re-reads the file; a bad or world-readable file keeps the old
#     one (logged); pgproxy refuses to start without an auth choice, or
#     on a world-readable file;
#   - no password or secret in the log.
set -eu
name=pgproxy_auth
. "$(dirname "$0")/pglib.sh"
command -v python3 >/dev/null || { echo "$name: no python3"; exit 77; }

start_cluster
direct -q postgres <<'SQL'
SET password_encryption = 'scram-sha-256';
CREATE ROLE alice LOGIN PASSWORD 'al"ice pw';
CREATE ROLE bob LOGIN PASSWORD 'bob-secret-pw';
CREATE ROLE dave LOGIN PASSWORD 'dave-pw';
CREATE ROLE frank LOGIN PASSWORD 'frank-pw';
SET password_encryption = 'md5';
CREATE ROLE carol LOGIN PASSWORD 'carol-pw';
CREATE ROLE erin LOGIN PASSWORD 'erin-pw';
SQL
cat >"$data/db/pg_hba.conf" <<'HBA'
local all pgproxy trust
local all carol md5
local all dave password
local all all scram-sha-256
HBA
as_owner pg_ctl -D "$data/db" reload >/dev/null
within 10 sh -c "! PGUSER=alice PGPASSWORD=wrong psql -X -h '$data' -p 5432 -Atc 'select 1' postgres 2>/dev/null" ||
	fail "the server does not ask for passwords"
bob_secret=$(direct -Atc "select rolpassword from pg_authid where rolname = 'bob'" postgres)
erin_secret=$(direct -Atc "select rolpassword from pg_authid where rolname = 'erin'" postgres)
case $bob_secret in SCRAM-SHA-256\$*) ;; *) fail "bob's secret is not SCRAM: $bob_secret" ;; esac

users=$data/users.txt
(
	umask 077
	cat >"$users" <<EOT
; pgbouncer's userlist format
"alice" "al""ice pw"
"bob" "$bob_secret"
"carol" "carol-pw"
"dave" "dave-pw"
"erin" "$erin_secret"
"pgproxy" "admin-pw"
EOT
)
export PGPASSWORD=admin-pw # the console's admin, for pglib's admin()

# Without --auth-file or --auth-type trust pgproxy does not start, nor on
# a file others may read.
st=0
"$proxy" --listen 127.0.0.1:0 --server "host=$data port=5432" 2>"$data/noauth.log" || st=$?
[ "$st" -eq 2 ] && grep -q 'clients must be authenticated' "$data/noauth.log" ||
	fail "pgproxy started with no auth choice (status $st)"
cp "$users" "$data/open.txt"
chmod 644 "$data/open.txt"
st=0
"$proxy" --listen 127.0.0.1:0 --server "host=$data port=5432" --auth-file "$data/open.txt" 2>"$data/open.log" || st=$?
[ "$st" -eq 2 ] && grep -q 'mode 0644' "$data/open.log" || fail "pgproxy started on a world-readable auth file"
ok "no start without an auth choice, nor on a world-readable file"

start_proxy --auth-file "$users" --auth-type scram-sha-256 --admin-users pgproxy --stats-users bob --threads 2 --max-prepared 100 \
	--client-login-timeout 5s
as_user() { # USER PASSWORD psql-args...
	u=$1 pw=$2
	shift 2
	PGUSER=$u PGPASSWORD=$pw via "$@"
}
login_fails() { # USER PASSWORD WHAT: refused, with pattern WHAT
	out=$(as_user "$1" "$2" -Atc 'select 1' postgres 2>&1) && fail "$1 logged in with password '$2'"
	echo "$out" | grep -q "$3" || fail "$1: expected \"$3\", got: $out"
}

[ "$(as_user alice 'al"ice pw' -Atc 'select current_user' postgres)" = alice ] ||
	fail "alice (a password in the file) does not log in"
ok "SCRAM from the client, SCRAM to the server from a password (with a quote in it)"
login_fails alice 'al"ice pwx' 'password authentication failed for user "alice"'
login_fails nobody x 'password authentication failed for user "nobody"'
ok "a wrong password and an unknown user: the same refusal"

[ "$(as_user bob bob-secret-pw -Atc 'select current_user' postgres)" = bob ] ||
	fail "bob (a SCRAM secret in the file) does not log in"
login_fails bob bob-secret-pwx 'password authentication failed for user "bob"'
ok "a SCRAM secret copied from pg_authid: the client checked, the server answered with its ClientKey"

[ "$(as_user carol carol-pw -Atc 'select current_user' postgres)" = carol ] || fail "carol (MD5 to the server) does not log in"
[ "$(as_user dave dave-pw -Atc 'select current_user' postgres)" = dave ] || fail "dave (a cleartext password to the server) does not log in"
ok "MD5 and cleartext towards the server"
login_fails erin erin-pw 'password authentication failed'
grep -q 'user "erin" has an MD5 secret' "$data/proxy.log" || fail "erin's md5 secret under SCRAM is not logged"
ok "an md5 secret cannot check a SCRAM login: refused, and the log says why"

# many logins at once: a new connection per transaction
cat >"$data/one.sql" <<'SQL'
select 1;
SQL
PGUSER=alice PGPASSWORD='al"ice pw' pgbench -n -C -c 4 -j 2 -t 25 -f "$data/one.sql" -h 127.0.0.1 -p "$port" postgres \
	>"$data/pgbench.log" 2>&1 || { cat "$data/pgbench.log"; fail "pgbench with SCRAM logins failed"; }
grep -q 'number of transactions actually processed: 100/100' "$data/pgbench.log" || fail "pgbench lost transactions"
ok "pgbench -C: 100 SCRAM logins, every transaction done"

# the client stacks people use, right and wrong passwords (SQLSTATE where
# the driver tells it: psycopg's come from libpq, which keeps only the text)
tried=''
for stack in $(login_stacks); do
	for u in "alice:al\"ice pw" "bob:bob-secret-pw"; do
		out=$(stack_login "$stack" "${u%%:*}" "${u#*:}")
		[ "$out" = "user ${u%%:*}" ] || fail "$stack: ${u%%:*} with the right password: $out"
		out=$(stack_login "$stack" "${u%%:*}" "${u#*:}-wrong")
		case $stack:$out in
		asyncpg:"refused 28P01"* | jdbc:"refused 28P01"* | node:"refused 28P01"*) ;;
		psycopg*:"refused "*"password authentication failed for user \"${u%%:*}\""*) ;;
		*) fail "$stack: ${u%%:*} with a wrong password: $out" ;;
		esac
	done
	tried="$tried $stack"
done
[ -n "$tried" ] || fail "no client stack to try"
ok "client stacks, right and wrong passwords:$tried"

python3 "$(dirname "$0")/pgproxy_auth.py" "$port" alice 'al"ice pw' 5 || fail "the SASL exchange byte by byte"

# the admin console
as_user pgproxy admin-pw -Atc 'SHOW POOLS' pgproxy >/dev/null || fail "the admin cannot SHOW"
as_user pgproxy admin-pw -Atc 'RESIZE postgres 5' pgproxy >/dev/null || fail "the admin cannot RESIZE"
as_user bob bob-secret-pw -Atc 'SHOW BANDS' pgproxy >/dev/null || fail "a stats user cannot SHOW"
out=$(as_user bob bob-secret-pw -Atc 'SHUTDOWN' pgproxy 2>&1) && fail "a stats user ran SHUTDOWN"
echo "$out" | grep -q 'permission denied: SHUTDOWN' || fail "a stats user's SHUTDOWN: $out"
out=$(as_user dave dave-pw -Atc 'SHOW POOLS' pgproxy 2>&1) && fail "dave used the console"
echo "$out" | grep -q 'may not use the admin console' || fail "dave at the console: $out"
out=$(as_user pgproxy wrong -Atc 'SHOW POOLS' pgproxy 2>&1) && fail "the console took a wrong password"
ok "the console: admins, stats users, and nobody else"

# SIGHUP: frank arrives; a bad file, then an open one, are not read
login_fails frank frank-pw 'password authentication failed'
echo '"frank" "frank-pw"' >>"$users"
kill -HUP "$proxy_pid"
within 10 grep -q 'auth file is reloaded: 7 users' "$data/proxy.log" || fail "no reload on SIGHUP"
[ "$(as_user frank frank-pw -Atc 'select current_user' postgres)" = frank ] || fail "frank is not let in after SIGHUP"
cp "$users" "$data/good.txt"
echo '"broken line' >>"$users"
kill -HUP "$proxy_pid"
within 10 grep -q 'line 9: .*the old one stays\|not reloaded.*line 9' "$data/proxy.log" || fail "a bad file is not refused with its line"
[ "$(as_user frank frank-pw -Atc 'select current_user' postgres)" = frank ] || fail "a bad file replaced the good one"
cp "$data/good.txt" "$users"
chmod 644 "$users"
kill -HUP "$proxy_pid"
within 10 grep -q 'not reloaded.*mode 0644' "$data/proxy.log" || fail "a world-readable file is read on SIGHUP"
chmod 600 "$users"
ok "SIGHUP: re-read, a bad file and a world-readable one keep the old table"

# a server that skips SASLFinal (AuthenticationOk right after pgproxy's
# proof) has not shown it knows the secret: refused
/usr/bin/python3 - <<'PY' >"$data/skips.port" &
import socket, struct
def msg(t, b): return t + struct.pack("!i", len(b) + 4) + b
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(4)
print(l.getsockname()[1], flush=True)
while True:
    c, _ = l.accept()
    try:
        c.recv(4096)  # the startup packet
        c.sendall(msg(b"R", struct.pack("!i", 10) + b"SCRAM-SHA-256\0\0"))
        first = c.recv(4096)
        nonce = first.split(b"r=")[1].split(b",")[0].rstrip(b"\0")
        c.sendall(msg(b"R", struct.pack("!i", 11) + b"r=" + nonce + b"xyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"))
        c.recv(4096)  # the proof
        c.sendall(msg(b"R", struct.pack("!i", 0)))
        c.recv(4096)
    except OSError:
        pass
    c.close()
PY
skips=$!
within 10 test -s "$data/skips.port" || fail "the server that skips SASLFinal did not start"
"$proxy" --listen 127.0.0.1:0 --server "host=127.0.0.1 port=$(cat "$data/skips.port")" --auth-type trust \
	--auth-file "$users" 2>"$data/skips.log" &
p2=$!
within 10 grep -q 'listening on' "$data/skips.log" || fail "the proxy before the skipping server did not start"
p2port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$data/skips.log")
out=$(PGUSER=alice psql -X -h 127.0.0.1 -p "$p2port" -Atc 'select 1' postgres 2>&1) && fail "a server that skipped SASLFinal was taken"
echo "$out" | grep -q 'AuthenticationOk in the middle of SCRAM' || fail "a server that skips SASLFinal: $out"
kill -TERM "$p2" "$skips"
wait "$p2" || true
ok "a server that skips SASLFinal is refused"

for secret in 'al"ice pw' bob-secret-pw carol-pw dave-pw admin-pw frank-pw "$bob_secret" "$erin_secret"; do
	! grep -qF "$secret" "$data/proxy.log" || fail "a secret is in the log: $secret"
done
ok "no password or secret in the log"

admin SHUTDOWN >/dev/null
stop_proxy admin
ok "clean shutdown"
