//! memcached's text protocol: one command line of space-separated tokens, then for storage
//! commands a data block of the declared size followed by `\r\n`.
//!
//! Arity is checked first (`ERROR`), then `noreply` is noted (it is simply the last token), then
//! the key and the numbers (`CLIENT_ERROR …`, silenced by `noreply` like every later answer).

use crate::key::{count_keys, valid_key};
use crate::token::{parse_i64, parse_time, parse_u32, parse_u64, split, Tokens};
use crate::{Block, Forget, Line, Parse, Request};

const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";
const BAD_EXPTIME: &str = "CLIENT_ERROR invalid exptime argument";
pub(crate) const TOO_LARGE: &str = "SERVER_ERROR object too large for cache";
pub(crate) const BAD_CHUNK: &str = "CLIENT_ERROR bad data chunk";

/// A retrieval: `get`/`gets <key>*`, `gat`/`gats <exptime> <key>*`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Get<'a> {
    /// The keys, all valid, in request order (possibly none for `gat`, as in memcached).
    pub keys: Tokens<'a>,
    /// How many keys there are (counted as they were checked).
    pub count: usize,
    /// The key, when there is exactly one (the commonest get): found as the line was checked,
    /// so the server does not split the line again to take it.
    pub only_key: Option<&'a [u8]>,
    /// `gets`/`gats`: answer with CAS uniques.
    pub cas: bool,
    /// `gat`/`gats`: the new exptime of every key found.
    pub touch: Option<i64>,
}

/// Which storage command, and its rule for an existing item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreCmd {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    /// Store only if the item's CAS unique is still this one.
    Cas(u64),
    /// Shoal/mcrouter `lease-set`: store only if this lease token is still the key's.
    LeaseSet(u64),
}

impl StoreCmd {
    /// The operation that sends this command on, with its number (a `cas` unique or a lease
    /// token): how a router or a near cache forwards a store it parsed.
    pub fn op(self) -> (crate::encode::Op, Option<u64>) {
        use crate::encode::Op;
        match self {
            StoreCmd::Set => (Op::Set, None),
            StoreCmd::Add => (Op::Add, None),
            StoreCmd::Replace => (Op::Replace, None),
            StoreCmd::Append => (Op::Append, None),
            StoreCmd::Prepend => (Op::Prepend, None),
            StoreCmd::Cas(unique) => (Op::Cas, Some(unique)),
            StoreCmd::LeaseSet(token) => (Op::LeaseSet, Some(token)),
        }
    }
}

/// `<cmd> <key> <flags> <exptime> <bytes> [cas] [noreply]` (or `lease-set <key> <token>
/// <flags> <exptime> <bytes> [noreply]`) and its data block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Store<'a> {
    pub cmd: StoreCmd,
    pub key: &'a [u8],
    pub flags: u32,
    pub exptime: i64,
    /// The value, without its `\r\n`.
    pub data: &'a [u8],
    pub noreply: bool,
}

/// What `shutdown` asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownMode {
    /// `shutdown`.
    Now,
    /// `shutdown graceful`.
    Graceful,
    /// Anything else: `CLIENT_ERROR invalid shutdown mode` when shutdown is enabled.
    Invalid,
}

/// `slabs …`: memcached's slab page mover controls. Shoal has one class and no pages to move,
/// so the server answers them as memcached would with nothing to move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slabs {
    /// `slabs reassign <src> <dst>`: move a page from class `src` (-1: any) to `dst`.
    Reassign { src: i32, dst: i32 },
    /// `slabs automove <0|1|2> [noreply]` or `slabs automove ratio <r>`: the mover's policy.
    Automove { noreply: bool },
}

