//! A near cache's requests (`shoal server --upstream`; docs/design/near-cache.md): what the
//! plain part (`crate::upstream`) is asked, on the request path.
//!
//! ```text
//!  get/gets miss (text::get_one) ──► fetch_miss ──► answered from upstream, kept per policy
//!  get/gets of several keys ───────► prefetch: the keys not held fetched in one exchange
//!        (kept per policy) and noted for this request, whose misses fetch_miss then answers
//!  mg whose key is absent ─────────► fetched and kept first, then mg runs as usual
//!        (a key lease-read here lately and absent upstream since is not fetched by any of
//!         the three: a miss, and the lease-get that follows is the fill's one pool request)
//!  lease-get not held here ────────► forwarded; its answer relayed; the key noted lease-read
//!        and absent or not (a value answered is not kept, for want of its TTL: the next miss
//!        fetches it); deletes note it absent, writes, lease-sets and fetches present
//!  set add replace append prepend cas incr decr touch gat gats delete lease-set
//!        ──► local copy dropped, forwarded, answer relayed, local copy dropped again
//!            (lease-set STORED: kept instead, unless its key changed since the lease-get)
//!  ms md ma ──► refused (CLIENT_ERROR): a near cache forwards the text commands only
//!  --invalidation-listen: delete / md there ──► invalidate: the local copy dropped (epoch
//!        bumped), nothing forwarded (upstream/listen.rs; the invalidator's and routers' path)
//! ```

use super::ops::delete_key;
use super::{reply, Context, Flow};
use crate::counters::Counters;
use crate::upstream::{Fetched, UpError, Upstream, FETCH_BATCH};
use shoal_proto::answer::{blocks, LeaseHeader, Shape, ValueHeader};
use shoal_proto::{
    encode_request, encode_retrieval, Body, Get, MetaCmd, Op, Request, Store, StoreCmd, KEY_MAX,
};
use shoal_region::{Change, ItemInfo, Lookup, Marks, NewItem, Value, ValueSink};
use std::cell::RefCell;
use std::collections::HashMap;

/// Handles a request that a near cache does not execute on its own region alone: `None`
/// means execute it as usual (always, without `--upstream`).
pub fn intercept(cx: &mut Context<'_>, request: &Request<'_>, out: &mut Vec<u8>) -> Option<Flow> {
    let up = cx.shared.upstream.as_deref()?;
    PREFETCHED.with(|p| {
        let mut p = p.borrow_mut();
        if !p.is_empty() {
            *p = HashMap::new(); // its memory freed too: a large multiget's is not kept
        }
    });
    match request {
        Request::Get(get) if get.touch.is_none() && get.count > 1 => {
            prefetch(cx, up, get);
            return None;
        }
        Request::Store(s) if matches!(s.cmd, StoreCmd::LeaseSet(_)) => lease_set(cx, up, s, out),
        Request::Store(s) => {
            let (op, extra) = s.cmd.op();
            let body = Body::Store { flags: s.flags, data: s.data, extra };
            write_through(cx, up, op, s.key, s.exptime, &body, s.noreply, out);
        }
        Request::Delete { key, hold, noreply } => delete(cx, up, key, *hold, *noreply, out),
        Request::Arith { incr, key, delta, noreply } => {
            let op = if *incr { Op::Incr } else { Op::Decr };
            write_through(cx, up, op, key, 0, &Body::<&[u8]>::Arith { delta: *delta }, *noreply, out);
        }
        Request::Touch { key, exptime, noreply } => {
            write_through(cx, up, Op::Touch, key, *exptime, &Body::<&[u8]>::Touch, *noreply, out)
        }
        Request::LeaseGet { key, stale } => lease_get(cx, up, key, *stale, out),
        Request::Get(get) if get.touch.is_some() => gat(cx, up, get, out),
        Request::Meta(m) => match m.cmd {
            MetaCmd::Get => {
                let mut scratch = [0u8; KEY_MAX];
                let key = m.key(&mut scratch);
                if !held(cx, key) && !up.leaves_to_lease(key) {
                    fetch_and_keep(cx, up, key);
                }
                return None;
            }
            MetaCmd::Set | MetaCmd::Delete | MetaCmd::Arithmetic => reply(
                out,
                b"CLIENT_ERROR a near cache forwards set, delete, incr and the other text commands, not ms, md or ma",
            ),
            MetaCmd::Noop | MetaCmd::Debug => return None,
        },
        _ => return None,
    }
    Some(Flow::Continue)
}

