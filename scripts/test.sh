#!/usr/bin/env bash
# Installs everything the tests need, then runs all of them: formatting, lints, unit,
# property, cross-process and crash tests, the loom model check, the Python suites under tests/
# (client libraries, memccapable and raw sockets against `shoal server`; the server's suites a
# second time on the io_uring data path), memcached's own test suite (tests/memcached-suite), and
# short fuzz runs.
#   SHOAL_STRESS_SECS  length of the cross-process stress test (default 60; CI uses 5)
#   SHOAL_FUZZ_SECS    seconds per fuzz target (default 30; 0 skips fuzzing, loudly)
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step says how long the run has taken so far, so a slow machine shows where time goes.
step() { printf '\n==> [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

step "toolchain components"
rustup component add rustfmt clippy
if [ "${CI:-}" = "true" ]; then
  export SHOAL_STRESS_SECS="${SHOAL_STRESS_SECS:-5}"
  export SHOAL_FUZZ_SECS="${SHOAL_FUZZ_SECS:-6}"
fi
export SHOAL_STRESS_SECS="${SHOAL_STRESS_SECS:-60}"
export SHOAL_FUZZ_SECS="${SHOAL_FUZZ_SECS:-30}"

step "test dependencies: Debian packages, Python packages (tests/requirements.txt)"
debs=(memcached libmemcached-tools libmemcached-dev zlib1g-dev libsasl2-modules nutcracker postgresql openssl chromium chromium-driver valgrind strace dpkg-dev libio-socket-ssl-perl)
missing=()
for deb in "${debs[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$deb" 2>/dev/null || true)"
  [ "$status" = "install ok installed" ] || missing+=("$deb")
done
if [ "${#missing[@]}" -gt 0 ]; then
  as_root=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    as_root=(sudo)
  fi
  "${as_root[@]}" apt-get update
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
fi
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -r tests/requirements.txt
# tests/packaging builds the Debian package with cargo-deb (a pinned version, built once).
command -v cargo-deb >/dev/null || cargo install cargo-deb --locked --version 3.8.0
# tests/exporter builds Prometheus's memcached_exporter from its Go module (into target/).
command -v go >/dev/null || { echo "need Go (go version): tests/exporter builds memcached_exporter" >&2; exit 1; }

step "cargo fmt --check (the workspace and the fuzz crate)"
cargo fmt --all -- --check
cargo fmt --manifest-path fuzz/Cargo.toml -- --check

step "house rules: no module circle in the server or the router; every link in the docs resolves"
python3 scripts/module-cycles.py crates/server/src crates/router/src crates/client/src
python3 scripts/check-doc-links.py

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo build --release -p shoal (the client's tests and the Python suites run it)"
cargo build --release -p shoal

step "cargo test (release; stress ${SHOAL_STRESS_SECS}s)"
cargo test --workspace --release

step "the shoal Python package (crates/python), its fmt and clippy"
cargo fmt --manifest-path crates/python/Cargo.toml -- --check
cargo clippy --manifest-path crates/python/Cargo.toml --all-targets -- -D warnings
scripts/python-package.sh

step "Python suites under tests/ against the release shoal server"
# A test that hangs fails after 300 s with its stack instead of stalling the run; the slowest
# tests are listed so a slow machine shows where the time went.
PYTHONDONTWRITEBYTECODE=1 python3 -m pytest -q -p no:cacheprovider --timeout=300 --durations=15 tests/

step "the server suites again on the io_uring data path (SHOAL_SERVER_IO=uring: every server started uses -o io_uring)"
SHOAL_SERVER_IO=uring cargo test --release -p shoal-server
SHOAL_SERVER_IO=uring PYTHONDONTWRITEBYTECODE=1 python3 -m pytest -q -p no:cacheprovider --timeout=300 \
  tests/server tests/differential tests/clients

step "memcached's own test suite (t/*.t) against shoal server"
tests/memcached-suite/run.sh

step "loom model check of the bucket read-validate protocol"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test -p shoal-region --lib --release -- loom

if [ -x scripts/fuzz.sh ]; then
  step "fuzz (${SHOAL_FUZZ_SECS}s per target)"
  scripts/fuzz.sh "${SHOAL_FUZZ_SECS}"
fi

step "done"
