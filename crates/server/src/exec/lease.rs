//! Facebook's leases (mcrouter's ascii `lease-get`/`lease-set`), stale values after `delete`,
//! and the delete hold-off — on the same item states as meta's stale-while-revalidate.
//!
//! A lease is a region item, so it is bounded by the memory limit and expires by itself:
//! - a `lease-get` miss stores an empty placeholder marked hidden (plain reads miss it) and
//!   token-sent, expiring after `--lease-ttl`; its CAS unique is the token;
//! - `delete` with `--stale-ttl` keeps the value as a hidden, stale item for that long, with a
//!   new CAS (tokens handed out before are void);
//! - `delete <key> hold <seconds>` leaves a hidden empty item for that long, which `add`
//!   refuses to overwrite.
//!
//! The first `lease-get` (or `mg … N`) of such an item wins the token; the others get a hot
//! miss (or `Z`) until it is replaced or expires. `lease-set` stores only under the key's
//! current token; a late value arriving on a stale item is kept stale (`STALE_STORED`).

use super::ops::{count_store, placeholder, Placed};
use super::{push_u64, reply_unless, store_error, Context};
use crate::counters::Counters;
use shoal_proto::Store;
use shoal_region::{absolute_expiry, touch_expiry, Change, ItemInfo, Mark, Marks, NewItem, Value};

/// The token of a hot miss: someone else holds the lease (mcrouter's convention; real tokens
/// are CAS uniques, which are never below 2^20).
pub const HOT_MISS: u64 = 1;

/// What `lease-get` found.
enum Lease {
    /// A fresh value.
    Hit(ItemInfo),
    /// A miss; this caller holds the lease with this token.
    Token(u64, ItemInfo),
    /// A miss while another caller holds the lease.
    HotMiss(ItemInfo),
}

/// A fresh value, as opposed to a lease record, a stale value or an `mg … N` placeholder.
fn fresh(info: &ItemInfo) -> bool {
    let m = info.marks;
    !m.hidden && !m.stale && (!m.token_sent || info.value_len > 0)
}

/// `lease-get <key> [stale]`.
pub fn get(cx: &mut Context<'_>, key: &[u8], stale: bool, out: &mut Vec<u8>) {
    let c = cx.counters;
    Counters::bump(&c.cmd_get);
    cx.shared.hotkeys.record(key);
    // A fresh value costs what a `get` costs.
    let placed = cx.place(key);
    let lease = match cx.lookup(key, &placed, true) {
        Some(info) if fresh(&info) => Some(Lease::Hit(info)),
        _ => lease(cx, key, &placed),
    };
    let Some(lease) = lease else {
        out.extend_from_slice(b"SERVER_ERROR out of memory storing object\r\n");
        return;
    };
    let (token, info) = match lease {
        Lease::Hit(info) => {
            Counters::bump(&c.get_hits);
            value_line(out, b"VALUE ", key, None, info.flags, &cx.value);
            out.extend_from_slice(b"END\r\n");
            return;
        }
        Lease::Token(token, info) => (token, info),
        Lease::HotMiss(info) => (HOT_MISS, info),
    };
    Counters::bump(&c.get_misses);
    let (flags, data) = if stale && info.marks.stale { (info.flags, &cx.value[..]) } else { (0, &[][..]) };
    value_line(out, b"LVALUE ", key, Some(token), flags, data);
    out.extend_from_slice(b"END\r\n");
}

