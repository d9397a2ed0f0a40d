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
//! *Mutations* (memcached's semantics): a key deleted or flushed is *forgotten* — its place on
//! the stack and its bytes go, so its next read is a first reference, a miss at every size. A
//! sampled key also keeps its item's expiry (from the store or the hit that last told it):
//! once the clock ([`Shards::advance`]) reaches it, the key is forgotten the same way, so a
//! reuse after the item's TTL is a miss at every size and an expired item no longer holds
//! bytes above the others (a TTL-aware LRU: expired items leave at their deadline, as the
//! region's reclaiming and memcached's crawler make them).
//!
//! With `max_samples == 0` nothing is sampled away ([`Shards::exact`]): the same code is the
//! exact byte-weighted LRU simulation the tests compare against.

use crate::curve::HitRatioCurve;
use crate::fenwick::Fenwick;
use foldhash::fast::FixedState;
use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use xxhash_rust::xxh3::xxh3_64;

/// The spatial hash's range: its top 24 bits.
const MODULUS: u64 = 1 << 24;

/// Keys tracked by default: on the test traces (200 000 keys, 1 000 000 accesses, thirty
/// independent draws of the sample) curves within 0.0037 mean absolute error of the exact
/// ones on Zipf 0.8 (draws 0.0010–0.0077), 0.0014 on Zipf 1.0 and 0.0028 on Zipf 0.9 with a
/// scan. SHARDS' error is the variance of which keys the sample holds and falls with the
/// sample's share of the keys: 8 192 gave 0.0045 on Zipf 0.8 (draws up to 0.0105), too close
/// to issue 27's 0.005 to be more than luck, and 16 384 0.0029; the cost is each sampled
/// read's (a larger share of reads where keys are many), profiled at 100 000 keys within
/// issue 27's 5 % of server CPU (docs/BENCHMARKS.md, "Curve accuracy and cost"). About
/// 1.5 MiB per tracker.
pub const DEFAULT_MAX_SAMPLES: usize = 12 * 1024;

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

    /// The key whose hash is `hash`, as another process that hashed it reports it (a local
    /// reader's sampled read).
    #[inline]
    pub fn from_raw(hash: u64) -> KeyHash {
        KeyHash(hash)
    }

    /// The hash itself, to report to whoever tracks the key.
    #[inline]
    pub fn raw(self) -> u64 {
        self.0
    }
}

/// A tracked key: its last access time and size, and when its item expires (0: never, or
/// not known).
#[derive(Debug, Clone, Copy)]
struct Tracked {
    time: usize,
    size: u64,
    spatial: u64,
    expiry: u32,
    /// Whether `size` is the item's (from a store or a hit), not a stand-in for a key only
    /// ever missed.
    sized: bool,
}