/// Parses a text-protocol command line (and its data block): `command` is the line's first
/// token, `args` the tokens after it.
pub(crate) fn parse<'a>(at: &Line<'a>, command: &'a [u8], args: Tokens<'a>) -> Parse<'a> {
    let done = |request| Parse::Done { request, consumed: at.end };
    let error = || Parse::error("ERROR", at.end);
    // Retrievals first: they are most of what a cache is asked.
    match command {
        b"get" | b"bget" => return get(at, args, false, false),
        b"gets" => return get(at, args, true, false),
        b"gat" => return get(at, args, false, true),
        b"gats" => return get(at, args, true, true),
        _ => {}
    }
    let store_cmd = match command {
        b"set" => Some(StoreCmd::Set),
        b"add" => Some(StoreCmd::Add),
        b"replace" => Some(StoreCmd::Replace),
        b"append" => Some(StoreCmd::Append),
        b"prepend" => Some(StoreCmd::Prepend),
        b"cas" => Some(StoreCmd::Cas(0)),
        b"lease-set" => Some(StoreCmd::LeaseSet(0)),
        _ => None,
    };
    if let Some(cmd) = store_cmd {
        return store(at, cmd, args);
    }
    match command {
        b"lease-get" => {
            let (t, n) = split::<2>(args);
            if !(1..=2).contains(&n) {
                return error();
            }
            if !valid_key(t[0]) || (n == 2 && t[1] != b"stale") {
                return Parse::error(BAD_FORMAT, at.end);
            }
            done(Request::LeaseGet { key: t[0], stale: n == 2 })
        }
        b"incr" | b"decr" => {
            let incr = command == b"incr";
            key_and_number(
                at,
                args,
                parse_u64,
                "CLIENT_ERROR invalid numeric delta argument",
                |key, delta, noreply| Request::Arith { incr, key, delta, noreply },
            )
        }
        b"touch" => key_and_number(at, args, parse_time, BAD_EXPTIME, |key, exptime, noreply| {
            Request::Touch { key, exptime, noreply }
        }),
        b"delete" => {
            if let Some(request) = hold_off(args.clone()) {
                return done(request);
            }
            let (t, n) = split::<3>(args);
            if !(1..=3).contains(&n) {
                return error();
            }
            // memcached still accepts the hold time of old clients, if it is 0.
            let noreply = n > 1 && is_noreply(&t, n);
            let zero = t[1] == b"0";
            if n > 1 && !((n == 2 && (zero || noreply)) || (n == 3 && zero && noreply)) {
                let usage = "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]";
                return Parse::error_unless(noreply, usage, at.end);
            }
            if !valid_key(t[0]) {
                return Parse::error_unless(noreply, BAD_FORMAT, at.end);
            }
            done(Request::Delete { key: t[0], hold: 0, noreply })
        }
        b"flush_all" => {
            let (t, n) = split::<2>(args);
            if n > 2 {
                return error();
            }
            let noreply = n > 0 && is_noreply(&t, n);
            if n == usize::from(noreply) {
                return done(Request::FlushAll { delay: None, noreply });
            }
            match parse_time(t[0]) {
                Some(delay) => done(Request::FlushAll { delay: Some(delay), noreply }),
                None => Parse::error_unless(noreply, BAD_EXPTIME, at.end),
            }
        }
        b"verbosity" => {
            let (t, n) = split::<2>(args);
            if !(1..=2).contains(&n) {
                return error();
            }
            let noreply = is_noreply(&t, n);
            match parse_u32(t[0]) {
                Some(level) => done(Request::Verbosity { level, noreply }),
                None => Parse::error_unless(noreply, BAD_FORMAT, at.end),
            }
        }
        b"cache_memlimit" => {
            let (t, n) = split::<2>(args);
            if !(1..=2).contains(&n) {
                return error();
            }
            // memcached ignores a second word other than `noreply`, and answers a number it
            // cannot read with a plain ERROR (which `noreply` silences, as every answer).
            let noreply = is_noreply(&t, n);
            match parse_u32(t[0]) {
                Some(megabytes) => done(Request::CacheMemlimit { megabytes, noreply }),
                None => Parse::error_unless(noreply, "ERROR", at.end),
            }
        }
        b"version" => done(Request::Version),
        b"quit" => done(Request::Quit),
        b"shutdown" => done(Request::Shutdown(match split::<1>(args) {
            (_, 0) => ShutdownMode::Now,
            ([b"graceful"], 1) => ShutdownMode::Graceful,
            _ => ShutdownMode::Invalid,
        })),
        b"stats" => done(Request::Stats(args)),
        b"lru_crawler" => match crate::crawler::parse_lru_crawler(args) {
            Ok(command) => done(Request::LruCrawler(command)),
            Err(answer) => Parse::error(answer, at.end),
        },
        b"watch" => match crate::crawler::parse_watch(args) {
            (Some(kinds), _) => done(Request::Watch(kinds)),
            (None, noreply) => Parse::error_unless(noreply, "ERROR", at.end),
        },
        b"refresh_certs" => done(Request::RefreshCerts),
        b"shm" => match split::<2>(args) {
            (_, 0) => done(Request::Shm),
            ([b"hints", path], 2) => done(Request::ShmHints(path)),
            ([b"handoff", _], 1) => done(Request::ShmHandoff),
            _ => error(),
        },
        b"digest" => match split::<1>(args) {
            (_, 0) => done(Request::Digest),
            _ => error(),
        },
        b"curve" => match split::<2>(args) {
            (_, 0) => done(Request::Curve(None)),
            ([tenant, _], 1) => done(Request::Curve(Some(tenant))),
            _ => error(),
        },
        b"slabs" => slabs(at, args),
        b"tenant_memlimit" => match split::<3>(args) {
            ([tenant, bytes, _], 2) => match parse_u64(bytes) {
                Some(bytes) => done(Request::TenantMemlimit { tenant, bytes }),
                None => Parse::error(BAD_FORMAT, at.end),
            },
            _ => error(),
        },
        b"debugtime" => match split::<1>(args) {
            ([seconds], 1) => parse_i64(seconds).map_or_else(error, |s| done(Request::DebugTime(s))),
            _ => error(),
        },
        // memcached drops connections that speak HTTP to it, as long as the command's first
        // letter is none of those its command table branches on.
        _ if !matches!(command.first(), Some(b'g' | b's' | b'a' | b'c' | b'i' | b'd' | b't'))
            && Tokens::new(at.line).last().is_some_and(|t| t.starts_with(b"HTTP/")) =>
        {
            Parse::Close
        }
        _ => error(),
    }
}

