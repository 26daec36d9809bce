#!/bin/sh
# SPDX-License-Identifier: MIT
# Symbol hygiene: the shared library exports exactly the functions the
# public headers declare with TS_API — nothing hidden leaks out (hidden
# visibility by default), and nothing declared is missing.  The static
# archive defines only ts_ names (internals carry the reserved ts_lib_
# prefix), so a program with its own skip_insert links against it.
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
lib=.libs/libturnstile.so
[ -f "$lib" ] || { echo "symbols: $lib not built" >&2; exit 1; }
exported=$(mktemp) declared=$(mktemp)
trap 'rm -f "$exported" "$declared"' EXIT
nm -D --defined-only "$lib" | awk '{ print $3 }' | grep -v '^_' | sort -u > "$exported"
# version.h is generated into the build tree
grep -ho '^TS_API [^(]*(' $(ls "$src"/include/turnstile/*.h | grep -v '/fleet\.h$') include/turnstile/version.h |
	sed -E 's/.*[ *]([A-Za-z_0-9]+)\($/\1/' | sort -u > "$declared"
if ! diff -u "$declared" "$exported"; then
	echo "symbols: exported symbols differ from the headers' TS_API declarations (- declared, + exported)" >&2
	exit 1
fi
echo "symbols: $(wc -l < "$exported") exported, all declared in include/turnstile/"

archive=.libs/libturnstile.a
[ -f "$archive" ] || { echo "symbols: $archive not built" >&2; exit 1; }
# Not C identifiers, so no clash: <sys/sdt.h>'s weak, hidden anchor
# _.stapsdt.base, and ASan's __odr_asan.NAME indicators (sanitizer builds).
foreign=$(nm -g --defined-only "$archive" | awk 'NF == 3 { print $3 }' |
	grep -v -e '^ts_' -e '^_\.stapsdt\.base$' -e '^__odr_asan\.ts_' | sort -u)
if [ -n "$foreign" ]; then
	echo "symbols: $archive defines names outside ts_:" $foreign >&2
	exit 1
fi
# A program that defines the names the library's internals once had.
prog=$(mktemp -d)
trap 'rm -f "$exported" "$declared"; rm -rf "$prog"' EXIT
cat > "$prog/clash.c" <<'C'
#include <turnstile.h>
int skip_init, skip_insert, skip_remove, claim_before;
int cancel_watch, cancel_unwatch, waiter_park;
int notifier_collect, async_complete, async_begin, waitlist_withdraw;
static void on_take(ts_async *node, int result, void *arg)
{
	(void)node;
	(void)result;
	(void)arg;
}
int main(void)
{
	ts_turnstile *t = ts_turnstile_new(1);
	ts_waitlist *w = ts_waitlist_new(1, 0);
	ts_notifier *n = ts_notifier_new();
	ts_async node = TS_ASYNC_INIT;
	ts_claim claim = { 0, 0, 0 };
	ts_pass pass;
	void *item;
	if (!t || !w || !n || ts_turnstile_wait(t, &claim, TS_DEADLINE_NOW, NULL, &pass))
		return 1;
	ts_pass_return(&pass);
	ts_turnstile_free(t);
	/* the event-loop objects come from the archive too */
	if (ts_waitlist_take_async(w, 0, NULL, n, &node, on_take, NULL, &item) != TS_CREATE)
		return 1;
	ts_waitlist_discard(w);
	ts_waitlist_free(w);
	if (ts_notifier_free(n))
		return 1;
	return skip_insert + waiter_park + notifier_collect + async_begin;
}
C
${CC:-cc} -std=c11 $TS_SAN_CFLAGS -I"$PWD/include" -I"$src/include" -o "$prog/clash" "$prog/clash.c" \
	"$archive" $(pkg-config --libs liburcu-bp liburcu-cds) -pthread
"$prog/clash"
echo "symbols: $archive defines only ts_ names; a program defining skip_insert & co links statically, notifier included"

# libturnstile-fleet, where built: exactly <turnstile/fleet.h>'s functions,
# and its archive only ts_ names (its etcd client is ts_lib_etcd_*).
fleet=.libs/libturnstile-fleet.so
if [ -f "$fleet" ]; then
	nm -D --defined-only "$fleet" | awk '{ print $3 }' | grep -v '^_' | sort -u > "$exported"
	grep -ho '^TS_API [^(]*(' "$src"/include/turnstile/fleet.h |
		sed -E 's/.*[ *]([A-Za-z_0-9]+)\($/\1/' | sort -u > "$declared"
	diff -u "$declared" "$exported" ||
		{ echo "symbols: $fleet exports differ from <turnstile/fleet.h>" >&2; exit 1; }
	foreign=$(nm -g --defined-only .libs/libturnstile-fleet.a | awk 'NF == 3 { print $3 }' |
		grep -v -e '^ts_' -e '^_\.stapsdt\.base$' -e '^__odr_asan\.ts_' | sort -u)
	[ -z "$foreign" ] ||
		{ echo "symbols: libturnstile-fleet.a defines names outside ts_:" $foreign >&2; exit 1; }
	echo "symbols: $fleet exports $(wc -l < "$exported"), all declared in <turnstile/fleet.h>"
fi
