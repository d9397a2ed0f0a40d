//! What both faces share: the mapping with its validated layout, the key hash, and the
//! optimistic lookup (copy, then validate the bucket version) that readers in other processes
//! and the writer's own `get` both use.

use crate::error::{OpError, RegionError};
use crate::expiry::is_expired;
use crate::layout::{
    Bucket, ItemHeader, Layout, Marks, RawHeader, SegmentMeta, Slot, BUCKET_SLOTS, ITEM_CAS_BYTES,
    ITEM_EXT_LEN_BYTES, ITEM_HEADER_BYTES, MAX_KEY_LEN, SLOT_ACCESSED,
};
use crate::mapping::Mapping;
use crate::seqlock::{backoff, read_begin, read_validate, Patience};
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

/// What a lookup tells about an item that is there and alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemInfo {
    /// The client's 32-bit flags.
    pub flags: u32,
    /// CAS unique.
    pub cas: u64,
    /// Absolute expiry in server Unix seconds; 0 = never.
    pub expiry: u32,
    /// Length of the value.
    pub value_len: usize,
    /// Whether it was read before this lookup (memcached's `ITEM_FETCHED`).
    pub fetched: bool,
    /// Its meta-protocol marks (stale, recache token handed out).
    pub marks: Marks,
    /// Server time of its last write or (coarsely) last read; 0 where unknown (the writer
    /// tracks it in process memory, so readers and a restarted writer do not have it).
    pub last_access: u32,
}

/// The result of a lookup: a hit, or the reason for a miss (servers count them separately).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The item, whose value was copied into the caller's buffer.
    Hit(ItemInfo),
    /// No item under this key.
    Missing,
    /// The item's expiry has passed (by the server's clock).
    Expired,
    /// The item was written before a `flush_all` took effect.
    Flushed,
}

impl Lookup {
    /// The item, if the lookup found a live one.
    pub fn hit(self) -> Option<ItemInfo> {
        match self {
            Lookup::Hit(info) => Some(info),
            _ => None,
        }
    }

    /// The lookup without the read state that reading itself changes, and that readers in
    /// other processes do not all see (`fetched`, `last_access`): what any two lookups of the
    /// same item version agree on.
    pub fn settled(self) -> Lookup {
        match self {
            Lookup::Hit(info) => Lookup::Hit(ItemInfo { fetched: false, last_access: 0, ..info }),
            other => other,
        }
    }
}

/// The region's hash of `key` under the region's `seed` (XXH3-64): its bits name the key's
/// two buckets and its tag, and its top 24 bits are the key's spatial hash for the server's
/// hit-ratio curve (issue 27), so a local reader screens a read for the curve's sample with the
/// hash its probe computed (`shoal_curves::KeyHash::from_raw`).
#[inline]
pub fn key_hash(key: &[u8], seed: u64) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(key, seed)
}

/// The hash of a key: its two candidate buckets and its 16-bit tag. Outside the crate it is
/// opaque, made by [`crate::Writer::hash`] for a caller that does several things with one key.
#[derive(Clone, Copy, Debug)]
pub struct KeyHash {
    pub(crate) buckets: [usize; 2],
    pub(crate) tag: u16,
    /// The whole [`key_hash`].
    pub(crate) raw: u64,
}

impl KeyHash {
    /// The whole [`key_hash`] the buckets and tag came from.
    #[inline]
    pub fn raw(&self) -> u64 {
        self.raw
    }

    /// The distinct candidate buckets (one if both choices coincide).
    #[inline]
    pub fn candidates(&self) -> &[usize] {
        if self.buckets[0] == self.buckets[1] {
            &self.buckets[..1]
        } else {
            &self.buckets
        }
    }
}

