//! A near cache (`shoal server --upstream`) reads the owed-deletes file an earlier run left
//! (`--owed-deletes`, or beside `-e`): arbitrary bytes must be read as that many deletes (each
//! a whole `delete` line, at most the bound), a torn tail, or a clear error — never a panic.
//! Deletes read back are written back as the near cache writes them and read the same again.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_server::upstream::owed::parse;

const UPSTREAM: &str = "127.0.0.1:5000";
const MAX: usize = 64;

fuzz_target!(|data: &[u8]| {
    match parse(data, UPSTREAM, MAX) {
        Ok(loaded) => {
            assert!(loaded.deletes.len() <= MAX && loaded.torn <= data.len());
            let mut again = format!("shoal near cache owed deletes v1 to {UPSTREAM}\n").into_bytes();
            loaded.deletes.iter().for_each(|d| again.extend_from_slice(d));
            let reread = parse(&again, UPSTREAM, MAX).expect("what was read reads again");
            assert_eq!((reread.deletes, reread.torn), (loaded.deletes, 0));
        }
        Err(e) => assert!(!e.is_empty()),
    }
});
