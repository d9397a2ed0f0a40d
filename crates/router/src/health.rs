//! A destination's health, shared by every worker: consecutive failures mark it TKO
//! ("technical knock-out": requests to it fail fast), and a probe brings it back.
//!
//! ```text
//!  connection.rs: answer ──► success (failures back to 0)
//!                 timeout, broken connection ──► failure ── the TKO_AFTER-th in a row ──► TKO,
//!                                                            and one probe task starts
//!  probe: every PROBE_EVERY, connect and send `version` ── VERSION ──► TKO cleared, probe ends
//!  spool delivery thread: the destination acknowledged a delete ──► TKO cleared (`revive`)
//! ```
//!
//! The probe rate: one probe per TKO destination (and router), a connect and a `version` every
//! 250 ms, at most one in flight; the spool's delivery tries a destination that has deletes
//! waiting as often. A destination that comes back is read again once both say so: it answers
//! (the probe's or the delivery's answer, whichever comes first) and its spool has drained
//! (`ctx.rs`, docs/design/faults.md).

use crate::stream::connect;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncWriteExt, BufReader};

/// Consecutive failures that mark a destination TKO ("technical knock-out").
pub const TKO_AFTER: u32 = 3;
/// How often a TKO destination is probed with `version` (the spool's retry cadence: a
/// returned destination is noticed within it either way).
pub const PROBE_EVERY: Duration = Duration::from_millis(250);

/// A destination's health, shared by every worker.
#[derive(Debug, Default)]
pub struct Health {
    failures: AtomicU32,
    tko: AtomicBool,
    probing: AtomicBool,
    /// Requests answered, and failed, through this destination.
    pub sent: AtomicU64,
    pub failed: AtomicU64,
    /// Requests sent to this destination (by any worker) and not answered yet.
    pub pending: AtomicU64,
}

impl Health {
    /// Whether requests to the destination fail fast now.
    pub fn is_tko(&self) -> bool {
        self.tko.load(Ordering::Relaxed)
    }

    pub(crate) fn success(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// The destination answered outside the transport (its spool's delivery had a delete
    /// acknowledged): no longer TKO. A probe still running ends at its next success.
    pub(crate) fn revive(&self) {
        self.failures.store(0, Ordering::Relaxed);
        self.tko.store(false, Ordering::Relaxed);
    }

    /// Counts a failure; true when it marked the destination TKO (the caller starts a probe).
    pub(crate) fn failure(&self) -> bool {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        n >= TKO_AFTER
            && !self.tko.swap(true, Ordering::Relaxed)
            && !self.probing.swap(true, Ordering::Relaxed)
    }
}

/// Probes a TKO destination with `version` until it answers, then clears the mark.
pub(crate) async fn probe(address: String, connect_timeout: Duration, health: Arc<Health>) {
    use tokio::io::AsyncBufReadExt;
    loop {
        crate::deadline::sleep(PROBE_EVERY).await;
        let Ok(stream) = connect(&address, connect_timeout).await else { continue };
        let answered = async {
            let (read, mut write) = stream.halves();
            write.write_all(b"version\r\n").await.ok()?;
            let mut line = String::new();
            BufReader::new(read).read_line(&mut line).await.ok()?;
            line.starts_with("VERSION").then_some(())
        };
        if crate::deadline::timeout(connect_timeout, answered).await.flatten().is_some() {
            health.failures.store(0, Ordering::Relaxed);
            health.tko.store(false, Ordering::Relaxed);
            health.probing.store(false, Ordering::Relaxed);
            return;
        }
    }
}
