//! How an index slot and an item are encoded in their bytes: the slot's bit fields (split by
//! segment size), an item's header word, its optional CAS and extended length, and fillers.
//! Bit layouts are pinned by compile-time assertions.

use super::*;

// ---------------------------------------------------------------------------------------------
// Index slots
//
//  63       62        61..46   45..21        20..0
//  present  accessed  tag(16)  segment(25)   offset/8 (21)
//
// for segments up to 16 MiB; a region of larger segments (items past 16 MiB) gives the offset
// the bits its segments need (27 for 1 GiB) and the segment field the rest ([`SlotBits`]).

const SLOT_PRESENT: u64 = 1 << 63;
/// Set by the writer when the item is read; gives it a second chance at eviction.
pub(crate) const SLOT_ACCESSED: u64 = 1 << 62;
const TAG_SHIFT: u32 = 46;
/// Offset bits of the default split.
const OFF_BITS: u32 = 21;
/// Most segments a slot can name in a region of segments up to [`DEFAULT_SPLIT_SEGMENT_BYTES`].
pub const MAX_SEGMENTS: usize = 1 << (TAG_SHIFT - OFF_BITS);
/// Largest segment the default slot split addresses (offsets are in 8-byte units).
pub const DEFAULT_SPLIT_SEGMENT_BYTES: usize = 8 << OFF_BITS;
/// Largest segment of any region: one that holds the largest item.
pub const MAX_SEGMENT_BYTES: usize = MAX_ITEM_LIMIT;

const _: () = assert!(TAG_SHIFT + 16 == 62 && MAX_SEGMENT_BYTES.is_power_of_two());

/// How a slot's 46 location bits split between segment number and offset: the offset (in
/// 8-byte units) gets what the region's segment size needs, never fewer than 21 bits, so
/// every region of segments up to 16 MiB has the same slots as before large items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotBits {
    pub(super) offset_bits: u32,
}

impl SlotBits {
    /// The split for segments of `segment_bytes`.
    pub fn for_segment(segment_bytes: usize) -> SlotBits {
        let units = (segment_bytes.max(8) / 8 - 1) as u64;
        SlotBits { offset_bits: (u64::BITS - units.leading_zeros()).max(OFF_BITS) }
    }

    /// Most segments the segment field can name.
    pub fn max_segments(self) -> usize {
        1 << (TAG_SHIFT - self.offset_bits)
    }
}

/// A decoded index slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub tag: u16,
    pub segment: usize,
    /// Byte offset of the item inside its segment (8-aligned).
    pub offset: usize,
}

impl Slot {
    #[inline]
    pub(super) fn encode(self, bits: SlotBits) -> u64 {
        debug_assert!(
            self.segment < bits.max_segments()
                && self.offset.is_multiple_of(8)
                && (self.offset as u64 >> 3) < 1 << bits.offset_bits
        );
        SLOT_PRESENT
            | (self.tag as u64) << TAG_SHIFT
            | (self.segment as u64) << bits.offset_bits
            | (self.offset as u64 >> 3)
    }

    /// Whether `word` holds a present slot under `tag`: one mask and compare of its top bits
    /// (the accessed bit left out), the screen a lookup runs on every slot of a bucket before
    /// it decodes the one or two that pass.
    #[inline]
    pub(crate) fn matches(word: u64, tag: u16) -> bool {
        const SCREEN: u64 = SLOT_PRESENT | (0xffff << TAG_SHIFT);
        word & SCREEN == SLOT_PRESENT | (u64::from(tag) << TAG_SHIFT)
    }

