//! `--hit-curve`: the hit-ratio curve of the server's keys, measured online with SHARDS
//! (`shoal-curves`), for the Moirai controller (issue 16): the hit ratio an LRU cache of each
//! size would have had on the reads this server served. Fed by network gets (a hit gives the
//! item's size and expiry; a miss counts with the size last seen), and moved by every
//! mutation as memcached's semantics say (issue 27): a store gives a tracked key its item's
//! size and expiry but is no reference (or a look-aside fill after every miss would count as a
//! hit); a delete, a flush, an expiry, or a read the region answers "expired" or "flushed"
//! forgets the key, so its next read is a miss at every size.
//!
//! *Local reads* (issue 27): a client reading the tenant's region through shared memory
//! screens each read by the same hash against the threshold the server publishes in the
//! region's header, and queues the sampled ones (hash, hit with size and expiry, miss, dead)
//! in its hints area ([`shoal_region::hints::SampleReader`]); the tracker drains every local
//! client's queue into the curve as the network gets — from the `curves` thread
//! (`spawn_drainer` in launch.rs: every 10 ms while a client reads locally, down to every 1 ms while a
//! queue fills fast, so a queue is taken about a quarter full), every 100 ms from the clock
//! thread, and before a network read of a sampled key or any change a mutation makes to one,
//! so a local read before a
//! network `get`, `set`, `delete` or `flush_all` counts before it (a look-aside fill gives
//! the key its size after its miss, as over the network). A record no client writes (an
//! unknown kind, a size no item has) or of a key outside the sample is counted and dropped
//! ([`LocalReadCounts`]); the unsampled local reads reach the correction through the hints
//! counters (`crate::hints`).
//!
//! The key's hash is the tenant's region's own (`shoal_region::key_hash` under the region's
//! seed, the hash its index probe computes): local readers take the sample from the hash their
//! lookup already made, and the threshold published is for that hash.
//!
//! A key is hashed once and screened with its spatial hash against an atomic copy of the
//! threshold before any lock: only sampled keys (a fixed number, however many keys there are) take the
//! tracker's mutex; the rest add one to a count of the worker's own (no shared cache line, no
//! locked instruction), which the correction needs: [`CurveTracker::curve`] is given the
//! workers' counts summed and folds in what arrived since it last looked.
//!
//! Sizes are measured as the region lays items out (`shoal_region::layout::item_bytes`), and
//! the curve is answered in the region's own bytes ([`in_region_bytes`]): what a tenant's
//! limit must be for the curve's hit ratio, not the items' sum.

use crate::counters::Counters;
use shoal_curves::{HitRatioCurve, KeyHash, Shards, ShardsConfig};
use shoal_region::hints::{SampleReader, SampledRead, SAMPLE_ENTRIES};
use shoal_region::layout::item_bytes;
use shoal_region::Stats;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Points of the curve: 256 steps up to the region's size.
const STEPS: usize = 256;

/// What a read found, as the curve needs it.
#[derive(Debug, Clone, Copy)]
pub enum Read {
    /// A hit on an item of `size` bytes (as laid out in the region) expiring at `expiry`
    /// (0: never).
    Hit { size: u64, expiry: u32 },
    /// No item under the key.
    Miss,
    /// An item the region judged expired or flushed: the key is forgotten first, so the read
    /// is a first reference.
    Dead,
}

impl Read {
    /// Tells `shards` of this read of `key`.
    fn feed(self, shards: &mut Shards, key: KeyHash) {
        match self {
            Read::Hit { size, expiry } => shards.access_hashed(key, size, Some(expiry)),
            Read::Miss => shards.access_hashed(key, 0, None),
            Read::Dead => {
                shards.remove(key);
                shards.access_hashed(key, 0, None);
            }
        }
    }
}

impl From<SampledRead> for Read {
    fn from(read: SampledRead) -> Read {
        match read {
            SampledRead::Hit { bytes, expiry } => Read::Hit { size: u64::from(bytes), expiry },
            SampledRead::Miss => Read::Miss,
            SampledRead::Dead => Read::Dead,
        }
    }
}

/// The server's curve tracker.
#[derive(Debug)]
pub struct CurveTracker {
    threshold: AtomicU64,
    /// The tenant's region's hash seed: keys are known by their probe hash.
    seed: u64,
    tracking: Mutex<Tracking>,
    local: LocalReadCounts,
}

