//! Power-proportional pools (Proteus, issue 17): a `proteus` pool whose first `active` servers
//! own the keys, and the smooth transition (the paper's Algorithm 2) after `active` changed.
//!
//! ```text
//!  pool { "servers": [s1 … sN] (the provisioning order), "provisioning": "state.json" }
//!  state.json { "active": n, "transition": { "from": n0, "until": <unix seconds> } }
//!                          written by `shoal provision` (or the pool's own "active"/"transition")
//!
//!  get  ──► new owner (n active) ── hit ─────────────────────────────► answer
//!                 └─ miss, key moved ── old owner's digest lacks it ──► miss (database)
//!                                   └─ else get from old owner (n0) ── hit: `add` to new owner
//!  write ─► new owner, then `delete` on the old owner (its copy must not come back)
//! ```
//!
//! The transition state lives in the provisioner's state file (which the router follows as it
//! follows its configuration), not in the router: a router that restarts or reloads
//! mid-transition carries on exactly where the file says, and a router never guesses where a
//! transition started. Old owners' digests are fetched once per loaded
//! configuration, as the transition is first seen (a key set on an old owner after that is
//! set on its new owner anyway); without a digest the old owner is simply asked.
//!
//! This module holds what such a pool is (its active count, its transition, the old owners'
//! digests, its counters); `route.rs` carries requests out on it (`route::proteus`).

use shoal_route::digest::Digest;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

/// How long a value copied from a key's old owner to its new one lives (the router cannot
/// see the original's expiry); the hot data that matters is read again well within it.
pub const MIGRATE_TTL: i64 = 300;

/// A `proteus` pool's active servers, and the transition it is in, if any.
#[derive(Debug)]
pub struct Provisioned {
    /// The pool's name (for `stats`).
    pub pool: String,
    /// Servers on: the first `active` of the pool's list.
    pub active: usize,
    /// The transition from another active count, while it lasts.
    pub transition: Option<Transition>,
    /// Every server's address, in the pool's order (digests are fetched from them).
    pub addresses: Vec<String>,
    /// Reads of moved keys answered from their old owner (and copied to the new one).
    pub migrated: AtomicU64,
    /// Misses of moved keys that did not ask the old owner: its digest lacked the key.
    pub digest_skips: AtomicU64,
}

/// A transition from `from` active servers, until `until` (the drain period's end).
#[derive(Debug)]
pub struct Transition {
    /// The active count before.
    pub from: usize,
    /// When the transition ends: old owners are no longer asked, and a server turned off may
    /// stop.
    pub until: SystemTime,
    /// The old owners' digests (`None`: none fetched, ask the old owner), fetched once.
    digests: OnceLock<Vec<Option<Digest>>>,
}

impl Transition {
    /// A transition from `from` active servers lasting until `until`.
    pub fn new(from: usize, until: SystemTime) -> Transition {
        Transition { from, until, digests: OnceLock::new() }
    }

    /// Whether the transition still runs.
    pub fn in_progress(&self) -> bool {
        SystemTime::now() < self.until
    }

    /// Whether the digest of old owner `server` says it cannot hold `key`.
    pub fn digest_lacks(&self, server: usize, key: &[u8]) -> bool {
        let digests = self.digests.get();
        digests.and_then(|d| d.get(server)).and_then(Option::as_ref).is_some_and(|d| !d.may_contain(key))
    }
}

impl Provisioned {
    /// Fetches the old owners' digests of a transition in progress (once; blocking, with
    /// `timeout` per server). Called as a configuration is put in service, never by
    /// `--validate`.
    pub fn fetch_digests(&self, timeout: Duration) {
        let Some(t) = self.transition.as_ref().filter(|t| t.in_progress()) else { return };
        t.digests.get_or_init(|| {
            let options = shoal_client::Options {
                connect_timeout: Some(timeout),
                io_timeout: Some(timeout),
                local: false,
            };
            self.addresses[..t.from]
                .iter()
                .map(|address| {
                    shoal_client::Client::connect(address, options.clone()).ok()?.digest().ok().flatten()
                })
                .collect()
        });
    }

    /// Whether a transition is under way (old owners may be asked).
    pub fn in_transition(&self) -> bool {
        self.transition.as_ref().is_some_and(Transition::in_progress)
    }

    /// `stats` lines for this pool.
    pub fn stats(&self) -> String {
        let transition = match self.transition.as_ref().filter(|t| t.in_progress()) {
            Some(t) => format!("from={}", t.from),
            None => "none".to_string(),
        };
        format!(
            "{} active={} transition={transition} migrated={} digest_skips={}",
            self.pool,
            self.active,
            self.migrated.load(Ordering::Relaxed),
            self.digest_skips.load(Ordering::Relaxed)
        )
    }
}
