//! Hot keys spread over replicas in the pool client (issue #28; the rule is in
//! docs/design/hotkeys.md): the pool learns the hot set from its servers' `stats hotkeys`,
//! reads a hot key from one of its R replicas, and after any write of it deletes the copies.
//!
//! ```text
//!   every `refresh` (checked on each call: no thread) ──► `stats hotkeys` of each member
//!        ──► parse_hotkeys (bounded; a malformed or huge answer keeps that server's last
//!            good list) ──► HotSet::learn (union, capped at hot_set_size: c·n·ln n of the
//!            servers on, at most `cap`)
//!   get of a hot key ──► replica by round-robin ── the owner: an ordinary read
//!                          └─ a copy ── hit ──► answer (its CAS unique is the owner's)
//!                                   └─ miss / unreachable ──► the owner's read; a hit from
//!                                      the owner itself is added to the copy with `ttl` and
//!                                      the owner's unique (`ms … E<cas> ME`: a write
//!                                      meanwhile wins) — not a hit from Gutter or, in a
//!                                      Proteus transition, from a moved key's old owner
//!   mg of a hot key whose flags a copy answers alike (meta_get_spreads: v c f s k O q u)
//!        ──► as a get: a copy's hit answers; its miss asks the owner with `v f c` added
//!            (OwnerMetaGet), refills the copy from that answer, and answers without them
//!   get_many ──► each hot key's replica picked as above; the batch grouped by the server
//!        asked ──► keys a copy missed or could not answer: one batch from their owners, hits
//!        `add`ed to the copies
//!   any write of a key hot now (or hot until `ttl` ago) ──► the owner, then `delete` on
//!        every copy, before the call returns; for `ttl` after a Proteus pool's active count
//!        changed, also on the copies of the replica set under the old count
//!   set / add / replace / cas of a key hot now that stored ──► then the owner read back once
//!        and its item added to every copy (refill_hot_copies: one owner read per write, not
//!        one per copy)
//! ```
//!
//! Copies live at most `ttl` seconds, which bounds how long a copy can outlive a write made by
//! a client that did not count the key hot yet (the consistency rule's only exception).

use super::batch::DynHit;
use super::Pool;
use crate::client::{Client, Item, ItemRef, MetaReply, Stored};
use crate::error::{Error, Result};
use shoal_proto::{hotkeys_limits, parse_hotkeys, Body, HotKey, Op, Shape};
use shoal_route::hot::{meta_get_spreads, OwnerMetaGet};
use shoal_route::{ActiveHistory, HotSet, ReplicaSet};
use std::time::{Duration, Instant};

/// Hot-key replicas of a pool ([`super::PoolOptions::hot`]).
#[derive(Clone, Debug, PartialEq)]
pub struct HotOptions {
    /// Replicas of each hot key, the owner included (0: every server on).
    pub replicas: usize,
    /// How often the hot set is asked of the servers.
    pub refresh: Duration,
    /// The most hot keys kept (the union of the servers' lists, hottest first); under it the
    /// pool keeps `shoal_route::hot::hot_set_size` of the servers on (c·n·ln n).
    pub cap: usize,
    /// The expiry of a copy on a replica other than the owner, in seconds; also how long a key
    /// that left the hot set still has its writes delete the copies.
    pub ttl: u32,
}

impl Default for HotOptions {
    fn default() -> HotOptions {
        HotOptions { replicas: 3, refresh: Duration::from_secs(5), cap: 1024, ttl: 10 }
    }
}

/// The most `STAT` lines read from one server's `stats hotkeys` answer.
pub const HOT_ANSWER_LIMIT: usize = shoal_proto::MAX_HOTKEYS;

/// What the pool knows of its hot keys.
pub(super) struct Hot {
    options: HotOptions,
    set: HotSet,
    /// Each member's last good answer (a member that fails or answers garbage keeps its own).
    answers: Vec<Vec<(Vec<u8>, f64)>>,
    next_refresh: Instant,
    /// The reader's round-robin over replicas, started at a random turn so that clients do not
    /// all ask the owner first.
    turn: u64,
    /// Proteus: active counts the pool left less than `ttl` ago. A copy placed under one may
    /// still be there, so writes delete those replicas too.
    former: ActiveHistory,
}

