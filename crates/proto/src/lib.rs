//! # shoal-proto: memcached's wire protocol, both directions
//!
//! The one place Shoal writes down the protocol: requests parsed without copying (the server,
//! the router's clients) and encoded (the client, the router towards its destinations, the load
//! generator); answers framed and read (the client, the router, the load generator, the
//! controller through the client); the key rule ([`valid_key`], [`KEY_MAX`]); the operations
//! ([`Op`]). Nothing here depends on another Shoal crate.
//!
//! - Requests in: memcached's text protocol ([`text`]) and meta protocol ([`meta`]), behind
//!   one entry point; the binary protocol ([`binary`], its own parser, as a connection speaks
//!   one or the other); authentication messages ([`auth`]); the hints handoff ([`handoff`]).
//!   The server hands [`Parser::parse`] the unconsumed bytes of a connection's read buffer;
//!   requests borrow their keys and data from that buffer.
//! - Requests out: [`encode_request`] and [`encode_retrieval`] ([`encode`]) append a request
//!   to the caller's buffer; [`Parser::parse`] reads it back as the same request.
//! - Answers in: [`frame`] ([`answer`]) finds one whole answer of a [`Shape`] in the bytes
//!   read, every size bounded ([`Limits`]); a reader that gets answers in many reads keeps a
//!   [`Framer`] per connection, which resumes where the last read's framing stopped;
//!   [`answer`]'s readers take its `VALUE` blocks, `LVALUE` and `STAT` lines apart;
//!   [`hotkeys`] reads and writes Shoal's `stats hotkeys` answer (a server's hottest keys,
//!   which pool clients and routers replicate).
//!
//! ```text
//!   socket ──► read buffer ──► Parser::parse(&buf) ──┬─ Incomplete           read more, call again
//!                                                    ├─ Request + consumed   execute, drop bytes
//!                                                    ├─ Error + consume      answer, drop bytes
//!                                                    └─ Close                drop the connection
//!
//!   Op + key + Body ──► encode_request(.., &mut out) ──► socket ──► server
//!   server ──► read buffer ──► framer.frame(&buf, shape, limits) ──┬─ None           read more, call again
//!                                                                  ├─ Frame { len }  read it, drop bytes
//!                                                                  └─ InvalidData    close the connection
//! ```
//!
//! The answers and the bytes consumed are memcached 1.6's, checked against the real binary
//! (1.6.18). Deliberate differences: keys with control characters are refused
//! (`CLIENT_ERROR bad command line format`) where memcached stores them; numbers must be
//! digits with an optional sign and fit their type (memcached truncates flags and exptimes
//! above 32 bits and accepts `-0`, leading tabs or trailing whitespace); exptimes are `i64`;
//! meta's base64 keys must be padded standard base64.
//!
//! Parsing allocates nothing: multiget keys and `stats` arguments are iterated lazily from the
//! line ([`Tokens`]), and a parser remembers how far it has searched for the end of a line, so
//! that a long line arriving in pieces is scanned once.

#![forbid(unsafe_code)]

pub mod answer;
pub mod auth;
mod base64;
pub mod binary;
pub mod crawler;
pub mod encode;
pub mod handoff;
pub mod hotkeys;
mod key;
pub mod meta;
pub mod text;
mod token;

pub use answer::{frame, frame_within, Frame, Framer, Limits, Shape, MAX_ANSWER_LINE, MAX_VALUE_BYTES};
pub use auth::{parse_ascii_auth, parse_plain, AsciiAuth, Plain};
pub use base64::{decode_base64, encode_base64};
pub use binary::{BinaryParse, BinaryParser, BinaryRequest};
pub use crawler::{Classes, LruCrawler};
pub use encode::{encode_request, encode_retrieval, push_u64, Body, Op, StoreMode};
pub use hotkeys::{encode_hotkeys, hotkeys_limits, parse_hotkeys, HotKey, HotKeysError, MAX_HOTKEYS};
pub use key::{key_fault, key_run, valid_key, KEY_MAX};
pub use meta::{flag_set, Meta, MetaCmd, MetaFlags};
pub use text::{Get, ShutdownMode, Slabs, Store, StoreCmd};
pub use token::{digits, Tokens};

