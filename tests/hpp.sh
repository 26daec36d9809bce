#!/bin/sh
# SPDX-License-Identifier: MIT
# <turnstile.hpp>, the header-only C++17 layer: the header alone compiles
# with g++ and clang++ under -Wall -Wextra -Wpedantic -Werror, and
# tests/cxx/hpp.cc, built with each, linked to the library and run, checks
# what its holders and deadlines promise.  In sanitizer builds only g++
# links it (the library carries gcc's sanitizer runtime); clang++ still
# compiles it.  Run from the build directory.
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
inc="-I$PWD/include -I$src/include"
cxxflags="-std=c++17 -Wall -Wextra -Wpedantic -Werror -pthread"
lib="-L$PWD/.libs -lturnstile -Wl,-rpath,$PWD/.libs"
status=0

printf '#include <turnstile.hpp>\n' > "$work/alone.cc"
for cxx in g++ clang++; do
	$cxx $cxxflags $inc -c -o "$work/alone.o" "$work/alone.cc" ||
		{ echo "hpp: turnstile.hpp alone fails with $cxx" >&2; status=1; }
done

g++ $cxxflags $TS_SAN_CFLAGS $inc -o "$work/hpp-g++" "$src/tests/cxx/hpp.cc" $lib &&
	"$work/hpp-g++" || { echo "hpp: tests/cxx/hpp.cc (g++) failed" >&2; status=1; }
if [ -z "$TS_SAN_CFLAGS" ]; then
	clang++ $cxxflags $inc -o "$work/hpp-clang++" "$src/tests/cxx/hpp.cc" $lib &&
		"$work/hpp-clang++" || { echo "hpp: tests/cxx/hpp.cc (clang++) failed" >&2; status=1; }
else
	clang++ $cxxflags $inc -c -o "$work/hpp.o" "$src/tests/cxx/hpp.cc" ||
		{ echo "hpp: tests/cxx/hpp.cc fails to compile with clang++" >&2; status=1; }
fi
[ $status -eq 0 ] && echo "hpp: turnstile.hpp alone and tests/cxx/hpp.cc, g++ and clang++, strict flags, run"
exit $status
