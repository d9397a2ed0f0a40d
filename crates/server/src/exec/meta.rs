//! memcached's meta commands: `mg ms md ma mn me`, with memcached 1.6's answers.
//!
//! Return flags come back in the order the request asked for them. Quiet mode (`q`) hides
//! only the nominal answer of each command, as memcached does: `EN` of `mg`, `HD` of `ms` and
//! `md`, `HD`/`VA` of `ma`; every other answer, errors included, is always sent.
//!
//! Stale-while-revalidate: an invalidated item (`md … I`, or `ms … I` with an older CAS) is
//! served with `X`; the first client to see it stale (or an item whose TTL fell below `R`, or
//! a key `N` vivified) gets `W` (it should recache), and later ones `Z` (someone already is).
//! The states live in the region beside the item's slot ([`shoal_region::Marks`]).

use super::text::read_counted;
use super::{push_u64, reply, store_error, Context};
use crate::config::Settings;
use crate::stats::Counters;
use shoal_proto::{encode_base64, Meta, MetaCmd, MetaFlags, KEY_MAX};
use shoal_region::{
    absolute_expiry, counter_text, parse_counter, touch_expiry, visible, Change, ItemInfo, Mark, Marks,
    NewItem, OpError, Value, ValueSink,
};

/// What `mg` found, after any change it made.
struct Found {
    /// The item as it is now.
    info: ItemInfo,
    /// Its expiry before this request, and whether this request created it (`N`): `t`
    /// shows the TTL as of its place among the flags.
    old_expiry: u32,
    created: bool,
    /// Whether the item had handed out its recache token before this request (`Z`).
    token_was_sent: bool,
    /// This client wins the right to recache (`W`).
    won: bool,
}

/// Executes one meta command.
pub fn execute(cx: &mut Context<'_>, m: Meta<'_>, out: &mut Vec<u8>) {
    Counters::bump(&cx.counters.cmd_meta);
    let mut scratch = [0u8; KEY_MAX];
    // The decoded key borrows the stack scratch: no allocation per command.
    let key = m.key(&mut scratch);
    match m.cmd {
        MetaCmd::Noop => reply(out, b"MN"),
        MetaCmd::Get => get(cx, &m, key, out),
        MetaCmd::Set => set(cx, &m, key, out),
        MetaCmd::Delete => delete(cx, &m, key, out),
        MetaCmd::Arithmetic => arithmetic(cx, &m, key, out),
        MetaCmd::Debug => debug(cx, key, out),
    }
}

/// Appends the flags common to every answer, `O` (opaque) and `k` (key), in request order,
/// plus those `extra` knows how to write. The key is shown as the item holds it: in base64
/// (followed by `b`) if it was stored with `b`.
fn flags_out(
    m: &Meta<'_>,
    key: &[u8],
    binary: bool,
    out: &mut Vec<u8>,
    mut extra: impl FnMut(u8, &mut Vec<u8>),
) {
    for token in m.order.clone() {
        match token[0] {
            b'O' => {
                out.push(b' ');
                out.extend_from_slice(token);
            }
            b'k' => {
                out.extend_from_slice(b" k");
                if binary {
                    encode_base64(key, out);
                    out.extend_from_slice(b" b");
                } else {
                    out.extend_from_slice(key);
                }
            }
            letter => extra(letter, out),
        }
    }
}

/// memcached applies `T` (new TTL) and `N` (TTL of an item this request created) as it meets
/// them among the flags: `t` shows the TTL as of its place, and the last of them wins.
struct TtlWalk<'f> {
    flags: &'f MetaFlags<'f>,
    created: bool,
    now: u32,
    expiry: u32,
}

impl TtlWalk<'_> {
    fn step(&mut self, letter: u8) {
        let ttl = match letter {
            b'T' => self.flags.ttl,
            b'N' if self.created => self.flags.vivify,
            _ => None,
        };
        if let Some(ttl) = ttl {
            self.expiry = touch_expiry(ttl, self.now);
        }
    }

    /// The expiry after every flag.
    fn last(mut self, m: &Meta<'_>) -> u32 {
        m.order.clone().for_each(|t| self.step(t[0]));
        self.expiry
    }
}

