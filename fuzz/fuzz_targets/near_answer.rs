//! A near cache (`shoal server --upstream`) reads its upstream's answers to `mg <key> v f t c
//! k`: an answer from another process must end in a value of that key, a miss, or a clear
//! error — never a panic, never a value larger than the limit, never a value of another key;
//! an accepted value written back as a server writes it reads back the same. The `--upstream`
//! address is parsed without panicking too.
//!
//! Input: a key length byte (the key is that many bytes of `k`), then the answer bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_proto::answer::{frame_within, Limits, Shape};
use shoal_server::upstream::link::Address;
use shoal_server::upstream::read_meta;

const MAX_VALUE: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let Some((&len, answer)) = data.split_first() else { return };
    if let Ok(text) = std::str::from_utf8(answer) {
        let _ = Address::parse(text);
    }
    let key = vec![b'k'; usize::from(len % 8) + 1];
    let limits = Limits { stat_lines: 0, ..Limits::values(MAX_VALUE) };
    let Ok(Some(frame)) = frame_within(answer, Shape::Meta, &limits) else { return };
    match read_meta(&key, &answer[..frame.len]) {
        Ok(Some(found)) => {
            assert!(found.value.len() <= MAX_VALUE);
            let ttl = found.ttl.map_or(-1, i64::from);
            let mut again = format!(
                "VA {} f{} t{ttl} c{} k{}\r\n",
                found.value.len(),
                found.flags,
                found.cas,
                "k".repeat(key.len()),
            )
            .into_bytes();
            again.extend_from_slice(&found.value);
            again.extend_from_slice(b"\r\n");
            assert_eq!(read_meta(&key, &again), Ok(Some(found)));
        }
        Ok(None) => {}
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
