#!/usr/bin/env bash
# Runs memcached's own test suite (t/*.t, from Debian's source package of the installed memcached)
# against `shoal server`, the way memcached's `make test` runs it against ./memcached-debug, and
# checks the outcome against tests/memcached-suite/expected-failures.txt (suite.py explains how).
#   SHOAL                 the shoal binary (default: target/release/shoal of this checkout)
#   MC_SUITE_FILES        space-separated t/*.t names to run instead of all (a partial run reports
#                         but does not judge files it skipped)
#   MC_SUITE_TIMEOUT      seconds one file may take (default 240)
# Writes target/memcached-suite/report.md and report.json (the CI artifact).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
shoal="${SHOAL:-$root/target/release/shoal}"
case "$shoal" in /*) ;; *) shoal="$PWD/$shoal" ;; esac
if [ ! -x "$shoal" ]; then
  echo "no shoal binary at $shoal (cargo build --release -p shoal)" >&2
  exit 1
fi

work="$root/target/memcached-suite"
cache="$work/cache"
version="$(dpkg-query -W -f='${Version}' memcached)"
upstream="${version#*:}"
upstream="${upstream%-*}"
dsc="$cache/memcached_${version#*:}.dsc"

as_root=()
[ "$(id -u)" -eq 0 ] || as_root=(sudo)

# apt knows source packages only from deb-src entries: mirror each `deb` entry apt already uses
# (the release and its security suite, where Debian's memcached updates come from).
ensure_source_entry() {
  if apt-cache showsrc memcached 2>/dev/null | grep -qx "Version: $version"; then return; fi
  local entry=/etc/apt/sources.list.d/memcached-src.sources
  python3 - /etc/apt/sources.list.d/*.sources <<'PY' | "${as_root[@]}" tee "$entry" >/dev/null
import re, sys
for path in sys.argv[1:]:
    for stanza in re.split(r"\n\s*\n", open(path).read()):
        fields = [l for l in stanza.splitlines() if l.strip() and not l.startswith("#")]
        types = next((l.split(":", 1)[1].split() for l in fields if l.startswith("Types:")), [])
        if types == ["deb"]:
            source = ["Types: deb-src" if l.startswith("Types:") else l for l in fields]
            print("\n".join(source) + "\n")
PY
  "${as_root[@]}" apt-get update -qq
}

if [ ! -f "$dsc" ]; then
  ensure_source_entry
  mkdir -p "$cache"
  (cd "$cache" && apt-get source --download-only -qq "memcached=$version")
fi

# A fresh tree each run: the suite writes files into it (port files, pid files, sockets).
src="$work/memcached-$upstream"
rm -rf "$src"
# apt checked the files against the signed archive; dpkg-source's own warning that it has no key
# for the uploader's signature is noise, so its output shows only if it fails.
if ! unpacked="$(dpkg-source --no-copy -x "$dsc" "$src" 2>&1)"; then
  echo "$unpacked" >&2
  exit 1
fi

# t/lib/MemcachedTest.pm runs `$builddir/timedrun 600 $builddir/memcached-debug <flags>` from the
# source directory. memcached-debug differs from memcached by its `debugtime` command, which
# `shoal server --test-mode` enables. timedrun's 600 s cap is left to suite.py, which ends every
# file's process group.
printf '#!/bin/sh\nexec %q server --test-mode "$@"\n' "$shoal" >"$src/memcached-debug"
printf '#!/bin/sh\n# timedrun <seconds> <command...>\nshift\nexec "$@"\n' >"$src/timedrun"
chmod +x "$src/memcached-debug" "$src/timedrun"

exec python3 "$here/suite.py" --source "$src" --report-dir "$work" \
  --expected "$here/expected-failures.txt" --shoal "$shoal"
