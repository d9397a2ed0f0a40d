//! The text protocol's data commands: `get gets gat gats`, `set add replace append prepend
//! cas`, `delete`, `incr decr`, `touch`.

use super::{push_u64, reply, reply_unless, store_error, Context};
use crate::config::Settings;
use crate::stats::Counters;
use shoal_proto::{Get, Store, StoreCmd};
use shoal_region::{
    touch_expiry, visible, Change, Delta, ItemInfo, Lookup, Mark, OpError, Store as Stored, ValueSink,
};

impl Context<'_> {
    /// Looks a key up for a read, counting the kind of miss; the value lands in `self.value`.
    /// `bump: false` leaves the item's read state alone (meta's `u`).
    pub(crate) fn lookup(&mut self, key: &[u8], bump: bool) -> Option<ItemInfo> {
        let mut value = std::mem::take(&mut self.value);
        let found = read_counted(self, key, bump, &mut value);
        self.value = value;
        found
    }

    /// Reads a key and sets its expiry (`gat`, meta `T`); the value lands in `self.value`.
    pub(crate) fn lookup_and_touch(&mut self, key: &[u8], exptime: i64) -> Option<ItemInfo> {
        let expiry = touch_expiry(exptime, self.region_clock());
        let writer = self.writer(key);
        let value = &mut self.value;
        let result = writer.update(key, &[], true, |current| match visible(current) {
            Some(c) => {
                value.clear();
                value.extend_from_slice(c.value);
                let mark = Mark { expiry: Some(expiry), marks: c.info.marks, fetched: true };
                (Change::Mark(mark), Some(ItemInfo { expiry, ..c.info }))
            }
            None => (Change::Keep, None),
        });
        let found = result.ok().and_then(|(info, _)| info);
        crate::watch::fetched(self, key, &Ok(found.map_or(Lookup::Missing, Lookup::Hit)));
        found
    }
}

/// Reads a key into `sink`, counting the kind of miss (a hit is the caller's to count) and,
/// for a read that counts as an access (`bump`), the tenant's get and its hit or miss.
pub(super) fn read_counted(
    cx: &Context<'_>,
    key: &[u8],
    bump: bool,
    sink: &mut dyn ValueSink,
) -> Option<ItemInfo> {
    let (i, tenant) = cx.tenant(key);
    let found = tenant.writer.read(key, sink, bump);
    crate::watch::fetched(cx, key, &found);
    if let Some(curve) = &tenant.curve {
        let size = match &found {
            Ok(Lookup::Hit(info)) => {
                (key.len() + info.value_len + shoal_region::layout::ITEM_HEADER_BYTES) as u64
            }
            _ => 0,
        };
        curve.access(key, size, &cx.tenant_counters[i].curve_unsampled);
    }
    if bump {
        let mine = &cx.tenant_counters[i];
        Counters::bump(&mine.cmd_get);
        Counters::bump(if matches!(found, Ok(Lookup::Hit(_))) { &mine.get_hits } else { &mine.get_misses });
    }
    let c = cx.counters;
    match found {
        Ok(Lookup::Hit(info)) => Some(info),
        Ok(Lookup::Expired) => {
            Counters::bump(&c.get_expired);
            None
        }
        Ok(Lookup::Flushed) => {
            Counters::bump(&c.get_flushed);
            None
        }
        Ok(Lookup::Missing) | Err(_) => None,
    }
}

/// A `VALUE` block of a get's answer, written straight into the output as the lookup copies
/// the value (no copy through a buffer of its own). The lookup may ask for it more than once
/// (it retries when the item changes under it): each time the block starts over.
struct ValueBlock<'a> {
    out: &'a mut Vec<u8>,
    /// Where the block begins in `out`.
    start: usize,
    key: &'a [u8],
    /// `gets`/`gats`: the CAS column, shown as the settings say.
    cas: Option<&'a Settings>,
}

impl ValueBlock<'_> {
    /// Ends the block after a hit, or takes it back after anything else.
    fn finish(self, hit: bool) {
        if hit {
            self.out.extend_from_slice(b"\r\n");
        } else {
            self.out.truncate(self.start);
        }
    }
}

