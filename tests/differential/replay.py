"""Replaying corpus cases against a server and normalizing what it answers.

A case is replayed on a server of one kind ("memcached" or "shoal"); the result is a list of
exchanges (what was sent, the normalized answer), which two servers must agree on exactly.
Normalization (see README.md): CAS uniques become placeholders numbered per case in order of
first appearance (`<cas1>`); `t`/`l` meta flags and `exp=`/`la=` of `me` compare within ±1;
`VERSION` strings, `me`'s `cls=`/`size=` and STAT lines are set aside. memcached runs
without its background LRU threads (MEMCACHED_OPTIONS), which make incr/decr padding random.

Clocks: shoal (started with --test-mode) is moved with `debugtime N` on a second connection.
memcached's clock only moves with real time, once a second: a case that advances the clock is
started just after memcached's clock ticked (its `STAT time` is polled), and `@advance N`
sleeps until the clock has moved exactly N seconds, so both servers see the same N.

Run as a program to print transcripts, or to compare servers without pytest:
    python3 tests/differential/replay.py                    # every case against memcached
    python3 tests/differential/replay.py --compare -k incr   # memcached vs shoal, cases "*incr*"
"""

import argparse
import re
import socket
import sys
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for harness.py
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Server  # noqa: E402
import transcript as tr  # noqa: E402

SENTINEL = b"mn\r\n"
SENTINEL_ANSWER = b"MN\r\n"
ANSWER_TIMEOUT = 30.0  # seconds to wait for the sentinel's answer, or for a close (a loaded machine is slow)
QUIET = 0.3  # seconds of silence that end a `>?` read
META_CODES = {"HD", "VA", "EN", "NF", "NS", "EX", "MN"}
FUZZY_META = ("t", "l")  # meta return flags compared within ±1 (clock ticks)
FUZZY_ME = ("exp=", "la=")
ELIDED_ME = ("cls=", "size=")  # memcached's slab class and its own item header size
# memcached's background LRU threads briefly hold items, and incr/decr then writes a new
# item instead of padding in place: without them, memcached answers deterministically.
MEMCACHED_OPTIONS = ("-o", "no_lru_maintainer,no_lru_crawler")
_MN_REQUEST = re.compile(rb"(?m)^mn(?:[ \t][^\n]*)?\r?\n")  # request lines that answer MN


class ReplayError(Exception):
    """Something went wrong with a server, not in the comparison (ends the case)."""


class ClockSlip(ReplayError):
    """memcached's clock did not step as a timed case needs (a loaded machine): the case is
    worth another try."""


# --- normalized answers -------------------------------------------------------------------

class Fuzzy:
    """A clock-derived number (`t9`, `la=3`) that matches another within ±1; -1 (no expiry)
    matches only -1."""

    def __init__(self, prefix, value):
        self.prefix, self.value = prefix, value

    def __eq__(self, other):
        if not isinstance(other, Fuzzy) or other.prefix != self.prefix:
            return False
        if -1 in (self.value, other.value):
            return self.value == other.value
        return abs(self.value - other.value) <= 1

    __hash__ = None

    def __repr__(self):
        return f"{self.prefix}{self.value}"


def escape(s):
    """Text of latin-1 wire bytes with \\r, \\n and non-printables escaped."""
    out = []
    for ch in s:
        o = ord(ch)
        if ch == "\r":
            out.append("\\r")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\\":
            out.append("\\\\")
        elif o < 32 or o >= 127:
            out.append(f"\\x{o:02x}")
        else:
            out.append(ch)
    return "".join(out)


@dataclass
class Line:
    """One normalized line of an answer: space-separated tokens and the line ending as sent
    (a data block is one token with an empty ending; a marker such as `<closed>` likewise)."""

    tokens: tuple
    end: str = "\r\n"

    def __str__(self):
        text = escape(" ".join(map(str, self.tokens)) + self.end)
        if len(text) <= 160:
            return text
        digest = zlib.crc32(text.encode())
        return f"{text[:100]} ... {text[-30:]}  ({len(text)} chars, crc32 {digest:08x})"


def marker(text):
    return Line((f"<{text}>",), "")


@dataclass
class Exchange:
    """A step of a case and the normalized answer to it."""

    step: str  # the chunk as written in the corpus, or the directive
    answer: list = field(default_factory=list)  # of Line

    def key(self):
        return (self.step, [(line.tokens, line.end) for line in self.answer])


