# SPDX-License-Identifier: MIT
# A real 3-node etcd cluster on loopback for the fleet tests: ports chosen
# free, data in a temporary directory, every node stopped at exit.  Source
# it after setting $name; it skips the test (77) with a clear message where
# etcd is not installed (scripts/deps.sh installs it).
#   etcd_start           start e0 e1 e2 and wait until the cluster is healthy
#   etcd_endpoints       the client URLs, comma-separated
#   etcd_kill N          kill -9 node N
#   etcd_restart N       start node N again on its data
#   etcd_leader          the index of the leader now
#   hung_endpoint N      start the N-th listener that never answers; its URL
#   ok MSG / fail MSG    a line of the test's log / fail the test
if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
	echo "$name: etcd or etcdctl not installed (scripts/deps.sh installs etcd-server, etcd-client): skipped"
	exit 77
fi
etcd_dir=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")
etcd_pids=""
cleanup_hooks=${cleanup_hooks:-}

etcd_cleanup() {
	status=$?
	set +e
	$cleanup_hooks
	for i in 0 1 2; do
		[ -f "$etcd_dir/e$i.pid" ] && kill -9 "$(cat "$etcd_dir/e$i.pid")" 2>/dev/null
	done
	for h in "$etcd_dir"/hung*.pid; do [ -f "$h" ] && kill -9 "$(cat "$h")" 2>/dev/null; done
	if [ $status -ne 0 ]; then
		for i in 0 1 2; do
			echo "--- etcd e$i (last lines)"
			tail -n 5 "$etcd_dir/e$i.log" 2>/dev/null
		done
	fi
	rm -rf "$etcd_dir"
	exit $status
}
trap etcd_cleanup EXIT
trap 'exit 1' INT TERM

ok() { echo "$name: $*"; }
fail() { echo "$name: FAIL: $*" >&2; exit 1; }

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

for i in 0 1 2; do
	eval "etcd_client$i=$(free_port)"
	eval "etcd_peer$i=$(free_port)"
done
etcd_cluster="e0=http://127.0.0.1:$etcd_peer0,e1=http://127.0.0.1:$etcd_peer1,e2=http://127.0.0.1:$etcd_peer2"

etcd_endpoints() {
	echo "http://127.0.0.1:$etcd_client0,http://127.0.0.1:$etcd_client1,http://127.0.0.1:$etcd_client2"
}

etcd_node() {
	eval "c=\$etcd_client$1 p=\$etcd_peer$1"
	# fast elections on loopback: a lost leader is replaced in ~0.5 s
	etcd --name "e$1" --data-dir "$etcd_dir/e$1" \
		--listen-client-urls "http://127.0.0.1:$c" --advertise-client-urls "http://127.0.0.1:$c" \
		--listen-peer-urls "http://127.0.0.1:$p" --initial-advertise-peer-urls "http://127.0.0.1:$p" \
		--initial-cluster "$etcd_cluster" --initial-cluster-state new \
		--heartbeat-interval 50 --election-timeout 500 >>"$etcd_dir/e$1.log" 2>&1 &
	echo $! >"$etcd_dir/e$1.pid"
}

etcd_healthy() {
	ETCDCTL_API=3 etcdctl --endpoints="$(etcd_endpoints)" --dial-timeout=1s \
		--command-timeout=2s endpoint health >/dev/null 2>&1
}

# Poll until $1 (a command) succeeds, for at most $2 seconds.
wait_for() {
	end=$(($(date +%s) + $2))
	until eval "$1"; do
		[ "$(date +%s)" -lt "$end" ] || return 1
		sleep 0.05
	done
}

etcd_start() {
	for i in 0 1 2; do etcd_node $i; done
	wait_for etcd_healthy 30 || fail "etcd cluster not healthy in 30 s"
	ok "etcd cluster of 3 on $(etcd_endpoints)"
}

etcd_kill() {
	kill -9 "$(cat "$etcd_dir/e$1.pid")" 2>/dev/null || true
	rm -f "$etcd_dir/e$1.pid"
}

etcd_restart() { etcd_node "$1"; }

# A listener that accepts connections and never answers (a frozen etcd
# node, a partition): hung_endpoint N starts the N-th, prints its URL.
hung_endpoint() {
	port=$(free_port)
	python3 -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(64); held = []
while True: held.append(s.accept())' "$port" >/dev/null 2>&1 &
	echo $! >"$etcd_dir/hung$1.pid"
	echo "http://127.0.0.1:$port"
}

etcd_leader() {
	ETCDCTL_API=3 etcdctl --endpoints="$(etcd_endpoints)" --dial-timeout=1s \
		--command-timeout=2s endpoint status 2>/dev/null |
		awk -F', ' -v c0="$etcd_client0" -v c1="$etcd_client1" -v c2="$etcd_client2" '
			$5 == "true" { n = split($1, a, ":"); p = a[n]
				print (p == c0 ? 0 : p == c1 ? 1 : 2); exit }'
}
