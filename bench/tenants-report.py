"""bench/tenants.sh's helper.

    tenants-report.py --poll HOST:PORT SIZES.jsonl   every second, each tenant's size and counters
                                                     (`stats tenants`) as a JSON line, until killed
    tenants-report.py RUN_DIR PLOT.png               the markdown tables of a run, and its plot
"""

import json
import socket
import sys
import time
from pathlib import Path


def stats_tenants(address):
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"stats tenants\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    tenants = {}
    for line in data.decode().splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == "STAT":
            tenant, field = parts[1].split(":", 1)
            tenants.setdefault(tenant, {})[field] = parts[2]
    return tenants


def poll(address, path):
    started = time.monotonic()
    with open(path, "w") as out:
        while True:
            try:
                now = time.monotonic() - started
                for name, t in stats_tenants(address).items():
                    out.write(json.dumps({"t": now, "tenant": name, "limit": int(t["limit_maxbytes"]),
                                          "gets": int(t["cmd_get"]), "hits": int(t["get_hits"])}) + "\n")
                out.flush()
            except OSError:
                pass
            time.sleep(1.0)


def load(run_dir, name):
    path = run_dir / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def late(report, tenant=None):
    """The second half's hit ratio of one tenant, or of all."""
    if tenant is None:
        return report["late_hit_ratio"]
    return next(t["late_hit_ratio"] for t in report["tenants"] if t["tenant"] == tenant)


def lines(path):
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()] if path.exists() else []


def reaction(run_dir, change_at, tenant="profile"):
    """Seconds from the change until the tenant's size first moved."""
    sizes = [s for s in lines(run_dir / "react.sizes.jsonl") if s["tenant"] == tenant]
    before = [s["limit"] for s in sizes if s["t"] <= change_at]
    if not before:
        return None
    moved = [s["t"] for s in sizes if s["t"] > change_at and s["limit"] != before[-1]]
    return moved[0] - change_at if moved else None


def report(run_dir, plot):
    offline = load(run_dir, "offline")
    runs = {n: load(run_dir, n) for n in ["shared", "equal", "optimum", "controller", "alone", "shared-scan",
                                          "protected", "react"]}
    print("| run | timeline | profile | scan | all tenants | misses vs shared | misses vs equal |")
    print("|---|---|---|---|---|---|---|")
    shared, equal = runs["shared"], runs["equal"]
    for name in ["shared", "equal", "optimum", "controller"]:
        r = runs[name]
        if r is None:
            continue
        cells = [f"{late(r, t):.4f}" if name != "shared" else "—" for t in ["timeline", "profile", "scan"]]
        miss = 1 - late(r)
        vs = [f"{(miss / (1 - late(base)) - 1) * 100:+.1f} %" if base else "—" for base in (shared, equal)]
        print(f"| {name} | " + " | ".join(cells) + f" | {late(r):.4f} | {vs[0]} | {vs[1]} |")
    if offline:
        print()
        print(f"Offline (exact LRU on {offline['rounds']} rounds of the same streams, {offline['memory_mb']} MiB): "
              f"shared {offline['shared']:.4f}, equal split {offline['equal_split']:.4f}, optimum partition "
              f"{offline['optimum']:.4f} with " + ", ".join(f"{t['tenant']} {t['optimum_mb']} MiB"
                                                          for t in offline["tenants"]) + ".")
    if runs["controller"] and runs["optimum"]:
        gap = late(runs["controller"]) / late(runs["optimum"]) - 1
        print(f"\nController vs the optimum partition run: {gap * 100:+.2f} % global hit ratio.")
    alone, mixed, protected = runs["alone"], runs["shared-scan"], runs["protected"]
    if alone and protected:
        print()
        print("| protected tenant (timeline) | hit ratio | vs alone |")
        print("|---|---|---|")
        base = late(alone, "timeline")
        print(f"| alone, all the memory | {base:.4f} | — |")
        for label, r in [("next to the scan, one shared cache", mixed),
                         ("next to the scan, partitions + controller (priorities)", protected)]:
            if r:
                h = late(r, "timeline")
                print(f"| {label} | {h:.4f} | {(h / base - 1) * 100:+.2f} % |")
    react = runs["react"]
    if react:
        change_at = react["seconds"] / 2
        moved = reaction(run_dir, change_at)
        print(f"\nReaction: profile's workload changed at {change_at:.0f} s; its size first moved "
              + (f"{moved:.0f} s later." if moved is not None else "not at all."))
        draw(run_dir, plot, change_at)


def draw(run_dir, plot, change_at):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sizes = lines(run_dir / "react.sizes.jsonl")
    trace = lines(run_dir / "react.trace.jsonl")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for tenant in sorted({s["tenant"] for s in sizes}):
        mine = [s for s in sizes if s["tenant"] == tenant]
        top.plot([s["t"] for s in mine], [s["limit"] / (1 << 20) for s in mine], label=tenant)
    top.set_ylabel("size (MiB)")
    top.legend(loc="upper right")
    for tenant in sorted({s["tenant"] for s in trace}):
        mine = [s for s in trace if s["tenant"] == tenant and s["gets"]]
        bottom.plot([s["t"] for s in mine], [s["hits"] / s["gets"] for s in mine], label=tenant)
    bottom.set_ylabel("hit ratio (per second)")
    bottom.set_xlabel("seconds")
    for axis in (top, bottom):
        axis.axvline(change_at, color="grey", linestyle="--")
    top.set_title("shoal controller --goal global: profile's working set shrinks at the dashed line")
    fig.tight_layout()
    fig.savefig(plot, dpi=100)
    print(f"\n![sizes and hit ratios over time](tenants.png)")


if __name__ == "__main__":
    if sys.argv[1] == "--poll":
        poll(sys.argv[2], sys.argv[3])
    else:
        report(Path(sys.argv[1]), sys.argv[2])
