//! A digest snapshot comes from another process (a server's Proteus digest): reading one must
//! end in a digest or a clear error, never a panic; an accepted snapshot writes back byte for
//! byte, and answers queries.
//!
//! Input: the snapshot bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_route::Digest;

fuzz_target!(|data: &[u8]| {
    match Digest::from_snapshot(data) {
        Ok(mut digest) => {
            assert_eq!(digest.to_snapshot(), data);
            let tail = &data[data.len().saturating_sub(16)..];
            for key in [&b"key"[..], b"", tail] {
                let _ = digest.may_contain(key);
            }
            digest.insert(tail);
            assert!(digest.may_contain(tail));
            assert!(digest.remove(tail));
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
