//! Hot keys spread over replicas in a pool route (issue #28; the rule is in
//! docs/design/hotkeys.md): a pool with `"hot_replicas"` learns its hot set by polling its
//! servers' `stats hotkeys`, reads a hot key from one of its R replicas, and sends every change
//! of it to the owner and then a delete to each copy, through `Ctx::send`, so a copy that is
//! down gets the delete from its spool like any other missed change.
//!
//! ```text
//!  pool { …, "hot_replicas": R | "all", "hot_refresh_secs": 5, "hot_ttl_secs": 10,
//!         "hot_keys": 1024 }
//!  poller thread (one per pool route, started by its first request, gone with the config)
//!        ──► `stats hotkeys` of each server every refresh ──► HotSet (union, capped at
//!            hot_set_size: c·n·ln n of the servers on, at most "hot_keys"; a malformed or
//!            huge answer keeps that server's last good list)
//!  get/gets of a hot key, and an mg a copy answers alike (shoal_route::hot::meta_get_spreads:
//!  flags v c f s k O q u; any other goes to the owner)
//!                         ──► round-robin replica ── the owner: the pool's ordinary read
//!                         └─ a copy ── hit ──► answer (its CAS unique is the owner's)
//!                                  └─ else the owner's answer, asked with `gets` (an mg:
//!                                     with `v f c` added, taken out of the answer); a hit is
//!                                     added to the copy with the TTL and the owner's unique
//!                                     (`ms … E<cas> ME`, in the background); a `get` is
//!                                     answered without the unique; during a Proteus
//!                                     transition a moved key's miss asks its new owner
//!                                     (a hit copied), then takes the pool's own read
//!                                     (migration included), not copied
//!                                     (`shoal_route::hot::may_copy`)
//!  a change of a key hot now (or until the TTL ago), `cas` included ──► owner, then
//!        `delete` on every copy (awaited, before the client hears back; spooled for a copy
//!        that is down) — a Proteus pool's copies under every active count this router used
//!        within the TTL included (`shoal_route::hot::copies_to_delete`; the counts, and the
//!        hot set, are kept per pool across configuration reloads, which is how the active
//!        count changes)
//!  a set / add / replace / cas of a key hot now answered STORED ──► then the owner read
//!        back with `gets` and its item added to every copy (refill_copies, awaited)
//! ```
//!
//! The replicas are `shoal_route::hot`'s: the owner and its successors among the servers on,
//! the same as every pool client with the same pool, hashing and R picks.

use super::{background, Child, Route};
use crate::ctx::Ctx;
use crate::provisioned::Provisioned;
use crate::request::{Op, Reply, Request};
use serde_json::{Map, Value};
use shoal_proto::answer::{blocks, ValueHeader};
use shoal_route::hot::{meta_get_spreads, OwnerMetaGet};
use shoal_route::{ActiveHistory, HotSet, Placement};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::{Duration, Instant};

/// A pool's hot-key settings.
#[derive(Clone, Debug, PartialEq)]
pub struct HotOptions {
    /// Replicas per hot key, the owner included (0: every server on).
    pub replicas: usize,
    /// How often the servers are polled.
    pub refresh: Duration,
    /// Copies' expiry in seconds, and how long a key that left the hot set keeps its changes
    /// deleting copies.
    pub ttl: u32,
    /// The most hot keys kept; under it, `shoal_route::hot::hot_set_size` of the servers on.
    pub cap: usize,
}

/// The pool fields this module reads.
pub const FIELDS: [&str; 4] = ["hot_replicas", "hot_refresh_secs", "hot_ttl_secs", "hot_keys"];