/// A flag letter and a number: ` t30`.
fn flag_number(out: &mut Vec<u8>, letter: u8, n: u64) {
    out.push(b' ');
    out.push(letter);
    push_u64(out, n);
}

/// The TTL flag's value: seconds left, or -1 for an item that never expires.
fn ttl_out(out: &mut Vec<u8>, expiry: u32, now: u32) {
    if expiry == 0 {
        out.extend_from_slice(b" t-1");
    } else {
        flag_number(out, b't', u64::from(expiry.saturating_sub(now)));
    }
}

/// What an `mg` hit's answer line needs besides the item: the request and the clocks.
struct HitLine<'a> {
    m: &'a Meta<'a>,
    key: &'a [u8],
    now: u32,
    settings: &'a Settings,
    /// When the server started: the access time shown for an item whose own is unknown.
    started: u32,
}

impl HitLine<'_> {
    /// Writes the line before the value: `VA <len> <flags>\r\n` with `v`, else `HD <flags>\r\n`.
    fn write(&self, hit: &Found, out: &mut Vec<u8>) {
        let (m, f, now) = (self.m, &self.m.flags, self.now);
        let info = hit.info;
        let value_len = info.value_len as u64;
        if f.has(b'v') {
            out.extend_from_slice(b"VA ");
            push_u64(out, value_len);
        } else {
            out.extend_from_slice(b"HD");
        }
        let cas = self.settings.visible_cas(info.cas);
        let last_access = if info.last_access == 0 { self.started } else { info.last_access };
        let start = if hit.created { 0 } else { hit.old_expiry };
        let mut ttl = TtlWalk { flags: f, created: hit.created, now, expiry: start };
        flags_out(m, self.key, info.marks.binary_key, out, |letter, out| match letter {
            b's' => flag_number(out, b's', value_len),
            b't' => ttl_out(out, ttl.expiry, now),
            b'T' | b'N' => ttl.step(letter),
            b'c' => flag_number(out, b'c', cas),
            b'f' => flag_number(out, b'f', u64::from(info.flags)),
            b'l' => flag_number(out, b'l', u64::from(now.saturating_sub(last_access))),
            b'h' => flag_number(out, b'h', u64::from(info.fetched)),
            _ => {}
        });
        if hit.token_was_sent {
            out.extend_from_slice(b" Z");
        }
        if info.marks.stale {
            out.extend_from_slice(b" X");
        }
        if hit.won {
            out.extend_from_slice(b" W");
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// The answer to a plain `mg` (no `T`, `N`, `R`), written straight into the output as the
/// lookup copies the value, like `get`'s `VALUE` blocks: one copy of the value, not two. The
/// lookup may ask more than once (it retries when the item changes under it): each time the
/// answer starts over. Without `v` the value is no part of the answer and lands in `unshown`.
struct HitBlock<'a> {
    out: &'a mut Vec<u8>,
    /// Where the answer begins in `out`.
    start: usize,
    line: &'a HitLine<'a>,
    unshown: Option<&'a mut Vec<u8>>,
}

impl ValueSink for HitBlock<'_> {
    fn append_to(&mut self, item: &ItemInfo) -> &mut Vec<u8> {
        self.out.truncate(self.start);
        let hit = Found {
            info: *item,
            old_expiry: item.expiry,
            created: false,
            token_was_sent: item.marks.token_sent,
            won: false,
        };
        self.line.write(&hit, self.out);
        match &mut self.unshown {
            Some(value) => {
                value.clear();
                value
            }
            None => {
                self.out.reserve(item.value_len + 2);
                self.out
            }
        }
    }
}