impl Hot {
    pub(super) fn new(options: HotOptions, members: usize) -> Hot {
        use std::hash::BuildHasher;
        let turn = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
        Hot {
            options,
            set: HotSet::new(),
            answers: vec![Vec::new(); members],
            next_refresh: Instant::now(),
            turn,
            former: ActiveHistory::new(),
        }
    }
}

impl Client {
    /// Makes a hot key's copy on this server: `item` as its owner answered it, kept `ttl`
    /// seconds, with the owner's CAS unique (`ms <key> <len> T<ttl> F<flags> E<cas> ME`: add
    /// mode, so a write that landed meanwhile wins); whether it was stored. A server without
    /// `E` (Debian's memcached 1.6.18) refuses it with an error, and no copy is made.
    pub fn add_copy(&mut self, key: &[u8], item: ItemRef<'_>, ttl: i64) -> Result<bool> {
        crate::client::check_key(key)?;
        let flags = shoal_route::hot::copy_flags(ttl, item.flags, item.cas);
        let body = Body::Meta { flags: flags.as_bytes(), data: Some(item.value), base64: false };
        let request = crate::client::request(Op::MetaSet, key, ttl, body);
        self.exchange(&request, |line| match line {
            b"HD" => Ok(true),
            b"NS" | b"EX" => Ok(false),
            other => Err(crate::response::unexpected(other, "HD or NS")),
        })
    }

    /// The server's hot keys (`stats hotkeys`, a Shoal extension), hottest first, at most
    /// `limit`. A server without the extension (memcached) answers none; an answer that is
    /// malformed or longer than `limit` is [`Error::Protocol`].
    pub fn hot_keys(&mut self, limit: usize) -> Result<Vec<HotKey>> {
        let limits = hotkeys_limits(limit);
        let answer = self.with_connection(|conn| {
            conn.send(b"stats hotkeys\r\n")?;
            let lines = conn.answer_within(Shape::Stats, &limits)?;
            // The framed answer comes without its END; parse_hotkeys checks the whole answer.
            let mut whole = lines.to_vec();
            if whole.is_empty() || whole.starts_with(b"STAT ") {
                whole.extend_from_slice(b"END\r\n");
            }
            Ok(whole)
        })?;
        match parse_hotkeys(&answer, limit) {
            Ok(keys) => Ok(keys),
            Err(shoal_proto::HotKeysError::Refused(_)) => Ok(Vec::new()),
            Err(e) => Err(Error::Protocol(format!("stats hotkeys: {e}"))),
        }
    }
}

impl Pool {
    /// Asks every server for its hot keys now and rebuilds the hot set; each server's outcome.
    /// A server that fails or answers garbage keeps its last good list. Without hot replicas
    /// (`PoolOptions::hot` unset), nothing.
    pub fn refresh_hot_keys(&mut self) -> Vec<(String, Result<usize>)> {
        let Some(hot) = &mut self.hot else { return Vec::new() };
        let (client, retry) = (&self.client, self.retry_interval);
        let mut outcomes = Vec::with_capacity(self.members.len());
        for (member, last) in self.members.iter_mut().zip(&mut hot.answers) {
            let answer = member.run(client, retry, |c| c.hot_keys(HOT_ANSWER_LIMIT));
            let outcome = answer.map(|keys| {
                *last = keys.into_iter().map(|h| (h.key, h.rate)).collect();
                last.len()
            });
            outcomes.push((member.address.clone(), outcome));
        }
        let now = Instant::now();
        let linger = Duration::from_secs(hot.options.ttl.into());
        // c·n·ln n of the servers on (shoal_route::hot::hot_set_size), as every router keeps.
        let on = self.active.map_or(self.members.len(), |a| a.now);
        let cap = shoal_route::hot::hot_set_size(on, hot.options.cap);
        hot.set.learn(hot.answers.iter().map(Vec::as_slice), cap, now, linger);
        hot.next_refresh = now + hot.options.refresh;
        outcomes
    }

    /// The hot keys the pool reads from replicas now, hottest first, with their summed rates.
    pub fn hot_keys(&self) -> Vec<(Vec<u8>, f64)> {
        self.hot.as_ref().map(|h| h.set.keys()).unwrap_or_default()
    }

