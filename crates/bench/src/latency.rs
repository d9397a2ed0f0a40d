//! `shoal bench latency`: how long one client read takes, through shared memory and over the
//! network, measured by the same client (shoal-client) in the same run.
//!
//! For each value size it stores ten keys, then times single gets and 10-key multigets one at
//! a time (closed loop, one outstanding request) along each path: Shoal's region (a local
//! client), Shoal over the socket (`local: false`) and, when given, memcached over the socket.

use crate::progress::progress_bar;
use crate::tally::LatencySummary;
use clap::Args;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use shoal_client::{Client, Options};
use std::fmt;
use std::time::Instant;

/// Options of `shoal bench latency`.
#[derive(Args, Debug, Clone)]
pub struct LatencyOptions {
    /// The Shoal server (host:port or unix socket path); it must run on this host for the
    /// shared-memory path.
    #[arg(long, default_value = "127.0.0.1:11211")]
    pub server: String,
    /// A memcached to compare with over the network (host:port), if any.
    #[arg(long)]
    pub memcached: Option<String>,
    /// Value sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,1024,16384")]
    pub sizes: Vec<usize>,
    /// Timed requests per path, size and operation.
    #[arg(long, default_value_t = 20_000)]
    pub requests: u64,
    /// Keys per multiget.
    #[arg(long, default_value_t = 10)]
    pub multiget: usize,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One measured combination.
#[derive(Debug, Clone)]
pub struct LatencyRow {
    /// `shared memory`, `shoal tcp` or `memcached tcp`.
    pub path: &'static str,
    /// `get` or `N-key multiget`.
    pub operation: String,
    /// Value size in bytes.
    pub size: usize,
    /// Percentiles, microseconds.
    pub latency: LatencySummary,
}

/// The rows of a run.
#[derive(Debug, Clone)]
pub struct LatencyReport {
    /// Every path × size × operation.
    pub rows: Vec<LatencyRow>,
}

/// Measures every path the options name.
pub fn run_latency(o: &LatencyOptions) -> Result<LatencyReport, String> {
    if o.multiget == 0 || o.requests == 0 {
        return Err("--requests and --multiget must be at least 1".into());
    }
    let connect = |address: &str, local: bool| {
        Client::connect(address, Options { local, ..Options::default() })
            .map_err(|e| format!("cannot connect to {address}: {e}"))
    };
    let mut paths =
        vec![("shared memory", connect(&o.server, true)?), ("shoal tcp", connect(&o.server, false)?)];
    if !paths[0].1.is_local() {
        return Err(format!(
            "{} offers no shared memory to this process: run `shoal server` on this host (and as a user that may read its region)",
            o.server
        ));
    }
    if let Some(m) = &o.memcached {
        paths.push(("memcached tcp", connect(m, false)?));
    }
    let combinations = (paths.len() * o.sizes.len() * 2) as u64;
    let bar = progress_bar("latency", Some(combinations));
    let mut rows = Vec::new();
    for &size in &o.sizes {
        let keys: Vec<Vec<u8>> =
            (0..o.multiget).map(|i| format!("latency:{size}:{i}").into_bytes()).collect();
        let key_refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let value = vec![b'v'; size];
        for (path, client) in &mut paths {
            for key in &keys {
                client.set(key, &value, 0, 0).map_err(|e| format!("{path}: set: {e}"))?;
            }
            let get = time(o.requests, || client.get(&keys[0]).map(|v| v.is_some()))
                .map_err(|e| format!("{path}: get: {e}"))?;
            bar.inc(1);
            let many = time(o.requests, || client.get_many(&key_refs).map(|v| v.len() == keys.len()))
                .map_err(|e| format!("{path}: multiget: {e}"))?;
            bar.inc(1);
            rows.push(LatencyRow { path, operation: "get".into(), size, latency: get });
            rows.push(LatencyRow {
                path,
                operation: format!("{}-key multiget", o.multiget),
                size,
                latency: many,
            });
        }
    }
    bar.finish_and_clear();
    Ok(LatencyReport { rows })
}

/// Times `requests` calls of `read`, each of which must find what it looks for.
pub(crate) fn time(
    requests: u64,
    mut read: impl FnMut() -> shoal_client::Result<bool>,
) -> Result<LatencySummary, shoal_client::Error> {
    let mut histogram = Histogram::<u64>::new(3).expect("3 significant digits");
    for _ in 0..requests / 10 {
        read()?; // warm up caches and connections
    }
    for _ in 0..requests {
        let start = Instant::now();
        let found = read()?;
        let nanos = start.elapsed().as_nanos() as u64;
        if !found {
            return Err(shoal_client::Error::Protocol("a key set a moment ago was missing".into()));
        }
        histogram.record(nanos.max(1)).expect("an unbounded histogram");
    }
    Ok(LatencySummary::of(&histogram))
}

impl LatencyReport {
    /// `{"rows": [{"path", "operation", "size", "latency_us": {…}}]}`.
    pub fn to_json(&self) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| json!({"path": r.path, "operation": r.operation, "size": r.size, "latency_us": r.latency.to_json()}))
            .collect();
        json!({ "rows": rows })
    }
}

impl fmt::Display for LatencyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:<15} {:<16} {:>7} {:>10} {:>10}", "path", "operation", "bytes", "p50 µs", "p99 µs")?;
        for r in &self.rows {
            writeln!(
                f,
                "{:<15} {:<16} {:>7} {:>10.3} {:>10.3}",
                r.path, r.operation, r.size, r.latency.p50, r.latency.p99
            )?;
        }
        Ok(())
    }
}
