//! A `stats hotkeys` answer comes from another process (a server, read by pool clients and
//! routers): reading one must end in a hot-key list or a clear error, never a panic, and never
//! more keys than the limit; an accepted list writes back with the server's encoder into an
//! answer that reads back as the same list, and writes again to the same bytes.
//!
//! Input: a limit byte, then the answer bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_proto::hotkeys::{encode_hotkeys, parse_hotkeys};

fuzz_target!(|data: &[u8]| {
    let Some((&limit, answer)) = data.split_first() else { return };
    let limit = usize::from(limit % 32);
    match parse_hotkeys(answer, limit) {
        Ok(hot) => {
            assert!(hot.len() <= limit);
            let mut encoded = Vec::new();
            encode_hotkeys(&hot, &mut encoded);
            assert_eq!(parse_hotkeys(&encoded, limit).as_ref(), Ok(&hot), "the encoder's answer reads back");
            let mut again = Vec::new();
            encode_hotkeys(&hot, &mut again);
            assert_eq!(again, encoded);
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
