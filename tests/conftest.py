"""Shared pytest setup for every suite under tests/: the suites import `harness` (and their own
helpers) as top-level modules, so this directory is put on the import path explicitly."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
