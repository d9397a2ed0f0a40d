//! Jump consistent hash (Lamping and Veach, 2014): a 64-bit key hash to one of `n` buckets,
//! moving only 1/(n+1) of keys when a bucket is added, with no table at all.

/// The bucket in `0..buckets` of a 64-bit key hash. `buckets` must be at least 1.
pub fn jump(mut key: u64, buckets: u32) -> u32 {
    debug_assert!(buckets > 0);
    let (mut b, mut j): (i64, i64) = (-1, 0);
    while j < i64::from(buckets) {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    b as u32
}

#[cfg(test)]
mod tests {
    use super::jump;

    #[test]
    fn moves_keys_only_to_the_new_bucket() {
        assert_eq!(jump(0, 1), 0);
        assert_eq!(jump(u64::MAX, 1), 0);
        let mut previous: Vec<u32> =
            (0..10_000u64).map(|k| jump(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), 10)).collect();
        for n in 11..40 {
            let now: Vec<u32> =
                (0..10_000u64).map(|k| jump(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), n)).collect();
            for (a, b) in previous.iter().zip(&now) {
                assert!(a == b || *b == n - 1, "a key moved between old buckets");
            }
            previous = now;
        }
    }
}
