//! Item space: writing items into reserved space of the active segment of a time class,
//! sealing and freeing segments, flushing, reclaiming dead space, and eviction (the victim as
//! `policy.rs` picks it; under `fifo`, still-used items are copied forward).

use super::*;

impl Writer {
    /// Writes an item into reserved space, and raises its segment's latest expiry. Returns the
    /// segment's generation (a CAS unique not stored explicitly derives from it).
    pub(super) fn write_item(
        &self,
        r: Reservation,
        header: &ItemHeader,
        cas: Option<u64>,
        key: &[u8],
        value: [&[u8]; 2],
    ) -> u64 {
        debug_assert_eq!(header.size(), r.size, "the space reserved is the item's");
        let map = &self.region.map;
        let mut at = self.region.layout.segment_offset(r.segment) + r.offset;
        map.write(at, &header.encode());
        at += ITEM_HEADER_BYTES;
        if let Some(cas) = cas {
            map.write(at, &cas.to_le_bytes());
            at += ITEM_CAS_BYTES;
        }
        if let Some(ext) = header.encode_ext() {
            map.write(at, &ext);
            at += ext.len();
        }
        for part in [key, value[0], value[1]] {
            map.write(at, part);
            at += part.len();
        }
        let m = self.region.meta(r.segment);
        // While a segment is open its latest expiry only grows (from the reservation on, which
        // follows its opening): one already as late needs no read-modify-write. Either way, the
        // release of the reservation (`in_flight`) publishes a latest expiry at least this one
        // to whoever then sees the segment idle.
        let expiry = never_if_zero(header.expiry);
        if m.max_expiry.load(Ordering::Acquire) < expiry {
            m.max_expiry.fetch_max(expiry, Ordering::AcqRel);
        }
        m.generation.load(Ordering::Relaxed)
    }

    pub(super) fn write_filler(&self, segment: usize, offset: usize, size: usize) {
        let at = self.region.layout.segment_offset(segment) + offset;
        for (part, word) in fillers(size) {
            self.region.map.write(at + part, &word.to_le_bytes());
        }
    }

    /// Reserves `size` bytes in the active segment of time class `class`, opening a new
    /// segment (and evicting, if need be) when it is full.
    pub(super) fn reserve(&self, class: usize, size: usize) -> Result<Reservation, OpError> {
        loop {
            let seen = self.active[class].load(Ordering::Acquire);
            if seen != NO_SEGMENT {
                if let Some(r) = self.try_reserve(seen as usize, size) {
                    return Ok(r);
                }
            }
            let mut pool = self.pool();
            if self.active[class].load(Ordering::Acquire) != seen {
                continue; // another thread already rotated
            }
            if seen != NO_SEGMENT {
                self.active[class].store(NO_SEGMENT, Ordering::Release);
                self.retire(&mut pool, class, seen as usize);
            }
            let s = self.take_free(&mut pool)?;
            self.open_segment(s);
            self.active[class].store(s as u32, Ordering::Release);
        }
    }

    /// Bump-allocates in segment `s`. The in-flight count is raised first, so an evictor that
    /// sees it at zero after sealing knows no reservation can still succeed.
    #[inline(always)]
    pub(super) fn try_reserve(&self, s: usize, size: usize) -> Option<Reservation> {
        let m = self.region.meta(s);
        m.in_flight.fetch_add(1, Ordering::SeqCst);
        let offset = m.write_offset.fetch_add(size as u64, Ordering::SeqCst);
        let end = self.region.layout.segment_bytes as u64;
        if offset + size as u64 <= end {
            return Some(Reservation { segment: s, offset: offset as usize, size });
        }
        if offset < end {
            // This reservation straddles the end: fill the tail so the segment stays walkable.
            self.write_filler(s, offset as usize, (end - offset) as usize);
        }
        self.release(s);
        None
    }

    #[inline]
    pub(super) fn release(&self, s: usize) {
        self.region.meta(s).in_flight.fetch_sub(1, Ordering::Release);
    }

    pub(super) fn open_segment(&self, s: usize) {
        let m = self.region.meta(s);
        let gen = self.region.header().next_segment_gen.fetch_add(1, Ordering::AcqRel);
        m.generation.store(gen, Ordering::Release);
        self.stamp_opened(s, gen);
        m.live_items.store(0, Ordering::Relaxed);
        m.live_bytes.store(0, Ordering::Relaxed);
        m.max_expiry.store(0, Ordering::Relaxed);
        m.walkable.store(1, Ordering::Relaxed);
        m.state.store(state::OPEN, Ordering::Release);
        m.write_offset.store(0, Ordering::SeqCst);
    }

    /// Stops appends to `s`; the unused tail becomes a filler. Pool lock held.
    pub(super) fn seal(&self, s: usize) {
        let m = self.region.meta(s);
        let filled = m.write_offset.swap(SEALED_OFFSET, Ordering::SeqCst);
        let end = self.region.layout.segment_bytes as u64;
        if filled < end && filled.is_multiple_of(8) {
            self.write_filler(s, filled as usize, (end - filled) as usize);
        } else if filled < end {
            // Only a damaged segment table gets here: find its items through the index.
            m.walkable.store(0, Ordering::Relaxed);
        }
        m.state.store(state::SEALED, Ordering::Release);
        self.stamp_segment(s); // its last write, for `lru`
    }

