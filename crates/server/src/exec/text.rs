//! The text protocol's data commands: `get gets gat gats`, `set add replace append prepend
//! cas`, `delete`, `incr decr`, `touch`.

use super::ops::{count_store_lazily, delete_key, delete_leaving_lease, read_counted, Placed};
use super::{push_u64, reply, reply_unless, store_error, Context};
use crate::config::Settings;
use crate::counters::Counters;
use crate::hotkeys::Sampler;
use crate::watch::{StoreEvent, StoreStatus};
use shoal_proto::{Get, Store, StoreCmd};
use shoal_region::{absolute_expiry, touch_expiry, Delta, ItemInfo, OpError, Store as Stored, ValueSink};

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

/// A `VALUE` block's bytes besides its key and value, at most.
const VALUE_BLOCK_FIXED: usize = b"VALUE ".len() + 3 * (1 + 20) + 2 * b"\r\n".len();

impl ValueSink for ValueBlock<'_> {
    fn append_to(&mut self, item: &ItemInfo) -> &mut Vec<u8> {
        let (flags, len) = (item.flags, item.value_len);
        let out = &mut *self.out;
        out.truncate(self.start);
        // One reservation for the whole block: `VALUE `, the key, three numbers of at most 20
        // digits with their spaces, the value and the two line ends.
        out.reserve(VALUE_BLOCK_FIXED + self.key.len() + len);
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
        out
    }
}

/// How many keys ahead of its lookups a multiget loads their index buckets, and their items.
const INDEX_AHEAD: usize = 8;
const ITEMS_AHEAD: usize = 4;
/// The keys placed ahead of the lookup: key `n` waits in slot `n % AHEAD` (a power of two,
/// so that is a mask, not a division).
const AHEAD: usize = (INDEX_AHEAD + 1).next_power_of_two();

/// A key of a multiget, placed (its tenant found, hashed) once for its prefetches and its
/// lookup; the ring keeps the key too, so the line is split into keys once here.
type Ahead<'k> = [Option<(&'k [u8], Placed)>; AHEAD];

/// Places key `n` as it comes in reach of the index prefetch, starts loading its index
/// buckets, and keeps it with its placement for its item prefetch and its lookup. Inlined, as
/// [`prefetch_item`] is: as calls, their entries and exits were some 50 instructions a key.
#[inline(always)]
fn place_ahead<'k>(cx: &Context<'_>, ahead: &mut Ahead<'k>, (n, key): (usize, &'k [u8])) {
    ahead[n % AHEAD] = Some((key, cx.place_ahead(key)));
}

/// Starts loading the item of key `n`, if it is placed.
#[inline(always)]
fn prefetch_item(cx: &Context<'_>, ahead: &Ahead<'_>, n: usize) {
    if let Some((_, placed)) = &ahead[n % AHEAD] {
        cx.writer_at(placed).prefetch_item(&placed.hash);
    }
}

/// `get`/`gets`/`gat`/`gats`: a `VALUE` block per key found, then `END`.
pub fn get(cx: &mut Context<'_>, get: &Get<'_>, out: &mut Vec<u8>) {
    // Each key past the first takes an answer of its own, as in memcached.
    if !cx.hold_answers(get.count.saturating_sub(1), out) {
        reply(out, b"SERVER_ERROR out of memory writing get response");
        return;
    }
    // The hot-key sampler's countdown is taken once for all the keys.
    let mut hot = cx.shared.hotkeys.sampler();
    if get.count > 1 {
        multiget(cx, get, &mut hot, out);
    } else if let Some(key) = get.only_key {
        // A single key has nothing to overlap its memory misses with: no prefetching ahead
        // (unless the connection's read ahead started it).
        let placed = cx.placed_ahead.take().unwrap_or_else(|| cx.place(key));
        get_one(cx, get, &mut hot, (key, &placed), out);
    }
    drop(hot);
    out.extend_from_slice(b"END\r\n");
}

