//! A client's hints area is untrusted input to the server: whatever bytes a client puts in
//! it, opening and draining it, and applying its locations to a region, must not panic,
//! must read at most one ring of entries per drain, and must leave every stored item readable.
//!
//! Sampled reads (version 3) too: draining them must read at most one ring per drain, and
//! decode whatever the records say without panicking.
//!
//! Input: a first byte choosing the header, then the area's contents (padded or cut to its
//! size; the same bytes again at the start of the sampled reads' section, so short inputs reach
//! its head and ring), then drained twice. An odd first byte keeps the contents as they are,
//! header included (a wrong magic or version is refused); an even one writes a valid
//! version-3 header (magic and version) over them, so most inputs open and the fuzzer explores
//! the counters, heads and rings a drain reads: left to find the 8-byte magic by mutation, it
//! never did (every input stopped at the magic check).
//! `fuzz/dict/hints_area.dict` gives it the magic and versions for the odd case.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_region::hints::{HintsReader, SampledRead, HINTS_BYTES, RING_ENTRIES, SAMPLE_ENTRIES};
use shoal_region::{Config, Writer};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::OnceLock;

fn region() -> &'static Writer {
    static REGION: OnceLock<Writer> = OnceLock::new();
    REGION.get_or_init(|| {
        let config = Config { region_bytes: 8 << 20, ..Config::default() };
        let w = Writer::create_anonymous(&config, true).unwrap();
        for i in 0..1000 {
            w.set(format!("key:{i}").as_bytes(), b"value", 0, 0).unwrap();
        }
        w
    })
}

/// The area's magic number and the version the library writes (`shoal_region::hints`): if
/// either changes, every even input fails to open and the target stops at once (below).
const MAGIC: &[u8; 8] = b"SHOALHNT";
const VERSION: u64 = 3;

/// A sealed memfd holding `bytes`, with a valid header over them if `valid_header`, as a client
/// would hand it over.
fn area(bytes: &[u8], valid_header: bool) -> std::fs::File {
    // SAFETY: memfd_create with a valid name; the result is checked and owned once.
    let fd = unsafe { libc::memfd_create(c"fuzz-hints".as_ptr(), libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0);
    // SAFETY: a fresh descriptor nothing else owns.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut contents = bytes.to_vec();
    contents.resize(HINTS_BYTES, 0);
    let samples = HINTS_BYTES - SAMPLE_ENTRIES * 16 - 64;
    let n = bytes.len().min(HINTS_BYTES - samples);
    contents[samples..samples + n].copy_from_slice(&bytes[..n]);
    if valid_header {
        contents[..8].copy_from_slice(MAGIC);
        contents[8..16].copy_from_slice(&VERSION.to_le_bytes());
    }
    file.write_all(&contents).unwrap();
    // SAFETY: fcntl on a descriptor we own, with an integer argument.
    assert_eq!(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) }, 0);
    file
}

fuzz_target!(|input: &[u8]| {
    let Some((&choice, bytes)) = input.split_first() else { return };
    let valid_header = choice & 1 == 0;
    let w = region();
    let file = area(bytes, valid_header);
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    let mut reader = match HintsReader::open(std::path::Path::new(&path)) {
        Ok(reader) => reader,
        Err(_) if !valid_header => return,
        Err(why) => panic!("an area with a valid header is refused ({why}): update MAGIC/VERSION"),
    };
    let mut samples = reader.samples();
    for _ in 0..2 {
        if let Some(samples) = samples.as_mut() {
            let drained = samples.drain(|_, read| {
                if let Some(SampledRead::Hit { bytes, .. }) = read {
                    assert!(bytes < 1 << 24);
                }
            });
            assert!(drained.read <= SAMPLE_ENTRIES as u64);
        }
        let mut entries = 0;
        reader.drain(|location| {
            entries += 1;
            w.mark_read(location);
        });
        assert!(entries <= RING_ENTRIES);
    }
    let mut value = Vec::new();
    for i in (0..1000).step_by(97) {
        assert!(w.get(format!("key:{i}").as_bytes(), &mut value).unwrap().hit().is_some());
        assert_eq!(value, b"value");
    }
});
