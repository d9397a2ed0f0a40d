//! Which fetched values a near cache keeps (`--admit`): every one, those read again soon
//! (the default), or only this server's hot keys.
//!
//! `reuse` is a ghost filter: two generations of key fingerprints, [`GHOST_SLOTS`] each. A
//! miss whose fingerprint is in either generation is admitted; any other miss leaves its
//! fingerprint and is not. A generation is retired after [`GHOST_SLOTS`]/2 fingerprints, so a
//! key is admitted on its second miss among roughly the last 16 000 – 64 000 misses, in a fixed
//! 256 KiB whatever the workload. A one-off read (a scan, the long tail) costs one slot and
//! takes no room from values that are read again. Two keys sharing a slot and fingerprint
//! (1 in 2³² per pair) only admit a key one miss early.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Fingerprints in one generation of the ghost filter.
pub const GHOST_SLOTS: usize = 1 << 15;

/// The least rate (reads a second, as `stats hotkeys` gives it) of a key `hot` admits: a
/// key read once has 1/τ = 0.2 and, while few keys are read, is in the top K all the same.
pub const HOT_MIN_RATE: f64 = 1.0;

/// How often the `hot` policy takes a new snapshot of the hot keys.
const HOT_REFRESH: Duration = Duration::from_secs(1);

/// `--admit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Every value fetched.
    All,
    /// A key missed twice within the ghost filter's window.
    Reuse,
    /// A key among this server's hot keys (`stats hotkeys`).
    Hot,
}

impl Policy {
    pub fn parse(text: &str) -> Result<Policy, String> {
        match text {
            "all" => Ok(Policy::All),
            "reuse" => Ok(Policy::Reuse),
            "hot" => Ok(Policy::Hot),
            _ => Err(format!("--admit {text}: one of all, reuse (the default) or hot")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Policy::All => "all",
            Policy::Reuse => "reuse",
            Policy::Hot => "hot",
        }
    }
}

/// A key's 64-bit hash (SipHash with fixed keys: the same in every process and run).
pub fn key_hash(key: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

/// The ghost filter of [`Policy::Reuse`].
pub struct Ghost {
    /// Two generations, one after the other; `current` says which is written.
    slots: Box<[AtomicU32]>,
    current: AtomicUsize,
    /// Fingerprints written into the current generation.
    written: AtomicU64,
    retiring: Mutex<()>,
}

impl Default for Ghost {
    fn default() -> Ghost {
        Ghost {
            slots: (0..2 * GHOST_SLOTS).map(|_| AtomicU32::new(0)).collect(),
            current: AtomicUsize::new(0),
            written: AtomicU64::new(0),
            retiring: Mutex::new(()),
        }
    }
}

impl Ghost {
    /// Whether the key of `hash` missed recently; if not, it is noted.
    pub fn seen_or_note(&self, hash: u64) -> bool {
        let slot = (hash as usize) & (GHOST_SLOTS - 1);
        let print = ((hash >> 32) as u32) | 1;
        let gen = self.current.load(Ordering::Acquire);
        let (mine, other) = (gen * GHOST_SLOTS + slot, (1 - gen) * GHOST_SLOTS + slot);
        if self.slots[mine].load(Ordering::Relaxed) == print
            || self.slots[other].load(Ordering::Relaxed) == print
        {
            return true;
        }
        self.slots[mine].store(print, Ordering::Relaxed);
        if self.written.fetch_add(1, Ordering::Relaxed) + 1 >= (GHOST_SLOTS / 2) as u64 {
            self.retire(gen);
        }
        false
    }

    /// Makes the older generation the current one, emptied (once, whoever gets there first).
    #[cold]
    fn retire(&self, gen: usize) {
        let Ok(_one) = self.retiring.try_lock() else { return };
        if self.current.load(Ordering::Acquire) != gen {
            return;
        }
        let next = 1 - gen;
        self.slots[next * GHOST_SLOTS..(next + 1) * GHOST_SLOTS]
            .iter()
            .for_each(|s| s.store(0, Ordering::Relaxed));
        self.written.store(0, Ordering::Relaxed);
        self.current.store(next, Ordering::Release);
    }
}

/// The hot keys as last looked at, for [`Policy::Hot`].
#[derive(Default)]
pub struct HotSnapshot {
    taken: Mutex<Option<(Instant, HashSet<Vec<u8>>)>>,
}

impl HotSnapshot {
    /// Whether `key` is hot, taking a new snapshot with `top` when the last is a second old.
    pub fn contains(&self, key: &[u8], top: impl FnOnce() -> Vec<Vec<u8>>) -> bool {
        let mut taken = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        if !taken.as_ref().is_some_and(|(at, _)| at.elapsed() < HOT_REFRESH) {
            *taken = Some((Instant::now(), top().into_iter().collect()));
        }
        taken.as_ref().is_some_and(|(_, keys)| keys.contains(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_admitted_on_its_second_miss_and_one_offs_are_not() {
        let ghost = Ghost::default();
        let h = key_hash(b"user:1");
        assert!(!ghost.seen_or_note(h), "the first miss only leaves a fingerprint");
        assert!(ghost.seen_or_note(h), "the second is admitted");
        // A scan of distinct keys admits nothing.
        let admitted = (0..10_000u32).filter(|i| ghost.seen_or_note(key_hash(&i.to_le_bytes()))).count();
        assert!(admitted < 10, "{admitted} one-off keys admitted");
    }

    #[test]
    fn the_window_is_bounded_old_misses_are_forgotten() {
        let ghost = Ghost::default();
        let h = key_hash(b"old");
        assert!(!ghost.seen_or_note(h));
        // Two generations' worth of other misses push it out.
        for i in 0..(2 * GHOST_SLOTS as u64) {
            ghost.seen_or_note(key_hash(&i.to_le_bytes()));
        }
        assert!(!ghost.seen_or_note(h), "forgotten after the window");
        // Within half a generation, it is remembered.
        for i in 0..(GHOST_SLOTS as u64 / 8) {
            ghost.seen_or_note(key_hash(&(i + (1 << 40)).to_le_bytes()));
        }
        assert!(ghost.seen_or_note(h));
    }

    #[test]
    fn policies_parse_and_hot_snapshots_refresh_at_most_once_a_second() {
        assert_eq!(Policy::parse("all"), Ok(Policy::All));
        assert_eq!(Policy::parse("hot").unwrap().name(), "hot");
        assert!(Policy::parse("lru").unwrap_err().contains("one of all, reuse"));
        let snapshot = HotSnapshot::default();
        let mut taken = 0;
        for _ in 0..5 {
            assert!(snapshot.contains(b"a", || {
                taken += 1;
                vec![b"a".to_vec()]
            }));
        }
        assert!(taken < 5, "a snapshot a second at most, not one per call");
        assert!(!snapshot.contains(b"b", Vec::new));
    }
}