/// What the tracker's lock guards.
struct Tracking {
    shards: Shards,
    /// How many screened-out references `shards` has been told of.
    told: u64,
    /// The sampled reads of each local client of the tenant's region, by connection.
    local: Vec<(u64, SampleReader)>,
    /// The largest item the tenant's region holds: a sampled hit claiming more is refused.
    max_item_bytes: usize,
}

impl std::fmt::Debug for Tracking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracking").field("shards", &self.shards).field("local", &self.local.len()).finish()
    }
}

/// Local clients' sampled reads, as the tracker took them (the `curve` answer's `local_*`).
/// Every read a client made counts among the curve's references (the SHARDS correction is
/// over all of them: leaving some out would make the misses the sample saw weigh more), except
/// those of records no client writes.
#[derive(Debug, Default)]
pub struct LocalReadCounts {
    /// Fed to the curve.
    pub sampled: AtomicU64,
    /// Of keys outside the sample (read under a threshold that has dropped since, or by a
    /// client that hashes otherwise): references, as the network get of an unsampled key.
    pub outside: AtomicU64,
    /// Of a kind or size no client writes: dropped.
    pub refused: AtomicU64,
    /// Overwritten by their client before the server read them (its ring was full):
    /// references whose reuse distances are not known.
    pub lost: AtomicU64,
}

impl CurveTracker {
    /// A tracker whose curve spans `region_bytes` in 256 steps, for a region hashing keys
    /// with `seed` (`Layout::hash_seed`).
    pub fn new(region_bytes: u64, seed: u64) -> CurveTracker {
        let config = ShardsConfig {
            bucket_bytes: (region_bytes / STEPS as u64).max(1),
            buckets: STEPS,
            ..Default::default()
        };
        let shards = Shards::new(config);
        CurveTracker {
            threshold: AtomicU64::new(shards.threshold()),
            seed,
            tracking: Mutex::new(Tracking { shards, told: 0, local: Vec::new(), max_item_bytes: 0 }),
            local: LocalReadCounts::default(),
        }
    }

    /// The sampling threshold now, as local readers should screen by it.
    pub fn threshold(&self) -> u32 {
        self.threshold.load(Ordering::Relaxed) as u32
    }

    /// How local clients' sampled reads fared so far.
    pub fn local_reads(&self) -> &LocalReadCounts {
        &self.local
    }

    /// A read of `key` at server time `now`; a key screened out counts in `unsampled`, the
    /// calling worker's own count. The local reads queued so far go in first: they happened
    /// before it (fed after, a local read and a network read of one key would swap places,
    /// and each would take the other's reuse distance).
    pub fn access(&self, key: &[u8], read: Read, now: u32, unsampled: &AtomicU64) {
        let Some(key) = self.sampled(key) else {
            Counters::bump(unsampled);
            return;
        };
        let mut tracking = self.local_first();
        tracking.shards.advance(now);
        read.feed(&mut tracking.shards, key);
        self.threshold.store(tracking.shards.threshold(), Ordering::Relaxed);
    }

    /// `key` was stored with an item of `size` bytes expiring at `expiry` (0: never; `None`:
    /// unchanged, as append keeps it; a `size` of 0: unchanged, as a touch), at server time
    /// `now` (not a reference: see [`Shards::stored`]).
    pub fn stored(&self, key: &[u8], size: u64, expiry: Option<u32>, now: u32) {
        if let Some(key) = self.sampled(key) {
            let mut tracking = self.local_first();
            tracking.shards.advance(now);
            tracking.shards.stored(key, size, expiry);
        }
    }

    /// `key` was deleted: its next read is a miss at every size.
    pub fn remove(&self, key: &[u8]) {
        if let Some(key) = self.sampled(key) {
            self.local_first().shards.remove(key);
        }
    }

    /// `flush_all` taking effect at server time `at` (now, or later when delayed).
    pub fn flush(&self, at: u32, now: u32) {
        let mut tracking = self.local_first();
        tracking.shards.advance(now);
        tracking.shards.flush(at);
    }

    /// Takes connection `conn`'s sampled local reads of the tenant's region (whose items are
    /// at most `max_item_bytes`), replacing any it had.
    pub fn attach_local(&self, conn: u64, samples: SampleReader, max_item_bytes: usize) {
        let mut tracking = self.lock();
        tracking.max_item_bytes = max_item_bytes;
        tracking.local.retain(|(c, _)| *c != conn);
        tracking.local.push((conn, samples));
    }

