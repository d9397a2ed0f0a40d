//! Eviction policies: which sealed segment goes when the writer needs a free one and none is
//! free or dead. Chosen per writer ([`Writer::set_eviction`]), and changeable at any time:
//!
//! - [`Eviction::FifoSecondChance`] (`fifo`): the oldest written segment goes; items read since
//!   they were written are copied forward into the retained segment (half a segment's worth
//!   per eviction at most).
//! - [`Eviction::SegmentLru`] (`lru`): the segment used least recently goes, whole, nothing
//!   copied. A segment is used when it is opened, when it is sealed (its last write), and
//!   whenever an item in it is read (by the writer, or by a client whose local hit the writer
//!   folds in with [`Writer::mark_read`]).
//!
//! Recency is counted in segments opened (the header's next segment generation), not in
//! seconds or reads: that is the unit eviction works in (a segment read after the last `n`
//! segments were opened outlives them), it costs readers nothing new (the counter shares the
//! clock's cache line, which marking a read loads anyway, and moves once per segment), and no
//! per-read counter has every server thread writing one cache line. Reads within one segment's
//! worth of writes tie; ties go to the older segment. The stamps live in the writer's memory,
//! not the region, so the layout is unchanged; a writer attaching again stamps every segment
//! with its generation (FIFO order until reads say otherwise).

use super::*;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicU8};

/// How the writer picks the segment to evict.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Eviction {
    /// `fifo`: oldest written first; items read since written are copied forward once (a
    /// second chance). The default, and the only policy before tenants could choose.
    #[default]
    FifoSecondChance,
    /// `lru`: the segment least recently written or read first, evicted whole. Better when a
    /// scan of one-time keys passes through a hot set; costs room when hot items share
    /// segments with cold ones (those stay too).
    SegmentLru,
}

impl Eviction {
    /// Every policy, in the order their names are listed.
    pub const ALL: [Eviction; 2] = [Eviction::FifoSecondChance, Eviction::SegmentLru];

    /// The short name (`fifo`, `lru`) that [`FromStr`] parses and [`fmt::Display`] writes.
    pub fn name(self) -> &'static str {
        match self {
            Eviction::FifoSecondChance => "fifo",
            Eviction::SegmentLru => "lru",
        }
    }

    fn from_code(code: u8) -> Eviction {
        Eviction::ALL[usize::from(code)]
    }

    fn code(self) -> u8 {
        self as u8
    }
}

impl fmt::Display for Eviction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A policy name that is not one of [`Eviction::ALL`]'s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownEviction(pub String);

impl fmt::Display for UnknownEviction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Eviction::ALL.iter().map(|e| e.name()).collect();
        write!(f, "unknown eviction policy {:?}: use one of {}", self.0, names.join(", "))
    }
}

impl std::error::Error for UnknownEviction {}

impl FromStr for Eviction {
    type Err = UnknownEviction;

    fn from_str(name: &str) -> Result<Eviction, UnknownEviction> {
        Eviction::ALL.into_iter().find(|e| e.name() == name).ok_or_else(|| UnknownEviction(name.to_owned()))
    }
}

/// The policy's state in the writer: which policy, and when each segment was last used.
pub(super) struct Recency {
    policy: AtomicU8,
    /// Per segment: the segment generation counter when it was last opened, sealed or read.
    used: Box<[AtomicU64]>,
}

impl Recency {
    /// Every segment stamped with its generation: write order, as the FIFO has it.
    pub(super) fn new(region: &Region) -> Recency {
        let used = (0..region.layout.segment_count)
            .map(|s| AtomicU64::new(region.meta(s).generation.load(Ordering::Relaxed)))
            .collect();
        Recency { policy: AtomicU8::new(Eviction::default().code()), used }
    }
}

impl Writer {
    /// The eviction policy in force.
    pub fn eviction(&self) -> Eviction {
        Eviction::from_code(self.recency.policy.load(Ordering::Relaxed))
    }

    /// Sets the eviction policy, from the next eviction on (memory limit moves included).
    /// Items already in the region stay where they are; reads are tracked under either
    /// policy, so a switch to `lru` knows what was read before it.
    pub fn set_eviction(&self, policy: Eviction) {
        self.recency.policy.store(policy.code(), Ordering::Relaxed);
    }

    /// Stamps segment `s` as used now. Only moves forward, and writes only when the counter
    /// moved since the last stamp, so a hot segment's cache line is not written on every read.
    #[inline]
    pub(super) fn stamp_segment(&self, s: usize) {
        let now = self.region.header().next_segment_gen.load(Ordering::Relaxed);
        // A damaged index may name a segment past the table: nothing to stamp.
        let Some(used) = self.recency.used.get(s) else { return };
        if used.load(Ordering::Relaxed) < now {
            used.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// Stamps segment `s` as just opened (generation `gen`): a reused segment's old reads no
    /// longer count. Pool lock held.
    pub(super) fn stamp_opened(&self, s: usize, gen: u64) {
        self.recency.used[s].store(gen, Ordering::Relaxed);
    }

    /// Takes the next segment to evict out of the pool's sealed segments by the policy in
    /// force, sealing an open one if none is sealed. Under `lru`, the retained segment (left
    /// by `fifo`) is sealed first so that its room can be had too. Pool lock held.
    ///
    /// `lru` scans the sealed segments once: O(segments), a few microseconds for thousands,
    /// next to an eviction that walks a whole segment and locks a bucket per item.
    pub(super) fn take_victim(&self, pool: &mut Pool) -> Option<usize> {
        match self.eviction() {
            Eviction::FifoSecondChance => pool.fifo.pop_front(),
            Eviction::SegmentLru => {
                if let Some(r) = pool.retained.take() {
                    self.seal(r);
                    pool.fifo.push_back(r);
                }
                let (at, _) = pool.fifo.iter().enumerate().min_by_key(|&(_, &s)| {
                    let generation = self.region.meta(s).generation.load(Ordering::Relaxed);
                    (self.recency.used[s].load(Ordering::Relaxed), generation)
                })?;
                pool.fifo.remove(at)
            }
        }
        .or_else(|| self.seal_an_open_segment(pool))
    }
}

#[cfg(test)]
mod tests;