    /// The slot stored in `word`, if one is present.
    #[inline]
    pub(super) fn decode(word: u64, bits: SlotBits) -> Option<Slot> {
        let location = word & ((1 << TAG_SHIFT) - 1);
        (word & SLOT_PRESENT != 0).then_some(Slot {
            tag: (word >> TAG_SHIFT) as u16,
            segment: (location >> bits.offset_bits) as usize,
            offset: ((location & ((1 << bits.offset_bits) - 1)) << 3) as usize,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Items
//
// [len word: key_len(8) | explicit_cas(1) | value_len(23)] [expiry u32] [client flags u32]
// [explicit cas u64, only if flagged] [value length u32, only if extended] [key] [value]
// [padding to 8]
//
// A value of VALUE_LEN_ESCAPE (2^23 - 1) bytes or more is extended: its 23-bit field holds the
// escape and its length follows (a u32). Only regions of items past 8 MiB hold such items (a
// value in an 8 MiB item is shorter than the escape), so every item of a small-items region is
// laid out as before, and decoding a small item costs one compare more.
//
// A filler (space given up by an abandoned reservation) has key_len 0 and its size in 8-byte
// units in the upper 24 bits, so walking a segment can skip it; space larger than one filler
// can say ([`MAX_FILLER_BYTES`]) is given up as a run of fillers.

/// Offset of the expiry inside an item (4-aligned: `touch` updates it in place).
pub(crate) const ITEM_EXPIRY_OFFSET: usize = 4;
/// The 23-bit value length field's escape: the value's length is in the extension.
pub const VALUE_LEN_ESCAPE: usize = (1 << 23) - 1;
/// Bytes of the extended value length that follows the header (and explicit CAS) of an item
/// whose value is [`VALUE_LEN_ESCAPE`] bytes or more.
pub const ITEM_EXT_LEN_BYTES: usize = 4;
/// Largest space one filler word can skip.
pub(crate) const MAX_FILLER_BYTES: usize = ((1 << 24) - 1) * 8;

const _: () =
    assert!(MAX_ITEM_LIMIT <= u32::MAX as usize && SMALL_ITEM_LIMIT - ITEM_HEADER_BYTES < VALUE_LEN_ESCAPE);

/// Bytes between the header (and explicit CAS) and the key: the extended value length.
#[inline]
const fn ext_bytes(value_len: usize) -> usize {
    if value_len >= VALUE_LEN_ESCAPE {
        ITEM_EXT_LEN_BYTES
    } else {
        0
    }
}

/// Bytes an item with these lengths occupies in a segment.
#[inline]
pub const fn item_bytes(key_len: usize, value_len: usize, explicit_cas: bool) -> usize {
    let cas = if explicit_cas { ITEM_CAS_BYTES } else { 0 };
    (ITEM_HEADER_BYTES + cas + ext_bytes(value_len) + key_len + value_len).div_ceil(8) * 8
}

/// Longest value an item of at most `item_limit` bytes holds under a key of `key_len` bytes.
pub const fn max_value_len(item_limit: usize, key_len: usize, explicit_cas: bool) -> usize {
    let cas = if explicit_cas { ITEM_CAS_BYTES } else { 0 };
    let room = item_limit.saturating_sub(ITEM_HEADER_BYTES + cas + key_len);
    if room >= VALUE_LEN_ESCAPE + ITEM_EXT_LEN_BYTES {
        room - ITEM_EXT_LEN_BYTES
    } else if room >= VALUE_LEN_ESCAPE {
        VALUE_LEN_ESCAPE - 1
    } else {
        room
    }
}

/// The fixed part of an item, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ItemHeader {
    pub key_len: usize,
    /// The value's length; [`ItemHeader::decode`] leaves [`VALUE_LEN_ESCAPE`] here for an
    /// extended item, which [`ItemHeader::extend`] then replaces with the extension's.
    pub value_len: usize,
    pub explicit_cas: bool,
    pub expiry: u32,
    pub flags: u32,
}

impl ItemHeader {
    pub fn encode(&self) -> [u8; ITEM_HEADER_BYTES] {
        let field = self.value_len.min(VALUE_LEN_ESCAPE) as u32;
        let len_word = self.key_len as u32 | (self.explicit_cas as u32) << 8 | field << 9;
        let mut out = [0; ITEM_HEADER_BYTES];
        out[0..4].copy_from_slice(&len_word.to_le_bytes());
        out[4..8].copy_from_slice(&self.expiry.to_le_bytes());
        out[8..12].copy_from_slice(&self.flags.to_le_bytes());
        out
    }

    /// The extension that follows the header (at [`ItemHeader::ext_offset`]) if the value is
    /// long enough to need one.
    pub fn encode_ext(&self) -> Option<[u8; ITEM_EXT_LEN_BYTES]> {
        self.is_extended().then(|| (self.value_len as u32).to_le_bytes())
    }

    pub fn decode(b: &[u8; ITEM_HEADER_BYTES]) -> ItemHeader {
        let len_word = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        ItemHeader {
            key_len: (len_word & 0xff) as usize,
            explicit_cas: len_word & 0x100 != 0,
            value_len: (len_word >> 9) as usize,
            expiry: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            flags: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
        }
    }

    /// Whether the value's length is in an extension after the header.
    #[inline]
    pub fn is_extended(&self) -> bool {
        self.value_len >= VALUE_LEN_ESCAPE
    }

    /// Bytes from the item start to its extended value length.
    #[inline]
    pub fn ext_offset(&self) -> usize {
        ITEM_HEADER_BYTES + if self.explicit_cas { ITEM_CAS_BYTES } else { 0 }
    }

    /// The decoded header of an extended item with the value length its extension `ext`
    /// gives; `None` if that length could not have been extended (a torn or damaged item).
    #[inline]
    pub fn extend(self, ext: [u8; ITEM_EXT_LEN_BYTES]) -> Option<ItemHeader> {
        let value_len = u32::from_le_bytes(ext) as usize;
        (value_len >= VALUE_LEN_ESCAPE).then_some(ItemHeader { value_len, ..self })
    }

    /// Bytes from the item start to its key.
    #[inline]
    pub fn key_offset(&self) -> usize {
        self.ext_offset() + ext_bytes(self.value_len)
    }

    /// Bytes the whole item occupies.
    pub fn size(&self) -> usize {
        item_bytes(self.key_len, self.value_len, self.explicit_cas)
    }
}

/// The length word of a filler of `bytes` (a multiple of 8, at most [`MAX_FILLER_BYTES`]).
pub(crate) fn filler_word(bytes: usize) -> u32 {
    debug_assert!(bytes.is_multiple_of(8) && (8..=MAX_FILLER_BYTES).contains(&bytes));
    ((bytes / 8) as u32) << 8
}

/// Size of the filler whose length word is `word`, if it is one.
pub(crate) fn filler_size(word: u32) -> Option<usize> {
    (word & 0xff == 0).then_some(((word >> 8) as usize) * 8)
}

/// The fillers that give up `bytes` (a multiple of 8): (offset from the start, length word)
/// of each, every one but the last as long as a filler can be.
pub(crate) fn fillers(bytes: usize) -> impl Iterator<Item = (usize, u32)> {
    (0..bytes).step_by(MAX_FILLER_BYTES).map(move |at| (at, filler_word((bytes - at).min(MAX_FILLER_BYTES))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_round_trips() {
        let bits = SlotBits::for_segment(DEFAULT_SPLIT_SEGMENT_BYTES);
        assert_eq!(bits, SlotBits::for_segment(DEFAULT_SEGMENT_BYTES), "small segments share one split");
        let s = Slot { tag: 0xbeef, segment: MAX_SEGMENTS - 1, offset: DEFAULT_SPLIT_SEGMENT_BYTES - 8 };
        assert_eq!(Slot::decode(s.encode(bits), bits), Some(s));
        assert_eq!(Slot::decode(s.encode(bits) | SLOT_ACCESSED, bits), Some(s));
        assert_eq!(Slot::decode(0, bits), None);
        // The default split is the one every region had before large items.
        let word = Slot { tag: 1, segment: 3, offset: 40 }.encode(bits);
        assert_eq!(word, 1 << 63 | 1 << 46 | 3 << 21 | 5);
    }

    /// The screen agrees with decoding: a present slot under the tag, read or not.
    #[test]
    fn the_tag_screen_agrees_with_decoding() {
        let bits = SlotBits::for_segment(DEFAULT_SEGMENT_BYTES);
        for tag in [0, 1, 0x8000, 0xbeef, 0xffff] {
            let s = Slot { tag, segment: MAX_SEGMENTS - 1, offset: DEFAULT_SEGMENT_BYTES - 8 };
            for word in [s.encode(bits), s.encode(bits) | SLOT_ACCESSED] {
                for want in [0, 1, 0x7fff, 0x8000, 0xbeef, 0xfffe, 0xffff] {
                    let decoded = Slot::decode(word, bits).is_some_and(|d| d.tag == want);
                    assert_eq!(Slot::matches(word, want), decoded, "{word:#x} {want:#x}");
                }
            }
            assert!(
                !Slot::matches(0, tag) && !Slot::matches(SLOT_ACCESSED | (u64::from(tag) << TAG_SHIFT), tag)
            );
        }
    }

    #[test]
    fn large_segments_take_offset_bits_from_the_segment_field() {
        for segment_bytes in [32 << 20, (32 << 20) + (1 << 20), MAX_SEGMENT_BYTES] {
            let bits = SlotBits::for_segment(segment_bytes);
            assert!((8usize << bits.offset_bits) >= segment_bytes);
            assert!((4usize << bits.offset_bits) < segment_bytes, "no bit more than needed");
            let s = Slot { tag: 0xffff, segment: bits.max_segments() - 1, offset: segment_bytes - 8 };
            assert_eq!(Slot::decode(s.encode(bits), bits), Some(s));
        }
        assert_eq!(SlotBits::for_segment(MAX_SEGMENT_BYTES).max_segments(), 1 << 19);
    }

    #[test]
    fn item_header_round_trips() {
        let h = ItemHeader {
            key_len: 250,
            value_len: VALUE_LEN_ESCAPE - 1,
            explicit_cas: true,
            expiry: 7,
            flags: u32::MAX,
        };
        assert_eq!(ItemHeader::decode(&h.encode()), h);
        assert_eq!((h.encode_ext(), h.key_offset()), (None, ITEM_HEADER_BYTES + ITEM_CAS_BYTES));
        assert_eq!(filler_size(filler_word(4096)), Some(4096));
        assert_eq!(filler_size(u32::from_le_bytes(h.encode()[0..4].try_into().unwrap())), None);
    }

    #[test]
    fn a_long_value_has_its_length_in_an_extension() {
        for value_len in [VALUE_LEN_ESCAPE, VALUE_LEN_ESCAPE + 1, 20 << 20, MAX_ITEM_LIMIT - 300] {
            for explicit_cas in [false, true] {
                let h = ItemHeader { key_len: 9, value_len, explicit_cas, expiry: 1, flags: 2 };
                let decoded = ItemHeader::decode(&h.encode());
                assert_eq!(decoded.value_len, VALUE_LEN_ESCAPE);
                assert_eq!(decoded.key_offset(), h.key_offset(), "the escape alone places the key");
                assert_eq!(decoded.extend(h.encode_ext().unwrap()), Some(h));
                assert_eq!(h.key_offset(), h.ext_offset() + ITEM_EXT_LEN_BYTES);
                assert_eq!(h.size(), (h.key_offset() + 9 + value_len).div_ceil(8) * 8);
            }
        }
        let h = ItemHeader::decode(
            &ItemHeader { key_len: 1, value_len: 1 << 24, explicit_cas: false, expiry: 0, flags: 0 }.encode(),
        );
        assert_eq!(h.extend(5u32.to_le_bytes()), None, "a short length behind the escape is damage");
        for limit in [SMALL_ITEM_LIMIT, (1 << 23) + 8, (1 << 23) + 16, 32 << 20, MAX_ITEM_LIMIT] {
            for (key_len, cas) in [(1, false), (4, false), (250, true)] {
                let max = max_value_len(limit, key_len, cas);
                assert!(item_bytes(key_len, max, cas) <= limit, "{limit} {key_len}");
                assert!(item_bytes(key_len, max + 1, cas) > limit, "{limit} {key_len}");
            }
        }
        // The largest item of a small-items region never reaches the escape.
        assert_eq!(item_bytes(1, SMALL_ITEM_LIMIT - ITEM_HEADER_BYTES - 1, false), SMALL_ITEM_LIMIT);
    }

    #[test]
    fn fillers_cover_any_space_in_runs() {
        for bytes in [8, 4096, MAX_FILLER_BYTES, MAX_FILLER_BYTES + 8, 3 * MAX_FILLER_BYTES + 64] {
            let mut next = 0;
            for (at, word) in fillers(bytes) {
                assert_eq!(at, next);
                next += filler_size(word).filter(|&n| n >= 8).unwrap();
            }
            assert_eq!(next, bytes);
        }
    }
}
