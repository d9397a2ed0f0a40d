//! A region file is input from outside the process: a reader maps whatever file it is given,
//! and a writer attaches to whatever it finds. Neither may panic, crash or hang on any file;
//! errors are fine.
//!
//! Input: one mode byte, then either the raw file (mode % 8 == 7) or patches applied to a
//! valid, populated tiny region (cleanly detached, or left by a "crashed" writer), which
//! reaches much deeper than random bytes: header fields, bucket words, segment table entries
//! and item bytes are all in reach.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_region::{OpError, Reader, Writer};
use shoal_region_fuzz::{key, populated_region, Input, Offsets, Scratch, GEOMETRIES, KEYS};
use std::path::Path;
use std::sync::OnceLock;

struct Templates {
    scratch: Scratch,
    regions: Vec<(Vec<u8>, Offsets)>,
}

fn templates() -> &'static Templates {
    static T: OnceLock<Templates> = OnceLock::new();
    T.get_or_init(|| {
        let mut regions = Vec::new();
        for g in GEOMETRIES {
            for crashed in [false, true] {
                regions.push((populated_region(g, crashed), g.offsets()));
            }
        }
        Templates { scratch: Scratch::new(), regions }
    })
}

/// Applies patches decoded from `input` to `bytes`.
fn patch(bytes: &mut Vec<u8>, o: &Offsets, input: &mut Input) {
    while let Some(op) = input.byte() {
        if bytes.is_empty() {
            return;
        }
        match op % 8 {
            // A run of bytes at an offset from the start of one part of the region.
            0..=4 => {
                let base = [0, o.index, o.table, o.segments, 0][op as usize % 8];
                let off = input.u16() as usize;
                let len = input.u8() as usize % 16 + 1;
                let data = input.take(len);
                let at = (base + off) % bytes.len();
                let n = data.len().min(bytes.len() - at);
                bytes[at..at + n].copy_from_slice(&data[..n]);
            }
            // A 32-bit word of the header.
            5 => {
                let at = (input.u8() as usize % 64) * 4;
                let v = input.u32();
                // The file may have been truncated below the header by an earlier patch.
                if let Some(word) = bytes.get_mut(at..at + 4) {
                    word.copy_from_slice(&v.to_le_bytes());
                }
            }
            // One bit anywhere.
            6 => {
                let at = (input.u32() as usize) % bytes.len();
                bytes[at] ^= 1 << (input.u8() % 8);
            }
            // Truncate or extend the file.
            _ => {
                let delta = input.u16() as i16 as isize;
                let len = (bytes.len() as isize + delta).clamp(0, 2 * bytes.len() as isize);
                bytes.resize(len as usize, 0);
            }
        }
    }
}

fn exercise(path: &Path, evict: bool) {
    let mut buf = Vec::new();
    if let Ok(r) = Reader::open(path) {
        let _ = (r.layout(), r.cookie(), r.generation(), r.clock());
        // A bucket left locked answers Busy only after many retries (by design): one is enough.
        for i in 0..KEYS {
            if r.get(&key(i), &mut buf) == Err(OpError::Busy) {
                break;
            }
        }
        let _ = r.get(b"n", &mut buf);
    }
    let Ok(w) = Writer::open(path, evict) else { return };
    for i in 0..KEYS {
        let _ = w.get(&key(i), &mut buf);
    }
    let _ = w.set(&key(1), b"fresh", 1, 0);
    let _ = w.append(&key(2), b"+more");
    let _ = w.prepend(&key(3), b"more+");
    let _ = w.incr(b"n", 5);
    let _ = w.decr(&key(4), 1);
    let _ = w.delete(&key(5));
    let _ = w.touch(&key(6), 100);
    let _ = w.add(&key(7), b"added", 7, 0);
    let _ = w.replace(&key(8), b"replaced", 8, 0);
    if let Ok(l) = w.get(&key(9), &mut buf) {
        if let Some(info) = l.hit() {
            let _ = w.cas(&key(9), b"swapped", 9, 0, info.cas);
        }
    }
    let _ = w.stats();
    // Write twice the region's size, so that every segment is evicted and so walked.
    let l = w.layout().clone();
    let value = vec![b'v'; (l.max_item_bytes / 2).min(1500)];
    let total = 2 * l.segment_count * l.segment_bytes;
    let mut written = 0;
    let mut i = 0;
    while written < total && i < 5000 {
        let k = format!("fill{}", i % 97);
        let exptime = [0, 5, 100, 3600][i % 4];
        if w.set(k.as_bytes(), &value, i as u32, exptime).is_err() {
            break;
        }
        written += value.len();
        i += 1;
    }
    w.tick(w.clock().saturating_add(200));
    for i in 0..KEYS {
        let _ = w.get(&key(i), &mut buf);
    }
    w.flush(0);
    let _ = w.set(b"after", b"flush", 0, 0);
    if let Ok(r) = Reader::open(path) {
        let _ = r.get(b"after", &mut buf);
        let _ = r.get(&key(1), &mut buf);
    }
    drop(w);
    // After a clean detach the region must attach again.
    if let Ok(w) = Writer::open(path, evict) {
        let _ = w.get(b"after", &mut buf);
        let _ = w.set(b"again", b"value", 0, 0);
    }
}

fuzz_target!(|data: &[u8]| {
    let t = templates();
    let mut input = Input(data);
    let Some(mode) = input.byte() else { return };
    let bytes = if mode % 8 == 7 {
        input.0.to_vec()
    } else {
        let (template, offsets) = &t.regions[(mode as usize >> 3) % t.regions.len()];
        let mut bytes = template.clone();
        patch(&mut bytes, offsets, &mut input);
        bytes
    };
    t.scratch.set(&bytes);
    exercise(&t.scratch.path, mode & 0x80 == 0);
});
