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

use super::ops::{arith_op, delete_op, placeholder, read_counted, store_op, Placed};
use super::ops::{ArithOp, ArithResult, DeleteOp, DeleteResult, SetResult, StoreOp};
use super::{push_u64, reply, store_error, Context};
use crate::config::Settings;
use crate::counters::Counters;
use shoal_proto::{encode_base64, flag_set, Meta, MetaCmd, MetaFlags, StoreMode, KEY_MAX};
use shoal_region::{absolute_expiry, touch_expiry, Change, ItemInfo, Mark, Marks, NewItem, Value, ValueSink};

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
pub fn execute(cx: &mut Context<'_>, m: &Meta<'_>, out: &mut Vec<u8>) {
    Counters::bump(&cx.counters.cmd_meta);
    // A base64 key is decoded into stack scratch (no allocation per command), zeroed only
    // when there is one to decode.
    let mut scratch;
    let key = if m.flags.has(b'b') {
        scratch = [0u8; KEY_MAX];
        m.key(&mut scratch)
    } else {
        m.key
    };
    match m.cmd {
        MetaCmd::Noop => reply(out, b"MN"),
        MetaCmd::Get => get(cx, m, key, out),
        MetaCmd::Set => set(cx, m, key, out),
        MetaCmd::Delete => delete(cx, m, key, out),
        MetaCmd::Arithmetic => arithmetic(cx, m, key, out),
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
    // The letters this or an `extra` writes (or, `T` and `N`, that change what `t` shows): a
    // request with none of them (`mg <key> v`) has nothing to walk.
    const ANSWERED: u64 = flag_set(b"OkstTNcflh");
    if !m.flags.has_any(ANSWERED) {
        return;
    }
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
    shared.hotkeys.record(key);
    let line = HitLine { m, key, now, settings: &shared.settings, started: shared.clock.started() };
    let changes = f.ttl.is_some() || f.vivify.is_some() || f.recache.is_some();
    let placed = cx.place(key);
    // Whether the item was read before, as the plain read saw it (it marked the item fetched).
    let mut fetched_before = None;
    if !changes {
        let start = out.len();
        let mut unshown = std::mem::take(&mut cx.value);
        let shown = f.has(b'v');
        let mut block = HitBlock { out, start, line: &line, unshown: (!shown).then_some(&mut unshown) };
        let read = read_counted(cx, key, &placed, bump, &mut block);
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
        let mut found = get_and_change(cx, m, key, &placed, now, bump);
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
fn get_and_change(
    cx: &mut Context<'_>,
    m: &Meta<'_>,
    key: &[u8],
    placed: &Placed,
    now: u32,
    bump: bool,
) -> Option<Found> {
    let f = &m.flags;
    let writer = cx.writer_at(placed);
    let value = &mut cx.value;
    // Only `N` sees a lease record: to win it, or to learn that the lease is taken.
    let result = writer.update_hashed(key, &placed.hash, &[], true, |c| {
        match c.filter(|c| f.vivify.is_some() || !c.info.marks.hidden) {
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
        }
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

fn set(cx: &mut Context<'_>, m: &Meta<'_>, key: &[u8], out: &mut Vec<u8>) {
    let f = &m.flags;
    let mode = match f.mode.map(|b| b.to_ascii_uppercase()) {
        Some(b'E') => StoreMode::Add,
        Some(b'A') => StoreMode::Append,
        Some(b'P') => StoreMode::Prepend,
        Some(b'R') => StoreMode::Replace,
        _ => StoreMode::Set,
    };
    // memcached 1.6.18: any `C`, even `C0`, makes set and replace a compare (a live item's
    // CAS is never 0, so `C0` answers EX, or NF without an item).
    let cas = f.cas.unwrap_or(0);
    let mode = if f.cas.is_some() && matches!(mode, StoreMode::Set | StoreMode::Replace) {
        StoreMode::Cas
    } else {
        mode
    };
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
    let placed = cx.place(key);
    let Some(info) = cx.lookup(key, &placed, false) else {
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
    use super::super::tests::{default_settings, item};
    use super::*;
    use shoal_proto::{Parse, Parser, Request};

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
