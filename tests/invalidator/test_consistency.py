"""The consistency checker (bench/consistency.py) as a test, on a small run: writers, leased
readers and a kill -9 of every process in turn — the invalidator, both routers, all four
servers — while PostgreSQL commits; after catch-up no cached key may differ from the table."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def test_no_stale_key_survives_kill_9s_of_every_process(tmp_path):
    out = tmp_path / "result.json"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "consistency.py"), "--writes", "4000", "--keys", "200",
         "--kill-every", "0.4", "--dir", str(tmp_path / "run"), "--json", str(out)],
        check=True, timeout=300)
    result = json.loads(out.read_text())
    assert result["stale"] == 0, result
    assert set(result["killed"]) == {"invalidator", "router", "server"}, result
    assert result["cached_keys_checked"] > 0 and result["fills"] > 0, result
