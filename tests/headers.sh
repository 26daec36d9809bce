#!/bin/sh
# SPDX-License-Identifier: MIT
# The public headers as users compile them:
#  1. each header on its own, as C11 with gcc and clang under
#     -Wall -Wextra -Wpedantic -Wdeclaration-after-statement -Werror, and as
#     C++17 with g++ and clang++ (-Wall -Wextra -Wpedantic -Werror);
#  2. a C program whose inlined fast paths (ts_turnstile_wait, ts_pass_return,
#     ts_wait_turn, ts_turnstile_wait_async, ts_wait_turn_async) are
#     instantiated, same C flags;
#  3. tests/cxx/api.cc, which calls every public function (checked against
#     the headers' TS_API declarations), built with g++ and clang++, linked
#     to the library and run.  In sanitizer builds only g++ links it (the
#     library carries gcc's sanitizer runtime); clang++ still compiles it.
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
inc="-I$PWD/include -I$src/include"
cflags="-std=c11 -Wall -Wextra -Wpedantic -Wdeclaration-after-statement -Werror"
cxxflags="-std=c++17 -Wall -Wextra -Wpedantic -Werror"
status=0

headers="turnstile.h"
for h in "$src"/include/turnstile/*.h include/turnstile/version.h; do
	headers="$headers turnstile/$(basename "$h")"
done
for h in $headers; do
	printf '#include <%s>\n' "$h" > "$work/alone.c"
	cp "$work/alone.c" "$work/alone.cc"
	for cc in gcc clang; do
		$cc $cflags $inc -c -o "$work/alone.o" "$work/alone.c" ||
			{ echo "headers: $h alone fails as C with $cc" >&2; status=1; }
	done
	for cxx in g++ clang++; do
		$cxx $cxxflags $inc -c -o "$work/alone.o" "$work/alone.cc" ||
			{ echo "headers: $h alone fails as C++17 with $cxx" >&2; status=1; }
	done
done

cat > "$work/inline.c" <<'C'
#include <turnstile.h>
static void on_turn(ts_async *node, int result, void *arg)
{
	ts_pass pass = ts_async_pass(node);
	(void)result;
	(void)arg;
	ts_pass_return(&pass);
}
int use_fast_paths(ts_turnstile *t, ts_job *job, ts_notifier *n, ts_async *node);
int use_fast_paths(ts_turnstile *t, ts_job *job, ts_notifier *n, ts_async *node)
{
	ts_claim claim = { 0, 0, 0 };
	ts_pass pass = TS_PASS_NONE, turn, now = TS_PASS_NONE;
	int r = ts_turnstile_wait(t, &claim, TS_DEADLINE_NOW, NULL, &pass);
	ts_pass_return(&pass);
	turn = ts_wait_turn(job);
	ts_pass_return(&turn);
	if (ts_turnstile_wait_async(t, &claim, 0, NULL, n, node, on_turn, NULL, &now) == 0)
		ts_pass_return(&now);
	if (ts_wait_turn_async(job, n, node, on_turn, NULL, &now) == 0)
		ts_pass_return(&now);
	return r;
}
C
for cc in gcc clang; do
	$cc $cflags -O2 $inc -c -o "$work/inline.o" "$work/inline.c" ||
		{ echo "headers: inlined fast paths fail strict C with $cc" >&2; status=1; }
done

# Every public function is called in the C++ program (comments do not count).
sed 's|//.*||' "$src/tests/cxx/api.cc" > "$work/api-code.cc"
for f in $(grep -ho '^TS_API [^(]*(' $(ls "$src"/include/turnstile/*.h | grep -v '/fleet\.h$') include/turnstile/version.h |
	   sed -E 's/.*[ *]([A-Za-z_0-9]+)\($/\1/' | grep -v '^ts_private_' | sort -u); do
	grep -q "\\b$f(" "$work/api-code.cc" ||
		{ echo "headers: tests/cxx/api.cc does not call $f" >&2; status=1; }
done
lib="-L$PWD/.libs -lturnstile -Wl,-rpath,$PWD/.libs -pthread"
g++ $cxxflags $TS_SAN_CFLAGS $inc -o "$work/api-g++" "$src/tests/cxx/api.cc" $lib &&
	"$work/api-g++" || { echo "headers: C++ program (g++) failed" >&2; status=1; }
if [ -z "$TS_SAN_CFLAGS" ]; then
	clang++ $cxxflags $inc -o "$work/api-clang++" "$src/tests/cxx/api.cc" $lib &&
		"$work/api-clang++" || { echo "headers: C++ program (clang++) failed" >&2; status=1; }
else
	clang++ $cxxflags $inc -c -o "$work/api.o" "$src/tests/cxx/api.cc" ||
		{ echo "headers: C++ program fails to compile with clang++" >&2; status=1; }
fi
# libturnstile-fleet, where built: a C++ program calling each of its
# functions (bad input, and an etcd that is not there).
if [ -f .libs/libturnstile-fleet.so ]; then
	sed 's|//.*||' "$src/tests/cxx/fleet.cc" > "$work/fleet-code.cc"
	for f in $(grep -ho '^TS_API [^(]*(' "$src"/include/turnstile/fleet.h |
		   sed -E 's/.*[ *]([A-Za-z_0-9]+)\($/\1/' | sort -u); do
		grep -q "\\b$f(" "$work/fleet-code.cc" ||
			{ echo "headers: tests/cxx/fleet.cc does not call $f" >&2; status=1; }
	done
	g++ $cxxflags $TS_SAN_CFLAGS $inc -o "$work/fleet-g++" "$src/tests/cxx/fleet.cc" \
		-L"$PWD/.libs" -lturnstile-fleet $lib &&
		"$work/fleet-g++" || { echo "headers: C++ fleet program failed" >&2; status=1; }
fi
[ $status -eq 0 ] && echo "headers: every header alone as C11 and C++17, strict flags, gcc and clang; C++ program uses every function"
exit $status