/// The `VALUE` blocks of a get of several keys.
fn multiget(cx: &mut Context<'_>, get: &Get<'_>, hot: &mut Sampler<'_>, out: &mut Vec<u8>) {
    // Loading the index buckets of keys several ahead, and the items of keys a few ahead, lets
    // their memory misses overlap instead of queueing. Each key is placed once, when its index
    // is loaded; its item's load and its lookup use that placement. The first key is looked
    // up at once: it is placed without a prefetch.
    let mut ahead: Ahead<'_> = [None; AHEAD];
    let mut upcoming = get.keys.clone().enumerate();
    if let Some((_, first)) = upcoming.next() {
        ahead[0] = Some((first, cx.placed_ahead.take().unwrap_or_else(|| cx.place(first))));
    }
    upcoming.by_ref().take(INDEX_AHEAD).for_each(|key| place_ahead(cx, &mut ahead, key));
    (1..=ITEMS_AHEAD).for_each(|n| prefetch_item(cx, &ahead, n));
    // Keys are placed in order, each into the slot its lookup frees.
    for n in 0..get.count {
        let Some((key, placed)) = ahead[n % AHEAD].take() else { break };
        if let Some(next) = upcoming.next() {
            place_ahead(cx, &mut ahead, next);
        }
        prefetch_item(cx, &ahead, n + ITEMS_AHEAD + 1);
        get_one(cx, get, hot, (key, &placed), out);
    }
}

/// The `VALUE` block of one key of a get, if it is found.
#[inline]
fn get_one(
    cx: &mut Context<'_>,
    get: &Get<'_>,
    hot: &mut Sampler<'_>,
    (key, placed): (&[u8], &Placed),
    out: &mut Vec<u8>,
) {
    let c = cx.counters;
    hot.record(key);
    let start = out.len();
    let mut block = ValueBlock { out, start, key, cas: get.cas.then_some(&cx.shared.settings) };
    let hit = match get.touch {
        Some(exptime) => {
            Counters::bump(&c.cmd_touch);
            let info = cx.lookup_and_touch(key, placed, exptime);
            if let Some(info) = &info {
                block.append_to(info).extend_from_slice(&cx.value);
            }
            Counters::bump(if info.is_some() { &c.touch_hits } else { &c.touch_misses });
            info.is_some()
        }
        None => {
            Counters::bump(&c.cmd_get);
            let hit = read_counted(cx, key, placed, true, &mut block).is_some();
            Counters::bump(if hit { &c.get_hits } else { &c.get_misses });
            // A near cache (`--upstream`) looks a miss up upstream.
            hit || super::near::fetch_miss(cx, key, &mut block)
        }
    };
    block.finish(hit);
}