class Normalizer:
    """Normalizes answers within one case; keeps the CAS placeholder numbering."""

    def __init__(self, stats_names=False):
        self.stats_names = stats_names
        self.cas_ids = {}  # real CAS unique -> placeholder number

    def cas(self, number):
        """The placeholder of a CAS unique (0 stays 0: memcached's "no CAS")."""
        if number == "0" or not number.isdigit():
            return number
        n = self.cas_ids.setdefault(int(number), len(self.cas_ids) + 1)
        return f"<cas{n}>"

    def cas_value(self, k):
        for value, n in self.cas_ids.items():
            if n == k:
                return value
        raise ReplayError(f"{{cas{k}}} used before the server answered a {k}th CAS unique")

    def meta_flags(self, tokens):
        out = []
        for tok in tokens:
            if tok[:1] == "c" and tok[1:].isdigit():
                out.append("c" + self.cas(tok[1:]))
            elif tok[:1] in FUZZY_META and re.fullmatch(r"-?\d+", tok[1:]):
                out.append(Fuzzy(tok[0], int(tok[1:])))
            else:
                out.append(tok)
        return out

    def me_fields(self, tokens):
        out = []
        for tok in tokens:
            name, eq, value = tok.partition("=")
            prefix = name + eq
            if prefix == "cas=":
                out.append("cas=" + self.cas(value))
            elif prefix in FUZZY_ME and re.fullmatch(r"-?\d+", value):
                out.append(Fuzzy(prefix, int(value)))
            elif prefix in ELIDED_ME:
                out.append(prefix + "<x>")
            else:
                out.append(tok)
        return out

    def answer(self, data):
        """The normalized lines of raw answer bytes."""
        text = data.decode("latin-1")
        lines, pos, stats = [], 0, []
        while pos < len(text):
            nl = text.find("\n", pos)
            raw = text[pos:] if nl < 0 else text[pos:nl + 1]
            pos += len(raw)
            end = "\r\n" if raw.endswith("\r\n") else "\n" if raw.endswith("\n") else ""
            tokens = raw[:len(raw) - len(end)].split(" ")
            if tokens[0] == "STAT" and end:
                stats.append(tokens[1] if len(tokens) > 1 else "")
                continue
            if stats:
                lines += self.stats(stats)
                stats = []
            datalen = None
            if tokens[0] == "VALUE" and len(tokens) in (4, 5) and tokens[3].isdigit():
                datalen = int(tokens[3])
                if len(tokens) == 5:
                    tokens[4] = self.cas(tokens[4])
            elif tokens[0] in META_CODES:
                if tokens[0] == "VA" and len(tokens) > 1 and tokens[1].isdigit():
                    datalen = int(tokens[1])
                    tokens = tokens[:2] + self.meta_flags(tokens[2:])
                else:
                    tokens = tokens[:1] + self.meta_flags(tokens[1:])
            elif tokens[0] == "ME":
                tokens = tokens[:2] + self.me_fields(tokens[2:])
            elif tokens[0] == "VERSION" and len(tokens) > 1:
                tokens = ["VERSION", "<version>"]
            lines.append(Line(tuple(tokens), end))
            if datalen is not None and end:
                block = text[pos:pos + datalen + 2]
                pos += len(block)
                lines.append(Line((block,), ""))
        if stats:
            lines += self.stats(stats)
        return lines

    def stats(self, names):
        """STAT lines: by name (sorted) with @stats-names, else left out altogether (what
        they list depends on memory use and history)."""
        if self.stats_names:
            return [Line(("STAT", name, "<value>")) for name in sorted(set(names))]
        return []


# --- servers ------------------------------------------------------------------------------

class Target:
    """A running server of one kind and its clock. memcached runs with MEMCACHED_OPTIONS
    unless `default_config` (used where its stat names are compared)."""

    def __init__(self, kind, default_config=False):
        self.kind = kind
        self.options = () if default_config else MEMCACHED_OPTIONS
        self.server = None
        self.start()

    def start(self):
        if self.kind == "shoal":
            self.server = Server.shoal("--test-mode").start()
        else:
            self.server = Server.memcached(*self.options).start()
        self.synced = None

    def stop(self):
        if self.server:
            self.server.stop()

    def alive(self):
        return self.server.proc.poll() is None

    def connect(self):
        return self.server.connect(timeout=ANSWER_TIMEOUT)

    def command(self, request):
        """One request on a fresh connection; its answer up to the sentinel's."""
        with self.connect() as sock:
            return exchange(sock, request, 1)

    def begin_case(self, case):
        answer = self.command(b"flush_all\r\n")
        if answer != b"OK\r\n":
            raise ReplayError(f"flush_all before the case answered {answer!r}")
        if case.timed and self.kind != "shoal":
            start = self.clock()
            while (now := self.clock()) == start:
                time.sleep(0.01)
            self.synced = now

    def clock(self):
        """memcached's current time in seconds (`STAT time`)."""
        answer = self.command(b"stats\r\n")
        m = re.search(rb"STAT time (\d+)\r\n", answer)
        if not m:
            raise ReplayError("stats without STAT time")
        return int(m.group(1))

    def advance(self, seconds):
        if self.kind == "shoal":
            answer = self.command(b"debugtime %d\r\n" % seconds)
            if answer != b"OK\r\n":
                raise ReplayError(f"debugtime {seconds} answered {answer!r}")
            return
        if self.clock() != self.synced:
            raise ClockSlip("memcached's clock ticked before @advance: the case is too slow "
                              "for exact clock steps (keep timed cases short)")
        target = self.synced + seconds
        time.sleep(seconds - 0.5)
        while (now := self.clock()) < target:
            time.sleep(0.01)
        if now != target:
            raise ClockSlip(f"memcached's clock jumped to {now}, expected {target}")
        self.synced = target