/// A get's local miss of `key`, looked up upstream: true if it was found there, then
/// answered into `sink` (with the upstream's flags and CAS unique) and kept as the policy
/// says. Always false without `--upstream`.
pub fn fetch_miss(cx: &Context<'_>, key: &[u8], sink: &mut dyn ValueSink) -> bool {
    let Some(up) = cx.shared.upstream.as_deref() else { return false };
    let prefetched = PREFETCHED.with(|p| p.borrow().get(key).cloned());
    let found = match prefetched {
        Some(found) => found,
        None if up.leaves_to_lease(key) => return false,
        None => fetch_and_keep(cx, up, key),
    };
    let Some(found) = found else { return false };
    let info = ItemInfo {
        flags: found.flags,
        cas: found.cas,
        expiry: 0,
        value_len: found.value.len(),
        fetched: false,
        marks: Marks::default(),
        last_access: 0,
    };
    sink.append_to(&info).extend_from_slice(&found.value);
    true
}

thread_local! {
    /// What the multiget being executed on this worker fetched ahead (key, value or miss):
    /// filled by [`prefetch`], read by [`fetch_miss`], cleared by the next request.
    static PREFETCHED: RefCell<HashMap<Vec<u8>, Option<Fetched>>> = RefCell::new(HashMap::new());
}

/// A multiget's keys not held here, fetched in one exchange per [`FETCH_BATCH`] keys and kept
/// per the policy before the get runs, so that its misses cost one round trip, not one each.
/// An exchange that fails makes its keys misses (not tried again one by one).
fn prefetch(cx: &Context<'_>, up: &Upstream, get: &Get<'_>) {
    let mut missing: Vec<&[u8]> =
        get.keys.clone().filter(|key| !held(cx, key) && !up.leaves_to_lease(key)).collect();
    missing.sort_unstable();
    missing.dedup();
    if missing.len() < 2 {
        return; // a single miss is fetched as usual
    }
    let mut fetched = HashMap::with_capacity(missing.len());
    for keys in missing.chunks(FETCH_BATCH) {
        let epochs: Vec<u64> = keys.iter().map(|key| up.epoch(key)).collect();
        let found = up.fetch_many(keys).unwrap_or_else(|e| {
            note(cx, &e);
            vec![None; keys.len()]
        });
        for ((key, epoch), found) in keys.iter().zip(epochs).zip(found) {
            if let Some(f) = &found {
                keep_fetched(cx, up, key, epoch, f);
            }
            fetched.insert(key.to_vec(), found);
        }
    }
    PREFETCHED.with(|p| *p.borrow_mut() = fetched);
}

/// Fetches `key` from upstream and keeps it if the policy admits it and no write or delete
/// of the key came in meanwhile; the value found, if any (a failed fetch is a miss).
fn fetch_and_keep(cx: &Context<'_>, up: &Upstream, key: &[u8]) -> Option<Fetched> {
    let epoch = up.epoch(key);
    let found = match up.fetch(key) {
        Ok(found) => found?,
        Err(e) => {
            note(cx, &e);
            return None;
        }
    };
    keep_fetched(cx, up, key, epoch, &found);
    Some(found)
}

/// [`keep`] for a fetched value: its CAS unique, and no longer than the upstream keeps it.
fn keep_fetched(cx: &Context<'_>, up: &Upstream, key: &[u8], epoch: u64, found: &Fetched) {
    up.note_absent(key, false);
    let Some(ttl) = found.near_ttl(up.settings.near_ttl) else { return };
    let cas = (found.cas != 0).then_some(found.cas);
    keep(cx, up, key, epoch, found.flags, cas, ttl, &found.value);
}

