//! The operations on items that every protocol shares, apart from how each answers: reads
//! (counted, logged for `watch`, sampled for the tenant's curve), stores, deletes, incr/decr,
//! flush, and the lease records a delete can leave. The text, meta, binary and lease
//! writers call these and turn their results into their own answers.
//!
//! ```text
//!  text / meta / binary / lease writers ──► ops ──► tenant's Writer (shoal-region)
//!                                            ├──► Counters, TenantCounters, curve
//!                                            └──► Logs (`watch fetchers`, `watch mutations`)
//! ```

use super::Context;
use crate::counters::Counters;
use crate::curve::Read;
use crate::detail::Event;
use crate::watch::{StoreEvent, StoreStatus};
use shoal_proto::{Op, StoreMode};
use shoal_region::{
    counter_text, parse_counter, touch_expiry, visible, Change, ItemInfo, KeyHash, Lookup, Mark, Marks,
    NewItem, OpError, Value, ValueSink, Writer,
};

/// Where a key lives: its tenant, and its hash in that tenant's region. Found once for all a
/// request does with the key: a multiget's prefetches of it and its lookup, `mg`'s read and
/// the change that may follow.
#[derive(Clone, Copy)]
pub struct Placed {
    pub tenant: usize,
    pub hash: KeyHash,
    /// Its index buckets are already loading ([`Context::place_ahead`]): the lookup does not
    /// start them again.
    pub ahead: bool,
}

impl<'a> Context<'a> {
    /// Finds `key`'s tenant and hashes it for that tenant's region.
    #[inline]
    pub fn place(&self, key: &[u8]) -> Placed {
        let tenant = self.shared.tenants.of_key(self.bound, key);
        Placed { tenant, hash: self.shared.tenants.get(tenant).writer.hash(key), ahead: false }
    }

    /// [`Context::place`], and starts loading the key's index buckets for a lookup to come
    /// (a multiget's, several keys ahead).
    #[inline]
    pub fn place_ahead(&self, key: &[u8]) -> Placed {
        let placed = self.place(key);
        self.writer_at(&placed).prefetch_index(&placed.hash);
        Placed { ahead: true, ..placed }
    }

    /// The region of a key placed by [`Context::place`].
    #[inline]
    pub fn writer_at(&self, placed: &Placed) -> &'a Writer {
        &self.shared.tenants.get(placed.tenant).writer
    }

    /// Looks a key up for a read, counting the kind of miss; the value lands in `self.value`.
    /// `bump: false` leaves the item's read state alone (meta's `u`).
    pub(crate) fn lookup(&mut self, key: &[u8], placed: &Placed, bump: bool) -> Option<ItemInfo> {
        let mut value = std::mem::take(&mut self.value);
        let found = read_counted(self, key, placed, bump, &mut value);
        self.value = value;
        found
    }

    /// Reads a key and sets its expiry (`gat`, meta `T`); the value lands in `self.value`.
    pub(crate) fn lookup_and_touch(&mut self, key: &[u8], placed: &Placed, exptime: i64) -> Option<ItemInfo> {
        let expiry = touch_expiry(exptime, self.region_clock());
        let writer = self.writer_at(placed);
        let value = &mut self.value;
        let result = writer.update_hashed(key, &placed.hash, &[], true, |current| match visible(current) {
            Some(c) => {
                value.clear();
                value.extend_from_slice(c.value);
                let mark = Mark { expiry: Some(expiry), marks: c.info.marks, fetched: true };
                (Change::Mark(mark), Some(ItemInfo { expiry, ..c.info }))
            }
            None => (Change::Keep, None),
        });
        let found = result.ok().and_then(|(info, _)| info);
        self.shared.prefixes.record(key, Event::Get { hit: found.is_some() });
        self.shared.logs.fetched(self.connection(), key, &Ok(found.map_or(Lookup::Missing, Lookup::Hit)));
        if let (Some(curve), Some(_)) = (&self.shared.tenants.get(placed.tenant).curve, found) {
            curve.stored(key, 0, Some(expiry), writer.clock());
        }
        found
    }
}