/// A pool's hot-key settings from its fields (`None`: no `hot_replicas`); an error names the
/// field and what it takes.
pub fn options(fields: &Map<String, Value>) -> Result<Option<HotOptions>, (&'static str, String)> {
    let Some(replicas) = fields.get("hot_replicas") else {
        if let Some(field) = FIELDS[1..].iter().find(|f| fields.contains_key(**f)) {
            return Err((field, "needs \"hot_replicas\" in the same pool".into()));
        }
        return Ok(None);
    };
    let replicas = match replicas {
        Value::String(all) if all == "all" => 0,
        v => match v.as_u64() {
            Some(r) if r >= 1 => r as usize,
            _ => return Err(("hot_replicas", "a count of at least 1, or \"all\"".into())),
        },
    };
    let count = |field: &'static str, default: u64, max: u64| match fields.get(field) {
        None => Ok(default),
        Some(v) => v.as_u64().filter(|&n| (1..=max).contains(&n)).ok_or((field, format!("1 to {max}"))),
    };
    Ok(Some(HotOptions {
        replicas,
        refresh: Duration::from_secs(count("hot_refresh_secs", 5, 3600)?),
        ttl: count("hot_ttl_secs", 10, 86_400)? as u32,
        cap: count("hot_keys", 1024, 1 << 20)? as usize,
    }))
}

/// What one request does in a pool with hot keys.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Not hot (or a read the owner must answer): the pool's ordinary route.
    Owner,
    /// A get, gets or spread `mg` of a hot key, from the copy on `copy`; `owner` answers when
    /// the copy misses, and its hit is copied.
    ReadCopy { copy: usize, owner: usize },
    /// A get, gets or spread `mg` of a hot key that a Proteus transition in progress moves
    /// (`shoal_route::hot::may_copy`), from the copy on `copy`; when it misses, its new owner
    /// `owner` asked with `gets` (a hit is copied: that server is the owner from now on), and
    /// when that misses too, the pool's ordinary read (the transition's, which may ask the old
    /// owner), with nothing copied: the old owner's CAS unique is not the owner's.
    ReadCopyMoved { copy: usize, owner: usize },
    /// A change of a hot key: the ordinary route, then a delete on each of these servers (its
    /// copies, and those of the Proteus active sets used within the TTL), then, for a whole
    /// value stored (`set`, `add`, `replace`, `cas`) of a key hot now, the copies refilled.
    WriteAll(Vec<usize>, Option<Refill>),
}

/// The copies a write of a hot key refills from its owner ([`refill_copies`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Refill {
    /// The owner, read back with `gets`.
    pub owner: usize,
    /// The copies of the replica set now.
    pub copies: Vec<usize>,
}

/// How often at most a pool route notes the active count it uses (so a hot request takes the
/// history's lock once a second, not each time); the window it keeps is this much longer.
const NOTE_EVERY_MS: u64 = 1000;

/// A pool's hot set and (Proteus) active counts used lately, by its servers' addresses: a
/// configuration reload (a new active count) makes a new [`HotPool`], which must still know
/// the keys hot (a write before its first poll must delete their copies) and delete the copies
/// its predecessors placed.
type Shared = (Arc<Mutex<ActiveHistory>>, Arc<RwLock<HotSet>>);
type Histories = Mutex<Vec<(Vec<String>, Shared)>>;

static HISTORIES: OnceLock<Histories> = OnceLock::new();

/// The most pools whose histories are kept (the oldest goes first).
const MAX_HISTORIES: usize = 256;

/// The active-count history and hot set of the pool of `addresses`, shared by every
/// configuration's route.
fn shared_by(addresses: &[String]) -> Shared {
    let mut all = HISTORIES.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, shared)) = all.iter().find(|(a, _)| a == addresses) {
        return shared.clone();
    }
    if all.len() >= MAX_HISTORIES {
        all.remove(0);
    }
    let shared = (Arc::new(Mutex::new(ActiveHistory::new())), Arc::new(RwLock::new(HotSet::new())));
    all.push((addresses.to_vec(), shared.clone()));
    shared
}

/// A pool route's hot-key numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HotCounts {
    /// Keys in the hot set now.
    pub hot_keys: u64,
    /// Gets a copy answered.
    pub copy_hits: u64,
    /// Copies made after a copy missed, or refilled after a write.
    pub copies_made: u64,
}