/// Stores a value fetched while `key`'s epoch was `epoch`, for `ttl` seconds, if the policy
/// admits it and the epoch did not move (a write or delete of the key came through: the value
/// may be older).
#[allow(clippy::too_many_arguments)]
fn keep(
    cx: &Context<'_>,
    up: &Upstream,
    key: &[u8],
    epoch: u64,
    flags: u32,
    cas: Option<u64>,
    ttl: u32,
    value: &[u8],
) {
    if !up.may_keep() || !up.admits(key, || hot_keys(cx)) {
        return;
    }
    if up.epoch(key) != epoch {
        up.raced();
        return;
    }
    let writer = cx.writer(key);
    let expiry = writer.clock().saturating_add(ttl);
    let item = NewItem { value: Value::Given, flags, expiry: Some(expiry), cas, marks: Marks::default() };
    let _ = writer.update(key, value, false, |_| (Change::Store(item.clone()), ()));
    // A delete that came in while storing may have found nothing to delete: undo.
    if up.epoch(key) != epoch {
        up.raced();
        let _ = delete_key(cx, key);
    }
}

/// This server's hot keys, for `--admit hot`.
fn hot_keys(cx: &Context<'_>) -> Vec<Vec<u8>> {
    let hot = cx.shared.hotkeys.top(usize::MAX).into_iter();
    hot.filter(|h| h.rate >= crate::upstream::admit::HOT_MIN_RATE).map(|h| h.key).collect()
}

/// Whether `key` is held here (a live item), read without counting it or marking it read.
fn held(cx: &Context<'_>, key: &[u8]) -> bool {
    let mut value = Vec::new();
    matches!(cx.writer(key).read(key, &mut value, false), Ok(Lookup::Hit(info)) if !info.marks.hidden)
}

/// Drops the local copy of `key`, and any fetch of it in flight.
fn drop_local(cx: &Context<'_>, up: &Upstream, key: &[u8]) -> bool {
    up.invalidate(key);
    delete_key(cx, key).unwrap_or(false)
}

/// With `-v`, says why the upstream did not answer.
fn note(cx: &Context<'_>, e: &UpError) {
    if cx.shared.settings.verbose > 0 {
        eprintln!("near cache: {e}");
    }
}

/// Sends a request upstream, between two drops of the local copy of `key`; its answer, or
/// the error (counted, and said with `-v`).
fn forward(
    cx: &Context<'_>,
    up: &Upstream,
    key: &[u8],
    request: &[u8],
    shape: Shape,
) -> (bool, Result<Vec<u8>, UpError>) {
    let was_here = drop_local(cx, up, key);
    up.forwarded();
    let answer = up.exchange(request, shape);
    drop_local(cx, up, key);
    if let Err(e) = &answer {
        note(cx, e);
    }
    (was_here, answer)
}

/// A change forwarded, its one-line answer relayed (a failure is `SERVER_ERROR <why>`).
#[allow(clippy::too_many_arguments)]
fn write_through(
    cx: &Context<'_>,
    up: &Upstream,
    op: Op,
    key: &[u8],
    exptime: i64,
    body: &Body<&[u8]>,
    noreply: bool,
    out: &mut Vec<u8>,
) {
    let mut request = Vec::new();
    encode_request(op, key, exptime, body, &mut request);
    let (_, answer) = forward(cx, up, key, &request, Shape::Line);
    up.note_absent(key, false);
    if noreply {
        return;
    }
    match answer {
        Ok(line) if !line.starts_with(b"VALUE ") && !line.starts_with(b"END") => out.extend_from_slice(&line),
        Ok(line) => server_error(out, &UpError::BadAnswer(String::from_utf8_lossy(&line).trim_end().into())),
        Err(e) => server_error(out, &e),
    }
}

fn server_error(out: &mut Vec<u8>, e: &UpError) {
    // One line, whatever the upstream said.
    let text = e.to_string().replace(['\r', '\n'], " ");
    reply(out, format!("SERVER_ERROR {text}").as_bytes());
}

