//! The invalidator's parsers on arbitrary bytes: a `test_decoding` row, a rule and the keys it
//! makes of a change, and a message's key list. None may panic; keys they return are valid.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_invalidator::{parse_decoding_row, Row, Rule};

fuzz_target!(|data: &[u8]| {
    // The first line is a rule, the rest a row.
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(0);
    let (rule, row) = data.split_at(split);
    let rule = std::str::from_utf8(rule).ok().and_then(|r| Rule::parse(r).ok());
    if let Ok(parsed) = shoal_client::invalidation::parse_message(row) {
        for key in parsed.keys {
            assert!(shoal_route::validate_key(key.as_bytes()).is_ok());
        }
    }
    if let Ok(Row::Change { columns, .. }) = parse_decoding_row(row) {
        if let Some(Ok(keys)) = rule.map(|r| r.keys(&columns)) {
            for key in keys {
                assert!(shoal_route::validate_key(key.as_bytes()).is_ok());
            }
        }
    }
});
