//! Key rules of the store: any 1 to [`MAX_KEY_LEN`] bytes (the meta protocol's base64 keys are
//! binary). The text protocol's stricter rule (no spaces or control characters) is
//! `shoal_proto::valid_key`.

use crate::error::OpError;
use crate::layout::MAX_KEY_LEN;

/// Checks the rules every stored key obeys: 1 to [`MAX_KEY_LEN`] bytes.
#[inline]
pub fn check_key(key: &[u8]) -> Result<(), OpError> {
    match key.len() {
        0 => Err(OpError::KeyEmpty),
        n if n > MAX_KEY_LEN => Err(OpError::KeyTooLong(n)),
        _ => Ok(()),
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
        assert!(check_key(b"a b\0").is_ok(), "binary keys are the protocol's business");
    }
}
