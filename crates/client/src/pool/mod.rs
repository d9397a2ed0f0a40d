//! [`Pool`]: a client for a pool of servers, placed by the routing core (`shoal-route`).
//!
//! ```text
//!   key ──► Placement::owner ──► Member (Client, local reads when on this host)
//!                                  │ refused / timed out: marked down for the retry interval
//!                                  ▼
//!                      reads miss, writes fail ── or, with a Gutter pool, both go there
//!                      (fills with their TTL clamped; never a rehash onto live servers)
//!   get_many / set_many / delete_many ──► split by owner ──► local reads first, then one
//!                      request per owner and chunk, all in flight at once within the
//!                      sliding window, answers read as they come back (batch.rs)
//!   hot keys (hot.rs) ──► learned from the servers' `stats hotkeys`; a get (each hot key of
//!                      a get_many, an mg a copy answers alike) reads one of the key's R
//!                      replicas, a write deletes the copies after the owner's write (under
//!                      Proteus, also those of the active set before, for the copies' TTL)
//! ```
//!
//! Facebook's client logic (Scaling Memcache §3): owners decided in the client, batches sent
//! in parallel within a window that grows on success and shrinks on timeout (incast), and a
//! Gutter pool that takes a failed server's load instead of its neighbours.

mod batch;
mod hot;
mod markers;
mod member;
mod transition;
mod udp;
mod window;

pub use hot::{HotOptions, HOT_ANSWER_LIMIT};
pub use transition::Active;
pub use window::WindowOptions;

use crate::client::{check_key, Client, Item, MetaReply, Options, Stored};
use crate::error::{Error, Result};
use crate::hits::Hits;
use crate::lease::{FillOptions, Lease, LeaseStored};
use member::Member;
use shoal_route::{Hashing, Placement, Server};
use std::time::Duration;
use window::Window;

/// How a [`Pool`] routes and what it does when a server fails.
#[derive(Clone, Debug)]
pub struct PoolOptions {
    /// How keys map to servers (default: libmemcached's weighted ketama, which twemproxy and
    /// pylibmc's `ketama_weighted` share).
    pub hashing: Hashing,
    /// Timeouts and local reads, for every server.
    pub client: Options,
    /// How long a server that failed is skipped before it is tried again.
    pub retry_interval: Duration,
    /// A Gutter pool (Scaling Memcache §3.3): where a failed server's keys go meanwhile.
    pub gutter: Vec<String>,
    /// The longest TTL a fill into the Gutter pool may have, in seconds (Facebook: short, so
    /// Gutter needs no invalidation).
    pub gutter_ttl: u32,
    /// The sliding window of batches.
    pub window: WindowOptions,
    /// Without a Gutter pool, reads of an unreachable server's keys answer as misses (the
    /// caller goes to the database, Facebook's choice); `false` returns the error instead,
    /// as a client of a single server does.
    pub miss_when_down: bool,
    /// The expiry, in seconds, of a value a Proteus transition copies from a key's old owner
    /// to its new one (the client cannot see the original's).
    pub migrate_ttl: i64,
    /// Send gets that are not local over UDP (to each server's TCP port number, on UDP):
    /// a lost or reordered answer is a miss, counted in [`PoolCounters::udp_misses`].
    pub udp_gets: bool,
    /// Spread hot keys over replicas (learned from the servers' `stats hotkeys`); `None`: off.
    pub hot: Option<HotOptions>,
}

impl Default for PoolOptions {
    fn default() -> PoolOptions {
        PoolOptions {
            hashing: Hashing::KetamaWeighted,
            client: Options::default(),
            retry_interval: Duration::from_secs(1),
            gutter: Vec::new(),
            gutter_ttl: 10,
            window: WindowOptions::default(),
            miss_when_down: true,
            migrate_ttl: 300,
            udp_gets: false,
            hot: None,
        }
    }
}

/// One server's `stats`: each name and value, in the server's order.
pub type Stats = Vec<(String, String)>;

/// What a pool has done since it was built, for tests and monitoring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounters {
    /// Keys read from the Gutter pool because their server had failed.
    pub gutter_reads: u64,
    /// Keys written to the Gutter pool because their server had failed.
    pub gutter_writes: u64,
    /// Keys that answered as misses because their server had failed (no Gutter pool).
    pub down_misses: u64,
    /// Requests that timed out (each halves the window).
    pub timeouts: u64,
    /// Get requests sent over UDP.
    pub udp_requests: u64,
    /// Keys that missed because their UDP answer was lost, out of order or garbled.
    pub udp_misses: u64,
    /// Keys a Proteus transition found on their old owner and copied to the new one.
    pub migrated: u64,
    /// Misses of moved keys that did not ask the old owner, whose digest said it lacks them.
    pub digest_skips: u64,
    /// Reads of hot keys answered by a copy (a replica other than the owner).
    pub hot_copy_hits: u64,
    /// Copies of hot keys made on a replica: after a read that missed there, or after a write
    /// of the key (the copies refilled from the owner).
    pub hot_copies_made: u64,
}

