//! SHARDS (Waldspurger et al., FAST '15), fixed-size and byte-weighted: an online estimate of a
//! cache's hit ratio at every size, from a spatial sample of the keys.
//!
//! A key is sampled when the top 24 bits of its XXH3 hash fall below a threshold `T` (rate
//! `R = T / 2^24`). For a sampled key the tracker keeps its last access time and size; a
//! Fenwick tree over access times holds each tracked key's size at its last access, so the
//! bytes of the distinct tracked keys touched since a key's previous access are one range sum.
//! A reuse then lands in an LRU cache of `C` bytes when `since / R + size ≤ C` (other keys are
//! sampled, the key's own size is known). Each sampled reference weighs `1 / R`.
//!
//! *Fixed size*: when more than `max_samples` keys are tracked, the one with the largest hash
//! value leaves and `T` drops to its value, so memory stays bounded whatever the key space.
//! *Correction* (SHARDS_adj): the references all keys made, less the weight the sample
//! accounted for, is added to the smallest size's count, which removes most of the sample's
//! bias toward keys of unusual popularity.
//!
//! With `max_samples == 0` nothing is sampled away ([`Shards::exact`]): the same code is the
//! exact byte-weighted LRU simulation the tests compare against.

use crate::curve::HitRatioCurve;
use crate::fenwick::Fenwick;
use foldhash::fast::FixedState;
use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use xxhash_rust::xxh3::xxh3_64;

/// The spatial hash's range: its top 24 bits.
const MODULUS: u64 = 1 << 24;

/// Keys tracked by default: curves within 0.0037 mean absolute error of the exact ones on the
/// test traces (Zipf 0.8, 1.0, and 0.9 with a scan; 200 000 keys, 1 000 000 accesses; the
/// target is 0.005). 16 384 gave 0.0016 but costs twice the server CPU where the sample is a
/// large share of the keys (every sampled get takes a lock, a hash-map probe and two tree
/// walks); 4 096 gave 0.008. About 1 MiB per tracker.
pub const DEFAULT_MAX_SAMPLES: usize = 8 * 1024;

/// How a tracker measures.
#[derive(Debug, Clone, Copy)]
pub struct ShardsConfig {
    /// Most keys tracked (0: all, exact).
    pub max_samples: usize,
    /// Cache sizes are measured in steps of this many bytes.
    pub bucket_bytes: u64,
    /// Steps measured: the curve covers `0..=buckets × bucket_bytes` bytes.
    pub buckets: usize,
}

impl Default for ShardsConfig {
    fn default() -> ShardsConfig {
        ShardsConfig { max_samples: DEFAULT_MAX_SAMPLES, bucket_bytes: 1 << 20, buckets: 1024 }
    }
}

/// A key's 64-bit XXH3 hash, the name the tracker knows it by: a caller that screens keys
/// itself hashes each key once and hands the hash on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHash(u64);

impl KeyHash {
    /// The hash of `key`.
    #[inline]
    pub fn of(key: &[u8]) -> KeyHash {
        KeyHash(xxh3_64(key))
    }

    /// Its spatial hash: the key is sampled while this is below [`Shards::threshold`].
    #[inline]
    pub fn spatial(self) -> u64 {
        self.0 >> 40
    }
}

/// A tracked key: its last access time and size.
#[derive(Debug, Clone, Copy)]
struct Tracked {
    time: usize,
    size: u64,
    spatial: u64,
}

/// An online hit-ratio curve.
#[derive(Debug, Clone)]
pub struct Shards {
    config: ShardsConfig,
    threshold: u64,
    /// By hash. The keys are hashes already; foldhash's one multiply spreads them over the
    /// table (the top bits of sampled keys' hashes are all small: they are the spatial hash).
    tracked: HashMap<u64, Tracked, FixedState>,
    /// Tracked keys by spatial hash, to find the largest.
    by_spatial: BTreeSet<(u64, u64)>,
    times: Fenwick,
    clock: usize,
    /// Weight of reuses by size step (index `i`: a hit in caches of `i` steps and more); the
    /// last entry holds reuses beyond the curve.
    reuses: Vec<f64>,
    /// Weight of first references (misses at every size).
    cold: f64,
    /// References made, sampled or not (weighed as the histogram is, once aged).
    references: f64,
    /// Weight the sampled references stand for.
    sampled: f64,
}

