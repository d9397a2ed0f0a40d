//! The writer's operations as the server sees them: lookups, the general `update` and the
//! memcached commands built on it, `flush`, the clock, and the one path (`execute`) every
//! change takes from decision to published slot.

use super::*;

/// What a new version carries besides its key and value, as [`Writer::store`] writes it.
#[derive(Clone, Copy)]
struct Version {
    flags: u32,
    /// Absolute expiry (0: never).
    expiry: u32,
    /// An explicit CAS unique; `None` gives the version a fresh one.
    cas: Option<u64>,
    marks: Marks,
}

/// The expiry a new version is stored with: an item that arrives expired (`None`, see
/// [`absolute_expiry`]) is stored as memcached stores it, expiring `now`, so that a read finds
/// it and counts it expired (`get_expired`); its segment is reclaimed with the dead ones.
#[inline]
fn arrival_expiry(expiry: Option<u32>, now: u32) -> u32 {
    expiry.unwrap_or(now.max(1))
}

impl Writer {
    /// The region file's path (for a memfd, the `/proc` path other processes open).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The region's geometry.
    pub fn layout(&self) -> &Layout {
        &self.region.layout
    }

    /// The locality cookie.
    pub fn cookie(&self) -> u64 {
        self.region.layout.cookie
    }

    /// How many times a writer has attached to this region.
    pub fn generation(&self) -> u64 {
        self.region.header().generation.load(Ordering::Acquire)
    }

    /// The server clock (Unix seconds) that expiry is judged by.
    #[inline]
    pub fn clock(&self) -> u32 {
        self.region.header().clock.load(Ordering::Acquire)
    }

    /// How the region's previous writer left it.
    pub fn previous_stop(&self) -> PreviousStop {
        self.previous_stop
    }

    /// A rejoin hold: every item written before now reads as flushed — to this writer and to
    /// every reader of the region — for `seconds` of server time, and any change to one drops
    /// it first; after that, those still there are served again. For a server that restarts on
    /// a region after missing invalidations, while whoever sent them delivers them.
    pub fn hold(&self, seconds: u32) {
        let mut pool = self.pool();
        self.seal_open(&mut pool);
        let h = self.region.header();
        h.hold_until.store(self.clock().saturating_add(seconds), Ordering::Release);
        h.hold_gen.store(h.next_segment_gen.load(Ordering::Acquire), Ordering::Release);
    }

    /// Publishes the curve's sampling threshold for local readers (0: sample nothing), for
    /// the spatial part of the probe hash ([`crate::key_hash`]); the header's line is written
    /// only when it changes (readers load it on every read).
    pub fn publish_curve_threshold(&self, threshold: u32) {
        let field = &self.region.header().probe_threshold;
        if field.load(Ordering::Relaxed) != threshold {
            field.store(threshold, Ordering::Relaxed);
        }
    }

    /// Seconds of server time the rejoin hold has left (0: none).
    pub fn hold_remaining(&self) -> u32 {
        let h = self.region.header();
        h.hold_until.load(Ordering::Acquire).saturating_sub(self.clock())
    }

    /// Publishes the server clock (call about once a second; tests may jump it), applies a
    /// delayed flush whose time has come, and reclaims segments whose items are all dead.
    pub fn tick(&self, now: u32) {
        let mut pool = self.pool();
        let h = self.region.header();
        let flush_at = h.flush_at.load(Ordering::Acquire);
        if flush_at != 0 && flush_at <= now {
            self.flush_now(&mut pool);
        }
        h.clock.store(now, Ordering::Release);
        self.seal_expired_open_segments(&mut pool, now);
        self.reclaim_dead(&mut pool, DEAD_GRACE);
    }

    /// Seals open segments whose items have all expired, so that `reclaim_dead` frees them now
    /// rather than when their class next fills a segment. Pool lock held.
    pub(super) fn seal_expired_open_segments(&self, pool: &mut Pool, now: u32) {
        for active in self.active.iter() {
            let s = active.load(Ordering::Acquire);
            if s == NO_SEGMENT {
                continue;
            }
            let max_expiry = self.region.meta(s as usize).max_expiry.load(Ordering::Acquire);
            let expired = max_expiry != 0 && max_expiry != NEVER && max_expiry <= now;
            if expired && active.compare_exchange(s, NO_SEGMENT, Ordering::AcqRel, Ordering::Acquire).is_ok()
            {
                self.seal(s as usize);
                pool.fifo.push_back(s as usize);
            }
        }
    }