fn get(cx: &mut Context<'_>, m: &Meta<'_>, key: &[u8], out: &mut Vec<u8>) {
    let f = &m.flags;
    let (c, shared) = (cx.counters, cx.shared);
    let now = cx.region_clock();
    let bump = !f.has(b'u');
    let line = HitLine { m, key, now, settings: &shared.settings, started: shared.clock.started() };
    let changes = f.ttl.is_some() || f.vivify.is_some() || f.recache.is_some();
    // Whether the item was read before, as the plain read saw it (it marked the item fetched).
    let mut fetched_before = None;
    if !changes {
        let start = out.len();
        let mut unshown = std::mem::take(&mut cx.value);
        let shown = f.has(b'v');
        let mut block = HitBlock { out, start, line: &line, unshown: (!shown).then_some(&mut unshown) };
        let read = read_counted(cx, key, bump, &mut block);
        cx.value = unshown;
        match read {
            // A stale item whose token is still to be handed out changes state: that is done
            // atomically below, and answered from there.
            Some(info) if info.marks.stale && !info.marks.token_sent => {
                out.truncate(start);
                fetched_before = Some(info.fetched);
            }
            Some(_) => {
                Counters::bump(&c.cmd_get);
                Counters::bump(&c.get_hits);
                if shown {
                    out.extend_from_slice(b"\r\n");
                }
                return;
            }
            None => out.truncate(start),
        }
    }
    let found = if changes || fetched_before.is_some() {
        let mut found = get_and_change(cx, m, key, now, bump);
        if let (Some(fetched), Some(hit)) = (fetched_before, found.as_mut()) {
            hit.info.fetched = fetched;
        }
        found
    } else {
        None
    };
    let touched = f.ttl.is_some();
    Counters::bump(if touched { &c.cmd_touch } else { &c.cmd_get });
    let Some(hit) = found else {
        Counters::bump(if touched { &c.touch_misses } else { &c.get_misses });
        if !f.has(b'q') {
            out.extend_from_slice(b"EN");
            flags_out(m, key, f.has(b'b'), out, |_, _| {});
            out.extend_from_slice(b"\r\n");
        }
        return;
    };
    Counters::bump(if touched { &c.touch_hits } else { &c.get_hits });
    line.write(&hit, out);
    if f.has(b'v') {
        out.extend_from_slice(&cx.value);
        out.extend_from_slice(b"\r\n");
    }
}

/// `mg` with `T`, `N` or `R`, or on a stale item: reads and changes the item in one step.
fn get_and_change(cx: &mut Context<'_>, m: &Meta<'_>, key: &[u8], now: u32, bump: bool) -> Option<Found> {
    let f = &m.flags;
    let writer = cx.writer(key);
    let value = &mut cx.value;
    // Only `N` sees a lease record: to win it, or to learn that the lease is taken.
    let result =
        writer.update(key, &[], true, |c| match c.filter(|c| f.vivify.is_some() || !c.info.marks.hidden) {
            Some(c) => {
                value.clear();
                value.extend_from_slice(c.value);
                let old = c.info.marks;
                let expiry =
                    f.ttl.map(|_| TtlWalk { flags: f, created: false, now, expiry: c.info.expiry }.last(m));
                let recache = f.recache.is_some_and(|r| {
                    c.info.expiry != 0 && c.info.expiry < touch_expiry(r, now) && !old.token_sent
                });
                // A Shoal lease record (a hold-off, a value kept after delete) is a miss to win.
                let won = !old.token_sent && (old.stale || old.hidden || recache);
                let marks = Marks { token_sent: old.token_sent || won, ..old };
                let info = ItemInfo { expiry: expiry.unwrap_or(c.info.expiry), marks, ..c.info };
                let change = Change::Mark(Mark { expiry, marks, fetched: bump });
                let found = Found {
                    info,
                    old_expiry: c.info.expiry,
                    created: false,
                    token_was_sent: old.token_sent,
                    won,
                };
                (change, Some(found))
            }
            None => match f.vivify {
                Some(_) => {
                    value.clear();
                    let marks = Marks { token_sent: true, ..Marks::default() };
                    let expiry = TtlWalk { flags: f, created: true, now, expiry: 0 }.last(m);
                    let item = placeholder(expiry, marks);
                    let info = ItemInfo {
                        flags: 0,
                        cas: 0,
                        expiry,
                        value_len: 0,
                        fetched: false,
                        marks,
                        last_access: now,
                    };
                    let found =
                        Found { info, old_expiry: 0, created: true, token_was_sent: false, won: true };
                    (Change::Store(item), Some(found))
                }
                None => (Change::Keep, None),
            },
        });
    match result {
        Ok((Some(mut found), new_cas)) => {
            if let Some(cas) = new_cas {
                found.info.cas = cas;
            }
            Some(found)
        }
        _ => None,
    }
}

