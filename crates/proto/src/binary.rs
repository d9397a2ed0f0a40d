//! memcached's binary protocol (doc/protocol-binary.txt): a 24-byte header, then extras, key
//! and value, lengths in the header, numbers big-endian.
//!
//! ```text
//!  0 magic 0x80 │ 1 opcode │ 2-3 key length │ 4 extras length │ 5 data type │ 6-7 vbucket
//!  8-11 total body length (extras + key + value) │ 12-15 opaque │ 16-23 CAS
//! ```
//!
//! The checks, their order and the bytes each refusal drops are memcached 1.6.18's
//! (`try_read_command_binary`, `dispatch_bin_command`): a wrong magic closes the connection; a
//! key or extras longer than the body is an unknown command and closes; before authentication
//! (`-S`) anything but the SASL commands and `version` is an auth error and closes; a key over
//! 250 bytes or extras of the wrong shape are invalid arguments and close; an unknown opcode
//! is answered and its body skipped; a value over the item limit is too large and skipped,
//! never buffered. Nothing allocates: keys and values borrow from the buffer.

use crate::key::KEY_MAX;

/// The length of a request or response header.
pub const HEADER_LEN: usize = 24;
/// The first byte of every request (and how `-B auto` recognises a binary connection).
pub const REQUEST_MAGIC: u8 = 0x80;
/// The first byte of every response.
pub const RESPONSE_MAGIC: u8 = 0x81;
/// memcached refuses SASL mechanism names longer than this (`MAX_SASL_MECH_LEN`).
pub const MAX_MECHANISM: usize = 32;
/// An incr/decr expiration that means "do not create a missing counter".
pub const NO_CREATE: u32 = 0xffff_ffff;

/// Opcodes, as protocol-binary.txt names them.
#[allow(missing_docs)]
pub mod opcode {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const SASL_LIST_MECHS: u8 = 0x20;
    pub const SASL_AUTH: u8 = 0x21;
    pub const SASL_STEP: u8 = 0x22;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
}

/// A response status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    /// No error.
    Success = 0x00,
    /// Key not found.
    KeyNotFound = 0x01,
    /// Key exists (a CAS mismatch, or `add` of a present key).
    KeyExists = 0x02,
    /// Value too large.
    TooLarge = 0x03,
    /// Invalid arguments.
    InvalidArguments = 0x04,
    /// Item not stored.
    NotStored = 0x05,
    /// Incr/decr on a non-numeric value.
    NonNumeric = 0x06,
    /// Authentication required or failed.
    AuthError = 0x20,
    /// Authentication continues (a SASL step is expected).
    AuthContinue = 0x21,
    /// Unknown command.
    UnknownCommand = 0x81,
    /// Out of memory.
    OutOfMemory = 0x82,
}

impl Status {
    /// The body memcached sends with an error status when it has nothing more specific to say
    /// (`write_bin_error`).
    pub fn message(self) -> &'static str {
        match self {
            Status::Success | Status::AuthContinue => "",
            Status::KeyNotFound => "Not found",
            Status::KeyExists => "Data exists for key.",
            Status::TooLarge => "Too large.",
            Status::InvalidArguments => "Invalid arguments",
            Status::NotStored => "Not stored.",
            Status::NonNumeric => "Non-numeric server-side value for incr or decr",
            Status::AuthError => "Auth failure.",
            Status::UnknownCommand => "Unknown command",
            Status::OutOfMemory => "Out of memory",
        }
    }
}

/// How a storage request stores (never `Cas`: a binary store's CAS is its header field).
pub use crate::encode::StoreMode;

/// A storage request's arguments (flags and exptime are 0 for append and prepend).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreRequest<'a> {
    pub mode: StoreMode,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u32,
    pub exptime: u32,
}

/// An increment's or decrement's arguments: a missing counter is created with `initial`
/// unless `exptime` is [`NO_CREATE`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArithRequest<'a> {
    pub incr: bool,
    pub key: &'a [u8],
    pub delta: u64,
    pub initial: u64,
    pub exptime: u32,
}