    /// The servers that hold `key` when it is hot (owner first), with the pool's replica count
    /// (1 without hot replicas); whether the key is hot or not.
    pub fn replicas_for(&self, key: &[u8]) -> Result<Vec<String>> {
        let set = self.replica_set(key)?;
        Ok(set.iter().map(|i| self.members[i].address.clone()).collect())
    }

    fn replica_set(&self, key: &[u8]) -> Result<ReplicaSet> {
        crate::client::check_key(key)?;
        let replicas = self.hot.as_ref().map_or(1, |h| h.options.replicas);
        Ok(self.placement.replicas(self.active.map(|a| a.now), key, replicas)?)
    }

    /// Refreshes the hot set when it is due.
    fn refresh_when_due(&mut self) {
        if self.hot.as_ref().is_some_and(|h| Instant::now() >= h.next_refresh) {
            self.refresh_hot_keys();
        }
    }

    /// The copy a read of `key` asks when it is hot, by the reader's round-robin, and the
    /// copies' expiry (`None`: not hot, or the turn names the owner: read it as usual).
    fn hot_copy(&mut self, key: &[u8]) -> Option<Result<(usize, i64)>> {
        self.refresh_when_due();
        let hot = self.hot.as_mut().filter(|h| h.set.is_hot(key))?;
        hot.turn = hot.turn.wrapping_add(1);
        let (turn, ttl) = (hot.turn, i64::from(hot.options.ttl));
        let set = match self.replica_set(key) {
            Ok(set) => set,
            Err(e) => return Some(Err(e)),
        };
        let copy = set.pick(turn);
        (copy != set.owner).then_some(Ok((copy, ttl)))
    }

    /// A get of `key` if it is hot (`None`: not hot, read it as usual): from one replica.
    pub(super) fn hot_get(&mut self, key: &[u8]) -> Option<Result<Option<Item>>> {
        let (copy, ttl) = match self.hot_copy(key)? {
            Ok(picked) => picked,
            Err(e) => return Some(Err(e)),
        };
        let (client, retry) = (&self.client, self.retry_interval);
        if let Ok(Some(item)) = self.members[copy].run(client, retry, |c| c.get(key)) {
            // A copy carries the owner's CAS unique (made with `E<cas>`): a `cas` with it goes
            // to the owner, which judges it as if the owner had been read.
            self.counters.hot_copy_hits += 1;
            return Some(Ok(Some(item)));
        }
        let (found, from_owner) = self.read_from_owner(|pool| pool.owner_get(key));
        if let (Ok(Some(item)), true) = (&found, from_owner) {
            // Best effort: a copy that cannot be made leaves the next read to the owner again.
            let (client, retry) = (&self.client, self.retry_interval);
            let _ = self.members[copy].run(client, retry, |c| c.add_copy(key, item.as_ref(), ttl));
            self.counters.hot_copies_made += 1;
        }
        Some(found)
    }

