//! Reading memcached's answers: `VALUE` headers, status words, `STAT` lines, errors.

use crate::error::Error;

/// An error line (`ERROR`, `CLIENT_ERROR …`, `SERVER_ERROR …`) as an [`Error::Server`];
/// anything else as a protocol error naming what was expected.
pub fn unexpected(line: &[u8], expected: &str) -> Error {
    let text = String::from_utf8_lossy(line).into_owned();
    if line == b"ERROR" || line.starts_with(b"CLIENT_ERROR") || line.starts_with(b"SERVER_ERROR") {
        Error::Server(text)
    } else {
        Error::Protocol(format!("expected {expected}, got {text:?}"))
    }
}

/// A `VALUE <key> <flags> <bytes> [<cas>]` header.
#[derive(Debug, PartialEq, Eq)]
pub struct ValueHeader<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The client flags.
    pub flags: u32,
    /// The length of the value block that follows.
    pub len: usize,
    /// The CAS unique (`gets`), or 0.
    pub cas: u64,
}

impl<'a> ValueHeader<'a> {
    /// Parses a `VALUE` line; `None` if the line is something else.
    pub fn parse(line: &'a [u8]) -> Option<ValueHeader<'a>> {
        let mut words = line.strip_prefix(b"VALUE ")?.split(|&b| b == b' ');
        let key = words.next()?;
        let flags = number(words.next()?)?;
        let len = number(words.next()?)?;
        let cas = words.next().map_or(Some(0), number)?;
        words.next().is_none().then_some(ValueHeader { key, flags, len, cas })
    }
}

/// A decimal number (digits only, as servers send them) of type `T`.
pub fn number<T: TryFrom<u64>>(word: &[u8]) -> Option<T> {
    shoal_proto::digits(word).and_then(|n| T::try_from(n).ok())
}

/// A `STAT <name> <value>` line as its name and value.
pub fn stat(line: &[u8]) -> Option<(String, String)> {
    let rest = std::str::from_utf8(line.strip_prefix(b"STAT ")?).ok()?;
    let (name, value) = rest.split_once(' ')?;
    Some((name.to_string(), value.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_headers() {
        let h = ValueHeader::parse(b"VALUE k 5 10 77").unwrap();
        assert_eq!(h, ValueHeader { key: b"k", flags: 5, len: 10, cas: 77 });
        assert_eq!(ValueHeader::parse(b"VALUE k 5 10").unwrap().cas, 0);
        for bad in [&b"END"[..], b"VALUE k", b"VALUE k x 1", b"VALUE k 1 2 3 4", b"VALUE k 1 -2"] {
            assert!(ValueHeader::parse(bad).is_none(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn errors_and_stats() {
        assert!(
            matches!(unexpected(b"SERVER_ERROR out of memory", "STORED"), Error::Server(s) if s.contains("memory"))
        );
        assert!(matches!(unexpected(b"ERROR", "STORED"), Error::Server(_)));
        assert!(matches!(unexpected(b"WHAT", "STORED"), Error::Protocol(s) if s.contains("STORED")));
        assert_eq!(stat(b"STAT version 1.6.18 x"), Some(("version".into(), "1.6.18 x".into())));
        assert_eq!(stat(b"END"), None);
    }
}
