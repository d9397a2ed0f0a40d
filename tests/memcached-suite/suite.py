"""Runs memcached's t/*.t files (run.sh prepared the source tree and its ./memcached-debug wrapper
around `shoal server`), two at a time, each with a deadline, reads their TAP output, prints and
writes a per-file table, and judges the outcome against expected-failures.txt.

The verdict is strict both ways: an assertion that fails and is not listed fails the run, and so
does a listed one that now passes (the list only shrinks as fixes land). A file that stops early is
listed as `died`, `hung` or `timeout` with the number of assertions it ran, so stopping elsewhere
is a change too:
  died     the file exited without running its plan (or ran more than planned)
  hung     the file waited HANG_SECONDS in a read on a socket without getting a byte: memcached's
           tests have no read timeouts, so a missing answer line blocks them for ever; they are
           ended as soon as that is certain instead of at the deadline
  timeout  the file ran past MC_SUITE_TIMEOUT seconds

Two passes, as memcached's own Makefile does: every file, then the basic TLS set (`make
test_basic_tls`: binary.t, getset.t, ssl_*.t) again with SSL_TEST=1; those runs are named
`tls:<file>`."""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

TLS_FILES = ("binary.t", "getset.t", "ssl_*.t")
PLAN = re.compile(r"^1\.\.(\d+)(?:\s*#\s*skip\S*\s*(.*))?$", re.I)
RESULT = re.compile(r"^(not )?ok (\d+)(?: -)?(?: (.*?))?(?: # (skip|todo)\b\s*(.*))?$", re.I)
STOPS = ("died", "hung", "timeout")
HANG_SECONDS = 30
# read(2), recvfrom(2), recvmsg(2): where Perl's readline and IO::Socket::SSL wait for a server.
READ_SYSCALLS = {"x86_64": {"0", "45", "47"}, "aarch64": {"63", "207", "212"}}.get(
    os.uname().machine, set()
)
DESCRIPTION_MAX = 100  # mem_get_is names an assertion after the whole value it expects


@dataclass
class Outcome:
    """What one run of one .t file did."""

    name: str  # the file, or tls:<file> for the SSL_TEST=1 pass
    planned: int | None = None
    skip_all: str | None = None
    passed: int = 0
    skipped: int = 0
    failed: dict[int, str] = field(default_factory=dict)  # number -> description as printed
    ran: int = 0
    exit_code: int | None = None
    stop: str | None = None  # one of STOPS: the file did not run its plan
    seconds: float = 0.0
    stderr_tail: list[str] = field(default_factory=list)


@dataclass
class Expected:
    """One line of expected-failures.txt."""

    name: str
    what: str  # an assertion number, or "died"/"timeout"
    category: str  # "internal" or "gap"
    description: str  # as Test::More prints it (`*` matches anything); for STOPS: "after N"
    reason: str
    line: int


def parse_expected(path: Path) -> list[Expected]:
    """Lines are `file | number | category | description | reason`; `#` starts a comment line."""
    entries = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        parts = [p.strip() for p in raw.split(" | ", 4)]
        if len(parts) != 5 or parts[2] not in ("internal", "gap"):
            sys.exit(f"{path}:{number}: want `file | number | internal/gap | description | reason`")
        if not (parts[1].isdigit() or parts[1] in STOPS):
            sys.exit(f"{path}:{number}: `{parts[1]}` is no assertion number nor one of {STOPS}")
        entries.append(Expected(*parts, line=number))
    return entries


def shorten(description: str) -> str:
    if len(description) <= DESCRIPTION_MAX:
        return description
    return description[: DESCRIPTION_MAX - 3] + "..."


def matches(listed: str, printed: str) -> bool:
    """`*` in a listed description stands for anything (numbers a failing assertion prints)."""
    pattern = ".*".join(re.escape(part) for part in listed.split("*"))
    return re.fullmatch(pattern, printed, re.S) is not None


