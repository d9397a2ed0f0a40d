#!/usr/bin/env bash
# Builds the `shoal` Python package (crates/python, PyO3 + maturin) and installs it into the
# Python that runs the tests:   scripts/python-package.sh
# The wheel stays in target/wheels/. Needs maturin (tests/requirements.txt installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

# `python3 -m maturin`: a fresh pip install needs no PATH entry or pyenv shim to be found.
python3 -m maturin --version >/dev/null 2>&1 ||
  python3 -m pip install --quiet --root-user-action=ignore "maturin>=1.9,<2"
rm -f target/wheels/shoal-*.whl
python3 -m maturin build --release --quiet --manifest-path crates/python/Cargo.toml --out target/wheels
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --force-reinstall \
  --no-deps target/wheels/shoal-*.whl
python3 -c 'import shoal; print("installed shoal", shoal.__version__, "from", shoal.__file__)'