    /// Feeds connection `conn`'s last sampled reads in and lets its queue go.
    pub fn detach_local(&self, conn: u64, now: u32) {
        let mut tracking = self.local_first();
        tracking.local.retain(|(c, _)| *c != conn);
        tracking.shards.advance(now);
    }

    /// Feeds every local client's sampled reads queued so far, then moves the clock to `now`
    /// (server time): the reads happened before it. Returns how many clients read locally and
    /// the most records one of them had queued (lost ones included).
    pub fn drain_local(&self, now: u32) -> (usize, u64) {
        let mut tracking = self.lock();
        let busiest = self.feed_local(&mut tracking);
        tracking.shards.advance(now);
        (tracking.local.len(), busiest)
    }

    /// The tracker, locked.
    fn lock(&self) -> MutexGuard<'_, Tracking> {
        self.tracking.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The tracker, locked, with the local reads queued so far fed in (they happened before
    /// whatever the caller is about to tell it).
    fn local_first(&self) -> MutexGuard<'_, Tracking> {
        let mut tracking = self.lock();
        self.feed_local(&mut tracking);
        tracking
    }

    /// Feeds the local reads queued so far into the curve; returns the most records one
    /// client had queued (read or lost).
    fn feed_local(&self, tracking: &mut Tracking) -> u64 {
        let Tracking { shards, local, max_item_bytes, .. } = tracking;
        if local.is_empty() {
            return 0;
        }
        let mut busiest = 0;
        let counts = &self.local;
        // The smallest item: a one-byte key, no value.
        let smallest = item_bytes(1, 0, false) as u32;
        for (_, samples) in local.iter_mut() {
            let drained = samples.drain(|hash, read| {
                let key = KeyHash::from_raw(hash);
                let counter = match read {
                    // A read of a key outside the sample (under a threshold that has dropped
                    // since the client read it): a reference, as the same get over the
                    // network would be, but not in the sample.
                    _ if key.spatial() >= shards.threshold() => {
                        shards.unsampled(1);
                        &counts.outside
                    }
                    Some(SampledRead::Hit { bytes, .. })
                        if bytes < smallest || bytes as usize > *max_item_bytes || bytes % 8 != 0 =>
                    {
                        &counts.refused
                    }
                    Some(read) => {
                        Read::from(read).feed(shards, key);
                        &counts.sampled
                    }
                    None => &counts.refused,
                };
                Counters::add(counter, 1);
            });
            // A lost read still happened: it counts among the references, so the miss ratio
            // is short only by the lost reads' own misses, not scaled up by a short total.
            // (Taking out the references it stood for instead, as though the sample never held
            // it, was tried: reads are lost in bursts of hits with no mutation to drain the
            // queue before the clock thread does, so the curve then fell far below the truth.)
            shards.unsampled(drained.lost);
            Counters::add(&counts.lost, drained.lost);
            busiest = busiest.max(drained.read + drained.lost);
        }
        self.threshold.store(shards.threshold(), Ordering::Relaxed);
        busiest
    }

    /// The key's probe hash, if the key is in the sample (as of the threshold last published).
    #[inline]
    fn sampled(&self, key: &[u8]) -> Option<KeyHash> {
        let hash = KeyHash::from_raw(shoal_region::key_hash(key, self.seed));
        (hash.spatial() < self.threshold.load(Ordering::Relaxed)).then_some(hash)
    }

    /// The curve now in the bytes of the tenant's region (`region`: its numbers now), the
    /// sampling rate and the keys tracked; `unsampled` is the workers' screened-out references
    /// summed (it only grows).
    pub fn curve(&self, unsampled: u64, region: &Stats) -> (HitRatioCurve, f64, usize) {
        let tracking = self.told_of(unsampled);
        let items = tracking.shards.curve();
        let curve = in_region_bytes(&items, tracking.shards.mean_item_bytes(), region);
        (curve, tracking.shards.rate(), tracking.shards.tracked())
    }

