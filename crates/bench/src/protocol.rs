//! The wire: encoding gets and sets in memcached's text, meta or binary protocol, and
//! recognising the end of each reply in a connection's read buffer. Text and meta requests are
//! written by `shoal_proto`'s encoders and their answers found by its framer
//! (`shoal_proto::frame`), as the client and the router do; the binary protocol is this
//! module's own ([`binary`]).
//!
//! Replies are parsed from the start of the unconsumed bytes each time more arrive; a reply
//! is a few lines (or packets), so re-scanning a partial one costs nothing worth a state
//! machine.

mod binary;

use crate::keys::Key;
use shoal_proto::answer::{blocks, is_error_line};
use shoal_proto::{encode_request, encode_retrieval, frame, Body, Op, Shape, MAX_VALUE_BYTES};
use std::fmt;

/// Which of memcached's protocols requests are written in (`--protocol`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// `get k1 k2 …` (one command per multiget) and `set k 0 0 <len>`.
    Text,
    /// `mg <k> v` (one command per key of a multiget) and `ms <k> <len>`.
    Meta,
    /// memcached's binary protocol: `GETK` (a multiget: `GETKQ` per key, then `NOOP`, as
    /// libmemcached sends it) and `SET`.
    Binary,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Text => "text",
            Protocol::Meta => "meta",
            Protocol::Binary => "binary",
        })
    }
}

/// What a request in flight asked for, which says what its reply looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    /// A get of this many keys (a multiget when more than one).
    Get {
        /// Keys asked for.
        keys: u32,
    },
    /// One set.
    Set,
}

/// What one request's reply said.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reply {
    /// Keys that came back with a value.
    pub hits: u32,
    /// Keys asked for that did not.
    pub misses: u32,
    /// Error answers (`ERROR`, `CLIENT_ERROR …`, `SERVER_ERROR …`, or a set not stored).
    pub errors: u32,
}

/// The result of looking for a reply at the start of the unconsumed bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Not all of it has arrived yet.
    Incomplete,
    /// A whole reply, `consumed` bytes long.
    Complete {
        /// What it said.
        reply: Reply,
        /// Its length in bytes.
        consumed: usize,
    },
}

/// A reply that is not what the protocol allows for the request: the server does not speak
/// the protocol, or the stream is out of step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnexpectedReply(pub String);

impl fmt::Display for UnexpectedReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unexpected reply {:?}", self.0)
    }
}

impl Protocol {
    /// Appends a get of `keys` to `out`.
    pub fn encode_get(self, keys: impl IntoIterator<Item = Key>, out: &mut Vec<u8>) {
        match self {
            Protocol::Text => encode_retrieval(Op::Get, 0, keys, out),
            Protocol::Meta => {
                let value = Body::Meta { flags: &b"v"[..], data: None, base64: false };
                for key in keys {
                    encode_request(Op::MetaGet, key.as_bytes(), 0, &value, out);
                }
            }
            Protocol::Binary => binary::encode_get(keys, out),
        }
    }

    /// Appends a set of `key` to `value` (flags 0, no expiry) to `out`.
    pub fn encode_set(self, key: &Key, value: &[u8], out: &mut Vec<u8>) {
        let (op, body) = match self {
            Protocol::Text => (Op::Set, Body::Store { flags: 0, data: value, extra: None }),
            Protocol::Meta => (Op::MetaSet, Body::Meta { flags: &b""[..], data: Some(value), base64: false }),
            Protocol::Binary => return binary::encode_set(key, value, out),
        };
        encode_request(op, key.as_bytes(), 0, &body, out);
    }

