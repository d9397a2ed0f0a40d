//! # shoal-bench: Shoal's benchmark harness
//!
//! Owns `shoal bench`: load generation against any server that speaks memcached's text, meta
//! or binary protocol (Shoal, stock memcached, a router), and the measurements every performance
//! claim of the project is made with, side by side with memcached (`bench/` has the scripts).
//!
//! - `shoal bench load` ([`load`]): a get/set mix over many connections and threads, with
//!   pipelining, multigets, key distributions, closed or open loop, or gets through Shoal's
//!   shared memory ([`shm_load`], `--through shm`); reports throughput,
//!   latency percentiles, hits, misses, errors and the server's CPU time per request.
//! - `shoal bench fill` ([`fill`]): how many items of a given size fit in the server.
//! - `shoal bench latency` ([`latency`]): one client read through shared memory vs TCP.
//! - `shoal bench pool` ([`pool`]): a multiget across a pool, parallel vs one server at a time.
//! - `shoal bench ycsb` ([`ycsb`]): the Nahanni paper's look-aside experiment (ATRL).
//! - `shoal bench tenants` ([`tenants`]): several tenants' look-aside traffic, hit ratio per
//!   tenant over time, and offline the exact curves and optimum partition (issue 16).
//!
//! [`cli`] holds the subcommands' arguments and `run`, which the `shoal` program calls.
//!
//! ```text
//!  options ─► KeySpace, KeyChooser (uniform | zipf | latest), ValueSize
//!         ─► Clients::connect: N connections dealt to T threads (pinned with --pin)
//!  server `stats` (rusage before) ───────────────────────────────────────────────┐
//!  each thread, one mio poller:                                                  │
//!    RequestSource ─encode─► connection output ─► server ─► connection input     │
//!        ▲  (pipeline slot free, or due in open loop)          │ parse replies   │
//!        └──────────── Tally: counts + latency histogram ◄─────┘                 │
//!  Tallies merged ─► LoadReport (percentiles, req/s) ◄─ `stats` (rusage after) ◄─┘
//!                 ─► text, or --json
//! ```

#![forbid(unsafe_code)]

pub mod balance;
pub mod cli;
mod connection;
pub mod engine;
pub mod fill;
pub mod keys;
pub mod latency;
pub mod load;
pub mod pin;
pub mod pool;
pub mod progress;
pub mod protocol;
pub mod random;
pub mod shm_load;
pub mod tally;
pub mod target;
pub mod tenants;
pub mod tls;
pub mod workload;
pub mod ycsb;
