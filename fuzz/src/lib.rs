//! Helpers shared by the fuzz targets: tiny region files (a few KiB, so that every input can
//! afford a fresh copy and eviction starts after a handful of items), and a scratch file that
//! has no name in any directory, so a killed fuzzer leaves nothing behind.

use shoal_region::layout::{BUCKET_BYTES, HEADER_BYTES, SEGMENT_META_BYTES};
use shoal_region::{Config, Reader, Store, Writer};
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// The geometry of a tiny region.
#[derive(Clone, Copy, Debug)]
pub struct Tiny {
    pub bucket_count: usize,
    pub segment_count: usize,
    pub segment_bytes: usize,
    pub max_item_bytes: usize,
}

/// Tiny geometries the targets choose from: roomy, one bucket (both choices coincide, so the
/// index fills at 7 items), two buckets, and the smallest legal item limit.
pub const GEOMETRIES: [Tiny; 4] = [
    Tiny { bucket_count: 32, segment_count: 6, segment_bytes: 8192, max_item_bytes: 2048 },
    Tiny { bucket_count: 1, segment_count: 3, segment_bytes: 4096, max_item_bytes: 1024 },
    Tiny { bucket_count: 2, segment_count: 2, segment_bytes: 4096, max_item_bytes: 4096 },
    Tiny { bucket_count: 5, segment_count: 4, segment_bytes: 4096, max_item_bytes: 512 },
];

/// Offsets of the geometry fields in the region header (`RawHeader` in the region crate's
/// `layout.rs`). [`tiny_region`] checks them: a Reader must see exactly the geometry written.
mod field {
    pub const REGION_BYTES: usize = 16;
    pub const SEGMENT_BYTES: usize = 24;
    pub const SEGMENT_COUNT: usize = 28;
    pub const BUCKET_COUNT: usize = 32;
    pub const INDEX_OFFSET: usize = 40;
    pub const TABLE_OFFSET: usize = 48;
    pub const SEGMENTS_OFFSET: usize = 56;
    pub const MAX_ITEM_BYTES: usize = 80;
}

/// Where the parts of a tiny region start.
#[derive(Clone, Copy, Debug)]
pub struct Offsets {
    pub index: usize,
    pub table: usize,
    pub segments: usize,
    pub end: usize,
}

impl Tiny {
    pub fn offsets(&self) -> Offsets {
        let index = HEADER_BYTES;
        let table = (index + self.bucket_count * BUCKET_BYTES).next_multiple_of(64);
        let segments = (table + self.segment_count * SEGMENT_META_BYTES).next_multiple_of(64);
        let end = (segments + self.segment_count * self.segment_bytes).next_multiple_of(4096);
        Offsets { index, table, segments, end }
    }
}

fn unique() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// A file in /dev/shm, unlinked at once and reached through `/proc/self/fd/N`.
pub struct Scratch {
    file: File,
    pub path: PathBuf,
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

impl Scratch {
    pub fn new() -> Scratch {
        let name = format!("/dev/shm/shoal-fuzz-{}-{}", std::process::id(), unique());
        let file =
            OpenOptions::new().read(true).write(true).create_new(true).open(&name).expect("scratch file");
        std::fs::remove_file(&name).expect("unlink scratch file");
        let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        Scratch { file, path }
    }

    /// Replaces the file's contents (no mapping of it may be alive).
    pub fn set(&self, bytes: &[u8]) {
        self.file.set_len(0).expect("truncate scratch");
        self.file.write_all_at(bytes, 0).expect("write scratch");
    }

