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

use clap::{Args, Subcommand};

/// `shoal bench …`: measure servers.
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Raw memcached-protocol load against one server: throughput, latency percentiles and
    /// the server's CPU time per request.
    Load(load::LoadOptions),
    /// Count the items that fit in a server: set new keys until it evicts.
    Fill(fill::FillOptions),
    /// Latency of one client read through Shoal's shared memory, over TCP to Shoal, and over
    /// TCP to memcached, measured by the same client.
    Latency(latency::LatencyOptions),
    /// A multiget spread over a pool of servers: the pool client (owners in parallel) vs a
    /// client per server asked in turn, and through shared memory.
    Pool(pool::PoolBenchOptions),
    /// The Nahanni paper's look-aside experiment: YCSB clients reading through a cache in
    /// front of SQLite or PostgreSQL; average total read latency and its breakdown.
    Ycsb(ycsb::YcsbOptions),
    /// How evenly each placement spreads keys and requests over n of N servers (Proteus vs
    /// ketama, jump, modulo), and the Proteus digest's size and false-positive rate.
    Balance(balance::BalanceOptions),
    /// Several tenants' look-aside traffic against one server (`--tenants`), hit ratio per
    /// tenant over time; or, offline, exact LRU curves and the optimum partition.
    Tenants(tenants::TenantsOptions),
}

/// Runs a `shoal bench` subcommand and prints its report on stdout, as text or (`--json`) JSON.
pub fn run(args: BenchArgs) -> Result<(), String> {
    let (text, json, as_json) = match args.command {
        BenchCommand::Load(o) => load::run_load(&o).map(|r| (r.to_string(), r.to_json(), o.json))?,
        BenchCommand::Fill(o) => fill::run_fill(&o).map(|r| (r.to_string(), r.to_json(), o.json))?,
        BenchCommand::Latency(o) => latency::run_latency(&o).map(|r| (r.to_string(), r.to_json(), o.json))?,
        BenchCommand::Pool(o) => pool::run_pool_bench(&o).map(|r| (r.to_string(), r.to_json(), o.json))?,
        BenchCommand::Ycsb(o) => ycsb::run_ycsb(&o).map(|r| (r.to_string(), r.to_json(), o.json))?,
        BenchCommand::Balance(o) => balance::run_balance(&o).map(|r| (r.to_string(), r.to_json(), o.json))?,
        BenchCommand::Tenants(o) => tenants::run_tenants(&o).map(|r| (r.to_string(), r.to_json(), o.json))?,
    };
    if as_json {
        println!("{json:#}");
    } else {
        print!("{text}");
    }
    Ok(())
}
