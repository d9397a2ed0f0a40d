//! Requests written for a server to read: the operations ([`Op`]), what follows a key
//! ([`Body`]), and the encoders that append a request straight into the caller's buffer (a
//! connection's output buffer: nothing of their own is allocated). The router forwards with
//! them, the client and the load generator send with them; what they write, [`Parser`](crate::Parser)
//! reads back as the same request.

use crate::answer::Shape;
use crate::base64::encode_base64;
use crate::token::Tokens;

/// How a storage request stores: the storage operations of every protocol (text commands,
/// meta `ms` modes, binary opcodes), which a server carries out with one store and a router
/// forwards as their [`Op`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    /// Store only over the CAS unique the client holds.
    Cas,
}

impl From<StoreMode> for Op {
    fn from(mode: StoreMode) -> Op {
        match mode {
            StoreMode::Set => Op::Set,
            StoreMode::Add => Op::Add,
            StoreMode::Replace => Op::Replace,
            StoreMode::Append => Op::Append,
            StoreMode::Prepend => Op::Prepend,
            StoreMode::Cas => Op::Cas,
        }
    }
}

/// An operation on one key (and `flush_all`), as a router's routes select on it
/// (`OperationSelectorRoute`) and as the encoders write it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Get,
    Gets,
    Gat,
    Gats,
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
    Delete,
    Incr,
    Decr,
    Touch,
    LeaseGet,
    LeaseSet,
    MetaGet,
    MetaSet,
    MetaDelete,
    MetaArithmetic,
    /// `flush_all [delay]`, sent to every destination.
    FlushAll,
}

impl Op {
    /// mcrouter's operation names (and the meta commands' own).
    pub fn parse(name: &str) -> Option<Op> {
        Some(match name {
            "get" => Op::Get,
            "gets" => Op::Gets,
            "gat" => Op::Gat,
            "gats" => Op::Gats,
            "set" => Op::Set,
            "add" => Op::Add,
            "replace" => Op::Replace,
            "append" => Op::Append,
            "prepend" => Op::Prepend,
            "cas" => Op::Cas,
            "delete" => Op::Delete,
            "incr" => Op::Incr,
            "decr" => Op::Decr,
            "touch" => Op::Touch,
            "lease-get" | "lease_get" => Op::LeaseGet,
            "lease-set" | "lease_set" => Op::LeaseSet,
            "mg" | "metaget" => Op::MetaGet,
            "ms" => Op::MetaSet,
            "md" => Op::MetaDelete,
            "ma" => Op::MetaArithmetic,
            "flush_all" => Op::FlushAll,
            _ => return None,
        })
    }

    /// The command word on the wire.
    pub fn word(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Gets => "gets",
            Op::Gat => "gat",
            Op::Gats => "gats",
            Op::Set => "set",
            Op::Add => "add",
            Op::Replace => "replace",
            Op::Append => "append",
            Op::Prepend => "prepend",
            Op::Cas => "cas",
            Op::Delete => "delete",
            Op::Incr => "incr",
            Op::Decr => "decr",
            Op::Touch => "touch",
            Op::LeaseGet => "lease-get",
            Op::LeaseSet => "lease-set",
            Op::MetaGet => "mg",
            Op::MetaSet => "ms",
            Op::MetaDelete => "md",
            Op::MetaArithmetic => "ma",
            Op::FlushAll => "flush_all",
        }
    }

    /// Whether the operation reads (a miss may be answered elsewhere: `MissFailoverRoute`).
    pub fn is_read(self) -> bool {
        matches!(self, Op::Get | Op::Gets | Op::Gat | Op::Gats | Op::LeaseGet | Op::MetaGet)
    }

    /// Whether the operation writes a value with an expiry (`ModifyExptimeRoute`).
    pub fn sets_expiry(self) -> bool {
        matches!(
            self,
            Op::Set
                | Op::Add
                | Op::Replace
                | Op::Cas
                | Op::Touch
                | Op::Gat
                | Op::Gats
                | Op::LeaseSet
                | Op::MetaSet
        )
    }

    /// What the server's answer looks like.
    pub fn shape(self) -> Shape {
        match self {
            Op::Get | Op::Gets | Op::Gat | Op::Gats | Op::LeaseGet => Shape::Values,
            Op::MetaGet | Op::MetaSet | Op::MetaDelete | Op::MetaArithmetic => Shape::Meta,
            _ => Shape::Line,
        }
    }
}

