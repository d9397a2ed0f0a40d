//! The bucket version protocol (a seqlock) that lets readers in other processes copy data
//! without ever writing to the region.
//!
//! Invariants:
//! - A version is even when no writer holds the bucket and odd while one does.
//! - A writer makes the version odd *before* its first store to anything the bucket guards
//!   (slots, or item bytes in place) and makes it even again, two higher, after its last.
//! - A reader records an even version, copies, then re-reads the version after an acquire
//!   fence; equal versions mean nothing it copied was changed under it.
//!
//! Writers that publish a new item write its bytes first, into space no reader can reach yet,
//! and only then store the slot inside the locked section, so a reader can never reach a
//! half-written item. Everything a reader copies is bounds-checked before use, so garbage
//! copied during a race is harmless and is thrown away by the failed validation.

use crate::sync::{fence, AtomicU32, Ordering};

/// How long a reader keeps retrying a bucket that a writer holds before it gives up. A live
/// writer holds a bucket for well under a microsecond, but on a busy machine it can be
/// preempted while holding it for a scheduler slice or more; giving up means the writer
/// is presumed dead (its successor recovers the lock on attach) and the client goes to the
/// network.
#[cfg(not(loom))]
pub(crate) const READ_PATIENCE: std::time::Duration = std::time::Duration::from_millis(100);

/// Tracks how long a reader has been retrying; reads the clock only after many attempts, so
/// that the common case costs a counter.
#[cfg(not(loom))]
#[derive(Default)]
pub(crate) struct Patience {
    attempts: u32,
    since: Option<std::time::Instant>,
}

#[cfg(not(loom))]
impl Patience {
    /// Counts an attempt; true once the reader has waited longer than [`READ_PATIENCE`].
    #[inline]
    pub fn exhausted(&mut self) -> bool {
        self.attempts += 1;
        if !self.attempts.is_multiple_of(1024) {
            return false;
        }
        let since = *self.since.get_or_insert_with(std::time::Instant::now);
        since.elapsed() > READ_PATIENCE
    }
}

/// Starts an optimistic read: the current version if no writer holds the bucket.
#[inline]
pub(crate) fn read_begin(version: &AtomicU32) -> Option<u32> {
    let v = version.load(Ordering::Acquire);
    (v & 1 == 0).then_some(v)
}

/// Ends an optimistic read: true if nothing guarded by `version` changed since `read_begin`.
#[inline]
pub(crate) fn read_validate(version: &AtomicU32, begun: u32) -> bool {
    fence(Ordering::Acquire);
    version.load(Ordering::Relaxed) == begun
}

/// Takes the bucket for writing; spins (then yields) while another writer holds it.
/// Returns the odd version now stored, to be passed to [`write_unlock`].
#[inline]
pub(crate) fn write_lock(version: &AtomicU32) -> u32 {
    let mut spins = 0u32;
    loop {
        if let Some(locked) = write_try_lock(version) {
            return locked;
        }
        backoff(&mut spins);
    }
}

/// Takes the bucket for writing if no other writer holds it. Used where waiting could
/// deadlock (a third bucket taken out of lock order).
#[inline]
pub(crate) fn write_try_lock(version: &AtomicU32) -> Option<u32> {
    let v = version.load(Ordering::Relaxed);
    if v & 1 == 0
        && version.compare_exchange_weak(v, v.wrapping_add(1), Ordering::Acquire, Ordering::Relaxed).is_ok()
    {
        // Orders the odd version before every store made while holding the lock, so a
        // reader that sees any of those stores also sees the version change.
        fence(Ordering::Release);
        return Some(v.wrapping_add(1));
    }
    None
}

/// Releases the bucket, publishing every store made while it was held.
#[inline]
pub(crate) fn write_unlock(version: &AtomicU32, locked: u32) {
    version.store(locked.wrapping_add(1), Ordering::Release);
}

