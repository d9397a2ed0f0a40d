//! Power-proportional pools (Proteus, issue 17): a `proteus` pool whose first `active` servers
//! own the keys, and the smooth transition (the paper's Algorithm 2) after `active` changed.
//!
//! ```text
//!  pool { "servers": [s1 … sN] (the provisioning order), "active": n,
//!         "transition": { "from": n0, "until": <unix seconds> } }     written by `shoal provision`
//!
//!  get  ──► new owner (n active) ── hit ─────────────────────────────► answer
//!                 └─ miss, key moved ── old owner's digest lacks it ──► miss (database)
//!                                   └─ else get from old owner (n0) ── hit: `add` to new owner
//!  write ─► new owner, then `delete` on the old owner (its copy must not come back)
//! ```
//!
//! The transition state lives in the configuration file, not in the router: a router that
//! restarts or reloads mid-transition carries on exactly where the file says, and a router
//! never guesses where a transition started. Old owners' digests are fetched once per loaded
//! configuration, as the transition is first seen (a key set on an old owner after that is
//! set on its new owner anyway); without a digest the old owner is simply asked.

use crate::dest::Ctx;
use crate::request::{Op, Reply, Request};
use crate::route::{copy_on_miss, Child};
use shoal_route::digest::Digest;
use shoal_route::ProteusRing;
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

    /// Whether the digest of old owner `server` says it cannot hold `key`.
    fn digest_lacks(transition: &Transition, server: usize, key: &[u8]) -> bool {
        let digests = transition.digests.get();
        digests.and_then(|d| d.get(server)).and_then(Option::as_ref).is_some_and(|d| !d.may_contain(key))
    }

    /// Carries out `request` on the pool `children` placed by `ring`.
    pub async fn execute(
        &self,
        ring: &ProteusRing,
        children: &[Child],
        request: &Request,
        ctx: &Ctx,
    ) -> Reply {
        let key = request.routed_key();
        let owner = |active: usize| ring.owner_with(active, key).expect("active counts are checked at load");
        let now = &children[owner(self.active)];
        let Some(transition) = self.transition.as_ref().filter(|t| t.in_progress()) else {
            return now.execute(request, ctx).await;
        };
        let before_index = owner(transition.from);
        let before = &children[before_index];
        if std::sync::Arc::ptr_eq(before, now) {
            return now.execute(request, ctx).await;
        }
        match request.op {
            Op::Get | Op::Gets => {
                let first = now.execute(request, ctx).await;
                if first.is_hit() || first.is_error() {
                    return first;
                }
                if Self::digest_lacks(transition, before_index, key) {
                    self.digest_skips.fetch_add(1, Ordering::Relaxed);
                    return first;
                }
                let Some(found) = copy_on_miss(now, before, MIGRATE_TTL, request, ctx).await else {
                    return first;
                };
                self.migrated.fetch_add(1, Ordering::Relaxed);
                found
            }
            op if op.is_read() => now.execute(request, ctx).await,
            Op::FlushAll => now.execute(request, ctx).await,
            _ => {
                // A write: the new owner takes it, and the old owner's copy goes so that a later
                // miss on the new owner cannot bring the older value back.
                let reply = now.execute(request, ctx).await;
                ctx.background(before.clone(), Request::delete(&request.key, request.prefix_len));
                reply
            }
        }
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
