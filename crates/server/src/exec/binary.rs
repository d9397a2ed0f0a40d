//! memcached's binary protocol, executed with the same operations as the text and meta
//! commands ([`super::ops`]' lookups, store, delete, arithmetic and flush, [`crate::stats`]'
//! groups), answered as memcached 1.6.18's `proto_bin.c` answers:
//! errors always (quiet or not) with their status's text, a quiet success never, except a
//! `getq` hit.

use super::ops::{arith_op, delete_op, flush_all, store_op, ArithOp, ArithResult, DeleteOp, DeleteResult};
use super::ops::{read_counted, SetResult, StoreOp};
use super::{store_error, Context, Flow};
use crate::auth::Session;
use crate::config::Settings;
use crate::counters::Counters;
use crate::stats;
use shoal_proto::binary::{opcode, ArithRequest, Command, ResponseHeader, Status, StoreMode, StoreRequest};
use shoal_proto::binary::{HEADER_LEN, MAX_MECHANISM, NO_CREATE};
use shoal_proto::{parse_plain, BinaryRequest, Tokens};
use shoal_region::{absolute_expiry, touch_expiry, ItemInfo, Marks, NewItem, OpError, Value, ValueSink};

/// The mechanisms `-S` offers.
const MECHANISMS: &[u8] = b"PLAIN";

/// The answer's header for `r`, with no extras or key and a body of `body_len` bytes.
fn header(r: &BinaryRequest<'_>, status: Status, body_len: usize, cas: u64) -> ResponseHeader {
    ResponseHeader {
        opcode: r.opcode,
        status,
        extras_len: 0,
        key_len: 0,
        body_len: body_len as u32,
        opaque: r.opaque,
        cas,
    }
}

/// An error answer: the status and its text (memcached's `write_bin_error`).
pub fn error(out: &mut Vec<u8>, opcode: u8, opaque: u32, status: Status, text: &str) {
    let h = ResponseHeader {
        opcode,
        status,
        extras_len: 0,
        key_len: 0,
        body_len: text.len() as u32,
        opaque,
        cas: 0,
    };
    h.write(out);
    out.extend_from_slice(text.as_bytes());
}

fn fail(out: &mut Vec<u8>, r: &BinaryRequest<'_>, status: Status) {
    error(out, r.opcode, r.opaque, status, status.message());
}

/// A success with `body` and `cas`, unless the request was quiet.
fn success(out: &mut Vec<u8>, r: &BinaryRequest<'_>, body: &[u8], cas: u64) {
    if !r.quiet {
        header(r, Status::Success, body.len(), cas).write(out);
        out.extend_from_slice(body);
    }
}

/// Executes one binary request for a connection in `session`, appending its answer.
pub fn execute(cx: &mut Context<'_>, r: BinaryRequest<'_>, session: &mut Session, out: &mut Vec<u8>) -> Flow {
    match r.command {
        Command::Get { key, with_key } => get(cx, &r, key, with_key, None, out),
        Command::GetAndTouch { key, with_key, exptime } => get(cx, &r, key, with_key, Some(exptime), out),
        Command::Touch { key, exptime } => get(cx, &r, key, false, Some(exptime), out),
        Command::Store(ref s) => store(cx, &r, s, out),
        Command::Delete { key } => delete(cx, &r, key, out),
        Command::Arith(ref a) => arith(cx, &r, a, out),
        Command::Flush { delay } => {
            if flush_all(cx, delay.map(i64::from)) {
                success(out, &r, b"", 0);
            } else {
                fail(out, &r, Status::AuthError); // memcached's answer to a disabled flush
            }
        }
        Command::Noop => success(out, &r, b"", 0),
        Command::Version => success(out, &r, crate::VERSION.as_bytes(), 0),
        Command::Quit => {
            success(out, &r, b"", 0);
            return Flow::Close;
        }
        Command::Stat { group } => stat(cx, &r, group, out),
        Command::SaslListMechs => success(out, &r, MECHANISMS, 0),
        Command::SaslAuth { mechanism, data } => sasl(cx, &r, session, mechanism, data, true, out),
        Command::SaslStep { mechanism, data } => sasl(cx, &r, session, mechanism, data, false, out),
    }
    Flow::Continue
}

/// A get's answer to a hit, written straight into the output as the lookup copies the value
/// (not copied in through a buffer of its own): the header, the flags, the key if asked, then
/// the value. The lookup may ask for it more than once (it retries when the item changes
/// under it): each time the packet starts over.
struct HitPacket<'a> {
    out: &'a mut Vec<u8>,
    /// Where the packet begins in `out`.
    start: usize,
    r: &'a BinaryRequest<'a>,
    shown_key: &'a [u8],
    settings: &'a Settings,
}