/// Where a lookup found a key, and what was there.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Found {
    pub bucket: usize,
    pub slot_index: usize,
    /// The slot word as read (including the accessed bit).
    pub word: u64,
    pub slot: Slot,
    pub segment_gen: u64,
    pub header: ItemHeader,
    pub cas: u64,
    pub marks: Marks,
    /// The slot's access time from the writer's table; 0 for a lookup without one (readers).
    pub last_access: u32,
}

impl Found {
    /// What the index and the item's header tell about it, before judging whether it is alive.
    #[inline]
    pub fn info(&self) -> ItemInfo {
        ItemInfo {
            flags: self.header.flags,
            cas: self.cas,
            expiry: self.header.expiry,
            value_len: self.header.value_len,
            fetched: self.word & SLOT_ACCESSED != 0,
            marks: self.marks,
            last_access: self.last_access,
        }
    }
}

/// The writer's access time per slot (`BUCKET_SLOTS` per bucket), kept in its own memory;
/// a lookup given it reports `last_access`, one without (a reader's) reports 0.
pub(crate) type AccessTimes<'a> = Option<&'a [AtomicU32]>;

/// Where a lookup copies the value of the item it finds. Once the lookup knows the item it
/// asks for the vector to append the value to, copies it there, and then validates; if the
/// item changed under it, it tries again and asks anew: each call to [`ValueSink::append_to`]
/// replaces what the earlier ones were given. A sink that writes straight into an answer (the
/// server's `VALUE` blocks, meta's `VA` lines) saves copying every value twice.
pub trait ValueSink {
    /// The vector the value of `item` (`item.value_len` bytes) is appended to. `item` is what
    /// the index and the item's header say before the lookup judges it: the lookup may still
    /// report a miss (expired, flushed, a lease record, or gone when it retried), in which case
    /// the caller takes back whatever the sink wrote.
    fn append_to(&mut self, item: &ItemInfo) -> &mut Vec<u8>;

    /// Takes the copy in hand instead, for a sink that keeps each value in a buffer of its own
    /// (a Python `bytes` object): `copy` fills a buffer of exactly `item.value_len` bytes with
    /// the value, unvalidated, like [`ValueSink::append_to`]'s vector. `false` (the default):
    /// the value is appended to [`ValueSink::append_to`]'s vector instead.
    fn fill(&mut self, _item: &ItemInfo, _copy: &mut dyn FnMut(&mut [u8])) -> bool {
        false
    }
}

/// The plain sink: the vector holds the value and nothing else.
impl ValueSink for Vec<u8> {
    fn append_to(&mut self, _item: &ItemInfo) -> &mut Vec<u8> {
        self.clear();
        self
    }
}

/// [`Region::bucket`]'s or [`Region::meta`]'s failure, out of line: the check inlined into
/// every lookup is a compare and a branch, without a store of the message's argument.
#[cold]
#[inline(never)]
fn outside(what: &str, i: usize, count: usize) -> ! {
    panic!("{what} {i} outside the region's {count}")
}

/// A mapped region with its validated layout.
pub(crate) struct Region {
    pub map: Mapping,
    pub layout: Layout,
}

impl Region {
    /// Maps `file` (of `len` bytes) and validates its header. `exact`: the region must fill
    /// the file (regular files); otherwise it may be smaller (devices).
    pub fn attach(
        file: File,
        len: usize,
        writable: bool,
        path: &Path,
        exact: bool,
    ) -> Result<Region, RegionError> {
        if len < crate::layout::HEADER_BYTES {
            return Err(RegionError::BadMagic);
        }
        let map = Mapping::map(file, len, writable).map_err(|source| RegionError::Io {
            path: path.to_owned(),
            action: "map",
            source,
        })?;
        // SAFETY: offset 0 holds the header (len ≥ HEADER_BYTES checked); RawHeader is
        // repr(C) and made only of atomics.
        let layout = Layout::load(unsafe { map.atomics_at::<RawHeader>(0) }, len, exact)?;
        Ok(Region { map, layout })
    }

