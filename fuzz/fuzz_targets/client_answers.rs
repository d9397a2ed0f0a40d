//! A server's answers are input to the client: `VALUE` headers, `STAT` lines and the `shm`
//! answer must parse into what they say or into nothing, never panic; what parses must print
//! back as the same line.
//!
//! Input: one answer line.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_client::local::ShmAnswer;
use shoal_proto::answer::{stat, ValueHeader};

fuzz_target!(|line: &[u8]| {
    if let Some(h) = ValueHeader::parse(line) {
        let cas = if line.split(|&b| b == b' ').count() == 5 { format!(" {}", h.cas) } else { String::new() };
        let printed = [b"VALUE ", h.key, format!(" {} {}{cas}", h.flags, h.len).as_bytes()].concat();
        // Numbers may have had leading zeros; everything else is as it came.
        assert_eq!(ValueHeader::parse(&printed), Some(h));
    }
    if let Some((name, value)) = stat(line) {
        assert_eq!(format!("STAT {name} {value}").as_bytes(), line);
    }
    if let Some(a) = ShmAnswer::parse(line) {
        let printed = format!("SHM {} {} {}", a.path.display(), a.offset, a.cookie);
        assert_eq!(ShmAnswer::parse(printed.as_bytes()), Some(a));
    }
});
