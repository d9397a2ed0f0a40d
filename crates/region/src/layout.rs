//! The byte layout of a region: header, hash index, segment table, segments; the encoding of
//! index slots and item headers. Bit layouts are pinned by compile-time assertions.
//!
//! ```text
//! offset 0        header (4 KiB)           magic, version, geometry, hash seed, cookie,
//!                                          server clock, flush epoch, generation, counters
//! index_offset    buckets[bucket_count]    64 B each: version (seqlock) + 7 slots of 8 B
//! table_offset    segment_meta[segments]   64 B each: generation, state, fill, live counts
//! segments_offset segments[segments]       items appended back to back, 8-byte aligned
//! ```
//!
//! Nothing in the region is a pointer: slots name a segment and an offset inside it.

use crate::error::RegionError;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// First 8 bytes of every region file.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SHOALRGN");
/// Newest version of the layout described in this file: version 2 and items past 8 MiB (an
/// extended value length, and slots whose segment/offset split follows the segment size). A
/// region is written as version 3 only if it needs it ([`Layout::version`]); readers accept
/// both and refuse any other, so readers built before version 3 still read regions of small
/// items, and refuse a region of large ones with a clear error rather than misread it.
pub const LAYOUT_VERSION: u32 = 3;
/// The layout of regions whose items all fit [`SMALL_ITEM_LIMIT`]: the same bytes as before
/// large items existed (no item in it has an extended length, and its segments are short
/// enough for the default slot split).
pub const SMALL_ITEMS_LAYOUT_VERSION: u32 = 2;
/// Hash function identifier stored in the header: XXH3-64 with the header's seed.
pub const HASH_XXH3_64: u32 = 1;

/// Bytes reserved for the header.
pub const HEADER_BYTES: usize = 4096;
/// Bytes of one index bucket: a 4-byte version, 4 reserved bytes, and [`BUCKET_SLOTS`] slots.
pub const BUCKET_BYTES: usize = 64;
/// Item slots per bucket.
pub const BUCKET_SLOTS: usize = 7;
/// Bytes of one segment table entry.
pub const SEGMENT_META_BYTES: usize = 64;
/// Default segment size.
pub const DEFAULT_SEGMENT_BYTES: usize = 1 << 20;
/// Longest key memcached accepts: the text protocol's (`shoal_proto::KEY_MAX`). Only the
/// length is shared: the region stores any bytes (meta's base64 keys are binary), so the
/// protocol's rule against spaces and control bytes is not the region's.
pub const MAX_KEY_LEN: usize = shoal_proto::KEY_MAX;
/// Bytes of an item header: length word, expiry, client flags.
pub const ITEM_HEADER_BYTES: usize = 12;
/// Bytes of the optional explicit CAS that follows the header of a relocated item.
pub const ITEM_CAS_BYTES: usize = 8;
/// Largest item size a region may be configured for: memcached's ceiling for `-I`, 1 GiB.
/// Values of [`VALUE_LEN_ESCAPE`] bytes or more carry an extended length.
pub const MAX_ITEM_LIMIT: usize = 1 << 30;
/// Largest item size of a [`SMALL_ITEMS_LAYOUT_VERSION`] region: no value reaches the escape.
pub const SMALL_ITEM_LIMIT: usize = 8 << 20;
/// Smallest maximum item size: room for the longest key and a little value.
pub const MIN_ITEM_LIMIT: usize = 512;
/// Index load the bucket count is planned for: two-choice placement keeps buckets from
/// overflowing well past this, so the planned item count fits with room to spare.
pub const PLANNED_BUCKET_LOAD: f64 = 0.9;

// ---------------------------------------------------------------------------------------------
// Header

