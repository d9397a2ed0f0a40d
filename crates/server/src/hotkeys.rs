//! Hot-key detection: the keys read most, by request rate, as `stats hotkeys` and `/metrics`
//! list them, so that pool clients and routers can spread those keys over replicas
//! (docs/design/hotkeys.md).
//!
//! ```text
//!  exec (get, gets, gat, gats, mg, lease-get, binary get) ──record(key)──► HotKeys
//!      one in `sample` reads on average, at random ──► SpaceSaving (one lock) ──top──► stats, metrics
//! ```
//!
//! The sketch is Space-Saving (Metwally et al., 2005) over [`TRACKED_PER_LISTED`] × K keys, its
//! counts decayed exponentially with a mean lifetime of [`LIFETIME_SECS`] (forward decay: a
//! request at time t weighs e^(t/τ), so the decay never touches the table but to renormalise
//! it), which makes a steady rate r count r·τ and a key that stops fade out within a few τ.
//! A read costs a thread-local countdown: only one in `sample` on average (random gaps, so that
//! no periodic pattern of keys hides from it) takes the lock and updates the sketch, with
//! weight `sample`. Writes are not counted: the hot set decides which keys are replicated, and
//! a replicated key's every write goes to all its replicas, so a key hot with writes gains
//! nothing from it.

use shoal_proto::hotkeys::{encode_hotkeys, HotKey};
use std::cell::Cell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Mutex;
use std::time::Instant;

/// Keys listed when `-o hotkeys` is not given.
pub const DEFAULT_TOP: usize = 64;

/// One read in this many, on average, is counted when `-o hotkeys_sample` is not given.
pub const DEFAULT_SAMPLE: u32 = 64;

/// Mean lifetime τ of a counted read, in seconds: counts decay by e every τ.
pub const LIFETIME_SECS: f64 = 5.0;

/// Keys tracked per key listed. Space-Saving over M keys is sure of a key only if it draws
/// more than 1/M of the reads; the 64th key of Zipf 0.99 over 10⁵ to 10⁷ keys draws about
/// 0.1 %, so listing 64 takes about 1000 tracked (in `finds_the_planted_hot_keys_of_a_zipf_stream`,
/// 4 per listed key lose the 8th to 10th hottest to the churn of the tail).
pub const TRACKED_PER_LISTED: usize = 16;

/// Keys whose rate rounds to nothing in the answer are not listed.
const MIN_RATE: f64 = 0.0005;

/// Forward decay's weights grow as e^(t/τ): the table is renormalised when they pass e^this.
const RENORMALISE_AFTER: f64 = 64.0;

/// One tracked key. Its count lives in its heap slot ([`Slot`]), where the heap compares it.
struct Entry {
    key: Vec<u8>,
    /// [`tracked_hash`] of the key: what the index finds it by.
    hash: u64,
    /// The count the key inherited when it took the slot of the least counted one.
    error: f64,
}

/// A place in the heap: a key's count, kept beside its entry's index so a step of the heap
/// reads one array.
#[derive(Clone, Copy)]
struct Slot {
    /// What Space-Saving counts for the key: at least its true count, at most `error` above.
    count: f64,
    entry: usize,
}

/// The hash the sketch indexes a key by: xxh3 (the regions' hash) with a fixed seed, taken
/// only on a counted read, and one hash a read where SipHash over the key took three.
fn tracked_hash(key: &[u8]) -> u64 {
    shoal_region::key_hash(key, 0x0068_6f74_6b65_7973) // "hotkeys"
}

/// A `HashMap` hasher for keys that are already hashes ([`tracked_hash`]): it passes them on.
#[derive(Default)]
struct Prehashed(u64);

