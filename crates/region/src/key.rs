//! Key rules. The store accepts any 1–250 bytes (the meta protocol's base64 keys are binary);
//! the text protocol additionally forbids spaces and control characters.

use crate::error::OpError;
use crate::layout::MAX_KEY_LEN;

/// Checks the rules every stored key obeys: 1 to 250 bytes.
#[inline]
pub fn check_key(key: &[u8]) -> Result<(), OpError> {
    match key.len() {
        0 => Err(OpError::KeyEmpty),
        n if n > MAX_KEY_LEN => Err(OpError::KeyTooLong(n)),
        _ => Ok(()),
    }
}

/// Checks a key as memcached's text protocol does: [`check_key`], and no byte that is a space
/// or a control character.
pub fn check_text_key(key: &[u8]) -> Result<(), OpError> {
    check_key(key)?;
    match key.iter().position(|&b| b <= b' ' || b == 0x7f) {
        Some(position) => Err(OpError::KeyInvalidByte { byte: key[position], position }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_rules() {
        assert_eq!(check_key(b""), Err(OpError::KeyEmpty));
        assert_eq!(check_key(&[b'a'; 251]), Err(OpError::KeyTooLong(251)));
        assert!(check_key(&[b'a'; 250]).is_ok());
        assert!(check_key(b"a b\0").is_ok());
        assert_eq!(check_text_key(b"a b"), Err(OpError::KeyInvalidByte { byte: b' ', position: 1 }));
        assert_eq!(check_text_key(b"ab\n"), Err(OpError::KeyInvalidByte { byte: b'\n', position: 2 }));
        assert_eq!(check_text_key(b"\x7f"), Err(OpError::KeyInvalidByte { byte: 0x7f, position: 0 }));
        assert!(check_text_key("ключ".as_bytes()).is_ok());
    }
}