/// `delete`: forwarded; when the upstream cannot take it, answered by what the local delete
/// found, so an invalidator's or router's spool moves on (the near copy is gone, which is what
/// an invalidation asks of a near cache; the upstream gets its own). One that did not reach
/// the upstream is owed to it: sent before any later exchange, so that no fetch brings the
/// old value back here from a pool that has not had its own copy of the delete yet.
fn delete(cx: &Context<'_>, up: &Upstream, key: &[u8], hold: u32, noreply: bool, out: &mut Vec<u8>) {
    let c = cx.counters;
    let mut request = Vec::new();
    let hold = (hold > 0).then_some(hold);
    encode_request(Op::Delete, key, 0, &Body::<&[u8]>::Delete { hold }, &mut request);
    let (was_here, answer) = forward(cx, up, key, &request, Shape::Line);
    up.note_absent(key, true);
    if matches!(answer, Err(UpError::Unavailable(_))) {
        // Owed (on disk before the answer goes out), sent again before the next exchange; one
        // that cannot be owed is refused, and its sender sends it again.
        if let Err(why) = up.owe_delete(&request) {
            note(cx, &UpError::Unavailable(why.clone()));
            if !noreply {
                reply(out, format!("SERVER_ERROR {why}").as_bytes());
            }
            return;
        }
    }
    let line = match answer {
        Ok(line) if line == b"DELETED\r\n" || line == b"NOT_FOUND\r\n" => line,
        _ => (if was_here { &b"DELETED\r\n"[..] } else { b"NOT_FOUND\r\n" }).to_vec(),
    };
    Counters::bump(if line == b"DELETED\r\n" { &c.delete_hits } else { &c.delete_misses });
    if !noreply {
        out.extend_from_slice(&line);
    }
}

/// `gat`/`gats`: the expiry is the upstream's to change; forwarded, relayed, local copies
/// dropped. An upstream that cannot answer: misses.
fn gat(cx: &Context<'_>, up: &Upstream, get: &Get<'_>, out: &mut Vec<u8>) {
    let op = if get.cas { Op::Gats } else { Op::Gat };
    let mut request = Vec::new();
    encode_retrieval(op, get.touch.unwrap_or(0), get.keys.clone(), &mut request);
    get.keys.clone().for_each(|key| {
        drop_local(cx, up, key);
    });
    up.forwarded();
    let answer = up.exchange(&request, Shape::Values);
    get.keys.clone().for_each(|key| {
        drop_local(cx, up, key);
    });
    match answer {
        Ok(a) if all_values_of(&a, |k| get.keys.clone().any(|key| key == k)) => out.extend_from_slice(&a),
        Ok(_) => server_error(out, &UpError::BadAnswer("a gat answer naming keys not asked for".into())),
        Err(e) => {
            note(cx, &e);
            out.extend_from_slice(b"END\r\n");
        }
    }
}

/// Whether every block of a values answer is a `VALUE` or `LVALUE` of a key `asked` knows
/// (an error line passes: it is relayed as the upstream's answer).
fn all_values_of(answer: &[u8], asked: impl Fn(&[u8]) -> bool) -> bool {
    blocks(answer).all(|b| {
        let key =
            ValueHeader::parse(b.line).map(|h| h.key).or_else(|| LeaseHeader::parse(b.line).map(|h| h.key));
        key.is_some_and(&asked)
    })
}

/// `lease-get`: a value held here is answered here; otherwise the upstream's lease is taken
/// (its answer relayed: the value, the token, or a hot miss) and the key noted lease-read
/// (and absent upstream unless a value came), so that a get's miss of it is not fetched first
/// while it stays absent (one pool request per miss, not two). A value
/// the upstream answers is not kept: a `VALUE` line does not say its TTL, and a near copy must
/// not outlive the upstream's; the key's next miss fetches it with its TTL and keeps it.
fn lease_get(cx: &Context<'_>, up: &Upstream, key: &[u8], stale: bool, out: &mut Vec<u8>) {
    let c = cx.counters;
    Counters::bump(&c.cmd_get);
    cx.shared.hotkeys.record(key);
    let mut value = Vec::new();
    if let Ok(Lookup::Hit(info)) = cx.writer(key).read(key, &mut value, true) {
        if !info.marks.hidden && !info.marks.stale {
            Counters::bump(&c.get_hits);
            out.extend_from_slice(
                format!("VALUE {} {} {}\r\n", String::from_utf8_lossy(key), info.flags, value.len())
                    .as_bytes(),
            );
            out.extend_from_slice(&value);
            out.extend_from_slice(b"\r\nEND\r\n");
            return;
        }
    }
    Counters::bump(&c.get_misses);
    let mut request = Vec::new();
    encode_request(Op::LeaseGet, key, 0, &Body::<&[u8]>::LeaseGet { stale }, &mut request);
    up.lease_taken(key);
    up.forwarded();
    match up.exchange(&request, Shape::Values) {
        Ok(a) if all_values_of(&a, |k| k == key) => {
            if let Some(block) = blocks(&a).next() {
                up.note_lease_read(key, ValueHeader::parse(block.line).is_none());
            }
            out.extend_from_slice(&a);
        }
        Ok(_) => server_error(out, &UpError::BadAnswer("a lease-get answer for another key".into())),
        Err(e) => {
            note(cx, &e);
            server_error(out, &e);
        }
    }
}

