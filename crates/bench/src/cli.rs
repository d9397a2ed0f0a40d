//! `shoal bench …`: the command line of the harness; the `shoal` program parses it into
//! [`BenchArgs`] and calls [`run`], which runs one measurement and prints its report.

use crate::{balance, fill, latency, load, pool, tenants, ycsb};
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
