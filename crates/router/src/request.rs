//! What the router forwards: one key's request, owned (it outlives the client's buffer while
//! it waits on servers), and the reply it gets back.
//!
//! A client's multiget becomes one request per key, so each key can take its own route; their
//! replies are put back together in the client's order. The router always asks servers for a
//! reply — `noreply` and meta's `q` are honoured towards the client — so every destination
//! connection carries exactly one reply per request, in order, whoever sent it.

use shoal_proto::answer::{blocks, LeaseHeader, ValueHeader};
use shoal_proto::{encode_request, Body, Meta, MetaCmd, Request as Parsed};
pub use shoal_proto::{Op, Shape};

/// One key's request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The operation.
    pub op: Op,
    /// The key as the client sent it, routing prefix included.
    pub key: Key,
    /// Bytes of `key` that are its routing prefix (`/region/cluster/`), 0 without one.
    pub prefix_len: usize,
    /// The expiry, for operations that carry one.
    pub exptime: i64,
    /// The client wants no answer (`noreply`, meta `q` for the answers `q` hides).
    pub quiet: bool,
    /// What follows the key (a meta command's flags without `q`).
    body: Body<Vec<u8>>,
}

impl Request {
    /// The key without its routing prefix.
    pub fn routed_key(&self) -> &[u8] {
        &self.key[self.prefix_len..]
    }

    /// A meta command's flags as they are sent on (tokens separated by a space, without `q`);
    /// empty for any other command.
    pub fn meta_flags(&self) -> &[u8] {
        match &self.body {
            Body::Meta { flags, .. } => flags,
            _ => &[],
        }
    }

    /// This meta command with the flag tokens of `more` (each after a space) after its own.
    pub fn with_meta_flags_added(&self, more: &[u8]) -> Request {
        let mut request = self.clone();
        if let Body::Meta { flags, .. } = &mut request.body {
            for token in more.split(|&b| b == b' ').filter(|token| !token.is_empty()) {
                if !flags.is_empty() {
                    flags.push(b' ');
                }
                flags.extend_from_slice(token);
            }
        }
        request
    }

    /// Whether the key can be sent in a text command (a base64 key may decode to spaces or
    /// control bytes, or to more than memcached's `KEY_MAX` bytes).
    pub fn has_text_key(&self) -> bool {
        shoal_proto::valid_key(&self.key)
    }

    /// The same request with another expiry.
    pub fn with_exptime(&self, exptime: i64) -> Request {
        Request { exptime, ..self.clone() }
    }

    /// A plain `get` of the same key (WarmUpRoute's read of the warm pool).
    pub fn as_get(&self) -> Request {
        Request { op: Op::Get, exptime: 0, quiet: false, body: Body::None, ..self.clone() }
    }

    /// An `add` of `value` under the same key (WarmUpRoute's copy into the cold pool).
    pub fn as_add(&self, flags: u32, data: Vec<u8>, exptime: i64) -> Request {
        Request {
            op: Op::Add,
            exptime,
            quiet: false,
            body: Body::Store { flags, data, extra: None },
            ..self.clone()
        }
    }

    /// A meta set of `data` under the same key with `flags` (a hot key's copy: `route/hot.rs`).
    pub fn as_meta_set(&self, flags: Vec<u8>, data: Vec<u8>, exptime: i64) -> Request {
        let body = Body::Meta { flags, data: Some(data), base64: false };
        Request { op: Op::MetaSet, exptime, quiet: false, body, ..self.clone() }
    }

    /// A `lease-set` of `value` under the same key with `token`.
    pub fn as_lease_set(&self, token: u64, flags: u32, data: Vec<u8>, exptime: i64) -> Request {
        Request {
            op: Op::LeaseSet,
            exptime,
            quiet: false,
            body: Body::Store { flags, data, extra: Some(token) },
            ..self.clone()
        }
    }

    /// `flush_all [delay]` (no key; every destination gets one).
    pub fn flush_all(delay: Option<i64>, quiet: bool) -> Request {
        Request {
            op: Op::FlushAll,
            key: Key::new(b""),
            prefix_len: 0,
            exptime: 0,
            quiet,
            // A delay of 0 is flushed now, as none is: the server is sent none.
            body: Body::FlushAll { delay: delay.filter(|&d| d != 0) },
        }
    }

    /// A `delete` of `key` (the invalidation and spool paths).
    pub fn delete(key: &[u8], prefix_len: usize) -> Request {
        Request {
            op: Op::Delete,
            key: Key::new(key),
            prefix_len,
            exptime: 0,
            quiet: false,
            body: Body::Delete { hold: None },
        }
    }

