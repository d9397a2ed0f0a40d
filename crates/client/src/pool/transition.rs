//! Proteus's smooth transitions (its Algorithm 2) in the client: a pool placed by `proteus`
//! runs with its first `n` servers active; turning servers on or off changes `n`, and for a
//! while both the old and the new owner of a moved key are asked.
//!
//! ```text
//!   read  ──► new owner ── hit ──► done
//!                │ miss, and the key moved
//!                ▼
//!             old owner ── hit ──► copied to the new owner (add, `migrate_ttl`) ──► done
//!                │ miss
//!                ▼
//!             a miss: the caller goes to the database
//!   write ──► new owner, then a delete on the old owner (so the old copy can never come back)
//! ```
//!
//! Proteus asks the old owner only when that server's digest (a counting Bloom filter of its
//! keys) says it may hold the key: a transition starts by fetching the digest of every server
//! that may be an old owner (`shoal server --digest-keys`; `digest` command). An old owner
//! without a digest (stock memcached, or a Shoal server without `--digest-keys`) is asked on
//! every miss of a moved key.

use super::Pool;
use crate::client::Item;
use crate::error::{Error, Result};

/// Where a pool's Proteus placement stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Active {
    /// Servers on now (the first `now` of the pool's list).
    pub now: usize,
    /// Servers on before the transition in progress, if one is.
    pub before: Option<usize>,
}

impl Pool {
    /// Sets how many of the pool's servers (the first `n`, in provisioning order) are on. A
    /// change starts a transition from the previous count: until [`Pool::finish_transition`],
    /// reads that miss on a key's new owner ask its old one. Only for `proteus` pools.
    pub fn set_active(&mut self, n: usize) -> Result<()> {
        let ring = self.placement.proteus().ok_or_else(|| {
            Error::Pool(shoal_route::Error::UnknownHashing(format!(
                "{} (active servers need the proteus hashing)",
                self.placement.hashing()
            )))
        })?;
        if n == 0 || n > ring.servers() {
            return Err(Error::Pool(shoal_route::Error::BadActive { active: n, servers: ring.servers() }));
        }
        let now = self.active.map_or(ring.servers(), |a| a.now);
        self.active = Some(Active { now: n, before: (n != now).then_some(now) });
        if n != now {
            // A hot key's replicas move with the active set; the old ones' copies are deleted
            // by writes until they have expired (hot.rs).
            self.hot_view_left(now);
        }
        // The old owners' digests, taken as the transition starts: a key set on an old owner
        // after this goes to its new owner anyway.
        let (client, retry) = (&self.client, self.retry_interval);
        self.digests = (0..now)
            .map(|i| {
                (n != now)
                    .then(|| self.members[i].run(client, retry, |c| c.digest()).ok().flatten())
                    .flatten()
            })
            .collect();
        Ok(())
    }

    /// Ends the transition in progress: only the new owners are asked from now on.
    pub fn finish_transition(&mut self) {
        if let Some(active) = &mut self.active {
            active.before = None;
        }
        self.digests.clear();
    }

    /// Follows the state file `shoal provision --state` writes (see [`crate::provisioning`]):
    /// a changed active count starts a transition, the end of the file's transition ends
    /// this pool's. Call it as often as the application likes (every second is plenty); a
    /// missing file changes nothing. The file must list this pool's servers in its order.
    pub fn follow_provisioning(&mut self, path: &std::path::Path) -> Result<()> {
        let Some(state) = crate::provisioning::State::load(path).map_err(Error::Provisioning)? else {
            return Ok(());
        };
        let ours: Vec<&str> = self.placement.servers().iter().map(|s| s.address.as_str()).collect();
        if state.servers != ours {
            return Err(Error::Provisioning(format!(
                "{} is for the servers {:?}, not this pool's {ours:?}",
                path.display(),
                state.servers
            )));
        }
        let running = state.transition.is_some_and(|t| std::time::SystemTime::now() < t.until);
        match self.active {
            Some(a) if a.now == state.active => {
                if a.before.is_some() && !running {
                    self.finish_transition();
                }
                Ok(())
            }
            // A pool that has not followed yet starts at the file's count, with no transition.
            None if !running => {
                self.set_active(state.active)?;
                self.finish_transition();
                Ok(())
            }
            _ => self.set_active(state.active),
        }
    }

    /// The active servers and the transition in progress (`None`: every server, no Proteus).
    pub fn active(&self) -> Option<Active> {
        self.active
    }

    /// The owner of `key` with `n` servers on (the placement's own owner without Proteus).
    pub(super) fn owner_with(&self, n: Option<usize>, key: &[u8]) -> usize {
        match (n, self.placement.proteus()) {
            (Some(n), Some(ring)) => ring.owner_with(n, key).expect("n was checked by set_active"),
            _ => self.placement.owner(key),
        }
    }

    /// The key's owner before the transition in progress, if it differs from its owner now.
    pub(super) fn previous_owner(&self, key: &[u8]) -> Option<usize> {
        let active = self.active?;
        let before = self.owner_with(Some(active.before?), key);
        (before != self.owner_with(Some(active.now), key)).then_some(before)
    }

    /// A read that missed: from the key's old owner, copied to its new owner when found.
    pub(super) fn read_moved(&mut self, key: &[u8]) -> Option<Item> {
        let before = self.previous_owner(key)?;
        if self.digests.get(before).and_then(Option::as_ref).is_some_and(|d| !d.may_contain(key)) {
            self.counters.digest_skips += 1;
            return None;
        }
        let (client, retry) = (&self.client, self.retry_interval);
        let item = self.members[before].run(client, retry, |c| c.get(key)).ok().flatten()?;
        let now = self.owner_with(self.active.map(|a| a.now), key);
        let ttl = self.migrate_ttl;
        // Best effort: a copy that fails leaves the next read to ask the old owner again.
        let _ = self.members[now].run(client, retry, |c| c.add(key, &item.value, item.flags, ttl));
        self.counters.migrated += 1;
        Some(item)
    }

    /// After a write to the key's new owner: the old owner's copy goes, so a later miss on the
    /// new owner cannot bring an older value back.
    pub(super) fn forget_moved(&mut self, key: &[u8]) {
        if let Some(before) = self.previous_owner(key) {
            let (client, retry) = (&self.client, self.retry_interval);
            let _ = self.members[before].run(client, retry, |c| c.delete(key));
        }
    }
}