/// The header at offset 0. Every field is atomic because other processes map it; the
/// geometry fields are written once, before the magic, and never change afterwards.
#[repr(C)]
pub(crate) struct RawHeader {
    pub magic: AtomicU64,
    pub layout_version: AtomicU32,
    pub hash_id: AtomicU32,
    pub region_bytes: AtomicU64,
    pub segment_bytes: AtomicU32,
    pub segment_count: AtomicU32,
    pub bucket_count: AtomicU64,
    pub index_offset: AtomicU64,
    pub table_offset: AtomicU64,
    pub segments_offset: AtomicU64,
    pub hash_seed: AtomicU64,
    pub cookie: AtomicU64,
    pub max_item_bytes: AtomicU32,
    /// Server clock: Unix seconds as the server sees them (tests may shift it).
    pub clock: AtomicU32,
    /// Bumped each time a writer attaches, so clients notice restarts.
    pub generation: AtomicU64,
    /// Items in segments of generation below this are flushed.
    pub flush_gen: AtomicU64,
    /// Server time at which a delayed `flush_all` takes effect; 0 if none is pending.
    pub flush_at: AtomicU32,
    /// 1 after a clean detach, 0 while a writer is attached (so 0 at attach means a crash).
    pub clean: AtomicU32,
    /// Generation the next opened segment receives.
    pub next_segment_gen: AtomicU64,
    pub writer_pid: AtomicU32,
    pub created_unix: AtomicU32,
    pub evictions: AtomicU64,
    pub evicted_unfetched: AtomicU64,
    pub expired_unfetched: AtomicU64,
    pub reclaimed: AtomicU64,
    pub total_items: AtomicU64,
    pub segments_evicted: AtomicU64,
    pub segments_expired: AtomicU64,
    pub index_evictions: AtomicU64,
    /// A rejoin hold ([`crate::Writer::hold`]): items in segments of generation below this,
    /// written before the server restarted, read as flushed while the clock is below
    /// `hold_until`. Both 0 in a region no hold was ever set on (and in older files).
    pub hold_gen: AtomicU64,
    pub hold_until: AtomicU32,
    /// Retired: the curve's threshold for an unseeded XXH3-64 of the key, which clients built
    /// before the sample was taken from the index probe's hash screen by. A server clears it
    /// when it attaches and never sets it, so such a client reports no sampled reads (they
    /// still count as references through its hints counters) rather than reads the server
    /// would take for another key's.
    pub curve_threshold: AtomicU32,
    /// The sampling threshold of the region's hit-ratio curve (issue 27): a local reader
    /// reports a read to the server's curve when the top 24 bits of its key's probe hash
    /// ([`crate::key_hash`], XXH3-64 under `hash_seed`, the hash that names its buckets)
    /// fall below it. 0 — no curve, an older server, an older file — reports nothing; the
    /// server sets it (every 100 ms) and clears it when it attaches.
    pub probe_threshold: AtomicU32,
}

/// Byte offset of the cookie, for locality discovery (`shm` answers with it).
pub const COOKIE_OFFSET: usize = std::mem::offset_of!(RawHeader, cookie);

#[cfg(not(loom))]
const _: () = {
    assert!(std::mem::size_of::<RawHeader>() <= HEADER_BYTES);
    assert!(std::mem::offset_of!(RawHeader, magic) == 0);
    assert!(std::mem::offset_of!(RawHeader, layout_version) == 8);
    assert!(COOKIE_OFFSET.is_multiple_of(8));
    assert!(std::mem::size_of::<Bucket>() == BUCKET_BYTES);
    assert!(std::mem::size_of::<SegmentMeta>() == SEGMENT_META_BYTES);
};

/// One index bucket.
#[repr(C, align(64))]
pub(crate) struct Bucket {
    pub version: AtomicU32,
    /// Four bits per slot ([`Marks`]), changed only under the bucket's lock and read within
    /// its version like the slots; a slot's marks move and clear with the slot.
    pub marks: AtomicU32,
    pub slots: [AtomicU64; BUCKET_SLOTS],
}