    /// memcached's `flush_all [delay]`: every item stored before the flush takes effect is
    /// gone. `delay` follows the expiry rules (0 or negative: now).
    pub fn flush(&self, delay: i64) {
        let mut pool = self.pool();
        let h = self.region.header();
        match absolute_expiry(delay, self.clock()).filter(|&at| at != 0) {
            Some(at) => h.flush_at.store(at, Ordering::Release),
            // The flushed items stay where they are, as memcached leaves them, so that a read
            // finds them and counts them flushed (`get_flushed`); the next tick, or the next
            // segment a store needs, reclaims their segments.
            None => self.flush_now(&mut pool),
        }
    }

    /// Reads `key`; on a hit its value is in `value`. Marks the item as read, which gives it
    /// a second chance at eviction.
    pub fn get(&self, key: &[u8], value: &mut Vec<u8>) -> Result<Lookup, OpError> {
        self.read(key, value, true)
    }

    /// Hashes `key` with this region's seed, once for all a caller does with it: a multiget
    /// prefetches and reads each key under the one hash ([`Writer::prefetch_index`],
    /// [`Writer::prefetch_item`], [`Writer::read_hashed`], [`Writer::update_hashed`]).
    #[inline]
    pub fn hash(&self, key: &[u8]) -> KeyHash {
        self.region.hash(key)
    }

    /// Whether `hash` stays inside this region's index. A hash another region made may not:
    /// it is then not used, so it cannot reach past this index.
    #[inline]
    fn in_index(&self, hash: &KeyHash) -> bool {
        hash.buckets.iter().all(|&b| b < self.region.layout.bucket_count)
    }

    /// `hash` if it is in this region's index, else `key`'s own (see [`Writer::in_index`]).
    #[inline]
    fn checked_hash(&self, key: &[u8], hash: &KeyHash) -> KeyHash {
        if self.in_index(hash) {
            *hash
        } else {
            self.region.hash(key)
        }
    }

    /// Starts loading the index buckets a lookup under `hash` ([`Writer::hash`]) reads first
    /// (and this writer's access times beside them). A multiget calls it several keys ahead of
    /// its lookups, then [`Writer::prefetch_item`] a few keys ahead, so that their memory
    /// misses overlap.
    #[inline]
    pub fn prefetch_index(&self, hash: &KeyHash) {
        if self.in_index(hash) {
            self.prefetch_lookup(hash);
        }
    }

    /// Starts loading what a lookup under `hash` touches before it reaches the item: the
    /// candidate buckets, and their access times (server memory, apart from the region).
    #[inline]
    pub(super) fn prefetch_lookup(&self, hash: &KeyHash) {
        self.region.prefetch_buckets(hash);
        for &b in hash.candidates() {
            prefetch_line(&self.last_access[b * BUCKET_SLOTS]);
        }
    }

    /// Starts loading the item a lookup under `hash` ([`Writer::hash`]) will copy, as its
    /// (already loaded) index buckets point to it.
    #[inline]
    pub fn prefetch_item(&self, hash: &KeyHash) {
        if self.in_index(hash) {
            self.region.prefetch_items(hash);
        }
    }

    /// Reads `key` like [`Writer::get`]; `bump: false` leaves the item's read mark and access
    /// time as they were (meta's `u`). A hit reports the state before this read.
    pub fn read(&self, key: &[u8], value: &mut dyn ValueSink, bump: bool) -> Result<Lookup, OpError> {
        self.read_under(key, self.region.hash(key), value, bump, false)
    }

    /// [`Writer::read`] under `key`'s hash from [`Writer::hash`]; `prefetched`: the caller has
    /// started loading the key's index with [`Writer::prefetch_index`] (a multiget's keys
    /// placed ahead), so the lookup does not start it again. Inline, so that a caller in
    /// another crate (the server's read path) calls the lookup itself, not a wrapper.
    #[inline]
    pub fn read_hashed<S: ValueSink + ?Sized>(
        &self,
        key: &[u8],
        hash: &KeyHash,
        value: &mut S,
        bump: bool,
        prefetched: bool,
    ) -> Result<Lookup, OpError> {
        self.read_under(key, self.checked_hash(key, hash), value, bump, prefetched)
    }