impl ValueSink for HitPacket<'_> {
    fn append_to(&mut self, item: &ItemInfo) -> &mut Vec<u8> {
        let out = &mut *self.out;
        out.truncate(self.start);
        let body_len = 4 + self.shown_key.len() + item.value_len;
        out.reserve(HEADER_LEN + body_len);
        let h = ResponseHeader {
            extras_len: 4,
            key_len: self.shown_key.len() as u16,
            ..header(self.r, Status::Success, body_len, self.settings.visible_cas(item.cas))
        };
        h.write(out);
        out.extend_from_slice(&item.flags.to_be_bytes());
        out.extend_from_slice(self.shown_key);
        out
    }
}

/// `get getk getq getkq gat gatk gatq gatkq touch`: flags in the extras, the key for the `k`
/// forms, the value (not for `touch`), the CAS.
fn get(
    cx: &mut Context<'_>,
    r: &BinaryRequest<'_>,
    key: &[u8],
    with_key: bool,
    touch: Option<u32>,
    out: &mut Vec<u8>,
) {
    let c = cx.counters;
    cx.shared.hotkeys.record(key);
    let placed = cx.place(key);
    let shown_key = if with_key { key } else { &[] };
    let found = match touch {
        Some(exptime) => {
            Counters::bump(&c.cmd_touch);
            let found = cx.lookup_and_touch(key, &placed, i64::from(exptime));
            Counters::bump(if found.is_some() { &c.touch_hits } else { &c.touch_misses });
            found
        }
        None => {
            Counters::bump(&c.cmd_get);
            let start = out.len();
            let mut packet = HitPacket { out, start, r, shown_key, settings: &cx.shared.settings };
            let found = read_counted(cx, key, &placed, true, &mut packet);
            Counters::bump(if found.is_some() { &c.get_hits } else { &c.get_misses });
            if found.is_some() {
                return; // answered as the value was copied
            }
            out.truncate(start); // what a lookup that then judged the item a miss wrote
            None
        }
    };
    let Some(info) = found else {
        if r.quiet {
            return;
        }
        if with_key {
            let h =
                ResponseHeader { key_len: key.len() as u16, ..header(r, Status::KeyNotFound, key.len(), 0) };
            h.write(out);
            out.extend_from_slice(key);
        } else {
            fail(out, r, Status::KeyNotFound);
        }
        return;
    };
    let value: &[u8] = if r.opcode == opcode::TOUCH { &[] } else { &cx.value };
    let cas = cx.shared.settings.visible_cas(info.cas);
    let body_len = 4 + shown_key.len() + value.len();
    let h = ResponseHeader {
        extras_len: 4,
        key_len: shown_key.len() as u16,
        ..header(r, Status::Success, body_len, cas)
    };
    h.write(out);
    out.extend_from_slice(&info.flags.to_be_bytes());
    out.extend_from_slice(shown_key);
    out.extend_from_slice(value);
}

fn store(cx: &mut Context<'_>, r: &BinaryRequest<'_>, s: &StoreRequest<'_>, out: &mut Vec<u8>) {
    // memcached: with a CAS, set, add and replace all become cas; append and prepend check it.
    let mode = match s.mode {
        StoreMode::Set | StoreMode::Add | StoreMode::Replace if r.cas != 0 => StoreMode::Cas,
        mode => mode,
    };
    let expiry = absolute_expiry(i64::from(s.exptime), cx.region_clock());
    let fresh = NewItem { value: Value::Given, flags: s.flags, expiry, cas: None, marks: Marks::default() };
    let op = StoreOp { mode, cas: r.cas, fresh, vivify: None, invalidate: false };
    match store_op(cx, s.key, s.value, &op) {
        Ok((SetResult::Stored, cas)) => {
            success(out, r, b"", cx.shared.settings.visible_cas(cas.unwrap_or(0)))
        }
        Ok((SetResult::Exists, _)) => fail(out, r, Status::KeyExists),
        Ok((SetResult::NotFound, _)) => fail(out, r, Status::KeyNotFound),
        Ok((SetResult::NotStored, _)) => fail(
            out,
            r,
            match mode {
                StoreMode::Add => Status::KeyExists,
                StoreMode::Replace => Status::KeyNotFound,
                _ => Status::NotStored,
            },
        ),
        Err(e) => region_error(cx, r, &e, "Out of memory allocating item", out),
    }
}

/// A store the region refused: too large, or out of memory with memcached's text for the
/// command.
fn region_error(cx: &Context<'_>, r: &BinaryRequest<'_>, e: &OpError, no_memory: &str, out: &mut Vec<u8>) {
    store_error(cx.counters, e); // counts it
    match e {
        OpError::ValueTooLarge { .. } => fail(out, r, Status::TooLarge),
        _ => error(out, r.opcode, r.opaque, Status::OutOfMemory, no_memory),
    }
}

