#!/bin/sh
# SPDX-License-Identifier: MIT
# Every exported function has a section-3 page (its own, or a .so link to
# its group's), and every group page has errors, thread-safety and an
# example, and renders without warnings.
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
status=0
libs=.libs/libturnstile.so
[ ! -f .libs/libturnstile-fleet.so ] || libs="$libs .libs/libturnstile-fleet.so"
for name in $(for l in $libs; do nm -D --defined-only "$l"; done | awk '{ print $3 }' | grep -v '^ts_private_'); do
	page="$src/man/$name.3"
	if [ ! -f "$page" ]; then
		echo "manpages: no page for $name" >&2
		status=1
		continue
	fi
	target=$(sed -n 's|^\.so man3/||p' "$page")
	[ -z "$target" ] || [ -f "$src/man/$target" ] || { echo "manpages: $name links to missing $target" >&2; status=1; }
done
for page in "$src"/man/*.3; do
	grep -q '^\.so ' "$page" && continue
	for section in ERRORS "THREAD SAFETY" EXAMPLE; do
		grep -q "^\.SH $section" "$page" || { echo "manpages: $(basename "$page") lacks $section" >&2; status=1; }
	done
	warnings=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null || true)
	[ -z "$warnings" ] || { echo "manpages: $(basename "$page"): $warnings" >&2; status=1; }
done
[ $status -eq 0 ] && echo "manpages: every exported function documented"
exit $status
