#!/bin/sh
# SPDX-License-Identifier: MIT
# make install into a scratch DESTDIR, then build and run a tiny program
# against the installed copy with nothing but `pkg-config --cflags --libs
# turnstile` — what a user of the library does.
set -e
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
${MAKE:-make} -s install DESTDIR="$dest" >/dev/null
pcdir=$(find "$dest" -name turnstile.pc -exec dirname {} \;)
[ -n "$pcdir" ] || { echo "install: turnstile.pc not installed" >&2; exit 1; }
export PKG_CONFIG_PATH="$pcdir" PKG_CONFIG_SYSROOT_DIR="$dest"
cat > "$dest/hello.c" <<'C'
#include <stdio.h>
#include <turnstile.h>

int main(void)
{
	ts_turnstile *t = ts_turnstile_new(1);
	ts_claim claim = { 0, ts_now_ns(), 1 };
	ts_pass pass;
	if (!t || ts_turnstile_wait(t, &claim, TS_DEADLINE_NOW, NULL, &pass) != 0)
		return 1;
	ts_pass_return(&pass);
	ts_waitlist *w = ts_waitlist_new(1, 0);
	void *item;
	if (ts_waitlist_take(w, &item, NULL, NULL, 0, NULL) != 0)
		return 1;
	ts_waitlist_free(w);
	ts_turnstile_free(t);
	puts("installed libturnstile works");
	return 0;
}
C
libdir=$(pkg-config --variable=libdir turnstile)
${CC:-cc} -std=c11 $TS_SAN_CFLAGS -o "$dest/hello" "$dest/hello.c" $(pkg-config --cflags --libs turnstile) \
	-Wl,-rpath,"$libdir" # pkg-config already prefixes the sysroot
"$dest/hello"
# and statically, as the README shows (sanitizer runtimes cannot be static)
if [ -z "$TS_SAN_CFLAGS" ]; then
	${CC:-cc} -std=c11 -static -o "$dest/hello-static" "$dest/hello.c" \
		$(pkg-config --static --cflags --libs turnstile)
	"$dest/hello-static"
fi
for h in man/man3/ts_turnstile_wait.3 man/man3/ts_waitlist.3; do
	find "$dest" -path "*/share/$h" | grep -q . || { echo "install: $h missing" >&2; exit 1; }
done
for h in turnstile.h turnstile.hpp turnstile/turnstile.h turnstile/waitlist.h; do
	find "$dest" -path "*/include/$h" | grep -q . || { echo "install: $h missing" >&2; exit 1; }
done
