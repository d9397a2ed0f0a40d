#!/usr/bin/env bash
# Every table of docs/BENCHMARKS.md, measured again in one go and written into its section:
#
#   bench/all.sh            # about 15 minutes on this 2-core machine, plus the valgrind runs
#   bench/all.sh --full     # the same, with the Nahanni paper's YCSB sizes (an hour or more)
#
# Each script starts what it measures (memcached, shoal server, PostgreSQL) and pins servers
# to CPU 0 and load to CPU 1; bench/rewrite-doc.sh replaces the section between its markers.
# The region store's figures (`shoal region bench`) are not rewritten here, nor bench/ab.sh's
# (it compares two binaries, so it is run around a change, not on its own). Nor are the
# sections written by hand from runs of their own, each with its command in docs/BENCHMARKS.md:
# bench/curves-cost.sh, bench/local-get-many.sh, bench/near-zipf.py, bench/connections.sh,
# bench/faults/run.py (minutes to hours each, and root for the namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."

full=()
[ "${1:-}" = --full ] && full=(--full)
step() { printf '\n==> %s\n' "$*" >&2; }

step "Shoal vs memcached: CPU per request and items that fit (issue #3)"
bench/server-vs-memcached.sh | bench/rewrite-doc.sh server-vs-memcached
step "instructions and system calls per request under valgrind and strace (issue #29)"
bench/instructions.sh | bench/rewrite-doc.sh instructions
step "TLS: shoal server -Z vs memcached -Z (issue #12)"
bench/tls-vs-memcached.sh | bench/rewrite-doc.sh tls-vs-memcached
step "the kernel's floor per request"
bench/kernel-floor.sh | bench/rewrite-doc.sh kernel-floor
step "client reads: shared memory vs TCP (issue #4)"
bench/client-latency.sh | bench/rewrite-doc.sh client-latency
step "leases against the thundering herd (issue #6)"
bench/leases-herd.sh --rounds 2 | bench/rewrite-doc.sh leases
step "pool multiget across 8 servers (issue #13)"
bench/pool.sh | bench/rewrite-doc.sh pool
step "shoal router vs twemproxy (issue #14)"
bench/router-vs-twemproxy.sh | bench/rewrite-doc.sh router
step "Gutter through the router (issue #14)"
bench/gutter.sh | bench/rewrite-doc.sh gutter
step "YCSB over PostgreSQL: ATRL (issue #5)"
bench/ycsb.sh "${full[@]}" | bench/rewrite-doc.sh ycsb
step "Elastic MapReduce: the overhead of elasticity (issue #18)"
bench/mr-overhead.sh | bench/rewrite-doc.sh mr-overhead
step "Elastic MapReduce: the elasticity benchmark (issue #18)"
bench/mr-elastic.sh | bench/rewrite-doc.sh mr-elastic
step "done: git diff docs/ shows what moved"