    /// The header. Every lookup reads it (the clock, the flush and hold generations), so it
    /// is not bounds-checked again on each read: `attach` checked it once.
    #[inline]
    pub fn header(&self) -> &RawHeader {
        // SAFETY: `attach` mapped at least HEADER_BYTES (≥ the size of RawHeader, asserted in
        // layout.rs) from a page-aligned base, so offset 0 holds the whole header, aligned;
        // RawHeader is repr(C) and made only of atomics.
        unsafe { self.map.atomics_unchecked(0) }
    }

    /// Bucket `b`; panics unless `b < bucket_count`. One comparison rather than
    /// [`Mapping::atomics_at`]'s alignment and bounds checks: a lookup takes two or more.
    #[inline]
    pub fn bucket(&self, b: usize) -> &Bucket {
        if b >= self.layout.bucket_count {
            outside("bucket", b, self.layout.bucket_count);
        }
        // SAFETY: the validated layout puts bucket_count 64-byte buckets inside the mapping at
        // index_offset (HEADER_BYTES, so 64-aligned from the page-aligned base), and b is
        // below bucket_count; Bucket is repr(C) and made only of atomics.
        unsafe { self.map.atomics_unchecked(self.layout.bucket_offset(b)) }
    }

    /// Segment `s`'s table entry; panics unless `s < segment_count`.
    #[inline]
    pub fn meta(&self, s: usize) -> &SegmentMeta {
        if s >= self.layout.segment_count {
            outside("segment", s, self.layout.segment_count);
        }
        // SAFETY: the validated layout puts segment_count 64-byte entries inside the mapping
        // at table_offset (a multiple of 64), and s is below segment_count; SegmentMeta is
        // repr(C) and made only of atomics.
        unsafe { self.map.atomics_unchecked(self.layout.meta_offset(s)) }
    }

    /// Hashes a key with the region's seed.
    #[inline]
    pub fn hash(&self, key: &[u8]) -> KeyHash {
        let h = key_hash(key, self.layout.hash_seed);
        let n = self.layout.bucket_count as u128;
        let first = ((h as u128 * n) >> 64) as usize;
        let mixed = h.rotate_left(32).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let second = ((mixed as u128 * n) >> 64) as usize;
        KeyHash { buckets: [first, second], tag: h as u16, raw: h }
    }

    /// Starts loading the index buckets `hash` names, so that the lookups of a batch (a
    /// multiget) take their cache misses together rather than one after another.
    #[inline]
    pub fn prefetch_buckets(&self, hash: &KeyHash) {
        for &b in hash.candidates() {
            self.map.prefetch(self.layout.bucket_offset(b));
        }
    }

    /// Starts loading the second of `hash`'s candidate buckets, if it has two, for a lookup
    /// about to scan the first: the scan of the first overlaps the second's memory miss.
    /// The first is not prefetched: the scan loads it at once, and the prefetch only cost time
    /// (a local 100-key multiget with its index in cache: 7.3 µs prefetching both buckets, 7.2
    /// µs the second only, 7.0 µs neither; the second is kept for an index out of cache).
    #[inline]
    pub fn prefetch_second(&self, hash: &KeyHash) {
        if let [_, second] = hash.candidates() {
            self.map.prefetch(self.layout.bucket_offset(*second));
        }
    }

    /// Starts loading the first bytes of the first item `hash`'s buckets point to under its
    /// tag (best after [`Region::prefetch_buckets`] had time to bring the buckets in). The slots
    /// are read without validation: a stale one costs only a wasted prefetch.
    #[inline]
    pub fn prefetch_items(&self, hash: &KeyHash) {
        // The first slot under the tag is almost surely the key's (a 16-bit tag), so the
        // search stops there: the rest of the slots are screened, not decoded.
        for &b in hash.candidates() {
            for cell in &self.bucket(b).slots {
                let word = cell.load(Ordering::Relaxed);
                if !Slot::matches(word, hash.tag) {
                    continue;
                }
                match self.layout.slot(word) {
                    Some(slot) if slot.segment < self.layout.segment_count => {
                        let at = self.item_offset(slot);
                        self.map.prefetch(at);
                        self.map.prefetch(at + 64);
                        return;
                    }
                    _ => {}
                }
            }
        }
    }