/// An empty item holding a recache token (`mg … N`, a `lease-get` miss, a delete hold-off),
/// expiring at `expiry`.
pub(crate) fn placeholder(expiry: u32, marks: Marks) -> NewItem {
    NewItem { value: Value::Owned(Vec::new()), flags: 0, expiry: Some(expiry), cas: None, marks }
}

/// The live item's value kept as stale (`md … I`; `hidden` for a value `delete` keeps for
/// lease clients), with a new CAS (so outstanding tokens are void) and a token for the next
/// reader.
pub(crate) fn stale_copy(info: ItemInfo, expiry: Option<u32>, hidden: bool) -> NewItem {
    let keep = NewItem::keeping(info, Value::Current);
    NewItem { expiry, marks: Marks { stale: true, hidden, ..keep.marks }, ..keep }
}

/// What a store stores over: `ms`'s modes, the binary protocol's storage opcodes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum SetMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// The answer of a storage attempt.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum SetResult {
    Stored,
    NotStored,
    Exists,
    NotFound,
}

/// A store as `ms` and the binary protocol make it.
pub(crate) struct StoreOp {
    pub mode: SetMode,
    /// The CAS the client holds (0: none); `Cas` stores only over it, append and prepend
    /// check it too.
    pub cas: u64,
    /// The new version (value [`Value::Given`]).
    pub fresh: NewItem,
    /// `N`: append and prepend create a missing key with this TTL.
    pub vivify: Option<i64>,
    /// `I`: a CAS older than the item's stores the value as stale instead of failing.
    pub invalidate: bool,
}