    /// A meta get (`command`: `mg <key> <flags>`, `flags` its flags) of `key` if it is hot and
    /// a copy answers those flags as its owner would (`shoal_route::hot::meta_get_spreads`;
    /// `None`: read it from the owner as usual): from one replica, as [`Pool::hot_get`] reads.
    /// A copy's miss asks the owner with the flags of its item added (`OwnerMetaGet`), refills
    /// the copy from that answer exactly as a get's miss does (only a hit of the owner itself,
    /// with its unique), and answers what the caller's own `mg` would have had.
    pub(super) fn hot_meta_get(
        &mut self,
        key: &[u8],
        command: &str,
        flags: &str,
    ) -> Option<Result<Option<MetaReply>>> {
        let tokens = || flags.split_ascii_whitespace().map(str::as_bytes);
        if !meta_get_spreads(tokens()) {
            return None;
        }
        let (copy, ttl) = match self.hot_copy(key)? {
            Ok(picked) => picked,
            Err(e) => return Some(Err(e)),
        };
        let (client, retry) = (&self.client, self.retry_interval);
        if let Ok(Some(reply)) = self.members[copy].run(client, retry, |c| c.meta(command, None)) {
            if reply.line.starts_with("VA ") || reply.line.split(' ').next() == Some("HD") {
                self.counters.hot_copy_hits += 1;
                return Some(Ok(Some(reply)));
            }
        }
        let ask = OwnerMetaGet::new(tokens());
        let mut owners = command.as_bytes().to_vec();
        ask.append_flags(&mut owners);
        let owners = String::from_utf8_lossy(&owners);
        let (found, from_owner) = self.read_from_owner(|pool| pool.read(key, |c| c.meta(&owners, None)));
        let reply = match found {
            Ok(Some(reply)) => reply,
            other => return Some(other),
        };
        let read = ask.answer(reply.line.as_bytes());
        if let (Some((flags, cas)), Some(value), true) = (read.copy, &reply.value, from_owner) {
            // Best effort, as a get's refill: a copy not made is made by a later read.
            let item = ItemRef { value, flags, cas };
            let (client, retry) = (&self.client, self.retry_interval);
            let _ = self.members[copy].run(client, retry, |c| c.add_copy(key, item, ttl));
            self.counters.hot_copies_made += 1;
        }
        let line = String::from_utf8_lossy(&read.line).into_owned();
        Some(Ok(Some(MetaReply { line, value: reply.value.filter(|_| read.shows_value) })))
    }

    /// Runs `read` and says whether every hit it returned came from its key's owner now
    /// itself, so may be copied with its unique: none from the Gutter pool (a failed owner's
    /// keys, whose uniques are its servers') nor, during a Proteus transition, from a moved
    /// key's old owner (the migration; that server's unique). A moved key's hit on its new
    /// owner is copied: that server is the owner from now on (`shoal_route::hot::may_copy`
    /// tells the router's plan the same).
    fn read_from_owner<T>(&mut self, read: impl FnOnce(&mut Pool) -> T) -> (T, bool) {
        let (gutter_reads, migrated) = (self.counters.gutter_reads, self.counters.migrated);
        let found = read(self);
        (found, self.counters.gutter_reads == gutter_reads && self.counters.migrated == migrated)
    }

    /// The hot keys of a batch read from a copy (as [`Pool::hot_get`] picks them, one turn
    /// each), moved from their owner's group in `groups` to the copy's: `copy_of[i]` is the copy
    /// key `i` is asked of. Empty when no key of the batch is.
    pub(super) fn hot_copies(&mut self, keys: &[&[u8]], groups: &mut [Vec<usize>]) -> Vec<Option<usize>> {
        self.refresh_when_due();
        let Some(hot) = self.hot.as_ref().filter(|h| !h.set.is_empty()) else { return Vec::new() };
        let (mut turn, mut copy_of, mut any) = (hot.turn, vec![None; keys.len()], false);
        for (i, key) in keys.iter().enumerate() {
            if !hot.set.is_hot(key) {
                continue;
            }
            // Keys were checked when grouped by owner: a replica set is always there.
            let Ok(set) = self.replica_set(key) else { continue };
            turn = turn.wrapping_add(1);
            let copy = set.pick(turn);
            if copy != set.owner {
                copy_of[i] = Some(copy);
                any = true;
            }
        }
        if let Some(hot) = &mut self.hot {
            hot.turn = turn;
        }
        if !any {
            return Vec::new();
        }
        for group in groups.iter_mut() {
            group.retain(|&i| copy_of[i].is_none());
        }
        for (i, copy) in copy_of.iter().enumerate() {
            if let Some(copy) = copy {
                groups[*copy].push(i);
            }
        }
        copy_of
    }

