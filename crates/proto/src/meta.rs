//! memcached's meta protocol: `<cmd> <key> [<datalen>] <flag>*`, where `cmd` is one of
//! `mg ms md ma mn me`, each flag is a letter optionally followed by a token (`T30`, `Oabc`),
//! and `ms` carries a data block like `set`.
//!
//! As in memcached, any known flag is accepted by any command (each uses those it knows), a
//! flag may not repeat, and only the first letter of a token names the flag. Meta errors are
//! always answered, even with `q`.

use crate::base64::decode_base64;
use crate::key::{valid_key, KEY_MAX};
use crate::text::{BAD_CHUNK, TOO_LARGE};
use crate::token::{parse_time, parse_u32, parse_u64, Tokens};
use crate::{Block, Forget, Line, Parse, Request};

const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";
const BAD_TOKEN: &str = "CLIENT_ERROR bad token in command line format";
/// memcached refuses a meta line of more than 19 tokens.
const MAX_TOKENS: usize = 19;
/// The longest opaque token, `O` included.
const MAX_OPAQUE: usize = 32;

/// Which meta command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaCmd {
    /// `mg`: get.
    Get,
    /// `ms`: set (or add, append, prepend, replace with `M`).
    Set,
    /// `md`: delete.
    Delete,
    /// `ma`: arithmetic.
    Arithmetic,
    /// `mn`: no-op, answered `MN` (marks the end of a batch of quiet commands).
    Noop,
    /// `me`: debug information about an item.
    Debug,
}

/// A parsed meta command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta<'a> {
    pub cmd: MetaCmd,
    /// The key as sent: base64 when `flags.has(b'b')` (see [`Meta::key`]); empty for `mn`.
    pub key: &'a [u8],
    pub flags: MetaFlags<'a>,
    /// The flag tokens in request order: memcached answers with the return flags in the
    /// order they were asked for.
    pub order: Tokens<'a>,
    /// The value of `ms`, without its `\r\n`; empty for the other commands.
    pub data: &'a [u8],
}

impl<'a> Meta<'a> {
    /// The key itself: `self.key`, or its base64 decoding written into `scratch`.
    pub fn key<'b>(&'b self, scratch: &'b mut [u8; KEY_MAX]) -> &'b [u8] {
        if !self.flags.has(b'b') {
            return self.key;
        }
        // The parser checked that the key decodes.
        let n = decode_base64(self.key, scratch).unwrap_or(0);
        &scratch[..n]
    }
}

/// The flags of a meta command. Flags without a token (`k v s t f c h l u q x I b`…) are
/// queried with [`MetaFlags::has`]; those with one are decoded into the fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaFlags<'a> {
    /// One bit per letter present: `A`–`Z` then `a`–`z`.
    present: u64,
    /// `T`: new TTL.
    pub ttl: Option<i64>,
    /// `N`: vivify on miss, with this TTL.
    pub vivify: Option<i64>,
    /// `R`: win the recache race if the TTL is below this.
    pub recache: Option<i64>,
    /// `O`: opaque token echoed back (without the `O`).
    pub opaque: Option<&'a [u8]>,
    /// `C`: compare CAS.
    pub cas: Option<u64>,
    /// `E`: explicit new CAS.
    pub new_cas: Option<u64>,
    /// `F`: client flags (`ms`).
    pub client_flags: Option<u32>,
    /// `M`: mode switch (`ms`: `E A P R S`; `ma`: `I + D -`).
    pub mode: Option<u8>,
    /// `D`: delta (`ma`).
    pub delta: Option<u64>,
    /// `J`: initial value on autovivify (`ma`).
    pub initial: Option<u64>,
}

/// The bit of a flag letter in [`MetaFlags::present`].
const fn bit(flag: u8) -> Option<u64> {
    match flag {
        b'A'..=b'Z' => Some(1 << (flag - b'A')),
        b'a'..=b'z' => Some(1 << (26 + flag - b'a')),
        _ => None,
    }
}

/// A set of flag letters, for [`MetaFlags::has_any`] (other bytes are left out).
pub const fn flag_set(letters: &[u8]) -> u64 {
    let (mut set, mut i) = (0, 0);
    while i < letters.len() {
        if let Some(b) = bit(letters[i]) {
            set |= b;
        }
        i += 1;
    }
    set
}

