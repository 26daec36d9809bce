#!/bin/sh
# SPDX-License-Identifier: MIT
# Every source, header, script, build file and man page of the project
# carries an SPDX line, and the licence itself ships.
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
[ -f LICENSE ] && grep -q "MIT License" LICENSE || { echo "licence: LICENSE missing" >&2; exit 1; }
missing=$(find lib include tests bench examples scripts man .ci \
	       configure.ac Makefile.am turnstile.pc.in m4/ts_build.m4 \
	       -path tests/fuzz/corpus -prune -o -type f \
	       \( -name '*.c' -o -name '*.cc' -o -name '*.h' -o -name '*.in' -o -name '*.sh' \
	          -o -name '*.pml' -o -name '*.inc' -o -name '*.supp' -o -name '*.3' -o -name '*.7' \
	          -o -name '*.ac' -o -name '*.am' -o -name '*.m4' -o -name run \) \
	       -print 2>/dev/null | while read -r f; do
		grep -q 'SPDX-License-Identifier: MIT' "$f" || echo "$f"
	done)
if [ -n "$missing" ]; then
	echo "licence: no SPDX line in:" $missing >&2
	exit 1
fi
echo "licence: LICENSE ships and every file carries SPDX-License-Identifier: MIT"
