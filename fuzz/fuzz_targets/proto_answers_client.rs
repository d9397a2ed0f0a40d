//! What a server sends a client is input: the client reads a connection's bytes as one answer
//! after another with the shared answer framer (`shoal_proto::frame_within`), then reads each
//! framed answer's `VALUE` blocks, meta line or `STAT` lines. An answer found must be found in
//! exactly its own bytes (one byte less is incomplete, more change nothing), within the bounds
//! given, and found alike by a `Framer` that gets the bytes a few at a time; what it holds
//! must read back without a panic and agree with the frame.
//!
//! Input: a selector byte per answer (its shape), up to the first 0xff, then the bytes the
//! server sent.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_proto::answer::{blocks, lines, stat, ValueHeader};
use shoal_proto::{frame_within, Frame, Framer, Limits, Shape};

/// Small bounds, so that the fuzzer reaches them.
const LIMITS: Limits = Limits { line: 256, value: 4096, stat_lines: 16 };

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == 0xff).unwrap_or(0);
    let (selectors, mut rest) = (&data[..split], &data[(split + 1).min(data.len())..]);
    let shapes = [Shape::Line, Shape::Meta, Shape::Values, Shape::Stats];
    for &which in selectors.iter().chain(std::iter::repeat(&2)).take(64) {
        let shape = shapes[usize::from(which) % shapes.len()];
        let Ok(Some(Frame { len, answer })) = frame_within(rest, shape, &LIMITS) else { return };
        assert!(answer <= len && len <= rest.len(), "{answer} ≤ {len} ≤ {}", rest.len());
        assert_eq!(frame_within(&rest[..len], shape, &LIMITS).ok(), Some(Some(Frame { len, answer })));
        assert!(matches!(frame_within(&rest[..len - 1], shape, &LIMITS), Ok(None)), "one byte short");
        // A framer handed the answer a few bytes per read (as a connection gets it) finds the
        // same frame, resuming where each read's framing stopped.
        let step = 1 + usize::from(which / 4);
        let mut framer = Framer::default();
        let mut cut = 0;
        while cut < len {
            cut = (cut + step).min(len);
            let found = framer.frame(&rest[..cut], shape, &LIMITS).ok();
            assert_eq!(found, Some((cut == len).then_some(Frame { len, answer })), "resumed at {cut}");
        }
        let found = &rest[..answer];
        match shape {
            Shape::Values => {
                for block in blocks(found) {
                    assert!(block.line.len() < LIMITS.line && block.data.len() <= LIMITS.value);
                    if let Some(header) = ValueHeader::parse(block.line) {
                        assert_eq!(header.len, block.data.len(), "the frame took the block announced");
                    }
                }
            }
            Shape::Stats => {
                let stats = lines(found).filter(|line| line.starts_with(b"STAT ")).count();
                assert!(stats <= LIMITS.stat_lines);
                for (name, _) in lines(found).filter_map(stat) {
                    assert!(!name.contains(' '), "a name is one word");
                }
            }
            Shape::Line | Shape::Meta => assert!(found.ends_with(b"\r\n")),
        }
        rest = &rest[len..];
    }
});