impl Shards {
    /// A tracker measuring as `config` says.
    pub fn new(config: ShardsConfig) -> Shards {
        let config = ShardsConfig {
            bucket_bytes: config.bucket_bytes.max(1),
            buckets: config.buckets.max(1),
            ..config
        };
        Shards {
            config,
            threshold: MODULUS,
            tracked: HashMap::with_hasher(FixedState::default()),
            by_spatial: BTreeSet::new(),
            times: Fenwick::new(1024),
            clock: 0,
            reuses: vec![0.0; config.buckets + 2],
            cold: 0.0,
            references: 0.0,
            sampled: 0.0,
        }
    }

    /// The exact simulation: every key tracked.
    pub fn exact(bucket_bytes: u64, buckets: usize) -> Shards {
        Shards::new(ShardsConfig { max_samples: 0, bucket_bytes, buckets })
    }

    /// The sampling rate now.
    pub fn rate(&self) -> f64 {
        self.threshold as f64 / MODULUS as f64
    }

    /// Keys tracked now.
    pub fn tracked(&self) -> usize {
        self.tracked.len()
    }

    /// The sampling threshold now (it only goes down), for a caller that screens keys itself
    /// and reports the rest with [`Shards::unsampled`].
    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    /// `n` references of keys screened out by the caller (they count for the correction).
    pub fn unsampled(&mut self, n: u64) {
        self.references += n as f64;
    }

    /// An access (a get, hit or miss, or a set) of `key`, whose item is `size` bytes (0: not
    /// known, as on a miss: the size last seen, or 1 for a key not seen).
    pub fn access(&mut self, key: &[u8], size: u64) {
        self.access_hashed(KeyHash::of(key), size);
    }

    /// [`Shards::access`] of the key with this hash.
    pub fn access_hashed(&mut self, key: KeyHash, size: u64) {
        self.references += 1.0;
        let (hash, spatial) = (key.0, key.spatial());
        if spatial >= self.threshold {
            return;
        }
        let rate = self.rate();
        let weight = 1.0 / rate;
        self.sampled += weight;
        let clock = self.clock;
        // One probe of the map: the entry says whether the key was seen and takes its new state.
        let size = match self.tracked.entry(hash) {
            Entry::Occupied(mut entry) => {
                let size = if size == 0 { entry.get().size } else { size };
                let previous = entry.insert(Tracked { time: clock, size, spatial });
                let since = self.times.prefix(clock) - self.times.prefix(previous.time + 1);
                let distance = since as f64 / rate + size as f64;
                let step = (distance / self.config.bucket_bytes as f64).ceil() as usize;
                self.reuses[step.clamp(1, self.config.buckets + 1)] += weight;
                self.times.add(previous.time, previous.size.wrapping_neg());
                size
            }
            Entry::Vacant(entry) => {
                let size = size.max(1);
                entry.insert(Tracked { time: clock, size, spatial });
                self.cold += weight;
                self.by_spatial.insert((spatial, hash));
                size
            }
        };
        self.times.add(clock, size);
        self.clock += 1;
        if self.clock == self.times.len() {
            self.renumber();
        }
        if self.config.max_samples > 0 && self.tracked.len() > self.config.max_samples {
            self.lower_threshold();
        }
    }

    /// `key` was stored with an item of `size` bytes: not a reference (a look-aside fill after
    /// every miss would count as a hit), but a tracked key takes that size on the stack. A key
    /// first seen on a miss has no size until then, and a stack of such keys would look
    /// 1 byte a key — a scan would seem to fit in a few MiB.
    pub fn stored(&mut self, key: KeyHash, size: u64) {
        if let Some(t) = self.tracked.get_mut(&key.0) {
            self.times.add(t.time, size.wrapping_sub(t.size));
            t.size = size;
        }
    }

    /// Ages what was measured: every reference so far weighs `factor` (0..1) as much as one to
    /// come, so the curve follows a workload that changes (called at a steady pace, an
    /// exponentially weighted curve). The stack of tracked keys is not aged: a key's next
    /// reuse is measured from its last access, however old.
    pub fn age(&mut self, factor: f64) {
        let factor = factor.clamp(0.0, 1.0);
        self.reuses.iter_mut().for_each(|r| *r *= factor);
        self.cold *= factor;
        self.references *= factor;
        self.sampled *= factor;
    }