/// Per-item states of memcached's meta protocol that change without rewriting the item: kept
/// beside the slot (in its bucket), so that they cost no item bytes and readers see them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Marks {
    /// Invalidated (`md … I`, or a stale `ms … I`): served with `X`, until replaced.
    pub stale: bool,
    /// A client was handed the right to recache it (`W`); others see `Z`.
    pub token_sent: bool,
    /// The key was stored in binary form (meta's `b`): answers show it in base64.
    pub binary_key: bool,
    /// A Shoal lease record rather than a cached value: a lease placeholder (`lease-get`
    /// miss), a delete hold-off, or a value kept stale after `delete`. Plain reads (the
    /// server's `get`, clients' shared-memory reads) miss it; only read-modify-writes see it.
    pub hidden: bool,
}

const MARK_BITS: u32 = 4;
const _: () = assert!(BUCKET_SLOTS as u32 * MARK_BITS <= 32);

impl Marks {
    /// The marks of slot `i` in a bucket's marks word.
    #[inline]
    pub(crate) fn of(word: u32, i: usize) -> Marks {
        let bits = word >> (i as u32 * MARK_BITS);
        Marks {
            stale: bits & 1 != 0,
            token_sent: bits & 2 != 0,
            binary_key: bits & 4 != 0,
            hidden: bits & 8 != 0,
        }
    }

    /// Whether an item with these marks refuses `add`: any item does, except a value kept
    /// stale (and hidden) after a delete, which `add` may replace.
    #[inline]
    pub fn refuses_add(self) -> bool {
        !(self.hidden && self.stale)
    }

    /// `word` with slot `i`'s marks replaced by `self`.
    #[inline]
    pub(crate) fn put(self, word: u32, i: usize) -> u32 {
        let shift = i as u32 * MARK_BITS;
        let bits = u32::from(self.stale)
            | u32::from(self.token_sent) << 1
            | u32::from(self.binary_key) << 2
            | u32::from(self.hidden) << 3;
        word & !(0xf << shift) | bits << shift
    }
}

/// One segment table entry.
#[repr(C, align(64))]
pub(crate) struct SegmentMeta {
    /// Generation assigned when the segment was last opened (0: never used). Part of every
    /// CAS value of items in it, and compared against the header's flush generation.
    pub generation: AtomicU64,
    /// Bump pointer for appends; set to [`SEALED_OFFSET`] or more when sealed.
    pub write_offset: AtomicU64,
    /// Sum of the sizes of items in this segment that the index still points to.
    pub live_bytes: AtomicU64,
    pub state: AtomicU32,
    pub live_items: AtomicU32,
    /// Writers holding a reservation in this segment that is not yet published or abandoned.
    pub in_flight: AtomicU32,
    /// Latest expiry of any item written here ([`NEVER`] if one never expires).
    pub max_expiry: AtomicU32,
    /// 0 if the segment was open when a writer crashed: it may hold torn reservations, so it
    /// is unlinked by scanning the index instead of walking its items.
    pub walkable: AtomicU32,
    pub _reserved: [AtomicU32; 3],
}

/// `SegmentMeta::max_expiry` of a segment holding an item that never expires.
pub const NEVER: u32 = u32::MAX;
/// `write_offset` of a sealed segment: every reservation attempt on it fails.
pub const SEALED_OFFSET: u64 = 1 << 62;

/// Segment states.
pub(crate) mod state {
    pub const FREE: u32 = 0;
    pub const OPEN: u32 = 1;
    pub const SEALED: u32 = 2;
    pub const EVICTING: u32 = 3;
}

// ---------------------------------------------------------------------------------------------
// Geometry

/// Where everything is in a region: a local, validated copy of the header's geometry.
/// Every offset used at run time is derived from a `Layout`, never re-read from the region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Total size of the region file in bytes.
    pub region_bytes: usize,
    /// Size of one segment.
    pub segment_bytes: usize,
    /// Number of segments.
    pub segment_count: usize,
    /// Number of index buckets.
    pub bucket_count: usize,
    /// Offset of the first bucket.
    pub index_offset: usize,
    /// Offset of the segment table.
    pub table_offset: usize,
    /// Offset of the first segment.
    pub segments_offset: usize,
    /// Largest item (header, key and value) stored: memcached's `-I`.
    pub max_item_bytes: usize,
    /// Seed of the key hash.
    pub hash_seed: u64,
    /// Random locality cookie.
    pub cookie: u64,
    /// How index slots split segment and offset (follows `segment_bytes`).
    pub(crate) slot_bits: SlotBits,
}

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

