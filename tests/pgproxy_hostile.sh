#!/bin/bash
# SPDX-License-Identifier: MIT
# examples/pgproxy against hostile clients and a hostile fake server: one
# reproduction per defect of the proxy's robustness issue (the cases are in
# tests/pgproxy_hostile.py, Python 3 standard library, run as
# /usr/bin/python3).  A throwaway cluster (tests/pglib.sh); the cases run in
# groups, one proxy per group with the flags its cases need.  Each case
# reports ok or FAIL on its own line; after each one the proxy must still
# be alive, not spinning and answering its admin console (else the case
# fails and the proxy is restarted for the next).  At each group's end the
# admin console must answer and SIGTERM must make the proxy exit 0.  Every
# wait polls with a deadline and every case runs under `timeout`: a hung
# proxy is a FAIL, never a hang.  Exits 1 if any case failed.
#
#   tests/pgproxy_hostile.sh [CASE...]     from the build folder; CASE: 1a 4 9c...
#
# Flags the proxy does not know (today's binary refuses --max-prepared,
# --client-login-timeout, --ignore-startup-parameters) are dropped, said,
# and the cases run on: those that need the flag fail.
set -u
name=pgproxy_hostile
. "$(dirname "$0")/pglib.sh"
py=$(cd "$(dirname "$0")" && pwd)/pgproxy_hostile.py
PY=/usr/bin/python3 # never the PATH's python3
[ -x "$PY" ] || { echo "$name: no $PY"; exit 77; }
command -v timeout >/dev/null || { echo "$name: no timeout(1)"; exit 77; }

selected=" $* "
wanted() { [ "$selected" = "  " ] || case "$selected" in *" $1 "*) true ;; *) false ;; esac; }

# ASan's quarantine and TSan's shadow inflate RSS (case 6 says how it copes)
sanitizer=
for f in "$proxy" "$(dirname "$proxy")/.libs/pgproxy" "$(dirname "$proxy")/.libs/lt-pgproxy"; do
	[ -f "$f" ] || continue
	grep -aq __asan_init "$f" && sanitizer=address
	grep -aq __tsan_init "$f" && sanitizer=thread
done

failures=0
failed=
report() { # report CASE LINE (LINE starts with ok: or FAIL:)
	echo "$name: $2"
	case "$2" in
	ok:*) ;;
	*)
		failures=$((failures + 1))
		failed="$failed $1"
		[ ! -f "$hlog" ] || tail -n 5 "$hlog" | cut -c1-200 | sed 's/^/  proxy log: /'
		;;
	esac
}

proxy_gone() {
	! kill -0 "$proxy_pid" 2>/dev/null ||
		[ "$(sed 's/.*) \(.\).*/\1/' "/proc/$proxy_pid/stat" 2>/dev/null)" = Z ]
}
proxy_started() { grep -q 'listening on' "$hlog" || proxy_gone; }

# ---- groups: one proxy each, $grp_server, $grp_flags, $grp_nofile, $grp_env
starts=0
hlog=
proxy_up() {
	flags=("${grp_flags[@]}")
	missing=
	while :; do
		starts=$((starts + 1))
		hlog=$data/proxy.$grp.$starts.log
		: >"$hlog"
		(
			[ -z "$grp_nofile" ] || ulimit -n "$grp_nofile"
			[ -z "$grp_env" ] || export $grp_env
			exec "$proxy" --listen 127.0.0.1:0 --server "$grp_server" --auth-type trust \
				--admin-users pgproxy "${flags[@]}" 2>"$hlog"
		) &
		proxy_pid=$!
		within 20 proxy_started || fail "group $grp: the proxy did not start within 20 s"
		grep -q 'listening on' "$hlog" && break
		wait "$proxy_pid" 2>/dev/null
		proxy_pid=
		bad=$(sed -n 's/^pgproxy: unknown option \(--[a-z-]*\).*/\1/p' "$hlog" | head -n 1)
		[ -n "$bad" ] || { cat "$hlog"; fail "group $grp: the proxy did not start"; }
		echo "$name: note: this proxy refuses $bad: group $grp runs without it"
		missing="$missing $bad"
		nf=()
		i=0
		while [ "$i" -lt "${#flags[@]}" ]; do
			if [ "${flags[$i]}" = "$bad" ]; then
				i=$((i + 2))
			else
				nf+=("${flags[$i]}")
				i=$((i + 1))
			fi
		done
		flags=("${nf[@]}")
	done
	port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$hlog")
	within 20 admin 'SHOW POOLS' >/dev/null || fail "group $grp: the admin console does not answer"
}

group() { # group NAME SERVER NOFILE ENV [FLAGS...]: start it if one of CASES is wanted
	grp=$1 grp_server=$2 grp_nofile=$3 grp_env=$4
	shift 4
	grp_flags=("$@")
	proxy_up
}