def read_until(sock, done, timeout):
    """Bytes from `sock` until `done(data)`; raises ReplayError with what came on timeout."""
    data = b""
    deadline = time.monotonic() + timeout
    while not done(data):
        left = deadline - time.monotonic()
        if left <= 0:
            raise ReplayError(f"timeout; got {data!r}")
        sock.settimeout(left)
        try:
            more = sock.recv(1 << 20)
        except socket.timeout:
            continue
        if not more:
            raise ReplayError(f"connection closed; got {data!r}")
        data += more
    return data


def count_mn(answer):
    return sum(1 for line in answer.split(b"\n")[:-1] if line == b"MN\r")


def exchange(sock, chunk, expected_mn=None):
    """Sends `chunk` and the sentinel; returns the answer before the sentinel's MN."""
    if expected_mn is None:
        expected_mn = 1 + len(_MN_REQUEST.findall(chunk))
    sock.sendall(chunk)
    sock.sendall(SENTINEL)
    data = read_until(sock, lambda d: d.endswith(SENTINEL_ANSWER) and count_mn(d) >= expected_mn,
                      ANSWER_TIMEOUT)
    return data[:-len(SENTINEL_ANSWER)]


def read_quiet(sock):
    data = b""
    sock.settimeout(QUIET)
    try:
        while more := sock.recv(1 << 20):
            data += more
    except socket.timeout:
        return data, False
    except ConnectionResetError:
        pass
    return data, True


def read_to_close(sock):
    """Everything until the server closes; (data, closed)."""
    data = b""
    deadline = time.monotonic() + ANSWER_TIMEOUT
    try:
        while time.monotonic() < deadline:
            sock.settimeout(max(deadline - time.monotonic(), 0.01))
            more = sock.recv(1 << 20)
            if not more:
                return data, True
            data += more
    except socket.timeout:
        pass
    except ConnectionResetError:
        return data, True
    return data, False


def replay(case, target):
    """The normalized exchanges of `case` on `target` (a server error ends the case with a
    marker line, which then differs from the other server's answer)."""
    norm = Normalizer(case.stats_names)
    exchanges = []
    sock = None
    try:
        target.begin_case(case)
        sock = target.connect()
        for step in case.steps:
            if step.kind == "advance":
                exchanges.append(Exchange(f"@advance {step.seconds}"))
                target.advance(step.seconds)
                continue
            if step.kind == "reconnect":
                exchanges.append(Exchange("@reconnect"))
                if sock:
                    sock.close()
                sock = target.connect()
                continue
            ex = Exchange(f"{step.kind} {step.text}")
            exchanges.append(ex)
            if sock is None:
                raise ReplayError("the connection is closed: the case needs @reconnect")
            chunk = tr.expand(step.text, norm.cas_value)
            if step.kind == tr.SEND:
                try:
                    ex.answer = norm.answer(exchange(sock, chunk))
                except ReplayError as e:
                    raise ReplayError(f"no answer up to the sentinel mn ({e})") from None
            elif step.kind == tr.SEND_PARTIAL:
                sock.sendall(chunk)
            elif step.kind == tr.SEND_QUIET:
                sock.sendall(chunk)
                data, closed = read_quiet(sock)
                ex.answer = norm.answer(data) + ([marker("closed")] if closed else [])
                if closed:
                    sock.close()
                    sock = None
            else:
                sock.sendall(chunk)
                data, closed = read_to_close(sock)
                ex.answer = norm.answer(data) + [marker("closed" if closed else "still open")]
                sock.close()
                sock = None
    except (ReplayError, OSError) as e:
        exchanges.append(Exchange("<replay stopped>", [marker(f"{type(e).__name__}: {e}")]))
    finally:
        if sock:
            sock.close()
    if not target.alive():
        exchanges.append(Exchange("<server>", [marker(
            f"{target.kind} exited with code {target.server.proc.returncode}")]))
        target.start()
    return exchanges