/// A binary request's command, with its arguments decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command<'a> {
    /// `get`/`getk` (and quiet forms): `with_key` answers with the key.
    Get { key: &'a [u8], with_key: bool },
    /// `gat`/`gatk` (and quiet forms): get, and set the expiry.
    GetAndTouch { key: &'a [u8], with_key: bool, exptime: u32 },
    /// `touch`: set the expiry; the answer carries the flags, no value.
    Touch { key: &'a [u8], exptime: u32 },
    /// `set add replace append prepend`.
    Store(StoreRequest<'a>),
    /// `delete`.
    Delete { key: &'a [u8] },
    /// `increment`/`decrement`.
    Arith(ArithRequest<'a>),
    /// `flush`, optionally delayed.
    Flush { delay: Option<u32> },
    /// `noop`.
    Noop,
    /// `version`.
    Version,
    /// `quit`: answer (unless quiet), then close.
    Quit,
    /// `stat`, with a group name (empty: the general statistics).
    Stat { group: &'a [u8] },
    /// SASL: list the mechanisms.
    SaslListMechs,
    /// SASL: start an exchange with `mechanism`; `data` is the client's first message.
    SaslAuth { mechanism: &'a [u8], data: &'a [u8] },
    /// SASL: the next message of an exchange.
    SaslStep { mechanism: &'a [u8], data: &'a [u8] },
}

/// A complete binary request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BinaryRequest<'a> {
    /// The opcode as sent: a response echoes it.
    pub opcode: u8,
    /// Echoed in the response.
    pub opaque: u32,
    /// The CAS the request carries (0: none).
    pub cas: u64,
    /// A quiet opcode: a successful answer is not sent (a `getq` hit still is).
    pub quiet: bool,
    pub command: Command<'a>,
}

/// What [`BinaryParser::parse`] found at the start of the buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BinaryParse<'a> {
    /// Not a whole request yet: call again with the same bytes and more.
    Incomplete,
    /// A request and the bytes it took.
    Done { request: BinaryRequest<'a>, consumed: usize },
    /// A refused request: answer `status` (with its [`Status::message`]) under `opcode` and
    /// `opaque`, drop `consume` bytes (it may exceed the buffer: a too-large value is skipped
    /// as it arrives), and close the connection after the answer if `close`. `forget`: a key
    /// whose current value must go too (`set` refused for size).
    Refused { opcode: u8, opaque: u32, status: Status, consume: usize, close: bool, forget: Option<&'a [u8]> },
    /// Not the binary protocol: close without a word.
    Close,
}

/// A binary request parser; it keeps no state between calls.
#[derive(Clone, Copy, Debug)]
pub struct BinaryParser {
    /// Values longer than this are refused as too large (memcached's `-I`).
    pub max_item_bytes: usize,
    /// SASL is on (`-S`): the SASL commands are served rather than unknown.
    pub sasl: bool,
}

/// The fixed header of a request.
struct Header {
    opcode: u8,
    key_len: usize,
    extras_len: usize,
    body_len: usize,
    opaque: u32,
    cas: u64,
}

impl Header {
    fn read(b: &[u8; HEADER_LEN]) -> Header {
        Header {
            opcode: b[1],
            key_len: usize::from(u16::from_be_bytes([b[2], b[3]])),
            extras_len: usize::from(b[4]),
            body_len: u32::from_be_bytes([b[8], b[9], b[10], b[11]]) as usize,
            opaque: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
            cas: u64::from_be_bytes([b[16], b[17], b[18], b[19], b[20], b[21], b[22], b[23]]),
        }
    }
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be_u64(b: &[u8]) -> u64 {
    u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

impl BinaryParser {
    /// Parses the request at the start of `buf`. `authenticated`: the connection may run any
    /// command (always true without SASL); otherwise only the SASL commands and `version`.
    pub fn parse<'a>(&self, buf: &'a [u8], authenticated: bool) -> BinaryParse<'a> {
        use opcode::*;
        let Some(header) = buf.first_chunk::<HEADER_LEN>() else { return BinaryParse::Incomplete };
        if header[0] != REQUEST_MAGIC {
            return BinaryParse::Close;
        }
        let h = Header::read(header);
        let (ext_len, key_len, body_len) = (h.extras_len, h.key_len, h.body_len);
        // memcached dispatches once the extras and the key are in; the value is read after.
        let at_value = HEADER_LEN + ext_len + key_len;
        if buf.len() < at_value {
            return BinaryParse::Incomplete;
        }
        let refuse_forgetting = |status: Status, consume: usize, close: bool, forget: Option<&'a [u8]>| {
            BinaryParse::Refused { opcode: h.opcode, opaque: h.opaque, status, consume, close, forget }
        };
        let refuse =
            |status: Status, consume: usize, close: bool| refuse_forgetting(status, consume, close, None);
        if key_len + ext_len > body_len {
            return refuse(Status::UnknownCommand, at_value, true);
        }
        let authorized = matches!(h.opcode, SASL_LIST_MECHS | SASL_AUTH | SASL_STEP | VERSION);
        if !authenticated && !authorized {
            return refuse(Status::AuthError, at_value, true);
        }
        if key_len > KEY_MAX {
            return refuse(Status::InvalidArguments, at_value, true);
        }
        let extras = &buf[HEADER_LEN..HEADER_LEN + ext_len];
        let key = &buf[HEADER_LEN + ext_len..at_value];
        let value_len = body_len - ext_len - key_len;
        let invalid = refuse(Status::InvalidArguments, at_value, true);
        let quiet = matches!(
            h.opcode,
            GETQ | GETKQ
                | SETQ
                | ADDQ
                | REPLACEQ
                | DELETEQ
                | INCREMENTQ
                | DECREMENTQ
                | QUITQ
                | FLUSHQ
                | APPENDQ
                | PREPENDQ
                | GATQ
                | GATKQ
        );
        let empty = ext_len == 0 && key_len == 0 && body_len == 0;
        // Commands without a value end at the key; memcached leaves any further body bytes
        // (which only `stat`, `touch` and `gat` let through) to be read as the next request.
        let command = match h.opcode {
            VERSION if empty => Command::Version,
            NOOP if empty => Command::Noop,
            QUIT | QUITQ if empty => Command::Quit,
            FLUSH | FLUSHQ if key_len == 0 && body_len == ext_len && (ext_len == 0 || ext_len == 4) => {
                Command::Flush { delay: (ext_len == 4).then(|| be_u32(extras)) }
            }
            GET | GETQ | GETK | GETKQ if ext_len == 0 && body_len == key_len && key_len > 0 => {
                Command::Get { key, with_key: matches!(h.opcode, GETK | GETKQ) }
            }
            DELETE | DELETEQ if key_len > 0 && ext_len == 0 && body_len == key_len => Command::Delete { key },
            INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ
                if key_len > 0 && ext_len == 20 && body_len == key_len + ext_len =>
            {
                Command::Arith(ArithRequest {
                    incr: matches!(h.opcode, INCREMENT | INCREMENTQ),
                    key,
                    delta: be_u64(&extras[..8]),
                    initial: be_u64(&extras[8..16]),
                    exptime: be_u32(&extras[16..]),
                })
            }
            STAT if ext_len == 0 => Command::Stat { group: key },
            TOUCH | GAT | GATQ | GATK | GATKQ if ext_len == 4 && key_len > 0 => {
                let exptime = be_u32(extras);
                match h.opcode {
                    TOUCH => Command::Touch { key, exptime },
                    _ => Command::GetAndTouch { key, with_key: matches!(h.opcode, GATK | GATKQ), exptime },
                }
            }
            SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ | APPEND | APPENDQ | PREPEND | PREPENDQ => {
                let mode = match h.opcode {
                    SET | SETQ => StoreMode::Set,
                    ADD | ADDQ => StoreMode::Add,
                    REPLACE | REPLACEQ => StoreMode::Replace,
                    APPEND | APPENDQ => StoreMode::Append,
                    _ => StoreMode::Prepend,
                };
                let concat = matches!(mode, StoreMode::Append | StoreMode::Prepend);
                let shaped = if concat { key_len > 0 && ext_len == 0 } else { ext_len == 8 && key_len > 0 };
                if !shaped {
                    return invalid;
                }
                if value_len > self.max_item_bytes {
                    let forget = (mode == StoreMode::Set).then_some(key);
                    return refuse_forgetting(Status::TooLarge, at_value + value_len, false, forget);
                }
                let Some(value) = buf.get(at_value..at_value + value_len) else {
                    return BinaryParse::Incomplete;
                };
                let (flags, exptime) = if concat { (0, 0) } else { (be_u32(extras), be_u32(&extras[4..])) };
                Command::Store(StoreRequest { mode, key, value, flags, exptime })
            }
            SASL_LIST_MECHS if empty && !self.sasl => return refuse(Status::UnknownCommand, at_value, false),
            SASL_LIST_MECHS if empty => Command::SaslListMechs,
            SASL_AUTH | SASL_STEP if ext_len == 0 && key_len != 0 => {
                let skip = |status| refuse(status, at_value + value_len, false);
                if !self.sasl {
                    return skip(Status::UnknownCommand);
                }
                if key_len > MAX_MECHANISM {
                    return skip(Status::InvalidArguments);
                }
                if value_len > self.max_item_bytes {
                    return skip(Status::OutOfMemory);
                }
                let Some(data) = buf.get(at_value..at_value + value_len) else {
                    return BinaryParse::Incomplete;
                };
                match h.opcode {
                    SASL_AUTH => Command::SaslAuth { mechanism: key, data },
                    _ => Command::SaslStep { mechanism: key, data },
                }
            }
            VERSION | NOOP | QUIT | QUITQ | FLUSH | FLUSHQ | GET | GETQ | GETK | GETKQ | DELETE | DELETEQ
            | INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ | STAT | TOUCH | GAT | GATQ | GATK | GATKQ
            | SASL_LIST_MECHS | SASL_AUTH | SASL_STEP => return invalid,
            // memcached skips the body's length after the extras and key it already took,
            // so an unknown command with a key or extras eats as many bytes of what follows.
            _ => return refuse(Status::UnknownCommand, at_value + body_len, false),
        };
        let consumed = match command {
            Command::Store(StoreRequest { value, .. })
            | Command::SaslAuth { data: value, .. }
            | Command::SaslStep { data: value, .. } => at_value + value.len(),
            _ => at_value,
        };
        BinaryParse::Done {
            request: BinaryRequest { opcode: h.opcode, opaque: h.opaque, cas: h.cas, quiet, command },
            consumed,
        }
    }
}

/// A response header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseHeader {
    /// The request's opcode, echoed.
    pub opcode: u8,
    pub status: Status,
    pub extras_len: u8,
    pub key_len: u16,
    /// Extras, key and value together.
    pub body_len: u32,
    /// The request's opaque, echoed.
    pub opaque: u32,
    pub cas: u64,
}

impl ResponseHeader {
    /// Appends the header's 24 bytes, big-endian: put together in place, then appended at
    /// once (field by field, each append checked the vector's room again).
    pub fn write(&self, out: &mut Vec<u8>) {
        let mut header = [0u8; 24];
        header[0] = RESPONSE_MAGIC;
        header[1] = self.opcode;
        header[2..4].copy_from_slice(&self.key_len.to_be_bytes());
        header[4] = self.extras_len;
        // Byte 5, the data type, stays 0: raw bytes.
        header[6..8].copy_from_slice(&(self.status as u16).to_be_bytes());
        header[8..12].copy_from_slice(&self.body_len.to_be_bytes());
        header[12..16].copy_from_slice(&self.opaque.to_be_bytes());
        header[16..24].copy_from_slice(&self.cas.to_be_bytes());
        out.extend_from_slice(&header);
    }
}

#[cfg(test)]
mod tests;
