"""The transcript format of the differential corpus: parsing `cases/*.txt` into cases.

A corpus file holds one or more cases; a case is a title line (`== title`), optional case
options, and steps. Chunks are written with visible escapes, so `\\r\\n` is what goes on the
wire. The format is described for corpus authors in README.md; this module is its definition.

    == incr wraps at 2^64
    > set n 0 0 20\\r\\n18446744073709551615\\r\\n
    > incr n 1\\r\\n

Steps:
    > CHUNK        send CHUNK, then the sentinel `mn\\r\\n`; the answer is all that comes before MN
    >~ CHUNK       send CHUNK and read nothing (a partial request; its answer, if any, is read
                   with the next chunk's)
    >! CHUNK       send CHUNK and read until the server closes the connection
    >? CHUNK       send CHUNK and read until the server has been quiet for a moment (use only
                   where the sentinel would be swallowed)
    .. CHUNK       continues the previous chunk (the bytes are appended to it)
    @advance N     move the server's clock N seconds forward
    @reconnect     close the connection and open a new one
Case options (before the first step):
    @stats-names          compare the names of STAT lines (as a set); by default STAT lines
                          are elided
    @expect-difference R  an intended difference (docs/PROTOCOL.md): the servers must differ,
                          R says why

Escapes inside chunks: `\\r \\n \\t \\0 \\s`(space) `\\\\ \\{ \\xHH`; `{N*TEXT}` is TEXT repeated
N times; `{casK}`, `{casK+D}`, `{casK-D}` stand for the K-th distinct CAS unique the server
answered in this case (placeholders are numbered in order of first appearance).
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

CASES_DIR = Path(__file__).resolve().parent / "cases"

SEND, SEND_PARTIAL, SEND_CLOSE, SEND_QUIET = ">", ">~", ">!", ">?"
SEND_KINDS = (SEND, SEND_PARTIAL, SEND_CLOSE, SEND_QUIET)


class CorpusError(Exception):
    """A corpus file that does not follow the format (reported with file and line)."""


@dataclass
class Step:
    """One step of a case: a chunk to send (`kind` is one of SEND_KINDS) or a directive
    (`kind` is "advance" or "reconnect")."""

    kind: str
    text: str = ""  # the chunk as written (escapes not yet expanded)
    seconds: int = 0  # for "advance"
    line: int = 0


@dataclass
class Case:
    file: str
    title: str
    line: int
    steps: list = field(default_factory=list)
    stats_names: bool = False
    expect_difference: str = ""  # the reason, when the case is an intended difference

    @property
    def id(self):
        return f"{self.file}/{self.title}"

    @property
    def timed(self):
        """Whether the case moves the clock (memcached then needs real sleeps)."""
        return any(step.kind == "advance" for step in self.steps)


_ESCAPES = {"r": b"\r", "n": b"\n", "t": b"\t", "0": b"\0", "s": b" ", "\\": b"\\", "{": b"{",
            "}": b"}"}
_PLACEHOLDER = re.compile(r"\{(?:(\d+)\*([^{}]*)|cas(\d+)(?:([+-])(\d+))?)\}")


def expand(text, cas_of=None):
    """The bytes of a chunk as written. `cas_of(k)` gives the real CAS unique of placeholder k
    (None: placeholders are refused)."""
    out = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            nxt = text[i + 1:i + 2]
            if nxt == "x":
                out += bytes([int(text[i + 2:i + 4], 16)])
                i += 4
                continue
            if nxt not in _ESCAPES:
                raise CorpusError(f"unknown escape \\{nxt} in {text!r}")
            out += _ESCAPES[nxt]
            i += 2
            continue
        if c == "{":
            m = _PLACEHOLDER.match(text, i)
            if not m:
                raise CorpusError(f"bad placeholder at {text[i:i + 20]!r} (write \\{{ for a brace)")
            if m.group(1):
                out += expand(m.group(2)) * int(m.group(1))
            else:
                if cas_of is None:
                    raise CorpusError(f"CAS placeholder outside a replay: {m.group(0)}")
                value = cas_of(int(m.group(3)))
                delta = int(m.group(5) or 0)
                value = value + delta if m.group(4) == "+" else value - delta
                out += str(value).encode()
            i = m.end()
            continue
        out += c.encode("utf-8")
        i += 1
    return bytes(out)


def parse(path):
    """The cases of one corpus file."""
    path = Path(path)
    cases, case = [], None

    def fail(lineno, msg):
        raise CorpusError(f"{path.name}:{lineno}: {msg}")

    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.rstrip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("== "):
            title = line[3:].strip()
            if any(c.title == title for c in cases):
                fail(lineno, f"duplicate case title {title!r}")
            case = Case(path.stem, title, lineno)
            cases.append(case)
            continue
        if case is None:
            fail(lineno, "a step before the first case title (== ...)")
        head, _, rest = line.partition(" ")
        if head in SEND_KINDS:
            if not rest:
                fail(lineno, "empty chunk")
            case.steps.append(Step(head, rest, line=lineno))
        elif head == "..":
            if not case.steps or case.steps[-1].kind not in SEND_KINDS:
                fail(lineno, "continuation without a chunk before it")
            case.steps[-1].text += rest
        elif head == "@advance":
            if not rest.isdigit() or int(rest) == 0:
                fail(lineno, "@advance takes a positive number of seconds")
            case.steps.append(Step("advance", seconds=int(rest), line=lineno))
        elif head == "@reconnect" and not rest:
            case.steps.append(Step("reconnect", line=lineno))
        elif head in ("@stats-names", "@expect-difference"):
            if case.steps:
                fail(lineno, f"{head} must come before the first step")
            if head == "@stats-names":
                case.stats_names = True
            elif not rest:
                fail(lineno, "@expect-difference needs a reason")
            else:
                case.expect_difference = rest
        else:
            fail(lineno, f"unknown line {line[:40]!r}")
    for c in cases:
        if not any(s.kind in SEND_KINDS for s in c.steps):
            raise CorpusError(f"{path.name}:{c.line}: case {c.title!r} sends nothing")
        for s in c.steps:
            if s.kind in SEND_KINDS:
                try:
                    expand(s.text, cas_of=lambda k: 0)
                except CorpusError as e:
                    raise CorpusError(f"{path.name}:{s.line}: {e}") from None
    return cases


def corpus_files():
    return sorted(CASES_DIR.glob("*.txt"))