/// A pool route's hot keys.
#[derive(Debug)]
pub struct HotPool {
    options: HotOptions,
    /// The pool's servers, in its order (polled).
    addresses: Vec<String>,
    /// The hot set (shared across reloads, by the servers' addresses).
    set: Arc<RwLock<HotSet>>,
    turn: AtomicU64,
    poller: OnceLock<()>,
    /// Proteus: the active counts used within the TTL (shared across reloads), and the last
    /// one noted, as `active << 32 | milliseconds after `born``.
    history: Arc<Mutex<ActiveHistory>>,
    noted: AtomicU64,
    born: Instant,
    /// Gets answered by a copy.
    pub copy_hits: AtomicU64,
    /// Copies made after a copy missed, or refilled after a write.
    pub copies_made: AtomicU64,
}

impl HotPool {
    /// The hot keys of a pool over `addresses`.
    pub fn new(options: HotOptions, addresses: Vec<String>) -> HotPool {
        use std::hash::BuildHasher;
        let turn = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
        let (history, set) = shared_by(&addresses);
        HotPool {
            history,
            set,
            noted: AtomicU64::new(u64::MAX),
            born: Instant::now(),
            options,
            addresses,
            turn: AtomicU64::new(turn),
            poller: OnceLock::new(),
            copy_hits: AtomicU64::new(0),
            copies_made: AtomicU64::new(0),
        }
    }

    /// Whether `request` takes the hot path (so it cannot be batched with its owner's keys).
    pub fn spreads(self: &Arc<Self>, request: &Request) -> bool {
        self.start_polling();
        let set = self.set.read().expect("hot set lock");
        if set.is_empty() && request.op.is_read() {
            return false;
        }
        match request.op {
            // A copy carries its owner's CAS unique: `gets` spreads as `get` does.
            Op::Get | Op::Gets => set.is_hot(request.routed_key()),
            // A meta get spreads when a copy answers its flags as the owner would.
            Op::MetaGet => {
                set.is_hot(request.routed_key()) && meta_get_spreads(flag_tokens(request.meta_flags()))
            }
            op if op.is_read() || op == Op::FlushAll => false,
            _ => set.writes_spread(request.routed_key(), Instant::now()),
        }
    }

    /// What `request` does in a pool placed by `placement`, power-proportional when
    /// `provisioned` (its active servers, and the transition in progress).
    pub fn plan(
        self: &Arc<Self>,
        placement: &Placement,
        provisioned: Option<&Provisioned>,
        request: &Request,
    ) -> Plan {
        let active = provisioned.map(|p| p.active);
        if !self.spreads(request) {
            return Plan::Owner;
        }
        let key = request.routed_key();
        let Ok(set) = placement.replicas(active, key, self.options.replicas) else {
            return Plan::Owner;
        };
        let ttl = self.window();
        if let Some(active) = active {
            self.note_active(active);
        }
        let before =
            provisioned.and_then(|p| p.transition.as_ref().filter(|t| t.in_progress())).map(|t| t.from);
        if !matches!(request.op, Op::Get | Op::Gets | Op::MetaGet) {
            // The refill reads the owner now itself (in a transition, a moved key's new owner,
            // which took the write): its unique is the owner's.
            let refills = matches!(request.op, Op::Set | Op::Add | Op::Replace | Op::Cas)
                && set.count > 1
                && self.set.read().expect("hot set lock").is_hot(key);
            let refill = refills.then(|| Refill { owner: set.owner, copies: set.copies().collect() });
            let history = self.history.lock().unwrap_or_else(|p| p.into_inner());
            let former = history.recent(Instant::now(), ttl);
            return match shoal_route::hot::copies_to_delete(
                placement,
                active,
                former,
                key,
                self.options.replicas,
            ) {
                Ok(copies) => Plan::WriteAll(copies, refill),
                Err(_) => Plan::WriteAll(set.copies().collect(), refill),
            };
        }
        let copy = set.pick(self.turn.fetch_add(1, Ordering::Relaxed));
        if copy == set.owner {
            Plan::Owner
        } else if shoal_route::hot::may_copy(placement, active, before, key).unwrap_or(false) {
            Plan::ReadCopy { copy, owner: set.owner }
        } else {
            Plan::ReadCopyMoved { copy, owner: set.owner }
        }
    }