/// Shoal's `delete <key> hold <seconds> [noreply]`, exactly; anything else that is not a
/// memcached `delete` gets memcached's answer.
fn hold_off(args: Tokens<'_>) -> Option<Request<'_>> {
    let (t, n) = split::<4>(args);
    let noreply = match n {
        3 => false,
        4 if t[3] == b"noreply" => true,
        _ => return None,
    };
    let hold = parse_u32(t[2]).filter(|_| t[1] == b"hold" && valid_key(t[0]))?;
    Some(Request::Delete { key: t[0], hold, noreply })
}

/// memcached's `noreply` test: the last of the `n` tokens is exactly `noreply`.
/// `<command> <key> <number> [noreply]`, the shape of `incr`, `decr` and `touch`: the wrong
/// number of arguments is `ERROR`, a bad key `CLIENT_ERROR bad command line format`, a bad
/// number `bad_number` (all silent under `noreply`, as in memcached).
fn key_and_number<'a, T>(
    at: &Line<'a>,
    args: Tokens<'a>,
    number: fn(&[u8]) -> Option<T>,
    bad_number: &'static str,
    request: impl FnOnce(&'a [u8], T, bool) -> Request<'a>,
) -> Parse<'a> {
    let (t, n) = split::<3>(args);
    if !(2..=3).contains(&n) {
        return Parse::error("ERROR", at.end);
    }
    let noreply = is_noreply(&t, n);
    if !valid_key(t[0]) {
        return Parse::error_unless(noreply, BAD_FORMAT, at.end);
    }
    match number(t[1]) {
        Some(value) => Parse::Done { request: request(t[0], value, noreply), consumed: at.end },
        None => Parse::error_unless(noreply, bad_number, at.end),
    }
}

/// `slabs reassign|automove …`, checked as memcached 1.6.18's `process_slabs_command` checks
/// it: `reassign` takes exactly two classes (`safe_strtol`: signed, kept to 32 bits) and
/// ignores `noreply`; `automove` takes a level (`safe_strtoul`) or `ratio <number>`, and
/// `noreply` as its last word silences every answer.
fn slabs<'a>(at: &Line<'a>, args: Tokens<'a>) -> Parse<'a> {
    let noreply = args.clone().last() == Some(b"noreply");
    let done = |slabs| Parse::Done { request: Request::Slabs(slabs), consumed: at.end };
    let (t, n) = split::<3>(args);
    match (t[0], n) {
        (b"reassign", 3) => {
            // Truncation is memcached's: `safe_strtol` stores a `long` in an `int32_t`.
            let class = |t: &[u8]| parse_i64(t).map(|v| v as i32);
            match (class(t[1]), class(t[2])) {
                (Some(src), Some(dst)) => done(Slabs::Reassign { src, dst }),
                _ => Parse::error(BAD_FORMAT, at.end),
            }
        }
        // `safe_strtod`; a missing ratio is the empty word, no number either.
        (b"automove", 2..) if t[1] == b"ratio" => match std::str::from_utf8(t[2]).map(str::parse::<f64>) {
            Ok(Ok(_)) => done(Slabs::Automove { noreply }),
            _ => Parse::error_unless(noreply, "ERROR", at.end),
        },
        // memcached keeps the level in 32 bits: 2^32 is 0.
        (b"automove", 2..) => match parse_u64(t[1]).map(|level| level as u32) {
            Some(0..=2) => done(Slabs::Automove { noreply }),
            Some(_) => Parse::error_unless(noreply, "ERROR", at.end),
            None => Parse::error_unless(noreply, BAD_FORMAT, at.end),
        },
        _ => Parse::error("ERROR", at.end),
    }
}

fn is_noreply(tokens: &[&[u8]], n: usize) -> bool {
    tokens[n - 1] == b"noreply"
}