impl<'a> MetaFlags<'a> {
    /// Whether flag letter `flag` was given.
    pub fn has(&self, flag: u8) -> bool {
        bit(flag).is_some_and(|b| self.present & b != 0)
    }

    /// Whether any flag of `set` ([`flag_set`]) was given: one test where an answer would
    /// otherwise walk the flags for letters that are not there.
    #[inline]
    pub fn has_any(&self, set: u64) -> bool {
        self.present & set != 0
    }

    /// Reads the flag tokens as memcached's pre-parse does: a repeated or unknown flag stops
    /// at once; a bad token is remembered (the last such message wins) and parsing goes on.
    fn parse(tokens: Tokens<'a>, key: &[u8]) -> Result<Self, &'static str> {
        let mut f = MetaFlags::default();
        let mut error = None;
        for token in tokens {
            let letter = token[0];
            let value = &token[1..];
            // memcached's table of seen flags stops at 127: anything above is a "duplicate".
            let Some(b) = bit(letter).filter(|b| f.present & b == 0) else {
                return Err(if letter < 127 && bit(letter).is_none() {
                    "CLIENT_ERROR invalid flag"
                } else {
                    "CLIENT_ERROR duplicate flag"
                });
            };
            f.present |= b;
            let problem = match letter {
                b'b' => decode_base64(key, &mut [0; KEY_MAX])
                    .is_none()
                    .then_some("CLIENT_ERROR error decoding key"),
                b'N' | b'T' | b'R' => match parse_time(value) {
                    Some(t) => {
                        *match letter {
                            b'N' => &mut f.vivify,
                            b'T' => &mut f.ttl,
                            _ => &mut f.recache,
                        } = Some(t);
                        None
                    }
                    None => Some(BAD_TOKEN),
                },
                b'C' | b'E' => match parse_u64(value) {
                    Some(c) => {
                        *if letter == b'C' { &mut f.cas } else { &mut f.new_cas } = Some(c);
                        None
                    }
                    None => Some(BAD_TOKEN),
                },
                b'O' => {
                    f.opaque = Some(value);
                    None
                }
                b'F' => match parse_u32(value) {
                    Some(flags) => {
                        f.client_flags = Some(flags);
                        None
                    }
                    // memcached sets no message of its own here.
                    None => Some(error.unwrap_or(BAD_FORMAT)),
                },
                b'M' => match value {
                    [mode] => {
                        f.mode = Some(*mode);
                        None
                    }
                    _ => Some("CLIENT_ERROR incorrect length for M token"),
                },
                b'J' | b'D' => match parse_u64(value) {
                    Some(n) => {
                        *if letter == b'J' { &mut f.initial } else { &mut f.delta } = Some(n);
                        None
                    }
                    None if letter == b'J' => Some("CLIENT_ERROR invalid numeric initial value"),
                    None => Some("CLIENT_ERROR invalid numeric delta value"),
                },
                // `P` and `L` are proxy hints: accepted, nothing for a server to do.
                b'k' | b's' | b't' | b'c' | b'f' | b'v' | b'h' | b'l' | b'u' | b'q' | b'x' | b'I' | b'P'
                | b'L' => None,
                _ => return Err("CLIENT_ERROR invalid flag"),
            };
            if problem.is_some() {
                error = problem;
            }
        }
        error.map_or(Ok(f), Err)
    }
}

/// Flags that take no token and need no check.
const PLAIN: u64 = flag_set(b"kstcfvhluqxIPL");

/// Counts `tokens`, and if each is one letter of [`PLAIN`], none twice (the commonest lines,
/// `mg <key> v`, `mg <key> s t v`), gives the flags they set: what [`MetaFlags::parse`]
/// would make of them, read in the pass that counts them.
fn plain_flags(tokens: Tokens<'_>) -> (usize, Option<u64>) {
    let (mut count, mut present, mut plain) = (0, 0u64, true);
    for token in tokens {
        count += 1;
        let b = match token {
            [letter] => bit(*letter).unwrap_or(0) & PLAIN,
            _ => 0,
        };
        plain &= b != 0 && present & b == 0;
        present |= b;
    }
    (count, plain.then_some(present))
}

/// Parses a meta command line (and the data block of `ms`).
pub(crate) fn parse<'a>(at: &Line<'a>, command: &'a [u8], mut args: Tokens<'a>) -> Parse<'a> {
    let cmd = match command[1] {
        b'g' => MetaCmd::Get,
        b's' => MetaCmd::Set,
        b'd' => MetaCmd::Delete,
        b'a' => MetaCmd::Arithmetic,
        b'e' => MetaCmd::Debug,
        b'n' => MetaCmd::Noop,
        _ => return Parse::error("ERROR", at.end),
    };
    let done = |meta, consumed| Parse::Done { request: Request::Meta(meta), consumed };
    let error = |reply| Parse::error(reply, at.end);
    let empty = Meta { cmd, key: b"", flags: MetaFlags::default(), order: Tokens::default(), data: b"" };
    let key = args.next();
    match cmd {
        MetaCmd::Noop => return done(empty, at.end),
        MetaCmd::Debug => {
            // `me <key> [b]`: anything else after the key is ignored.
            let Some(key) = key.filter(|k| valid_key(k)) else { return error(BAD_FORMAT) };
            let mut flags = MetaFlags::default();
            if args.next() == Some(b"b") {
                if decode_base64(key, &mut [0; KEY_MAX]).is_none() {
                    return error(BAD_FORMAT);
                }
                flags.present = bit(b'b').unwrap_or(0);
            }
            return done(Meta { key, flags, ..empty }, at.end);
        }
        _ => {}
    }
    let Some(key) = key else { return error("ERROR") };
    if !valid_key(key) {
        return error(BAD_FORMAT);
    }
    let (rest, plain) = plain_flags(args.clone());
    let count = 2 + rest;
    let set = cmd == MetaCmd::Set;
    if set && count == 2 {
        return error(BAD_FORMAT);
    }
    if count > MAX_TOKENS {
        return error(if cmd == MetaCmd::Get {
            "CLIENT_ERROR options flags are too long"
        } else {
            "CLIENT_ERROR options flags too long"
        });
    }
    let len = if set {
        match args.next().and_then(Line::size) {
            Some(len) => len,
            None => return error(BAD_FORMAT),
        }
    } else {
        0
    };
    // Once its size is known, a refused `ms` still has its data block swallowed.
    let consume = if set { at.through_block(len) } else { at.end };
    let order = args.clone();
    let flags = match plain {
        Some(present) => MetaFlags { present, ..MetaFlags::default() },
        None => match MetaFlags::parse(args, key) {
            Ok(flags) => flags,
            Err(_) if matches!(cmd, MetaCmd::Delete | MetaCmd::Arithmetic) => {
                return Parse::error("CLIENT_ERROR invalid or duplicate flag", consume)
            }
            Err(reply) => return Parse::error(reply, consume),
        },
    };
    if flags.opaque.is_some_and(|o| o.len() + 1 > MAX_OPAQUE) {
        return Parse::error("CLIENT_ERROR opaque token too long", consume);
    }
    let mode_ok = |modes: &[u8]| flags.mode.is_none_or(|m| modes.contains(&m));
    match cmd {
        MetaCmd::Set if !mode_ok(b"EAPRSeaprs") => {
            Parse::error("CLIENT_ERROR invalid mode for ms M token", consume)
        }
        MetaCmd::Arithmetic if !mode_ok(b"I+D-id") => {
            Parse::error("CLIENT_ERROR invalid mode for ma M token", consume)
        }
        MetaCmd::Set if len > at.max_item_bytes => Parse::Error {
            reply: Some(TOO_LARGE),
            consume,
            forget: Some(Forget { key, base64: flags.has(b'b') }),
        },
        MetaCmd::Set => match at.block(len) {
            Block::Ready(data, consumed) => done(Meta { cmd, key, flags, order, data }, consumed),
            Block::Incomplete => Parse::Incomplete,
            Block::Bad(consume) => Parse::error(BAD_CHUNK, consume),
        },
        _ => done(Meta { cmd, key, flags, order, data: b"" }, at.end),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Parser;

    fn one(input: &[u8]) -> Parse<'_> {
        Parser::new(1024).parse(input)
    }

    fn meta(input: &[u8]) -> Meta<'_> {
        match one(input) {
            Parse::Done { request: Request::Meta(m), consumed } => {
                assert_eq!(consumed, input.len(), "{input:?}");
                m
            }
            other => panic!("{input:?} gave {other:?}"),
        }
    }

    fn err(input: &[u8]) -> (&'static str, usize) {
        match one(input) {
            Parse::Error { reply: Some(reply), consume, .. } => (reply, consume),
            other => panic!("{input:?} gave {other:?}"),
        }
    }

    #[test]
    fn get_flags() {
        let m = meta(b"mg YWJj v k s f t c h l u q x I b2 P L\r\n");
        assert_eq!((m.cmd, m.key), (MetaCmd::Get, &b"YWJj"[..]));
        for flag in *b"vksftchluqxIbPL" {
            assert!(m.flags.has(flag), "{}", flag as char);
        }
        assert!(!m.flags.has(b'a') && !m.flags.has(b'?'));
        let f = meta(b"mg k T30 N-1 R30 Oab C7 E8\r\n").flags;
        assert_eq!((f.ttl, f.vivify, f.recache, f.opaque), (Some(30), Some(-1), Some(30), Some(&b"ab"[..])));
        assert_eq!((f.cas, f.new_cas), (Some(7), Some(8)));
        let m = meta(b"mg YWJj b v\r\n");
        assert_eq!(m.key(&mut [0; KEY_MAX]), b"abc");
        assert_eq!(meta(b"mg k\r\n").key(&mut [0; KEY_MAX]), b"k");
    }

    #[test]
    fn plain_flags_read_as_the_flag_parser_reads_them() {
        let mut words: Vec<String> = (b'A'..=b'z').map(|b| (b as char).to_string()).collect();
        words.extend(["vv", "T5", "b", "Oab", "?", "k2"].map(String::from));
        let mut plain = 0;
        for a in &words {
            for b in &words {
                let line = format!("{a} {b}");
                let (count, flags) = plain_flags(Tokens::new(line.as_bytes()));
                assert_eq!(count, 2, "{line}");
                if let Some(present) = flags {
                    plain += 1;
                    let parsed = MetaFlags::parse(Tokens::new(line.as_bytes()), b"k");
                    assert_eq!(parsed, Ok(MetaFlags { present, ..MetaFlags::default() }), "{line}");
                }
            }
        }
        // Every ordered pair of two different plain letters, and nothing else.
        assert_eq!(plain, 14 * 13);
        assert_eq!(plain_flags(Tokens::new(b"")), (0, Some(0)));
    }

    #[test]
    fn a_set_of_flags_is_any_of_its_letters() {
        let written = flag_set(b"Okc");
        assert_eq!(written, flag_set(b"cOk?9"), "bytes that name no flag are left out");
        assert!(!meta(b"mg k v q\r\n").flags.has_any(written));
        for one in ["O1", "k", "c"] {
            let line = format!("mg k v {one}\r\n");
            assert!(meta(line.as_bytes()).flags.has_any(written), "{one}");
        }
        assert!(!meta(b"mg k c\r\n").flags.has_any(flag_set(b"")));
    }

    #[test]
    fn get_errors() {
        assert_eq!(err(b"mg\r\n"), ("ERROR", 4));
        assert_eq!(err(b"mx\r\n"), ("ERROR", 4));
        assert_eq!(err(b"mg k X\r\n"), ("CLIENT_ERROR invalid flag", 8));
        assert_eq!(err(b"mg k +\r\n"), ("CLIENT_ERROR invalid flag", 8));
        assert_eq!(err(b"mg k \xff\r\n"), ("CLIENT_ERROR duplicate flag", 8));
        assert_eq!(err(b"mg k v v\r\n"), ("CLIENT_ERROR duplicate flag", 10));
        assert_eq!(err(b"mg k Tx\r\n"), (BAD_TOKEN, 9));
        assert_eq!(err(b"mg k T\r\n"), (BAD_TOKEN, 8));
        assert_eq!(err(b"mg k Cx\r\n"), (BAD_TOKEN, 9));
        // A bad token does not stop the scan: a later unknown flag wins.
        assert_eq!(err(b"mg k Tx X\r\n"), ("CLIENT_ERROR invalid flag", 11));
        assert_eq!(err(b"mg !!! b v\r\n"), ("CLIENT_ERROR error decoding key", 12));
        let opaque = b"mg k O123456789012345678901234567890123 v\r\n";
        assert_eq!(err(opaque), ("CLIENT_ERROR opaque token too long", opaque.len()));
        let many = b"mg k a b c d e f g h i j k l m n o p q r s t u\r\n";
        assert_eq!(err(many), ("CLIENT_ERROR options flags are too long", many.len()));
        let long = [&b"mg "[..], &[b'k'; 251], b" v\r\n"].concat();
        assert_eq!(err(&long), (BAD_FORMAT, long.len()));
    }

    #[test]
    fn set() {
        let m = meta(b"ms k 2 T5 F7 MA c\r\nhi\r\n");
        assert_eq!((m.cmd, m.key, m.data), (MetaCmd::Set, &b"k"[..], &b"hi"[..]));
        assert_eq!((m.flags.ttl, m.flags.client_flags, m.flags.mode), (Some(5), Some(7), Some(b'A')));
        assert!(m.flags.has(b'c'));
        assert_eq!(one(b"ms k 2\r\nhi\r"), Parse::Incomplete);
        assert_eq!(err(b"ms\r\n"), ("ERROR", 4));
        assert_eq!(err(b"ms k\r\n"), (BAD_FORMAT, 6));
        // A bad size: the data is not skipped.
        assert_eq!(err(b"ms k x\r\nx\r\n"), (BAD_FORMAT, 8));
        assert_eq!(err(b"ms k -1\r\n"), (BAD_FORMAT, 9));
        // Any later error swallows the data block.
        assert_eq!(err(b"ms k 1 X\r\nx\r\n"), ("CLIENT_ERROR invalid flag", 13));
        assert_eq!(err(b"ms k 1 MX\r\nx\r\n"), ("CLIENT_ERROR invalid mode for ms M token", 14));
        assert_eq!(err(b"ms k 1 MEE\r\nx\r\n"), ("CLIENT_ERROR incorrect length for M token", 15));
        assert_eq!(err(b"ms k 1 Fx\r\nx\r\n"), (BAD_FORMAT, 14));
        assert_eq!(err(b"ms k 1 S1\r\nx\r\n"), ("CLIENT_ERROR invalid flag", 14));
        assert_eq!(err(b"ms k 2000 T0\r\n"), (TOO_LARGE, 14 + 2002));
        // Errors are answered even with q.
        assert_eq!(err(b"ms k 1 q\r\nxyz\r\n"), (BAD_CHUNK, 13));
        let many = b"ms k 1 a b c d e f g h i j k l m n o p q\r\nx\r\n";
        assert_eq!(err(many), ("CLIENT_ERROR options flags too long", many.len() - 3));
    }

    #[test]
    fn delete_arithmetic_noop_debug() {
        let m = meta(b"md k q C5 x\r\n");
        assert_eq!(
            (m.cmd, m.flags.cas, m.flags.has(b'q'), m.flags.has(b'x')),
            (MetaCmd::Delete, Some(5), true, true)
        );
        let dup = "CLIENT_ERROR invalid or duplicate flag";
        assert_eq!(err(b"md k X\r\n"), (dup, 8));
        assert_eq!(err(b"md k Cx\r\n"), (dup, 9));
        let m = meta(b"ma k N0 J5 D7 MD v\r\n");
        assert_eq!(
            (m.flags.vivify, m.flags.initial, m.flags.delta, m.flags.mode),
            (Some(0), Some(5), Some(7), Some(b'D'))
        );
        assert_eq!(meta(b"ma k\r\n").flags, MetaFlags::default());
        for bad in [&b"ma k Dx\r\n"[..], b"ma k D-1\r\n", b"ma k Jx\r\n", b"ma k v v\r\n"] {
            assert_eq!(err(bad), (dup, bad.len()));
        }
        assert_eq!(err(b"ma k MX\r\n"), ("CLIENT_ERROR invalid mode for ma M token", 9));
        assert_eq!(err(b"ma\r\n"), ("ERROR", 4));
        assert_eq!(meta(b"mn\r\n").cmd, MetaCmd::Noop);
        assert_eq!(meta(b"mn x\r\n").key, b"");
        let m = meta(b"me k x\r\n");
        assert_eq!((m.cmd, m.key), (MetaCmd::Debug, &b"k"[..]));
        assert_eq!(meta(b"me YWJj b\r\n").key(&mut [0; KEY_MAX]), b"abc");
        assert_eq!(err(b"me\r\n"), (BAD_FORMAT, 4));
        assert_eq!(err(b"me !!! b\r\n"), (BAD_FORMAT, 10));
    }
}
