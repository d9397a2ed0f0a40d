#!/usr/bin/env bash
# Replaces one generated section of docs/BENCHMARKS.md with what arrives on stdin:
#
#   bench/server-vs-memcached.sh | bench/rewrite-doc.sh server-vs-memcached
#
# A section is the text between the lines `<!-- NAME:begin -->` and `<!-- NAME:end -->`; the
# prose around it stays as written. Nothing is changed when the input is empty or the markers
# are missing (add them where the section belongs).
#   BENCH_DOC  the file to rewrite (default docs/BENCHMARKS.md)
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -eq 1 ] || { echo "usage: $0 SECTION < generated.md" >&2; exit 2; }
name=$1 doc=${BENCH_DOC:-docs/BENCHMARKS.md}
begin="<!-- $name:begin -->" end="<!-- $name:end -->"
grep -qxF "$begin" "$doc" && grep -qxF "$end" "$doc" || {
  echo "$doc has no section '$name': add the lines '$begin' and '$end' where it belongs" >&2
  exit 1
}
body=$(mktemp)
trap 'rm -f "$body" "$body.new"' EXIT
cat >"$body"
[ -s "$body" ] || { echo "no input: $doc left as it was" >&2; exit 1; }
awk -v begin="$begin" -v end="$end" -v body="$body" '
  $0 == begin { print; while ((getline line < body) > 0) print line; skipping = 1; next }
  $0 == end { skipping = 0 }
  !skipping { print }
' "$doc" >"$body.new"
mv "$body.new" "$doc"
echo "rewrote section '$name' of $doc" >&2
