//! # shoal: the one command-line program
//!
//! Each part of Shoal is a subcommand; this crate only parses arguments and wires the library
//! crates together (today: `shoal region …` over `shoal-region`).
//!
//! ```text
//! shoal region create|info|set|get|bench ──► shoal_region::{Writer, Reader}
//! ```

mod bench;
mod region_cmd;

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
    /// Create, inspect, read and write shared-memory regions, and measure them.
    Region(region_cmd::RegionArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Region(args) => region_cmd::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("shoal: {message}");
            ExitCode::FAILURE
        }
    }
}
