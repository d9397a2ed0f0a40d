//! # shoal: the one command-line program
//!
//! Each part of Shoal is a subcommand whose arguments and `run` live in the crate that does the
//! work; this crate only parses the command line and dispatches. The library crates keep their
//! command in a `cli` module behind a `cli` feature that this crate turns on (region, route,
//! mapreduce), so that their other users build no argument parser; the harness's `cli` module
//! (bench) is always built, its options being clap structs throughout.
//!
//! ```text
//! shoal server ──────────────────────────────► shoal_server::run (ServerArgs::settings)
//! shoal region create|info|set|get|bench ────► shoal_region::cli::run
//! shoal bench load|fill|latency|pool|ycsb|… ─► shoal_bench::cli::run
//! shoal router ──────────────────────────────► shoal_router::run
//! shoal invalidator ─────────────────────────► shoal_invalidator::run
//! shoal mr run|worker|info|generate|apps ────► shoal_mapreduce::cli::run
//! shoal route owner ─────────────────────────► shoal_route::cli::run
//! shoal provision ───────────────────────────► shoal_controller::provision::run
//! shoal controller ──────────────────────────► shoal_controller::tenants::run
//! ```
//!
//! `Err(message)` from any of them is printed as `shoal: <message>` with exit status 1.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Shoal: a memcached-compatible cache whose items live in shared memory.
#[derive(Parser)]
#[command(name = "shoal", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a memcached-compatible server whose items live in a shared-memory region
    /// (takes memcached's flags: `shoal server -h`).
    // Boxed: memcached's flags make it by far the largest variant.
    Server(Box<shoal_server::ServerArgs>),
    /// Create, inspect, read and write shared-memory regions, and measure them.
    Region(shoal_region::cli::RegionArgs),
    /// Load a memcached-protocol server and measure it (see docs/BENCHMARKS.md).
    Bench(shoal_bench::cli::BenchArgs),
    /// Route memcached requests to pools of servers, as mcrouter does (its JSON config).
    Router(shoal_router::RouterArgs),
    /// Follow a database's commit log (PostgreSQL, SQLite) and delete the keys each committed
    /// transaction names in every cluster.
    Invalidator(shoal_invalidator::InvalidatorArgs),
    /// MapReduce over a shared-memory job region; workers join and leave at any time.
    Mr(shoal_mapreduce::cli::MrArgs),
    /// Ask the routing core which server of a pool owns a key (`shoal route owner`).
    Route(shoal_route::cli::RouteArgs),
    /// Turn a Proteus pool's servers on and off with the load, announcing each transition to
    /// the routers.
    Provision(shoal_controller::provision::ProvisionArgs),
    /// Size every server's tenants from their hit-ratio curves (Moirai), with a live dashboard.
    Controller(shoal_controller::tenants::ControllerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Server(args) => server(*args),
        Command::Region(args) => shoal_region::cli::run(args),
        Command::Bench(args) => shoal_bench::cli::run(args),
        Command::Router(args) => shoal_router::run(args),
        Command::Invalidator(args) => shoal_invalidator::run(args),
        Command::Mr(args) => shoal_mapreduce::cli::run(args),
        Command::Route(args) => shoal_route::cli::run(args),
        Command::Provision(args) => shoal_controller::provision::run(args),
        Command::Controller(args) => shoal_controller::tenants::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("shoal: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `shoal server`: memcached's `-h` and `-V` are its own flags, as in memcached.
fn server(args: shoal_server::ServerArgs) -> Result<(), String> {
    if args.help {
        return print_subcommand_help("server");
    }
    if args.version {
        println!("shoal {} (memcached {})", env!("CARGO_PKG_VERSION"), shoal_server::VERSION);
        return Ok(());
    }
    let settings = match &args.config {
        // The subcommand is always the first argument (`shoal` itself takes no option with a
        // value), so the server's own arguments are those after it.
        Some(file) => shoal_server::config_file::settings(file, std::env::args_os().skip(2))?,
        None => args.settings()?,
    };
    shoal_server::run(settings)
}

/// Prints the help of a subcommand that takes `-h` as a flag of its own (`shoal server`). The
/// command tree is built first, as clap's own `--help` builds it, so that the usage line names
/// the whole path (`Usage: shoal server`), not the subcommand alone.
fn print_subcommand_help(name: &str) -> Result<(), String> {
    use clap::CommandFactory;
    let mut command = Cli::command();
    command.build();
    let sub = command.find_subcommand_mut(name).ok_or_else(|| format!("no subcommand {name}"))?;
    sub.print_help().map_err(|e| e.to_string())
}