fn delete(cx: &mut Context<'_>, r: &BinaryRequest<'_>, key: &[u8], out: &mut Vec<u8>) {
    let op = DeleteOp { cas: (r.cas != 0).then_some(r.cas), ..DeleteOp::default() };
    match delete_op(cx, key, op) {
        Ok(DeleteResult::Deleted) => success(out, r, b"", 0),
        Ok(DeleteResult::NotFound) => fail(out, r, Status::KeyNotFound),
        Ok(DeleteResult::Exists) => fail(out, r, Status::KeyExists),
        Err(e) => region_error(cx, r, &e, "Out of memory", out),
    }
}

fn arith(cx: &mut Context<'_>, r: &BinaryRequest<'_>, a: &ArithRequest<'_>, out: &mut Vec<u8>) {
    let now = cx.region_clock();
    // A created counter expires as its request says; an incremented one keeps its expiry.
    let expiry =
        |created: bool, old: u32| if created { touch_expiry(i64::from(a.exptime), now) } else { old };
    let op = ArithOp {
        incr: a.incr,
        delta: a.delta,
        cas: (r.cas != 0).then_some(r.cas),
        new_cas: None,
        initial: (a.exptime != NO_CREATE).then_some(a.initial),
        expiry: &expiry,
    };
    match arith_op(cx, a.key, &op) {
        Ok((ArithResult::Value { n, .. }, cas)) => {
            success(out, r, &n.to_be_bytes(), cx.shared.settings.visible_cas(cas.unwrap_or(0)));
        }
        Ok((ArithResult::NotFound, _)) => fail(out, r, Status::KeyNotFound),
        Ok((ArithResult::Exists, _)) => fail(out, r, Status::KeyExists),
        Ok((ArithResult::NonNumeric, _)) => fail(out, r, Status::NonNumeric),
        Err(e) => region_error(cx, r, &e, "Out of memory incrementing value", out),
    }
}

/// `stat [group]`: the text protocol's `stats [group]` lines, each as a packet with the name
/// as key and the value as value, then an empty packet; an unknown group is not found.
/// memcached sends `detail dump` as one `detailed` stat holding the text dump.
fn stat(cx: &mut Context<'_>, r: &BinaryRequest<'_>, group: &[u8], out: &mut Vec<u8>) {
    if let Some(words) = group.strip_prefix(b"detail") {
        let mut dump = Vec::new();
        match stats::detail(cx.shared, Tokens::new(words).next(), &mut dump) {
            stats::Detail::Usage => return fail(out, r, Status::KeyNotFound),
            stats::Detail::Dumped => stat_packet(out, r, b"detailed", &dump),
            stats::Detail::Switched => {}
        }
        return header(r, Status::Success, 0, 0).write(out);
    }
    let mut text = Vec::new();
    if !stats::answer(cx.shared, Tokens::new(group), &mut text) {
        return fail(out, r, Status::KeyNotFound);
    }
    for line in text.split(|&b| b == b'\n').filter_map(|l| l.strip_suffix(b"\r")) {
        let Some(stat) = line.strip_prefix(b"STAT ") else { continue }; // END, RESET
        let (name, value) = match stat.iter().position(|&b| b == b' ') {
            Some(i) => (&stat[..i], &stat[i + 1..]),
            None => (stat, &[][..]),
        };
        stat_packet(out, r, name, value);
    }
    header(r, Status::Success, 0, 0).write(out);
}

/// One stat of a `stat` answer.
fn stat_packet(out: &mut Vec<u8>, r: &BinaryRequest<'_>, name: &[u8], value: &[u8]) {
    let h = ResponseHeader {
        key_len: name.len() as u16,
        ..header(r, Status::Success, name.len() + value.len(), 0)
    };
    h.write(out);
    out.extend_from_slice(name);
    out.extend_from_slice(value);
}

/// SASL PLAIN: `auth` with the whole message authenticates at once; `auth` without data
/// asks for it (auth continue), and the `step` that follows brings it.
fn sasl(
    cx: &mut Context<'_>,
    r: &BinaryRequest<'_>,
    session: &mut Session,
    mechanism: &[u8],
    data: &[u8],
    start: bool,
    out: &mut Vec<u8>,
) {
    debug_assert!(mechanism.len() <= MAX_MECHANISM);
    let c = cx.counters;
    // A step continues the exchange its `auth` started, whatever mechanism it names.
    let known = !start || mechanism.eq_ignore_ascii_case(MECHANISMS);
    if start {
        session.sasl_started = known;
        if known && data.is_empty() {
            header(r, Status::AuthContinue, 0, 0).write(out);
            return;
        }
    }
    let users = &cx.shared.sasl_users;
    let user = parse_plain(data)
        .filter(|p| {
            known
                && session.sasl_started
                && (p.authzid.is_empty() || p.authzid == p.user)
                && users.check(p.user, p.password)
        })
        .map(|p| p.user);
    Counters::bump(&c.auth_cmds);
    if let Some(user) = user {
        session.sign_in(user, &cx.shared.tenants);
        success(out, r, b"Authenticated", 0);
    } else {
        Counters::bump(&c.auth_errors);
        fail(out, r, Status::AuthError);
    }
}