    /// Looks for the whole reply to a `kind` request at the start of `buf`.
    pub fn parse_reply(self, kind: RequestKind, buf: &[u8]) -> Result<Parsed, UnexpectedReply> {
        match (self, kind) {
            (Protocol::Text, RequestKind::Get { keys }) => parse_text_get(keys, buf),
            (Protocol::Meta, RequestKind::Get { keys }) => parse_meta_gets(keys, buf),
            (Protocol::Binary, RequestKind::Get { keys }) => binary::parse_get(keys, buf),
            (Protocol::Binary, RequestKind::Set) => binary::parse_set(buf),
            (protocol, RequestKind::Set) => {
                let Some((line, consumed)) = answer(buf, Shape::Line)? else { return Ok(Parsed::Incomplete) };
                let line = &line[..line.len() - 2];
                let (stored, refused) = if protocol == Protocol::Text {
                    (line == b"STORED", [&b"NOT_STORED"[..], b"EXISTS", b"NOT_FOUND"].contains(&line))
                } else {
                    let refused = [&b"NS"[..], b"EX", b"NF"].iter().any(|code| starts_word(line, code));
                    (line == b"HD" || line.starts_with(b"HD "), refused)
                };
                if !(stored || refused || is_error_line(line)) {
                    return Err(unexpected(line));
                }
                Ok(Parsed::Complete {
                    reply: Reply { errors: u32::from(!stored), ..Reply::default() },
                    consumed,
                })
            }
        }
    }
}

/// The answer of `shape` at the start of `buf` (without a `VALUE` list's `END`) and the bytes
/// it takes, if it is all there.
fn answer(buf: &[u8], shape: Shape) -> Result<Option<(&[u8], usize)>, UnexpectedReply> {
    let found = frame(buf, shape, MAX_VALUE_BYTES).map_err(|e| UnexpectedReply(e.to_string()))?;
    Ok(found.map(|f| (&buf[..f.answer], f.len)))
}

/// `VALUE <key> <flags> <bytes> [<cas>]` lines with their data, then `END`; or one error line.
fn parse_text_get(keys: u32, buf: &[u8]) -> Result<Parsed, UnexpectedReply> {
    let Some((values, consumed)) = answer(buf, Shape::Values)? else { return Ok(Parsed::Incomplete) };
    if values.ends_with(b"\r\n") && is_error_line(&values[..values.len() - 2]) {
        return Ok(Parsed::Complete { reply: Reply { errors: 1, ..Reply::default() }, consumed });
    }
    let hits = blocks(values).count() as u32;
    Ok(Parsed::Complete { reply: Reply { hits, misses: keys.saturating_sub(hits), errors: 0 }, consumed })
}

/// One answer per key: `VA <bytes> [flags]` with data, `EN` (miss), `HD` (hit without value),
/// or an error line.
fn parse_meta_gets(keys: u32, buf: &[u8]) -> Result<Parsed, UnexpectedReply> {
    let mut reply = Reply::default();
    let mut pos = 0;
    for _ in 0..keys {
        let Some((meta, len)) = answer(&buf[pos..], Shape::Meta)? else { return Ok(Parsed::Incomplete) };
        pos += len;
        let line = &meta[..meta.iter().position(|&b| b == b'\r').unwrap_or(meta.len())];
        if line.starts_with(b"VA ") || starts_word(line, b"HD") {
            reply.hits += 1;
        } else if line == b"EN" {
            reply.misses += 1;
        } else if is_error_line(line) {
            reply.errors += 1;
        } else {
            return Err(unexpected(line));
        }
    }
    Ok(Parsed::Complete { reply, consumed: pos })
}

fn starts_word(line: &[u8], word: &[u8]) -> bool {
    line.strip_prefix(word).is_some_and(|rest| rest.is_empty() || rest[0] == b' ')
}

