//! The hash index under the bucket locks: locking a key's two candidate buckets, linking and
//! unlinking slots, finding a free slot (relocating one cuckoo-style when both are full), and
//! the live-item accounting that follows each change.

use super::*;

impl Writer {
    /// Locks the key's buckets, finds its current slot, and runs `f` if that matches `expect`.
    pub(super) fn with_locked(
        &self,
        key: &[u8],
        hash: &KeyHash,
        expect: Expect,
        f: impl FnOnce(Option<&Found>),
    ) -> bool {
        let _locks = self.lock_buckets(hash);
        let at = hash
            .candidates()
            .iter()
            .find_map(|&b| self.region.scan_bucket::<Vec<u8>>(b, key, hash.tag, None, None));
        let ok = match expect {
            Expect::Any => true,
            Expect::Exactly(state) => at.as_ref().map(state_of) == state,
        };
        if ok {
            f(at.as_ref());
        }
        ok
    }

    /// Locks the key's candidate buckets, in index order (one if they coincide).
    pub(super) fn lock_buckets(&self, hash: &KeyHash) -> BucketLocks<'_> {
        let [a, b] = hash.buckets;
        let (low, high) = (a.min(b), a.max(b));
        let lock = |b: usize| {
            let version = &self.region.bucket(b).version;
            (version, write_lock(version))
        };
        let first = lock(low);
        if low == high {
            return BucketLocks { held: [first; 2], count: 1 };
        }
        BucketLocks { held: [first, lock(high)], count: 2 }
    }

    /// Points the index at a new item: over the key's old slot if it has one, else into the
    /// emptier candidate bucket, else over an item evicted from a full bucket. Locks held.
    /// False if there is no room and eviction is disabled.
    pub(super) fn link(&self, hash: &KeyHash, at: Option<&Found>, word: u64, marks: Marks) -> bool {
        let (b, i) = match at {
            Some(f) => {
                // The old version leaves its segment's live counts; its slot is overwritten
                // below (its header is as `f` read it under the lock: no need to read it again).
                self.unaccount(f.slot.segment, f.header.size());
                (f.bucket, f.slot_index)
            }
            None => match self.free_slot(hash) {
                Some(free) => free,
                None => return false,
            },
        };
        let bucket = self.region.bucket(b);
        bucket.marks.store(marks.put(bucket.marks.load(Ordering::Relaxed), i), Ordering::Relaxed);
        bucket.slots[i].store(word, Ordering::Release);
        self.last_access[b * BUCKET_SLOTS + i].store(self.clock(), Ordering::Relaxed);
        true
    }

    /// A free slot among the candidate buckets (the emptier one), making one if both are full
    /// (by evicting only if eviction is enabled).
    pub(super) fn free_slot(&self, hash: &KeyHash) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize, usize)> = None; // (occupied, bucket, free slot)
        for &b in hash.candidates() {
            let mut occupied = 0;
            let mut free = None;
            for (i, cell) in self.region.bucket(b).slots.iter().enumerate() {
                match self.region.layout.slot(cell.load(Ordering::Relaxed)) {
                    Some(_) => occupied += 1,
                    None => free = free.or(Some(i)),
                }
            }
            if let Some(i) = free {
                if best.is_none_or(|(o, _, _)| occupied < o) {
                    best = Some((occupied, b, i));
                }
            }
        }
        if let Some((_, b, i)) = best {
            return Some((b, i));
        }
        // Both buckets full: reuse the slot of a dead item, else move a resident to its other
        // bucket, else evict the oldest item not read since written (the index, not memory,
        // is the limit).
        let slots = || hash.candidates().iter().flat_map(|&b| (0..BUCKET_SLOTS).map(move |i| (b, i)));
        let word_at = |(b, i): (usize, usize)| self.region.bucket(b).slots[i].load(Ordering::Relaxed);
        let dead = slots()
            .find(|&at| self.region.layout.slot(word_at(at)).is_some_and(|s| self.live_header(s).is_none()));
        if let Some((b, i)) = dead {
            self.count_drop(word_at((b, i)), false);
            self.drop_slot(b, i);
            return Some((b, i));
        }
        if let Some(freed) = self.relocate_one(hash) {
            return Some(freed);
        }
        if !self.evict {
            return None; // no eviction (`-M`): the caller answers OutOfMemory
        }
        let age = |&at: &(usize, usize)| {
            let word = word_at(at);
            let generation = self
                .region
                .layout
                .slot(word)
                .filter(|s| s.segment < self.region.layout.segment_count)
                .map_or(0, |s| self.region.meta(s.segment).generation.load(Ordering::Relaxed));
            (word & SLOT_ACCESSED != 0, generation)
        };
        let victim = slots().min_by_key(age).expect("a key has at least one bucket");
        self.tell_eviction(victim.0, victim.1);
        self.count_drop(word_at(victim), true);
        self.region.header().index_evictions.fetch_add(1, Ordering::Relaxed);
        self.drop_slot(victim.0, victim.1);
        Some(victim)
    }

    /// Frees a slot in one of `hash`'s (full, locked) buckets by moving a resident item to its
    /// alternative bucket, if that bucket has room and is not held by another writer (waiting
    /// for it could deadlock: it is outside our lock order). The item is stored in its new
    /// place before it leaves the old one, and readers re-check on a miss (see `Region::find`).
    pub(super) fn relocate_one(&self, hash: &KeyHash) -> Option<(usize, usize)> {
        let mut key = [0u8; MAX_KEY_LEN];
        for &b in hash.candidates() {
            for i in 0..BUCKET_SLOTS {
                let word = self.region.bucket(b).slots[i].load(Ordering::Relaxed);
                let Some(slot) = self.region.layout.slot(word) else { continue };
                let Some(header) = self.region.item_header(slot) else { continue };
                let key = &mut key[..header.key_len];
                let item = self.region.item_offset(slot);
                self.region.map.read(item + header.key_offset(), key);
                let theirs = self.region.hash(key);
                let Some(&other) = theirs.candidates().iter().find(|&&c| c != b) else { continue };
                if hash.buckets.contains(&other) {
                    continue; // also full, and already ours
                }
                let version = &self.region.bucket(other).version;
                let Some(locked) = write_try_lock(version) else { continue };
                let target = self.region.bucket(other);
                let free = target
                    .slots
                    .iter()
                    .position(|c| self.region.layout.slot(c.load(Ordering::Relaxed)).is_none());
                if let Some(j) = free {
                    let source = self.region.bucket(b);
                    let marks = Marks::of(source.marks.load(Ordering::Relaxed), i);
                    target.marks.store(marks.put(target.marks.load(Ordering::Relaxed), j), Ordering::Relaxed);
                    target.slots[j].store(word, Ordering::Release);
                    source.slots[i].store(0, Ordering::Release);
                    let access = self.last_access[b * BUCKET_SLOTS + i].load(Ordering::Relaxed);
                    self.last_access[other * BUCKET_SLOTS + j].store(access, Ordering::Relaxed);
                }
                write_unlock(version, locked);
                if free.is_some() {
                    return Some((b, i));
                }
            }
        }
        None
    }

    /// Clears a slot whose key leaves the region (deleted, evicted, reclaimed), telling the
    /// observer. Lock held.
    pub(super) fn drop_slot(&self, b: usize, i: usize) {
        if let Some(observer) = self.observer.get() {
            let mut key = [0u8; MAX_KEY_LEN];
            if let Some(len) = self.slot_key(b, i, &mut key) {
                observer.key_removed(&key[..len]);
            }
        }
        self.unlink(b, i);
    }

    /// The key of the item in slot `i` of bucket `b`, copied into `key`: its length.
    pub(super) fn slot_key(&self, b: usize, i: usize, key: &mut [u8; MAX_KEY_LEN]) -> Option<usize> {
        let slot = self.region.layout.slot(self.region.bucket(b).slots[i].load(Ordering::Relaxed))?;
        let header = self.region.item_header(slot)?;
        let len = header.key_len.min(MAX_KEY_LEN);
        self.region.map.read(self.region.item_offset(slot) + header.key_offset(), &mut key[..len]);
        Some(len)
    }

    /// Clears a slot and takes its item off its segment's live counts. Lock held.
    pub(super) fn unlink(&self, b: usize, i: usize) {
        let cell = &self.region.bucket(b).slots[i];
        if let Some(slot) = self.region.layout.slot(cell.load(Ordering::Relaxed)) {
            if let Some(h) = self.region.item_header(slot) {
                self.unaccount(slot.segment, h.size());
            }
        }
        cell.store(0, Ordering::Release);
    }

    /// Takes an item of `size` bytes off segment `segment`'s live counts.
    pub(super) fn unaccount(&self, segment: usize, size: usize) {
        let m = self.region.meta(segment);
        m.live_items.fetch_sub(1, Ordering::Relaxed);
        m.live_bytes.fetch_sub(size as u64, Ordering::Relaxed);
    }

    pub(super) fn account(&self, segment: usize, size: usize) {
        let m = self.region.meta(segment);
        m.live_items.fetch_add(1, Ordering::Relaxed);
        m.live_bytes.fetch_add(size as u64, Ordering::Relaxed);
    }

    /// The header of the item a slot points to, if the item is alive: not flushed, not expired
    /// by the server clock.
    pub(super) fn live_header(&self, slot: Slot) -> Option<ItemHeader> {
        let h = self.region.header();
        self.region.item_header(slot).filter(|header| {
            let segment_gen = self.region.meta(slot.segment).generation.load(Ordering::Relaxed);
            // A held item is not live: never copied forward out of its hold.
            segment_gen >= h.flush_gen.load(Ordering::Acquire)
                && !self.region.held(segment_gen)
                && !is_expired(header.expiry, h.clock.load(Ordering::Acquire))
        })
    }

    /// Counts an item leaving the index to make room or because it died.
    pub(super) fn count_drop(&self, word: u64, live: bool) {
        let h = self.region.header();
        let read = word & SLOT_ACCESSED != 0;
        if live {
            h.evictions.fetch_add(1, Ordering::Relaxed);
            if !read {
                h.evicted_unfetched.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            h.reclaimed.fetch_add(1, Ordering::Relaxed);
            if !read {
                h.expired_unfetched.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Arc;

    /// Keys added less keys removed, by key.
    #[derive(Default)]
    struct Counts(Mutex<HashMap<Vec<u8>, i64>>);

    struct Observer(Arc<Counts>);

    impl KeyObserver for Observer {
        fn key_added(&self, key: &[u8]) {
            *self.0 .0.lock().unwrap().entry(key.to_vec()).or_default() += 1;
        }
        fn key_removed(&self, key: &[u8]) {
            *self.0 .0.lock().unwrap().entry(key.to_vec()).or_default() -= 1;
        }
    }

    /// Every key with a slot in the index, by walking it.
    fn indexed(w: &Writer) -> HashMap<Vec<u8>, i64> {
        let mut keys = HashMap::new();
        let mut key = [0u8; MAX_KEY_LEN];
        for b in 0..w.region.layout.bucket_count {
            for i in 0..BUCKET_SLOTS {
                if let Some(len) = w.slot_key(b, i, &mut key) {
                    *keys.entry(key[..len].to_vec()).or_default() += 1;
                }
            }
        }
        keys
    }

    #[test]
    fn overwrites_keep_the_live_counts_exact() {
        // Small segments, so a key's versions land in the same segment and in others; values
        // of every length, so the items' sizes differ from version to version.
        let config = Config { region_bytes: 4 << 20, max_item_bytes: 64 << 10, avg_item_bytes: 256 };
        let w = Writer::create_anonymous(&config, true).unwrap();
        let mut rng = TestRng(0x2545_f491_4f6c_dd1d);
        let mut sizes: HashMap<Vec<u8>, usize> = HashMap::new();
        for _ in 0..5000 {
            let key = format!("key:{}", rng.below(200)).into_bytes();
            let value = vec![b'v'; rng.below(700) as usize];
            w.set(&key, &value, 0, 0).unwrap();
            sizes.insert(key.clone(), item_bytes(key.len(), value.len(), false));
        }
        let stats = w.stats();
        assert_eq!(w.stats().evictions, 0, "nothing evicted: every key is live");
        assert_eq!(stats.items, sizes.len() as u64, "one live item a key");
        assert_eq!(stats.bytes, sizes.values().sum::<usize>() as u64, "the live items' bytes");
    }

    #[test]
    fn the_observer_sees_exactly_the_keys_the_index_holds() {
        // A small region, so sets evict; short expiries and flushes, so dead items are reclaimed.
        let config = Config { region_bytes: 4 << 20, max_item_bytes: 64 << 10, avg_item_bytes: 256 };
        let w = Writer::create_anonymous(&config, true).unwrap();
        for i in 0..50 {
            w.set(format!("before:{i}").as_bytes(), b"warm", 0, 0).unwrap();
        }
        let counts = Arc::new(Counts::default());
        assert!(w.observe_keys(Box::new(Observer(counts.clone()))).is_ok());
        assert!(w.observe_keys(Box::new(Observer(counts.clone()))).is_err(), "one observer");
        let mut rng = TestRng(0x9e37_79b9_7f4a_7c15);
        let mut next = |n: u64| rng.below(n);
        let mut now = w.clock();
        for step in 0..40_000 {
            let key = format!("key:{}", next(3000));
            match next(100) {
                0..=59 => {
                    let value = vec![b'v'; 1 + next(3000) as usize];
                    let exptime = if next(4) == 0 { 1 + next(3) as i64 } else { 0 };
                    let _ = w.set(key.as_bytes(), &value, 0, exptime);
                }
                60..=79 => {
                    let _ = w.delete(key.as_bytes());
                }
                80..=89 => {
                    let _ = w.add(key.as_bytes(), b"added", 0, 0);
                }
                90..=97 => {
                    let _ = w.touch(key.as_bytes(), 1);
                }
                _ if step % 5000 == 0 => w.flush(0),
                _ => {
                    now += 1;
                    w.tick(now);
                }
            }
        }
        let observed: HashMap<Vec<u8>, i64> =
            counts.0.lock().unwrap().iter().filter(|(_, &n)| n != 0).map(|(k, &n)| (k.clone(), n)).collect();
        let truth = indexed(&w);
        assert!(truth.values().all(|&n| n == 1), "a key has one slot");
        assert!(
            w.stats().evictions > 0 || w.region.header().index_evictions.load(Ordering::Relaxed) > 0,
            "evicted"
        );
        assert_eq!(observed.len(), truth.len());
        assert_eq!(observed, truth, "added less removed is exactly the index");
    }
}