    /// A free segment: from the free list, else by reclaiming dead segments, else by evicting
    /// the segment the policy picks (`fifo`: the oldest, with a second chance for items read
    /// since written; `lru`: the least recently used, whole).
    pub(super) fn take_free(&self, pool: &mut Pool) -> Result<usize, OpError> {
        loop {
            if let Some(s) = pool.free.pop() {
                return Ok(s);
            }
            if self.reclaim_dead(pool, 0) > 0 {
                continue;
            }
            if !self.evict {
                return Err(OpError::OutOfMemory);
            }
            let victim = self.take_victim(pool).ok_or(OpError::OutOfMemory)?;
            let budget = if pool.retained.is_some() { self.region.layout.segment_bytes / 2 } else { 0 };
            self.evict(pool, victim, budget);
            self.region.header().segments_evicted.fetch_add(1, Ordering::Relaxed);
            let second_chances = self.eviction() == Eviction::FifoSecondChance;
            if second_chances && pool.retained.is_none() && pool.fifo.len() >= 2 {
                if let Some(r) = pool.free.pop() {
                    self.open_segment(r);
                    pool.retained = Some(r);
                }
            }
        }
    }

    /// When every segment is open (a small region with many time classes), seal the oldest.
    pub(super) fn seal_an_open_segment(&self, pool: &mut Pool) -> Option<usize> {
        // A temporary segment is never evicted (`classes.rs`).
        let oldest_active = (0..TimeClasses::TEMPORARY)
            .filter_map(|c| {
                let s = self.active[c].load(Ordering::Acquire);
                (s != NO_SEGMENT)
                    .then(|| (self.region.meta(s as usize).generation.load(Ordering::Relaxed), c))
            })
            .min();
        let s = match oldest_active {
            Some((_, c)) => self.active[c].swap(NO_SEGMENT, Ordering::AcqRel) as usize,
            None => pool.retained.take()?,
        };
        self.seal(s);
        Some(s)
    }

    /// Seals every open segment so that all items written so far fall below the new flush
    /// generation. Pool lock held.
    pub(super) fn flush_now(&self, pool: &mut Pool) {
        let h = self.region.header();
        h.flush_at.store(0, Ordering::Release);
        pool.flushed_at = h.clock.load(Ordering::Acquire);
        self.seal_open(pool);
        h.flush_gen.store(h.next_segment_gen.load(Ordering::Acquire), Ordering::Release);
    }

    /// Seals every open segment (and the retained one): whatever is written next goes to
    /// segments of a generation not given yet. Pool lock held.
    pub(super) fn seal_open(&self, pool: &mut Pool) {
        for c in 0..self.active.len() {
            let s = self.active[c].swap(NO_SEGMENT, Ordering::AcqRel);
            if s != NO_SEGMENT {
                self.retire(pool, c, s as usize);
            }
        }
        if let Some(r) = pool.retained.take() {
            self.seal(r);
            pool.fifo.push_back(r);
        }
    }

    /// Reclaims, whole, every sealed segment whose items are all dead: flushed, expired (by the
    /// segment's latest expiry, without looking at items one by one), or deleted. Returns how
    /// many segments were freed. Those dead by flush or expiry go only once they have been
    /// dead for `grace` seconds.
    pub(super) fn reclaim_dead(&self, pool: &mut Pool, grace: u32) -> usize {
        let h = self.region.header();
        let now = h.clock.load(Ordering::Acquire);
        let flush_gen = if pool.flushed_at.saturating_add(grace) <= now {
            h.flush_gen.load(Ordering::Acquire)
        } else {
            0
        };
        let is_dead = |s: &usize| {
            let m: &SegmentMeta = self.region.meta(*s);
            // In-flight first: once it reads 0, every reservation made before the seal has
            // published its expiry and live count (and no new one can succeed), so they are
            // current; read before it, they may miss an item being written right now.
            let idle = m.in_flight.load(Ordering::Acquire) == 0;
            let max_expiry = m.max_expiry.load(Ordering::Acquire);
            m.generation.load(Ordering::Acquire) < flush_gen
                || (idle && max_expiry != NEVER && max_expiry.saturating_add(grace) <= now)
                || (idle && m.live_items.load(Ordering::Acquire) == 0)
        };
        let (mut dead, alive): (Vec<usize>, Vec<usize>) = pool.fifo.drain(..).partition(is_dead);
        pool.fifo.extend(alive);
        let (temporary, alive): (Vec<usize>, Vec<usize>) = pool.temporary.drain(..).partition(is_dead);
        pool.temporary.extend(alive);
        dead.extend(temporary);
        for &s in &dead {
            self.evict(pool, s, 0);
            h.segments_expired.fetch_add(1, Ordering::Relaxed);
        }
        dead.len()
    }

