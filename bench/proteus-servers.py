#!/usr/bin/env python3
"""Every server's `cmd_get`, once a second, for bench/proteus.sh's request balance.

    bench/proteus-servers.py 127.0.0.1:PORT … > <variant>.servers.txt

Prints `<unix time> <server index> <cmd_get> <get_hits>` for each server that answers (a server turned
off answers nothing and is retried the next second). Runs until killed.
"""

import socket
import sys
import time


def cmd_get(conn):
    """The server's `cmd_get` and `get_hits` from `stats` (None when the answer lacks either)."""
    conn.sendall(b"stats\r\n")
    answer = b""
    while not answer.endswith(b"END\r\n"):
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        answer += chunk
        if len(answer) > 1 << 20:
            raise ConnectionError("answer too long")
    found = {}
    for line in answer.split(b"\r\n"):
        parts = line.split()
        if len(parts) == 3 and parts[1] in (b"cmd_get", b"get_hits"):
            found[parts[1]] = int(parts[2])
    if len(found) < 2:
        return None
    return found[b"cmd_get"], found[b"get_hits"]


def main():
    servers = sys.argv[1:]
    conns = [None] * len(servers)
    next_tick = time.time()
    while True:
        now = time.time()
        for i, address in enumerate(servers):
            try:
                if conns[i] is None:
                    host, port = address.rsplit(":", 1)
                    conns[i] = socket.create_connection((host, int(port)), timeout=0.5)
                value = cmd_get(conns[i])
            except (OSError, ValueError):
                if conns[i] is not None:
                    conns[i].close()
                conns[i] = None
                continue
            if value is not None:
                print(f"{now:.3f} {i} {value[0]} {value[1]}", flush=True)
        next_tick += 1.0
        time.sleep(max(0.0, next_tick - time.time()))


if __name__ == "__main__":
    main()