    /// The bytes to send a server: the key with its routing prefix or without.
    pub fn encode(&self, keep_prefix: bool) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(keep_prefix, &mut out);
        out
    }

    /// Appends the bytes to send a server to `out` (a connection's output buffer: no
    /// allocation of its own).
    pub fn encode_into(&self, keep_prefix: bool, out: &mut Vec<u8>) {
        let key = if keep_prefix { &self.key[..] } else { self.routed_key() };
        encode_request(self.op, key, self.exptime, &self.body, out);
    }

    /// What the server's answer looks like.
    pub fn shape(&self) -> Shape {
        self.op.shape()
    }
}

/// A request's key: kept in the request itself when it is as short as most keys are, so that
/// a request (a multiget, one per key) allocates nothing for it; a longer one on the heap.
#[derive(Clone)]
pub enum Key {
    Inline { len: u8, bytes: [u8; INLINE_KEY] },
    Heap(Box<[u8]>),
}

/// The longest key kept inline: a `Key` is then 48 bytes, twice a `Vec`'s 24.
const INLINE_KEY: usize = 46;

impl Key {
    /// `key`, inline or on the heap as its length says.
    pub fn new(key: &[u8]) -> Key {
        if key.len() > INLINE_KEY {
            return Key::Heap(key.into());
        }
        let mut bytes = [0; INLINE_KEY];
        bytes[..key.len()].copy_from_slice(key);
        Key::Inline { len: key.len() as u8, bytes }
    }
}

impl std::ops::Deref for Key {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Key::Heap(bytes) => bytes,
        }
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        **self == **other
    }
}

impl Eq for Key {}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

/// What the router tells a client about its request, before it is encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A server's answer, as it came (for [`Shape::Values`]: the blocks without `END`).
    Answer(Vec<u8>),
    /// The request could not be carried out by the router: why, and whether the destination
    /// was unreachable (connect), slow (timeout), marked down (tko) or answered an error
    /// (remote).
    Error(ErrorKind, String),
}

/// Why a request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    Connect,
    Timeout,
    Tko,
    Remote,
    /// The route itself answers an error (`ErrorRoute`).
    Route,
    /// A destination that is down missed a change its spool had no room for: never failed
    /// over, so the client hears of it.
    SpoolFull,
}

/// Whether a server's answer is an error (`SERVER_ERROR`, `CLIENT_ERROR`, `ERROR`).
pub fn is_error_answer(answer: &[u8]) -> bool {
    answer.starts_with(b"SERVER_ERROR") || answer.starts_with(b"ERROR") || answer.starts_with(b"CLIENT_ERROR")
}

impl Reply {
    /// Whether this is an error, routed or remote (`SERVER_ERROR`, `ERROR`).
    pub fn is_error(&self) -> bool {
        match self {
            Reply::Error(..) => true,
            Reply::Answer(a) => is_error_answer(a),
        }
    }

    /// The error kind for failover decisions (remote errors included).
    pub fn error_kind(&self) -> Option<ErrorKind> {
        match self {
            Reply::Error(kind, _) => Some(*kind),
            _ if self.is_error() => Some(ErrorKind::Remote),
            _ => None,
        }
    }

    /// Whether a read found its key (a `VALUE` block, meta `VA`/`HD` on `mg`).
    pub fn is_hit(&self) -> bool {
        match self {
            Reply::Answer(a) => a.starts_with(b"VALUE ") || a.starts_with(b"VA ") || a.starts_with(b"HD"),
            Reply::Error(..) => false,
        }
    }

    /// The first `VALUE` block's flags and data, for copying an item between pools.
    pub fn value(&self) -> Option<(u32, Vec<u8>)> {
        let Reply::Answer(a) = self else { return None };
        let block = blocks(a).next()?;
        ValueHeader::parse(block.line).map(|h| (h.flags, block.data.to_vec()))
    }

    /// The lease token of an `LVALUE` answer (≥ 2: this caller holds the lease).
    pub fn lease_token(&self) -> Option<u64> {
        let Reply::Answer(a) = self else { return None };
        LeaseHeader::parse(blocks(a).next()?.line).map(|h| h.token)
    }
}

/// The per-key requests of one client request: the one of a single-key request kept inline
/// (no list allocated per request), a multiget's in a list.
#[derive(Debug)]
pub enum Keys {
    One(Request),
    Many(Vec<Request>),
}

impl std::ops::Deref for Keys {
    type Target = [Request];

    fn deref(&self) -> &[Request] {
        match self {
            Keys::One(request) => std::slice::from_ref(request),
            Keys::Many(requests) => requests,
        }
    }
}

