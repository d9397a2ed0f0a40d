//! Authentication messages: SASL PLAIN's (RFC 4616) for the binary protocol's `-S`, and the
//! ascii protocol's `-Y` token, `set <any> <any> <any> <n>\r\n<user> <password>\r\n`, read
//! as memcached 1.6.18's `try_read_command_asciiauth` reads it.

use crate::token::{parse_u32, split, Tokens};
use crate::MAX_LINE;

/// The parts of a SASL PLAIN message: `[authzid] NUL authcid NUL password`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plain<'a> {
    /// The identity to act as (empty: the user's own).
    pub authzid: &'a [u8],
    pub user: &'a [u8],
    pub password: &'a [u8],
}

/// Splits a PLAIN message; `None` if it has not exactly two NULs (Cyrus SASL refuses it).
pub fn parse_plain(message: &[u8]) -> Option<Plain<'_>> {
    let mut parts = message.splitn(3, |&b| b == 0);
    let (authzid, user, password) = (parts.next()?, parts.next()?, parts.next()?);
    (!password.contains(&0)).then_some(Plain { authzid, user, password })
}

/// What [`parse_ascii_auth`] found at the start of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsciiAuth<'a> {
    /// Call again with the same bytes and more.
    Incomplete,
    /// A token: check it, then answer `STORED` or `CLIENT_ERROR authentication failure`.
    Credentials { user: &'a [u8], password: &'a [u8], consumed: usize },
    /// Not a token: answer `reply` (without `\r\n`), drop `consume` bytes.
    Refused { reply: &'static str, consume: usize },
    /// A line too long without a newline, or a token larger than `max_len`: close.
    Close,
}

/// Reads the authentication token at the start of `buf`; a token whose bytes would exceed
/// `max_len` closes the connection rather than being buffered (memcached would wait for it).
pub fn parse_ascii_auth(buf: &[u8], max_len: usize) -> AsciiAuth<'_> {
    // memcached waits for two bytes, then for a newline within 2048.
    if buf.len() < 2 {
        return AsciiAuth::Incomplete;
    }
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        return if buf.len() > MAX_LINE { AsciiAuth::Close } else { AsciiAuth::Incomplete };
    };
    // memcached keeps the '\r' in the line: its number parser stops at it.
    let line = &buf[..nl];
    let ([command, _, _, _, size], count) = split::<5>(Tokens::new(line));
    let size = size.strip_suffix(b"\r").unwrap_or(size);
    let size = match parse_u32(size) {
        Some(n) if count >= 5 && command == b"set" => n as usize,
        _ => return AsciiAuth::Refused { reply: "CLIENT_ERROR unauthenticated", consume: nl + 1 },
    };
    let end = nl + 1 + size + 2;
    if end > max_len {
        return AsciiAuth::Close;
    }
    let Some(block) = buf.get(nl + 1..end) else { return AsciiAuth::Incomplete };
    let Some(payload) = block.strip_suffix(b"\r\n") else {
        return AsciiAuth::Refused { reply: "CLIENT_ERROR bad command line termination", consume: end };
    };
    let ([user, password], count) = split::<2>(Tokens::new(payload));
    if count < 2 {
        return AsciiAuth::Refused { reply: "CLIENT_ERROR bad authentication token format", consume: end };
    }
    AsciiAuth::Credentials { user, password, consumed: end }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_messages_split_at_their_two_nuls() {
        let p = parse_plain(b"\0alice\0secret").unwrap();
        assert_eq!((p.authzid, p.user, p.password), (&b""[..], &b"alice"[..], &b"secret"[..]));
        assert_eq!(parse_plain(b"bob\0alice\0").unwrap().authzid, b"bob");
        assert_eq!(parse_plain(b"alice\0secret"), None);
        assert_eq!(parse_plain(b"\0a\0b\0c"), None);
        assert_eq!(parse_plain(b""), None);
    }

    #[test]
    fn ascii_tokens_as_memcached_reads_them() {
        let ok = b"set any 0 0 12\r\nalice secret\r\nget a\r\n";
        let creds = AsciiAuth::Credentials { user: b"alice", password: b"secret", consumed: 30 };
        assert_eq!(parse_ascii_auth(ok, 4096), creds);
        for cut in 0..30 {
            assert_eq!(parse_ascii_auth(&ok[..cut], 4096), AsciiAuth::Incomplete, "{cut}");
        }
        let refused = |reply, consume| AsciiAuth::Refused { reply, consume };
        assert_eq!(parse_ascii_auth(b"get a\r\n", 4096), refused("CLIENT_ERROR unauthenticated", 7));
        assert_eq!(parse_ascii_auth(b"set a 0 0 x\r\n", 4096), refused("CLIENT_ERROR unauthenticated", 13));
        assert_eq!(parse_ascii_auth(b"set a 0 0\r\n", 4096), refused("CLIENT_ERROR unauthenticated", 11));
        let bad_end = b"set a 0 0 3\r\nabcde";
        assert_eq!(parse_ascii_auth(bad_end, 4096), refused("CLIENT_ERROR bad command line termination", 18));
        let one = b"set a 0 0 5\r\nalice\r\n";
        assert_eq!(parse_ascii_auth(one, 4096), refused("CLIENT_ERROR bad authentication token format", 20));
        assert_eq!(parse_ascii_auth(b"set a 0 0 4000000000\r\n", 4096), AsciiAuth::Close);
        assert_eq!(parse_ascii_auth(&[b'x'; MAX_LINE + 1], 4096), AsciiAuth::Close);
    }
}
