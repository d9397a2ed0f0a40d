//! Batches across a pool: keys split by owner, local reads first, then one request per owner
//! and chunk of keys, all sent before any answer is read (so every server works on its part
//! at once), no more outstanding at a time than the sliding window allows.

use super::{clamp_exptime, unreachable, Pool};
use crate::client::{deleted_answer, stored_answer, Client, Item, ItemRef, Stored};
use crate::error::{Error, Result};
use crate::hits::{Gather, Hits};
use shoal_proto::{encode_request, encode_retrieval, Body, Op};
use std::collections::VecDeque;
use std::time::Instant;

/// Keys (or commands) per request: one `gets` line, or one pipelined run of storage commands.
const KEYS_PER_REQUEST: usize = 100;

/// The most keys whose grouping lists a pool keeps from one batch for the next.
const KEPT_KEYS: usize = 1 << 16;

/// A batch's receiver of hits behind a trait object: how [`Pool::get_many_routed`] hands over
/// the hits of reads it starts itself.
pub(super) type DynHit<'a> = dyn FnMut(usize, ItemRef<'_>) + 'a;

/// One request of a batch: to which member, its bytes, and the keys it carries (indexes into
/// the batch's key list).
struct Request {
    member: usize,
    bytes: Vec<u8>,
    keys: Vec<usize>,
}

impl Pool {
    /// The items under `keys` that exist, with their keys (in no particular order). Keys of a
    /// server on this host are read from its region; the others go to their servers in
    /// parallel. Keys whose server is unreachable are read from the Gutter pool, or miss.
    pub fn get_many(&mut self, keys: &[&[u8]]) -> Result<Vec<(Vec<u8>, Item)>> {
        Ok(self.get_many_indexed(keys)?.into_iter().map(|(i, item)| (keys[i].to_vec(), item)).collect())
    }

    /// [`Pool::get_many`], each hit named by its index in `keys` (no key is copied).
    pub fn get_many_indexed(&mut self, keys: &[&[u8]]) -> Result<Vec<(usize, Item)>> {
        let mut found = Vec::with_capacity(keys.len());
        self.get_many_each(keys, |i, item| found.push((i, item.to_item())))?;
        Ok(found)
    }