/// Reads a key into `sink`, counting the kind of miss (a hit is the caller's to count) and,
/// for a read that counts as an access (`bump`), the tenant's get and its hit or miss and the
/// key prefix's (`stats detail`). Generic over the sink, as the region's lookup is: each
/// answer's writer is compiled into its own lookup, not called through a vtable. Inlined into
/// each caller (one per sink): left to the compiler, whether it was inlined into the get's
/// writer changed with unrelated code elsewhere in the crate, by some 35 instructions a read.
#[inline(always)]
pub(crate) fn read_counted<S: ValueSink>(
    cx: &Context<'_>,
    key: &[u8],
    placed: &Placed,
    bump: bool,
    sink: &mut S,
) -> Option<ItemInfo> {
    let i = placed.tenant;
    let tenant = cx.shared.tenants.get(i);
    let found = tenant.writer.read_hashed(key, &placed.hash, sink, bump, placed.ahead);
    cx.shared.logs.fetched(cx.connection(), key, &found);
    if let Some(curve) = &tenant.curve {
        let read = match &found {
            Ok(Lookup::Hit(info)) => Read::Hit { size: item_bytes(key, info.value_len), expiry: info.expiry },
            Ok(Lookup::Expired | Lookup::Flushed) => Read::Dead,
            Ok(Lookup::Missing) | Err(_) => Read::Miss,
        };
        curve.access(key, read, tenant.writer.clock(), &cx.tenant_counters[i].curve_unsampled);
    }
    if bump {
        let hit = matches!(found, Ok(Lookup::Hit(_)));
        let mine = &cx.tenant_counters[i];
        Counters::bump(&mine.cmd_get);
        Counters::bump(if hit { &mine.get_hits } else { &mine.get_misses });
        cx.shared.prefixes.record(key, Event::Get { hit });
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

/// The bytes the region lays an item of `key` and `value_len` bytes out in (the curve's unit).
fn item_bytes(key: &[u8], value_len: usize) -> u64 {
    shoal_region::layout::item_bytes(key.len(), value_len, false) as u64
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
    pub mode: StoreMode,
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

/// Counts a store of `data_len` bytes under `key` expiring at `expiry` (absolute, 0: never;
/// `None`: the item's expiry stays, as append's does) — the worker's and the tenant's
/// `cmd_set`, the key prefix's sets, the tenant's curve, `watch fetchers`' lookup — before it
/// is tried (memcached counts a prefix's set before it allocates); the tenant's
/// region, to store into.
pub(crate) fn count_store<'a>(
    cx: &Context<'a>,
    key: &[u8],
    data_len: usize,
    expiry: Option<u32>,
) -> &'a Writer {
    count_store_lazily(cx, key, data_len, || expiry)
}

/// [`count_store`] with the expiry worked out only if it is needed (a tenant with a curve):
/// the request path's stores skip it otherwise.
#[inline]
pub(crate) fn count_store_lazily<'a>(
    cx: &Context<'a>,
    key: &[u8],
    data_len: usize,
    expiry: impl FnOnce() -> Option<u32>,
) -> &'a Writer {
    let (tenant, t) = cx.tenant(key);
    cx.shared.prefixes.record(key, Event::Set);
    cx.shared.logs.store_lookup(cx.connection(), key, &t.writer);
    if let Some(curve) = &t.curve {
        curve.stored(key, item_bytes(key, data_len), expiry(), t.writer.clock());
    }
    Counters::bump(&cx.counters.cmd_set);
    Counters::bump(&cx.tenant_counters[tenant].cmd_set);
    &t.writer
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
    let (mode, req_cas, fresh) = (op.mode, op.cas, &op.fresh);
    let concat = matches!(mode, StoreMode::Append | StoreMode::Prepend);
    // Expired on arrival (`None`) is expiry 1: long past.
    let writer = count_store_lazily(cx, key, data.len(), || (!concat).then(|| fresh.expiry.unwrap_or(1)));
    let now = writer.clock();
    let result = writer.update(key, data, concat, |current| {
        // A lease record is there for `add` (a hold-off refuses it) and for a store under
        // its token; the other modes see no item.
        let current = match mode {
            StoreMode::Replace | StoreMode::Append | StoreMode::Prepend => visible(current),
            StoreMode::Add => current.filter(|c| c.info.marks.refuses_add()),
            StoreMode::Set | StoreMode::Cas => current,
        };
        let Some(cur) = current else {
            return match mode {
                StoreMode::Add | StoreMode::Set => (Change::Store(fresh.clone()), SetResult::Stored),
                StoreMode::Cas => (Change::Keep, SetResult::NotFound),
                // Newer memcached: `N` vivifies a missing key in append mode.
                StoreMode::Append | StoreMode::Prepend if op.vivify.is_some() => {
                    let expiry = op.vivify.map(|t| touch_expiry(t, now));
                    (Change::Store(NewItem { expiry, ..fresh.clone() }), SetResult::Stored)
                }
                _ => (Change::Keep, SetResult::NotStored),
            };
        };
        let cas_matches = req_cas == 0 || req_cas == cur.info.cas;
        let stale_cas = op.invalidate && req_cas != 0 && req_cas < cur.info.cas;
        match mode {
            StoreMode::Add => (Change::Keep, SetResult::NotStored),
            StoreMode::Cas if req_cas == cur.info.cas => (Change::Store(fresh.clone()), SetResult::Stored),
            // An invalidation raced ahead of this (older) value: store it, but marked stale,
            // keeping the newer item's expiry and token state.
            StoreMode::Cas if stale_cas => {
                let marks = Marks { stale: true, token_sent: cur.info.marks.token_sent, ..fresh.marks };
                let item = NewItem { expiry: Some(cur.info.expiry), marks, ..fresh.clone() };
                (Change::Store(item), SetResult::Stored)
            }
            StoreMode::Cas => (Change::Keep, SetResult::Exists),
            StoreMode::Append | StoreMode::Prepend if !cas_matches => (Change::Keep, SetResult::Exists),
            StoreMode::Append => {
                (Change::Store(NewItem::keeping(cur.info, Value::Append)), SetResult::Stored)
            }
            StoreMode::Prepend => {
                (Change::Store(NewItem::keeping(cur.info, Value::Prepend)), SetResult::Stored)
            }
            StoreMode::Set | StoreMode::Replace => (Change::Store(fresh.clone()), SetResult::Stored),
        }
    });
    log_store(cx, key, data.len(), op, &result);
    let (result, new_cas) = result.inspect_err(|_| {
        let _ = delete_key(cx, key);
    })?;
    match (mode, result) {
        (StoreMode::Cas, SetResult::Stored) => Counters::bump(&c.cas_hits),
        (_, SetResult::Exists) => Counters::bump(&c.cas_badval),
        (_, SetResult::NotFound) => Counters::bump(&c.cas_misses),
        _ => {}
    }
    Ok((result, new_cas))
}