/// A client for a pool of servers: each key goes to the server the pool's hashing names,
/// read through that server's shared memory when it is on this host.
pub struct Pool {
    placement: Placement,
    members: Vec<Member>,
    client: Options,
    retry_interval: Duration,
    gutter: Option<Box<Pool>>,
    gutter_ttl: u32,
    window: Window,
    miss_when_down: bool,
    udp: Option<udp::UdpGets>,
    active: Option<Active>,
    /// During a transition, the digest each old owner published (`None`: it keeps none).
    digests: Vec<Option<shoal_route::digest::Digest>>,
    migrate_ttl: i64,
    counters: PoolCounters,
    /// Where a multiget gathers the servers' answers, kept for the next one.
    answers: Hits,
    /// Where a multiget groups its keys by owner (each key's owner, then each member's keys),
    /// kept for the next one: a batch read from shared memory allocates nothing to place.
    owner_of: Vec<u32>,
    groups: Vec<Vec<usize>>,
    /// Hot keys and their replicas, when on.
    hot: Option<hot::Hot>,
}

/// Whether an error means the server could not be reached (as opposed to an answer).
fn unreachable(e: &Error) -> bool {
    e.is_connection() || matches!(e, Error::Down(_))
}

impl Pool {
    /// A pool over `servers` (`host:port`, `host:port:weight` or unix socket paths). Nothing
    /// is connected until a key needs its server; a bad server string, weight or hashing is
    /// refused here, naming it.
    pub fn new<S: AsRef<str>>(servers: &[S], options: PoolOptions) -> Result<Pool> {
        let servers =
            servers.iter().map(|s| Server::parse(s.as_ref())).collect::<shoal_route::Result<Vec<_>>>()?;
        let placement = Placement::new(options.hashing, servers)?;
        let gutter = if options.gutter.is_empty() {
            None
        } else {
            let gutter_options = PoolOptions { gutter: Vec::new(), ..options.clone() };
            Some(Box::new(Pool::new(&options.gutter, gutter_options)?))
        };
        let addresses: Vec<String> = placement.servers().iter().map(|s| s.address.clone()).collect();
        let udp = options.udp_gets.then(|| udp::UdpGets::new(&addresses));
        let hot = options.hot.clone().map(|h| hot::Hot::new(h, addresses.len()));
        let members = addresses.into_iter().map(Member::new).collect();
        Ok(Pool {
            placement,
            members,
            client: options.client,
            retry_interval: options.retry_interval,
            gutter,
            gutter_ttl: options.gutter_ttl,
            window: Window::new(options.window),
            miss_when_down: options.miss_when_down,
            udp,
            active: None,
            digests: Vec::new(),
            migrate_ttl: options.migrate_ttl,
            counters: PoolCounters::default(),
            answers: Hits::default(),
            owner_of: Vec::new(),
            groups: Vec::new(),
            hot,
        })
    }

    /// Connects to every server now (a pool otherwise connects when a key first needs a
    /// server); the first failure, after trying them all.
    pub fn connect(&mut self) -> Result<()> {
        self.each(|_| Ok(())).into_iter().map(|(_, r)| r).collect::<Result<Vec<_>>>().map(drop)
    }

    /// The servers, in the order given.
    pub fn servers(&self) -> Vec<String> {
        self.members.iter().map(|m| m.address.clone()).collect()
    }

    /// The server that owns `key`.
    pub fn server_for(&self, key: &[u8]) -> Result<&str> {
        Ok(&self.members[self.owner(key)?].address)
    }

    /// Whether every server's reads are local now (each connected server is asked).
    pub fn is_local(&mut self) -> bool {
        self.members.iter_mut().all(Member::is_local)
    }

    /// The servers whose reads are local now.
    pub fn local_servers(&mut self) -> Vec<String> {
        self.members.iter_mut().filter_map(|m| m.is_local().then(|| m.address.clone())).collect()
    }

    /// The number of requests a batch keeps outstanding now.
    pub fn window(&self) -> usize {
        self.window.size()
    }

    /// What the pool has done so far.
    pub fn counters(&self) -> PoolCounters {
        self.counters
    }

