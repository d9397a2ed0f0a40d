//! Spools whose records wait for other spools' acknowledgements: the invalidator's second
//! delivery to a near cache, sent only once every router of the region took the same deletes.
//!
//! ```text
//!   append_after(near, deletes, after = [router A's Mark, router B's Mark])
//!        │ the record written (and flushed, as any) at once; its end and `after` queued
//!        ▼
//!   Gate: [(end, after, since) …] ──► release(): the front entries whose marks are all
//!        │ acknowledged leave; `open_to` moves to the last one's end
//!        ▼
//!   delivery thread: sends records up to `open_to` only; what lies past it waits (polled
//!   every [`GATE_POLL`]: the marks belong to other spools, whose threads know nothing of this)
//! ```
//!
//! Kill safety: the gate is in memory, the records are in the file. A restarted process opens
//! the gated spools with [`Spools::open_after`], given the marks of the other spools' ends at
//! that moment: what an earlier run left in a gated spool waits until everything the other
//! spools held then is acknowledged. Their records for those deletes were appended before
//! the gated ones (or were acknowledged before the kill), so this waits no less than the
//! lost gate would have.

use super::{Mark, Spools};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a delivery thread held by its gate looks at the marks again.
pub(crate) const GATE_POLL: Duration = Duration::from_millis(5);

/// A record appended and not released yet.
struct Waiting {
    /// Its logical end in the gated spool.
    end: u64,
    /// Deletes in it.
    answers: u64,
    /// What must be acknowledged before it is sent.
    after: Vec<Mark>,
    /// When it was appended (or found at start).
    since: Instant,
}

/// What holds a gated spool's records back.
pub(crate) struct Gate {
    waiting: Mutex<VecDeque<Waiting>>,
    /// The logical position up to which records may be sent.
    open_to: AtomicU64,
}

impl Gate {
    /// A gate for a spool whose records from `offset` (logical) to `end` were left by an
    /// earlier run: they wait for `after`.
    pub(crate) fn new(offset: u64, end: u64, answers: u64, after: &[Mark]) -> Gate {
        let waiting = (end > offset)
            .then(|| Waiting { end, answers, after: after.to_vec(), since: Instant::now() })
            .into_iter()
            .collect();
        Gate { waiting: Mutex::new(waiting), open_to: AtomicU64::new(offset) }
    }

    /// Queues a record just written, ending at `end`, to wait for `after`.
    pub(crate) fn hold(&self, end: u64, answers: u64, after: Vec<Mark>) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        waiting.push_back(Waiting { end, answers, after, since: Instant::now() });
    }

    /// Lets go of the records whose marks are all acknowledged (in order: a record stays
    /// behind an earlier one that waits); the logical position up to which records may be sent.
    pub(crate) fn release(&self) -> u64 {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        while waiting.front().is_some_and(|w| w.after.iter().all(Mark::is_acknowledged)) {
            let released = waiting.pop_front().expect("a front");
            self.open_to.fetch_max(released.end, Ordering::AcqRel);
        }
        self.open_to.load(Ordering::Acquire)
    }

    /// Deletes waiting, and how long the oldest has.
    fn held(&self) -> (u64, Option<Duration>) {
        let waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        (waiting.iter().map(|w| w.answers).sum(), waiting.front().map(|w| w.since.elapsed()))
    }
}

impl Spools {
    /// [`Spools::open_durable`] for spools each of whose records is sent only once the marks
    /// given with it are acknowledged ([`Spools::append_after`]); what an earlier run left in
    /// them waits for `after` (the other spools' ends now: [`Spools::end_mark`]).
    pub fn open_after(
        dir: &std::path::Path,
        max_bytes: u64,
        owner: &'static str,
        durability: super::Durability,
        syncer: super::Syncer,
        observer: Option<super::Observer>,
        after: Vec<Mark>,
    ) -> std::io::Result<Arc<Spools>> {
        Self::open_gated(dir, max_bytes, owner, durability, syncer, observer, Some(after))
    }

    /// The mark of `address`'s spool's end now (its spool opened if it has none): acknowledged
    /// once everything written to it so far is.
    pub fn end_mark(self: &Arc<Self>, address: &str) -> std::io::Result<Mark> {
        let spool = self.spool(address)?;
        let end = {
            let file = spool.file.lock().unwrap_or_else(|p| p.into_inner());
            spool.base.load(Ordering::Acquire) + file.metadata()?.len()
        };
        Ok(Mark { spool, end })
    }

    /// Deletes in `address`'s spool still held back by their marks, and how long the oldest
    /// has been; `None` for an address with no gated spool.
    pub fn held_back(&self, address: &str) -> Option<(u64, Option<Duration>)> {
        let map = self.spools.lock().unwrap_or_else(|p| p.into_inner());
        map.get(address)?.gate.as_ref().map(Gate::held)
    }
}
