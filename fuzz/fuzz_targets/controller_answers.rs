//! What `shoal controller` reads from each server it sizes: the `stats tenants` lines and a
//! tenant's hit-ratio `curve`. A server may be anything that answers on its port, so these
//! must end in a value or a clear error, never a panic; an accepted curve is a curve (ratios
//! between 0 and 1, never falling as the size grows), and answers for any size.
//!
//! Input: a selector byte (which answer), then its lines.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_controller::tenants::poll::{parse_curve, parse_tenant_stats};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let lines: Vec<String> = String::from_utf8_lossy(rest).lines().map(str::to_string).collect();
    let error = if which % 2 == 0 {
        parse_tenant_stats(&lines).err()
    } else {
        match parse_curve(&lines) {
            Ok(curve) => {
                let points = curve.points();
                assert!(points.windows(2).all(|w| w[0] <= w[1]), "ratios never fall");
                assert!(points.iter().all(|p| (0.0..=1.0).contains(p)), "ratios are ratios");
                for bytes in [0, curve.step(), u64::MAX] {
                    assert!((0.0..=1.0).contains(&curve.hit_ratio(bytes)));
                }
                None
            }
            Err(e) => Some(e),
        }
    };
    if let Some(e) = error {
        assert!(!e.is_empty(), "an error says what is wrong");
    }
});
