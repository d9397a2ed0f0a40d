#!/usr/bin/env bash
# Installs everything the tests need, then runs all of them: formatting, lints, unit,
# property, cross-process and crash tests, the loom model check, and short fuzz runs.
#   SHOAL_STRESS_SECS  length of the cross-process stress test (default 60; CI uses 5)
#   SHOAL_FUZZ_SECS    seconds per fuzz target (default 30; 0 skips fuzzing, loudly)
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "toolchain components"
rustup component add rustfmt clippy
if [ "${CI:-}" = "true" ]; then
  export SHOAL_STRESS_SECS="${SHOAL_STRESS_SECS:-5}"
  export SHOAL_FUZZ_SECS="${SHOAL_FUZZ_SECS:-15}"
fi
export SHOAL_STRESS_SECS="${SHOAL_STRESS_SECS:-60}"
export SHOAL_FUZZ_SECS="${SHOAL_FUZZ_SECS:-30}"

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo test (release; stress ${SHOAL_STRESS_SECS}s)"
cargo test --workspace --release

step "loom model check of the bucket read-validate protocol"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test -p shoal-region --lib --release -- loom

if [ -x scripts/fuzz.sh ]; then
  step "fuzz (${SHOAL_FUZZ_SECS}s per target)"
  scripts/fuzz.sh "${SHOAL_FUZZ_SECS}"
fi