# --- whole corpus -------------------------------------------------------------------------

def run_sequential(cases, kind, default_config=False):
    """Replays `cases` one after another on one fresh server."""
    target = Target(kind, default_config)
    try:
        return {case.id: replay_steady(case, target) for case in cases}
    finally:
        target.stop()


def replay_steady(case, target, attempts=3):
    """`replay`, tried again (up to `attempts` in all) while memcached's clock slips under a
    timed case; the last attempt's exchanges stand, slip included."""
    for _ in range(attempts - 1):
        exchanges = replay(case, target)
        if not any(ClockSlip.__name__ in str(line) for ex in exchanges for line in ex.answer):
            return exchanges
    return replay(case, target)


def run_corpus(cases, kinds, workers=3):
    """{kind: {case id: exchanges}} for every kind in `kinds`. Each corpus file gets its own
    server per kind. On memcached, a timed case (it sleeps) or a @stats-names case (it wants
    memcached's default configuration) gets a server of its own, and those run concurrently
    with everything else. shoal replays each file's cases in order on one server."""
    results = {kind: {} for kind in kinds}
    lock = threading.Lock()

    def job(kind, group, default_config=False):
        out = run_sequential(group, kind, default_config)
        with lock:
            results[kind].update(out)

    def alone(kind, case):
        return kind != "shoal" and (case.timed or case.stats_names)

    by_file = {}
    for case in cases:
        by_file.setdefault(case.file, []).append(case)
    single = [(k, [c], c.stats_names) for k in kinds for c in cases if alone(k, c)]
    grouped = [(k, [c for c in group if not alone(k, c)]) for k in kinds for group in by_file.values()]
    with ThreadPoolExecutor(max(len(single), 1)) as sleepers, ThreadPoolExecutor(workers) as pool:
        futures = [sleepers.submit(job, *args) for args in single]
        futures += [pool.submit(job, k, g) for k, g in grouped if g]
        for f in futures:
            f.result()
    return results


def render(exchanges):
    out = []
    for ex in exchanges:
        out.append(ex.step)
        out += [f"    {line}" for line in ex.answer]
    return "\n".join(out)


def diff(case, ref_kind, ref, cand_kind, cand):
    """A readable account of where two replays of `case` disagree (None if they agree)."""
    if [e.key() for e in ref] == [e.key() for e in cand]:
        return None
    out = [f"case {case.id!r} ({case.file}.txt line {case.line}) differs:"]
    width = max(len(ref_kind), len(cand_kind))
    for i in range(max(len(ref), len(cand))):
        r = ref[i] if i < len(ref) else Exchange("<nothing>")
        c = cand[i] if i < len(cand) else Exchange("<nothing>")
        same = r.key() == c.key()
        out.append(f"{'  ' if same else '!!'} {r.step}" + ("" if r.step == c.step else
                                                          f"   /   {c.step}"))
        if same:
            out += [f"     {' ' * width}  {line}" for line in r.answer]
        else:
            for kind, ex in ((ref_kind, r), (cand_kind, c)):
                lines = [str(line) for line in ex.answer] or ["(nothing)"]
                out.append(f"     {kind:>{width}}: {lines[0]}")
                out += [f"     {' ' * width}  {line}" for line in lines[1:]]
    return "\n".join(out)


def load_cases(files=None, pattern=None):
    cases = [c for f in (files or tr.corpus_files()) for c in tr.parse(f)]
    return [c for c in cases if not pattern or pattern in c.id]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path, help="corpus files (default: all)")
    ap.add_argument("-k", dest="pattern", help="only cases whose 'file/title' contains this")
    ap.add_argument("--against", choices=["memcached", "shoal"], default="memcached")
    ap.add_argument("--compare", action="store_true",
                    help="replay on memcached and on --against (default shoal) and print diffs")
    args = ap.parse_args()
    cases = load_cases(args.files, args.pattern)
    if args.compare:
        cand = "shoal" if args.against == "memcached" else args.against
        kinds = ["memcached", cand] if cand != "memcached" else ["memcached", "memcached2"]
        res = run_corpus(cases, kinds)
        bad = 0
        for case in cases:
            d = diff(case, kinds[0], res[kinds[0]][case.id], kinds[1], res[kinds[1]][case.id])
            if d and not case.expect_difference:
                bad += 1
                print(d, end="\n\n")
        print(f"{len(cases)} cases, {bad} differ (intended differences not counted)")
        return 1 if bad else 0
    res = run_corpus(cases, [args.against])[args.against]
    for case in cases:
        print(f"== {case.id}")
        print(render(res[case.id]), end="\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