/// Carries out a store, counting it; the answer and the CAS of the version stored. On an
/// error the key's old value goes too, as memcached does.
pub(crate) fn store_op(
    cx: &Context<'_>,
    key: &[u8],
    data: &[u8],
    op: &StoreOp,
) -> Result<(SetResult, Option<u64>), OpError> {
    let c = cx.counters;
    let (tenant, t) = cx.tenant(key);
    let writer = &t.writer;
    if let Some(curve) = &t.curve {
        curve.stored(key, (key.len() + data.len() + shoal_region::layout::ITEM_HEADER_BYTES) as u64);
    }
    Counters::bump(&c.cmd_set);
    Counters::bump(&cx.tenant_counters[tenant].cmd_set);
    let (mode, req_cas, fresh) = (op.mode, op.cas, &op.fresh);
    let now = writer.clock();
    let concat = matches!(mode, SetMode::Append | SetMode::Prepend);
    let result = writer.update(key, data, concat, |current| {
        // A lease record is there for `add` (a hold-off refuses it) and for a store under
        // its token; the other modes see no item.
        let current = match mode {
            SetMode::Replace | SetMode::Append | SetMode::Prepend => visible(current),
            SetMode::Add => current.filter(|c| c.info.marks.refuses_add()),
            SetMode::Set | SetMode::Cas => current,
        };
        let Some(cur) = current else {
            return match mode {
                SetMode::Add | SetMode::Set => (Change::Store(fresh.clone()), SetResult::Stored),
                SetMode::Cas => (Change::Keep, SetResult::NotFound),
                // Newer memcached: `N` vivifies a missing key in append mode.
                SetMode::Append | SetMode::Prepend if op.vivify.is_some() => {
                    let expiry = op.vivify.map(|t| touch_expiry(t, now));
                    (Change::Store(NewItem { expiry, ..fresh.clone() }), SetResult::Stored)
                }
                _ => (Change::Keep, SetResult::NotStored),
            };
        };
        let cas_matches = req_cas == 0 || req_cas == cur.info.cas;
        let stale_cas = op.invalidate && req_cas != 0 && req_cas < cur.info.cas;
        match mode {
            SetMode::Add => (Change::Keep, SetResult::NotStored),
            SetMode::Cas if req_cas == cur.info.cas => (Change::Store(fresh.clone()), SetResult::Stored),
            // An invalidation raced ahead of this (older) value: store it, but marked stale,
            // keeping the newer item's expiry and token state.
            SetMode::Cas if stale_cas => {
                let marks = Marks { stale: true, token_sent: cur.info.marks.token_sent, ..fresh.marks };
                let item = NewItem { expiry: Some(cur.info.expiry), marks, ..fresh.clone() };
                (Change::Store(item), SetResult::Stored)
            }
            SetMode::Cas => (Change::Keep, SetResult::Exists),
            SetMode::Append | SetMode::Prepend if !cas_matches => (Change::Keep, SetResult::Exists),
            SetMode::Append => (Change::Store(NewItem::keeping(cur.info, Value::Append)), SetResult::Stored),
            SetMode::Prepend => {
                (Change::Store(NewItem::keeping(cur.info, Value::Prepend)), SetResult::Stored)
            }
            SetMode::Set | SetMode::Replace => (Change::Store(fresh.clone()), SetResult::Stored),
        }
    });
    crate::watch::meta_stored(cx, key, data.len(), op, &result);
    let (result, new_cas) = result.inspect_err(|_| {
        let _ = writer.delete(key);
    })?;
    match (mode, result) {
        (SetMode::Cas, SetResult::Stored) => Counters::bump(&c.cas_hits),
        (_, SetResult::Exists) => Counters::bump(&c.cas_badval),
        (_, SetResult::NotFound) => Counters::bump(&c.cas_misses),
        _ => {}
    }
    Ok((result, new_cas))
}

fn set(cx: &mut Context<'_>, m: &Meta<'_>, key: &[u8], out: &mut Vec<u8>) {
    let f = &m.flags;
    let mode = match f.mode.map(|b| b.to_ascii_uppercase()) {
        Some(b'E') => SetMode::Add,
        Some(b'A') => SetMode::Append,
        Some(b'P') => SetMode::Prepend,
        Some(b'R') => SetMode::Replace,
        _ => SetMode::Set,
    };
    // memcached 1.6.18: any `C`, even `C0`, makes set and replace a compare (a live item's
    // CAS is never 0, so `C0` answers EX, or NF without an item).
    let cas = f.cas.unwrap_or(0);
    let mode =
        if f.cas.is_some() && matches!(mode, SetMode::Set | SetMode::Replace) { SetMode::Cas } else { mode };
    let fresh = NewItem {
        value: Value::Given,
        flags: f.client_flags.unwrap_or(0),
        expiry: absolute_expiry(f.ttl.unwrap_or(0), cx.region_clock()),
        cas: f.new_cas,
        marks: Marks { binary_key: f.has(b'b'), ..Marks::default() },
    };
    let op = StoreOp { mode, cas, fresh, vivify: f.vivify, invalidate: f.has(b'I') };
    let (result, new_cas) = match store_op(cx, key, m.data, &op) {
        Ok(r) => r,
        Err(e) => {
            reply(out, store_error(cx.counters, &e));
            return;
        }
    };
    if result == SetResult::Stored && f.has(b'q') {
        return;
    }
    out.extend_from_slice(match result {
        SetResult::Stored => b"HD",
        SetResult::NotStored => b"NS",
        SetResult::Exists => b"EX",
        SetResult::NotFound => b"NF",
    });
    let cas = new_cas.map_or(0, |cas| cx.shared.settings.visible_cas(cas));
    flags_out(m, key, f.has(b'b'), out, |letter, out| {
        if letter == b'c' {
            flag_number(out, b'c', cas);
        }
    });
    out.extend_from_slice(b"\r\n");
}