    /// Reads the item a slot points to, if it is a well-formed item under `key`: its header,
    /// segment generation and CAS. Every offset is bounds-checked against the layout, so a
    /// stale slot or a corrupt region yields `None`, never an out-of-bounds read. Always
    /// inlined, as is [`Region::item_header`]: each was a call whose result was copied out
    /// (docs/BENCHMARKS.md, #29's sixth round).
    #[inline(always)]
    pub fn read_item(&self, slot: Slot, key: &[u8]) -> Option<(ItemHeader, u64, u64)> {
        let header = self.item_header(slot).filter(|h| h.key_len == key.len())?;
        // SAFETY: `item_header` accepted the item only if all of it (header, key and value)
        // lies inside its segment, and the validated layout puts every segment inside the
        // mapping.
        if !unsafe { self.map.equals_unchecked(self.item_offset(slot) + header.key_offset(), key) } {
            return None;
        }
        // SAFETY: `item_header` accepted only a segment below `segment_count`, whose table
        // entry the validated layout puts inside the mapping, 64-aligned (`table_offset` is);
        // SegmentMeta is repr(C) and made only of atomics.
        let meta: &SegmentMeta = unsafe { self.map.atomics_unchecked(self.layout.meta_offset(slot.segment)) };
        let segment_gen = meta.generation.load(Ordering::Relaxed);
        let cas = self.item_cas(slot, &header, segment_gen);
        Some((header, segment_gen, cas))
    }

    /// Copies the value of an item [`Region::read_item`] accepted into the vector `sink`
    /// gives for it (bounds: the header was checked to fit the segment).
    #[inline]
    fn copy_value<S: ValueSink + ?Sized>(&self, found: &Found, sink: &mut S) {
        let h = &found.header;
        let value_at = self.item_offset(found.slot) + h.key_offset() + h.key_len;
        let info = found.info();
        // A sink's buffer longer than the value gets the value's bytes only: never a read past it.
        // SAFETY (both copies): `read_item` accepted the item only if all of it, the value's
        // `value_len` bytes included, lies inside its segment, inside the mapping.
        let fill = &mut |buf: &mut [u8]| {
            let n = buf.len().min(h.value_len);
            unsafe { self.map.read_unchecked(value_at, &mut buf[..n]) };
        };
        if !sink.fill(&info, fill) {
            unsafe { self.map.read_append_unchecked(value_at, h.value_len, sink.append_to(&info)) };
        }
    }

    /// Offset in the region of the item a slot points to (the slot must be in bounds).
    #[inline]
    pub fn item_offset(&self, slot: Slot) -> usize {
        self.layout.segment_offset(slot.segment) + slot.offset
    }