    /// Ages what the curve measured by `factor` (`Shards::age`), the screened-out references
    /// so far (`unsampled`, as for [`CurveTracker::curve`]) folded in first, to age with the
    /// rest; the keys whose items expired by server time `now` are forgotten (an idle tenant's
    /// expiries reach the curve too).
    pub fn age(&self, factor: f64, unsampled: u64, now: u32) {
        let mut tracking = self.told_of(unsampled);
        tracking.shards.advance(now);
        tracking.shards.age(factor);
    }

    /// The tracker, locked, with the local reads queued so far and the screened-out references
    /// it was not yet told of added (a curve read now includes every local read made before).
    fn told_of(&self, unsampled: u64) -> MutexGuard<'_, Tracking> {
        let mut tracking = self.local_first();
        let Tracking { shards, told, .. } = &mut *tracking;
        shards.unsampled(unsampled.saturating_sub(*told));
        *told = (*told).max(unsampled);
        tracking
    }
}

/// The longest the `curves` thread waits between two drains while a client reads locally: a
/// client queues more than a ring (16 384 sampled reads) in that time only past 1.6 million
/// sampled reads a second, and then the thread drains faster.
pub(crate) const DRAIN_MAX: Duration = Duration::from_millis(10);
/// The shortest: 16 million sampled reads a second fill a ring in it (one client thread
/// reading one key, every read sampled, reaches about 9 million; the curve then takes them
/// at the rate it can feed them, and the rest are counted lost).
const DRAIN_MIN: Duration = Duration::from_millis(1);

/// The wait before the next drain, after one that found at most `busiest` records in one
/// client's ring `waited` after the one before: what takes the busiest ring a quarter full
/// at the rate it filled, within [`DRAIN_MIN`] and [`DRAIN_MAX`].
pub(crate) fn next_drain(waited: Duration, busiest: u64) -> Duration {
    let quarter = SAMPLE_ENTRIES as f64 / 4.0;
    waited.mul_f64(quarter / busiest.max(1) as f64).clamp(DRAIN_MIN, DRAIN_MAX)
}

