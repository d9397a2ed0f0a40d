//! Deterministic tests of the region's memory behaviour: the memory limit, eviction and the
//! no-eviction mode, the second chance for items that are read, whole-segment reclamation of
//! expired, flushed and deleted items, the index as a limit, and refusal of bad input and of
//! corrupt region files.

use shoal_region::layout::{COOKIE_OFFSET, HEADER_BYTES, LAYOUT_VERSION};
use shoal_region::{Config, Delta, LimitError, Lookup, OpError, Reader, RegionError, Store, Writer};
use std::os::unix::fs::FileExt;

// ---------------------------------------------------------------------------------------------
// Helpers

/// A region file under /dev/shm, removed on drop (also when a test fails).
struct ShmFile(String);

impl ShmFile {
    fn new(tag: &str) -> ShmFile {
        let path = format!("/dev/shm/shoal-memory-{tag}-{}", std::process::id());
        let _ = std::fs::remove_file(&path);
        ShmFile(path)
    }

    fn len(&self) -> u64 {
        std::fs::metadata(&self.0).unwrap().len()
    }
}

impl Drop for ShmFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// 8 MiB: seven 1 MiB segments.
fn small() -> Config {
    Config { region_bytes: 8 << 20, max_item_bytes: 1 << 20, avg_item_bytes: 128 }
}

/// Keys of at most 12 bytes: a prefix of up to 3 bytes, a dash and 8 digits.
fn key(prefix: &str, i: usize) -> Vec<u8> {
    assert!(prefix.len() <= 3, "longer keys would not fit ITEM");
    format!("{prefix}-{i:08}").into_bytes()
}

/// A value that names its key and index, so a value of another key or a torn value shows.
fn value(prefix: &str, i: usize, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let seed = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ prefix.len() as u64;
    let mut x = seed;
    while v.len() < len {
        v.extend_from_slice(&xorshift(&mut x).to_le_bytes());
    }
    v.truncate(len);
    if len >= 8 {
        v[..8].copy_from_slice(&(i as u64).to_le_bytes());
    }
    v
}

/// Reads `key` through the reader (which marks nothing); the value if it is a hit.
fn read(r: &Reader, key: &[u8]) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    r.get(key, &mut v).unwrap().hit().map(|_| v)
}

/// Bytes one 1 KiB test item takes in a segment: 12-byte header, key of 10 to 12 bytes, value,
/// padding to 8.
const ITEM: usize = (12 + 12 + 1024usize).div_ceil(8) * 8;

/// Fills with `count` 1 KiB items of expiry `exptime`.
fn fill(w: &Writer, prefix: &str, count: usize, exptime: i64) {
    for i in 0..count {
        assert_eq!(w.set(&key(prefix, i), &value(prefix, i, 1024), 0, exptime), Ok(Store::Stored));
    }
}

/// One step of xorshift64: a cheap, repeatable stream of bits.
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// `len` bytes of noise from `seed` (the low byte of each xorshift step).
fn noise(mut seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|_| xorshift(&mut seed) as u8).collect()
}

mod bad_input;
mod large_items;
mod limit;
mod reclaim;
mod sizes;