/// memcached gives up on a connection that sends this many bytes without a newline, unless
/// they start a `get`/`gets` (multigets are unbounded).
pub const MAX_LINE: usize = 2048;

/// A complete request, borrowing from the buffer it was parsed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// `get`, `gets`, `gat`, `gats` (and the ancient `bget`).
    Get(Get<'a>),
    /// `set`, `add`, `replace`, `append`, `prepend`, `cas`.
    Store(Store<'a>),
    /// `delete <key> [0] [noreply]`, or Shoal's `delete <key> hold <seconds> [noreply]`:
    /// `hold` seconds during which `add` of the key is refused (0: none).
    Delete { key: &'a [u8], hold: u32, noreply: bool },
    /// Shoal/mcrouter `lease-get <key> [stale]`: a value, or a lease token or hot miss;
    /// `stale`: the caller takes a stale value along with a miss.
    LeaseGet { key: &'a [u8], stale: bool },
    /// `incr`/`decr <key> <delta> [noreply]`.
    Arith { incr: bool, key: &'a [u8], delta: u64, noreply: bool },
    /// `touch <key> <exptime> [noreply]`.
    Touch { key: &'a [u8], exptime: i64, noreply: bool },
    /// `flush_all [delay] [noreply]`; a delay of zero or less means now.
    FlushAll { delay: Option<i64>, noreply: bool },
    /// `version` (arguments ignored, as memcached does).
    Version,
    /// `verbosity <level> [noreply]`.
    Verbosity { level: u32, noreply: bool },
    /// `cache_memlimit <megabytes> [noreply]`: the memory limit, changed at run time.
    CacheMemlimit { megabytes: u32, noreply: bool },
    /// `quit`: close after answering what came before.
    Quit,
    /// `shutdown [graceful]`; memcached refuses it unless started with `-A`, and checks that
    /// before the mode, so an invalid mode is the server's to answer.
    Shutdown(ShutdownMode),
    /// `slabs reassign|automove …`: memcached's slab page mover controls.
    Slabs(Slabs),
    /// `stats [args…]`: the server interprets the arguments.
    Stats(Tokens<'a>),
    /// `refresh_certs`: reload the TLS certificates (arguments are ignored, as in memcached).
    RefreshCerts,
    /// Shoal extension `shm`: locality discovery (region path, cookie).
    Shm,
    /// Shoal extension `shm hints <path>`: a client that reads through shared memory names
    /// its hints area (local gets and hits for the server to fold in).
    ShmHints(&'a [u8]),
    /// Shoal extension `shm handoff`: a client asks for a token and the socket on which to
    /// hand over its hints area's descriptor ([`handoff`]).
    ShmHandoff,
    /// Shoal extension `digest`: the server's Proteus digest of the keys it holds.
    Digest,
    /// Shoal extension `curve [<tenant>]`: the hit-ratio curve of the requests served
    /// (`--hit-curve`), or of one tenant's (`--tenants`).
    Curve(Option<&'a [u8]>),
    /// Shoal extension `tenant_memlimit <tenant> <bytes>`: resizes a tenant's partition.
    TenantMemlimit { tenant: &'a [u8], bytes: u64 },
    /// Shoal extension `debugtime <seconds>`: moves the server clock, for tests.
    DebugTime(i64),
    /// A meta command (`mg ms md ma mn me`).
    Meta(Meta<'a>),
    /// `lru_crawler <subcommand> …`: the key dump (`metadump`) and the crawler's controls.
    LruCrawler(LruCrawler),
    /// `watch [kinds…]`: the connection becomes a stream of log lines of these kinds
    /// ([`crawler::watch`]).
    Watch(u16),
}

/// What [`Parser::parse`] found at the start of the buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parse<'a> {
    /// Not a whole request yet: call again with the same bytes and more.
    Incomplete,
    /// A request, and how many bytes of the buffer it took.
    Done { request: Request<'a>, consumed: usize },
    /// A malformed request. `reply` is the line to send, without `\r\n` (`None`: the request
    /// said `noreply`, and memcached then stays silent even about errors). `consume` bytes must
    /// be dropped; it may exceed the buffer (an oversized value is swallowed as it arrives).
    /// `forget`: a key whose current value must go too (a `set` or `ms` refused for size: the
    /// client must not keep reading the value it tried to replace).
    Error { reply: Option<&'static str>, consume: usize, forget: Option<Forget<'a>> },
    /// memcached closes the connection without a word (a line too long, an HTTP request).
    Close,
}

impl<'a> Parse<'a> {
    /// An error memcached always reports.
    pub(crate) fn error(reply: &'static str, consume: usize) -> Self {
        Parse::Error { reply: Some(reply), consume, forget: None }
    }

    /// An error that `noreply` silences.
    pub(crate) fn error_unless(noreply: bool, reply: &'static str, consume: usize) -> Self {
        Parse::Error { reply: (!noreply).then_some(reply), consume, forget: None }
    }
}

/// A key named by a refused request, as sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Forget<'a> {
    pub key: &'a [u8],
    /// The key is base64 (meta's `b`): decode it with [`decode_base64`].
    pub base64: bool,
}

/// An incremental request parser for one connection.
#[derive(Clone, Debug)]
pub struct Parser {
    max_item_bytes: usize,
    /// Bytes at the start of the buffer already known to hold no newline (or, while a data
    /// block is awaited, the position of the line's newline): the next call starts there.
    scanned: usize,
}

impl Parser {
    /// A parser refusing values longer than `max_item_bytes` (memcached's `-I`).
    pub fn new(max_item_bytes: usize) -> Self {
        Parser { max_item_bytes, scanned: 0 }
    }

    /// Parses the request at the start of `buf`. After [`Parse::Incomplete`], the next call
    /// must get the same bytes followed by more; after any other result, the buffer after the
    /// consumed bytes.
    pub fn parse<'a>(&mut self, buf: &'a [u8]) -> Parse<'a> {
        let from = self.scanned.min(buf.len());
        let Some(nl) = token::find_newline(&buf[from..]).map(|i| from + i) else {
            self.scanned = buf.len();
            if buf.len() > MAX_LINE && !long_get(buf) {
                self.scanned = 0;
                return Parse::Close;
            }
            return Parse::Incomplete;
        };
        let line = &buf[..nl];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let at = Line { buf, line, end: nl + 1, max_item_bytes: self.max_item_bytes };
        // The commonest request, `get`, without splitting its command word off first.
        if let Some(keys) = line.strip_prefix(b"get ") {
            self.scanned = 0;
            return text::get_keys(&at, keys);
        }
        let mut args = Tokens::new(line);
        let command = args.next().unwrap_or_default();
        let result = if command.len() == 2 && command[0] == b'm' {
            meta::parse(&at, command, args)
        } else {
            text::parse(&at, command, args)
        };
        self.scanned = if matches!(result, Parse::Incomplete) { nl } else { 0 };
        result
    }
}

/// memcached lets a line without a newline grow past [`MAX_LINE`] only if it starts, after at
/// most 100 spaces, with `get ` or `gets `.
fn long_get(buf: &[u8]) -> bool {
    let spaces = buf.iter().take(101).take_while(|&&b| b == b' ').count();
    spaces <= 100 && (buf[spaces..].starts_with(b"get ") || buf[spaces..].starts_with(b"gets "))
}

/// A complete command line within the buffer.
pub(crate) struct Line<'a> {
    /// The whole buffer (a data block follows the line).
    pub buf: &'a [u8],
    /// The line without its `\n` or `\r\n`.
    pub line: &'a [u8],
    /// Bytes up to and including the newline.
    pub end: usize,
    pub max_item_bytes: usize,
}

/// The data block of a storage command, `len` bytes then `\r\n`, after the line.
pub(crate) enum Block<'a> {
    /// The data, and the bytes consumed up to its end.
    Ready(&'a [u8], usize),
    Incomplete,
    /// Not followed by `\r\n`: memcached drops `len + 2` bytes anyway (the next request starts
    /// right after them) and answers `CLIENT_ERROR bad data chunk`.
    Bad(usize),
}

impl<'a> Line<'a> {
    /// memcached takes sizes as `int` and adds 2 for the `\r\n`.
    pub(crate) fn size(token: &[u8]) -> Option<usize> {
        token::parse_i64(token).filter(|&n| (0..=i64::from(i32::MAX) - 2).contains(&n)).map(|n| n as usize)
    }

    /// The bytes a storage command with a `len`-byte value takes, line included.
    pub(crate) fn through_block(&self, len: usize) -> usize {
        self.end + len + 2
    }

    pub(crate) fn block(&self, len: usize) -> Block<'a> {
        let end = self.through_block(len);
        match self.buf.get(self.end..end) {
            None => Block::Incomplete,
            Some(data) if data.ends_with(b"\r\n") => Block::Ready(&data[..len], end),
            Some(_) => Block::Bad(end),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every request of `input` parsed in one go, then at every split point: a prefix must
    /// give `Incomplete` or the same first result, and the same parser fed the rest must agree.
    fn check_splits(input: &[u8]) {
        let full = Parser::new(1024).parse(input);
        for cut in 0..input.len() {
            let mut p = Parser::new(1024);
            let first = p.parse(&input[..cut]);
            if first != Parse::Incomplete {
                assert_eq!(first, full, "prefix {cut} of {input:?}");
                continue;
            }
            assert_eq!(p.parse(input), full, "resumed at {cut} of {input:?}");
        }
    }

    #[test]
    fn pipelined_buffer_at_every_split_point() {
        let input: &[u8] = b"set a 1 2 3\r\nxyz\r\nget a b\r\nms k 2 T5\r\nhi\r\nmn\r\nbogus\r\n\
            set b 0 0 1\r\nxyz\r\nincr a 5\ndelete a noreply\r\nset c 0 0 2000\r\n";
        let mut expected = Vec::new();
        let mut rest = input;
        while !rest.is_empty() {
            let r = Parser::new(1024).parse(rest);
            let n = match &r {
                Parse::Done { consumed, .. } => *consumed,
                Parse::Error { consume, .. } => (*consume).min(rest.len()),
                other => panic!("{other:?} at {rest:?}"),
            };
            check_splits(rest);
            expected.push(r);
            rest = &rest[n..];
        }
        assert_eq!(expected.len(), 10);
    }

    #[test]
    fn incomplete_lines_are_scanned_once() {
        // 100 000 keys fed 1000 bytes at a time: each call scans only the new bytes.
        let mut line = b"get".to_vec();
        for i in 0..100_000 {
            line.extend_from_slice(format!(" k{i}").as_bytes());
        }
        line.extend_from_slice(b"\r\n");
        let mut p = Parser::new(1024);
        let mut fed = 0;
        let result = loop {
            fed = (fed + 1000).min(line.len());
            match p.parse(&line[..fed]) {
                Parse::Incomplete => assert!(p.scanned == fed),
                other => break other,
            }
        };
        let Parse::Done { request: Request::Get(get), consumed } = result else { panic!() };
        assert_eq!(consumed, line.len());
        assert_eq!(get.keys.count(), 100_000);
    }

    #[test]
    fn long_lines_close_unless_multiget() {
        let mut p = Parser::new(1024);
        assert_eq!(p.parse(&[b'x'; MAX_LINE]), Parse::Incomplete);
        assert_eq!(Parser::new(1024).parse(&[b'x'; MAX_LINE + 1]), Parse::Close);
        let mut set = b"set ".to_vec();
        set.resize(MAX_LINE + 1, b'a');
        assert_eq!(Parser::new(1024).parse(&set), Parse::Close);
        for prefix in [&b"get "[..], b"gets ", b"   get "] {
            let mut get = prefix.to_vec();
            get.resize(MAX_LINE + 1, b'a');
            assert_eq!(Parser::new(1024).parse(&get), Parse::Incomplete);
        }
        let mut spaced = vec![b' '; 101];
        spaced.extend_from_slice(b"get ");
        spaced.resize(MAX_LINE + 1, b'a');
        assert_eq!(Parser::new(1024).parse(&spaced), Parse::Close);
        // A long line that arrived whole is fine, whatever the command (as in memcached).
        let mut gat = b"gat 0".to_vec();
        for _ in 0..1000 {
            gat.extend_from_slice(b" zz");
        }
        gat.extend_from_slice(b"\r\n");
        assert!(matches!(Parser::new(1024).parse(&gat), Parse::Done { .. }));
    }
}