    /// [`Pool::get_many`] without copies: each hit is handed to `hit` with its index in
    /// `keys` and its value borrowed (from a local reader's buffer, or the server's answer),
    /// so a caller that keeps values its own way (Python's `bytes`) copies each value once
    /// and a batch read from shared memory allocates nothing per key.
    pub fn get_many_each(&mut self, keys: &[&[u8]], hit: impl FnMut(usize, ItemRef<'_>)) -> Result<()> {
        self.get_many_routed(keys, true, hit)
    }

    /// The part of a multiget that shared memory can answer now, each value copied once,
    /// straight from the region into `gather` (see [`Gather`]); the indexes of the keys left
    /// for [`Pool::get_many_each`], which a caller then asks for. Nothing here waits on the
    /// network, so a caller may hold a lock of its own meanwhile (Python builds each `bytes`
    /// under the interpreter lock, which network waits must not hold). Keys are left when
    /// their server is not connected or not read locally now, when the region could not
    /// answer, and all of them when local reads are off, while hot keys are spread or while a
    /// transition is under way (those reads take other servers into account).
    pub fn get_many_local(&mut self, keys: &[&[u8]], gather: &mut dyn Gather) -> Result<Vec<usize>> {
        let moving = self.active.is_some_and(|a| a.before.is_some());
        if !self.client.local || self.hot.is_some() || moving {
            return Ok((0..keys.len()).collect());
        }
        let mut rest = Vec::new();
        let now = Instant::now();
        let groups = self.owners(keys)?;
        for (member, indexes) in groups.iter().enumerate() {
            match self.members[member].connected() {
                Some(client) if !indexes.is_empty() => {
                    rest.extend(client.local_gather(keys, indexes, now, gather))
                }
                _ => rest.extend_from_slice(indexes),
            }
        }
        self.keep_groups(groups);
        Ok(rest)
    }

    /// [`Pool::get_many_each`]; with `spread`, hot keys are read from one of their replicas as
    /// a single get reads them (hot.rs: a copy's hit carries the owner's CAS unique, a copy that
    /// misses or cannot be reached hands its keys to their owners, and their hits are copied
    /// back with their uniques).
    ///
    /// Generic over `hit`, so that what a caller does with a local hit is inlined into the
    /// batch's loop over the region's lookups (a call through a vtable cost ~10 instructions
    /// a key: #29's local multiget, fourth round). Reads of other keys it starts itself (the
    /// Gutter pool's, a hot key's owner's) hand their hits over as [`DynHit`]: one more
    /// instance of this function, not one per closure without end.
    pub(super) fn get_many_routed<H: FnMut(usize, ItemRef<'_>)>(
        &mut self,
        keys: &[&[u8]],
        spread: bool,
        mut hit: H,
    ) -> Result<()> {
        let mut owners = self.owners(keys)?;
        // `copy_of[i]`: the replica other than its owner that hot key `i` is asked of (empty
        // when no key of the batch is read from a copy).
        let copy_of = if spread { self.hot_copies(keys, &mut owners) } else { Vec::new() };
        let from_copy = |i: usize| copy_of.get(i).is_some_and(Option::is_some);
        // During a transition, keys that missed are asked of their old owners afterwards.
        let moving = self.active.is_some_and(|a| a.before.is_some());
        let track = moving || !copy_of.is_empty();
        let mut was_hit = vec![false; if track { keys.len() } else { 0 }];
        let mut copy_hits = 0;
        let mut note = |i: usize, item: ItemRef<'_>| {
            if track {
                was_hit[i] = true;
            }
            // A copy's CAS unique is its owner's (hot.rs): handed out as it is.
            if from_copy(i) {
                copy_hits += 1;
            }
            hit(i, item)
        };
        let mut failed = Vec::new();
        let mut failure = None;
        let mut remote: Vec<Vec<usize>> = Vec::new();
        let now = Instant::now();
        for (member, indexes) in owners.iter().enumerate() {
            if indexes.is_empty() {
                continue;
            }
            let (client, retry) = (&self.client, self.retry_interval);
            // Local reads need the connection's discovery: `run` opens it first if needed.
            match self.members[member]
                .run(client, retry, |c| Ok(c.local_get_each(keys, indexes, now, &mut note)))
            {
                Ok(rest) if rest.is_empty() => {}
                Ok(rest) => {
                    remote.resize(self.members.len(), Vec::new());
                    remote[member] = rest;
                }
                Err(e) if unreachable(&e) => {
                    failed.extend_from_slice(indexes);
                    failure.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        self.keep_groups(owners);
        if let (Some(udp), false) = (&self.udp, remote.is_empty()) {
            // Over UDP, what is not answered is a miss; only unix-socket members stay on TCP.
            let mut by_udp = vec![Vec::new(); remote.len()];
            for (member, indexes) in remote.iter_mut().enumerate() {
                if udp.serves(member) {
                    by_udp[member] = std::mem::take(indexes);
                }
            }
            let mut found = Hits::default();
            self.udp_get(keys, by_udp, &mut found);
            found.iter().for_each(|(i, item)| note(i, item));
        }
        let requests = chunked(remote, |_, chunk| {
            let mut bytes = Vec::new();
            encode_retrieval(Op::Gets, 0, chunk.iter().map(|&i| keys[i]), &mut bytes);
            bytes
        });
        // Answers are gathered first: one that fails halfway is dropped whole.
        let mut found = std::mem::take(&mut self.answers);
        found.clear();
        let answers = self.exchange_windowed(requests, |c, request| {
            let (mark, mut next) = (found.mark(), 0);
            let read = c.read_values_each(|key, item| {
                if let Some(i) = in_order(keys, &request.keys, &mut next, key) {
                    found.push(i, item);
                }
            });
            if read.is_err() {
                found.rewind(mark);
            }
            read
        });
        for (request, answer) in answers {
            match answer {
                Ok(()) => {}
                Err(e) if unreachable(&e) => {
                    failed.extend(request.keys);
                    failure.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        found.iter().for_each(|(i, item)| note(i, item));
        if found.worth_keeping() {
            self.answers = found;
        }
        // Keys asked of a copy that cannot be reached are read from their owners below.
        failed.retain(|&i| !from_copy(i));
        if !failed.is_empty() {
            let failed_keys: Vec<&[u8]> = failed.iter().map(|&i| keys[i]).collect();
            match &mut self.gutter {
                Some(gutter) => {
                    self.counters.gutter_reads += failed.len() as u64;
                    // A failing Gutter pool means misses: the caller goes to the database.
                    // Not spread: the Gutter pool's writes do not delete copies.
                    let note_failed: &mut DynHit<'_> = &mut |j, item| note(failed[j], item);
                    let _ = gutter.get_many_routed(&failed_keys, false, note_failed);
                }
                None if self.miss_when_down => self.counters.down_misses += failed.len() as u64,
                None => return Err(failure.expect("a failed key has its error")),
            }
        }
        self.counters.hot_copy_hits += copy_hits;
        if moving {
            // Keys that moved in the transition under way and missed: ask their old owners
            // (a key asked of a copy is asked of its owner below, which does this itself).
            for (i, key) in keys.iter().enumerate() {
                if !was_hit[i] && !from_copy(i) {
                    if let Some(item) = self.read_moved(key) {
                        hit(i, item.as_ref());
                    }
                }
            }
        }
        if !copy_of.is_empty() {
            let missed: Vec<usize> = (0..keys.len()).filter(|&i| from_copy(i) && !was_hit[i]).collect();
            self.refill_copies(keys, &missed, &copy_of, &mut hit)?;
        }
        Ok(())
    }

    /// Sets every `(key, value)` with `flags` and `exptime`, in parallel across servers;
    /// returns the keys that were not stored (their server unreachable, or it refused). Keys
    /// whose server is unreachable go to the Gutter pool with the Gutter TTL, if there is one.
    pub fn set_many(&mut self, items: &[(&[u8], &[u8])], flags: u32, exptime: i64) -> Result<Vec<Vec<u8>>> {
        let keys: Vec<&[u8]> = items.iter().map(|(k, _)| *k).collect();
        let owners = self.owners(&keys)?;
        let requests = chunked(owners, |_, chunk| {
            let mut bytes = Vec::new();
            for &i in chunk {
                let body = Body::Store { flags, data: items[i].1, extra: None };
                encode_request(Op::Set, items[i].0, exptime, &body, &mut bytes);
            }
            bytes
        });
        let (mut not_stored, unreachable_keys) =
            self.per_key(requests, stored_answer, |s| *s == Stored::Stored);
        keys.iter().for_each(|k| {
            self.forget_moved(k);
            self.forget_hot_copies(k);
        });
        if !unreachable_keys.is_empty() {
            match &mut self.gutter {
                Some(gutter) => {
                    self.counters.gutter_writes += unreachable_keys.len() as u64;
                    let ttl = clamp_exptime(exptime, self.gutter_ttl);
                    let rest: Vec<(&[u8], &[u8])> = unreachable_keys.iter().map(|&i| items[i]).collect();
                    let failed = gutter.set_many(&rest, flags, ttl)?;
                    return Ok(not_stored.into_iter().map(|i| keys[i].to_vec()).chain(failed).collect());
                }
                None => not_stored.extend(unreachable_keys),
            }
        }
        Ok(not_stored.into_iter().map(|i| keys[i].to_vec()).collect())
    }

    /// Deletes every key, in parallel across servers; returns the keys whose delete was not
    /// carried out (their server unreachable and no Gutter pool to take it). A key that was not
    /// there counts as deleted.
    pub fn delete_many(&mut self, keys: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        let owners = self.owners(keys)?;
        let requests = chunked(owners, |_, chunk| {
            let mut bytes = Vec::new();
            for &i in chunk {
                encode_request(Op::Delete, keys[i], 0, &Body::<&[u8]>::Delete { hold: None }, &mut bytes);
            }
            bytes
        });
        let (mut failed, unreachable_keys) = self.per_key(requests, deleted_answer, |_| true);
        keys.iter().for_each(|k| {
            self.forget_moved(k);
            self.forget_hot_copies(k);
        });
        if !unreachable_keys.is_empty() {
            match &mut self.gutter {
                Some(gutter) => {
                    self.counters.gutter_writes += unreachable_keys.len() as u64;
                    let rest: Vec<&[u8]> = unreachable_keys.iter().map(|&i| keys[i]).collect();
                    let gutter_failed = gutter.delete_many(&rest)?;
                    return Ok(failed.into_iter().map(|i| keys[i].to_vec()).chain(gutter_failed).collect());
                }
                None => failed.extend(unreachable_keys),
            }
        }
        Ok(failed.into_iter().map(|i| keys[i].to_vec()).collect())
    }

    /// Checks every key and groups their indexes by owner, in the lists kept from the last
    /// multiget ([`Pool::keep_groups`]): cleared, not allocated again, so a batch read from
    /// shared memory pays for placing its keys, not for lists to hold them.
    fn owners(&mut self, keys: &[&[u8]]) -> Result<Vec<Vec<usize>>> {
        let mut owner_of = std::mem::take(&mut self.owner_of);
        owner_of.clear();
        owner_of.resize(keys.len(), 0);
        let placed = self.owner_each(keys, &mut owner_of);
        let mut groups = std::mem::take(&mut self.groups);
        groups.resize_with(self.members.len(), Vec::new);
        groups.iter_mut().for_each(Vec::clear);
        if placed.is_ok() {
            owner_of.iter().enumerate().for_each(|(i, &owner)| groups[owner as usize].push(i));
        }
        if owner_of.capacity() <= KEPT_KEYS {
            self.owner_of = owner_of;
        }
        placed.map(|()| groups)
    }

    /// Keeps `groups` ([`Pool::owners`]) for the next batch, unless a batch of more than
    /// [`KEPT_KEYS`] made them large: that memory goes back to the allocator.
    fn keep_groups(&mut self, groups: Vec<Vec<usize>>) {
        if groups.iter().map(Vec::capacity).sum::<usize>() <= KEPT_KEYS {
            self.groups = groups;
        }
    }

    /// Runs requests whose answer is one line per key; returns the indexes of keys whose line
    /// was not `ok` (or was an error answer), and of keys whose server was unreachable.
    fn per_key<T>(
        &mut self,
        requests: Vec<Request>,
        answer: fn(&[u8]) -> Result<T>,
        ok: impl Fn(&T) -> bool,
    ) -> (Vec<usize>, Vec<usize>) {
        let (mut refused, mut unreachable_keys) = (Vec::new(), Vec::new());
        let answers = self.exchange_windowed(requests, |c, request| {
            // Every key's line is read, even after an error answer, to keep the stream in step.
            request.keys.iter().map(|_| c.read_line(|line| Ok(answer(line)))).collect::<Result<Vec<_>>>()
        });
        for (request, lines) in answers {
            match lines {
                Ok(lines) => {
                    for (&i, line) in request.keys.iter().zip(lines) {
                        if !line.as_ref().is_ok_and(&ok) {
                            refused.push(i);
                        }
                    }
                }
                Err(e) if unreachable(&e) => unreachable_keys.extend(request.keys),
                Err(_) => refused.extend(request.keys),
            }
        }
        (refused, unreachable_keys)
    }

    /// Sends `requests` and reads their answers with `read`, keeping at most the window's size
    /// outstanding; answers are read in the order requests were sent, so several requests to
    /// one server stay in step with its connection. A server that fails fails its remaining
    /// requests of the batch without another try; a timeout halves the window, an answer in
    /// time widens it by one.
    fn exchange_windowed<R>(
        &mut self,
        requests: Vec<Request>,
        mut read: impl FnMut(&mut Client, &Request) -> Result<R>,
    ) -> Vec<(Request, Result<R>)> {
        if requests.is_empty() {
            return Vec::new(); // a batch read wholly from shared memory sets nothing up
        }
        let mut pending = requests.into_iter();
        let mut outstanding: VecDeque<Request> = VecDeque::new();
        let mut failed = vec![false; self.members.len()];
        let mut answers = Vec::new();
        let (client, retry) = (self.client.clone(), self.retry_interval);
        loop {
            while outstanding.len() < self.window.size() {
                let Some(request) = pending.next() else { break };
                if failed[request.member] {
                    let down = Error::Down(self.members[request.member].address.clone());
                    answers.push((request, Err(down)));
                    continue;
                }
                match self.members[request.member].run(&client, retry, |c| c.send(&request.bytes)) {
                    Ok(()) => outstanding.push_back(request),
                    Err(e) => {
                        failed[request.member] = unreachable(&e);
                        answers.push((request, Err(e)));
                    }
                }
            }
            let Some(request) = outstanding.pop_front() else { break };
            let member = &mut self.members[request.member];
            let answer = if failed[request.member] {
                Err(Error::Down(member.address.clone()))
            } else {
                member.run(&client, retry, |c| read(c, &request))
            };
            match &answer {
                Ok(_) => self.window.on_success(),
                Err(e) if e.is_timeout() => {
                    self.counters.timeouts += 1;
                    self.window.on_timeout();
                    failed[request.member] = true;
                }
                Err(e) => failed[request.member] |= unreachable(e),
            }
            answers.push((request, answer));
        }
        answers
    }
}

/// Where `key` is among `asked` (indexes into `keys`, those of one request), searched from
/// `*next` on since a server answers hits in the order they were asked (and from the start for
/// one that did not); moves `*next` past it. `None` for a key that was not asked.
pub(super) fn in_order(keys: &[&[u8]], asked: &[usize], next: &mut usize, key: &[u8]) -> Option<usize> {
    let from_next = asked[*next..].iter().position(|&i| keys[i] == key).map(|p| p + *next);
    let p = from_next.or_else(|| asked.iter().position(|&i| keys[i] == key))?;
    *next = p + 1;
    Some(asked[p])
}

/// One request per member and run of up to [`KEYS_PER_REQUEST`] of its keys, each made by
/// `encode(member, keys)`.
fn chunked(per_member: Vec<Vec<usize>>, encode: impl Fn(usize, &[usize]) -> Vec<u8>) -> Vec<Request> {
    let mut requests = Vec::new();
    for (member, keys) in per_member.into_iter().enumerate() {
        for chunk in keys.chunks(KEYS_PER_REQUEST) {
            requests.push(Request { member, bytes: encode(member, chunk), keys: chunk.to_vec() });
        }
    }
    requests
}
