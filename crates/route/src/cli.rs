//! `shoal route …` (feature `cli`): the routing core from the command line, so that scripts
//! and tests can ask which server of a pool owns a key. The `shoal` program parses it into
//! [`RouteArgs`] and calls [`run`].

use crate::{validate_key, Hashing, Placement, Server};
use clap::{Args, Subcommand};
use std::ffi::OsString;
use std::io::{BufWriter, Read, Write};
use std::os::unix::ffi::OsStrExt;

/// Arguments of `shoal route`.
#[derive(Args)]
pub struct RouteArgs {
    #[command(subcommand)]
    command: RouteCommand,
}

#[derive(Subcommand)]
enum RouteCommand {
    /// Print the address of the server that owns each key (keys from stdin, one a line, when
    /// none are given).
    Owner(OwnerArgs),
}

#[derive(Args)]
struct OwnerArgs {
    /// The hashing scheme: ketama_weighted (also twemproxy's md5 ketama), ketama, pymemcache,
    /// memcached_proxy, ch3, weighted_ch3, jump, rendezvous, modulo.
    #[arg(long)]
    hashing: String,
    /// A server of the pool, in the pool's order: host:port, host:port:weight or a unix path.
    #[arg(long = "server", required = true)]
    servers: Vec<String>,
    /// Print one JSON array of addresses instead of one address a line.
    #[arg(long)]
    json: bool,
    /// The keys (read from stdin, one a line, when none are given).
    keys: Vec<OsString>,
}

/// Runs `shoal route …`.
pub fn run(args: RouteArgs) -> Result<(), String> {
    match args.command {
        RouteCommand::Owner(args) => owner(args),
    }
}

fn owner(args: OwnerArgs) -> Result<(), String> {
    let hashing = Hashing::parse(&args.hashing).map_err(|e| e.to_string())?;
    let servers = args.servers.iter().map(|s| Server::parse(s)).collect::<Result<Vec<_>, _>>();
    let placement =
        Placement::new(hashing, servers.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let keys: Vec<Vec<u8>> = if args.keys.is_empty() {
        let mut input = Vec::new();
        std::io::stdin().read_to_end(&mut input).map_err(|e| format!("reading keys from stdin: {e}"))?;
        input
            .split(|&b| b == b'\n')
            .map(|line| line.strip_suffix(b"\r").unwrap_or(line).to_vec())
            .filter(|line| !line.is_empty())
            .collect()
    } else {
        args.keys.iter().map(|k| k.as_bytes().to_vec()).collect()
    };
    let mut owners = Vec::with_capacity(keys.len());
    for key in &keys {
        validate_key(key).map_err(|e| e.to_string())?;
        owners.push(placement.servers()[placement.owner(key)].address.as_str());
    }
    let mut out = BufWriter::new(std::io::stdout().lock());
    let written = if args.json {
        writeln!(out, "{}", serde_json::Value::from(owners))
    } else {
        owners.iter().try_for_each(|o| writeln!(out, "{o}"))
    };
    written.and_then(|()| out.flush()).map_err(|e| format!("writing to stdout: {e}"))
}