/// An online hit-ratio curve.
#[derive(Debug, Clone)]
pub struct Shards {
    config: ShardsConfig,
    threshold: u64,
    /// What each sampled reference weighs, `1 / rate`: set with the threshold, not divided out
    /// again on every access.
    weight: f64,
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
    /// The caller's clock (seconds), as [`Shards::advance`] last set it.
    now: u32,
    /// Tracked keys' expiries, soonest first, as (expiry, hash); an entry whose key has since
    /// gone or taken another expiry is skipped when it comes up.
    deadlines: BinaryHeap<Reverse<(u32, u64)>>,
    /// When a delayed `flush_all` takes effect.
    flush_at: Option<u32>,
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
            weight: 1.0,
            tracked: HashMap::with_hasher(FixedState::default()),
            by_spatial: BTreeSet::new(),
            times: Fenwick::new(1024),
            clock: 0,
            reuses: vec![0.0; config.buckets + 2],
            cold: 0.0,
            references: 0.0,
            sampled: 0.0,
            now: 0,
            deadlines: BinaryHeap::new(),
            flush_at: None,
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
        self.access_hashed(KeyHash::of(key), size, None);
    }

    /// [`Shards::access`] of the key with this hash; `expiry`, when the caller knows it (a
    /// hit), is the item's (0: never), which a key that stays tracked keeps.
    pub fn access_hashed(&mut self, key: KeyHash, size: u64, expiry: Option<u32>) {
        self.references += 1.0;
        let (hash, spatial) = (key.0, key.spatial());
        if spatial >= self.threshold {
            return;
        }
        let (rate, weight) = (self.rate(), self.weight);
        self.sampled += weight;
        let clock = self.clock;
        // One probe of the map: the entry says whether the key was seen and takes its new state.
        let size = match self.tracked.entry(hash) {
            Entry::Occupied(mut entry) => {
                let sized = entry.get().sized || size > 0;
                let size = if size == 0 { entry.get().size } else { size };
                let previous = entry.insert(Tracked { time: clock, size, sized, ..*entry.get() });
                let since = self.times.range(previous.time + 1, clock);
                let distance = since as f64 / rate + size as f64;
                let step = (distance / self.config.bucket_bytes as f64).ceil() as usize;
                self.reuses[step.clamp(1, self.config.buckets + 1)] += weight;
                self.times.add(previous.time, previous.size.wrapping_neg());
                size
            }
            Entry::Vacant(entry) => {
                entry.insert(Tracked { time: clock, size: size.max(1), spatial, expiry: 0, sized: size > 0 });
                let size = size.max(1);
                self.cold += weight;
                self.by_spatial.insert((spatial, hash));
                size
            }
        };
        self.times.add(clock, size);
        if let Some(expiry) = expiry {
            self.expires(hash, expiry);
        }
        self.clock += 1;
        if self.clock == self.times.len() {
            self.renumber();
        }
        if self.config.max_samples > 0 && self.tracked.len() > self.config.max_samples {
            self.lower_threshold();
        }
    }

    /// `key` was stored with an item of `size` bytes expiring at `expiry` (0: never; `None`:
    /// as before, as append keeps it): not a reference (a look-aside fill after every miss
    /// would count as a hit), but a tracked key takes that size on the stack and that
    /// deadline. A key first seen on a miss has no size until then, and a stack of such keys
    /// would look 1 byte a key — a scan would seem to fit in a few MiB.
    /// A `size` of 0 leaves the size as it was (a touch: a new expiry only).
    pub fn stored(&mut self, key: KeyHash, size: u64, expiry: Option<u32>) {
        let Some(t) = self.tracked.get_mut(&key.0) else { return };
        if size > 0 {
            self.times.add(t.time, size.wrapping_sub(t.size));
            t.size = size;
            t.sized = true;
        }
        if let Some(expiry) = expiry {
            self.expires(key.0, expiry);
        }
    }

    /// The tracked key `hash`'s item expires at `expiry` (0: never).
    fn expires(&mut self, hash: u64, expiry: u32) {
        let Some(t) = self.tracked.get_mut(&hash) else { return };
        if t.expiry == expiry {
            return;
        }
        t.expiry = expiry;
        if expiry != 0 {
            self.deadlines.push(Reverse((expiry, hash)));
            // Keys stored again and again before they expire leave entries that no longer
            // count: past a bound, the heap is rebuilt from the keys' own deadlines.
            if self.deadlines.len() > 4 * self.tracked.len() + 1024 {
                self.deadlines = self
                    .tracked
                    .iter()
                    .filter(|(_, t)| t.expiry != 0)
                    .map(|(&h, t)| Reverse((t.expiry, h)))
                    .collect();
            }
        }
    }

    /// The caller's clock is `now` (seconds, never going back): keys whose items expired by
    /// then, and every key if a delayed flush took effect, are forgotten.
    pub fn advance(&mut self, now: u32) {
        self.now = self.now.max(now);
        if self.flush_at.is_some_and(|at| at <= self.now) {
            self.forget_all();
        }
        while let Some(&Reverse((expiry, hash))) = self.deadlines.peek() {
            if expiry > self.now {
                break;
            }
            self.deadlines.pop();
            if self.tracked.get(&hash).is_some_and(|t| t.expiry == expiry) {
                self.remove(KeyHash(hash));
            }
        }
    }

    /// `flush_all`, taking effect at `at` on the caller's clock (now, if it has passed): every
    /// key is forgotten then.
    pub fn flush(&mut self, at: u32) {
        self.flush_at = Some(at);
        self.advance(self.now);
    }

    /// Forgets every key (a flush): what was measured stays, the stack empties.
    fn forget_all(&mut self) {
        self.tracked.clear();
        self.by_spatial.clear();
        self.deadlines.clear();
        self.times = Fenwick::new(1024);
        self.clock = 0;
        self.flush_at = None;
    }

    /// The mean size of the tracked keys whose items' sizes are known (`None`: none), in the
    /// unit the caller gave sizes in. A walk over the sample: for reading a curve, not for
    /// every access.
    pub fn mean_item_bytes(&self) -> Option<f64> {
        let (keys, bytes) = self
            .tracked
            .values()
            .filter(|t| t.sized)
            .fold((0u64, 0u64), |(keys, bytes), t| (keys + 1, bytes + t.size));
        (keys > 0).then(|| bytes as f64 / keys as f64)
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

    /// `key` left the cache's key space (deleted, or found expired or flushed): it no longer
    /// occupies the stack, and its next access is a first reference (a miss at every size).
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
            self.weight = 1.0 / self.rate();
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
        // Seeds spread over the state (`seed | 1` alone made seeds 2 and 3 the same stream).
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut uniform = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        (0..accesses)
            .map(|i| {
                // The seed is in the keys' names: each seed is a new draw of the sampled keys
                // (with `key:{rank}` alone, every seed sampled the same ranks).
                if scan && i % 10 == 0 {
                    return (format!("scan:{seed}:{i}").into_bytes(), 1024);
                }
                // One draw per sample: the rank whose cumulative weight first reaches it.
                let drawn = uniform() * sum;
                let rank = cdf.partition_point(|&c| c < drawn);
                let size = 64 + (xxh3_64(&rank.to_le_bytes()) % 4096);
                (format!("key:{seed}:{rank}").into_bytes(), size)
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
                s.stored(KeyHash::of(key.as_bytes()), 400, None);
            }
        }
        // (Without sizes from the stores, the keys weighed a byte each and this was 0.66; what is
        // left is the sampling correction's noise, which a positive sign puts at the smallest
        // size: 0.011 with 8 192 samples, under 0.005 with 16 384.)
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

    /// SHARDS' error depends on which keys the sample happens to hold, so one trace is one
    /// draw (each seed names its keys apart, so each is a new draw of the sample, and the
    /// figures are fixed by the seeds: the hash is unseeded): issue 27's target, 0.005, is on
    /// the mean over ten draws, and no draw may stray far (docs/BENCHMARKS.md has the figures:
    /// at the default sample the worst of thirty draws read 0.0077 on Zipf 0.8).
    fn within_0_005_over_ten_draws(alpha: f64, scan: bool) {
        let errors: Vec<f64> = (1..=10)
            .map(|seed| {
                let trace = trace(200_000, alpha, 1_000_000, scan, seed);
                let (sampled, exact) = curves(&trace, DEFAULT_MAX_SAMPLES);
                sampled.mean_absolute_error(&exact)
            })
            .collect();
        let mean = errors.iter().sum::<f64>() / errors.len() as f64;
        let worst = errors.iter().copied().fold(0.0, f64::max);
        eprintln!("alpha {alpha} scan {scan}: mean absolute error {mean:.5} (seeds 1-10: {errors:.5?})");
        assert!(mean <= 0.005, "alpha {alpha} scan {scan}: mean absolute error {mean} ({errors:?})");
        assert!(worst <= 0.01, "alpha {alpha} scan {scan}: one draw's error {worst} ({errors:?})");
    }

    #[test]
    fn shards_stays_within_0_005_of_exact_at_the_default_sample_size_zipf_0_8() {
        within_0_005_over_ten_draws(0.8, false);
    }

    #[test]
    fn shards_stays_within_0_005_of_exact_at_the_default_sample_size_zipf_1_0() {
        within_0_005_over_ten_draws(1.0, false);
    }

    #[test]
    fn shards_stays_within_0_005_of_exact_at_the_default_sample_size_zipf_0_9_with_a_scan() {
        within_0_005_over_ten_draws(0.9, true);
    }

    /// One operation of a look-aside trace with mutations, at a time in seconds.
    #[derive(Clone, Copy)]
    enum Op {
        /// A get; its item's size and, on a hit, expiry are the simulation's to know.
        Get,
        /// A store with this TTL in seconds (0: never expires).
        Set(u32),
        Delete,
        Flush,
    }

    /// Look-aside traffic over a Zipf(0.9) key space: a get, and a set after its miss (a TTL
    /// of 0, 5 or 30 s by key); 3 % deletes; the clock steps a second every 2 000 operations
    /// and, with `flush`, a `flush_all` every 200 000.
    fn mutations(keys: usize, ops: usize, flush: bool, seed: u64) -> Vec<(u32, Vec<u8>, u64, Op)> {
        let zipf = trace(keys, 0.9, ops, false, seed);
        let mut stored: HashMap<Vec<u8>, u32> = HashMap::new();
        let mut out = Vec::new();
        for (i, (key, size)) in zipf.into_iter().enumerate() {
            let now = (i / 2000) as u32;
            if flush && i % 200_000 == 199_999 {
                out.push((now, Vec::new(), 0, Op::Flush));
                stored.clear();
            }
            let h = xxh3_64(&key);
            if h % 100 < 3 {
                stored.remove(&key);
                out.push((now, key, size, Op::Delete));
                continue;
            }
            out.push((now, key.clone(), size, Op::Get));
            let live = stored.get(&key).is_some_and(|&e| e == 0 || e > now);
            if !live {
                let ttl = [0, 5, 30][(h / 100 % 3) as usize];
                stored.insert(key.clone(), if ttl == 0 { 0 } else { now + ttl });
                out.push((now, key, size, Op::Set(ttl)));
            }
        }
        out
    }

    /// Feeds a trace of mutations to a tracker as the server does.
    fn replay(shards: &mut Shards, ops: &[(u32, Vec<u8>, u64, Op)]) {
        let mut expiries: HashMap<&[u8], u32> = HashMap::new();
        for (now, key, size, op) in ops {
            shards.advance(*now);
            let hash = KeyHash::of(key);
            match op {
                Op::Get => {
                    let live = expiries.get(key.as_slice()).filter(|&&e| e == 0 || e > *now);
                    match live {
                        Some(&e) => shards.access_hashed(hash, *size, Some(e)),
                        None => shards.access_hashed(hash, 0, None),
                    }
                }
                Op::Set(ttl) => {
                    let expiry = if *ttl == 0 { 0 } else { now + ttl };
                    expiries.insert(key, expiry);
                    shards.stored(hash, *size, Some(expiry));
                }
                Op::Delete => {
                    expiries.remove(key.as_slice());
                    shards.remove(hash);
                }
                Op::Flush => {
                    expiries.clear();
                    shards.flush(*now);
                }
            }
        }
    }

    /// A naive TTL-aware byte-capacity LRU over the same trace: hits of a cache of `cache`
    /// bytes over gets, where a get of a deleted, flushed or expired key is a miss.
    fn naive_with_mutations(ops: &[(u32, Vec<u8>, u64, Op)], cache: u64) -> f64 {
        // (key, size, expiry), least recently used first.
        let mut stack: Vec<(&[u8], u64, u32)> = Vec::new();
        let (mut gets, mut hits) = (0u64, 0u64);
        for (now, key, size, op) in ops {
            stack.retain(|&(_, _, e)| e == 0 || e > *now);
            let at = stack.iter().position(|(k, _, _)| *k == key.as_slice());
            match op {
                Op::Get => {
                    gets += 1;
                    if let Some(at) = at {
                        let entry = stack.remove(at);
                        let above: u64 = stack[at..].iter().map(|(_, s, _)| s).sum();
                        hits += u64::from(above + entry.1 <= cache);
                        stack.push(entry);
                    } else {
                        stack.push((key, *size, 0));
                    }
                }
                Op::Set(ttl) => {
                    if let Some(at) = at {
                        stack[at].1 = *size;
                        stack[at].2 = if *ttl == 0 { 0 } else { now + ttl };
                    }
                }
                Op::Delete => {
                    if let Some(at) = at {
                        stack.remove(at);
                    }
                }
                Op::Flush => stack.clear(),
            }
        }
        hits as f64 / gets as f64
    }

    #[test]
    fn deletes_flushes_and_expiries_make_the_next_read_a_miss_at_every_size() {
        let mut s = Shards::exact(1 << 20, 4);
        let key = KeyHash::of(b"k");
        let read = |s: &mut Shards| s.access_hashed(key, 100, None);
        read(&mut s);
        read(&mut s); // a reuse: a hit at every size
        s.remove(key);
        read(&mut s); // deleted: a miss
        s.stored(key, 100, Some(10));
        s.advance(9);
        read(&mut s); // before its deadline: a hit
        s.advance(10);
        read(&mut s); // expired: a miss
        s.flush(12);
        s.advance(11);
        read(&mut s); // the flush is not due yet: a hit
        s.advance(12);
        read(&mut s); // flushed: a miss
        assert_eq!(s.tracked(), 1);
        let top = s.curve().hit_ratio(4 << 20);
        assert!((top - 3.0 / 7.0).abs() < 1e-9, "3 hits in 7 reads: {top}");
    }

    #[test]
    fn with_mutations_the_exact_simulation_matches_a_naive_ttl_aware_lru() {
        let ops = mutations(300, 20_000, true, 11);
        let mut exact = Shards::exact(4096, 64);
        replay(&mut exact, &ops);
        let curve = exact.curve();
        for cache in [4096u64, 20 * 4096, 64 * 4096] {
            let naive = naive_with_mutations(&ops, cache);
            // The curve counts over references, gets only here, as the naive LRU does.
            assert!(
                (curve.hit_ratio(cache) - naive).abs() < 1e-9,
                "{cache}: {} vs {naive}",
                curve.hit_ratio(cache)
            );
        }
    }

    /// Look-aside traffic with sets, deletes and TTLs (and flushes, with `flush`), ten draws:
    /// the mean within 0.005 of the exact TTL-aware simulation, no draw past 0.01.
    fn with_mutations_within_0_005_over_ten_draws(flush: bool) {
        let errors: Vec<f64> = (11..=20)
            .map(|seed| {
                let ops = mutations(200_000, 1_000_000, flush, seed);
                let config =
                    ShardsConfig { max_samples: DEFAULT_MAX_SAMPLES, bucket_bytes: 1 << 20, buckets: 256 };
                let (mut sampled, mut exact) = (Shards::new(config), Shards::exact(1 << 20, 256));
                replay(&mut sampled, &ops);
                replay(&mut exact, &ops);
                sampled.curve().mean_absolute_error(&exact.curve())
            })
            .collect();
        let mean = errors.iter().sum::<f64>() / errors.len() as f64;
        let worst = errors.iter().copied().fold(0.0, f64::max);
        eprintln!("sets, deletes, TTLs (flushes {flush}): mean absolute error {mean:.5} (seeds 11-20: {errors:.5?})");
        assert!(mean <= 0.005, "flushes {flush}: mean absolute error {mean} ({errors:?})");
        assert!(worst <= 0.01, "flushes {flush}: one draw's error {worst} ({errors:?})");
    }

    #[test]
    fn with_sets_deletes_and_ttls_shards_stays_within_0_005_of_exact() {
        with_mutations_within_0_005_over_ten_draws(false);
    }

    #[test]
    fn with_sets_deletes_ttls_and_flushes_shards_stays_within_0_005_of_exact() {
        with_mutations_within_0_005_over_ten_draws(true);
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