def blocked_read(pid: int) -> tuple[str, str] | None:
    """While `pid` waits in a read on a socket: (its syscall line, the bytes it has read so far);
    both unchanged over time mean not a byte arrived meanwhile."""
    try:
        call = Path(f"/proc/{pid}/syscall").read_text().split()
        if call[0] not in READ_SYSCALLS:
            return None
        if not os.readlink(f"/proc/{pid}/fd/{int(call[1], 16)}").startswith("socket:"):
            return None
        io = Path(f"/proc/{pid}/io").read_text().splitlines()
        rchar = next(line for line in io if line.startswith("rchar:"))
        return " ".join(call), rchar
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def parse_tap(outcome: Outcome, stdout: str) -> None:
    for line in stdout.splitlines():
        if plan := PLAN.match(line):
            outcome.planned = int(plan.group(1))
            if outcome.planned == 0:
                outcome.skip_all = plan.group(2) or ""
        elif result := RESULT.match(line):
            not_ok, number, description, directive = result.group(1, 2, 3, 4)
            outcome.ran += 1
            if directive and directive.lower() == "skip":
                outcome.skipped += 1
            elif not_ok and not directive:  # a failing TODO is not a failure
                outcome.failed[int(number)] = shorten(description or "")
            else:
                outcome.passed += 1


def run_file(source: Path, name: str, timeout: float) -> Outcome:
    tls = name.startswith("tls:")
    env = {k: v for k, v in os.environ.items() if k != "SSL_TEST"}
    if tls:
        env["SSL_TEST"] = "1"
    outcome = Outcome(name)
    start = time.monotonic()
    # Its own process group, so the servers a file starts (and leaves behind) end with it.
    proc = subprocess.Popen(
        ["perl", f"t/{name.removeprefix('tls:')}"], cwd=source, env=env, text=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )
    waiting, waiting_since = None, start
    while True:
        try:
            stdout, stderr = proc.communicate(timeout=1)
            break
        except subprocess.TimeoutExpired:
            now = time.monotonic()
            state = blocked_read(proc.pid)
            if state is None or state != waiting:
                waiting, waiting_since = state, now
            elif now - waiting_since >= HANG_SECONDS:
                outcome.stop = "hung"
            if now - start >= timeout:
                outcome.stop = "timeout"
            if outcome.stop:
                os.killpg(proc.pid, signal.SIGKILL)
                stdout, stderr = proc.communicate()
                break
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    outcome.seconds = round(time.monotonic() - start, 1)
    outcome.exit_code = proc.returncode
    parse_tap(outcome, stdout)
    outcome.stderr_tail = stderr.splitlines()[-8:]
    if outcome.stop is None and outcome.skip_all is None:
        # Test::More exits with the number of failures (at most 254); anything else, a missing
        # plan or fewer assertions than planned means the file stopped early.
        clean_exit = proc.returncode == min(len(outcome.failed), 254)
        if outcome.planned is None or outcome.ran != outcome.planned or not clean_exit:
            outcome.stop = "died"
    return outcome


def ranges(numbers) -> str:
    """1,2,3,7 -> "1-3, 7"."""
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def table(outcomes: list[Outcome]) -> str:
    rows = ["| file | planned | passed | failed | skipped | stopped early | seconds "
            "| failing assertions |", "|---|---:|---:|---:|---:|---|---:|---|"]
    for o in outcomes:
        planned = "no plan" if o.planned is None else o.planned
        if o.skip_all is not None:
            planned = "skip all"
        stop = f"{o.stop} after {o.ran}" if o.stop else ""
        rows.append(f"| {o.name} | {planned} | {o.passed} | {len(o.failed)} | {o.skipped} | {stop} "
                    f"| {o.seconds} | {ranges(o.failed)} |")
    return "\n".join(rows)


def judge(outcomes: list[Outcome], expected: list[Expected]) -> tuple[list[str], list[str]]:
    """Returns (unexpected: failures not listed, as lines for the list; stale: listed lines that
    no longer hold), both only for files that ran."""
    ran = {o.name: o for o in outcomes}
    listed = {(e.name, e.what): e for e in expected}
    unexpected, stale = [], []
    for o in outcomes:
        for number, description in sorted(o.failed.items()):
            entry = listed.get((o.name, str(number)))
            if entry is None or not matches(entry.description, description):
                unexpected.append(f"{o.name} | {number} | ? | {description} | ?")
        if o.stop:
            entry = listed.get((o.name, o.stop))
            if entry is None or not matches(entry.description, f"after {o.ran}"):
                why = " / ".join(o.stderr_tail[-2:])
                unexpected.append(f"{o.name} | {o.stop} | ? | after {o.ran} | ? ({why})")
    for e in expected:
        o = ran.get(e.name)
        if o is None:
            continue
        if e.what in STOPS:
            holds = o.stop == e.what and matches(e.description, f"after {o.ran}")
        else:
            printed = o.failed.get(int(e.what))
            holds = printed is not None and matches(e.description, printed)
            if not holds and o.stop and int(e.what) > o.ran:
                continue  # not reached: the listed stop (or an unexpected one) speaks for it
        if not holds:
            stale.append(f"line {e.line}: {e.name} | {e.what} | {e.description}")
    return unexpected, stale