/// What follows the key on the wire; `D` holds bytes, owned (`Vec<u8>`: a router's request
/// outlives its client's buffer) or borrowed (`&[u8]`: a client's call).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body<D> {
    /// Nothing: the get family.
    None,
    /// `flush_all [delay]`.
    FlushAll { delay: Option<i64> },
    /// A storage command's flags and data; `extra` is `cas`'s unique or `lease-set`'s token.
    Store { flags: u32, data: D, extra: Option<u64> },
    /// `delete <key> [hold <seconds>]`.
    Delete { hold: Option<u32> },
    /// `incr`/`decr`'s delta.
    Arith { delta: u64 },
    /// `touch <key> <exptime>`.
    Touch,
    /// `lease-get <key> [stale]`.
    LeaseGet { stale: bool },
    /// A meta command's flags (space-separated; a `T` flag is written with the request's
    /// expiry when the operation sets one), `ms`'s data, and whether the key goes in base64
    /// (`b`: the key given is the decoded one).
    Meta { flags: D, data: Option<D>, base64: bool },
}

/// Appends the request `op` on `key` to `out`: `exptime` is the expiry of operations that
/// carry one.
pub fn encode_request<D: AsRef<[u8]>>(op: Op, key: &[u8], exptime: i64, body: &Body<D>, out: &mut Vec<u8>) {
    match body {
        Body::None => return encode_retrieval(op, exptime, [key], out),
        Body::FlushAll { delay } => {
            out.extend_from_slice(b"flush_all");
            if let Some(delay) = delay {
                push_field(out, b"", *delay);
            }
            out.extend_from_slice(b"\r\n");
            return;
        }
        _ => {}
    }
    let data_len = match body {
        Body::Store { data, .. } | Body::Meta { data: Some(data), .. } => data.as_ref().len(),
        _ => 0,
    };
    // Base64 makes a key 4/3 as long; the words and numbers fit in the 80.
    out.reserve(key.len() * 4 / 3 + data_len + 80);
    out.extend_from_slice(op.word().as_bytes());
    out.push(b' ');
    if let Body::Meta { base64: true, .. } = body {
        encode_base64(key, out);
    } else {
        out.extend_from_slice(key);
    }
    match body {
        Body::None | Body::FlushAll { .. } => unreachable!("encoded above"),
        Body::Store { flags, data, extra } => {
            if let (Op::LeaseSet, Some(token)) = (op, extra) {
                push_field(out, b"", *token);
            }
            push_field(out, b"", *flags);
            push_field(out, b"", exptime);
            push_field(out, b"", data.as_ref().len() as u64);
            if let (Op::Cas, Some(unique)) = (op, extra) {
                push_field(out, b"", *unique);
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(data.as_ref());
        }
        Body::Delete { hold: Some(hold) } => push_field(out, b"hold ", *hold),
        Body::Delete { hold: None } => {}
        Body::Arith { delta } => push_field(out, b"", *delta),
        Body::Touch => push_field(out, b"", exptime),
        Body::LeaseGet { stale } => {
            if *stale {
                out.extend_from_slice(b" stale");
            }
        }
        Body::Meta { flags, data, .. } => {
            if let Some(d) = data {
                push_field(out, b"", d.as_ref().len() as u64);
            }
            for flag in Tokens::new(flags.as_ref()) {
                if flag.first() == Some(&b'T') && op.sets_expiry() {
                    push_field(out, b"T", exptime);
                } else {
                    out.push(b' ');
                    out.extend_from_slice(flag);
                }
            }
            if let Some(d) = data {
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(d.as_ref());
            }
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends a retrieval of `keys` to `out`: `get`, `gets`, or `gat`/`gats` with `exptime`
/// (one line, however many keys).
pub fn encode_retrieval<K: AsRef<[u8]>>(
    op: Op,
    exptime: i64,
    keys: impl IntoIterator<Item = K>,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(op.word().as_bytes());
    if matches!(op, Op::Gat | Op::Gats) {
        push_field(out, b"", exptime);
    }
    for key in keys {
        out.push(b' ');
        out.extend_from_slice(key.as_ref());
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends `n` in decimal without allocating (answers and forwarded requests carry numbers on
/// every request's path: a get's answer two, its flags and its length).
#[inline]
pub fn push_u64(out: &mut Vec<u8>, n: u64) {
    if n < 10 {
        // Flags are mostly 0: one byte, nothing to divide.
        out.push(b'0' + n as u8);
        return;
    }
    if n < 100_000_000 {
        push_short(out, n);
    } else {
        push_long(out, n);
    }
}

/// [`push_u64`] of 10 to 99 999 999 (flags, lengths): the digits are gathered in one word,
/// first digit in its lowest byte, two digits per division, and appended as a whole word cut
/// back after: no copy of a variable length.
#[inline]
fn push_short(out: &mut Vec<u8>, mut n: u64) {
    let (mut word, mut len) = (0u64, 0);
    while n >= 100 {
        word = (word << 16) | u64::from(DIGIT_PAIRS[(n % 100) as usize]);
        len += 2;
        n /= 100;
    }
    if n >= 10 {
        word = (word << 16) | u64::from(DIGIT_PAIRS[n as usize]);
        len += 2;
    } else {
        word = (word << 8) | u64::from(b'0' + n as u8);
        len += 1;
    }
    let end = out.len() + len;
    out.extend_from_slice(&word.to_le_bytes());
    out.truncate(end);
}

/// [`push_u64`] of 100 000 000 and more (CAS uniques), kept out of line so that the common
/// numbers' code stays small enough to inline.
#[inline(never)]
fn push_long(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// The numbers 00 to 99 as two ASCII digits, the tens digit in the low byte (first in memory
/// once the word is stored little-endian).
const DIGIT_PAIRS: [u16; 100] = {
    let mut pairs = [0u16; 100];
    let mut i = 0;
    while i < 100 {
        pairs[i] = (b'0' + (i / 10) as u8) as u16 | ((b'0' + (i % 10) as u8) as u16) << 8;
        i += 1;
    }
    pairs
};

/// Appends a space, `prefix` and `n` in decimal (as `format!` would write it, without its
/// machinery: this is on every request's path).
fn push_field(out: &mut Vec<u8>, prefix: &[u8], n: impl Into<Number>) {
    let (negative, magnitude) = match n.into() {
        Number::Signed(v) => (v < 0, v.unsigned_abs()),
        Number::Unsigned(v) => (false, v),
    };
    out.push(b' ');
    out.extend_from_slice(prefix);
    if negative {
        out.push(b'-');
    }
    push_u64(out, magnitude);
}

/// A number [`push_field`] writes: any of the protocol's integer fields.
enum Number {
    Signed(i64),
    Unsigned(u64),
}

impl From<i64> for Number {
    fn from(v: i64) -> Self {
        Number::Signed(v)
    }
}

impl From<u64> for Number {
    fn from(v: u64) -> Self {
        Number::Unsigned(v)
    }
}

impl From<u32> for Number {
    fn from(v: u32) -> Self {
        Number::Unsigned(u64::from(v))
    }
}

#[cfg(test)]
mod tests;