/// Spin a little, then yield the CPU: writers hold buckets briefly, but on a 2-core machine a
/// preempted holder must be given the core back.
#[inline]
pub(crate) fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        std::thread::yield_now();
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! Exhaustive interleavings of one writer replacing an item and one reader copying it.
    //! The "item" is two words that the writer always writes as a matching pair (like a value
    //! and its checksum) and a slot that says which pair is current; the reader must never
    //! accept a torn pair or a slot that disagrees with the data it copied.
    use super::*;
    use crate::sync::AtomicU64;
    use loom::sync::Arc;

    struct Bucket {
        version: AtomicU32,
        slot: AtomicU64,
        words: [AtomicU64; 2],
    }

    #[test]
    fn reader_never_accepts_torn_copy() {
        loom::model(|| {
            let b = Arc::new(Bucket {
                version: AtomicU32::new(0),
                slot: AtomicU64::new(1),
                words: [AtomicU64::new(1), AtomicU64::new(1)],
            });
            let w = b.clone();
            let writer = loom::thread::spawn(move || {
                for gen in 2..3u64 {
                    let v = write_lock(&w.version);
                    w.words[0].store(gen, Ordering::Relaxed);
                    w.words[1].store(gen, Ordering::Relaxed);
                    w.slot.store(gen, Ordering::Relaxed);
                    write_unlock(&w.version, v);
                }
            });
            let mut accepted = 0;
            for _ in 0..2 {
                let Some(v) = read_begin(&b.version) else {
                    loom::thread::yield_now();
                    continue;
                };
                let slot = b.slot.load(Ordering::Relaxed);
                let a = b.words[0].load(Ordering::Relaxed);
                let c = b.words[1].load(Ordering::Relaxed);
                if read_validate(&b.version, v) {
                    assert_eq!(a, c, "torn item accepted");
                    assert_eq!(slot, a, "slot and item disagree");
                    accepted += 1;
                }
            }
            writer.join().unwrap();
            let _ = accepted;
        });
    }

    #[test]
    fn two_writers_exclude_each_other() {
        loom::model(|| {
            let b = Arc::new(Bucket {
                version: AtomicU32::new(0),
                slot: AtomicU64::new(0),
                words: [AtomicU64::new(0), AtomicU64::new(0)],
            });
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    let b = b.clone();
                    loom::thread::spawn(move || {
                        let v = write_lock(&b.version);
                        let n = b.slot.load(Ordering::Relaxed);
                        b.slot.store(n + 1, Ordering::Relaxed);
                        write_unlock(&b.version, v);
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            assert_eq!(b.slot.load(Ordering::Relaxed), 2, "lost update");
            assert_eq!(b.version.load(Ordering::Relaxed), 4);
        });
    }

    /// An item moves from bucket 1 to bucket 0 (the writer stores it in its new place, then
    /// clears the old one, holding both locks) while a reader scans bucket 0, then bucket 1,
    /// then re-checks bucket 0 on a miss, as `Region::find` does. The reader must never
    /// report the item missing.
    #[test]
    fn moving_item_is_never_missed() {
        loom::model(|| {
            let buckets =
                Arc::new([(AtomicU32::new(0), AtomicU64::new(0)), (AtomicU32::new(0), AtomicU64::new(7))]);
            let w = buckets.clone();
            let writer = loom::thread::spawn(move || {
                let v0 = write_lock(&w[0].0);
                let v1 = write_lock(&w[1].0);
                w[0].1.store(7, Ordering::Relaxed);
                w[1].1.store(0, Ordering::Relaxed);
                write_unlock(&w[1].0, v1);
                write_unlock(&w[0].0, v0);
            });
            let found = 'retry: loop {
                let mut first = None;
                for (version, slot) in buckets.iter() {
                    let begun = loop {
                        let Some(begun) = read_begin(version) else {
                            loom::thread::yield_now();
                            continue;
                        };
                        let seen = slot.load(Ordering::Relaxed);
                        if read_validate(version, begun) {
                            if seen == 7 {
                                break 'retry true;
                            }
                            break begun;
                        }
                    };
                    first.get_or_insert((version, begun));
                }
                let (version, begun) = first.unwrap();
                if read_validate(version, begun) {
                    break false;
                }
            };
            writer.join().unwrap();
            assert!(found, "item missed while it moved between buckets");
        });
    }
}