    /// The read itself, under a hash known to be this region's; `prefetched`: its index and
    /// access times are already on their way.
    #[inline]
    fn read_under<S: ValueSink + ?Sized>(
        &self,
        key: &[u8],
        hash: KeyHash,
        value: &mut S,
        bump: bool,
        prefetched: bool,
    ) -> Result<Lookup, OpError> {
        // The access time is a separate miss: start it with the buckets' rather than after.
        if !prefetched {
            self.prefetch_lookup(&hash);
        }
        let (lookup, found) = self.region.get_hashed(key, &hash, value, Some(&self.last_access))?;
        let (Lookup::Hit(info), Some(f)) = (lookup, found) else { return Ok(lookup) };
        if bump {
            self.bump(f.bucket, f.slot_index, f.word, info.last_access);
        }
        Ok(Lookup::Hit(info))
    }

    /// Marks the slot read (the accessed bit, if it still holds `word`), stamps its segment as
    /// used (for `lru`), and moves its access time on, at most every [`ACCESS_UPDATE_INTERVAL`]
    /// seconds (`last_access` is its current one).
    #[inline(always)]
    pub(super) fn bump(&self, bucket: usize, slot: usize, word: u64, last_access: u32) {
        if let Some(item) = self.region.layout.slot(word) {
            self.stamp_segment(item.segment);
        }
        if word & SLOT_ACCESSED == 0 {
            // A failed exchange means the slot changed meanwhile: nothing to mark.
            let cell = &self.region.bucket(bucket).slots[slot];
            let _ = cell.compare_exchange(word, word | SLOT_ACCESSED, Ordering::Relaxed, Ordering::Relaxed);
        }
        let now = self.clock();
        if now.saturating_sub(last_access) >= ACCESS_UPDATE_INTERVAL {
            self.last_access[bucket * BUCKET_SLOTS + slot].store(now, Ordering::Relaxed);
        }
    }

    /// Marks the item a reader found at `location` as read, as [`Writer::read`] does for its
    /// own hits (second chance in eviction, `h`, `l`), if the slot still holds what the reader
    /// saw. Locations come from clients' hints areas, so anything out of range is ignored.
    pub fn mark_read(&self, location: Location) {
        if location.bucket >= self.region.layout.bucket_count || location.slot >= BUCKET_SLOTS {
            return;
        }
        let (bucket, slot) = (location.bucket, location.slot);
        let word = self.region.bucket(bucket).slots[slot].load(Ordering::Relaxed);
        if self.region.layout.slot(word).is_some() && word & !SLOT_ACCESSED == location.word & !SLOT_ACCESSED
        {
            self.bump(
                bucket,
                slot,
                word,
                self.last_access[bucket * BUCKET_SLOTS + slot].load(Ordering::Relaxed),
            );
        }
    }