impl ValueSink for ValueBlock<'_> {
    fn append_to(&mut self, item: &ItemInfo) -> &mut Vec<u8> {
        let (flags, len) = (item.flags, item.value_len);
        let out = &mut *self.out;
        out.truncate(self.start);
        out.extend_from_slice(b"VALUE ");
        out.extend_from_slice(self.key);
        out.push(b' ');
        push_u64(out, u64::from(flags));
        out.push(b' ');
        push_u64(out, len as u64);
        if let Some(settings) = self.cas {
            out.push(b' ');
            push_u64(out, settings.visible_cas(item.cas));
        }
        out.extend_from_slice(b"\r\n");
        out.reserve(len + 2);
        out
    }
}

/// How many keys ahead of its lookups a multiget loads their index buckets, and their items.
const INDEX_AHEAD: usize = 8;
const ITEMS_AHEAD: usize = 4;

/// `get`/`gets`/`gat`/`gats`: a `VALUE` block per key found, then `END`.
pub fn get(cx: &mut Context<'_>, get: Get<'_>, out: &mut Vec<u8>) {
    let c = cx.counters;
    // Loading the index buckets of keys several ahead, and the items of keys a few ahead, lets
    // their memory misses overlap instead of queueing (a single key has nothing to overlap).
    let mut index_ahead = get.keys.clone().skip(1);
    let mut items_ahead = get.keys.clone().skip(1);
    index_ahead.by_ref().take(INDEX_AHEAD).for_each(|key| cx.writer(key).prefetch_index(key));
    items_ahead.by_ref().take(ITEMS_AHEAD).for_each(|key| cx.writer(key).prefetch_item(key));
    for key in get.keys {
        if let Some(next) = index_ahead.next() {
            cx.writer(next).prefetch_index(next);
        }
        if let Some(next) = items_ahead.next() {
            cx.writer(next).prefetch_item(next);
        }
        let start = out.len();
        let mut block = ValueBlock { out, start, key, cas: get.cas.then_some(&cx.shared.settings) };
        let hit = match get.touch {
            Some(exptime) => {
                Counters::bump(&c.cmd_touch);
                let info = cx.lookup_and_touch(key, exptime);
                if let Some(info) = &info {
                    block.append_to(info).extend_from_slice(&cx.value);
                }
                Counters::bump(if info.is_some() { &c.touch_hits } else { &c.touch_misses });
                info.is_some()
            }
            None => {
                Counters::bump(&c.cmd_get);
                let hit = read_counted(cx, key, true, &mut block).is_some();
                Counters::bump(if hit { &c.get_hits } else { &c.get_misses });
                hit
            }
        };
        block.finish(hit);
    }
    out.extend_from_slice(b"END\r\n");
}

/// The storage commands.
pub fn store(cx: &mut Context<'_>, s: Store<'_>, out: &mut Vec<u8>) {
    let (c, shared) = (cx.counters, cx.shared);
    let (tenant, t) = cx.tenant(s.key);
    let w = &t.writer;
    if let Some(curve) = &t.curve {
        curve.stored(s.key, (s.key.len() + s.data.len() + shoal_region::layout::ITEM_HEADER_BYTES) as u64);
    }
    Counters::bump(&c.cmd_set);
    Counters::bump(&cx.tenant_counters[tenant].cmd_set);
    let result = match s.cmd {
        StoreCmd::Set => w.set(s.key, s.data, s.flags, s.exptime),
        StoreCmd::Add => w.add(s.key, s.data, s.flags, s.exptime),
        StoreCmd::Replace => w.replace(s.key, s.data, s.flags, s.exptime),
        StoreCmd::Append => w.append(s.key, s.data),
        StoreCmd::Prepend => w.prepend(s.key, s.data),
        // With CAS off, no unique the client holds can match.
        StoreCmd::Cas(_) if !shared.settings.use_cas => {
            Ok(if cx.lookup(s.key, false).is_some() { Stored::Exists } else { Stored::NotFound })
        }
        StoreCmd::Cas(unique) => w.cas(s.key, s.data, s.flags, s.exptime, unique),
        StoreCmd::LeaseSet(token) => return super::lease::set(cx, &s, token, out),
    };
    crate::watch::text_stored(cx, &s, &result);
    let answer: &[u8] = match result {
        Ok(Stored::Stored) => {
            if let StoreCmd::Cas(_) = s.cmd {
                Counters::bump(&c.cas_hits);
            }
            b"STORED"
        }
        Ok(Stored::NotStored) => b"NOT_STORED",
        Ok(Stored::Exists) => {
            Counters::bump(&c.cas_badval);
            b"EXISTS"
        }
        Ok(Stored::NotFound) => {
            Counters::bump(&c.cas_misses);
            b"NOT_FOUND"
        }
        Err(e) => store_error(c, &e),
    };
    reply_unless(s.noreply, out, answer);
}