    /// How long a copy placed under an active count may outlive its last use: the TTL, and
    /// the granularity of [`HotPool::note_active`].
    fn window(&self) -> Duration {
        Duration::from_secs(self.options.ttl.into()) + Duration::from_millis(NOTE_EVERY_MS)
    }

    /// Notes that copies may be placed with `active` servers on now (at most once a second
    /// per count, lock-free in between).
    fn note_active(&self, active: usize) {
        let ms = self.born.elapsed().as_millis() as u64 & 0xffff_ffff;
        let noted = self.noted.load(Ordering::Relaxed);
        let fresh = noted >> 32 == active as u64
            && ms.wrapping_sub(noted & 0xffff_ffff) & 0xffff_ffff < NOTE_EVERY_MS;
        if fresh {
            return;
        }
        self.noted.store((active as u64) << 32 | ms, Ordering::Relaxed);
        let ttl = self.window();
        self.history.lock().unwrap_or_else(|p| p.into_inner()).used(active, Instant::now(), ttl);
    }

    /// The servers on: a Proteus pool's active count its requests last used, else (and
    /// before its first request) every server. The hot set keeps
    /// `shoal_route::hot::hot_set_size` of it, as pool clients do.
    fn servers_on(&self) -> usize {
        match (self.noted.load(Ordering::Relaxed) >> 32) as usize {
            active @ 1.. if active <= self.addresses.len() => active,
            _ => self.addresses.len(),
        }
    }

    /// `stats` line for this pool (after its name): replicas per hot key (`all`), hot keys
    /// known, gets a copy answered, copies made.
    pub fn stats(&self) -> String {
        let counts = self.counts();
        let replicas = match self.options.replicas {
            0 => "all".to_string(),
            r => r.to_string(),
        };
        format!(
            "replicas={replicas} hot_keys={} copy_hits={} copies_made={}",
            counts.hot_keys, counts.copy_hits, counts.copies_made
        )
    }

    /// The numbers `stats` and `/metrics` show.
    pub fn counts(&self) -> HotCounts {
        HotCounts {
            hot_keys: self.set.read().expect("hot set lock").len() as u64,
            copy_hits: self.copy_hits.load(Ordering::Relaxed),
            copies_made: self.copies_made.load(Ordering::Relaxed),
        }
    }

    /// Starts the poller thread once; it stops when the pool (its configuration) is dropped.
    fn start_polling(self: &Arc<Self>) {
        self.poller.get_or_init(|| {
            let pool = Arc::downgrade(self);
            let _ = std::thread::Builder::new().name("hot-keys".into()).spawn(move || poll(pool));
        });
    }
}

/// The poller: every refresh, each server's hot keys, then the new hot set.
fn poll(pool: Weak<HotPool>) {
    let timeout = Some(Duration::from_millis(500));
    let options = shoal_client::Options { connect_timeout: timeout, io_timeout: timeout, local: false };
    let servers = match pool.upgrade() {
        Some(p) => p.addresses.len(),
        None => return,
    };
    let mut clients: Vec<Option<shoal_client::Client>> = (0..servers).map(|_| None).collect();
    let mut answers: Vec<Vec<(Vec<u8>, f64)>> = vec![Vec::new(); servers];
    loop {
        let Some(pool) = pool.upgrade() else { return };
        for (i, address) in pool.addresses.iter().enumerate() {
            let client = match &mut clients[i] {
                Some(c) => c,
                None => match shoal_client::Client::connect(address, options.clone()) {
                    Ok(c) => clients[i].insert(c),
                    Err(_) => continue,
                },
            };
            match client.hot_keys(shoal_client::pool::HOT_ANSWER_LIMIT) {
                Ok(keys) => answers[i] = keys.into_iter().map(|h| (h.key, h.rate)).collect(),
                // A server that fails or answers garbage keeps its last good list.
                Err(e) => {
                    if e.is_connection() {
                        clients[i] = None;
                    }
                    eprintln!("shoal router: hot keys of {address}: {e} (keeping its last good list)");
                }
            }
        }
        let linger = Duration::from_secs(pool.options.ttl.into());
        let cap = shoal_route::hot::hot_set_size(pool.servers_on(), pool.options.cap);
        pool.set.write().expect("hot set lock").learn(
            answers.iter().map(Vec::as_slice),
            cap,
            Instant::now(),
            linger,
        );
        let refresh = pool.options.refresh;
        drop(pool);
        std::thread::sleep(refresh);
    }
}