    /// The keys of a batch a copy missed (`missed`, indexes into `keys`; `copy_of` from
    /// [`Pool::hot_copies`]): read from their owners (with a transition's old owners, Gutter and
    /// the rest of an ordinary read), each hit handed to `hit` and `add`ed to the copy with
    /// `ttl` (best effort, as for a single get).
    pub(super) fn refill_copies(
        &mut self,
        keys: &[&[u8]],
        missed: &[usize],
        copy_of: &[Option<usize>],
        hit: &mut DynHit<'_>,
    ) -> Result<()> {
        if missed.is_empty() {
            return Ok(());
        }
        let asked: Vec<&[u8]> = missed.iter().map(|&i| keys[i]).collect();
        let mut found = Vec::new();
        let (read, from_owner) = self.read_from_owner(|pool| {
            let push: &mut DynHit<'_> = &mut |j, item| found.push((missed[j], item.to_item()));
            pool.get_many_routed(&asked, false, push)
        });
        read?;
        let ttl = self.hot.as_ref().map_or(0, |h| i64::from(h.options.ttl));
        let (client, retry) = (&self.client, self.retry_interval);
        for (i, item) in found {
            if let (Some(copy), true) = (copy_of[i], from_owner) {
                let _ = self.members[copy].run(client, retry, |c| c.add_copy(keys[i], item.as_ref(), ttl));
                self.counters.hot_copies_made += 1;
            }
            hit(i, item.as_ref());
        }
        Ok(())
    }

    /// After a write of `key` stored a whole value on its owner (`set`, `add`, `replace`, a
    /// `cas` that succeeded; `stored`), once its copies are deleted: while the key is hot, the
    /// owner's item is read back (`gets`, one read) and added to every copy with the owner's
    /// unique, kept `ttl` seconds or less if the write's `exptime` is shorter. Without it, each
    /// copy's next read misses and asks the owner, so every write of a hot key cost its owner
    /// n − 1 reads (the busiest server of Fig. 9 at 1.13× the mean was the owner of the hottest
    /// keys: docs/BENCHMARKS.md). The copies are made exactly as a reader's refill makes them
    /// (`add` mode, so a later write's delete or value wins), hence under the same rule.
    pub(super) fn refill_hot_copies(&mut self, key: &[u8], exptime: i64, stored: &Result<Stored>) {
        if !matches!(stored, Ok(Stored::Stored)) {
            return;
        }
        let Some(hot) = self.hot.as_ref().filter(|h| h.set.is_hot(key)) else { return };
        let Some(ttl) = shoal_route::hot::refill_ttl(exptime, hot.options.ttl) else { return };
        let Ok(set) = self.replica_set(key) else { return };
        if set.count < 2 {
            return;
        }
        let (found, from_owner) = self.read_from_owner(|pool| pool.owner_get(key));
        let (Ok(Some(item)), true) = (found, from_owner) else { return };
        let (client, retry) = (&self.client, self.retry_interval);
        for copy in set.copies() {
            // Best effort, as a reader's refill: a copy not made is made by its next read.
            let made = self.members[copy].run(client, retry, |c| c.add_copy(key, item.as_ref(), ttl));
            self.counters.hot_copies_made += u64::from(matches!(made, Ok(true)));
        }
    }

    /// The pool's active count changed from `before` (Proteus, [`Pool::set_active`]): copies
    /// placed with `before` servers on live at most `ttl` more seconds, and until then writes
    /// delete them too, so that a read after a write never finds one, whichever way the
    /// active set moves next.
    pub(super) fn hot_view_left(&mut self, before: usize) {
        if let Some(hot) = &mut self.hot {
            hot.former.used(before, Instant::now(), Duration::from_secs(hot.options.ttl.into()));
        }
    }

    /// After a write of `key` (done or failed: a timed-out write may have been applied): while
    /// it is hot, or was until `ttl` ago, its copies are deleted — those of the active set now,
    /// and those of active sets the pool left less than `ttl` ago (never the owner's item).
    pub(super) fn forget_hot_copies(&mut self, key: &[u8]) {
        self.refresh_when_due();
        let Some(hot) = &self.hot else { return };
        let now = Instant::now();
        if !hot.set.writes_spread(key, now) {
            return;
        }
        if crate::client::check_key(key).is_err() {
            return;
        }
        let ttl = Duration::from_secs(hot.options.ttl.into());
        let former = hot.former.recent(now, ttl);
        let active = self.active.map(|a| a.now);
        let Ok(copies) =
            shoal_route::hot::copies_to_delete(&self.placement, active, former, key, hot.options.replicas)
        else {
            return;
        };
        let (client, retry) = (&self.client, self.retry_interval);
        for copy in copies {
            // A copy that cannot be reached keeps its value at most `ttl` seconds.
            let _ = self.members[copy].run(client, retry, |c| c.delete(key));
        }
    }
}