/// The storage commands.
pub fn store(cx: &mut Context<'_>, s: &Store<'_>, out: &mut Vec<u8>) {
    let (c, shared) = (cx.counters, cx.shared);
    // Append and prepend keep the item's expiry.
    let keeps_expiry = matches!(s.cmd, StoreCmd::Append | StoreCmd::Prepend);
    let expiry = || (!keeps_expiry).then(|| touch_expiry(s.exptime, cx.region_clock()));
    let w = count_store_lazily(cx, s.key, s.data.len(), expiry);
    let result = match s.cmd {
        StoreCmd::Set => w.set(s.key, s.data, s.flags, s.exptime),
        StoreCmd::Add => w.add(s.key, s.data, s.flags, s.exptime),
        StoreCmd::Replace => w.replace(s.key, s.data, s.flags, s.exptime),
        StoreCmd::Append => w.append(s.key, s.data),
        StoreCmd::Prepend => w.prepend(s.key, s.data),
        // With CAS off, no unique the client holds can match.
        StoreCmd::Cas(_) if !shared.settings.use_cas => {
            let placed = cx.place(s.key);
            Ok(if cx.lookup(s.key, &placed, false).is_some() { Stored::Exists } else { Stored::NotFound })
        }
        StoreCmd::Cas(unique) => w.cas(s.key, s.data, s.flags, s.exptime, unique),
        StoreCmd::LeaseSet(_) => unreachable!("Context::execute hands lease-set to lease::set"),
    };
    log_store(cx, s, &result);
    // Whole lines, each appended at once.
    let answer: &[u8] = match result {
        Ok(Stored::Stored) => {
            if let StoreCmd::Cas(_) = s.cmd {
                Counters::bump(&c.cas_hits);
            }
            b"STORED\r\n"
        }
        Ok(Stored::NotStored) => b"NOT_STORED\r\n",
        Ok(Stored::Exists) => {
            Counters::bump(&c.cas_badval);
            b"EXISTS\r\n"
        }
        Ok(Stored::NotFound) => {
            Counters::bump(&c.cas_misses);
            b"NOT_FOUND\r\n"
        }
        Err(e) => return reply_unless(s.noreply, out, store_error(c, &e)),
    };
    if !s.noreply {
        out.extend_from_slice(answer);
    }
}

/// Tells `watch mutations` of a storage command and its outcome.
fn log_store(cx: &Context<'_>, s: &Store<'_>, result: &Result<Stored, OpError>) {
    cx.shared.logs.stored(cx.connection(), || {
        let status = match result {
            Ok(Stored::Stored) => StoreStatus::Stored,
            Ok(Stored::NotStored) => StoreStatus::NotStored,
            Ok(Stored::Exists) => StoreStatus::Exists,
            Ok(Stored::NotFound) => StoreStatus::NotFound,
            Err(e) => StoreStatus::of_error(e),
        };
        let cmd: &[u8] = match s.cmd {
            StoreCmd::Set | StoreCmd::LeaseSet(_) => b"set",
            StoreCmd::Add => b"add",
            StoreCmd::Replace => b"replace",
            StoreCmd::Append => b"append",
            StoreCmd::Prepend => b"prepend",
            StoreCmd::Cas(_) => b"cas",
        };
        let now = cx.region_clock();
        let expiry = absolute_expiry(s.exptime, now);
        StoreEvent { key: s.key, cmd, status, expiry, now, size: s.data.len() }
    });
}

/// `delete <key>`; with a hold-off, or with `--stale-ttl`, the key keeps a lease record
/// ([`delete_leaving_lease`]).
pub fn delete(cx: &mut Context<'_>, key: &[u8], hold: u32, noreply: bool, out: &mut Vec<u8>) {
    let c = cx.counters;
    cx.shared.prefixes.record(key, crate::detail::Event::Delete);
    let result = if hold > 0 || cx.shared.settings.stale_ttl > 0 {
        delete_leaving_lease(cx, key, hold)
    } else {
        delete_key(cx, key)
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
    use super::super::tests::{default_settings, item};
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

    #[test]
    fn a_value_line_reads_as_formatted_whatever_its_numbers() {
        let settings = default_settings();
        // The block reserves room for its value, so lengths stay within what an item can hold.
        let lengths = [0, 1, 9, 10, 99, 100, 12_345, 999_999, 1_000_000];
        for (flags, len) in [0, 1, 9, 10, 4_294_967_295].into_iter().flat_map(|f| lengths.map(|l| (f, l))) {
            for cas in [None, Some(&settings)] {
                let mut out = b"END\r\n".to_vec();
                let mut block = ValueBlock { out: &mut out, start: 5, key: b"key", cas };
                block.append_to(&item(flags, 7, len));
                let unique = cas.map(|s| format!(" {}", s.visible_cas(7))).unwrap_or_default();
                let want = format!("END\r\nVALUE key {flags} {len}{unique}\r\n");
                assert_eq!(String::from_utf8_lossy(&out), want);
            }
        }
    }
}