/// A get, gets or spread `mg` of a hot key from its copy on `copy`; on a miss (or error)
/// there, the owner's answer, asked with `gets` (an `mg`: [`read_owner_meta`]), a hit of which
/// is copied to `copy` with the owner's CAS unique ([`copy_owners_item`]).
pub async fn read_copy(hot: &HotPool, copy: &Child, owner: &Child, request: &Request, ctx: &Ctx) -> Reply {
    let first = copy.execute(request, ctx).await;
    if first.is_hit() {
        hot.copy_hits.fetch_add(1, Ordering::Relaxed);
        return first;
    }
    if request.op == Op::MetaGet {
        return read_owner_meta(hot, copy, owner, request, ctx).await;
    }
    let mut gets = request.as_get();
    gets.op = Op::Gets;
    let found = owner.execute(&gets, ctx).await;
    let Some(item) = OwnersItem::of(&found) else { return found };
    copy_owners_item(hot, copy, owner, request, (item.flags, item.cas, &item.data), ctx);
    match request.op {
        Op::Gets => found,
        _ => Reply::Answer(item.get_answer()),
    }
}

/// Adds the owner's item (`flags`, CAS unique, `data`), read after `copy` missed, to `copy`
/// with the TTL (`ms … E<cas> ME`: a write meanwhile wins), in the background. Only a server
/// that owns the key (a destination, not a route that may answer from elsewhere) gives a copy
/// its unique.
fn copy_owners_item(
    hot: &HotPool,
    copy: &Child,
    owner: &Child,
    request: &Request,
    item: (u32, u64, &[u8]),
    ctx: &Ctx,
) {
    if matches!(**owner, Route::Destination { .. }) {
        let (flags, cas, data) = item;
        hot.copies_made.fetch_add(1, Ordering::Relaxed);
        let ttl = i64::from(hot.options.ttl);
        let flags = shoal_route::hot::copy_flags(ttl, flags, cas).into_bytes();
        background(copy.clone(), request.as_meta_set(flags, data.to_vec(), ttl), ctx);
    }
}

/// A spread `mg` that its copy on `copy` did not answer: the owner asked with the flags of its
/// item added (`shoal_route::hot::OwnerMetaGet`), a hit copied as a get's is, and the client
/// answered as its own `mg` would have been (the added flags taken out again).
async fn read_owner_meta(hot: &HotPool, copy: &Child, owner: &Child, request: &Request, ctx: &Ctx) -> Reply {
    let ask = OwnerMetaGet::new(flag_tokens(request.meta_flags()));
    let mut added = Vec::new();
    ask.append_flags(&mut added);
    // The client's `q` is the router's to apply to the answer, as before this read.
    let mut asked = request.with_meta_flags_added(&added);
    asked.quiet = false;
    let found = owner.execute(&asked, ctx).await;
    let Reply::Answer(answer) = &found else { return found };
    let Some(end) = answer.windows(2).position(|w| w == b"\r\n") else { return found };
    let (line, rest) = (&answer[..end], &answer[end + 2..]);
    let read = ask.answer(line);
    if let (Some((flags, cas)), Some(data)) = (read.copy, rest.strip_suffix(b"\r\n")) {
        copy_owners_item(hot, copy, owner, request, (flags, cas, data), ctx);
    }
    let mut answer = read.line;
    answer.extend_from_slice(b"\r\n");
    if read.shows_value {
        answer.extend_from_slice(rest);
    }
    Reply::Answer(answer)
}

