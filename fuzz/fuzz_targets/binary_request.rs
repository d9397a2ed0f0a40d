//! Binary-protocol requests come straight from the network: `BinaryParser::parse` must never
//! panic, must make progress, must not depend on how the bytes were split into reads, and
//! must never ask to buffer more than a header, extras, a key and a value within the limit.
//!
//! Input: a byte of options (SASL on, authenticated) and two bytes choosing a split point,
//! then the bytes of a connection, parsed request after request as a server would.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_proto::binary::HEADER_LEN;
use shoal_proto::{BinaryParse, BinaryParser};

/// A small item limit, so that "too large" and complete values are both in reach.
const MAX_ITEM: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Some((&[options, split_lo, split_hi], mut rest)) = data.split_first_chunk::<3>() else { return };
    let parser = BinaryParser { max_item_bytes: MAX_ITEM, sasl: options & 1 != 0 };
    let authenticated = options & 2 != 0;
    let split = usize::from(u16::from_le_bytes([split_lo, split_hi]));
    while !rest.is_empty() {
        let whole = parser.parse(rest, authenticated);
        let cut = split % (rest.len() + 1);
        match parser.parse(&rest[..cut], authenticated) {
            BinaryParse::Incomplete => {}
            prefix => assert_eq!(prefix, whole, "a prefix decided differently"),
        }
        let consumed = match whole {
            // What is awaited is bounded: the header, extras and a key (at most 24 + 255 +
            // 65535 bytes), and a value only within the limit.
            BinaryParse::Incomplete => {
                assert!(rest.len() < HEADER_LEN + 255 + 65_535 + MAX_ITEM + 1);
                return;
            }
            BinaryParse::Close => return,
            BinaryParse::Done { consumed, .. } => {
                assert!(consumed <= rest.len());
                consumed
            }
            BinaryParse::Refused { consume, close, .. } => {
                if close {
                    return;
                }
                consume
            }
        };
        assert!(consumed >= HEADER_LEN, "no progress on {rest:?}");
        rest = rest.get(consumed..).unwrap_or_default();
    }
});
