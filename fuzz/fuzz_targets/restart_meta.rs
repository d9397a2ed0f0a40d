//! The restart metadata file beside `-e FILE` (`FILE.meta`) is read at every start: any bytes
//! must end in a verdict (warm, clean, or the region decides) or an error naming memcached's
//! `[restart]` reason, never a panic; and what a graceful stop writes must restart warm.
//!
//! Input: the file's bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_server::restart::{judge, Meta, Restart};

fuzz_target!(|data: &[u8]| {
    let meta = Meta::new("/dev/shm/fuzz.region".into(), 64 << 20, 1 << 20, true);
    let text = String::from_utf8_lossy(data);
    match judge(&text, &meta) {
        Ok(Restart::Warm | Restart::Clean(_) | Restart::Region) => {}
        Err(message) => assert!(message.starts_with("[restart] "), "{message}"),
    }
});