/// `items`, a curve over the bytes of the items themselves, over the bytes a region needs to
/// hold them: what the region spends per item beyond the sampled items' mean
/// (`mean_item_bytes`; its own bytes per item, `bytes / items`, counts CAS fields and
/// anything else it adds) and the end of each segment an item does not fit in (half an item a
/// segment). The region's index is not in a tenant's size (it is sized for the tenant's
/// maximum), so it has no share here. (Eviction empties a whole segment at a time, so a
/// region with churn holds half a segment less on average: the planner's margin for a
/// curve's error, `shoal_curves::SIZE_ERROR` and a step, covers it.)
pub fn in_region_bytes(items: &HitRatioCurve, mean_item_bytes: Option<f64>, region: &Stats) -> HitRatioCurve {
    let segment = region.segment_bytes as f64;
    let region_per_item = (region.items > 0).then(|| region.bytes as f64 / region.items as f64);
    let per_item = match (region_per_item, mean_item_bytes) {
        // Sampling noise may put the sample's mean a little above the region's: never below 1.
        (Some(region), Some(sample)) if sample > 0.0 => (region / sample).max(1.0),
        _ => 1.0,
    };
    let item = region_per_item.or(mean_item_bytes).unwrap_or(0.0).min(segment / 2.0);
    let slack = segment / (segment - item / 2.0).max(1.0);
    let factor = per_item * slack;
    let step = items.step();
    let hits = (0..items.points().len())
        .map(|i| items.hit_ratio((i as f64 * step as f64 / factor) as u64))
        .collect();
    HitRatioCurve::new(step, hits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(items: u64, bytes: u64, segment_bytes: usize) -> Stats {
        Stats { items, bytes, segment_bytes, ..Stats::default() }
    }

    /// Local reads reach the curve a batch at a time (a drain of each client's ring under one
    /// lock, before a mutation or every 100 ms): the curve must be exactly the one the same
    /// reads make fed one by one as network gets, mutations included, whatever the batches.
    #[test]
    fn local_reads_fed_in_batches_make_exactly_the_curve_of_the_same_reads_one_by_one() {
        use shoal_region::hints::{HintsReader, HintsWriter};
        const SEED: u64 = 0x5eed;
        let (batched, single) = (CurveTracker::new(64 << 20, SEED), CurveTracker::new(64 << 20, SEED));
        let mut client = HintsWriter::create().unwrap();
        let mut area = HintsReader::open(client.path()).unwrap();
        batched.attach_local(1, area.samples().unwrap(), 1 << 20);
        let unsampled = AtomicU64::new(0);
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        // 24 000 keys (the products of two draws under 300), skewed, so the sample fills past
        // the default 12 288 keys and its threshold drops while records wait in the ring.
        for i in 0..200_000u64 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let rank = (state % 300) * (state / 300 % 300);
            let key = format!("key:{rank}");
            let bytes = item_bytes(key.len(), 64 + (rank % 7) as usize * 40, false) as u32;
            let read = match state >> 60 {
                0 => SampledRead::Miss,
                1 => SampledRead::Dead,
                _ => SampledRead::Hit { bytes, expiry: 0 },
            };
            let now = (i / 50_000) as u32;
            // The client screens by the threshold published at its last drain.
            let hash = shoal_region::key_hash(key.as_bytes(), SEED);
            if KeyHash::from_raw(hash).spatial() < u64::from(batched.threshold()) {
                client.record_sampled(hash, read);
            }
            single.access(key.as_bytes(), Read::from(read), now, &unsampled);
            match i % 997 {
                // Mutations between reads: the queued reads go in first.
                0 => {
                    [&batched, &single].map(|t| t.stored(key.as_bytes(), u64::from(bytes) + 8, Some(0), now))
                }
                1 => [&batched, &single].map(|t| t.remove(key.as_bytes())),
                _ if i % 5_000 == 0 => [&batched, &single].map(|t| {
                    t.drain_local(now);
                }),
                _ => [(); 2],
            };
        }
        batched.drain_local(4);
        let region = Stats { segment_bytes: 1 << 20, ..Stats::default() };
        // The batched tracker's screened-out reads: those the client did not queue.
        let screened = 200_000
            - batched.local_reads().sampled.load(Ordering::Relaxed)
            - batched.local_reads().outside.load(Ordering::Relaxed);
        let (curve, rate, tracked) = batched.curve(screened, &region);
        assert!(rate < 1.0, "the sample's threshold dropped: {rate}");
        assert_eq!(batched.local_reads().refused.load(Ordering::Relaxed), 0);
        assert_eq!(batched.local_reads().lost.load(Ordering::Relaxed), 0);
        assert_eq!((curve, rate, tracked), single.curve(unsampled.load(Ordering::Relaxed), &region));
    }

    #[test]
    fn the_drainer_takes_a_busy_ring_about_a_quarter_full() {
        let ms = Duration::from_millis;
        // Idle, or a trickle: every 10 ms.
        assert_eq!(next_drain(DRAIN_MAX, 0), DRAIN_MAX);
        assert_eq!(next_drain(ms(10), 100), DRAIN_MAX);
        // 8 192 records in 10 ms (half a ring): 5 ms, where 4 096 will wait.
        assert_eq!(next_drain(ms(10), 8192), ms(5));
        // A ring overflowed after 100 ms (read and lost counted): as fast as the floor allows.
        assert_eq!(next_drain(Duration::from_millis(100), 1_000_000), DRAIN_MIN);
        // Back to 10 ms once the client slows down.
        assert_eq!(next_drain(DRAIN_MIN, 50), DRAIN_MAX);
    }

    #[test]
    fn a_region_needs_its_own_bytes_per_item_and_the_ends_of_segments() {
        const MIB: u64 = 1 << 20;
        // 30 MiB of items of 320 bytes: the curve's cliff at 30 MiB.
        let items =
            HitRatioCurve::new(MIB / 4, (0..=256).map(|i| if i >= 120 { 0.9 } else { 0.0 }).collect());
        // The region spends 328 bytes an item (a CAS field, say), in segments of 1 MiB.
        let curve = in_region_bytes(&items, Some(320.0), &region(1000, 328_000, MIB as usize));
        let cliff = curve.points_to_reach(0.9).unwrap() as u64 * curve.step();
        // 30 MiB × 328/320 × (1 + 164 B of slack a MiB) ≈ 30.76 MiB: the next point, 31 MiB.
        assert_eq!(cliff, 31 * MIB, "{}", cliff as f64 / MIB as f64);
        assert_eq!(curve.step(), items.step());
        // Nothing known about the region yet: the items' own bytes.
        let fresh = in_region_bytes(&items, None, &region(0, 0, MIB as usize));
        assert_eq!(fresh, items);
    }
}