/// `get <keys>`, given the line after `get `: what [`parse`] makes of it (`get` and any spaces
/// after it are the command word and the separator the tokenizer would skip). One key, the
/// commonest request, is checked whole, without the tokenizer; keys on a line of at
/// most [`crate::KEY_MAX`] bytes are checked and counted a word at a time ([`count_keys`]).
#[inline]
pub(crate) fn get_keys<'a>(at: &Line<'a>, keys: &'a [u8]) -> Parse<'a> {
    // A short line is most likely one key: judged in two words, without counting.
    let (count, only_key) = if keys.len() <= 16 && valid_key(keys) {
        (Some(1), Some(keys))
    } else {
        let count = count_keys(keys);
        // One key with spaces around it, or longer: split off here rather than in the server.
        (count, count.filter(|&n| n == 1).and_then(|_| Tokens::new(keys).next()))
    };
    if let Some(count) = count {
        let get = Get { keys: Tokens::new(keys), count, only_key, cas: false, touch: None };
        return Parse::Done { request: Request::Get(get), consumed: at.end };
    }
    get(at, Tokens::new(keys), false, false)
}

fn get<'a>(at: &Line<'a>, args: Tokens<'a>, cas: bool, touch: bool) -> Parse<'a> {
    // One pass over the tokens: the first (an exptime or a key), then the keys, counted.
    let mut keys = args.clone();
    let mut rest = args;
    let Some(first) = rest.next() else { return Parse::error("ERROR", at.end) };
    let (touch, mut count) = if touch {
        let Some(exptime) = parse_time(first) else { return Parse::error(BAD_EXPTIME, at.end) };
        keys = rest.clone();
        (Some(exptime), 0)
    } else if valid_key(first) {
        (None, 1)
    } else {
        return Parse::error(BAD_FORMAT, at.end);
    };
    let mut only_key = (count == 1).then_some(first);
    for key in rest {
        if !valid_key(key) {
            return Parse::error(BAD_FORMAT, at.end);
        }
        only_key = (count == 0).then_some(key);
        count += 1;
    }
    Parse::Done { request: Request::Get(Get { keys, count, only_key, cas, touch }), consumed: at.end }
}