/// Meta flags' tokens.
fn flag_tokens(flags: &[u8]) -> impl Iterator<Item = &[u8]> {
    flags.split(|&b| b == b' ').filter(|token| !token.is_empty())
}

/// A get or gets of a hot key a transition moves ([`Plan::ReadCopyMoved`]): as [`read_copy`]
/// from the copy on `copy` and the new owner `owner` (whose own hit is copied), and when
/// neither has it, `ordinary` (the pool's own read, a moved key's migration included), with
/// nothing copied.
pub async fn read_copy_moved(
    hot: &HotPool,
    copy: &Child,
    owner: &Child,
    ordinary: impl std::future::Future<Output = Reply>,
    request: &Request,
    ctx: &Ctx,
) -> Reply {
    let first = read_copy(hot, copy, owner, request, ctx).await;
    if first.is_hit() {
        return first;
    }
    ordinary.await
}

/// The item of an owner's answer to `gets`: one `VALUE` block, whole.
struct OwnersItem {
    line_key: Vec<u8>,
    flags: u32,
    cas: u64,
    data: Vec<u8>,
}

impl OwnersItem {
    fn of(reply: &Reply) -> Option<OwnersItem> {
        let Reply::Answer(answer) = reply else { return None };
        let block = blocks(answer).next()?;
        let h = ValueHeader::parse(block.line)?;
        Some(OwnersItem { line_key: h.key.to_vec(), flags: h.flags, cas: h.cas, data: block.data.to_vec() })
    }

    /// The answer a `get` would have had: the block without the unique.
    fn get_answer(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.line_key.len() + self.data.len() + 32);
        out.extend_from_slice(b"VALUE ");
        out.extend_from_slice(&self.line_key);
        out.extend_from_slice(format!(" {} {}\r\n", self.flags, self.data.len()).as_bytes());
        out.extend_from_slice(&self.data);
        out.extend_from_slice(b"\r\n");
        out
    }
}

/// After a write of a hot key stored a whole value (`reply` is `STORED`) and its copies'
/// deletes were awaited: the owner's item read back with `gets` and added to each copy of
/// `refill` with the owner's unique (`ms … E<cas> ME`), kept the TTL or the write's expiry if
/// sooner (`shoal_route::hot::refill_ttl`), awaited before the client hears back. Made as a
/// reader's refill after a copy's miss is, so under the same rule, but one owner's read per
/// write instead of one per copy (docs/design/hotkeys.md).
pub async fn refill_copies(
    hot: &HotPool,
    refill: Refill,
    children: &[Child],
    request: &Request,
    reply: &Reply,
    ctx: &Ctx,
) {
    let stored = matches!(reply, Reply::Answer(answer) if answer.starts_with(b"STORED\r\n"));
    let owner = &children[refill.owner];
    let Some(ttl) = shoal_route::hot::refill_ttl(request.exptime, hot.options.ttl) else { return };
    // Only a server that owns the key (not a route that may answer from elsewhere) gives a
    // copy its unique.
    if !stored || !matches!(**owner, Route::Destination { .. }) {
        return;
    }
    let mut gets = request.as_get();
    gets.op = Op::Gets;
    let found = owner.execute(&gets, ctx).await;
    let Some(item) = OwnersItem::of(&found) else { return };
    let flags = shoal_route::hot::copy_flags(ttl, item.flags, item.cas).into_bytes();
    let copy = gets.as_meta_set(flags, item.data, ttl);
    hot.copies_made.fetch_add(refill.copies.len() as u64, Ordering::Relaxed);
    futures::future::join_all(refill.copies.iter().map(|&c| children[c].execute(&copy, ctx))).await;
}

