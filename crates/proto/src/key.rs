//! The key rule of memcached's text protocol, the one place it is written: every parser,
//! client, router and load generator of Shoal asks here.

/// The longest key memcached accepts (`KEY_MAX_LENGTH`).
pub const KEY_MAX: usize = 250;

/// Whether memcached's text protocol would take `key` as a key. memcached itself only checks
/// the length; we also refuse control characters, which protocol.txt forbids (binary keys
/// travel base64-encoded in the meta protocol).
pub fn valid_key(key: &[u8]) -> bool {
    // Every byte is looked at (no early exit), which lets the compiler check many at once.
    !key.is_empty() && key.len() <= KEY_MAX && key.iter().fold(true, |ok, &b| ok & (b > b' ') & (b != 0x7f))
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
    fn faults_name_the_broken_rule() {
        assert_eq!(key_fault(b"user:42"), None);
        assert_eq!(key_fault(b""), Some("is empty"));
        assert_eq!(key_fault(&[b'k'; KEY_MAX + 1]), Some("is longer than 250 bytes"));
        assert_eq!(key_fault(b"a b"), Some("contains a space or a control character"));
        assert_eq!(key_fault(b"a\r\n"), Some("contains a space or a control character"));
    }
}
