//! Authentication messages come from clients that have proved nothing yet: the SASL PLAIN
//! splitter and the ascii (`-Y`) token reader must never panic, must make progress, must
//! not depend on how the bytes were split into reads, and must close rather than buffer a
//! token longer than the limit.
//!
//! Input: two bytes choosing a split point, then the bytes of a connection (also taken whole
//! as one PLAIN message).

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_proto::{parse_ascii_auth, parse_plain, AsciiAuth};

/// The most a token may make the server buffer.
const MAX_LEN: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let Some((split, mut rest)) = data.split_first_chunk::<2>() else { return };
    if let Some(p) = parse_plain(rest) {
        // The parts are the message's, separated by exactly two NULs.
        assert_eq!(p.authzid.len() + p.user.len() + p.password.len() + 2, rest.len());
        assert!(!p.password.contains(&0));
    }
    let split = usize::from(u16::from_le_bytes(*split));
    while !rest.is_empty() {
        let whole = parse_ascii_auth(rest, MAX_LEN);
        let cut = split % (rest.len() + 1);
        match parse_ascii_auth(&rest[..cut], MAX_LEN) {
            AsciiAuth::Incomplete => {}
            prefix => assert_eq!(prefix, whole, "a prefix decided differently"),
        }
        let consumed = match whole {
            AsciiAuth::Incomplete => {
                assert!(rest.len() < MAX_LEN);
                return;
            }
            AsciiAuth::Close => return,
            AsciiAuth::Credentials { consumed, .. } => consumed,
            AsciiAuth::Refused { consume, .. } => consume,
        };
        assert!(consumed > 0 && consumed <= rest.len());
        rest = &rest[consumed..];
    }
});