    pub fn contents(&self) -> Vec<u8> {
        let mut out = Vec::new();
        File::open(&self.path).and_then(|mut f| f.read_to_end(&mut out)).expect("read scratch");
        out
    }
}

/// The header of a freshly created region (magic, version, hash id, seed, cookie, clock...).
fn fresh_header() -> Vec<u8> {
    let name = format!("/dev/shm/shoal-fuzz-base-{}-{}", std::process::id(), unique());
    let _ = std::fs::remove_file(&name);
    let config = Config { region_bytes: 4 << 20, max_item_bytes: 1 << 20, avg_item_bytes: 128 };
    drop(Writer::create(&name, &config, true).expect("create base region"));
    let mut bytes = std::fs::read(&name).expect("read base region");
    std::fs::remove_file(&name).expect("remove base region");
    bytes.truncate(HEADER_BYTES);
    bytes
}

fn put(bytes: &mut [u8], at: usize, value: u64, width: usize) {
    bytes[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
}

/// An empty, cleanly detached region of geometry `g`: a real header with its geometry
/// rewritten, and zeroed index, table and segments.
pub fn tiny_region(g: Tiny) -> Vec<u8> {
    let o = g.offsets();
    let mut bytes = vec![0u8; o.end];
    bytes[..HEADER_BYTES].copy_from_slice(&fresh_header());
    put(&mut bytes, field::REGION_BYTES, o.end as u64, 8);
    put(&mut bytes, field::SEGMENT_BYTES, g.segment_bytes as u64, 4);
    put(&mut bytes, field::SEGMENT_COUNT, g.segment_count as u64, 4);
    put(&mut bytes, field::BUCKET_COUNT, g.bucket_count as u64, 8);
    put(&mut bytes, field::INDEX_OFFSET, o.index as u64, 8);
    put(&mut bytes, field::TABLE_OFFSET, o.table as u64, 8);
    put(&mut bytes, field::SEGMENTS_OFFSET, o.segments as u64, 8);
    put(&mut bytes, field::MAX_ITEM_BYTES, g.max_item_bytes as u64, 4);
    let scratch = Scratch::new();
    scratch.set(&bytes);
    let l = Reader::open(&scratch.path).expect("tiny region opens").layout().clone();
    assert_eq!(
        (l.region_bytes, l.segment_bytes, l.segment_count, l.bucket_count, l.table_offset, l.segments_offset),
        (o.end, g.segment_bytes, g.segment_count, g.bucket_count, o.table, o.segments),
        "the header layout changed: update `field` in fuzz/src/lib.rs"
    );
    assert_eq!(l.max_item_bytes, g.max_item_bytes);
    bytes
}

/// Keys the templates hold and the targets look up.
pub fn key(i: usize) -> Vec<u8> {
    match i % 26 {
        24 => vec![b'L'; 250],
        25 => b"bin\x00\xff key".to_vec(),
        i => format!("k{i}").into_bytes(),
    }
}

pub const KEYS: usize = 26;

/// A tiny region of geometry `g` after a workload that stores, reads (so items get a second
/// chance), appends, counts, touches, deletes and evicts (so some items carry an explicit
/// CAS). `crashed`: as the region was before the writer detached, as if it had been killed.
pub fn populated_region(g: Tiny, crashed: bool) -> Vec<u8> {
    let scratch = Scratch::new();
    scratch.set(&tiny_region(g));
    let w = Writer::open(&scratch.path, true).expect("attach tiny region");
    let mut buf = Vec::new();
    for round in 0..4usize {
        for i in 0..KEYS {
            let k = key(i);
            let len = (i * 37 + round * 11) % (g.max_item_bytes / 2);
            let value: Vec<u8> = (0..len).map(|j| (i + j + round) as u8).collect();
            let exptime = if i % 3 == 0 { 1000 } else { 0 };
            assert!(w.set(&k, &value, i as u32, exptime).is_ok());
            if i % 2 == 0 {
                let _ = w.get(&k, &mut buf);
            }
        }
        let _ = w.append(&key(round), b"+tail");
        let _ = w.prepend(&key(round + 1), b"head+");
        let _ = w.set(b"n", b"41", 0, 0);
        let _ = w.incr(b"n", 1);
        let _ = w.touch(&key(round + 2), 10);
        let _ = w.delete(&key(round + 3));
    }
    assert_eq!(w.set(b"last", b"value", 9, 0), Ok(Store::Stored));
    // While the writer is attached the region is marked in use: a copy taken now is what a
    // writer killed between two operations leaves behind.
    let live = scratch.contents();
    drop(w);
    if crashed {
        live
    } else {
        scratch.contents()
    }
}

/// Reads fuzz input a little at a time; yields zeros once it runs out.
pub struct Input<'a>(pub &'a [u8]);

impl<'a> Input<'a> {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    pub fn u8(&mut self) -> u8 {
        self.byte().unwrap_or(0)
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub fn u64(&mut self) -> u64 {
        self.u32() as u64 | (self.u32() as u64) << 32
    }

    /// Up to `n` bytes.
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.0.len());
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }
}
