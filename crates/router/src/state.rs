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
        for pool in &self.config().provisioned {
            stat("pool", pool.stats());
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
