//! A spool file left by an earlier run is untrusted input to a starting router or
//! invalidator: a disk can tear it, an operator can copy the wrong one in. Whatever its bytes,
//! reading it must not panic, and what it accepts must lie inside the file.
//!
//! Input: the file's bytes; the first byte also picks the offset a delivery had reached.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

/// One file per fuzzing process, rewritten for each input.
fn path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| std::env::temp_dir().join(format!("shoal-fuzz-spool-{}.spool", std::process::id())))
}

fuzz_target!(|data: &[u8]| {
    std::fs::write(path(), data).unwrap();
    let offset = data.first().map_or(0, |&b| u64::from(b) % (data.len() as u64 + 1));
    if let Ok((deletes, end)) = shoal_spool::scan(path(), offset) {
        assert!(offset <= end && end <= data.len() as u64, "records end at {end} of {}", data.len());
        // Every delete is a request of at least one byte.
        assert!(deletes <= end - offset, "{deletes} deletes in {} bytes", end - offset);
    }
});