/// `<kind><key>[ <token>] <flags> <bytes>\r\n<data>\r\n`.
fn value_line(out: &mut Vec<u8>, kind: &[u8], key: &[u8], token: Option<u64>, flags: u32, data: &[u8]) {
    out.extend_from_slice(kind);
    out.extend_from_slice(key);
    if let Some(token) = token {
        out.push(b' ');
        push_u64(out, token);
    }
    out.push(b' ');
    push_u64(out, u64::from(flags));
    out.push(b' ');
    push_u64(out, data.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// The slow path of `lease-get`: hands out the key's token or a hot miss in one atomic step
/// (the value, stale or not, lands in `cx.value`). `None` if the region is out of memory.
fn lease(cx: &mut Context<'_>, key: &[u8], placed: &Placed) -> Option<Lease> {
    let writer = cx.writer_at(placed);
    let until = writer.clock().saturating_add(cx.shared.settings.lease_ttl);
    let value = &mut cx.value;
    let result = writer.update_hashed(key, &placed.hash, &[], true, |current| {
        value.clear();
        let Some(cur) = current else {
            let marks = Marks { hidden: true, token_sent: true, ..Marks::default() };
            let info = ItemInfo {
                flags: 0,
                cas: 0,
                expiry: until,
                value_len: 0,
                fetched: false,
                marks,
                last_access: 0,
            };
            return (Change::Store(placeholder(until, marks)), Lease::Token(0, info));
        };
        value.extend_from_slice(cur.value);
        let info = cur.info;
        if fresh(&info) {
            (Change::Keep, Lease::Hit(info))
        } else if info.marks.token_sent {
            (Change::Keep, Lease::HotMiss(info))
        } else {
            // The token must outlive the lease interval, whatever was left of the item's life.
            let expiry = if info.expiry == 0 { 0 } else { info.expiry.max(until) };
            let marks = Marks { token_sent: true, ..info.marks };
            let change = Change::Mark(Mark { expiry: Some(expiry), marks, fetched: false });
            (change, Lease::Token(info.cas, ItemInfo { expiry, marks, ..info }))
        }
    });
    match result {
        // A placeholder's token is the CAS the region gave it.
        Ok((Lease::Token(0, info), Some(cas))) => Some(Lease::Token(cas, ItemInfo { cas, ..info })),
        Ok((lease, _)) => Some(lease),
        Err(_) => None,
    }
}

/// The answer of `lease-set`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LeaseSet {
    Stored,
    /// The token is void but the key holds a stale value: this value replaces it, still
    /// stale, keeping the item's token, CAS and expiry.
    StaleStored,
    NotStored,
}

/// `lease-set <key> <token> <flags> <exptime> <bytes> [noreply]`.
pub fn set(cx: &mut Context<'_>, s: &Store<'_>, token: u64, out: &mut Vec<u8>) {
    let c = cx.counters;
    let writer = count_store(cx, s.key, s.data.len(), Some(touch_expiry(s.exptime, cx.region_clock())));
    let expiry = absolute_expiry(s.exptime, writer.clock());
    let value = NewItem { value: Value::Given, flags: s.flags, expiry, cas: None, marks: Marks::default() };
    let result = writer.update(s.key, s.data, false, |current| match current {
        Some(cur) if cur.info.cas == token => (Change::Store(value.clone()), LeaseSet::Stored),
        Some(cur) if cur.info.marks.stale => {
            let i = cur.info;
            let item = NewItem { expiry: Some(i.expiry), cas: Some(i.cas), marks: i.marks, ..value.clone() };
            (Change::Store(item), LeaseSet::StaleStored)
        }
        _ => (Change::Keep, LeaseSet::NotStored),
    });
    let answer: &[u8] = match result {
        Ok((LeaseSet::Stored, _)) => b"STORED",
        Ok((LeaseSet::StaleStored, _)) => b"STALE_STORED",
        Ok((LeaseSet::NotStored, _)) => b"NOT_STORED",
        Err(e) => store_error(c, &e),
    };
    reply_unless(s.noreply, out, answer);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(marks: Marks, value_len: usize) -> ItemInfo {
        ItemInfo { flags: 0, cas: 5, expiry: 0, value_len, fetched: false, marks, last_access: 0 }
    }

    #[test]
    fn only_plain_values_are_fresh() {
        assert!(fresh(&info(Marks::default(), 0)));
        assert!(fresh(&info(Marks { token_sent: true, ..Marks::default() }, 3)));
        assert!(!fresh(&info(Marks { token_sent: true, ..Marks::default() }, 0)));
        assert!(!fresh(&info(Marks { stale: true, ..Marks::default() }, 3)));
        assert!(!fresh(&info(Marks { hidden: true, ..Marks::default() }, 3)));
    }

    #[test]
    fn value_lines() {
        let mut out = Vec::new();
        value_line(&mut out, b"LVALUE ", b"k", Some(HOT_MISS), 0, b"");
        value_line(&mut out, b"VALUE ", b"k", None, 7, b"abc");
        assert_eq!(out, b"LVALUE k 1 0 0\r\n\r\nVALUE k 7 3\r\nabc\r\n");
    }
}