    fn owner(&self, key: &[u8]) -> Result<usize> {
        check_key(key)?;
        Ok(self.owner_with(self.active.map(|a| a.now), key))
    }

    /// [`Pool::owner`] of each of `keys`, written to `owners`: every key checked first, then
    /// placed as a batch (`Placement::owner_each`) unless a Proteus transition names owners
    /// among fewer servers, which goes key by key.
    fn owner_each(&self, keys: &[&[u8]], owners: &mut [u32]) -> Result<()> {
        keys.iter().try_for_each(|key| check_key(key))?;
        match self.active {
            Some(active) if self.placement.proteus().is_some() => {
                for (key, owner) in keys.iter().zip(owners) {
                    *owner = self.owner_with(Some(active.now), key) as u32;
                }
            }
            _ => self.placement.owner_each(keys, owners),
        }
        Ok(())
    }

    /// Runs `call` on the client of `key`'s server.
    fn on_owner<T>(&mut self, key: &[u8], call: impl FnOnce(&mut Client) -> Result<T>) -> Result<T> {
        let i = self.owner(key)?;
        let (client, retry) = (&self.client, self.retry_interval);
        let result = self.members[i].run(client, retry, call);
        if result.as_ref().is_err_and(|e| e.is_timeout()) {
            self.counters.timeouts += 1;
        }
        result
    }

    /// A read of one key: from its server; if that server is unreachable, from the Gutter
    /// pool, or a miss without one.
    fn read<T>(&mut self, key: &[u8], call: impl Fn(&mut Client) -> Result<Option<T>>) -> Result<Option<T>> {
        match self.on_owner(key, &call) {
            Err(e) if unreachable(&e) => match &mut self.gutter {
                Some(gutter) => {
                    self.counters.gutter_reads += 1;
                    // A Gutter server that fails too is a miss: the caller goes to the database.
                    Ok(gutter.on_owner(key, &call).unwrap_or(None))
                }
                None if self.miss_when_down => {
                    self.counters.down_misses += 1;
                    Ok(None)
                }
                None => Err(e),
            },
            other => other,
        }
    }

    /// A write of one key with expiry `exptime`: to its server; if that server is
    /// unreachable, to the Gutter pool with the expiry clamped, or the error without one.
    /// During a Proteus transition the key's old owner then forgets it.
    fn write<T>(
        &mut self,
        key: &[u8],
        exptime: i64,
        call: impl Fn(&mut Client, i64) -> Result<T>,
    ) -> Result<T> {
        let result = self.write_owner(key, exptime, &call);
        if result.is_ok() {
            self.forget_moved(key);
        }
        self.forget_hot_copies(key);
        result
    }

    /// [`Pool::write`] to the key's owner, or to Gutter.
    fn write_owner<T>(
        &mut self,
        key: &[u8],
        exptime: i64,
        call: impl Fn(&mut Client, i64) -> Result<T>,
    ) -> Result<T> {
        match self.on_owner(key, |c| call(c, exptime)) {
            Err(e) if unreachable(&e) && self.gutter.is_some() => {
                self.counters.gutter_writes += 1;
                let ttl = self.gutter_exptime(exptime);
                self.gutter.as_mut().expect("checked").on_owner(key, |c| call(c, ttl))
            }
            other => other,
        }
    }

    /// The expiry a fill into the Gutter pool gets: at most `gutter_ttl` seconds.
    fn gutter_exptime(&self, exptime: i64) -> i64 {
        clamp_exptime(exptime, self.gutter_ttl)
    }

