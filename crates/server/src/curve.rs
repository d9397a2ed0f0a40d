//! `--hit-curve`: the hit-ratio curve of the server's keys, measured online with SHARDS
//! (`shoal-curves`), for the Moirai controller (issue 16): the hit ratio an LRU cache of each
//! size would have had on the reads this server served. Fed by network gets (a hit gives the
//! item's size; a miss counts with the size last seen) and deletes (the key leaves the stack);
//! sets are not references, or a look-aside fill after every miss would count as a hit.
//! Reads clients serve from shared memory carry no key back, so they are not in it.
//!
//! A key is hashed once and screened with its spatial hash against an atomic copy of the
//! threshold before any lock: only sampled keys (a fixed number, however many keys there are) take the
//! tracker's mutex; the rest add one to a count of the worker's own (no shared cache line, no
//! locked instruction), which the correction needs: [`CurveTracker::curve`] is given the
//! workers' counts summed and folds in what arrived since it last looked.

use crate::stats::Counters;
use shoal_curves::{HitRatioCurve, KeyHash, Shards, ShardsConfig};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Points of the curve: 256 steps up to the region's size.
const STEPS: usize = 256;

/// The server's curve tracker.
#[derive(Debug)]
pub struct CurveTracker {
    threshold: AtomicU64,
    /// The tracker, and how many screened-out references it has been told of.
    shards: Mutex<(Shards, u64)>,
}

impl CurveTracker {
    /// A tracker whose curve spans `region_bytes` in 256 steps.
    pub fn new(region_bytes: u64) -> CurveTracker {
        let config = ShardsConfig {
            bucket_bytes: (region_bytes / STEPS as u64).max(1),
            buckets: STEPS,
            ..Default::default()
        };
        let shards = Shards::new(config);
        CurveTracker { threshold: AtomicU64::new(shards.threshold()), shards: Mutex::new((shards, 0)) }
    }

    /// A request for `key`, whose item is `size` bytes (0: a miss, size unknown); a key
    /// screened out counts in `unsampled`, the calling worker's own count.
    pub fn access(&self, key: &[u8], size: u64, unsampled: &AtomicU64) {
        let Some(key) = self.sampled(key) else {
            Counters::bump(unsampled);
            return;
        };
        let mut guard = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        let shards = &mut guard.0;
        shards.access_hashed(key, size);
        self.threshold.store(shards.threshold(), Ordering::Relaxed);
    }

    /// `key` was stored with an item of `size` bytes (not a reference: see
    /// [`Shards::stored`]).
    pub fn stored(&self, key: &[u8], size: u64) {
        if let Some(key) = self.sampled(key) {
            self.shards.lock().unwrap_or_else(|p| p.into_inner()).0.stored(key, size);
        }
    }

    /// `key` was deleted.
    pub fn remove(&self, key: &[u8]) {
        if let Some(key) = self.sampled(key) {
            self.shards.lock().unwrap_or_else(|p| p.into_inner()).0.remove(key);
        }
    }

    /// The key's hash, if the key is in the sample (as of the threshold last published).
    #[inline]
    fn sampled(&self, key: &[u8]) -> Option<KeyHash> {
        let hash = KeyHash::of(key);
        (hash.spatial() < self.threshold.load(Ordering::Relaxed)).then_some(hash)
    }

    /// The curve now, the sampling rate and the keys tracked; `unsampled` is the workers'
    /// screened-out references summed (it only grows).
    pub fn curve(&self, unsampled: u64) -> (HitRatioCurve, f64, usize) {
        let guard = self.told_of(unsampled);
        (guard.0.curve(), guard.0.rate(), guard.0.tracked())
    }

    /// Ages what the curve measured by `factor` (`Shards::age`), the screened-out references
    /// so far (`unsampled`, as for [`CurveTracker::curve`]) folded in first, to age with the rest.
    pub fn age(&self, factor: f64, unsampled: u64) {
        self.told_of(unsampled).0.age(factor);
    }

    /// The tracker, locked, with the screened-out references it was not yet told of added.
    fn told_of(&self, unsampled: u64) -> std::sync::MutexGuard<'_, (Shards, u64)> {
        let mut guard = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        let (shards, told) = &mut *guard;
        shards.unsampled(unsampled.saturating_sub(*told));
        *told = (*told).max(unsampled);
        guard
    }
}