    /// `key` left the cache's key space (deleted): it no longer occupies the stack.
    pub fn remove(&mut self, key: KeyHash) {
        if let Some(gone) = self.tracked.remove(&key.0) {
            self.times.add(gone.time, gone.size.wrapping_neg());
            self.by_spatial.remove(&(gone.spatial, key.0));
        }
    }

    /// Drops the keys with the largest spatial hash until the sample fits, lowering `T`.
    fn lower_threshold(&mut self) {
        while self.tracked.len() > self.config.max_samples {
            let Some(&(spatial, _)) = self.by_spatial.last() else { return };
            self.threshold = spatial;
            while let Some(&(s, hash)) = self.by_spatial.last() {
                if s < spatial {
                    break;
                }
                self.by_spatial.pop_last();
                if let Some(gone) = self.tracked.remove(&hash) {
                    self.times.add(gone.time, gone.size.wrapping_neg());
                }
            }
        }
    }

    /// Gives the tracked keys the times `0..n` in their order, in a tree with room to grow.
    fn renumber(&mut self) {
        let mut order: Vec<(usize, u64)> = self.tracked.iter().map(|(&h, t)| (t.time, h)).collect();
        order.sort_unstable();
        self.times = Fenwick::new((order.len() * 4).max(1024));
        for (time, (_, hash)) in order.iter().enumerate() {
            let tracked = self.tracked.get_mut(hash).expect("listed above");
            tracked.time = time;
            self.times.add(time, tracked.size);
        }
        self.clock = order.len();
    }

    /// The hit ratio at every measured size, corrected as SHARDS_adj does.
    pub fn curve(&self) -> HitRatioCurve {
        let total = self.references;
        let mut hits = vec![0.0; self.config.buckets + 1];
        if total > 0.0 {
            let correction = total - self.sampled;
            let mut cumulative = 0.0;
            let mut best: f64 = 0.0;
            for (step, hit) in hits.iter_mut().enumerate().skip(1) {
                cumulative += self.reuses[step] + if step == 1 { correction } else { 0.0 };
                best = best.max(cumulative / total);
                *hit = best.clamp(0.0, 1.0);
            }
        }
        HitRatioCurve::new(self.config.bucket_bytes, hits)
    }

