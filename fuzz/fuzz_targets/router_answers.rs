//! What a destination sends the router is input: `shoal_proto::frame` (the shared answer
//! framer, which the router's destination connections call) must find a whole answer, say
//! it is not all there yet, or refuse it as garbage; never panic or read past the bytes. An
//! answer it finds is found in exactly its own bytes (more bytes after it change nothing, fewer
//! make it incomplete), which is what lets the router's connection read answers in pieces.
//!
//! Input: a selector byte (the answer's shape), then the bytes read from the destination.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_proto::{frame, Frame, Shape};

/// Values larger than this are garbage (the router's `max_value_bytes`, kept small here so
/// that the fuzzer reaches the bound).
const MAX_VALUE: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else { return };
    let shape = [Shape::Line, Shape::Meta, Shape::Values, Shape::Stats][which as usize % 4];
    let Ok(Some(Frame { len, answer })) = frame(bytes, shape, MAX_VALUE) else { return };
    assert!(answer <= len && len <= bytes.len(), "{answer} ≤ {len} ≤ {}", bytes.len());
    assert_eq!(frame(&bytes[..len], shape, MAX_VALUE).ok(), Some(Some(Frame { len, answer })));
    if len > 0 {
        assert!(
            matches!(frame(&bytes[..len - 1], shape, MAX_VALUE), Ok(None)),
            "one byte short is incomplete"
        );
    }
});
