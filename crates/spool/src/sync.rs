//! When appends reach the disk, and how a caller learns that a record is safe.
//!
//! ```text
//!   append_batch ──► the file (page cache) ──► delivery thread sends it at once
//!        │ Mark { spool, end }                      │ acknowledged: `acked` moves on
//!        │ Grouped: sync_due ──► group syncer ──► fsync (one per spool per round, without
//!        │                       the appends' lock)        `synced` moves on
//!        ▼
//!   Mark::is_safe  =  max(synced, acked) ≥ end
//! ```
//!
//! Positions are logical: bytes ever appended to the spool, across the truncations of a
//! drained file (the file's byte 0 is at `base`), so they only grow. A record is *safe* once
//! everything up to its end is on the disk as the spools' [`Durability`] asks, or acknowledged
//! by the destination. The invalidator confirms the commit log's position only past deletes
//! whose marks are safe in every destination's spool (issue #26: one fsync behind a build's
//! writes took 36 s, and with a fsync per append no destination got a delete meanwhile).

use super::{Spool, Spools};
use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// When a spool's appends reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Never flushed: a `kill -9` loses nothing (the page cache keeps what was written), a
    /// machine going down may. A record is safe once written.
    Unflushed,
    /// Flushed before the append returns (the router: the client hears back only after).
    EveryAppend,
    /// Flushed by a thread of its own, every spool written since its last round in one
    /// `fsync` each (a group commit); the append returns once written, and its [`Mark`] says
    /// when it is flushed or acknowledged (the invalidator).
    Grouped,
}

/// A function that flushes a file to the disk.
type Flush = dyn Fn(&File) -> std::io::Result<()> + Send + Sync;

/// How a spool file is flushed to the disk: `File::sync_data`, or what a test gives.
#[derive(Clone)]
pub struct Syncer(Arc<Flush>);

impl Syncer {
    /// A syncer that calls `sync` (a test's slow or blocked disk).
    pub fn new(sync: impl Fn(&File) -> std::io::Result<()> + Send + Sync + 'static) -> Syncer {
        Syncer(Arc::new(sync))
    }

    pub(crate) fn sync(&self, file: &File) -> std::io::Result<()> {
        (self.0)(file)
    }
}

impl Default for Syncer {
    fn default() -> Self {
        Syncer::new(File::sync_data)
    }
}

impl std::fmt::Debug for Syncer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Syncer")
    }
}

/// Where an appended record ends in its spool: [`Mark::is_safe`] once it (and everything
/// before it in that spool) is on the disk as asked, or acknowledged.
#[derive(Clone)]
pub struct Mark {
    pub(crate) spool: Arc<Spool>,
    pub(crate) end: u64,
}

impl Mark {
    /// Whether the record is flushed as the spools' [`Durability`] asks, or acknowledged by
    /// its destination: a process or machine that stops now loses none of it.
    pub fn is_safe(&self) -> bool {
        self.spool.synced.load(Ordering::Acquire).max(self.spool.acked.load(Ordering::Acquire)) >= self.end
    }

    /// Whether the record (and everything before it in its spool) is acknowledged by its
    /// destination: flushed is not enough ([`Spools::open_after`]).
    pub fn is_acknowledged(&self) -> bool {
        self.spool.acked.load(Ordering::Acquire) >= self.end
    }

    /// The destination's address.
    pub fn address(&self) -> &str {
        &self.spool.address
    }
}

impl std::fmt::Debug for Mark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mark").field("address", &self.spool.address).field("end", &self.end).finish()
    }
}

/// How long the group syncer waits after an append before its round: the appends of that
/// while share one fsync, and a destination that acknowledges meanwhile needs none.
const GROUP_WINDOW: Duration = Duration::from_millis(10);

/// How long after a failed fsync it is tried again.
const SYNC_AGAIN_AFTER: Duration = Duration::from_millis(250);

impl Spools {
    /// An append asks the group syncer for a round.
    pub(crate) fn sync_due(&self) {
        let (due, wake) = &self.sync_due;
        *due.lock().unwrap_or_else(|p| p.into_inner()) = true;
        wake.notify_one();
    }

    /// Spools written since the last round: each one's logical end noted under the appends'
    /// lock, flushed without it, then `synced` moved to the noted end (a truncation meanwhile
    /// only happens once everything before it was acknowledged). Returns false when a flush
    /// failed (tried again later; nothing is marked safe that is not).
    fn sync_round(&self, failed_before: &mut bool) -> bool {
        let spools: Vec<Arc<Spool>> =
            self.spools.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        let mut all = true;
        for spool in spools {
            let end = {
                let file = spool.file.lock().unwrap_or_else(|p| p.into_inner());
                match file.metadata() {
                    Ok(m) => spool.base.load(Ordering::Acquire) + m.len(),
                    Err(_) => continue,
                }
            };
            let safe = spool.synced.load(Ordering::Acquire).max(spool.acked.load(Ordering::Acquire));
            if safe >= end {
                continue; // acknowledged already: nothing to flush for it
            }
            match self.syncer.sync(&spool.sync_file) {
                Ok(()) => {
                    spool.synced.fetch_max(end, Ordering::AcqRel);
                    self.syncs.fetch_add(1, Ordering::Relaxed);
                    if std::mem::take(failed_before) {
                        eprintln!(
                            "{}: spool {}: flushed to the disk again",
                            self.owner,
                            spool.path.display()
                        );
                    }
                }
                Err(e) => {
                    if !std::mem::replace(failed_before, true) {
                        eprintln!(
                            "{}: spool {}: could not flush it to the disk: {e}; tried again every {} ms \
                             (deletes are still delivered; what is neither flushed nor acknowledged \
                             is not confirmed)",
                            self.owner,
                            spool.path.display(),
                            SYNC_AGAIN_AFTER.as_millis()
                        );
                    }
                    all = false;
                }
            }
        }
        all
    }
}

/// Starts the group syncer: a round after each append (waiting [`GROUP_WINDOW`] first), for as
/// long as the process runs.
pub(crate) fn start(spools: &Arc<Spools>) -> std::io::Result<()> {
    let spools = spools.clone();
    std::thread::Builder::new().name("spool sync".into()).spawn(move || {
        let mut failed = false;
        loop {
            {
                let (due, wake) = &spools.sync_due;
                let mut due = due.lock().unwrap_or_else(|p| p.into_inner());
                while !*due {
                    due = wake.wait(due).unwrap_or_else(|p| p.into_inner());
                }
                *due = false;
            }
            std::thread::sleep(GROUP_WINDOW);
            if !spools.sync_round(&mut failed) {
                std::thread::sleep(SYNC_AGAIN_AFTER);
                spools.sync_due();
            }
        }
    })?;
    Ok(())
}