impl Layout {
    /// Plans a region of `region_bytes` for items up to `max_item_bytes` (rounded down to 8),
    /// with an index sized for items of `avg_item_bytes` on average filling the segments.
    pub fn plan(
        region_bytes: usize,
        max_item_bytes: usize,
        avg_item_bytes: usize,
    ) -> Result<Layout, RegionError> {
        let max_item_bytes = max_item_bytes / 8 * 8;
        if !(MIN_ITEM_LIMIT..=MAX_ITEM_LIMIT).contains(&max_item_bytes) {
            return Err(RegionError::Config(format!(
                "maximum item size {max_item_bytes} is out of range: use {MIN_ITEM_LIMIT} bytes to {} MiB",
                MAX_ITEM_LIMIT >> 20
            )));
        }
        if avg_item_bytes < 16 {
            return Err(RegionError::Config(format!(
                "average item size hint {avg_item_bytes} is below the smallest item (16 bytes)"
            )));
        }
        let segment_bytes = round_up(max_item_bytes.max(DEFAULT_SEGMENT_BYTES), DEFAULT_SEGMENT_BYTES);
        let region_bytes = round_up(region_bytes, 4096);
        // Per segment: its bytes, its table entry, and index buckets for the items it holds.
        let buckets_per_segment =
            segment_bytes as f64 / avg_item_bytes as f64 / (BUCKET_SLOTS as f64 * PLANNED_BUCKET_LOAD);
        let per_segment =
            segment_bytes as f64 + SEGMENT_META_BYTES as f64 + buckets_per_segment * BUCKET_BYTES as f64;
        // Two pages of slack for rounding the index and table up to page boundaries.
        let usable = region_bytes.saturating_sub(HEADER_BYTES + 2 * 4096);
        let segment_count = (usable as f64 / per_segment).floor() as usize;
        if segment_count < 2 {
            let need = HEADER_BYTES + 2 * 4096 + (2.0 * per_segment).ceil() as usize;
            return Err(RegionError::Config(format!(
                "{region_bytes} bytes hold fewer than 2 segments of {segment_bytes} bytes: \
                 give the region at least {} MiB",
                need.div_ceil(1 << 20)
            )));
        }
        let slot_bits = SlotBits::for_segment(segment_bytes);
        if segment_count > slot_bits.max_segments() {
            return Err(RegionError::Config(format!(
                "{segment_count} segments exceed the index's limit of {} for segments of {segment_bytes} bytes",
                slot_bits.max_segments()
            )));
        }
        let bucket_count = ((segment_count as f64 * buckets_per_segment).ceil() as usize).max(1);
        let index_offset = HEADER_BYTES;
        let table_offset = round_up(index_offset + bucket_count * BUCKET_BYTES, 4096);
        let segments_offset = round_up(table_offset + segment_count * SEGMENT_META_BYTES, 4096);
        let layout = Layout {
            region_bytes,
            segment_bytes,
            segment_count,
            bucket_count,
            index_offset,
            table_offset,
            segments_offset,
            max_item_bytes,
            hash_seed: 0,
            cookie: 0,
            slot_bits,
        };
        debug_assert!(layout.check().is_ok());
        Ok(layout)
    }

