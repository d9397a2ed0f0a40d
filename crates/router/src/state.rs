//! The running router's state, shared by its threads: the configuration in service, the
//! transport's shared state (destinations' health), the spools, the counters; and the `stats`
//! answer drawn from them.

use crate::config::Config;
use crate::dest::Transport;
use shoal_spool::Spools;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

/// The running router's state, shared by its threads.
pub struct Router {
    /// The configuration in service (swapped whole by a reload).
    pub(crate) config: RwLock<Arc<Config>>,
    /// What every worker's transport shares: destinations' health.
    pub(crate) transport: Arc<Transport>,
    /// Spools of deletes that must reach their destination.
    pub(crate) spools: Arc<Spools>,
    pub(crate) max_item_bytes: usize,
    pub(crate) latest_seed: usize,
    pub(crate) started: Instant,
    pub(crate) threads: usize,
    /// Requests from clients, and those answered with an error.
    pub(crate) requests: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) reloads: AtomicU64,
    pub(crate) reload_failures: AtomicU64,
    /// Clients' connections.
    pub(crate) connections: Connections,
    /// Deletes for the near caches of the router's region (`"near_caches"`).
    pub(crate) near: crate::near::NearDelivery,
}

/// Clients' connections, counted as memcached counts its own (`curr_connections`,
/// `total_connections`), the accepts that failed, and the read buffers lent to them
/// (`proxy::Buffers`).
#[derive(Debug, Default)]
pub struct Connections {
    current: AtomicU64,
    total: AtomicU64,
    accept_errors: AtomicU64,
    /// Read buffers lent to connections now (reading, or holding a request cut short).
    buffers_lent: AtomicU64,
    /// Bytes of the buffers workers keep for the next reads.
    buffers_free_bytes: AtomicU64,
}

/// A client connection being served: counted in `curr_connections` until dropped.
pub(crate) struct Open<'a>(&'a Connections);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.current.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Connections {
    /// Counts a client connection in for as long as the guard lives.
    pub(crate) fn open(&self) -> Open<'_> {
        self.current.fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
        Open(self)
    }

    /// Client connections open now, and read buffers lent to them.
    pub(crate) fn open_now(&self) -> (u64, u64) {
        (self.current.load(Ordering::Relaxed), self.buffers_lent.load(Ordering::Relaxed))
    }

    /// A read buffer lent to a connection; `from_free` bytes of it came from a worker's free
    /// buffers.
    pub(crate) fn buffer_taken(&self, from_free: usize) {
        self.buffers_lent.fetch_add(1, Ordering::Relaxed);
        self.buffers_free_bytes.fetch_sub(from_free as u64, Ordering::Relaxed);
    }

    /// A read buffer given back, of `capacity` bytes, kept by the worker or freed.
    pub(crate) fn buffer_given(&self, capacity: usize, kept: bool) {
        self.buffers_lent.fetch_sub(1, Ordering::Relaxed);
        if kept {
            self.buffers_free_bytes.fetch_add(capacity as u64, Ordering::Relaxed);
        }
    }

    /// After a failed accept (most often no descriptor left: `ulimit -n`): counted, told on
    /// standard error (the first, then every 1000th), and the listener left alone for 10 ms
    /// rather than asked again at once (it would fail again in a busy loop).
    pub(crate) async fn accept_failed(&self, error: std::io::Error) {
        let n = self.accept_errors.fetch_add(1, Ordering::Relaxed);
        if n.is_multiple_of(1000) {
            eprintln!(
                "shoal router: accepting a connection failed: {error} ({} so far; with \"Too many open files\", \
                 raise the open-files limit, ulimit -n: {} clients are connected)",
                n + 1,
                self.current.load(Ordering::Relaxed)
            );
        }
        crate::deadline::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The process's resident memory, in bytes (`VmRSS` of `/proc/self/status`; 0 where there is
/// none).
pub(crate) fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next());
    kib.and_then(|k| k.parse::<u64>().ok()).unwrap_or(0) * 1024
}

impl Router {
    /// The configuration new requests start with.
    pub fn config(&self) -> Arc<Config> {
        self.config.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The router's `stats`: its counters and every destination's state.
    pub(crate) fn stats_text(&self) -> Vec<u8> {
        let mut out = String::new();
        let mut stat = |name: &str, value: String| out.push_str(&format!("STAT {name} {value}\r\n"));
        stat("pid", std::process::id().to_string());
        stat("uptime", self.started.elapsed().as_secs().to_string());
        stat("version", format!("shoal-router-{}", env!("CARGO_PKG_VERSION")));
        stat("threads", self.threads.to_string());
        stat("curr_connections", self.connections.current.load(Ordering::Relaxed).to_string());
        stat("total_connections", self.connections.total.load(Ordering::Relaxed).to_string());
        stat("accept_errors", self.connections.accept_errors.load(Ordering::Relaxed).to_string());
        stat("client_buffers", self.connections.open_now().1.to_string());
        stat(
            "client_buffers_free_bytes",
            self.connections.buffers_free_bytes.load(Ordering::Relaxed).to_string(),
        );
        stat("rss_bytes", resident_bytes().to_string());
        stat("cmd_total", self.requests.load(Ordering::Relaxed).to_string());
        stat("errors_total", self.errors.load(Ordering::Relaxed).to_string());
        stat("config_reloads", self.reloads.load(Ordering::Relaxed).to_string());
        stat("config_reload_failures", self.reload_failures.load(Ordering::Relaxed).to_string());
        let destinations = self.transport.destinations();
        stat("destinations", self.config().destinations.len().to_string());
        stat("destinations_tko", destinations.iter().filter(|(_, h)| h.is_tko()).count().to_string());
        let depths = self.spools.depths();
        stat("spool_pending", depths.iter().map(|(_, n)| n).sum::<u64>().to_string());
        stat("spool_delivered", self.spools.delivered.load(Ordering::Relaxed).to_string());
        stat("spool_refused", self.spools.refused.load(Ordering::Relaxed).to_string());
        stat("spool_full", self.spools.full.load(Ordering::Relaxed).to_string());
        stat("spool_files_refused", self.spools.files_refused.load(Ordering::Relaxed).to_string());
        let config = self.config();
        stat("near_caches", config.near_caches.len().to_string());
        stat("near_deletes_spooled", self.near.spooled.load(Ordering::Relaxed).to_string());
        stat("near_deletes_lost", self.near.lost.load(Ordering::Relaxed).to_string());
        for (address, pending) in self.near.spools.depths() {
            stat("near_cache", format!("{address} pending={pending}"));
        }
        for pool in &config.provisioned {
            stat("pool", pool.stats());
        }
        for (pool, hot) in &config.hot {
            stat("hot_pool", format!("{pool} {}", hot.stats()));
        }
        for (address, health) in destinations {
            let spooled = depths.iter().find(|(a, _)| *a == address).map_or(0, |(_, n)| *n);
            stat(
                "destination",
                format!(
                    "{address} {} sent={} failed={} spooled={spooled} pending={}",
                    match (health.is_tko(), self.spools.is_behind(&address)) {
                        (true, _) => "tko",
                        (false, true) => "behind",
                        (false, false) => "up",
                    },
                    health.sent.load(Ordering::Relaxed),
                    health.failed.load(Ordering::Relaxed),
                    health.pending.load(Ordering::Relaxed),
                ),
            );
        }
        out.push_str("END\r\n");
        out.into_bytes()
    }
}