    /// Bytes this tracker holds, about (its maps, ordered set and tree).
    pub fn memory_bytes(&self) -> usize {
        self.tracked.capacity() * (8 + std::mem::size_of::<Tracked>() + 8)
            + self.by_spatial.len() * 40
            + self.times.len() * 8
            + self.reuses.len() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Zipf(`alpha`) stream over `keys` keys with sizes 64..4160 bytes fixed per key, plus,
    /// when `scan` is set, a sequential scan of never-repeated keys every 10th access.
    fn trace(keys: usize, alpha: f64, accesses: usize, scan: bool, seed: u64) -> Vec<(Vec<u8>, u64)> {
        let mut cdf = Vec::with_capacity(keys);
        let mut sum = 0.0;
        for rank in 1..=keys {
            sum += 1.0 / (rank as f64).powf(alpha);
            cdf.push(sum);
        }
        let mut state = seed | 1;
        let mut uniform = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        (0..accesses)
            .map(|i| {
                if scan && i % 10 == 0 {
                    return (format!("scan:{i}").into_bytes(), 1024);
                }
                let rank = cdf.partition_point(|&c| c < uniform() * sum);
                let size = 64 + (xxh3_64(&rank.to_le_bytes()) % 4096);
                (format!("key:{rank}").into_bytes(), size)
            })
            .collect()
    }

    fn curves(trace: &[(Vec<u8>, u64)], max_samples: usize) -> (HitRatioCurve, HitRatioCurve) {
        let config = ShardsConfig { max_samples, bucket_bytes: 1 << 20, buckets: 256 };
        let (mut sampled, mut exact) =
            (Shards::new(config), Shards::exact(config.bucket_bytes, config.buckets));
        for (key, size) in trace {
            sampled.access(key, *size);
            exact.access(key, *size);
        }
        (sampled.curve(), exact.curve())
    }

    #[test]
    fn an_aged_curve_follows_a_workload_that_changed() {
        // 50 000 keys read round and round (hits only in a cache that holds them all), then
        // 1 000 keys (hits in a small one): aged, the curve soon says the small cache is enough.
        let config = ShardsConfig { bucket_bytes: 1 << 20, buckets: 64, ..Default::default() };
        let mut both = [Shards::new(config), Shards::new(config)];
        let read =
            |both: &mut [Shards; 2], key: String| both.iter_mut().for_each(|s| s.access(key.as_bytes(), 100));
        for i in 0..500_000u32 {
            read(&mut both, format!("wide:{}", i % 50_000));
        }
        for i in 0..200_000u32 {
            read(&mut both, format!("narrow:{}", i % 1000));
            if i % 10_000 == 0 {
                both[0].age(0.5);
            }
        }
        let [aged, kept] = both;
        let small = 1 << 20; // 1 000 keys of 100 bytes fit; 50 000 do not
        assert!(aged.curve().hit_ratio(small) > 0.95, "{}", aged.curve().hit_ratio(small));
        assert!(kept.curve().hit_ratio(small) < 0.4, "{}", kept.curve().hit_ratio(small));
    }

    #[test]
    fn a_scan_filled_after_each_miss_never_looks_like_it_fits() {
        // Look-aside: every get of a scan misses, then the item is stored; a key comes back
        // only after every other, so no cache smaller than the whole scan ever hits.
        let mut s = Shards::new(ShardsConfig { bucket_bytes: 1 << 20, buckets: 64, ..Default::default() });
        for _ in 0..3 {
            for i in 0..300_000u32 {
                let key = format!("scan:{i}");
                s.access(key.as_bytes(), 0);
                s.stored(KeyHash::of(key.as_bytes()), 400);
            }
        }
        // (Without sizes from the stores, the keys weighed a byte each and this was 0.66; what is
        // left is the sampling correction's noise, which a positive sign puts at the smallest
        // size: 0.011 with the default 8 192 samples, under 0.005 with 16 384.)
        let fits = s.curve().hit_ratio(64 << 20);
        assert!(fits < 0.02, "300 000 keys of 400 bytes do not fit in 64 MiB: {fits}");
    }

    #[test]
    fn exact_simulation_matches_a_naive_lru_on_a_small_trace() {
        let trace = trace(300, 0.9, 20_000, true, 7);
        let mut exact = Shards::exact(4096, 64);
        for (key, size) in &trace {
            exact.access(key, *size);
        }
        let curve = exact.curve();
        for cache in [4096u64, 40 * 4096, 64 * 4096] {
            // A byte-capacity LRU, simulated naively.
            let mut stack: Vec<(&[u8], u64)> = Vec::new();
            let mut hits = 0;
            for (key, size) in &trace {
                if let Some(at) = stack.iter().position(|(k, _)| *k == key.as_slice()) {
                    let above: u64 = stack[at + 1..].iter().map(|(_, s)| s).sum();
                    if above + size <= cache {
                        hits += 1;
                    }
                    stack.remove(at);
                }
                stack.push((key, *size));
            }
            let naive = hits as f64 / trace.len() as f64;
            assert!(
                (curve.hit_ratio(cache) - naive).abs() < 1e-9,
                "{cache}: {} vs {naive}",
                curve.hit_ratio(cache)
            );
        }
    }

    #[test]
    fn shards_stays_within_0_005_of_exact_at_the_default_sample_size() {
        for (alpha, scan, seed) in [(0.8, false, 1), (1.0, false, 2), (0.9, true, 3)] {
            let trace = trace(200_000, alpha, 1_000_000, scan, seed);
            let (sampled, exact) = curves(&trace, DEFAULT_MAX_SAMPLES);
            let error = sampled.mean_absolute_error(&exact);
            eprintln!("alpha {alpha} scan {scan}: mean absolute error {error:.5}");
            assert!(error <= 0.005, "alpha {alpha} scan {scan}: mean absolute error {error}");
        }
    }

    #[test]
    fn memory_stays_bounded_by_the_sample_size() {
        let mut shards = Shards::new(ShardsConfig { max_samples: 1000, ..ShardsConfig::default() });
        for i in 0..200_000u64 {
            shards.access(&i.to_le_bytes(), 100);
        }
        assert!(shards.tracked() <= 1000);
        assert!(shards.rate() < 0.01, "{}", shards.rate());
        assert!(shards.memory_bytes() < 1 << 20, "{}", shards.memory_bytes());
        shards.remove(KeyHash::of(&5u64.to_le_bytes()));
    }
}