    /// Checks that the geometry is self-consistent and fits `region_bytes`.
    fn check(&self) -> Result<(), String> {
        let bad = |what: &str| Err(format!("inconsistent geometry: {what}"));
        if self.segment_bytes == 0
            || !self.segment_bytes.is_multiple_of(8)
            || self.segment_bytes > MAX_SEGMENT_BYTES
        {
            return bad("segment size");
        }
        if self.segment_count == 0
            || self.segment_count > self.slot_bits.max_segments()
            || self.bucket_count == 0
            || self.slot_bits != SlotBits::for_segment(self.segment_bytes)
        {
            return bad("counts");
        }
        if !(MIN_ITEM_LIMIT..=MAX_ITEM_LIMIT).contains(&self.max_item_bytes)
            || !self.max_item_bytes.is_multiple_of(8)
            || self.max_item_bytes > self.segment_bytes
        {
            return bad("maximum item size");
        }
        let index_end =
            self.bucket_count.checked_mul(BUCKET_BYTES).and_then(|n| n.checked_add(self.index_offset));
        let table_end =
            self.segment_count.checked_mul(SEGMENT_META_BYTES).and_then(|n| n.checked_add(self.table_offset));
        let segs_end = self
            .segment_count
            .checked_mul(self.segment_bytes)
            .and_then(|n| n.checked_add(self.segments_offset));
        match (index_end, table_end, segs_end) {
            (Some(i), Some(t), Some(s))
                if self.index_offset == HEADER_BYTES
                    && i <= self.table_offset
                    && self.table_offset.is_multiple_of(64)
                    && t <= self.segments_offset
                    && self.segments_offset.is_multiple_of(8)
                    && s <= self.region_bytes =>
            {
                Ok(())
            }
            _ => bad("offsets"),
        }
    }

    /// The layout version a region of this geometry is written with: the oldest that holds
    /// its items, so that readers built before large items read regions of small ones.
    pub fn version(&self) -> u32 {
        if self.max_item_bytes <= SMALL_ITEM_LIMIT {
            SMALL_ITEMS_LAYOUT_VERSION
        } else {
            LAYOUT_VERSION
        }
    }

    /// Writes the geometry into a fresh header; the magic is stored last, by the caller.
    pub(crate) fn store(&self, h: &RawHeader) {
        let r = Ordering::Relaxed;
        h.layout_version.store(self.version(), r);
        h.hash_id.store(HASH_XXH3_64, r);
        h.region_bytes.store(self.region_bytes as u64, r);
        h.segment_bytes.store(self.segment_bytes as u32, r);
        h.segment_count.store(self.segment_count as u32, r);
        h.bucket_count.store(self.bucket_count as u64, r);
        h.index_offset.store(self.index_offset as u64, r);
        h.table_offset.store(self.table_offset as u64, r);
        h.segments_offset.store(self.segments_offset as u64, r);
        h.max_item_bytes.store(self.max_item_bytes as u32, r);
        h.hash_seed.store(self.hash_seed, r);
        h.cookie.store(self.cookie, r);
    }

    /// Reads and validates the geometry of an existing region whose file is `file_bytes` long
    /// (exactly, or at least if `exact` is false).
    pub(crate) fn load(h: &RawHeader, file_bytes: usize, exact: bool) -> Result<Layout, RegionError> {
        let r = Ordering::Acquire;
        if h.magic.load(r) != MAGIC {
            return Err(RegionError::BadMagic);
        }
        let version = h.layout_version.load(r);
        if version != LAYOUT_VERSION && version != SMALL_ITEMS_LAYOUT_VERSION {
            return Err(RegionError::UnsupportedVersion { found: version, supported: LAYOUT_VERSION });
        }
        let hash = h.hash_id.load(r);
        if hash != HASH_XXH3_64 {
            return Err(RegionError::Corrupt(format!("unknown hash function id {hash}")));
        }
        let region_bytes = h.region_bytes.load(r) as usize;
        if region_bytes > file_bytes || (exact && region_bytes != file_bytes) {
            return Err(RegionError::SizeMismatch { header: region_bytes, file: file_bytes });
        }
        let segment_bytes = h.segment_bytes.load(r) as usize;
        let layout = Layout {
            region_bytes,
            segment_bytes,
            segment_count: h.segment_count.load(r) as usize,
            bucket_count: h.bucket_count.load(r) as usize,
            index_offset: h.index_offset.load(r) as usize,
            table_offset: h.table_offset.load(r) as usize,
            segments_offset: h.segments_offset.load(r) as usize,
            max_item_bytes: h.max_item_bytes.load(r) as usize,
            hash_seed: h.hash_seed.load(r),
            cookie: h.cookie.load(r),
            slot_bits: SlotBits::for_segment(segment_bytes),
        };
        layout.check().map_err(RegionError::Corrupt)?;
        if layout.version() != version {
            return Err(RegionError::Corrupt(format!(
                "layout version {version} with a maximum item size of {} bytes",
                layout.max_item_bytes
            )));
        }
        Ok(layout)
    }