/// The answer of a delete.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeleteResult {
    Deleted,
    NotFound,
    Exists,
}

/// A delete as `md` and the binary protocol make it.
#[derive(Clone, Copy, Default)]
pub(crate) struct DeleteOp {
    /// Delete only if the item's CAS is this.
    pub cas: Option<u64>,
    /// `I`: keep the value, marked stale.
    pub invalidate: bool,
    /// `x`: drop the value, keep the item.
    pub drop_value: bool,
    /// `T`: the TTL of what `I` or `x` keep.
    pub ttl: Option<i64>,
}

/// Carries out a delete, counting it.
pub(crate) fn delete_op(cx: &Context<'_>, key: &[u8], op: DeleteOp) -> Result<DeleteResult, OpError> {
    let c = cx.counters;
    let (_, tenant) = cx.tenant(key);
    let writer = &tenant.writer;
    if let Some(curve) = &tenant.curve {
        curve.remove(key);
    }
    let now = writer.clock();
    let result = writer.update(key, &[], op.invalidate, |current| {
        let Some(cur) = current else { return (Change::Keep, DeleteResult::NotFound) };
        if cur.info.marks.hidden {
            // A lease record goes (its token with it), but it was no item.
            return (Change::Remove, DeleteResult::NotFound);
        }
        if op.cas.is_some_and(|cas| cas != cur.info.cas) {
            return (Change::Keep, DeleteResult::Exists);
        }
        let expiry = Some(op.ttl.map_or(cur.info.expiry, |t| touch_expiry(t, now)));
        if op.invalidate {
            let item = stale_copy(cur.info, expiry, false);
            (Change::Store(item), DeleteResult::Deleted)
        } else if op.drop_value {
            // Newer memcached: drop the value, keep the item.
            let item = NewItem { expiry, ..NewItem::keeping(cur.info, Value::Owned(Vec::new())) };
            (Change::Store(item), DeleteResult::Deleted)
        } else {
            (Change::Remove, DeleteResult::Deleted)
        }
    });
    let (result, _) = result?;
    Counters::bump(if result == DeleteResult::Deleted { &c.delete_hits } else { &c.delete_misses });
    Ok(result)
}

fn delete(cx: &mut Context<'_>, m: &Meta<'_>, key: &[u8], out: &mut Vec<u8>) {
    let f = &m.flags;
    let op = DeleteOp { cas: f.cas, invalidate: f.has(b'I'), drop_value: f.has(b'x'), ttl: f.ttl };
    let result = match delete_op(cx, key, op) {
        Ok(r) => r,
        Err(e) => {
            reply(out, store_error(cx.counters, &e));
            return;
        }
    };
    if result == DeleteResult::Deleted && f.has(b'q') {
        return;
    }
    out.extend_from_slice(match result {
        DeleteResult::Deleted => b"HD",
        DeleteResult::NotFound => b"NF",
        DeleteResult::Exists => b"EX",
    });
    flags_out(m, key, f.has(b'b'), out, |_, _| {});
    out.extend_from_slice(b"\r\n");
}

/// The answer of an incr/decr.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArithResult {
    /// The new value; the item's expiry before; `created` if the request made the item.
    Value {
        n: u64,
        old_expiry: u32,
        created: bool,
    },
    NotFound,
    Exists,
    NonNumeric,
}

