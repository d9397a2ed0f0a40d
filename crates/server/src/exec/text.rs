//! The text protocol's data commands: `get gets gat gats`, `set add replace append prepend
//! cas`, `delete`, `incr decr`, `touch`.

use super::{push_u64, reply, reply_unless, store_error, Context};
use crate::stats::Counters;
use shoal_proto::{Get, Store, StoreCmd};
use shoal_region::{touch_expiry, visible, Change, Delta, ItemInfo, Lookup, Mark, OpError, Store as Stored};

impl Context<'_> {
    /// Looks a key up for a read, counting the kind of miss; the value lands in `self.value`.
    /// `bump: false` leaves the item's read state alone (meta's `u`).
    pub(crate) fn lookup(&mut self, key: &[u8], bump: bool) -> Option<ItemInfo> {
        let c = self.counters;
        match self.shared.writer.read(key, &mut self.value, bump) {
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

    /// Reads a key and sets its expiry (`gat`, meta `T`); the value lands in `self.value`.
    pub(crate) fn lookup_and_touch(&mut self, key: &[u8], exptime: i64) -> Option<ItemInfo> {
        let expiry = touch_expiry(exptime, self.shared.writer.clock());
        let value = &mut self.value;
        let result = self.shared.writer.update(key, &[], true, |current| match visible(current) {
            Some(c) => {
                value.clear();
                value.extend_from_slice(c.value);
                let mark = Mark { expiry: Some(expiry), marks: c.info.marks, fetched: true };
                (Change::Mark(mark), Some(ItemInfo { expiry, ..c.info }))
            }
            None => (Change::Keep, None),
        });
        result.ok().and_then(|(info, _)| info)
    }

    /// The CAS unique clients see (0 when `-C` turned CAS off).
    pub(crate) fn visible_cas(&self, cas: u64) -> u64 {
        if self.shared.settings.use_cas {
            cas
        } else {
            0
        }
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
    let writer = &cx.shared.writer;
    let mut index_ahead = get.keys.clone().skip(1);
    let mut items_ahead = get.keys.clone().skip(1);
    index_ahead.by_ref().take(INDEX_AHEAD).for_each(|key| writer.prefetch_index(key));
    items_ahead.by_ref().take(ITEMS_AHEAD).for_each(|key| writer.prefetch_item(key));
    for key in get.keys {
        if let Some(next) = index_ahead.next() {
            writer.prefetch_index(next);
        }
        if let Some(next) = items_ahead.next() {
            writer.prefetch_item(next);
        }
        let info = match get.touch {
            Some(exptime) => {
                Counters::bump(&c.cmd_touch);
                let info = cx.lookup_and_touch(key, exptime);
                Counters::bump(if info.is_some() { &c.touch_hits } else { &c.touch_misses });
                info
            }
            None => {
                Counters::bump(&c.cmd_get);
                let info = cx.lookup(key, true);
                Counters::bump(if info.is_some() { &c.get_hits } else { &c.get_misses });
                info
            }
        };
        let Some(info) = info else { continue };
        out.extend_from_slice(b"VALUE ");
        out.extend_from_slice(key);
        out.push(b' ');
        push_u64(out, u64::from(info.flags));
        out.push(b' ');
        push_u64(out, cx.value.len() as u64);
        if get.cas {
            out.push(b' ');
            push_u64(out, cx.visible_cas(info.cas));
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&cx.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"END\r\n");
}

/// The storage commands.
pub fn store(cx: &mut Context<'_>, s: Store<'_>, out: &mut Vec<u8>) {
    let (c, shared) = (cx.counters, cx.shared);
    let w = &shared.writer;
    Counters::bump(&c.cmd_set);
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
        cx.shared.writer.delete(key)
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
    let w = &cx.shared.writer;
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
    let answer: &[u8] = match cx.shared.writer.touch(key, exptime) {
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
