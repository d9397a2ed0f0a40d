//! Walks of the index, bucket by bucket: a read-only one over every live item, for key dumps
//! (memcached's `lru_crawler metadump`), which takes no lock and changes nothing (each bucket
//! is copied and validated against its version like a lookup, so a walk runs beside writers);
//! and a sweep that unlinks dead items (memcached's `lru_crawler crawl`), one bucket lock at a
//! time.

use super::*;
use crate::seqlock::{read_begin, read_validate};
use std::ops::Range;

/// One item as the index shows it: found by a walk, or evicted ([`EvictionObserver`]).
#[derive(Clone, Copy, Debug)]
pub struct IndexedItem<'a> {
    pub key: &'a [u8],
    /// What a lookup would tell (with `last_access`), without reading the value.
    pub info: ItemInfo,
}

/// What a [`Writer::sweep_dead`] found: the items it looked at, and the dead ones it unlinked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub checked: u64,
    pub reclaimed: u64,
}

impl Writer {
    /// Buckets in the index: a walk's cursor runs from 0 to this.
    pub fn bucket_count(&self) -> usize {
        self.region.layout.bucket_count
    }

    /// Calls `visit` for every live item (not expired, not flushed, not a lease record) that
    /// buckets `buckets` hold. A bucket changed by a writer while it is read is read again, so
    /// each item is seen in one consistent state; an item moved to its other bucket while the
    /// walk runs may be seen twice or not at all (memcached's crawler, walking LRUs that move,
    /// has the same looseness).
    pub fn walk_buckets(&self, buckets: Range<usize>, mut visit: impl FnMut(&IndexedItem<'_>)) {
        let mut keys = [[0u8; MAX_KEY_LEN]; BUCKET_SLOTS];
        let mut found: [Option<(usize, ItemInfo)>; BUCKET_SLOTS] = [None; BUCKET_SLOTS];
        for b in buckets.start..buckets.end.min(self.bucket_count()) {
            let version = &self.region.bucket(b).version;
            let mut spins = 0;
            loop {
                let Some(begun) = read_begin(version) else {
                    backoff(&mut spins);
                    continue;
                };
                for (i, (key, item)) in keys.iter_mut().zip(found.iter_mut()).enumerate() {
                    *item = self.read_slot(b, i, key);
                }
                if read_validate(version, begun) {
                    break;
                }
            }
            for (key, item) in keys.iter().zip(found.iter()) {
                if let Some((len, info)) = item {
                    visit(&IndexedItem { key: &key[..*len], info: *info });
                }
            }
        }
    }

    /// Sets the observer of evictions. Refused (handed back) if one is set.
    pub fn observe_evictions(
        &self,
        observer: Box<dyn EvictionObserver>,
    ) -> Result<(), Box<dyn EvictionObserver>> {
        self.evictions.set(observer)
    }

    /// Unlinks the dead items (expired, or flushed) of buckets `buckets`, so they leave the
    /// item counts at once rather than when their segment is reclaimed: what memcached's LRU
    /// crawler does. Items under a rejoin hold are not dead. Counts each unlinked item as
    /// reclaimed, as a reclaimed segment's are.
    pub fn sweep_dead(&self, buckets: Range<usize>) -> Swept {
        let mut swept = Swept::default();
        let h = self.region.header();
        for b in buckets.start..buckets.end.min(self.bucket_count()) {
            let version = &self.region.bucket(b).version;
            let locked = write_lock(version);
            for i in 0..BUCKET_SLOTS {
                let word = self.region.bucket(b).slots[i].load(Ordering::Acquire);
                let Some(slot) = self.region.layout.slot(word) else { continue };
                let Some(header) = self.region.item_header(slot) else { continue };
                swept.checked += 1;
                let segment_gen = self.region.meta(slot.segment).generation.load(Ordering::Relaxed);
                let flushed = segment_gen < h.flush_gen.load(Ordering::Acquire);
                if flushed || is_expired(header.expiry, h.clock.load(Ordering::Acquire)) {
                    self.count_drop(word, false);
                    self.drop_slot(b, i);
                    swept.reclaimed += 1;
                }
            }
            write_unlock(version, locked);
        }
        swept
    }

    /// Tells the eviction observer, if any, about the live item in slot `i` of bucket `b`,
    /// which is about to be evicted. Lock held.
    pub(super) fn tell_eviction(&self, b: usize, i: usize) {
        let Some(observer) = self.evictions.get().filter(|o| o.listening()) else { return };
        let mut key = [0u8; MAX_KEY_LEN];
        if let Some((len, info)) = self.read_slot(b, i, &mut key) {
            observer.item_evicted(&IndexedItem { key: &key[..len], info }, self.clock());
        }
    }

    /// The live item in slot `i` of bucket `b`, its key copied into `key`: the key's length
    /// and what a lookup would tell. Unvalidated: the caller checks the bucket's version.
    fn read_slot(&self, b: usize, i: usize, key: &mut [u8; MAX_KEY_LEN]) -> Option<(usize, ItemInfo)> {
        let bucket = self.region.bucket(b);
        let word = bucket.slots[i].load(Ordering::Acquire);
        let slot = self.region.layout.slot(word)?;
        let header = self.region.item_header(slot)?;
        let len = header.key_len;
        self.region.map.read(self.region.item_offset(slot) + header.key_offset(), &mut key[..len]);
        let segment_gen = self.region.meta(slot.segment).generation.load(Ordering::Relaxed);
        let cas = self.region.item_cas(slot, &header, segment_gen);
        let marks = Marks::of(bucket.marks.load(Ordering::Relaxed), i);
        let last_access = self.last_access[b * BUCKET_SLOTS + i].load(Ordering::Relaxed);
        let found =
            Found { bucket: b, slot_index: i, word, slot, segment_gen, header, cas, marks, last_access };
        let info = self.region.judge(&found).hit().filter(|info| !info.marks.hidden)?;
        Some((len, info))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn walk_all(w: &Writer) -> BTreeMap<Vec<u8>, ItemInfo> {
        let mut seen = BTreeMap::new();
        w.walk_buckets(0..w.bucket_count(), |item| {
            assert!(seen.insert(item.key.to_vec(), item.info).is_none(), "a quiet walk sees a key once");
        });
        seen
    }

    #[test]
    fn a_walk_sees_every_live_item_and_nothing_dead() {
        let w = Writer::create_anonymous(&Config::default(), true).unwrap();
        w.tick(1000);
        for i in 0..500u32 {
            w.set(format!("k{i}").as_bytes(), b"value", i, 0).unwrap();
        }
        w.set(b"short", b"v", 0, 5).unwrap();
        w.delete(b"k7").unwrap();
        let mut value = Vec::new();
        w.get(b"k9", &mut value).unwrap();
        let seen = walk_all(&w);
        assert_eq!(seen.len(), 500);
        assert!(!seen.contains_key(&b"k7"[..]));
        assert_eq!(seen[&b"k3"[..]].flags, 3);
        assert_eq!(seen[&b"k3"[..]].value_len, 5);
        assert!(seen[&b"k9"[..]].fetched && !seen[&b"k3"[..]].fetched);
        assert_eq!(seen[&b"short"[..]].expiry, 1005);
        // Expired and flushed items are not walked.
        w.tick(1006);
        assert_eq!(walk_all(&w).len(), 499);
        w.flush(0);
        assert!(walk_all(&w).is_empty());
    }

    #[test]
    fn a_sweep_unlinks_dead_items_and_counts_them() {
        let w = Writer::create_anonymous(&Config::default(), true).unwrap();
        w.tick(1000);
        for i in 0..30u32 {
            w.set(format!("immortal{i}").as_bytes(), b"ok", 0, 0).unwrap();
            w.set(format!("long{i}").as_bytes(), b"ok", 0, 3600).unwrap();
            w.set(format!("short{i}").as_bytes(), b"ok", 0, 1).unwrap();
        }
        let before = w.stats();
        assert_eq!(before.items, 90);
        let all = 0..w.bucket_count();
        assert_eq!(w.sweep_dead(all.clone()), Swept { checked: 90, reclaimed: 0 }, "nothing dead yet");
        w.region.header().clock.store(1002, Ordering::Release); // the short ones expire
        assert_eq!(w.sweep_dead(all.clone()), Swept { checked: 90, reclaimed: 30 });
        let after = w.stats();
        assert_eq!((after.items, after.reclaimed, after.expired_unfetched), (60, 30, 30));
        assert_eq!(walk_all(&w).len(), 60, "the live ones stay");
        w.flush(100); // a delayed flush: not yet
        assert_eq!(w.sweep_dead(all).reclaimed, 0);
    }

    #[test]
    fn a_walk_in_pieces_sees_what_one_walk_sees() {
        let w = Writer::create_anonymous(&Config::default(), true).unwrap();
        for i in 0..300u32 {
            w.set(format!("key-{i}").as_bytes(), b"x", 0, 0).unwrap();
        }
        let mut pieces = 0;
        let mut from = 0;
        while from < w.bucket_count() {
            w.walk_buckets(from..from + 1000, |_| pieces += 1);
            from += 1000;
        }
        assert_eq!(pieces, walk_all(&w).len());
        assert_eq!(pieces, 300);
    }

    /// The keys evicted, in order.
    type Keys = std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>;

    struct Evicted(Keys);

    impl EvictionObserver for Evicted {
        fn listening(&self) -> bool {
            true
        }

        fn item_evicted(&self, item: &IndexedItem<'_>, _now: u32) {
            self.0.lock().unwrap().push(item.key.to_vec());
        }
    }

    #[test]
    fn the_eviction_observer_hears_of_each_live_item_evicted() {
        let config = Config { region_bytes: 8 << 20, ..Config::default() };
        let w = Writer::create_anonymous(&config, true).unwrap();
        let evicted = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        assert!(w.observe_evictions(Box::new(Evicted(evicted.clone()))).is_ok());
        assert!(w.observe_evictions(Box::new(Evicted(evicted.clone()))).is_err(), "one observer");
        let value = vec![b'v'; 1000];
        for i in 0..20_000u32 {
            w.set(format!("key-{i}").as_bytes(), &value, 0, 0).unwrap();
        }
        let evicted = evicted.lock().unwrap();
        assert!(!evicted.is_empty());
        assert_eq!(evicted.len() as u64, w.stats().evictions);
        assert!(evicted.iter().all(|key| key.starts_with(b"key-")));
    }
}