    /// Offset of bucket `b`.
    #[inline]
    pub(crate) fn bucket_offset(&self, b: usize) -> usize {
        self.index_offset + b * BUCKET_BYTES
    }

    /// Offset of segment `s`'s table entry.
    #[inline]
    pub(crate) fn meta_offset(&self, s: usize) -> usize {
        self.table_offset + s * SEGMENT_META_BYTES
    }

    /// Offset of the first byte of segment `s`.
    #[inline]
    pub(crate) fn segment_offset(&self, s: usize) -> usize {
        self.segments_offset + s * self.segment_bytes
    }

    /// Bytes of index per item the index was planned for.
    pub fn index_bytes(&self) -> usize {
        self.bucket_count * BUCKET_BYTES
    }

    /// The slot stored in `word`, if one is present.
    #[inline]
    pub(crate) fn slot(&self, word: u64) -> Option<Slot> {
        Slot::decode(word, self.slot_bits)
    }

    /// The index word of `slot` (present, not marked read).
    #[inline]
    pub(crate) fn slot_word(&self, slot: Slot) -> u64 {
        slot.encode(self.slot_bits)
    }

    /// The CAS unique of an item at `offset` in a segment of generation `segment_gen` that
    /// carries no explicit one: unique because no two items ever share a (segment generation,
    /// offset) pair, increasing in write order within a segment, and free: it costs no bytes
    /// in the item.
    #[inline]
    pub(crate) fn derived_cas(&self, segment_gen: u64, offset: usize) -> u64 {
        (segment_gen << self.slot_bits.offset_bits) | (offset as u64 >> 3)
    }
}

// ---------------------------------------------------------------------------------------------
// Index slots and items: their encodings (`encoding.rs`)

mod encoding;
pub use encoding::*;

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn plan_fits_and_refuses_tiny_regions() {
        let l = Layout::plan(64 << 20, 1 << 20, 128).unwrap();
        assert!(l.check().is_ok());
        assert!(l.segment_count >= 50, "{l:?}");
        assert!(matches!(Layout::plan(1 << 20, 1 << 20, 128), Err(RegionError::Config(_))));
        assert_eq!(l.segment_bytes, DEFAULT_SEGMENT_BYTES);
        let big = Layout::plan(64 << 20, 4 << 20, 128).unwrap();
        assert!(big.segment_bytes >= 4 << 20);
        assert!(Layout::plan(64 << 20, MAX_ITEM_LIMIT + 8, 128).is_err());
        assert_eq!((l.version(), big.version()), (SMALL_ITEMS_LAYOUT_VERSION, SMALL_ITEMS_LAYOUT_VERSION));
        let large = Layout::plan(256 << 20, 32 << 20, 128).unwrap();
        assert_eq!((large.segment_bytes, large.version()), (32 << 20, LAYOUT_VERSION));
        let largest = Layout::plan(2 * MAX_ITEM_LIMIT + (256 << 20), MAX_ITEM_LIMIT, 128).unwrap();
        assert_eq!((largest.segment_bytes, largest.segment_count), (MAX_ITEM_LIMIT, 2));
    }

    #[test]
    fn metadata_of_a_small_item_fits_the_budget() {
        // 16-byte key, 100-byte value: 12 bytes of header, no padding, and the index planned
        // for 128-byte items costs 64 / (7 * 0.9) ≈ 10.2 bytes.
        assert_eq!(item_bytes(16, 100, false), 128);
        let l = Layout::plan(1 << 30, 1 << 20, 128).unwrap();
        let items = l.segment_count * l.segment_bytes / 128;
        let per_item = (128 - 116) as f64 + l.index_bytes() as f64 / items as f64;
        assert!(per_item <= 24.0, "{per_item}");
    }
}