    /// The header of the item a slot points to, if it is well-formed (a key of 1 to `MAX_KEY_LEN` bytes)
    /// and lies inside its segment. Everything is bounds-checked, so a stale slot or a corrupt
    /// region yields `None`, never an out-of-bounds read.
    #[inline(always)]
    pub fn item_header(&self, slot: Slot) -> Option<ItemHeader> {
        let l = &self.layout;
        if slot.segment >= l.segment_count
            || slot.offset + ITEM_HEADER_BYTES > l.segment_bytes
            || !slot.offset.is_multiple_of(8)
        {
            return None;
        }
        // Items start 8-aligned (slot offsets count 8-byte units; the layout check keeps
        // segments 8-aligned): the header is two aligned loads, not a copy of any alignment.
        let at = self.item_offset(slot);
        let mut raw = [0u8; ITEM_HEADER_BYTES];
        // SAFETY: `at` is 8-aligned (`segments_offset` and `segment_bytes` are multiples of 8
        // in a validated layout, and the offset was just checked) and its 12 header bytes lie
        // inside segment `slot.segment` (checked above), which the validated layout puts
        // inside the mapping (`segments_offset + segment_count * segment_bytes <=
        // region_bytes <= the mapping's size`).
        let (low, high) = unsafe {
            (
                self.map.u64_unchecked(at).load(Ordering::Relaxed),
                self.map.u32_unchecked(at + 8).load(Ordering::Relaxed),
            )
        };
        raw[..8].copy_from_slice(&low.to_le_bytes());
        raw[8..].copy_from_slice(&high.to_le_bytes());
        let h = self.extended(ItemHeader::decode(&raw), slot.offset, at)?;
        // The item's end before its padding: the padded end (`h.size()`) fits the segment
        // exactly when this does, both the offset and `segment_bytes` being multiples of 8,
        // and this costs no rounding.
        let end = slot.offset + h.key_offset() + h.key_len + h.value_len;
        (h.key_len > 0 && h.key_len <= MAX_KEY_LEN && end <= l.segment_bytes).then_some(h)
    }

    /// `h`, decoded from the item at region offset `at` (`offset` into its segment), with the
    /// value length of its extension if it has one; `None` if the extension would lie past
    /// the segment or holds a length that needs none (a stale slot or a damaged item).
    #[inline]
    pub fn extended(&self, h: ItemHeader, offset: usize, at: usize) -> Option<ItemHeader> {
        if !h.is_extended() {
            return Some(h);
        }
        if offset + h.key_offset() > self.layout.segment_bytes {
            return None;
        }
        let mut ext = [0u8; ITEM_EXT_LEN_BYTES];
        self.map.read(at + h.ext_offset(), &mut ext);
        h.extend(ext)
    }

    /// The CAS unique of an item: stored explicitly if it was relocated, else derived from
    /// where it is (its segment's generation and its offset).
    #[inline]
    pub fn item_cas(&self, slot: Slot, header: &ItemHeader, segment_gen: u64) -> u64 {
        if header.explicit_cas {
            let mut b = [0u8; ITEM_CAS_BYTES];
            self.map.read(self.item_offset(slot) + ITEM_HEADER_BYTES, &mut b);
            u64::from_le_bytes(b)
        } else {
            self.layout.derived_cas(segment_gen, slot.offset)
        }
    }

    /// Scans one bucket for `key` without validating; the caller validates or holds the lock.
    /// Copies the value into `value` if given; reports the access time if given `access`.
    /// Always inlined, as are [`Region::find`] and [`Region::get_hashed`]: the [`Found`] it
    /// returns is then kept where it is used, not copied out through each layer (about 140
    /// instructions less a lookup: docs/BENCHMARKS.md, #29's fifth round).
    #[inline(always)]
    pub fn scan_bucket<S: ValueSink + ?Sized>(
        &self,
        b: usize,
        key: &[u8],
        tag: u16,
        value: Option<&mut S>,
        access: AccessTimes<'_>,
    ) -> Option<Found> {
        let bucket = self.bucket(b);
        let marks = bucket.marks.load(Ordering::Relaxed);
        for (slot_index, cell) in bucket.slots.iter().enumerate() {
            let word = cell.load(Ordering::Relaxed);
            if !Slot::matches(word, tag) {
                continue;
            }
            let Some(slot) = self.layout.slot(word) else { continue };
            if let Some((header, segment_gen, cas)) = self.read_item(slot, key) {
                let marks = Marks::of(marks, slot_index);
                let last_access =
                    access.map_or(0, |a| a[b * BUCKET_SLOTS + slot_index].load(Ordering::Relaxed));
                let found =
                    Found { bucket: b, slot_index, word, slot, segment_gen, header, cas, marks, last_access };
                if let Some(sink) = value {
                    self.copy_value(&found, sink);
                }
                return Some(found);
            }
        }
        None
    }