impl std::hash::Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64`s are hashed here; anything else is folded in all the same.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

/// Space-Saving over `capacity` keys with exponentially decayed counts; time is seconds on any
/// clock that does not go back (a little disorder between threads is harmless).
pub struct SpaceSaving {
    capacity: usize,
    lifetime: f64,
    entries: Vec<Entry>,
    /// A binary min-heap of the entries by count; `position[entry]` is its place in it.
    heap: Vec<Slot>,
    position: Vec<usize>,
    /// Entries by [`tracked_hash`]. A key whose 64-bit hash a different tracked key holds
    /// (about one counted read in 10¹⁶ with 1 024 keys tracked) is not counted.
    index: HashMap<u64, usize, BuildHasherDefault<Prehashed>>,
    /// The time at which a weight of 1 is added as 1; later weights are scaled up from it.
    landmark: f64,
}

impl SpaceSaving {
    /// A sketch of `capacity` keys whose counts decay with mean lifetime `lifetime` seconds.
    pub fn new(capacity: usize, lifetime: f64) -> SpaceSaving {
        SpaceSaving {
            capacity,
            lifetime,
            entries: Vec::with_capacity(capacity),
            heap: Vec::with_capacity(capacity),
            position: Vec::with_capacity(capacity),
            index: HashMap::with_capacity_and_hasher(capacity, BuildHasherDefault::default()),
            landmark: 0.0,
        }
    }

    /// Counts `weight` requests of `key` at time `now`.
    pub fn record(&mut self, key: &[u8], weight: f64, now: f64) {
        if self.capacity == 0 {
            return;
        }
        if (now - self.landmark) / self.lifetime > RENORMALISE_AFTER {
            self.renormalise(now);
        }
        let weight = weight * ((now - self.landmark) / self.lifetime).exp();
        let hash = tracked_hash(key);
        if let Some(&at) = self.index.get(&hash) {
            if self.entries[at].key != key {
                return; // another key of the same hash holds the place (see `index`)
            }
            let place = self.position[at];
            self.heap[place].count += weight;
            self.sift_down(place);
        } else if self.entries.len() < self.capacity {
            let at = self.entries.len();
            self.entries.push(Entry { key: key.to_vec(), hash, error: 0.0 });
            self.index.insert(hash, at);
            self.position.push(self.heap.len());
            self.heap.push(Slot { count: weight, entry: at });
            self.sift_up(self.heap.len() - 1);
        } else {
            // The least counted key gives its slot up; the newcomer inherits its count as error.
            // Its key is overwritten in place: no allocation once warm.
            let least = self.heap[0];
            let entry = &mut self.entries[least.entry];
            self.index.remove(&entry.hash);
            entry.key.clear();
            entry.key.extend_from_slice(key);
            entry.hash = hash;
            entry.error = least.count;
            self.heap[0].count += weight;
            self.index.insert(hash, least.entry);
            self.sift_down(0);
        }
    }

    /// The `k` keys with the highest guaranteed rates at time `now`, highest first, in
    /// requests per second.
    pub fn top(&self, k: usize, now: f64) -> Vec<HotKey> {
        let scale = (-(now - self.landmark) / self.lifetime).exp() / self.lifetime;
        // Each key with the count it certainly has.
        let mut ranked: Vec<(&[u8], f64)> = self
            .heap
            .iter()
            .map(|s| (&self.entries[s.entry].key[..], s.count - self.entries[s.entry].error))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        ranked
            .into_iter()
            .map(|(key, guaranteed)| HotKey { key: key.to_vec(), rate: guaranteed * scale })
            .take_while(|h| h.rate >= MIN_RATE)
            .take(k)
            .collect()
    }

    /// Moves the landmark to `now`, scaling every count down to it (their order is unchanged).
    fn renormalise(&mut self, now: f64) {
        let scale = (-(now - self.landmark) / self.lifetime).exp();
        for slot in &mut self.heap {
            slot.count *= scale;
        }
        for e in &mut self.entries {
            e.error *= scale;
        }
        self.landmark = now;
    }

    fn count_at(&self, place: usize) -> f64 {
        self.heap[place].count
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.position[self.heap[a].entry] = a;
        self.position[self.heap[b].entry] = b;
    }

    fn sift_up(&mut self, mut place: usize) {
        while place > 0 && self.count_at(place) < self.count_at((place - 1) / 2) {
            self.swap(place, (place - 1) / 2);
            place = (place - 1) / 2;
        }
    }

    fn sift_down(&mut self, mut place: usize) {
        let len = self.heap.len();
        loop {
            let left = 2 * place + 1;
            if left >= len {
                return;
            }
            let right = left + 1;
            let least = if right < len && self.count_at(right) < self.count_at(left) { right } else { left };
            if self.count_at(least) >= self.count_at(place) {
                return;
            }
            self.swap(place, least);
            place = least;
        }
    }
}

thread_local! {
    /// Reads this thread still lets pass before it counts one.
    static COUNTDOWN: Cell<u32> = const { Cell::new(0) };
    /// This thread's xorshift state for the gaps between counted reads (0: not seeded yet).
    static RANDOM: Cell<u64> = const { Cell::new(0) };
}

/// A random gap of 1 to 2·`sample` − 1 reads: `sample` on average.
fn next_gap(sample: u32) -> u32 {
    RANDOM.with(|state| {
        let mut x = state.get();
        if x == 0 {
            // Any distinct nonzero seed per thread will do: the gaps only need to be irregular.
            let nanos =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            x = (nanos.as_nanos() as u64 ^ (state as *const Cell<u64> as u64)) | 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        1 + (x % (2 * u64::from(sample) - 1)) as u32
    })
}

/// This thread's countdown to its next counted read, held for one request ([`HotKeys::sampler`]).
pub struct Sampler<'h> {
    keys: &'h HotKeys,
    left: u32,
}

impl Sampler<'_> {
    /// Counts a read of `key`, as [`HotKeys::record`].
    #[inline]
    pub fn record(&mut self, key: &[u8]) {
        // With detection off the countdown starts where no request reaches 0.
        match self.left {
            0 | 1 => {
                self.left = next_gap(self.keys.sample);
                self.keys.count(key);
            }
            n => self.left = n - 1,
        }
    }
}

impl Drop for Sampler<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.keys.top != 0 {
            COUNTDOWN.with(|left| left.set(self.left));
        }
    }
}

/// The server's hot keys: `-o hotkeys=K` (0: off) and `-o hotkeys_sample=N`.
pub struct HotKeys {
    top: usize,
    sample: u32,
    started: Instant,
    sketch: Mutex<SpaceSaving>,
}

impl HotKeys {
    /// Lists the `top` hottest keys (0: detection off), counting one read in `sample` (≥ 1).
    pub fn new(top: usize, sample: u32) -> HotKeys {
        let sketch = SpaceSaving::new(top * TRACKED_PER_LISTED, LIFETIME_SECS);
        HotKeys { top, sample: sample.max(1), started: Instant::now(), sketch: Mutex::new(sketch) }
    }

    /// Counts a read of `key` (one in `sample`, on average, reaches the sketch).
    #[inline]
    pub fn record(&self, key: &[u8]) {
        self.sampler().record(key);
    }

    /// A sampler for the reads of one request (a multiget's keys): it takes this thread's
    /// countdown once and gives it back when dropped, rather than once per key.
    #[inline]
    pub fn sampler(&self) -> Sampler<'_> {
        let left = if self.top == 0 { u32::MAX } else { COUNTDOWN.with(Cell::get) };
        Sampler { keys: self, left }
    }

    #[cold]
    fn count(&self, key: &[u8]) {
        let now = self.started.elapsed().as_secs_f64();
        let mut sketch = self.sketch.lock().unwrap_or_else(|p| p.into_inner());
        sketch.record(key, f64::from(self.sample), now);
    }

    /// The hottest keys now, at most `k` (and at most the configured K), hottest first.
    pub fn top(&self, k: usize) -> Vec<HotKey> {
        let now = self.started.elapsed().as_secs_f64();
        self.sketch.lock().unwrap_or_else(|p| p.into_inner()).top(k.min(self.top), now)
    }

    /// `stats hotkeys`: the configured K hottest keys, then `END` (only `END` when off).
    pub fn answer(&self, out: &mut Vec<u8>) {
        encode_hotkeys(&self.top(self.top), out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded xorshift64 stream of uniform numbers in [0, 1).
    struct Uniform(u64);

    impl Uniform {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// A seeded stream of keys `k<rank>` drawn from Zipf(`s`) over `n` keys (rank 0 hottest).
    fn zipf(seed: u64, n: usize, s: f64, len: usize) -> Vec<Vec<u8>> {
        let mut cumulative: Vec<f64> = (1..=n).map(|i| 1.0 / (i as f64).powf(s)).collect();
        for i in 1..n {
            cumulative[i] += cumulative[i - 1];
        }
        let total = cumulative[n - 1];
        let mut random = Uniform(seed);
        (0..len)
            .map(|_| {
                let target = random.next() * total;
                let rank = cumulative.partition_point(|&c| c < target);
                format!("k{rank}").into_bytes()
            })
            .collect()
    }

    fn keys(hot: &[HotKey]) -> Vec<String> {
        hot.iter().map(|h| String::from_utf8(h.key.clone()).unwrap()).collect()
    }

    fn ranks(range: std::ops::Range<usize>) -> Vec<String> {
        range.map(|r| format!("k{r}")).collect()
    }

    #[test]
    fn finds_the_planted_hot_keys_of_a_zipf_stream() {
        // 200 000 reads over 2 s of 100 000 keys: the sketch holds 4 × 16 of them.
        let stream = zipf(7, 100_000, 0.99, 200_000);
        let mut sketch = SpaceSaving::new(16 * TRACKED_PER_LISTED, LIFETIME_SECS);
        for (i, key) in stream.iter().enumerate() {
            sketch.record(key, 1.0, i as f64 / 100_000.0);
        }
        let top = sketch.top(16, 2.0);
        assert_eq!(keys(&top[..6]), ranks(0..6), "the hottest, in order");
        let mut ten = keys(&top[..10]);
        ten.sort();
        let mut expected = ranks(0..10);
        expected.sort();
        assert_eq!(ten, expected, "the ten hottest");
        // Rank 0 draws about 8 % of 100 000 reads a second; after 2 s, of a lifetime of 5 s,
        // the rate has risen to (1 − e^(−2/5)) of that.
        let share = stream.iter().filter(|k| k.as_slice() == b"k0").count() as f64 / stream.len() as f64;
        let expected = share * 100_000.0 * (1.0 - (-2.0 / LIFETIME_SECS).exp());
        assert!((top[0].rate / expected - 1.0).abs() < 0.05, "rate {}, expected {expected}", top[0].rate);
    }

    #[test]
    fn a_steady_rate_reads_back() {
        let mut sketch = SpaceSaving::new(4, LIFETIME_SECS);
        // 1000 reads a second of `a`, 10 of `b`, for 60 s (12 lifetimes).
        for ms in 0..60_000 {
            let now = f64::from(ms) / 1000.0;
            sketch.record(b"a", 1.0, now);
            if ms % 100 == 0 {
                sketch.record(b"b", 1.0, now);
            }
        }
        let top = sketch.top(4, 60.0);
        assert_eq!(keys(&top), ["a", "b"]);
        assert!((top[0].rate - 1000.0).abs() < 10.0, "{}", top[0].rate);
        assert!((top[1].rate - 10.0).abs() < 0.5, "{}", top[1].rate);
    }

    #[test]
    fn aging_follows_a_shift_of_the_hot_set() {
        let mut sketch = SpaceSaving::new(8 * TRACKED_PER_LISTED, LIFETIME_SECS);
        let mut random = Uniform(11);
        let mut run = |sketch: &mut SpaceSaving, hot: &str, from: f64, secs: f64| {
            // 10 000 reads a second: 5 hot keys take half of them, in shares 5:4:3:2:1, the
            // rest go to 10 000 cold keys.
            let reads = (secs * 10_000.0) as usize;
            for i in 0..reads {
                let now = from + i as f64 / 10_000.0;
                let pick = random.next();
                let key = if pick < 0.5 {
                    let edges = [5.0 / 15.0, 9.0 / 15.0, 12.0 / 15.0, 14.0 / 15.0, 1.0];
                    format!("{hot}{}", edges.iter().position(|&edge| pick * 2.0 < edge).unwrap())
                } else {
                    format!("cold{}", (random.next() * 10_000.0) as u32)
                };
                sketch.record(key.as_bytes(), 1.0, now);
            }
        };
        run(&mut sketch, "a", 0.0, 30.0);
        assert_eq!(keys(&sketch.top(5, 30.0)), ["a0", "a1", "a2", "a3", "a4"]);
        // The workload moves to other hot keys: after three lifetimes they lead, in order,
        // and the old ones have faded below them.
        run(&mut sketch, "b", 30.0, 3.0 * LIFETIME_SECS);
        let now = 30.0 + 3.0 * LIFETIME_SECS;
        assert_eq!(keys(&sketch.top(5, now)), ["b0", "b1", "b2", "b3", "b4"]);
        // And once nothing is read for long, nothing is listed.
        assert_eq!(sketch.top(5, now + 200.0 * LIFETIME_SECS), []);
        // Renormalising (long after the landmark) keeps the order.
        run(&mut sketch, "c", now + 200.0 * LIFETIME_SECS, 10.0);
        assert_eq!(keys(&sketch.top(3, now + 200.0 * LIFETIME_SECS + 10.0)), ["c0", "c1", "c2"]);
    }

    #[test]
    fn sampled_reads_find_the_hottest_keys() {
        let hot = HotKeys::new(8, 8);
        for key in zipf(3, 10_000, 0.99, 200_000) {
            hot.record(&key);
        }
        assert_eq!(keys(&hot.top(3)), ranks(0..3), "one read in 8 counted, at random");
        let mut out = Vec::new();
        hot.answer(&mut out);
        let listed = shoal_proto::parse_hotkeys(&out, 8).unwrap();
        assert_eq!(keys(&listed[..3]), ranks(0..3));
        let off = HotKeys::new(0, 1);
        off.record(b"k");
        out.clear();
        off.answer(&mut out);
        assert_eq!(out, b"END\r\n");
    }

    #[test]
    fn gaps_average_the_sample() {
        let gaps: Vec<u32> = (0..100_000).map(|_| next_gap(32)).collect();
        assert!(gaps.iter().all(|&g| (1..=63).contains(&g)));
        let mean = gaps.iter().map(|&g| f64::from(g)).sum::<f64>() / gaps.len() as f64;
        assert!((mean - 32.0).abs() < 0.5, "{mean}");
        assert!((0..1000).all(|_| next_gap(1) == 1));
    }
}
