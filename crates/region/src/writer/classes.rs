//! Which time class a new item goes to: the classes follow the memory limit (a region created
//! with room to grow has as many classes as the segments it may use allow, not as its whole
//! file would), and memcached's `-o temporary_ttl` sends items that live at most that long to a
//! class of their own, [`TimeClasses::TEMPORARY`], whose segments eviction never takes: they
//! are reclaimed, whole, once their items have expired (memcached's TEMP LRU, which its LRU
//! maintainer never evicts from). A store that finds memory full of such segments and nothing
//! else to evict fails as out of memory, as in memcached.
//!
//! ```text
//!   store(expiry) ──► ttl ≤ temporary_ttl? ──yes──► TEMPORARY ──sealed──► pool.temporary
//!                         │ no                                               (expiry only)
//!                         └──► TimeClasses::merging(class_merge).of(expiry) ──sealed──► pool.fifo
//!                                                                                  (evicted)
//! ```

use super::*;

impl Writer {
    /// The time class of a new item expiring at `expiry` (0: never), at server time `now`.
    #[inline]
    pub(super) fn class_of(&self, expiry: u32, now: u32) -> usize {
        let temporary = self.temporary_ttl.load(Ordering::Relaxed);
        // memcached's test is `exptime - current_time <= temporary_ttl`; an item that never
        // expires is never temporary.
        if temporary > 0 && expiry != 0 && expiry.saturating_sub(now) <= temporary {
            return TimeClasses::TEMPORARY;
        }
        TimeClasses::merging(self.class_merge.load(Ordering::Relaxed)).of(expiry, now)
    }

    /// memcached's `-o temporary_ttl=<seconds>` with its TEMP LRU on: items stored from now on
    /// whose lifetime is at most `seconds` are never evicted, only expired (0: off).
    pub fn set_temporary_ttl(&self, seconds: u32) {
        self.temporary_ttl.store(seconds, Ordering::Relaxed);
    }

    /// The temporary TTL in force (0: off).
    pub fn temporary_ttl(&self) -> u32 {
        self.temporary_ttl.load(Ordering::Relaxed)
    }

    /// Sizes the time classes for `segments` usable segments. When they change, the open
    /// segments of the old classes are sealed, so that no class keeps a segment open that the
    /// new ones do not use. Pool lock held.
    pub(super) fn fit_classes(&self, pool: &mut Pool, segments: usize) {
        let merge = TimeClasses::for_segments(segments).merge();
        if self.class_merge.swap(merge, Ordering::Relaxed) == merge {
            return;
        }
        for c in 0..TimeClasses::TEMPORARY {
            let s = self.active[c].swap(NO_SEGMENT, Ordering::AcqRel);
            if s != NO_SEGMENT {
                self.retire(pool, c, s as usize);
            }
        }
    }

    /// Seals segment `s`, the open segment of class `class`, and queues it: for eviction, or
    /// for expiry alone if it is temporary. Pool lock held.
    pub(super) fn retire(&self, pool: &mut Pool, class: usize, s: usize) {
        self.seal(s);
        if class == TimeClasses::TEMPORARY {
            pool.temporary.push_back(s);
        } else {
            pool.fifo.push_back(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{Config, OpError, Writer};

    const SEGMENT: usize = 1 << 20;

    fn writer(mib: usize) -> Writer {
        let config = Config { region_bytes: mib << 20, max_item_bytes: 1 << 20, avg_item_bytes: 4096 };
        Writer::create_anonymous(&config, true).unwrap()
    }

    fn fill(w: &Writer, prefix: &str, count: usize, exptime: i64) -> Result<(), OpError> {
        let value = vec![b'v'; 60 << 10];
        for i in 0..count {
            w.set(format!("{prefix}{i}").as_bytes(), &value, 0, exptime)?;
        }
        Ok(())
    }

    #[test]
    fn a_temporary_item_outlives_a_flood_that_evicts_everything_else() {
        let w = writer(4);
        w.set_temporary_ttl(61);
        assert_eq!(w.temporary_ttl(), 61);
        w.set(b"canary", b"temporary", 0, 30).unwrap();
        w.set(b"plain", b"evictable", 0, 3600).unwrap();
        fill(&w, "flood", 100, 3600).unwrap();
        let mut value = Vec::new();
        assert!(w.get(b"canary", &mut value).unwrap().hit().is_some(), "the temporary item stays");
        assert_eq!(value, b"temporary");
        assert!(w.get(b"plain", &mut value).unwrap().hit().is_none(), "the flood evicted the rest");
        assert!(w.stats().evictions > 0);
    }

    #[test]
    fn without_temporary_ttl_a_short_lived_item_is_evicted_like_any() {
        let w = writer(4);
        w.set(b"canary", b"temporary", 0, 30).unwrap();
        fill(&w, "flood", 100, 3600).unwrap();
        assert!(w.get(b"canary", &mut Vec::new()).unwrap().hit().is_none());
    }

    #[test]
    fn memory_full_of_temporary_items_refuses_a_store_and_expiry_frees_it() {
        let w = writer(4);
        w.set_temporary_ttl(61);
        let refused = fill(&w, "temp", 200, 30).unwrap_err();
        assert!(matches!(refused, OpError::OutOfMemory), "{refused:?}");
        assert_eq!(w.stats().evictions, 0, "nothing temporary was evicted");
        w.tick(w.clock() + 31);
        fill(&w, "after", 10, 3600).unwrap();
    }

    #[test]
    fn the_time_classes_follow_the_memory_limit() {
        let w = writer(64);
        let many = w.class_merge.load(std::sync::atomic::Ordering::Relaxed);
        w.set(b"a", b"1", 0, 100).unwrap();
        w.set_limit(2 * SEGMENT).unwrap();
        let few = w.class_merge.load(std::sync::atomic::Ordering::Relaxed);
        assert!(few > many, "fewer classes (each merging more) for 2 segments: {few} vs {many}");
        assert!(w.get(b"a", &mut Vec::new()).unwrap().hit().is_some(), "the sealed segment kept its item");
    }
}