    /// Finds `key` optimistically: each candidate bucket is copied and then validated against
    /// its version, retrying while writers race. Copies the value into `value` if given, and
    /// reports the access time if given `access`.
    ///
    /// A writer may move an item from its second bucket to its first (to make room). A miss
    /// therefore re-checks that the first bucket did not change while the second was scanned;
    /// otherwise an item moving between the two scans could be missed.
    #[inline(always)]
    pub fn find<S: ValueSink + ?Sized>(
        &self,
        key: &[u8],
        hash: &KeyHash,
        mut value: Option<&mut S>,
        access: AccessTimes<'_>,
    ) -> Result<Option<Found>, OpError> {
        let mut patience = Patience::default();
        'retry: loop {
            let mut first = None;
            for &b in hash.candidates() {
                let version = &self.bucket(b).version;
                let mut spins = 0;
                let begun = loop {
                    if patience.exhausted() {
                        return Err(OpError::Busy);
                    }
                    let Some(begun) = read_begin(version) else {
                        backoff(&mut spins);
                        continue;
                    };
                    let found = self.scan_bucket(b, key, hash.tag, value.as_deref_mut(), access);
                    if read_validate(version, begun) {
                        if found.is_some() {
                            return Ok(found);
                        }
                        break begun;
                    }
                };
                first.get_or_insert((version, begun));
            }
            if let Some((version, begun)) = first {
                if !read_validate(version, begun) {
                    continue 'retry;
                }
            }
            return Ok(None);
        }
    }

    /// Whether items in a segment of generation `segment_gen` are under a rejoin hold.
    #[inline]
    pub fn held(&self, segment_gen: u64) -> bool {
        let h = self.header();
        segment_gen < h.hold_gen.load(Ordering::Acquire)
            && h.clock.load(Ordering::Acquire) < h.hold_until.load(Ordering::Acquire)
    }

    /// Judges a found item by the server clock, flush generation and rejoin hold in the
    /// header (a held item reads as flushed).
    #[inline]
    pub fn judge(&self, found: &Found) -> Lookup {
        let h = self.header();
        if found.segment_gen < h.flush_gen.load(Ordering::Acquire) || self.held(found.segment_gen) {
            Lookup::Flushed
        } else if is_expired(found.header.expiry, h.clock.load(Ordering::Acquire)) {
            Lookup::Expired
        } else {
            Lookup::Hit(found.info())
        }
    }

    /// Looks `key` up and judges it; the value lands in `value` on a hit.
    ///
    /// The second candidate bucket starts loading before the first is scanned, so a key in its
    /// second bucket costs one memory miss for the index, not two in a row.
    #[inline]
    pub fn get<S: ValueSink + ?Sized>(
        &self,
        key: &[u8],
        value: &mut S,
    ) -> Result<(Lookup, Option<Found>), OpError> {
        let hash = self.hash(key);
        self.prefetch_second(&hash);
        self.get_hashed(key, &hash, value, None)
    }

    /// [`Region::get`] with the key's hash already computed (`hash` must be `self.hash(key)`),
    /// for a caller that has started loading what the lookup will touch itself, and may have
    /// the slots' access times.
    #[inline(always)]
    pub fn get_hashed<S: ValueSink + ?Sized>(
        &self,
        key: &[u8],
        hash: &KeyHash,
        value: &mut S,
        access: AccessTimes<'_>,
    ) -> Result<(Lookup, Option<Found>), OpError> {
        crate::key::check_key(key)?;
        Ok(match self.find(key, hash, Some(value), access)? {
            // Lease records are for read-modify-writes only: a plain read misses them.
            Some(found) => match self.judge(&found) {
                Lookup::Hit(info) if info.marks.hidden => (Lookup::Missing, None),
                lookup => (lookup, Some(found)),
            },
            None => (Lookup::Missing, None),
        })
    }
}