/// An incr/decr as `ma` and the binary protocol make it.
pub(crate) struct ArithOp<'e> {
    pub incr: bool,
    pub delta: u64,
    /// Change only if the item's CAS is this.
    pub cas: Option<u64>,
    /// An explicit CAS for the new version (`E`).
    pub new_cas: Option<u64>,
    /// Create a missing counter with this value.
    pub initial: Option<u64>,
    /// The new version's expiry, given whether it was created and the old expiry.
    pub expiry: &'e dyn Fn(bool, u32) -> u32,
}

/// Carries out an incr/decr, counting it; the answer and the CAS of the version stored.
pub(crate) fn arith_op(
    cx: &Context<'_>,
    key: &[u8],
    op: &ArithOp<'_>,
) -> Result<(ArithResult, Option<u64>), OpError> {
    let c = cx.counters;
    let result = cx.writer(key).update(key, &[], true, |current| {
        let Some(cur) = visible(current) else {
            let Some(n) = op.initial else { return (Change::Keep, ArithResult::NotFound) };
            let item = NewItem {
                value: Value::Owned(n.to_string().into_bytes()),
                flags: 0,
                expiry: Some((op.expiry)(true, 0)),
                cas: op.new_cas,
                marks: Marks::default(),
            };
            return (Change::Store(item), ArithResult::Value { n, old_expiry: 0, created: true });
        };
        if op.cas.is_some_and(|cas| cas != cur.info.cas) {
            return (Change::Keep, ArithResult::Exists);
        }
        let Some(old) = parse_counter(cur.value) else { return (Change::Keep, ArithResult::NonNumeric) };
        let n = if op.incr { old.wrapping_add(op.delta) } else { old.saturating_sub(op.delta) };
        let item = NewItem {
            expiry: Some((op.expiry)(false, cur.info.expiry)),
            cas: op.new_cas,
            ..NewItem::keeping(cur.info, Value::Owned(counter_text(n, cur.value.len())))
        };
        (Change::Store(item), ArithResult::Value { n, old_expiry: cur.info.expiry, created: false })
    });
    let (hits, misses) =
        if op.incr { (&c.incr_hits, &c.incr_misses) } else { (&c.decr_hits, &c.decr_misses) };
    let (result, new_cas) = result?;
    match result {
        ArithResult::Value { .. } => Counters::bump(hits),
        ArithResult::NotFound => Counters::bump(misses),
        _ => {}
    }
    Ok((result, new_cas))
}

