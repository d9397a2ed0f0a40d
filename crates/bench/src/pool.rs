//! `shoal bench pool`: a multiget spread over a pool of servers, from Rust: the pool client
//! (owners asked in parallel) against one client per server asked one after another, both
//! over TCP, and the pool reading every server through its shared memory.

use crate::latency::time;
use crate::progress::progress_bar;
use crate::tally::LatencySummary;
use clap::Args;
use serde_json::{json, Value};
use shoal_client::{Client, Hashing, Options, Pool, PoolOptions};
use std::fmt;

/// Options of `shoal bench pool`.
#[derive(Args, Debug, Clone)]
pub struct PoolBenchOptions {
    /// The servers (host:port), comma-separated; Shoal servers on this host for the
    /// shared-memory row.
    #[arg(long, value_delimiter = ',', required = true)]
    pub servers: Vec<String>,
    /// How the pool places keys.
    #[arg(long, default_value = "ketama_weighted")]
    pub hashing: Hashing,
    /// Keys per multiget.
    #[arg(long, default_value_t = 100)]
    pub keys: usize,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    pub size: usize,
    /// Timed multigets per row.
    #[arg(long, default_value_t = 5_000)]
    pub requests: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The rows of a run: p50/p99 of one multiget along each path.
#[derive(Debug, Clone)]
pub struct PoolBenchReport {
    /// (path, latency in µs).
    pub rows: Vec<(&'static str, LatencySummary)>,
    /// Servers in the pool.
    pub servers: usize,
    /// Keys per multiget.
    pub keys: usize,
}

/// Measures the pool's multiget against a loop over per-server clients.
pub fn run_pool_bench(o: &PoolBenchOptions) -> Result<PoolBenchReport, String> {
    if o.keys == 0 || o.requests == 0 {
        return Err("--keys and --requests must be at least 1".into());
    }
    let pool = |local: bool| {
        let options = PoolOptions {
            hashing: o.hashing,
            client: Options { local, ..Options::default() },
            ..PoolOptions::default()
        };
        Pool::new(&o.servers, options).map_err(|e| e.to_string())
    };
    let (mut tcp, mut local) = (pool(false)?, pool(true)?);
    let keys: Vec<Vec<u8>> = (0..o.keys).map(|i| format!("bench:pool:{i}").into_bytes()).collect();
    let key_refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let value = vec![b'v'; o.size];
    let items: Vec<(&[u8], &[u8])> = key_refs.iter().map(|k| (*k, value.as_slice())).collect();
    let failed = tcp.set_many(&items, 0, 0).map_err(|e| format!("set_many: {e}"))?;
    if !failed.is_empty() {
        return Err(format!("{} keys could not be stored: is every server up?", failed.len()));
    }
    // The loop asks each server for its own keys, placed as the pool places them.
    let mut per_server: Vec<(Client, Vec<&[u8]>)> = Vec::new();
    for server in &o.servers {
        let client = Client::connect(server, Options { local: false, ..Options::default() })
            .map_err(|e| format!("cannot connect to {server}: {e}"))?;
        let mine =
            key_refs.iter().copied().filter(|k| tcp.server_for(k).ok() == Some(server.as_str())).collect();
        per_server.push((client, mine));
    }
    let bar = progress_bar("pool", Some(3));
    let all = |n: usize| n == keys.len();
    let pooled =
        time(o.requests, || tcp.get_many(&key_refs).map(|f| all(f.len()))).map_err(|e| e.to_string())?;
    bar.inc(1);
    let looped = time(o.requests, || {
        let mut n = 0;
        for (client, mine) in &mut per_server {
            n += client.get_many(mine)?.len();
        }
        Ok(all(n))
    })
    .map_err(|e| e.to_string())?;
    bar.inc(1);
    local.get_many(&key_refs).map_err(|e| e.to_string())?;
    if local.local_servers().len() != o.servers.len() {
        return Err(
            "not every server offers shared memory to this process: run Shoal servers on this host".into()
        );
    }
    // Hits borrowed, as a caller that keeps values its own way (Python's `bytes`) reads them.
    let shared = time(o.requests, || {
        let mut hits = 0;
        local.get_many_each(&key_refs, |_, _| hits += 1).map(|()| all(hits))
    })
    .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    Ok(PoolBenchReport {
        rows: vec![
            ("pool, TCP (parallel)", pooled),
            ("a client per server, TCP, one after another", looped),
            ("pool, shared memory (get_many_each: values borrowed)", shared),
        ],
        servers: o.servers.len(),
        keys: o.keys,
    })
}

impl PoolBenchReport {
    /// `{"servers", "keys", "rows": [{"path", "latency_us": {…}}]}`.
    pub fn to_json(&self) -> Value {
        let rows: Vec<Value> =
            self.rows.iter().map(|(path, l)| json!({"path": path, "latency_us": l.to_json()})).collect();
        json!({"servers": self.servers, "keys": self.keys, "rows": rows})
    }
}

impl fmt::Display for PoolBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}-key multiget over {} servers", self.keys, self.servers)?;
        writeln!(f, "{:<46} {:>10} {:>10}", "path", "p50 µs", "p99 µs")?;
        for (path, l) in &self.rows {
            writeln!(f, "{path:<46} {:>10.1} {:>10.1}", l.p50, l.p99)?;
        }
        Ok(())
    }
}