/// The requests a parsed client request stands for (one per key), or `None` for requests
/// the router answers itself (`stats`, `version`, `mn`, …).
pub fn split(parsed: &Parsed<'_>) -> Option<Keys> {
    let request = |op, key: &[u8], exptime, quiet, body| Request {
        op,
        key: Key::new(key),
        prefix_len: prefix_len(key),
        exptime,
        quiet,
        body,
    };
    let one = |op, key: &[u8], exptime, quiet, body| Keys::One(request(op, key, exptime, quiet, body));
    Some(match parsed {
        Parsed::Get(get) => {
            let op = match (get.cas, get.touch.is_some()) {
                (false, false) => Op::Get,
                (true, false) => Op::Gets,
                (false, true) => Op::Gat,
                (true, true) => Op::Gats,
            };
            let exptime = get.touch.unwrap_or(0);
            let mut keys = get.keys.clone().map(|key| request(op, key, exptime, false, Body::None));
            if get.count == 1 {
                Keys::One(keys.next()?)
            } else {
                let mut many = Vec::with_capacity(get.count);
                many.extend(keys);
                Keys::Many(many)
            }
        }
        Parsed::Store(store) => {
            let (op, extra) = store.cmd.op();
            let body = Body::Store { flags: store.flags, data: store.data.to_vec(), extra };
            one(op, store.key, store.exptime, store.noreply, body)
        }
        Parsed::Delete { key, hold, noreply } => {
            // A hold of 0 is none: the server is sent none.
            one(Op::Delete, key, 0, *noreply, Body::Delete { hold: (*hold > 0).then_some(*hold) })
        }
        Parsed::Arith { incr, key, delta, noreply } => {
            one(if *incr { Op::Incr } else { Op::Decr }, key, 0, *noreply, Body::Arith { delta: *delta })
        }
        Parsed::Touch { key, exptime, noreply } => one(Op::Touch, key, *exptime, *noreply, Body::Touch),
        Parsed::LeaseGet { key, stale } => one(Op::LeaseGet, key, 0, false, Body::LeaseGet { stale: *stale }),
        Parsed::Meta(meta) => return meta_request(meta).map(Keys::One),
        _ => return None,
    })
}

/// A meta command with a key (`mn` and `me` are the router's to answer). A base64 key (`b`)
/// is decoded: routing prefixes and hashing apply to the key itself, as for a text key.
fn meta_request(meta: &Meta<'_>) -> Option<Request> {
    let op = match meta.cmd {
        MetaCmd::Get => Op::MetaGet,
        MetaCmd::Set => Op::MetaSet,
        MetaCmd::Delete => Op::MetaDelete,
        MetaCmd::Arithmetic => Op::MetaArithmetic,
        _ => return None,
    };
    let mut flags = Vec::new();
    let mut quiet = false;
    let mut exptime = 0;
    for token in meta.order.clone() {
        if token == b"q" {
            quiet = true;
            continue;
        }
        if let Some(t) = token.strip_prefix(b"T").and_then(|t| std::str::from_utf8(t).ok()?.parse().ok()) {
            exptime = t;
        }
        if !flags.is_empty() {
            flags.push(b' ');
        }
        flags.extend_from_slice(token);
    }
    let data = (op == Op::MetaSet).then(|| meta.data.to_vec());
    let mut scratch = [0; shoal_proto::KEY_MAX];
    let key = Key::new(meta.key(&mut scratch));
    let prefix_len = prefix_len(&key);
    let base64 = meta.flags.has(b'b');
    Some(Request { op, key, prefix_len, exptime, quiet, body: Body::Meta { flags, data, base64 } })
}

