#!/usr/bin/env bash
# The near cache (docs/design/near-cache.md): a client's read of a key the near cache admitted
# (through its shared memory) against a network get to the upstream, one run, one client.
#
#   bench/near.sh [requests]      (default 20000 per path, size and operation)
#
# An upstream `shoal server` and a near `shoal server --upstream … --admit all` on core 1, the
# client on core 0 (`shoal bench latency`: it stores its keys through the near cache, which
# forwards them upstream; its first local reads miss, are fetched and admitted; the timed reads
# follow). "shoal tcp" is a network get to the near cache, "memcached tcp" a network get to the
# upstream (a Shoal server, which speaks memcached's protocol). The near cache's counters after
# the run show how many keys were fetched and admitted.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib/processes.sh
SHOAL=${SHOAL:-target/release/shoal}
requests=${1:-20000}
up=$(free_port)
taskset -c 1 "$SHOAL" server -p "$up" -U 0 -l 127.0.0.1 -m 256 -t 1 & pids+=($!)
near=$(free_port)
taskset -c 1 "$SHOAL" server -p "$near" -U 0 -l 127.0.0.1 -m 256 -t 1 \
  --upstream "127.0.0.1:$up" --admit all --near-ttl 60 & pids+=($!)
for port in "$up" "$near"; do
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
done
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
taskset -c 0 "$SHOAL" bench latency --server "127.0.0.1:$near" --memcached "127.0.0.1:$up" --requests "$requests"
python3 - "$near" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"stats shoal\r\n")
data = b""
while not data.endswith(b"END\r\n"):
    data += s.recv(65536)
print(" ".join(l[5:] for l in data.decode().split("\r\n") if l.startswith("STAT near_")))
PY
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
