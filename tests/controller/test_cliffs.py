"""Issue 27, item 4, from Python: the planner keeps off cliffs, against the release `shoal
server --tenants` and `shoal controller`, the tenants read through shared memory by the real
`shoal` client (the Rust side: crates/controller/tests/cliffs.rs).

A scan tenant (keys read in turn: a curve flat up to its working set, then a jump) shares the
server with a tenant whose every MiB buys hits; the scan reads a quarter as often, so its hull
gains less per MiB and the units left for it stop short of its cliff: it gets its minimum (plus
memory it held that no curve gains from), never a size within the curve's error of its cliff,
the other tenant gets the memory, and the decision log says why.
"""

import json
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import shoal
from harness import SHOAL, Server, free_port, wait_for
from test_curves import ask, points, stat

MIB = 1 << 20
ERROR = 0.03  # the planner's margin for a curve's error (shoal_curves::SIZE_ERROR)


def sizes(address) -> dict:
    answer = ask(address, b"stats tenants\r\n")
    return {line.split(" ")[1].split(":")[0]: int(line.split(" ")[2])
            for line in answer.splitlines() if ":limit_maxbytes " in line}


def test_a_scan_short_of_its_cliff_gets_its_minimum_and_the_memory_goes_where_it_buys_hits():
    directory = Path(tempfile.mkdtemp(prefix="shoal-cliffs-", dir="/dev/shm"))
    port = free_port()
    listens = {}
    for name in ("zipf", "scan"):
        listens[name] = free_port()
        while listens[name] in (port, *[p for n, p in listens.items() if n != name]):
            listens[name] = free_port()
    text = 'default = "zipf"\n'
    for name, most in (("zipf", 24), ("scan", 30)):
        text += (f'[[tenant]]\nname = "{name}"\nprefixes = ["{name}:"]\nmin_mb = 2\nmax_mb = {most}\n'
                 f'size_mb = 16\nlisten = ["{listens[name]}"]\n')
    (directory / "tenants.toml").write_text(text)
    with Server.shoal("--tenants", str(directory / "tenants.toml"), memory_mb=32, port=port):
        address = ("127.0.0.1", port)
        clients = {name: shoal.Client(("127.0.0.1", p), local=True, timeout=10.0) for name, p in listens.items()}
        assert all(c.is_local() for c in clients.values())
        stop = threading.Event()

        def load():
            # Three reads of `zipf` (uniform over 5 000 keys of 8 KiB, 40 MiB) for each of
            # `scan` (2 560 keys of 8 KiB in turn, 20 MiB), a set after each miss.
            value, i, random = b"v" * (8 << 10), 0, 0x9E3779B97F4A7C15
            while not stop.is_set():
                random ^= (random << 13) & (1 << 64) - 1
                random ^= random >> 7
                random ^= (random << 17) & (1 << 64) - 1
                name, key = ("scan", f"scan:{i // 4 % 2560}") if i % 4 == 3 else ("zipf", f"zipf:{random % 5000}")
                if clients[name].get(key) is None:
                    clients[name].set(key, value)
                i += 1

        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        controller = None
        try:
            # The scan read twice over (its curve has its cliff) before the controller's first plan.
            wait_for("the scan's cliff in its curve",
                     lambda: max(ratio for _, ratio in points(address, "scan")) > 0.3)
            controller = subprocess.Popen(
                [str(SHOAL), "controller", "--interval", "1s", "--json", "--goal", "global",
                 "--server", f"127.0.0.1:{port}"],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            events = []
            threading.Thread(target=lambda: events.extend(json.loads(line) for line in controller.stdout),
                             daemon=True).start()
            wait_for("zipf grown", lambda: sizes(address)["zipf"] > 16 * MIB
                     and any(e["event"] == "resized" and e["tenant"] == "scan" for e in events))
            curve = points(address, "scan")
        finally:
            stop.set()
            loader.join(timeout=60)
            if controller:
                controller.kill()
                controller.wait()
        top = max(ratio for _, ratio in curve)
        cliff = next(size for size, ratio in curve if ratio >= top / 2)
        assert 20 * MIB <= cliff < 24 * MIB, cliff / MIB

        def off(size):
            return size * (1 + ERROR) < cliff or size >= cliff * (1 + ERROR)
        scan = [e for e in events if e["event"] == "resized" and e["tenant"] == "scan"]
        assert all(off(e["to_bytes"]) and e["to_bytes"] <= 16 * MIB for e in scan), (cliff, scan)
        now = sizes(address)
        assert off(now["scan"]) and now["zipf"] + now["scan"] == 32 * MIB, now
        assert "would buy nothing" in scan[-1]["reason"], scan[-1]
        assert stat(address, "local_sampled", b"curve scan\r\n") > 0, "the scan's reads were local"
        for c in clients.values():
            c.close()
    shutil.rmtree(directory, ignore_errors=True)
