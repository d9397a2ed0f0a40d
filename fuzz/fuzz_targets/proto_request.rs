//! Request bytes come straight from the network: `shoal_proto::Parser::parse` must never
//! panic, must always make progress, and must not depend on how the bytes were split into
//! reads.
//!
//! Input: two bytes choosing a split point, then the bytes of a connection. The bytes are
//! parsed request after request, as a server would; before each request, the prefix up to the
//! split point (when it falls inside the rest) is parsed first, by the same parser and by a
//! fresh one: each must give `Incomplete` or the very result of the whole buffer (or `Close`
//! for a prefix longer than a line may be, as memcached does on such a read).

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_proto::{Parse, Parser, MAX_LINE};

/// A small item limit, so that "too large" and complete values are both in reach.
const MAX_ITEM: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Some((split, mut rest)) = data.split_first_chunk::<2>() else { return };
    let split = usize::from(u16::from_le_bytes(*split));
    let mut parser = Parser::new(MAX_ITEM);
    while !rest.is_empty() {
        let cut = split % (rest.len() + 1);
        let prefix = parser.parse(&rest[..cut]);
        let result = if prefix == Parse::Incomplete { parser.parse(rest) } else { prefix.clone() };
        let whole = Parser::new(MAX_ITEM).parse(rest);
        match &prefix {
            Parse::Incomplete => assert_eq!(result, whole),
            Parse::Close if cut > MAX_LINE => {}
            other => assert_eq!(*other, whole),
        }
        assert_eq!(Parser::new(MAX_ITEM).parse(&rest[..cut]), prefix);
        let consumed = match result {
            Parse::Incomplete | Parse::Close => return,
            Parse::Done { consumed, .. } => {
                assert!(consumed <= rest.len());
                consumed
            }
            Parse::Error { consume, .. } => consume,
        };
        assert!(consumed > 0, "no progress on {rest:?}");
        rest = rest.get(consumed..).unwrap_or_default();
    }
});