/// Tells `watch mutations` of a store made by `ms` or the binary protocol.
fn log_store(
    cx: &Context<'_>,
    key: &[u8],
    size: usize,
    op: &StoreOp,
    result: &Result<(SetResult, Option<u64>), OpError>,
) {
    cx.shared.logs.stored(cx.connection(), || {
        let status = match result {
            Ok((SetResult::Stored, _)) => StoreStatus::Stored,
            Ok((SetResult::NotStored, _)) => StoreStatus::NotStored,
            Ok((SetResult::Exists, _)) => StoreStatus::Exists,
            Ok((SetResult::NotFound, _)) => StoreStatus::NotFound,
            Err(e) => StoreStatus::of_error(e),
        };
        let cmd = Op::from(op.mode).word().as_bytes();
        StoreEvent { key, cmd, status, expiry: op.fresh.expiry, now: cx.region_clock(), size }
    });
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
    cx.shared.prefixes.record(key, Event::Delete);
    let (_, tenant) = cx.tenant(key);
    let writer = &tenant.writer;
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
    // `I` and `x` leave an item readers still find; any other delete takes the key away.
    if let (Some(curve), DeleteResult::Deleted) = (&tenant.curve, result) {
        if !op.invalidate && !op.drop_value {
            curve.remove(key);
        }
    }
    Counters::bump(if result == DeleteResult::Deleted { &c.delete_hits } else { &c.delete_misses });
    Ok(result)
}