/// `lease-set`: forwarded under the upstream's token; `STORED` is kept here too, unless a write
/// or delete of the key came through since its `lease-get` (or the policy turns it away).
fn lease_set(cx: &Context<'_>, up: &Upstream, s: &Store<'_>, out: &mut Vec<u8>) {
    let StoreCmd::LeaseSet(token) = s.cmd else { return };
    let mut request = Vec::new();
    let body = Body::Store { flags: s.flags, data: s.data, extra: Some(token) };
    encode_request(Op::LeaseSet, s.key, s.exptime, &body, &mut request);
    let epoch = up.epoch(s.key);
    up.forwarded();
    let answer = up.exchange(&request, Shape::Line);
    if matches!(&answer, Ok(line) if line == b"STORED\r\n") {
        up.note_absent(s.key, false);
    }
    match &answer {
        Ok(line) if line == b"STORED\r\n" && up.lease_unchanged(s.key) => {
            if let Some(ttl) = lease_set_ttl(s.exptime, up.settings.near_ttl) {
                keep(cx, up, s.key, epoch, s.flags, None, ttl, s.data)
            }
        }
        _ => {
            drop_local(cx, up, s.key);
        }
    }
    if s.noreply {
        return;
    }
    match answer {
        Ok(line) if !line.starts_with(b"VALUE ") && !line.starts_with(b"END") => out.extend_from_slice(&line),
        Ok(line) => server_error(out, &UpError::BadAnswer(String::from_utf8_lossy(&line).trim_end().into())),
        Err(e) => {
            note(cx, &e);
            server_error(out, &e)
        }
    }
}

/// How long a value stored by `lease-set` with `exptime` may be kept here: `--near-ttl`, or
/// less if the upstream keeps it less (a relative exptime under it); `None` if it expires at
/// once (negative). An absolute exptime (past 30 days) is taken as no shorter than the TTL.
fn lease_set_ttl(exptime: i64, near_ttl: u32) -> Option<u32> {
    match exptime {
        e if e < 0 => None,
        e if (1..i64::from(near_ttl)).contains(&e) => Some(e as u32),
        _ => Some(near_ttl),
    }
}

/// Drops `key`'s near copy for an invalidation (the listener of `--invalidation-listen`): the
/// epoch bumped so that no fetch in flight keeps an older value, the key noted absent
/// upstream, nothing forwarded. True if a copy was here.
pub fn invalidate(cx: &Context<'_>, key: &[u8]) -> bool {
    let Some(up) = cx.shared.upstream.as_deref() else { return false };
    let was_here = drop_local(cx, up, key);
    up.note_absent(key, true);
    was_here
}

/// Starts the invalidation listener of `--invalidation-listen` (`None` without it); its
/// thread ends, with its connections', when the server stops.
pub fn spawn_invalidations(
    shared: &std::sync::Arc<crate::state::Shared>,
) -> Result<Option<crate::upstream::listen::Listening>, String> {
    use crate::upstream::listen;
    let Some(up) = shared.upstream.as_deref() else { return Ok(None) };
    let Some(address) = &up.settings.invalidation_listen else { return Ok(None) };
    let listener = listen::bind(address)?;
    let counters = up.invalidations.clone();
    // The row of datagrams' requests: its counters are atomic, shared with the UDP thread.
    let row = shared.settings.threads;
    let drop: listen::Drop = {
        let shared = shared.clone();
        std::sync::Arc::new(move |key: &[u8]| invalidate(&Context::new(&shared, row), key))
    };
    let stopping: std::sync::Arc<dyn Fn() -> bool + Send + Sync> = {
        let shared = std::sync::Arc::downgrade(shared);
        std::sync::Arc::new(move || shared.upgrade().map_or(true, |s| s.stopping()))
    };
    listen::spawn(listener, drop, counters, stopping).map(Some)
}
