#!/usr/bin/env bash
# tests/e2e/test_docs.sh — the repository's Markdown stays readable: every tracked *.md file is under 256 KiB, has no
# line over 2000 characters, and speaks of the project only (no session or issue numbers, no dated diary entries).
# Fails naming the file and the reason.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
fail=0
files=$(git ls-files '*.md' 2>/dev/null || find . -name '*.md' -not -path './third_party/*' -not -path './build*')
[ -n "$files" ] || { echo "no Markdown files found"; exit 1; }
n=0
for f in $files; do
    [ -f "$f" ] || continue
    n=$((n + 1))
    size=$(wc -c < "$f")
    if [ "$size" -gt 262144 ]; then echo "FAIL $f: $size bytes (limit 262144)"; fail=1; fi
    long=$(awk 'length($0) > 2000 { print NR; exit }' "$f")
    if [ -n "$long" ]; then echo "FAIL $f: line $long is over 2000 characters"; fail=1; fi
    talk=$(grep -n -i -E '\bsession [0-9]+|\bissue #[0-9]+|^#+ *20[0-9]{2}-[0-9]{2}-[0-9]{2}' "$f" | head -1)
    if [ -n "$talk" ]; then echo "FAIL $f: process talk at line ${talk%%:*}"; fail=1; fi
done
echo "$n Markdown files checked"
[ "$fail" = 0 ] && echo PASS
exit $fail
