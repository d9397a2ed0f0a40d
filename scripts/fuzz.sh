#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for the given number of seconds each:
#   scripts/fuzz.sh [SECONDS]     (default 30; 0 skips fuzzing, loudly)
# Needs the nightly toolchain (installed if missing) and cargo-fuzz (installed if missing).
# A crash, panic, leak or hang (an input running over 20 s) fails the script; the input that
# did it is left in fuzz/artifacts/<target>/ (reproduce: cargo +nightly fuzz run <target> <file>).
# The corpus grows in fuzz/corpus/<target>/ and is reused by later runs; fuzz/dict/<target>.dict,
# when present, gives the target's protocol words to libFuzzer.
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-30}"

loud() {
  local bar='!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!'
  printf '\n%s\n!!! %s\n%s\n\n' "$bar" "$*" "$bar" >&2
}

if ! [[ "$secs" =~ ^[0-9]+$ ]]; then
  echo "usage: $0 [seconds per target]" >&2
  exit 2
fi
if [ "$secs" -eq 0 ]; then
  loud "FUZZING SKIPPED: 0 seconds per target requested (SHOAL_FUZZ_SECS=0)"
  exit 0
fi

if ! rustup toolchain list | grep -q '^nightly'; then
  echo "installing the nightly toolchain (cargo-fuzz needs it)"
  if ! rustup toolchain install nightly --profile minimal; then
    loud "FUZZING SKIPPED: no nightly toolchain, and 'rustup toolchain install nightly' failed"
    exit 0
  fi
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

targets=$(cargo +nightly fuzz list)
for target in $targets; do
  printf '\n--> fuzz %s for %ss\n' "$target" "$secs"
  # -timeout: one input running longer than this is reported as a hang.
  # The progress lines of every new corpus entry are dropped; the rest (and any failure) is shown.
  set +e
  # A dictionary of the target's protocol words, if it has one (fuzz/dict/<target>.dict).
  dict=()
  [ -f "fuzz/dict/$target.dict" ] && dict=(-dict="fuzz/dict/$target.dict")
  cargo +nightly fuzz run "$target" -- "${dict[@]}" -max_total_time="$secs" -timeout=20 -print_final_stats=1 2>&1 |
    grep --line-buffered -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE)'
  status=${PIPESTATUS[0]}
  set -e
  if [ "$status" -ne 0 ]; then
    loud "fuzz target $target FAILED (exit $status): see the input saved in fuzz/artifacts/$target/"
    exit "$status"
  fi
done
echo "fuzzing done:" $targets