run_case() {
	c=$1
	out=$(timeout -k 5 90 "$PY" "$py" case "$c" --port "$port" --pid "$proxy_pid" --log "$hlog" \
		--data "$data" --missing "$missing" --sanitizer "$sanitizer" 2>&1)
	rc=$?
	[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || out="FAIL: $c: timed out after 90 s (the case hung)"
	[ -n "$out" ] || out="FAIL: $c: no output (exit status $rc)"
	[ "$rc" -eq 0 ] || case "$out" in FAIL:*) ;; *) out="FAIL: $c: exit status $rc: $out" ;; esac
	if ! health=$("$PY" "$py" health --port "$port" --pid "$proxy_pid" 2>&1); then
		if proxy_gone; then
			status=0
			wait "$proxy_pid" 2>/dev/null || status=$?
			what="the proxy died (exit status $status)"
		else
			what="the proxy is wedged: $health"
			kill -KILL "$proxy_pid" 2>/dev/null
			wait "$proxy_pid" 2>/dev/null
		fi
		case "$out" in
		ok:*) out="FAIL: ${out#ok: } -- but then $what" ;;
		*) out="$out -- then $what" ;;
		esac
		report "$c" "$out"
		proxy_pid=
		echo "$name: note: restarting the proxy of group $grp"
		proxy_up
		return
	fi
	report "$c" "$out"
}

group_end() { # the admin console answers; SIGTERM: exit 0
	line="ok: $grp: end of group: the admin console answers, SIGTERM: exit 0"
	if ! timeout 20 psql -X -h 127.0.0.1 -p "$port" -Atc 'SHOW POOLS' pgproxy >/dev/null 2>&1; then
		line="FAIL: $grp: end of group: the admin console does not answer"
	fi
	kill -TERM "$proxy_pid" 2>/dev/null
	if within 30 proxy_gone; then
		status=0
		wait "$proxy_pid" 2>/dev/null || status=$?
		if [ "$status" -ne 0 ]; then
			line="FAIL: $grp: end of group: after SIGTERM the proxy exited with status $status"
		elif ! grep -q 'pgproxy: shut down' "$hlog"; then
			line="FAIL: $grp: end of group: no clean shutdown in the log"
		fi
	else
		line="FAIL: $grp: end of group: the proxy did not exit within 30 s of SIGTERM"
		kill -KILL "$proxy_pid" 2>/dev/null
		wait "$proxy_pid" 2>/dev/null
	fi
	proxy_pid=
	report "$grp" "$line"
}

# run_group NAME SERVER NOFILE ENV FLAGS... -- CASES...
run_group() {
	local args=() cases=() seen=0 any=0 a
	for a in "$@"; do
		if [ "$seen" = 1 ]; then
			cases+=("$a")
			wanted "$a" && any=1
		elif [ "$a" = -- ]; then
			seen=1
		else
			args+=("$a")
		fi
	done
	[ "$any" = 1 ] || return 0
	group "${args[@]}"
	for a in "${cases[@]}"; do
		wanted "$a" && run_case "$a"
	done
	group_end
}

# ---- the cluster, and what the cases need in it
start_cluster
{
	echo "create database extra;"
	echo "create database enc template template0 encoding 'UTF8' lc_collate 'C' lc_ctype 'C';"
	echo "create role hostile_noapp login;"
	for i in $(seq -w 1 20); do echo "create role hostile_u$i login;"; done
} | direct -q postgres >/dev/null || fail "setting up the cluster"
direct -qc 'create table enc_t (id int, v text)' enc || fail "setting up the cluster"

# ---- a hostile fake server (bigparam: a 100 KB ParameterStatus at startup;
# badlen: a query answered with a length of 0xFFFFFFFF; other databases sane)
fake_pid=
stop_fake() { [ -z "$fake_pid" ] || kill -TERM "$fake_pid" 2>/dev/null; }
cleanup_hooks="$cleanup_hooks stop_fake"
if wanted 3d || wanted 4; then
	"$PY" "$py" fake-server --port-file "$data/fake.port" &
	fake_pid=$!
	within 10 test -s "$data/fake.port" || fail "the fake server did not start"
fi
fake_port=$(cat "$data/fake.port" 2>/dev/null || echo 1)

real="host=$data port=5432"
asan_env=
[ "$sanitizer" != address ] ||
	asan_env="ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0:thread_local_quarantine_size_kb=0"
[ -z "$sanitizer" ] || echo "$name: note: the proxy is built with the $sanitizer sanitizer"

run_group main "$real" "" "" --listen "$data" --pool-size 4 --threads 2 --max-prepared 0 \
	-- 1a 1b 1c 2a 2b 3a 3b 3c 5a 5b 10 11a 11b
run_group fake "host=127.0.0.1 port=$fake_port" "" "" --pool-size 2 --threads 2 -- 3d 4
run_group memory "$real" "" "$asan_env" --pool-size 4 --threads 2 -- 6a 6b
run_group pools "$real" "" "" --pool-size 2 -- 7
run_group fds "$real" 64 "" --pool-size 2 -- 8a
run_group login "$real" "" "" --client-login-timeout 1s -- 8b
run_group encoding "$real" "" "" --pool-size 1 -- 9a 9b 9c
run_group ignore "$real" "" "" --pool-size 1 --ignore-startup-parameters options -- 9d
run_group prepared "$real" "" "" --pool-size 1 --max-prepared 100 -- 12a 12b 12c 12d 12e

if [ "$failures" -ne 0 ]; then
	echo "$name: $failures failed:$failed"
	exit 1
fi
echo "$name: all passed"