/// The length of a key's routing prefix.
fn prefix_len(key: &[u8]) -> usize {
    let routed = shoal_route::Routed::parse(key);
    key.len() - routed.key.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_proto::{Parse, Parser};

    fn requests(wire: &[u8]) -> Vec<Request> {
        let mut parser = Parser::new(1 << 20);
        match parser.parse(wire) {
            Parse::Done { request, .. } => split(&request).expect("forwarded").to_vec(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_multiget_is_one_request_per_key_and_prefixes_come_off() {
        let r = requests(b"gets /east/web/a b\r\n");
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].op, r[0].routed_key(), r[0].prefix_len), (Op::Gets, &b"a"[..], 10));
        assert_eq!(r[0].encode(false), b"gets a\r\n");
        assert_eq!(r[0].encode(true), b"gets /east/web/a\r\n");
        assert_eq!(r[1].encode(false), b"gets b\r\n");
        // Appended after what a connection's buffer holds already.
        let mut out = b"get x\r\n".to_vec();
        r[1].encode_into(false, &mut out);
        assert_eq!(out, b"get x\r\ngets b\r\n");
    }

    #[test]
    fn a_key_is_the_same_bytes_inline_or_on_the_heap() {
        let long = [b'k'; 300];
        for len in [0, 1, 16, INLINE_KEY - 1, INLINE_KEY, INLINE_KEY + 1, 250, 300] {
            let key = Key::new(&long[..len]);
            assert_eq!(&*key, &long[..len]);
            assert_eq!(matches!(key, Key::Inline { .. }), len <= INLINE_KEY, "{len}");
            assert_eq!(key.clone(), key);
        }
        assert_ne!(Key::new(b"ab"), Key::new(b"abc"));
        assert_eq!(std::mem::size_of::<Key>(), 48);
    }

    #[test]
    fn flush_all_takes_its_delay_or_none() {
        assert_eq!(Request::flush_all(None, false).encode(false), b"flush_all\r\n");
        assert_eq!(Request::flush_all(Some(0), false).encode(false), b"flush_all\r\n");
        assert_eq!(Request::flush_all(Some(30), true).encode(false), b"flush_all 30\r\n");
    }

    #[test]
    fn storage_keeps_its_fields_and_the_router_always_asks_for_a_reply() {
        let r = requests(b"set k 5 100 3 noreply\r\nabc\r\n").remove(0);
        assert!(r.quiet);
        assert_eq!(r.encode(false), b"set k 5 100 3\r\nabc\r\n");
        assert_eq!(r.with_exptime(10).encode(false), b"set k 5 10 3\r\nabc\r\n");
        let c = requests(b"cas k 0 0 1 77\r\nx\r\n").remove(0);
        assert_eq!(c.encode(false), b"cas k 0 0 1 77\r\nx\r\n");
        let l = requests(b"lease-set k 9 1 0 2\r\nhi\r\n").remove(0);
        assert_eq!(l.encode(false), b"lease-set k 9 1 0 2\r\nhi\r\n");
        let m = requests(b"ms /a/b/k 2 T30 q F3\r\nhi\r\n").remove(0);
        assert!(m.quiet);
        assert_eq!(m.encode(false), b"ms k 2 T30 F3\r\nhi\r\n");
        assert_eq!(m.with_exptime(5).encode(false), b"ms k 2 T5 F3\r\nhi\r\n");
        assert_eq!(requests(b"delete k hold 30\r\n")[0].encode(false), b"delete k hold 30\r\n");
        assert_eq!(requests(b"gat 60 a\r\n")[0].encode(false), b"gat 60 a\r\n");
    }

    #[test]
    fn numbers_are_written_as_sent_negative_and_largest_included() {
        assert_eq!(
            requests(b"set k 4294967295 -1 0\r\n\r\n")[0].encode(false),
            b"set k 4294967295 -1 0\r\n\r\n"
        );
        assert_eq!(
            requests(b"incr k 18446744073709551615\r\n")[0].encode(false),
            b"incr k 18446744073709551615\r\n"
        );
        assert_eq!(requests(b"touch k 0\r\n")[0].encode(false), b"touch k 0\r\n");
        assert_eq!(requests(b"ms k 1 T-1\r\nx\r\n")[0].encode(false), b"ms k 1 T-1\r\nx\r\n");
        let mut b64 = Vec::new();
        shoal_proto::encode_base64(b"/r/c/a b", &mut b64);
        let mut line = b"mg ".to_vec();
        line.extend_from_slice(&b64);
        line.extend_from_slice(b" b v\r\n");
        let r = requests(&line).remove(0);
        assert_eq!((r.routed_key(), r.prefix_len), (&b"a b"[..], 5));
        assert_eq!(r.encode(false), b"mg YSBi b v\r\n");
    }

    #[test]
    fn replies_say_hit_value_and_token() {
        let hit = Reply::Answer(b"VALUE k 3 2\r\nhi\r\n".to_vec());
        assert!(hit.is_hit() && !hit.is_error());
        assert_eq!(hit.value(), Some((3, b"hi".to_vec())));
        let lease = Reply::Answer(b"LVALUE k 1234 0 0\r\n\r\n".to_vec());
        assert_eq!((lease.is_hit(), lease.lease_token()), (false, Some(1234)));
        assert!(Reply::Answer(b"SERVER_ERROR out of memory\r\n".to_vec()).is_error());
        assert!(!Reply::Answer(Vec::new()).is_hit());
    }
}
