//! `stats cachedump <class> <limit>`'s arguments come from any client: checking them must end
//! in a class memcached has and a limit, or memcached's refusal, never a panic.
//!
//! Input: the words after `stats cachedump`, as a command line would carry them.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_proto::Tokens;
use shoal_server::stats::{cachedump_args, SLAB_CLASSES};

fuzz_target!(|data: &[u8]| {
    let words: Vec<&[u8]> = Tokens::new(data).collect();
    match cachedump_args(&words) {
        Ok((class, _)) => assert!(class < SLAB_CLASSES && words.len() >= 2),
        Err(refusal) => assert!(refusal.starts_with("CLIENT_ERROR ")),
    }
});