    /// The general operation behind every other: finds the live item under `key` (its value
    /// too if `need_value`), lets `decide` choose a [`Change`] and an answer, and carries the
    /// change out only if the item is still the one `decide` saw (else it decides again).
    /// `given` is the value for [`Value::Given`], `Append` and `Prepend`.
    ///
    /// Returns the answer and, if a new version was stored, its CAS unique.
    pub fn update<T>(
        &self,
        key: &[u8],
        given: &[u8],
        need_value: bool,
        decide: impl FnMut(Option<Current<'_>>) -> (Change, T),
    ) -> Result<(T, Option<u64>), OpError> {
        self.update_under(key, self.region.hash(key), given, need_value, decide)
    }

    /// [`Writer::update`] under `key`'s hash from [`Writer::hash`].
    pub fn update_hashed<T>(
        &self,
        key: &[u8],
        hash: &KeyHash,
        given: &[u8],
        need_value: bool,
        decide: impl FnMut(Option<Current<'_>>) -> (Change, T),
    ) -> Result<(T, Option<u64>), OpError> {
        self.update_under(key, self.checked_hash(key, hash), given, need_value, decide)
    }

    /// The update itself, under a hash known to be this region's.
    #[inline]
    fn update_under<T>(
        &self,
        key: &[u8],
        hash: KeyHash,
        given: &[u8],
        need_value: bool,
        mut decide: impl FnMut(Option<Current<'_>>) -> (Change, T),
    ) -> Result<(T, Option<u64>), OpError> {
        check_key(key)?;
        let mut current = Vec::new();
        loop {
            let sink: Option<&mut dyn ValueSink> = need_value.then_some(&mut current);
            let found = self.region.find(key, &hash, sink, Some(&self.last_access))?;
            if let Some(held) = found.as_ref().filter(|f| self.region.held(f.segment_gen)) {
                // A version from before a restart, under its rejoin hold: dropped before any
                // change, so that a delete cannot leave it to come back when the hold ends and
                // nothing written meanwhile builds on it.
                let expect = Expect::Exactly(Some(state_of(held)));
                self.execute(key, &hash, &[], &[], (Change::Remove, ()), expect)?;
                continue;
            }
            let live = found.as_ref().and_then(|f| self.region.judge(f).hit());
            let plan = decide(live.map(|info| Current { info, value: current.as_slice() }));
            let expect = Expect::Exactly(found.as_ref().map(state_of));
            if let Some(done) = self.execute(key, &hash, given, &current, plan, expect)? {
                return Ok(done);
            }
        }
    }

    /// memcached `set`. If it fails for lack of memory or size, the old value is removed.
    ///
    /// The request path's own store: no decision to make, so the new version goes straight to
    /// [`Writer::store`], without a [`Change`] built and matched on the way.
    pub fn set(&self, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Result<Store, OpError> {
        check_key(key)?;
        let hash = self.region.hash(key);
        let now = self.clock();
        let version = Version {
            flags,
            expiry: arrival_expiry(absolute_expiry(exptime, now), now),
            cas: None,
            marks: Marks::default(),
        };
        match self.store(key, &hash, [value, &[]], version, now, Expect::Any) {
            Ok(stored) => {
                debug_assert!(stored.is_some(), "unconditional");
                Ok(Store::Stored)
            }
            Err(e @ (OpError::ValueTooLarge { .. } | OpError::OutOfMemory)) => {
                // As memcached does for `set` only: a failed set must not leave the old value
                // readable, or the client would keep reading what it just tried to replace.
                self.execute(key, &hash, &[], &[], (Change::Remove, ()), Expect::Any)?;
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// A new version with a fresh CAS and no marks, expiring by memcached's `exptime` rules.
    pub(super) fn new_item(&self, value: Value, flags: u32, exptime: i64) -> NewItem {
        let expiry = absolute_expiry(exptime, self.clock());
        NewItem { value, flags, expiry, cas: None, marks: Marks::default() }
    }

    /// Runs `update` for an operation that answers only its decision.
    pub(super) fn apply<T>(
        &self,
        key: &[u8],
        given: &[u8],
        need_value: bool,
        mut decide: impl FnMut(Option<Current<'_>>) -> Plan<T>,
    ) -> Result<T, OpError> {
        self.update(key, given, need_value, |current| decide(current)).map(|(result, _)| result)
    }

    /// memcached `add`: store only if there is no live item. A lease placeholder or a delete
    /// hold-off (hidden, not stale) refuses it too; a value kept stale after a delete does not.
    pub fn add(&self, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Result<Store, OpError> {
        let item = self.new_item(Value::Given, flags, exptime);
        self.apply(key, value, false, |current| match current {
            Some(c) if c.info.marks.refuses_add() => (Change::Keep, Store::NotStored),
            _ => (Change::Store(item.clone()), Store::Stored),
        })
    }

    /// memcached `replace`: store only if there is a live item.
    pub fn replace(&self, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Result<Store, OpError> {
        let item = self.new_item(Value::Given, flags, exptime);
        self.apply(key, value, false, |current| match visible(current) {
            None => (Change::Keep, Store::NotStored),
            Some(_) => (Change::Store(item.clone()), Store::Stored),
        })
    }

    /// memcached `append`: add bytes after the live item's value, keeping its flags and expiry.
    pub fn append(&self, key: &[u8], value: &[u8]) -> Result<Store, OpError> {
        self.concat(key, value, Value::Append)
    }

    /// memcached `prepend`: add bytes before the live item's value.
    pub fn prepend(&self, key: &[u8], value: &[u8]) -> Result<Store, OpError> {
        self.concat(key, value, Value::Prepend)
    }

    pub(super) fn concat(&self, key: &[u8], value: &[u8], how: Value) -> Result<Store, OpError> {
        self.apply(key, value, true, |current| match visible(current) {
            None => (Change::Keep, Store::NotStored),
            Some(c) => (Change::Store(NewItem::keeping(c.info, how.clone())), Store::Stored),
        })
    }

    /// memcached `cas`: store only if the live item's CAS unique is still `cas`.
    pub fn cas(
        &self,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i64,
        cas: u64,
    ) -> Result<Store, OpError> {
        let item = self.new_item(Value::Given, flags, exptime);
        self.apply(key, value, false, |current| match visible(current) {
            None => (Change::Keep, Store::NotFound),
            Some(c) if c.info.cas != cas => (Change::Keep, Store::Exists),
            Some(_) => (Change::Store(item.clone()), Store::Stored),
        })
    }

    /// memcached `incr`: adds `delta`, wrapping at 2^64.
    pub fn incr(&self, key: &[u8], delta: u64) -> Result<Delta, OpError> {
        self.apply(key, &[], true, |current| counter_change(current, |n| n.wrapping_add(delta)))
    }

    /// memcached `decr`: subtracts `delta`, stopping at 0.
    pub fn decr(&self, key: &[u8], delta: u64) -> Result<Delta, OpError> {
        self.apply(key, &[], true, |current| counter_change(current, |n| n.saturating_sub(delta)))
    }

    /// memcached `delete`: true if a live item was removed. A lease record (hidden) goes too,
    /// so its token is void, but does not count as an item.
    pub fn delete(&self, key: &[u8]) -> Result<bool, OpError> {
        self.apply(key, &[], false, |current| match current {
            None => (Change::Keep, false),
            Some(c) => (Change::Remove, !c.info.marks.hidden),
        })
    }

    /// memcached `touch`: sets a live item's expiry; true if there was one.
    pub fn touch(&self, key: &[u8], exptime: i64) -> Result<bool, OpError> {
        let expiry = touch_expiry(exptime, self.clock());
        self.apply(key, &[], false, |current| match visible(current) {
            None => (Change::Keep, false),
            Some(c) => {
                (Change::Mark(Mark { expiry: Some(expiry), marks: c.info.marks, fetched: false }), true)
            }
        })
    }

    /// Sets the observer of keys entering and leaving the index, and tells it every key the
    /// index holds now (a warm restart's included). Call once, before serving: keys changed
    /// while this runs may be missed. Refused (the observer is handed back) if one is set.
    pub fn observe_keys(&self, observer: Box<dyn KeyObserver>) -> Result<(), Box<dyn KeyObserver>> {
        self.observer.set(observer)?;
        let observer = self.observer.get().expect("set above");
        let mut key = [0u8; MAX_KEY_LEN];
        for b in 0..self.region.layout.bucket_count {
            for i in 0..BUCKET_SLOTS {
                if let Some(len) = self.slot_key(b, i, &mut key) {
                    observer.key_added(&key[..len]);
                }
            }
        }
        Ok(())
    }

    /// Counters and sizes.
    pub fn stats(&self) -> Stats {
        let l = &self.region.layout;
        let h = self.region.header();
        let (mut items, mut bytes) = (0u64, 0u64);
        for s in 0..l.segment_count {
            let m = self.region.meta(s);
            items += m.live_items.load(Ordering::Relaxed) as u64;
            bytes = bytes.saturating_add(m.live_bytes.load(Ordering::Relaxed)); // damaged tables too
        }
        let r = Ordering::Relaxed;
        let (segments_free, segments_parked) = {
            let pool = self.pool();
            (pool.free.len(), pool.parked.len())
        };
        Stats {
            items,
            bytes,
            total_items: h.total_items.load(r),
            evictions: h.evictions.load(r),
            evicted_unfetched: h.evicted_unfetched.load(r),
            expired_unfetched: h.expired_unfetched.load(r),
            reclaimed: h.reclaimed.load(r),
            index_evictions: h.index_evictions.load(r),
            segments_evicted: h.segments_evicted.load(r),
            segments_reclaimed: h.segments_expired.load(r),
            segments: l.segment_count,
            segments_free,
            segments_parked,
            segment_bytes: l.segment_bytes,
            index_bytes: l.index_bytes(),
            region_bytes: l.region_bytes,
        }
    }

    // -----------------------------------------------------------------------------------------
    // Applying a decision

    /// Carries out a plan: `Ok(None)` if the index no longer matches `expect`, else the answer
    /// and the CAS unique of the version stored, if one was.
    pub(super) fn execute<T>(
        &self,
        key: &[u8],
        hash: &KeyHash,
        given: &[u8],
        current: &[u8],
        (change, result): Plan<T>,
        expect: Expect,
    ) -> Result<Option<(T, Option<u64>)>, OpError> {
        match change {
            Change::Keep => Ok(Some((result, None))),
            Change::Remove => {
                let done = self.with_locked(key, hash, expect, |at| {
                    if let Some(f) = at {
                        self.drop_slot(f.bucket, f.slot_index);
                    }
                });
                Ok(done.then_some((result, None)))
            }
            Change::Mark(mark) => {
                let done = self.with_locked(key, hash, expect, |at| {
                    if let Some(f) = at {
                        self.mark(f, mark);
                    }
                });
                Ok(done.then_some((result, None)))
            }
            Change::Store(NewItem { value, flags, expiry, cas, marks }) => {
                let parts: [&[u8]; 2] = match &value {
                    Value::Given => [given, &[]],
                    Value::Current => [current, &[]],
                    Value::Append => [current, given],
                    Value::Prepend => [given, current],
                    Value::Owned(v) => [v, &[]],
                };
                let now = self.clock();
                let version = Version { flags, expiry: arrival_expiry(expiry, now), cas, marks };
                let stored = self.store(key, hash, parts, version, now, expect)?;
                Ok(stored.map(|new_cas| (result, Some(new_cas))))
            }
        }
    }

    /// Stores a new version of `key` whose value is `parts` joined: reserves its space, writes
    /// it there, and points the index at it if the index still matches `expect`. `Ok(None)` if
    /// it did not (the space is given up as a filler), else the new version's CAS unique.
    /// `now` is the server clock the version's time class is chosen by.
    fn store(
        &self,
        key: &[u8],
        hash: &KeyHash,
        parts: [&[u8]; 2],
        version: Version,
        now: u32,
        expect: Expect,
    ) -> Result<Option<u64>, OpError> {
        let Version { flags, expiry, cas, marks } = version;
        let len = parts[0].len() + parts[1].len();
        let limit = self.region.layout.max_item_bytes;
        let size = item_bytes(key.len(), len, cas.is_some());
        if size > limit {
            return Err(OpError::ValueTooLarge { len, max: max_value_len(limit, key.len(), false) });
        }
        let header =
            ItemHeader { key_len: key.len(), value_len: len, explicit_cas: cas.is_some(), expiry, flags };
        let class = self.class_of(expiry, now);
        let r = self.reserve(class, size)?;
        let segment_gen = self.write_item(r, &header, cas, key, parts);
        let new_cas = cas.unwrap_or_else(|| self.region.layout.derived_cas(segment_gen, r.offset));
        let word = self.region.layout.slot_word(Slot { tag: hash.tag, segment: r.segment, offset: r.offset });
        let mut linked = false;
        let done = self.with_locked(key, hash, expect, |at| {
            let new_key = at.is_none();
            // A dead (expired or flushed) version replaced is reclaimed here, as memcached
            // counts it; its segment's reclaim no longer finds it indexed.
            let dead = at.filter(|f| self.region.judge(f).hit().is_none()).map(|f| f.word);
            linked = self.link(hash, at, word, marks);
            if let Some(word) = dead.filter(|_| linked) {
                self.count_drop(word, false);
            }
            if linked && new_key {
                if let Some(observer) = self.observer.get() {
                    observer.key_added(key);
                }
            }
            if linked {
                self.account(r.segment, r.size);
                self.region.header().total_items.fetch_add(1, Ordering::Relaxed);
            }
        });
        if !linked {
            self.write_filler(r.segment, r.offset, r.size);
        }
        self.release(r.segment);
        if done && !linked {
            return Err(OpError::OutOfMemory);
        }
        Ok(done.then_some(new_cas))
    }

    /// Changes a live item in place: expiry, marks, read mark. Its buckets are locked.
    pub(super) fn mark(&self, f: &Found, mark: Mark) {
        if let Some(expiry) = mark.expiry {
            let item = self.region.item_offset(f.slot);
            self.region.map.u32_at(item + ITEM_EXPIRY_OFFSET).store(expiry, Ordering::Relaxed);
            self.region.meta(f.slot.segment).max_expiry.fetch_max(never_if_zero(expiry), Ordering::AcqRel);
        }
        let bucket = self.region.bucket(f.bucket);
        let marks = bucket.marks.load(Ordering::Relaxed);
        bucket.marks.store(mark.marks.put(marks, f.slot_index), Ordering::Relaxed);
        if mark.fetched {
            bucket.slots[f.slot_index].fetch_or(SLOT_ACCESSED, Ordering::Relaxed);
            self.stamp_segment(f.slot.segment);
            self.last_access[f.bucket * BUCKET_SLOTS + f.slot_index].store(self.clock(), Ordering::Relaxed);
        }
    }
}
