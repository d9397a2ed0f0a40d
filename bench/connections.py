#!/usr/bin/env python3
"""Many client connections at once (issue #26's load target): opens N connections to one
address (a `shoal router` or a `shoal server`), keeps every one open, and has each do G gets of
keys set beforehand (--pipeline of them sent in one write per round), checking every answer;
then closes them. Prints one JSON object: the
connections opened, the gets answered right, every error, the time each phase took, and the
memory (VmRSS and RssAnon, KiB) of the processes given with --pid before, with all the
connections open, and after they closed.

    bench/connections.py --address 127.0.0.1:5000 --connections 10000 --gets 10 --pid router=1234

Used by bench/connections.sh (10 000 connections) and tests/router/test_connections.py (2 000).
The caller raises the open-files limit (`ulimit -n`): this process holds one descriptor per
connection. Nothing here is timed against a bound: a slow machine is slow, never wrong.
"""

import argparse
import asyncio
import json
import resource
import sys
import time

KEYS = 100
VALUE = b"v" * 32


def key(i: int) -> bytes:
    return b"conn:%d" % (i % KEYS)


def memory(pid: int) -> dict:
    """VmRSS and RssAnon of `pid`, in KiB (what the kernel reports in /proc/<pid>/status)."""
    found = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon"):
                found[name] = int(value.split()[0])
    return found


def raise_open_files(needed: int) -> int:
    """Raises this process's soft limit of open files to at least `needed` (up to the hard
    limit); returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        soft = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft


async def read_answer(reader) -> bytes:
    """A get's answer: `VALUE …` lines up to `END`, or one line of anything else (an error)."""
    answer = b""
    while True:
        line = await reader.readline()
        if not line:
            raise asyncio.IncompleteReadError(answer, None)
        answer += line
        if line.startswith(b"VALUE "):
            answer += await reader.readexactly(int(line.split()[3]) + 2)
        elif line == b"END\r\n" or not answer.startswith(b"VALUE ") and not answer.startswith(b"STAT "):
            return answer


async def fill(host: str, port: int) -> None:
    """Sets the keys every connection reads."""
    reader, writer = await asyncio.open_connection(host, port)
    for i in range(KEYS):
        writer.write(b"set %s 0 0 %d\r\n%s\r\n" % (key(i), len(VALUE), VALUE))
        await writer.drain()
        answer = await reader.readline()
        if answer != b"STORED\r\n":
            raise SystemExit(f"set {key(i)!r}: {answer!r}")
    writer.close()
    await writer.wait_closed()


async def run(host: str, port: int, connections: int, gets: int, pipeline: int, opening: int, pids: dict) -> dict:
    errors: list = []
    result = {"address": f"{host}:{port}", "connections": connections, "gets_per_connection": gets,
              "pipeline": pipeline}
    result["memory_before"] = {name: memory(pid) for name, pid in pids.items()}
    await fill(host, port)

    opened: list = [None] * connections
    gate = asyncio.Semaphore(opening)

    async def open_one(i: int) -> None:
        # A bounded number of connects in flight: a burst of 10 000 SYNs would overflow the
        # listener's backlog and wait out SYN retransmissions (seconds), not fail, but slowly.
        async with gate:
            try:
                opened[i] = await asyncio.open_connection(host, port)
            except OSError as e:
                errors.append(f"connection {i}: {e}")

    start = time.monotonic()
    await asyncio.gather(*(open_one(i) for i in range(connections)))
    result["open_seconds"] = round(time.monotonic() - start, 3)
    result["opened"] = sum(1 for c in opened if c is not None)

    answered = 0

    async def get_some(i: int, round_: int) -> None:
        """`pipeline` gets on connection `i`, sent in one write, then their answers."""
        nonlocal answered
        reader, writer = opened[i]
        keys = [key(i + round_ * pipeline + j) for j in range(pipeline)]
        try:
            writer.write(b"".join(b"get " + k + b"\r\n" for k in keys))
            await writer.drain()
            for k in keys:
                answer = await read_answer(reader)
                expected = b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k, len(VALUE), VALUE)
                if answer == expected:
                    answered += 1
                else:
                    errors.append(f"connection {i}, get {k!r}: answered {answer[:200]!r}")
        except (OSError, asyncio.IncompleteReadError) as e:
            errors.append(f"connection {i}: {e!r}")

    # Every connection is open while every round runs: each round is one get on each of them.
    start = time.monotonic()
    live = [i for i, c in enumerate(opened) if c is not None]
    for round_ in range(gets // pipeline):
        await asyncio.gather(*(get_some(i, round_) for i in live))
    seconds = time.monotonic() - start
    result["gets_seconds"] = round(seconds, 3)
    result["gets_answered"] = answered
    result["gets_per_second"] = round(answered / seconds) if seconds > 0 else None
    result["memory_open"] = {name: memory(pid) for name, pid in pids.items()}

    for c in opened:
        if c is not None:
            c[1].close()
    for c in opened:
        if c is not None:
            try:
                await c[1].wait_closed()
            except OSError:
                pass
    result["errors"] = len(errors)
    result["first_errors"] = errors[:10]
    # Errors by what was answered, without the key and the connection.
    kinds: dict = {}
    for e in errors:
        kind = e.split(": ", 1)[-1]
        kinds[kind] = kinds.get(kind, 0) + 1
    result["errors_by_answer"] = dict(sorted(kinds.items(), key=lambda k: -k[1])[:10])
    return result


async def settled_memory(host: str, port: int, pids: dict, connections_stat: str, seconds: float) -> dict:
    """The memory of `pids` once the address's `stats` says its client connections closed
    (`connections_stat`, e.g. curr_connections, is back to a handful), polled for up to
    `seconds`."""
    deadline = time.monotonic() + seconds
    while connections_stat:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"stats\r\n")
        await writer.drain()
        stats = (await read_answer(reader)).decode()
        writer.close()
        current = [int(line.split()[2]) for line in stats.split("\r\n") if line.startswith(f"STAT {connections_stat} ")]
        if not current or current[0] <= 10 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    return {name: memory(pid) for name, pid in pids.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", required=True, help="host:port of a router or a server")
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--gets", type=int, default=10, help="gets per connection (a multiple of --pipeline)")
    parser.add_argument("--pipeline", type=int, default=1,
                        help="gets each connection sends in one write per round before reading their answers")
    parser.add_argument("--opening", type=int, default=256, help="connects in flight at once")
    parser.add_argument("--pid", action="append", default=[], metavar="NAME=PID",
                        help="a process whose memory is reported (repeatable)")
    parser.add_argument("--connections-stat", default="",
                        help="a `stats` counter of open connections to wait for after closing (curr_connections)")
    args = parser.parse_args()
    host, _, port = args.address.rpartition(":")
    pids = {name: int(pid) for name, _, pid in (p.partition("=") for p in args.pid)}
    limit = raise_open_files(args.connections + 64)
    if limit < args.connections + 64:
        raise SystemExit(f"open files limited to {limit}: raise `ulimit -n` above {args.connections + 64}")
    if args.pipeline < 1 or args.gets % args.pipeline:
        raise SystemExit("--gets must be a multiple of --pipeline (at least 1)")
    result = asyncio.run(run(host, int(port), args.connections, args.gets, args.pipeline, args.opening, pids))
    result["memory_after"] = asyncio.run(settled_memory(host, int(port), pids, args.connections_stat, 60))
    json.dump(result, sys.stdout)
    print()
    if result["errors"] or result["opened"] != args.connections:
        sys.exit(1)


if __name__ == "__main__":
    main()