/// `delete <key>`; with a hold-off, or with `--stale-ttl`, the key keeps a lease record
/// ([`super::lease::delete`]).
pub fn delete(cx: &mut Context<'_>, key: &[u8], hold: u32, noreply: bool, out: &mut Vec<u8>) {
    let c = cx.counters;
    let result = if hold > 0 || cx.shared.settings.stale_ttl > 0 {
        super::lease::delete(cx, key, hold)
    } else {
        cx.writer(key).delete(key)
    };
    let answer: &[u8] = match result {
        Ok(true) => {
            Counters::bump(&c.delete_hits);
            b"DELETED"
        }
        Ok(false) => {
            Counters::bump(&c.delete_misses);
            b"NOT_FOUND"
        }
        Err(e) => store_error(c, &e),
    };
    reply_unless(noreply, out, answer);
}

/// `incr`/`decr <key> <delta>`.
pub fn arith(cx: &mut Context<'_>, incr: bool, key: &[u8], delta: u64, noreply: bool, out: &mut Vec<u8>) {
    let c = cx.counters;
    let w = cx.writer(key);
    let result = if incr { w.incr(key, delta) } else { w.decr(key, delta) };
    let (hits, misses) = if incr { (&c.incr_hits, &c.incr_misses) } else { (&c.decr_hits, &c.decr_misses) };
    if noreply {
        if let Ok(Delta::Value(_)) = result {
            Counters::bump(hits);
        }
        return;
    }
    match result {
        Ok(Delta::Value(n)) => {
            Counters::bump(hits);
            push_u64(out, n);
            out.extend_from_slice(b"\r\n");
        }
        Ok(Delta::NotFound) => {
            Counters::bump(misses);
            reply(out, b"NOT_FOUND");
        }
        Ok(Delta::NonNumeric) => reply(out, b"CLIENT_ERROR cannot increment or decrement non-numeric value"),
        Err(OpError::OutOfMemory | OpError::ValueTooLarge { .. }) => {
            reply(out, b"SERVER_ERROR out of memory")
        }
        Err(e) => reply(out, store_error(c, &e)),
    }
}

/// `touch <key> <exptime>`.
pub fn touch(cx: &mut Context<'_>, key: &[u8], exptime: i64, noreply: bool, out: &mut Vec<u8>) {
    let c = cx.counters;
    Counters::bump(&c.cmd_touch);
    let answer: &[u8] = match cx.writer(key).touch(key, exptime) {
        Ok(true) => {
            Counters::bump(&c.touch_hits);
            b"TOUCHED"
        }
        Ok(false) => {
            Counters::bump(&c.touch_misses);
            b"NOT_FOUND"
        }
        Err(e) => store_error(c, &e),
    };
    reply_unless(noreply, out, answer);
}

#[cfg(test)]
mod tests {
    use super::super::tests::item;
    use super::*;

    #[test]
    fn a_value_block_starts_over_when_the_lookup_retries_and_vanishes_on_a_miss() {
        let mut out = b"VALUE a 0 1\r\nx\r\n".to_vec();
        let start = out.len();
        let mut block = ValueBlock { out: &mut out, start, key: b"k", cas: None };
        block.append_to(&item(1, 7, 3)).extend_from_slice(b"old");
        block.append_to(&item(2, 8, 4)).extend_from_slice(b"newv"); // the item changed: again
        block.finish(true);
        assert_eq!(out, b"VALUE a 0 1\r\nx\r\nVALUE k 2 4\r\nnewv\r\n");

        let mut block = ValueBlock { out: &mut out, start, key: b"k", cas: None };
        block.append_to(&item(1, 7, 3)).extend_from_slice(b"old");
        block.finish(false); // found, then judged expired: nothing of it stays
        assert_eq!(out, b"VALUE a 0 1\r\nx\r\n");
    }
}