    /// The item under `key`, if there is one.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Item>> {
        match self.hot_get(key) {
            Some(answer) => answer,
            None => self.owner_get(key),
        }
    }

    /// A get from the key's owner (over UDP when on; from its old owner during a transition).
    fn owner_get(&mut self, key: &[u8]) -> Result<Option<Item>> {
        if self.udp.is_some() {
            return Ok(self.get_many_indexed(&[key])?.pop().map(|(_, item)| item));
        }
        match self.read(key, |c| c.get(key))? {
            None => Ok(self.read_moved(key)),
            hit => Ok(hit),
        }
    }

    /// Gets `key` and sets its expiry (`gat`).
    pub fn gat(&mut self, exptime: i64, key: &[u8]) -> Result<Option<Item>> {
        self.read(key, |c| c.gat(exptime, key))
    }

    /// A meta get, `mg <key> <flags>` (`flags` as memcached takes them: `"v c f"`, `"v t"`, or
    /// `""` for a bare `HD`/`EN`), answered as [`Client::meta`] answers: `None` for a quiet
    /// (`q`) miss, and, as for [`Pool::get`], for a server that is down without a Gutter pool.
    /// From the key's owner; a hot key whose flags a copy answers as its owner would (`v c f s
    /// k O q u`: `shoal_route::hot::meta_get_spreads`) is read from one of its replicas, as a
    /// get is (docs/design/hotkeys.md). The pool routes by `key` itself, which `mg` carries as
    /// text: a key that is not UTF-8, or flags with `b` (a base64 key), are refused as an
    /// [`Error::InvalidKey`].
    pub fn meta_get(&mut self, key: &[u8], flags: &str) -> Result<Option<MetaReply>> {
        check_key(key)?;
        let text = std::str::from_utf8(key).map_err(|_| Error::InvalidKey(key.to_vec()))?;
        if flags.split_ascii_whitespace().any(|token| token.starts_with('b')) {
            return Err(Error::InvalidKey(key.to_vec()));
        }
        let command = format!("mg {text} {flags}");
        match self.hot_meta_get(key, &command, flags) {
            Some(answer) => answer,
            None => self.read(key, |c| c.meta(&command, None)),
        }
    }

    /// `set`.
    pub fn set(&mut self, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Result<Stored> {
        let stored = self.write(key, exptime, |c, e| c.set(key, value, flags, e));
        self.refill_hot_copies(key, exptime, &stored);
        stored
    }

    /// `add`: only if the key is absent.
    pub fn add(&mut self, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Result<Stored> {
        let stored = self.write(key, exptime, |c, e| c.add(key, value, flags, e));
        self.refill_hot_copies(key, exptime, &stored);
        stored
    }

    /// `replace`: only if the key is present.
    pub fn replace(&mut self, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Result<Stored> {
        let stored = self.write(key, exptime, |c, e| c.replace(key, value, flags, e));
        self.refill_hot_copies(key, exptime, &stored);
        stored
    }

    /// `append` to an existing value.
    pub fn append(&mut self, key: &[u8], value: &[u8]) -> Result<Stored> {
        self.write(key, 0, |c, _| c.append(key, value))
    }

    /// `prepend` to an existing value.
    pub fn prepend(&mut self, key: &[u8], value: &[u8]) -> Result<Stored> {
        self.write(key, 0, |c, _| c.prepend(key, value))
    }

    /// `cas`: store only if the item's unique is still `cas`.
    pub fn cas(&mut self, key: &[u8], value: &[u8], flags: u32, exptime: i64, cas: u64) -> Result<Stored> {
        let stored = self.write(key, exptime, |c, e| c.cas(key, value, flags, e, cas));
        self.refill_hot_copies(key, exptime, &stored);
        stored
    }

    /// `delete`; whether there was an item. With its server down, the delete goes to the
    /// Gutter pool (so Gutter stops serving the old value); the server itself may still hold
    /// it when it returns, which is what the invalidation pipeline's replayed deletes are for.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool> {
        self.write(key, 0, |c, _| c.delete(key))
    }

    /// `incr`; the new value, or `None` without an item.
    pub fn incr(&mut self, key: &[u8], delta: u64) -> Result<Option<u64>> {
        self.write(key, 0, |c, _| c.incr(key, delta))
    }

    /// `decr` (stops at 0); the new value, or `None` without an item.
    pub fn decr(&mut self, key: &[u8], delta: u64) -> Result<Option<u64>> {
        self.write(key, 0, |c, _| c.decr(key, delta))
    }

    /// `touch`: a new expiry; whether there was an item.
    pub fn touch(&mut self, key: &[u8], exptime: i64) -> Result<bool> {
        self.write(key, exptime, |c, e| c.touch(key, e))
    }

    /// `lease-get` on the key's server (which issues the token); see [`Client::lease_get`].
    pub fn lease_get(&mut self, key: &[u8], accept_stale: bool) -> Result<Lease> {
        self.on_owner(key, |c| c.lease_get(key, accept_stale))
    }

    /// `lease-set` on the key's server; see [`Client::lease_set`].
    pub fn lease_set(
        &mut self,
        key: &[u8],
        token: u64,
        value: &[u8],
        flags: u32,
        exptime: i64,
    ) -> Result<LeaseStored> {
        self.on_owner(key, |c| c.lease_set(key, token, value, flags, exptime))
    }

    /// `delete <key> hold <seconds>` on the key's server; see [`Client::delete_hold`].
    pub fn delete_hold(&mut self, key: &[u8], seconds: u32) -> Result<bool> {
        let deleted = self.on_owner(key, |c| c.delete_hold(key, seconds));
        self.forget_hot_copies(key);
        deleted
    }

    /// The look-aside read with leases, on the key's server ([`Client::get_or_fill`]). With
    /// that server unreachable: through the Gutter pool (a plain get, then `fill` and a set
    /// with the Gutter TTL), or without one `fill` alone, uncached.
    pub fn get_or_fill<E>(
        &mut self,
        key: &[u8],
        options: FillOptions,
        fill: impl FnOnce() -> std::result::Result<Vec<u8>, E>,
    ) -> Result<std::result::Result<Vec<u8>, E>> {
        let mut fill = Some(fill);
        let first = self.on_owner(key, |c| c.get_or_fill(key, options, fill.take().expect("fill runs once")));
        match first {
            Err(e) if unreachable(&e) && fill.is_some() => {
                let fill = fill.take().expect("not taken");
                if self.gutter.is_none() {
                    self.counters.down_misses += 1;
                    return Ok(fill());
                }
                if let Some(item) = self.read(key, |c| c.get(key))? {
                    return Ok(Ok(item.value));
                }
                let value = match fill() {
                    Ok(v) => v,
                    Err(e) => return Ok(Err(e)),
                };
                // Best effort: a Gutter that fails too still returns the filled value.
                let _ = self.write(key, options.exptime, |c, e| c.set(key, &value, 0, e));
                Ok(Ok(value))
            }
            other => other,
        }
    }

    /// `flush_all [delay]` on every server; the first error, after trying them all.
    pub fn flush_all(&mut self, delay: Option<u32>) -> Result<()> {
        self.each(|c| c.flush_all(delay)).into_iter().map(|(_, r)| r).collect::<Result<Vec<_>>>().map(drop)
    }

    /// `stats [group]` of every server, with its address.
    pub fn stats(&mut self, group: Option<&str>) -> Vec<(String, Result<Stats>)> {
        self.each(|c| c.stats(group))
    }

    /// Every server's version string, with its address.
    pub fn versions(&mut self) -> Vec<(String, Result<String>)> {
        self.each(Client::version)
    }

    /// Runs `call` on every server's client, in order.
    fn each<T>(&mut self, call: impl Fn(&mut Client) -> Result<T>) -> Vec<(String, Result<T>)> {
        let (client, retry) = (&self.client, self.retry_interval);
        self.members.iter_mut().map(|m| (m.address.clone(), m.run(client, retry, &call))).collect()
    }
}

/// memcached's expiry rules, clamped to at most `ttl` seconds from now: 0 (never) and
/// anything later becomes `ttl`; an absolute time (over 30 days) becomes `ttl` as well, since
/// the client cannot know the server's clock; a negative expiry stays (already expired).
fn clamp_exptime(exptime: i64, ttl: u32) -> i64 {
    let ttl = i64::from(ttl);
    if exptime < 0 {
        exptime
    } else if exptime == 0 || exptime > ttl {
        ttl
    } else {
        exptime
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gutter_expiry_is_clamped() {
        assert_eq!(clamp_exptime(0, 10), 10);
        assert_eq!(clamp_exptime(5, 10), 5);
        assert_eq!(clamp_exptime(3600, 10), 10);
        assert_eq!(clamp_exptime(2_000_000_000, 10), 10);
        assert_eq!(clamp_exptime(-1, 10), -1);
    }

    #[test]
    fn bad_pools_are_refused_before_any_request() {
        let opts = || PoolOptions { hashing: Hashing::Jump, ..PoolOptions::default() };
        let empty: [&str; 0] = [];
        assert!(matches!(Pool::new(&empty, opts()), Err(Error::Pool(shoal_route::Error::EmptyPool))));
        assert!(matches!(
            Pool::new(&["127.0.0.1:1", "nonsense"], opts()),
            Err(Error::Pool(shoal_route::Error::BadServer(s))) if s == "nonsense"
        ));
        assert!(matches!(
            Pool::new(&["127.0.0.1:1:0"], opts()),
            Err(Error::Pool(shoal_route::Error::BadWeight { .. }))
        ));
        let gutter_bad = PoolOptions { gutter: vec!["x".into()], ..opts() };
        assert!(matches!(Pool::new(&["127.0.0.1:1"], gutter_bad), Err(Error::Pool(_))));
        let mut pool = Pool::new(&["127.0.0.1:1"], opts()).unwrap();
        assert!(matches!(pool.get(&[b'k'; 251]), Err(Error::InvalidKey(_))));
        assert!(matches!(pool.set(b"a b", b"v", 0, 0), Err(Error::InvalidKey(_))));
        assert!(matches!(pool.get_many(&[b"ok", b"bad key"]), Err(Error::InvalidKey(_))));
    }
}