fn arithmetic(cx: &mut Context<'_>, m: &Meta<'_>, key: &[u8], out: &mut Vec<u8>) {
    let f = &m.flags;
    let now = cx.region_clock();
    let expiry = |created, expiry| TtlWalk { flags: f, created, now, expiry }.last(m);
    let op = ArithOp {
        incr: !matches!(f.mode, Some(b'D' | b'd' | b'-')),
        delta: f.delta.unwrap_or(1),
        cas: f.cas,
        new_cas: f.new_cas,
        initial: f.vivify.map(|_| f.initial.unwrap_or(0)),
        expiry: &expiry,
    };
    let (result, new_cas) = match arith_op(cx, key, &op) {
        Ok(r) => r,
        Err(_) => {
            reply(out, b"SERVER_ERROR out of memory");
            return;
        }
    };
    match result {
        ArithResult::Value { n, old_expiry, created } => {
            if f.has(b'q') && !created {
                return;
            }
            let mut digits = Vec::with_capacity(20);
            push_u64(&mut digits, n);
            if f.has(b'v') {
                out.extend_from_slice(b"VA ");
                push_u64(out, digits.len() as u64);
            } else {
                out.extend_from_slice(b"HD");
            }
            let cas = cx.shared.settings.visible_cas(new_cas.unwrap_or(0));
            let mut ttl = TtlWalk { flags: f, created, now, expiry: old_expiry };
            flags_out(m, key, f.has(b'b'), out, |letter, out| match letter {
                b'c' => flag_number(out, b'c', cas),
                b't' => ttl_out(out, ttl.expiry, now),
                b'T' | b'N' => ttl.step(letter),
                _ => {}
            });
            out.extend_from_slice(b"\r\n");
            if f.has(b'v') {
                out.extend_from_slice(&digits);
                out.extend_from_slice(b"\r\n");
            }
        }
        ArithResult::NonNumeric => {
            reply(out, b"CLIENT_ERROR cannot increment or decrement non-numeric value");
        }
        ArithResult::NotFound | ArithResult::Exists => {
            out.extend_from_slice(if result == ArithResult::NotFound { b"NF" } else { b"EX" });
            flags_out(m, key, f.has(b'b'), out, |_, _| {});
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// `me <key>`: what memcached prints about an item, in its format. `cls` is always 1 (no
/// slab classes) and `size` is the item's size in its segment.
fn debug(cx: &mut Context<'_>, key: &[u8], out: &mut Vec<u8>) {
    let now = cx.region_clock();
    let Some(info) = cx.lookup(key, false) else {
        reply(out, b"EN");
        return;
    };
    let exp = if info.expiry == 0 { -1 } else { i64::from(now) - i64::from(info.expiry) };
    let last_access = if info.last_access == 0 { cx.shared.clock.started() } else { info.last_access };
    let size = shoal_region::layout::item_bytes(key.len(), info.value_len, false);
    let mut shown = Vec::new();
    if info.marks.binary_key {
        encode_base64(key, &mut shown);
    } else {
        shown.extend_from_slice(key);
    }
    let line = format!(
        "ME {} exp={exp} la={} cas={} fetch={} cls=1 size={size}",
        String::from_utf8_lossy(&shown),
        now.saturating_sub(last_access),
        cx.shared.settings.visible_cas(info.cas),
        if info.fetched { "yes" } else { "no" },
    );
    reply(out, line.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::super::tests::item;
    use super::*;
    use crate::config::ServerArgs;
    use clap::{Args, FromArgMatches};
    use shoal_proto::{Parse, Parser, Request};

    /// The settings of a server started without flags.
    fn default_settings() -> Settings {
        let matches = ServerArgs::augment_args(clap::Command::new("server")).get_matches_from(["server"]);
        ServerArgs::from_arg_matches(&matches).unwrap().settings().unwrap()
    }

    fn parse(line: &[u8]) -> Meta<'_> {
        match Parser::new(1 << 20).parse(line) {
            Parse::Done { request: Request::Meta(m), .. } => m,
            _ => panic!("not a meta command: {line:?}"),
        }
    }

    #[test]
    fn a_hit_block_starts_over_when_the_lookup_retries() {
        let settings = default_settings();
        let m = parse(b"mg k v f s c O9\r\n");
        let line = HitLine { m: &m, key: b"k", now: 100, settings: &settings, started: 50 };
        let mut out = b"HD\r\n".to_vec();
        let mut block = HitBlock { out: &mut out, start: 4, line: &line, unshown: None };
        block.append_to(&item(1, 7, 3)).extend_from_slice(b"old");
        block.append_to(&item(2, 8, 4)).extend_from_slice(b"newv"); // the item changed: again
        assert_eq!(out, b"HD\r\nVA 4 f2 s4 c8 O9\r\nnewv");

        // Without `v` the answer is the line alone; the value goes aside.
        let m = parse(b"mg k s f\r\n");
        let line = HitLine { m: &m, key: b"k", now: 100, settings: &settings, started: 50 };
        let mut unshown = b"stale".to_vec();
        let mut block = HitBlock { out: &mut out, start: 4, line: &line, unshown: Some(&mut unshown) };
        block.append_to(&item(1, 7, 3)).extend_from_slice(b"old");
        block.append_to(&item(2, 8, 4)).extend_from_slice(b"newv");
        assert_eq!((out.as_slice(), unshown.as_slice()), (&b"HD\r\nHD s4 f2\r\n"[..], &b"newv"[..]));
    }
}
