#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Install the Debian packages the build, tests and benchmarks need, when
# any is missing.  Needs root (or sudo) only when something must be installed.
set -euo pipefail

packages=(build-essential autoconf automake libtool pkg-config
	  liburcu-dev libcriterion-dev gnuplot-nox valgrind strace
	  spin clang libclang-rt-14-dev systemtap-sdt-dev libsqlite3-dev
	  libpq-dev postgresql man-db libuv1-dev pgbouncer
	  default-jdk-headless libpostgresql-jdbc-java
	  python3-asyncpg python3-psycopg python3-psycopg2 nodejs
	  libcurl4-openssl-dev libjson-c-dev etcd-server etcd-client libssl-dev openssl)
# libturnstile-fleet's libcurl and json-c, and the etcd its tests run (a
# 3-node cluster on loopback, tests/etcdlib.sh)
# tests/pgclients.sh's client stacks above; node-postgres itself comes from
# npm (the test installs it).  Debian's npm, unless the nodejs here bundles
# its own (NodeSource's does, and conflicts with Debian's npm)
command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