    /// Empties sealed segment `s` and frees it. Live items read since written are copied to
    /// the retained segment while `budget` bytes last; the rest leave the index.
    pub(super) fn evict(&self, pool: &mut Pool, s: usize, mut budget: usize) {
        let l = &self.region.layout;
        let m = self.region.meta(s);
        m.state.store(state::EVICTING, Ordering::Release);
        let mut spins = 0;
        while m.in_flight.load(Ordering::Acquire) != 0 {
            backoff(&mut spins);
        }
        let mut walk = m.walkable.load(Ordering::Acquire) != 0;
        if walk {
            let base = l.segment_offset(s);
            let mut offset = 0;
            let mut key = [0u8; MAX_KEY_LEN];
            while offset + ITEM_HEADER_BYTES <= l.segment_bytes {
                let mut raw = [0u8; ITEM_HEADER_BYTES];
                self.region.map.read(base + offset, &mut raw);
                if let Some(size) = filler_size(u32::from_le_bytes(raw[..4].try_into().unwrap())) {
                    if size == 0 {
                        break; // never written: nothing beyond
                    }
                    offset += size;
                    continue;
                }
                let Some(header) = self.region.extended(ItemHeader::decode(&raw), offset, base + offset)
                else {
                    walk = false; // damaged: find the rest of its items through the index
                    break;
                };
                let size = header.size();
                if offset + size > l.segment_bytes {
                    break;
                }
                if header.key_len > MAX_KEY_LEN {
                    walk = false; // damaged: find the rest of its items through the index
                    break;
                }
                let key = &mut key[..header.key_len];
                self.region.map.read(base + offset + header.key_offset(), key);
                let hash = self.region.hash(key);
                let _locks = self.lock_buckets(&hash);
                for &b in hash.candidates() {
                    for i in 0..BUCKET_SLOTS {
                        let word = self.region.bucket(b).slots[i].load(Ordering::Relaxed);
                        if self.region.layout.slot(word).is_some_and(|x| x.segment == s && x.offset == offset)
                        {
                            self.evict_slot(pool, b, i, word, &mut budget);
                        }
                    }
                }
                offset += size;
            }
        }
        if walk && m.live_items.load(Ordering::Acquire) != 0 {
            walk = false; // the walk missed items (a damaged segment): scan the index for them
        }
        if !walk {
            // Possibly torn by a crash: find its items through the index instead.
            for b in 0..l.bucket_count {
                let version = &self.region.bucket(b).version;
                let locked = write_lock(version);
                for i in 0..BUCKET_SLOTS {
                    let word = self.region.bucket(b).slots[i].load(Ordering::Relaxed);
                    if self.region.layout.slot(word).is_some_and(|x| x.segment == s) {
                        self.evict_slot(pool, b, i, word, &mut budget);
                    }
                }
                write_unlock(version, locked);
            }
        }
        m.live_items.store(0, Ordering::Relaxed);
        m.live_bytes.store(0, Ordering::Relaxed);
        m.state.store(state::FREE, Ordering::Release);
        pool.free.push(s);
    }

    /// Drops, or gives a second chance to, the item in slot `i` of bucket `b`. Lock held.
    pub(super) fn evict_slot(&self, pool: &mut Pool, b: usize, i: usize, word: u64, budget: &mut usize) {
        let slot = self.region.layout.slot(word).expect("caller checked");
        let live = self.live_header(slot);
        if let Some(header) =
            live.filter(|hd| word & SLOT_ACCESSED != 0 && hd.size() + ITEM_CAS_BYTES <= *budget)
        {
            if let Some(new_word) = self.copy_forward(pool, slot, header) {
                *budget -= header.size() + ITEM_CAS_BYTES;
                self.unlink(b, i);
                self.region.bucket(b).slots[i].store(new_word, Ordering::Release);
                return;
            }
        }
        if live.is_some() {
            self.tell_eviction(b, i);
        }
        self.count_drop(word, live.is_some());
        self.drop_slot(b, i);
    }

    /// Copies an item into the retained segment, keeping its CAS unique (stored explicitly,
    /// since the copy's location differs). Returns the new slot word (not marked read).
    pub(super) fn copy_forward(&self, pool: &mut Pool, slot: Slot, header: ItemHeader) -> Option<u64> {
        let retained = pool.retained?;
        let moved = ItemHeader { explicit_cas: true, ..header };
        let Some(r) = self.try_reserve(retained, moved.size()) else {
            self.seal(retained);
            pool.fifo.push_back(retained);
            pool.retained = None;
            return None;
        };
        let mut body = vec![0u8; header.key_len + header.value_len];
        self.region.map.read(self.region.item_offset(slot) + header.key_offset(), &mut body);
        let segment_gen = self.region.meta(slot.segment).generation.load(Ordering::Relaxed);
        let cas = self.region.item_cas(slot, &header, segment_gen);
        let (key, value) = body.split_at(header.key_len);
        self.write_item(r, &moved, Some(cas), key, [value, &[]]);
        self.account(r.segment, r.size);
        self.release(r.segment);
        Some(self.region.layout.slot_word(Slot { segment: r.segment, offset: r.offset, ..slot }))
    }
}