/// Deletes `key` outright (text `delete`, a store that failed): true if an item went, and
/// then the key leaves the tenant's curve too.
pub(crate) fn delete_key(cx: &Context<'_>, key: &[u8]) -> Result<bool, OpError> {
    let (_, tenant) = cx.tenant(key);
    let deleted = tenant.writer.delete(key)?;
    if let (Some(curve), true) = (&tenant.curve, deleted) {
        curve.remove(key);
    }
    Ok(deleted)
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

/// `delete` that leaves a lease record: a hold-off of `hold` seconds (an empty hidden item,
/// which `add` refuses to overwrite), else with `--stale-ttl` the value kept hidden and stale.
/// Either way the key gets a new CAS, so outstanding tokens are void. True if a value was
/// deleted (a lease record does not count).
pub fn delete_leaving_lease(cx: &Context<'_>, key: &[u8], hold: u32) -> Result<bool, OpError> {
    let writer = cx.writer(key);
    let now = writer.clock();
    let stale_until = now.saturating_add(cx.shared.settings.stale_ttl);
    let hold_marks = |binary_key| Marks { hidden: true, binary_key, ..Marks::default() };
    // Keeping the value stale needs it read.
    let result = writer.update(key, &[], hold == 0, |current| {
        let existed = current.is_some_and(|c| !c.info.marks.hidden);
        match current {
            _ if hold > 0 => {
                let binary = current.is_some_and(|c| c.info.marks.binary_key);
                (Change::Store(placeholder(now.saturating_add(hold), hold_marks(binary))), existed)
            }
            Some(cur) if existed && cx.shared.settings.stale_ttl > 0 => {
                let e = cur.info.expiry;
                let expiry = if e != 0 && e < stale_until { e } else { stale_until };
                (Change::Store(stale_copy(cur.info, Some(expiry), true)), true)
            }
            Some(_) => (Change::Remove, existed),
            None => (Change::Keep, false),
        }
    });
    let existed = result.map(|(existed, _)| existed)?;
    // What the delete leaves (a hold-off, a hidden stale value) is no item to readers.
    if let (Some(curve), true) = (&cx.tenant(key).1.curve, existed) {
        curve.remove(key);
    }
    Ok(existed)
}

/// Flushes, now or after `delay` seconds, unless `-F` disabled it (then false).
pub fn flush_all(cx: &Context<'_>, delay: Option<i64>) -> bool {
    if !cx.shared.settings.enable_flush {
        return false;
    }
    Counters::bump(&cx.counters.cmd_flush);
    // memcached's delayed flush takes effect a second early (its deadline is
    // `realtime(delay) - 1`): `flush_all 1` is immediate.
    let delay = delay.map_or(0, |d| if d > 0 { d - 1 } else { d });
    // A connection bound to a tenant flushes that tenant's items only.
    let flush = |t: &crate::tenants::Tenant| {
        t.writer.flush(delay);
        if let Some(curve) = &t.curve {
            // When the region's flush takes effect: now, or at the delayed deadline.
            let now = t.writer.clock();
            let at = shoal_region::absolute_expiry(delay, now).filter(|&at| at != 0).unwrap_or(now);
            curve.flush(at, now);
        }
    };
    match cx.bound {
        Some(t) => flush(cx.shared.tenants.get(t)),
        None => cx.shared.tenants.all().iter().for_each(flush),
    }
    true
}