fn unexpected(line: &[u8]) -> UnexpectedReply {
    UnexpectedReply(String::from_utf8_lossy(line).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::KeySpace;

    fn keys(n: u64) -> impl Iterator<Item = Key> {
        let space = KeySpace::new(100, 6).unwrap();
        (0..n).map(move |i| space.key(i))
    }

    fn encoded(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn requests_are_encoded_as_memcached_expects() {
        let key = KeySpace::new(100, 6).unwrap().key(7);
        assert_eq!(encoded(|o| Protocol::Text.encode_get(keys(1), o)), "get key:00\r\n");
        assert_eq!(encoded(|o| Protocol::Text.encode_get(keys(3), o)), "get key:00 key:01 key:02\r\n");
        assert_eq!(encoded(|o| Protocol::Meta.encode_get(keys(2), o)), "mg key:00 v\r\nmg key:01 v\r\n");
        assert_eq!(encoded(|o| Protocol::Text.encode_set(&key, b"abc", o)), "set key:07 0 0 3\r\nabc\r\n");
        assert_eq!(encoded(|o| Protocol::Meta.encode_set(&key, b"", o)), "ms key:07 0\r\n\r\n");
    }

    fn complete(hits: u32, misses: u32, errors: u32, consumed: usize) -> Result<Parsed, UnexpectedReply> {
        Ok(Parsed::Complete { reply: Reply { hits, misses, errors }, consumed })
    }

    #[test]
    fn text_get_replies_count_hits_and_misses_and_wait_for_end() {
        let get = |keys, buf: &[u8]| Protocol::Text.parse_reply(RequestKind::Get { keys }, buf);
        let two_hits = b"VALUE key:00 0 3\r\nabc\r\nVALUE key:02 5 2 99\r\nxy\r\nEND\r\n";
        assert_eq!(get(3, two_hits), complete(2, 1, 0, two_hits.len()));
        assert_eq!(get(1, b"END\r\nVALUE"), complete(0, 1, 0, 5), "stops at the reply's end");
        // Every proper prefix is incomplete, including a data block holding "END\r\n".
        let tricky = b"VALUE k 0 5\r\nEND\r\n\r\nEND\r\n";
        for cut in 0..tricky.len() {
            assert_eq!(get(1, &tricky[..cut]), Ok(Parsed::Incomplete), "cut at {cut}");
        }
        assert_eq!(get(1, tricky), complete(1, 0, 0, tricky.len()));
        assert_eq!(get(1, b"SERVER_ERROR out of memory\r\n"), complete(0, 0, 1, 28));
        assert!(get(1, b"VALUE k 0 3\r\nabcd\r\nEND\r\n").is_err(), "data longer than declared");
        assert!(get(1, b"VALUE k 0 x\r\n").is_err());
        assert!(get(1, b"STORED\r\n").is_err());
    }

    #[test]
    fn meta_get_replies_take_one_answer_per_key() {
        let get = |keys, buf: &[u8]| Protocol::Meta.parse_reply(RequestKind::Get { keys }, buf);
        let mixed = b"VA 3 f0\r\nabc\r\nEN\r\nHD\r\nCLIENT_ERROR bad command line format\r\n";
        assert_eq!(get(4, mixed), complete(2, 1, 1, mixed.len()));
        assert_eq!(
            get(3, mixed),
            Ok(Parsed::Complete { reply: Reply { hits: 2, misses: 1, errors: 0 }, consumed: 22 })
        );
        assert_eq!(get(1, b"VA 3\r\nab"), Ok(Parsed::Incomplete));
        assert_eq!(get(2, b"EN\r\n"), Ok(Parsed::Incomplete));
        assert!(get(1, b"END\r\n").is_err(), "a text answer to a meta request");
    }

    #[test]
    fn set_replies_are_stored_or_counted_as_errors() {
        let text = |buf: &[u8]| Protocol::Text.parse_reply(RequestKind::Set, buf);
        let meta = |buf: &[u8]| Protocol::Meta.parse_reply(RequestKind::Set, buf);
        assert_eq!(text(b"STORED\r\n"), complete(0, 0, 0, 8));
        assert_eq!(text(b"STORED"), Ok(Parsed::Incomplete));
        assert_eq!(text(b"NOT_STORED\r\n"), complete(0, 0, 1, 12));
        assert_eq!(text(b"SERVER_ERROR out of memory storing object\r\n"), complete(0, 0, 1, 43));
        assert!(text(b"HD\r\n").is_err());
        assert_eq!(meta(b"HD\r\n"), complete(0, 0, 0, 4));
        assert_eq!(meta(b"HD c12\r\n"), complete(0, 0, 0, 8));
        assert_eq!(meta(b"NS\r\n"), complete(0, 0, 1, 4));
        assert_eq!(meta(b"ERROR\r\n"), complete(0, 0, 1, 7));
        assert!(meta(b"HDX\r\n").is_err());
        assert!(meta(b"STORED\r\n").is_err());
    }
}