/// After a change of a hot key: a delete on each copy, awaited (a copy that is down has it
/// spooled by `Ctx::send`, and reads nothing until its spool drains).
pub async fn delete_copies(copies: &[usize], children: &[Child], request: &Request, ctx: &Ctx) {
    let delete = Request::delete(&request.key, request.prefix_len);
    futures::future::join_all(copies.iter().map(|&c| children[c].execute(&delete, ctx))).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(json: &str) -> Map<String, Value> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn an_owners_gets_answer_gives_the_copy_and_the_get_answer() {
        let reply = Reply::Answer(b"VALUE k 3 2 12345\r\nhi\r\n".to_vec());
        let item = OwnersItem::of(&reply).unwrap();
        assert_eq!((item.flags, item.cas, &item.data[..]), (3, 12345, &b"hi"[..]));
        assert_eq!(item.get_answer(), b"VALUE k 3 2\r\nhi\r\n");
        assert!(OwnersItem::of(&Reply::Answer(Vec::new())).is_none());
        assert!(OwnersItem::of(&Reply::Answer(b"SERVER_ERROR busy\r\n".to_vec())).is_none());
    }

    #[test]
    fn in_a_transition_a_moved_keys_read_is_not_copied_and_a_kept_owners_is() {
        use crate::provisioned::Transition;
        use std::time::SystemTime;
        let addresses: Vec<String> = (1..=3).map(|port| format!("127.0.0.1:{port}")).collect();
        let servers = addresses.iter().map(|a| shoal_route::Server::parse(a).unwrap()).collect();
        let placement = Placement::new(shoal_route::Hashing::Proteus, servers).unwrap();
        let ring = placement.proteus().unwrap();
        let find = |moves: bool| {
            (0..)
                .map(|i| format!("judged:{i}").into_bytes())
                .find(|k| (ring.owner_with(2, k).unwrap() != ring.owner_with(3, k).unwrap()) == moves)
                .unwrap()
        };
        let (kept, moved) = (find(false), find(true));
        let options = HotOptions { replicas: 0, refresh: Duration::from_secs(3600), ttl: 10, cap: 16 };
        let hot = Arc::new(HotPool::new(options, addresses.clone()));
        // No poller: its first poll, failing everywhere, would replace the set learned here by
        // an empty one.
        hot.poller.set(()).expect("not started");
        let answer = vec![(kept.clone(), 100.0), (moved.clone(), 90.0)];
        hot.set.write().unwrap().learn([answer.as_slice()], 16, Instant::now(), Duration::from_secs(10));
        let pool = |transition| Provisioned {
            pool: "p".into(),
            active: 3,
            transition,
            addresses: addresses.clone(),
            migrated: AtomicU64::new(0),
            digest_skips: AtomicU64::new(0),
        };
        let moving = pool(Some(Transition::new(2, SystemTime::now() + Duration::from_secs(3600))));
        let done = pool(None);
        for (key, moves) in [(&kept, false), (&moved, true)] {
            let get = Request::delete(key, 0).as_get();
            // Three replicas, round-robin: over six reads, four ask a copy.
            let plans: Vec<Plan> = (0..6).map(|_| hot.plan(&placement, Some(&moving), &get)).collect();
            assert_eq!(plans.iter().filter(|p| **p == Plan::Owner).count(), 2, "{plans:?}");
            for plan in &plans {
                match plan {
                    Plan::Owner => {}
                    Plan::ReadCopy { .. } => assert!(!moves, "a moved key is copied: {plans:?}"),
                    Plan::ReadCopyMoved { .. } => assert!(moves, "a kept owner's key is not: {plans:?}"),
                    Plan::WriteAll(..) => panic!("a get planned as a write"),
                }
            }
            // After the transition, every key's copy is refilled again.
            let plans: Vec<Plan> = (0..6).map(|_| hot.plan(&placement, Some(&done), &get)).collect();
            assert!(plans.iter().all(|p| matches!(p, Plan::Owner | Plan::ReadCopy { .. })), "{plans:?}");
        }
    }

    fn parsed(wire: &[u8]) -> Request {
        match shoal_proto::Parser::new(1 << 20).parse(wire) {
            shoal_proto::Parse::Done { request, .. } => crate::request::split(&request).unwrap()[0].clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_meta_get_is_spread_only_with_flags_a_copy_answers_and_asks_the_owner_for_its_item() {
        let addresses: Vec<String> = (1..=3).map(|port| format!("127.0.0.1:{port}")).collect();
        let servers = addresses.iter().map(|a| shoal_route::Server::parse(a).unwrap()).collect();
        let placement = Placement::new(shoal_route::Hashing::Jump, servers).unwrap();
        let options = HotOptions { replicas: 0, refresh: Duration::from_secs(3600), ttl: 10, cap: 16 };
        let hot = Arc::new(HotPool::new(options, addresses));
        hot.poller.set(()).expect("not started");
        let answer = vec![(b"mg:hot".to_vec(), 100.0)];
        hot.set.write().unwrap().learn([answer.as_slice()], 16, Instant::now(), Duration::from_secs(10));
        let plans = |wire: &[u8]| {
            let request = parsed(wire);
            (0..6).map(|_| hot.plan(&placement, None, &request)).collect::<Vec<Plan>>()
        };
        for spread in [&b"mg mg:hot v c f\r\n"[..], b"mg mg:hot\r\n", b"mg /r/c/mg:hot s k Oab q v\r\n"] {
            let plans = plans(spread);
            let copies = plans.iter().filter(|p| matches!(p, Plan::ReadCopy { .. })).count();
            assert_eq!(copies, 4, "three replicas, two of six reads ask the owner: {plans:?}");
        }
        for owners in
            [&b"mg mg:hot v t\r\n"[..], b"mg mg:hot v T30\r\n", b"mg mg:hot h\r\n", b"mg bWc6aG90 b v\r\n"]
        {
            assert!(plans(owners).iter().all(|p| *p == Plan::Owner), "{}", String::from_utf8_lossy(owners));
        }
        assert!(plans(b"mg mg:cold v\r\n").iter().all(|p| *p == Plan::Owner));

        // The owner is asked with the flags of the item added (`q` stays the router's).
        let request = parsed(b"mg /r/c/mg:hot v Oab q\r\n");
        assert_eq!(request.meta_flags(), b"v Oab");
        let mut added = Vec::new();
        OwnerMetaGet::new(flag_tokens(request.meta_flags())).append_flags(&mut added);
        let asked = request.with_meta_flags_added(&added);
        assert_eq!(asked.encode(true), b"mg /r/c/mg:hot v Oab f c\r\n");
        assert_eq!(asked.encode(false), b"mg mg:hot v Oab f c\r\n");
    }

    #[test]
    fn options_are_read_and_bad_ones_named() {
        assert_eq!(options(&fields("{}")), Ok(None));
        let o = options(&fields(r#"{"hot_replicas": "all", "hot_refresh_secs": 2}"#)).unwrap().unwrap();
        assert_eq!((o.replicas, o.refresh, o.ttl, o.cap), (0, Duration::from_secs(2), 10, 1024));
        assert_eq!(options(&fields(r#"{"hot_replicas": 3}"#)).unwrap().unwrap().replicas, 3);
        for (bad, field) in [
            (r#"{"hot_replicas": 0}"#, "hot_replicas"),
            (r#"{"hot_replicas": "most"}"#, "hot_replicas"),
            (r#"{"hot_replicas": 2, "hot_ttl_secs": 0}"#, "hot_ttl_secs"),
            (r#"{"hot_refresh_secs": 5}"#, "hot_refresh_secs"),
        ] {
            assert_eq!(options(&fields(bad)).unwrap_err().0, field, "{bad}");
        }
    }
}