fn store<'a>(at: &Line<'a>, cmd: StoreCmd, args: Tokens<'a>) -> Parse<'a> {
    let (t, n) = split::<6>(args);
    let arity = if matches!(cmd, StoreCmd::Cas(_) | StoreCmd::LeaseSet(_)) { 5 } else { 4 };
    if n != arity && n != arity + 1 {
        return Parse::error("ERROR", at.end);
    }
    let noreply = is_noreply(&t, n);
    let bad = || Parse::error_unless(noreply, BAD_FORMAT, at.end);
    if !valid_key(t[0]) {
        return bad();
    }
    // `lease-set` carries its token before the flags, `cas` its unique after the size.
    let (fields, number) = match cmd {
        StoreCmd::LeaseSet(_) => (&t[2..5], t[1]),
        _ => (&t[1..4], t[4]),
    };
    let (Some(flags), Some(exptime), Some(len)) =
        (parse_u32(fields[0]), parse_time(fields[1]), Line::size(fields[2]))
    else {
        return bad();
    };
    let cmd = match cmd {
        StoreCmd::Cas(_) | StoreCmd::LeaseSet(_) => match parse_u64(number) {
            Some(n) if matches!(cmd, StoreCmd::Cas(_)) => StoreCmd::Cas(n),
            Some(n) => StoreCmd::LeaseSet(n),
            None => return bad(),
        },
        other => other,
    };
    if len > at.max_item_bytes {
        // memcached drops the old value only for `set`.
        let forget = (cmd == StoreCmd::Set).then_some(Forget { key: t[0], base64: false });
        return Parse::Error {
            reply: (!noreply).then_some(TOO_LARGE),
            consume: at.through_block(len),
            forget,
        };
    }
    match at.block(len) {
        Block::Ready(data, consumed) => Parse::Done {
            request: Request::Store(Store { cmd, key: t[0], flags, exptime, data, noreply }),
            consumed,
        },
        Block::Incomplete => Parse::Incomplete,
        Block::Bad(consume) => Parse::error_unless(noreply, BAD_CHUNK, consume),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Parser;

    fn one(input: &[u8]) -> Parse<'_> {
        Parser::new(1024).parse(input)
    }

    /// The reply and the bytes consumed for an erroneous `input`.
    fn err(input: &[u8]) -> (Option<&'static str>, usize) {
        match one(input) {
            Parse::Error { reply, consume, .. } => (reply, consume),
            other => panic!("{input:?} gave {other:?}"),
        }
    }

    fn request(input: &[u8]) -> Request<'_> {
        match one(input) {
            Parse::Done { request, consumed } => {
                assert_eq!(consumed, input.len(), "{input:?}");
                request
            }
            other => panic!("{input:?} gave {other:?}"),
        }
    }

    /// The keys of a get, checked against its count and its only key.
    fn keys<'a>(r: &Request<'a>) -> Vec<&'a [u8]> {
        let Request::Get(g) = r else { panic!("{r:?}") };
        let keys: Vec<&[u8]> = g.keys.clone().collect();
        assert_eq!(keys.len(), g.count, "{r:?}");
        assert_eq!(g.only_key, (keys.len() == 1).then(|| keys[0]), "{r:?}");
        keys
    }

    /// `get` lines read by the shortcut (`get_keys`) give what the tokenizer's path gives.
    #[test]
    fn the_get_shortcut_agrees_with_the_tokenizer() {
        let long = [&b"get "[..], &[b'k'; 250]].concat();
        let too_long = [&b"get "[..], &[b'k'; 251]].concat();
        let lines: [&[u8]; 16] = [
            b"get a b c d e f g h i j",
            b"get abcdefgh abcdefghijklmnop q",
            b"get  a  b\x01 c",
            b"get a b\x80c",
            b"get a",
            b"get  a",
            b"get a ",
            b"get a b",
            b"get ",
            b"get  ",
            b"get a\x01",
            b"get a\tb",
            b"get a\x7f",
            b"get a  b c",
            &long,
            &too_long,
        ];
        for line in lines {
            let input = [line, b"\r\n"].concat();
            let at = Line { buf: &input, line, end: input.len(), max_item_bytes: 1024 };
            let mut args = Tokens::new(line);
            let command = args.next().unwrap_or_default();
            assert_eq!(one(&input), parse(&at, command, args), "{line:?}");
        }
    }

    #[test]
    fn retrievals() {
        let r = request(b"get a  bb ccc\r\n");
        assert_eq!(keys(&r), [&b"a"[..], b"bb", b"ccc"]);
        assert_eq!(request(b"get a\n"), request(b"get a\r\n"));
        assert_eq!(request(b"bget a\r\n"), request(b"get a\r\n"));
        assert_eq!(keys(&request(b"get a\r\n")), [&b"a"[..]]);
        assert_eq!(keys(&request(b"gat 0  a b\r\n")), [&b"a"[..], b"b"]);
        let Request::Get(g) = request(b"gats -5 a\r\n") else { panic!() };
        assert_eq!((g.cas, g.touch), (true, Some(-5)));
        let Request::Get(g) = request(b"gets a\r\n") else { panic!() };
        assert_eq!((g.cas, g.touch), (true, None));
        // memcached answers a gat without keys with END.
        assert_eq!(keys(&request(b"gat 10\r\n")), Vec::<&[u8]>::new());
        // One key, however the line was read (`keys` checks `only_key`).
        let long = [&b"get "[..], &[b'k'; 20], b"\r\n"].concat();
        for (line, n) in
            [(&b"get  a \r\n"[..], 1), (b"gets a\r\n", 1), (b"gat 0 a\r\n", 1), (b"gat 0\r\n", 0), (&long, 1)]
        {
            assert_eq!(keys(&request(line)).len(), n, "{line:?}");
        }
        assert_eq!(err(b"get\r\n"), (Some("ERROR"), 5));
        assert_eq!(err(b"get \r\n"), (Some("ERROR"), 6));
        assert_eq!(err(b"gat\r\n"), (Some("ERROR"), 5));
        assert_eq!(err(b"gat x a\r\n"), (Some(BAD_EXPTIME), 9));
        let long = [&b"get a "[..], &[b'k'; 251], b" b\r\n"].concat();
        assert_eq!(err(&long), (Some(BAD_FORMAT), long.len()));
        assert_eq!(err(b"get a\x01b\r\n"), (Some(BAD_FORMAT), 9));
        assert_eq!(err(b"GET a\r\n"), (Some("ERROR"), 7));
    }

    #[test]
    fn storage() {
        let Request::Store(s) = request(b"set k 4294967295 -1 3\r\na\r\n\r\n") else { panic!() };
        assert_eq!(
            s,
            Store {
                cmd: StoreCmd::Set,
                key: b"k",
                flags: u32::MAX,
                exptime: -1,
                data: b"a\r\n",
                noreply: false
            }
        );
        for (cmd, want) in [
            (&b"add"[..], StoreCmd::Add),
            (b"replace", StoreCmd::Replace),
            (b"append", StoreCmd::Append),
            (b"prepend", StoreCmd::Prepend),
        ] {
            let input = [cmd, b" k +5 0 1 noreply\r\nx\r\n"].concat();
            let Request::Store(s) = request(&input) else { panic!() };
            assert_eq!((s.cmd, s.flags, s.noreply, s.data), (want, 5, true, &b"x"[..]));
        }
        let Request::Store(s) = request(b"cas k 0 0 1 18446744073709551615\r\nx\r\n") else { panic!() };
        assert_eq!((s.cmd, s.noreply), (StoreCmd::Cas(u64::MAX), false));
        // Any sixth token is accepted; only `noreply` means noreply (memcached does the same).
        let Request::Store(s) = request(b"set k 0 0 1 norepl\r\nx\r\n") else { panic!() };
        assert!(!s.noreply);
        let Request::Store(s) = request(b"set k 0 0 0\r\n\r\n") else { panic!() };
        assert_eq!(s.data, b"");
    }

    #[test]
    fn storage_errors() {
        assert_eq!(err(b"set a 0 0\r\nx\r\n"), (Some("ERROR"), 11));
        assert_eq!(err(b"set a 0 0 1 noreply x\r\n"), (Some("ERROR"), 23));
        assert_eq!(err(b"cas a 0 0 1\r\n"), (Some("ERROR"), 13));
        // The data block of a rejected line is not skipped: it is read as the next command.
        for line in [
            &b"set a x 0 1\r\n"[..],
            b"set a -1 0 1\r\n",
            b"set a 4294967296 0 1\r\n",
            b"set a 0 x 1\r\n",
            b"set a 0 0 -1\r\n",
            b"set a 0 0 2147483646\r\n",
            b"cas a 0 0 1 x\r\n",
            b"cas a 0 0 1 -1\r\n",
        ] {
            assert_eq!(err(&[line, b"x\r\n"].concat()), (Some(BAD_FORMAT), line.len()), "{line:?}");
        }
        let long = [&b"set "[..], &[b'k'; 251], b" 0 0 1\r\n"].concat();
        assert_eq!(err(&long), (Some(BAD_FORMAT), long.len()));
        // noreply silences errors found after the arity check.
        assert_eq!(err(b"set a x 0 1 noreply\r\n"), (None, 21));
        // Too large: the declared bytes are swallowed, even before they arrive.
        assert_eq!(err(b"set a 0 0 1025\r\n"), (Some(TOO_LARGE), 16 + 1027));
        assert_eq!(err(b"set a 0 0 2147483645 noreply\r\n"), (None, 30 + 2147483647));
        assert_eq!(one(b"set a 0 0 1024\r\n"), Parse::Incomplete);
        // A block not ending in \r\n: its declared length plus 2 is dropped.
        assert_eq!(err(b"set a 0 0 1\r\nxyz\r\n"), (Some(BAD_CHUNK), 16));
        assert_eq!(err(b"set a 0 0 1\r\nxy\r\n"), (Some(BAD_CHUNK), 16));
        assert_eq!(err(b"set a 0 0 1 noreply\r\nxyz"), (None, 24));
        assert_eq!(one(b"set a 0 0 1\r\nx\r"), Parse::Incomplete);
        assert_eq!(one(b"set a 0 0 1\r\nx\n"), Parse::Incomplete);
    }

    #[test]
    fn arithmetic_touch_delete() {
        assert_eq!(
            request(b"incr k 18446744073709551615\r\n"),
            Request::Arith { incr: true, key: b"k", delta: u64::MAX, noreply: false }
        );
        assert_eq!(
            request(b"decr k 1 noreply\r\n"),
            Request::Arith { incr: false, key: b"k", delta: 1, noreply: true }
        );
        let delta = Some("CLIENT_ERROR invalid numeric delta argument");
        assert_eq!(err(b"incr k x\r\n"), (delta, 10));
        assert_eq!(err(b"incr k -1\r\n"), (delta, 11));
        assert_eq!(err(b"incr k 18446744073709551616\r\n"), (delta, 29));
        assert_eq!(err(b"incr k\r\n"), (Some("ERROR"), 8));
        assert_eq!(err(b"decr k 1 2 3\r\n"), (Some("ERROR"), 14));
        assert_eq!(request(b"touch k -1\r\n"), Request::Touch { key: b"k", exptime: -1, noreply: false });
        assert_eq!(err(b"touch k x\r\n"), (Some(BAD_EXPTIME), 11));
        assert_eq!(err(b"touch k\r\n"), (Some("ERROR"), 9));
        for ok in [&b"delete k\r\n"[..], b"delete k 0\r\n"] {
            assert_eq!(request(ok), Request::Delete { key: b"k", hold: 0, noreply: false });
        }
        for ok in [&b"delete k noreply\r\n"[..], b"delete k 0 noreply\r\n"] {
            assert_eq!(request(ok), Request::Delete { key: b"k", hold: 0, noreply: true });
        }
        let usage = Some("CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]");
        assert_eq!(err(b"delete k 1\r\n"), (usage, 12));
        assert_eq!(err(b"delete k 0 0\r\n"), (usage, 14));
        assert_eq!(err(b"delete k 1 noreply\r\n"), (None, 20));
        assert_eq!(err(b"delete k 0 noreply x\r\n"), (Some("ERROR"), 22));
        assert_eq!(err(b"delete\r\n"), (Some("ERROR"), 8));
    }

    #[test]
    fn leases() {
        assert_eq!(request(b"lease-get k\r\n"), Request::LeaseGet { key: b"k", stale: false });
        assert_eq!(request(b"lease-get k stale\r\n"), Request::LeaseGet { key: b"k", stale: true });
        assert_eq!(err(b"lease-get\r\n"), (Some("ERROR"), 11));
        assert_eq!(err(b"lease-get k stale x\r\n"), (Some("ERROR"), 21));
        assert_eq!(err(b"lease-get k fresh\r\n"), (Some(BAD_FORMAT), 19));
        assert_eq!(err(b"lease-get k\x01\r\n"), (Some(BAD_FORMAT), 14));
        let Request::Store(s) = request(b"lease-set k 18446744073709551615 7 -1 3 noreply\r\nabc\r\n") else {
            panic!()
        };
        let want = Store {
            cmd: StoreCmd::LeaseSet(u64::MAX),
            key: b"k",
            flags: 7,
            exptime: -1,
            data: b"abc",
            noreply: true,
        };
        assert_eq!(s, want);
        assert_eq!(err(b"lease-set k 5 0 0\r\n"), (Some("ERROR"), 19));
        for line in [&b"lease-set k x 0 0 1\r\n"[..], b"lease-set k -1 0 0 1\r\n", b"lease-set k 1 x 0 1\r\n"]
        {
            assert_eq!(err(&[line, b"x\r\n"].concat()), (Some(BAD_FORMAT), line.len()), "{line:?}");
        }
        assert_eq!(err(b"lease-set k 1 0 0 1025\r\n"), (Some(TOO_LARGE), 24 + 1027));
        assert_eq!(one(b"lease-set k 1 0 0 5\r\nab"), Parse::Incomplete);
    }

    #[test]
    fn delete_hold_off() {
        assert_eq!(request(b"delete k hold 30\r\n"), Request::Delete { key: b"k", hold: 30, noreply: false });
        assert_eq!(
            request(b"delete k hold 0 noreply\r\n"),
            Request::Delete { key: b"k", hold: 0, noreply: true }
        );
        // Any other form gets memcached's answer.
        let usage = Some("CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]");
        assert_eq!(err(b"delete k hold\r\n"), (usage, 15));
        assert_eq!(err(b"delete k hold -5\r\n"), (usage, 18));
        assert_eq!(err(b"delete k held 5\r\n"), (usage, 17));
        assert_eq!(err(b"delete k hold 5 x\r\n"), (Some("ERROR"), 19));
        assert_eq!(err(b"delete k hold 5 noreply x\r\n"), (Some("ERROR"), 27));
        assert_eq!(err(b"delete k hold x noreply\r\n"), (Some("ERROR"), 25));
        assert_eq!(err(b"delete k\x01 hold 5\r\n"), (usage, 18));
    }

    #[test]
    fn administration() {
        assert_eq!(request(b"flush_all\r\n"), Request::FlushAll { delay: None, noreply: false });
        assert_eq!(request(b"flush_all noreply\r\n"), Request::FlushAll { delay: None, noreply: true });
        assert_eq!(request(b"flush_all -1\r\n"), Request::FlushAll { delay: Some(-1), noreply: false });
        assert_eq!(
            request(b"flush_all 10 noreply\r\n"),
            Request::FlushAll { delay: Some(10), noreply: true }
        );
        assert_eq!(err(b"flush_all x\r\n"), (Some(BAD_EXPTIME), 13));
        assert_eq!(err(b"flush_all 1 2 3\r\n"), (Some("ERROR"), 17));
        assert_eq!(request(b"verbosity 1\r\n"), Request::Verbosity { level: 1, noreply: false });
        assert_eq!(request(b"verbosity 1 noreply\r\n"), Request::Verbosity { level: 1, noreply: true });
        assert_eq!(
            request(b"cache_memlimit 64\r\n"),
            Request::CacheMemlimit { megabytes: 64, noreply: false }
        );
        assert_eq!(
            request(b"cache_memlimit 64 x\r\n"),
            Request::CacheMemlimit { megabytes: 64, noreply: false }
        );
        assert_eq!(
            request(b"cache_memlimit 8 noreply\r\n"),
            Request::CacheMemlimit { megabytes: 8, noreply: true }
        );
        assert_eq!(err(b"verbosity x\r\n"), (Some(BAD_FORMAT), 13));
        assert_eq!(err(b"verbosity\r\n"), (Some("ERROR"), 11));
        assert_eq!(err(b"verbosity 1 2 3\r\n"), (Some("ERROR"), 17));
        assert_eq!(request(b"version x\r\n"), Request::Version);
        assert_eq!(request(b"quit x\r\n"), Request::Quit);
        assert_eq!(request(b"shutdown\r\n"), Request::Shutdown(ShutdownMode::Now));
        assert_eq!(request(b"shutdown graceful\r\n"), Request::Shutdown(ShutdownMode::Graceful));
        assert_eq!(request(b"shutdown x\r\n"), Request::Shutdown(ShutdownMode::Invalid));
        let Request::Stats(args) = request(b"stats detail on\r\n") else { panic!() };
        assert_eq!(args.collect::<Vec<_>>(), [&b"detail"[..], b"on"]);
        assert_eq!(request(b"stats\r\n"), Request::Stats(Tokens::default()));
        assert_eq!(request(b"shm\r\n"), Request::Shm);
        assert_eq!(request(b"refresh_certs\r\n"), Request::RefreshCerts);
        assert_eq!(request(b"refresh_certs now\r\n"), Request::RefreshCerts);
        assert_eq!(request(b"digest\r\n"), Request::Digest);
        assert_eq!(request(b"curve\r\n"), Request::Curve(None));
        assert_eq!(request(b"curve web\r\n"), Request::Curve(Some(b"web")));
        assert_eq!(
            request(b"tenant_memlimit web 1048576\r\n"),
            Request::TenantMemlimit { tenant: b"web", bytes: 1 << 20 }
        );
        for bad in [&b"tenant_memlimit web\r\n"[..], b"tenant_memlimit web lots\r\n", b"curve a b\r\n"] {
            assert!(matches!(one(bad), Parse::Error { .. }), "{bad:?}");
        }
        assert_eq!(request(b"shm hints /proc/1/fd/3\r\n"), Request::ShmHints(b"/proc/1/fd/3"));
        assert_eq!(request(b"shm handoff\r\n"), Request::ShmHandoff);
        for odd in [
            &b"shm hints\r\n"[..],
            b"shm handoff x\r\n",
            b"shm hints a b\r\n",
            b"shm other x\r\n",
            b"shm x\r\n",
        ] {
            assert_eq!(one(odd), Parse::error("ERROR", odd.len()), "{}", String::from_utf8_lossy(odd));
        }
        assert_eq!(request(b"debugtime -30\r\n"), Request::DebugTime(-30));
        assert_eq!(err(b"debugtime\r\n"), (Some("ERROR"), 11));
        assert_eq!(err(b"debugtime x\r\n"), (Some("ERROR"), 13));
    }

    #[test]
    fn unknown_and_http() {
        for bad in [&b"\r\n"[..], b"\n", b"x\r\n", b"a\r\n", b"bogus\r\n", b"mx\r\n"] {
            assert_eq!(err(bad), (Some("ERROR"), bad.len()), "{bad:?}");
        }
        assert_eq!(one(b"GET / HTTP/1.1\r\n"), Parse::Close);
        assert_eq!(one(b"POST /x HTTP/1.0\r\n"), Parse::Close);
        // memcached's branch for commands starting with 'g' answers ERROR instead.
        assert_eq!(err(b"gxx / HTTP/1.1\r\n"), (Some("ERROR"), 16));
    }

    #[test]
    fn slabs_commands_are_checked_as_memcached_checks_them() {
        let reassign = |src, dst| Request::Slabs(Slabs::Reassign { src, dst });
        assert_eq!(request(b"slabs reassign 1 2\r\n"), reassign(1, 2));
        assert_eq!(request(b"slabs reassign -1 +3\r\n"), reassign(-1, 3));
        assert_eq!(request(b"slabs reassign 4294967297 1\r\n"), reassign(1, 1));
        let automove = |noreply| Request::Slabs(Slabs::Automove { noreply });
        for ok in [
            &b"slabs automove 0\r\n"[..],
            b"slabs automove 2\r\n",
            b"slabs automove 1 x\r\n",
            b"slabs automove 4294967296\r\n",
            b"slabs automove ratio 0.8\r\n",
        ] {
            assert_eq!(request(ok), automove(false), "{}", String::from_utf8_lossy(ok));
        }
        assert_eq!(request(b"slabs automove 1 noreply\r\n"), automove(true));
        let bad = BAD_FORMAT;
        for (line, reply) in [
            (&b"slabs reassign invalid1 invalid2\r\n"[..], Some(bad)),
            (b"slabs reassign 1 noreply\r\n", Some(bad)),
            (b"slabs automove invalid\r\n", Some(bad)),
            (b"slabs automove -1\r\n", Some(bad)),
            (b"slabs automove x noreply\r\n", None),
            (b"slabs automove 3\r\n", Some("ERROR")),
            (b"slabs automove ratio\r\n", Some("ERROR")),
            (b"slabs automove ratio x\r\n", Some("ERROR")),
            (b"slabs reassign 1\r\n", Some("ERROR")),
            (b"slabs reassign 1 2 3\r\n", Some("ERROR")),
            (b"slabs automove\r\n", Some("ERROR")),
            (b"slabs\r\n", Some("ERROR")),
            (b"slabs foo 1\r\n", Some("ERROR")),
        ] {
            assert_eq!(err(line), (reply, line.len()), "{}", String::from_utf8_lossy(line));
        }
    }
}
