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
                                          "min": int(t.get("min_bytes", 0)),
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


def met(ok):
    return "met" if ok else "**missed**"


def local_share(r):
    """The share of the run's reads served from shared memory."""
    gets = sum(t["gets"] for t in r["tenants"])
    return sum(t.get("local_reads", 0) for t in r["tenants"]) / gets if gets else 0.0


def last_resize(run_dir, name):
    """When the last size change was seen (seconds into the run), or 0."""
    last, seen = 0.0, {}
    for s in lines(run_dir / f"{name}.sizes.jsonl"):
        if s["tenant"] in seen and seen[s["tenant"]] != s["limit"]:
            last = s["t"]
        seen[s["tenant"]] = s["limit"]
    return last


SETTLE = 20.0  # seconds after the last resize before hit ratios count (a fitted scan refills)


def trial(run_dir, name):
    """Issue 27's trial: sizes, the curves' predictions there, cliffs, and the scan's verdict."""
    r = load(run_dir, name)
    if r is None or "curves" not in r:
        return
    since = last_resize(run_dir, name) + SETTLE
    trace = [s for s in lines(run_dir / f"{name}.trace.jsonl") if s["t"] >= since]
    minimum = {s["tenant"]: s["min"] for s in lines(run_dir / f"{name}.sizes.jsonl") if "min" in s}
    print(f"\n`{name}` ({r['seconds']:.0f} s, {local_share(r) * 100:.0f} % of reads local; measured from "
          f"{since:.0f} s, {SETTLE:.0f} s after the last resize):\n")
    print("| tenant | size | minimum | its curve at that size | measured | on a cliff |")
    print("|---|---:|---:|---:|---:|---|")
    verdicts = []
    for c in r["curves"]:
        t = c["tenant"]
        mine = [s for s in trace if s["tenant"] == t]
        gets, hits = sum(s["gets"] for s in mine), sum(s["hits"] for s in mine)
        measured = hits / gets if gets else float("nan")
        low = minimum.get(t, 0)
        print(f"| {t} | {c['size_bytes'] / 2**20:.0f} MiB | {low / 2**20:.0f} MiB | {c['curve_hit_ratio']:.4f} | "
              f"{measured:.4f} | {'**yes**' if c['on_cliff'] else 'no'} |")
        if t == "scan":
            if c["size_bytes"] <= low:
                verdicts.append("the scan gets its minimum")
            else:
                gap = abs(measured - c["curve_hit_ratio"])
                verdicts.append(f"the scan is given {c['size_bytes'] / 2**20:.0f} MiB and hits {measured:.4f}, its "
                                f"curve {c['curve_hit_ratio']:.4f} (gap {gap:.4f}: {met(gap <= 0.02)})")
    decided = [d for d in lines(run_dir / f"{name}.decisions.jsonl")
               if d.get("tenant") == "scan" and d.get("event") in ("resized", "planned")]
    if decided:
        print(f"\nThe controller's last decision for the scan: {decided[-1]['reason']}.")
    cliffs = [c["tenant"] for c in r["curves"] if c["on_cliff"]]
    verdicts.append("no tenant on a cliff: " + met(not cliffs) + (f" ({', '.join(cliffs)})" if cliffs else ""))
    print("\n" + "; ".join(verdicts) + ".")


def report(run_dir, plot):
    settings = run_dir / "settings.json"
    if settings.exists():
        s = json.loads(settings.read_text())
        print(f"Reads served locally: {s['local'] * 100:.0f} % asked; item memory {s['mem_mb']} MiB; controller "
              f"interval {s['interval']}.\n")
    for name in ["trial-fits", "trial-big"]:
        trial(run_dir, name)
    offline = load(run_dir, "offline")
    runs = {n: load(run_dir, n) for n in ["shared", "equal", "optimum", "controller", "alone", "shared-scan",
                                          "protected", "react"]}
    if not any(runs.values()):
        return
    print("| run | timeline | profile | scan | all tenants | misses vs shared | misses vs equal | reads local |")
    print("|---|---|---|---|---|---|---|---|")
    shared, equal = runs["shared"], runs["equal"]
    for name in ["shared", "equal", "optimum", "controller"]:
        r = runs[name]
        if r is None:
            continue
        cells = [f"{late(r, t):.4f}" if name != "shared" else "—" for t in ["timeline", "profile", "scan"]]
        miss = 1 - late(r)
        vs = [f"{(miss / (1 - late(base)) - 1) * 100:+.1f} %" if base else "—" for base in (shared, equal)]
        print(f"| {name} | " + " | ".join(cells) + f" | {late(r):.4f} | {vs[0]} | {vs[1]} | {local_share(r) * 100:.0f} % |")
    if offline:
        print()
        print(f"Offline (exact LRU on {offline['rounds']} rounds of the same streams, {offline['memory_mb']} MiB): "
              f"shared {offline['shared']:.4f}, equal split {offline['equal_split']:.4f}, optimum partition "
              f"{offline['optimum']:.4f} with " + ", ".join(f"{t['tenant']} {t['optimum_mb']} MiB"
                                                          for t in offline["tenants"]) + ".")
    if runs["controller"] and runs["optimum"]:
        gap = late(runs["controller"]) / late(runs["optimum"]) - 1
        print(f"\nController vs the optimum partition run: {gap * 100:+.2f} % global hit ratio "
              f"(target within 1 %: {met(gap >= -0.01)}).")
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
        if protected:
            gap = late(protected, "timeline") / base - 1
            print(f"\nProtected tenant vs alone: {gap * 100:+.2f} % (target within 2 %: {met(gap >= -0.02)}).")
    react = runs["react"]
    if react:
        change_at = react["seconds"] / 2
        moved = reaction(run_dir, change_at)
        print(f"\nReaction: profile's workload changed at {change_at:.0f} s; its size first moved "
              + (f"{moved:.0f} s later (target within 30 s: {met(moved <= 30)})." if moved is not None
                 else "not at all (target within 30 s: **missed**)."))
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
    print("\n![sizes and hit ratios over time](tenants.png)")


if __name__ == "__main__":
    if sys.argv[1] == "--poll":
        poll(sys.argv[2], sys.argv[3])
    else:
        report(Path(sys.argv[1]), sys.argv[2])