def select(source: Path) -> list[str]:
    every = sorted(p.name for p in (source / "t").glob("*.t"))
    if not every:
        sys.exit(f"no t/*.t files under {source}")
    tls = sorted({p.name for pattern in TLS_FILES for p in (source / "t").glob(pattern)})
    names = every + [f"tls:{n}" for n in tls]
    if wanted := os.environ.get("MC_SUITE_FILES", "").split():
        unknown = set(wanted) - set(names)
        if unknown:
            sys.exit(f"MC_SUITE_FILES names unknown runs: {' '.join(sorted(unknown))}")
        names = [n for n in names if n in wanted]
    if any(n.startswith("tls:") for n in names):
        if subprocess.run(["perl", "-MIO::Socket::SSL", "-e1"], capture_output=True).returncode:
            print("\n!!! Perl's IO::Socket::SSL is missing (Debian: libio-socket-ssl-perl): "
                  "the SSL_TEST=1 pass is SKIPPED !!!\n", file=sys.stderr)
            names = [n for n in names if not n.startswith("tls:")]
    return names


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--source", type=Path, required=True, help="unpacked memcached source tree")
    args.add_argument("--report-dir", type=Path, required=True)
    args.add_argument("--expected", type=Path, required=True)
    args.add_argument("--shoal", required=True, help="the binary under test (for the report)")
    opts = args.parse_args()
    timeout = float(os.environ.get("MC_SUITE_TIMEOUT", "240"))
    expected = parse_expected(opts.expected)
    names = select(opts.source)
    # Longest first (as the last run measured), so two workers finish together.
    previous = opts.report_dir / "report.json"
    if previous.exists():
        seconds = {run["name"]: run["seconds"] for run in json.loads(previous.read_text())["runs"]}
        names.sort(key=lambda name: -seconds.get(name, 0))

    start = time.monotonic()
    outcomes = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = [pool.submit(run_file, opts.source, name, timeout) for name in names]
        for done in as_completed(runs):
            o = done.result()
            outcomes.append(o)
            state = o.stop or ("skipped" if o.skip_all is not None else "done")
            print(f"  {o.name:32} {state:8} {o.passed:6} passed {len(o.failed):6} failed "
                  f"{o.seconds:6}s", flush=True)
    outcomes.sort(key=lambda o: (o.name.startswith("tls:"), o.name))
    elapsed = round(time.monotonic() - start)

    unexpected, stale = judge(outcomes, expected)
    summary = [f"memcached's own suite (t/*.t) against `{opts.shoal} server`: {len(outcomes)} runs "
               f"in {elapsed}s; expected failures listed: {len(expected)} "
               f"({sum(e.category == 'internal' for e in expected)} internal, "
               f"{sum(e.category == 'gap' for e in expected)} gap)."]
    if unexpected:
        summary += ["", "Unexpected (not in expected-failures.txt; fix Shoal, or list them with a "
                    "category and reason):", "", *(f"    {u}" for u in unexpected)]
    if stale:
        summary += ["", "Listed in expected-failures.txt but no longer so (remove or update the "
                    "line):", "", *(f"    {s}" for s in stale)]
    report = f"{table(outcomes)}\n\n" + "\n".join(summary) + "\n"
    print("\n" + report)
    opts.report_dir.mkdir(parents=True, exist_ok=True)
    title = "# memcached's own test suite against Shoal"
    (opts.report_dir / "report.md").write_text(f"{title}\n\n{report}")
    (opts.report_dir / "report.json").write_text(json.dumps({
        "shoal": opts.shoal, "seconds": elapsed, "unexpected": unexpected, "stale": stale,
        "runs": [asdict(o) for o in outcomes]}, indent=1) + "\n")
    return 1 if unexpected or stale else 0


if __name__ == "__main__":
    sys.exit(main())
