//! The key rule of memcached's text protocol, the one place it is written: every parser,
//! client, router and load generator of Shoal asks here.

/// The longest key memcached accepts (`KEY_MAX_LENGTH`).
pub const KEY_MAX: usize = 250;

/// Whether memcached's text protocol would take `key` as a key. memcached itself only checks
/// the length; we also refuse control characters, which protocol.txt forbids (binary keys
/// travel base64-encoded in the meta protocol).
#[inline]
pub fn valid_key(key: &[u8]) -> bool {
    if key.is_empty() || key.len() > KEY_MAX {
        return false;
    }
    // Eight bytes at a time, without an early exit; the last word overlaps the one before it,
    // and a key shorter than a word is padded with a byte that passes.
    if key.len() < 8 {
        let mut word = [b'k'; 8];
        word[..key.len()].copy_from_slice(key);
        return word_ok(u64::from_le_bytes(word));
    }
    let words =
        key.chunks_exact(8).fold(true, |ok, w| ok & word_ok(u64::from_le_bytes(w.try_into().expect("8"))));
    let last = u64::from_le_bytes(key[key.len() - 8..].try_into().expect("8 bytes"));
    words & word_ok(last)
}

/// Whether every byte of `word` is above a space and not DEL (0x7f): bytes of 0x80 and up
/// pass; for the others, adding 0x5f sets a byte's top bit from 0x21 on and adding 1 only at
/// 0x7f (neither carries into the next byte).
#[inline(always)]
fn word_ok(word: u64) -> bool {
    const TOP: u64 = 0x8080_8080_8080_8080;
    let low = word & !TOP;
    let above_space = low + 0x5f5f_5f5f_5f5f_5f5f;
    let del = low + 0x0101_0101_0101_0101;
    (word | (above_space & !del)) & TOP == TOP
}

/// Why [`valid_key`] refuses `key`, in words a user can act on (`None`: it does not).
pub fn key_fault(key: &[u8]) -> Option<&'static str> {
    if valid_key(key) {
        None
    } else if key.is_empty() {
        Some("is empty")
    } else if key.len() > KEY_MAX {
        Some("is longer than 250 bytes")
    } else {
        Some("contains a space or a control character")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert!(valid_key(&[b'k'; KEY_MAX]));
        assert!(!valid_key(&[b'k'; KEY_MAX + 1]));
        assert!(!valid_key(b""));
        assert!(!valid_key(b"a\x01b"));
        assert!(!valid_key(b"a\x7f"));
        assert!(valid_key("ключ".as_bytes()));
    }

    #[test]
    fn every_byte_at_every_place_is_judged_as_the_rule_says() {
        for len in 1..=20 {
            for at in 0..len {
                for byte in 0..=255u8 {
                    let mut key = vec![b'k'; len];
                    key[at] = byte;
                    assert_eq!(valid_key(&key), byte > b' ' && byte != 0x7f, "{byte:#x} at {at} of {len}");
                }
            }
        }
    }

    #[test]
    fn faults_name_the_broken_rule() {
        assert_eq!(key_fault(b"user:42"), None);
        assert_eq!(key_fault(b""), Some("is empty"));
        assert_eq!(key_fault(&[b'k'; KEY_MAX + 1]), Some("is longer than 250 bytes"));
        assert_eq!(key_fault(b"a b"), Some("contains a space or a control character"));
        assert_eq!(key_fault(b"a\r\n"), Some("contains a space or a control character"));
    }
}
