//! Reads that clients served themselves through shared memory, folded into the server.
//!
//! A client that reads the region directly registers its hints area for its connection, either
//! by path (`shm hints <path>`: the server opens `/proc/<pid>/fd/<n>`, which works only for a
//! client of the server's own user) or by handing over the descriptor (`shm handoff` gives the
//! connection a one-time token, which the client presents on the handoff socket together with
//! the memfd: `crate::handoff`). See `shoal_region::hints` for the area itself. Every 100 ms the clock
//! thread drains each area: its gets, hits and misses are added to the server's counters and
//! its tenant's (so `stats` shows them within a second), and every item it hit is marked read
//! in the index of the tenant whose region the client reads, as a network get would mark it,
//! so eviction keeps it. The area goes when its connection closes, after one last drain.
//!
//! The tenants' curves see local reads too (issue 27): each fold first publishes every
//! tenant's sampling threshold in its region's header (0 when it has no curve), hands a new
//! area's sampled reads to its tenant's curve (`CurveTracker::attach_local`, which drains them
//! from then on; the `curves` thread, `spawn_drainer` in launch.rs, hands them over too,
//! within 10 ms, and drains them between folds) and adds the reads the client did not sample to the curve's count of
//! screened-out references. The area's tenant is the one its connection reads, fixed by the
//! server: a client cannot report reads into another tenant's curve.

use crate::counters::Counters;
use crate::tenants::{TenantCounters, Tenants};
use shoal_proto::handoff::Token;
use shoal_region::hints::HintsReader;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where reads that clients served themselves are counted: the server's row of counters for
/// them, and its tenants' row ([`crate::state::Shared::local_reads`]).
#[derive(Clone, Copy)]
pub struct LocalReads<'a> {
    pub counters: &'a Counters,
    pub tenant_counters: &'a [TenantCounters],
}

/// The registered hints areas, by connection, with the tenant whose region they read.
#[derive(Default)]
pub struct Hints {
    areas: Mutex<BTreeMap<u64, (usize, HintsReader)>>,
    /// Tokens `shm handoff` gave out, each naming the connection it was given to and that
    /// connection's tenant; at most one per connection, removed when used or when the
    /// connection closes. Locked before `areas`.
    offers: Mutex<HashMap<Token, (u64, usize)>>,
    /// The handoff socket, if the server has one (`crate::handoff`).
    handoff: Option<PathBuf>,
    /// Gets and hits that clients served from the region themselves (folded in so far):
    /// they are in `cmd_get` and `get_hits` too; these say how many were local.
    pub local_gets: std::sync::atomic::AtomicU64,
    pub local_hits: std::sync::atomic::AtomicU64,
}

impl Hints {
    /// No areas yet; `handoff` is the socket on which clients hand over their areas.
    pub fn new(handoff: Option<PathBuf>) -> Hints {
        Hints { handoff, ..Hints::default() }
    }

    /// Registers (or replaces) connection `conn`'s hints area at `path`, for reads of
    /// tenant `tenant`'s region.
    pub fn register(&self, conn: u64, tenant: usize, path: &Path) -> Result<(), String> {
        let area = HintsReader::open(path)?;
        self.areas.lock().unwrap_or_else(|p| p.into_inner()).insert(conn, (tenant, area));
        Ok(())
    }

    /// A fresh one-time token for connection `conn`, which reads tenant `tenant`'s region
    /// (replacing one it was given before), and the handoff socket to present it on.
    pub fn offer(&self, conn: u64, tenant: usize) -> Result<(Token, &Path), String> {
        let socket = self.handoff.as_deref().ok_or("this server has no handoff socket (see its log)")?;
        let mut token = Token([0; 16]);
        File::open("/dev/urandom")
            .and_then(|mut random| random.read_exact(&mut token.0))
            .map_err(|e| format!("no random token: /dev/urandom: {e}"))?;
        let mut offers = self.offers.lock().unwrap_or_else(|p| p.into_inner());
        offers.retain(|_, (offered_to, _)| *offered_to != conn);
        offers.insert(token, (conn, tenant));
        Ok((token, socket))
    }

    /// Registers (or replaces) `area` for the connection `token` was given to, and uses the
    /// token up. Fails for a token that is unknown, used, or whose connection has closed.
    pub fn redeem(&self, token: &Token, area: File) -> Result<(), String> {
        let area = HintsReader::from_file(area)?;
        let mut offers = self.offers.lock().unwrap_or_else(|p| p.into_inner());
        let (conn, tenant) =
            offers.remove(token).ok_or("no connection was given this token (or it was used)")?;
        // Still holding `offers`: the connection cannot be unregistered in between.
        self.areas.lock().unwrap_or_else(|p| p.into_inner()).insert(conn, (tenant, area));
        Ok(())
    }

    /// Publishes each tenant's sampling threshold, drains every area into the counters, the
    /// indexes and the curves.
    pub fn fold(&self, tenants: &Tenants, into: LocalReads<'_>) {
        for tenant in tenants.all() {
            tenant.writer.publish_curve_threshold(tenant.curve.as_ref().map_or(0, |c| c.threshold()));
        }
        self.attach_samples(tenants);
        for (tenant, area) in self.areas.lock().unwrap_or_else(|p| p.into_inner()).values_mut() {
            self.drain(*tenant, area, tenants, into);
        }
        let now = tenants.clock();
        for curve in tenants.all().iter().filter_map(|t| t.curve.as_ref()) {
            curve.drain_local(now);
        }
    }

    /// Hands each new area's sampled reads to the curve of the tenant its connection reads
    /// (once per area; the curve drains them from then on).
    pub fn attach_samples(&self, tenants: &Tenants) {
        for (&conn, (tenant, area)) in self.areas.lock().unwrap_or_else(|p| p.into_inner()).iter_mut() {
            let t = tenants.get(*tenant);
            if let (Some(curve), Some(samples)) = (&t.curve, area.samples()) {
                curve.attach_local(conn, samples, t.writer.layout().max_item_bytes);
            }
        }
    }

    /// Drops connection `conn`'s area, if it has one, after draining it a last time.
    pub fn unregister(&self, conn: u64, tenants: &Tenants, into: LocalReads<'_>) {
        let mut offers = self.offers.lock().unwrap_or_else(|p| p.into_inner());
        offers.retain(|_, (offered_to, _)| *offered_to != conn);
        let removed = self.areas.lock().unwrap_or_else(|p| p.into_inner()).remove(&conn);
        drop(offers);
        if let Some((tenant, mut area)) = removed {
            self.drain(tenant, &mut area, tenants, into);
            if let Some(curve) = &tenants.get(tenant).curve {
                curve.detach_local(conn, tenants.clock());
            }
        }
    }

    /// How many areas are registered.
    pub fn len(&self) -> usize {
        self.areas.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Folds one area into the counters and its tenant's index.
    fn drain(&self, tenant: usize, area: &mut HintsReader, tenants: &Tenants, into: LocalReads<'_>) {
        let writer = &tenants.get(tenant).writer;
        let drained = area.drain(|location| writer.mark_read(location));
        let counted = drained.counts;
        let counters = into.counters;
        let mine = &into.tenant_counters[tenant];
        Counters::add(&mine.curve_unsampled, drained.unsampled);
        Counters::add(&mine.cmd_get, counted.gets);
        Counters::add(&mine.get_hits, counted.hits);
        Counters::add(&mine.get_misses, counted.misses);
        Counters::add(&self.local_gets, counted.gets);
        Counters::add(&self.local_hits, counted.hits);
        Counters::add(&counters.cmd_get, counted.gets);
        Counters::add(&counters.get_hits, counted.hits);
        Counters::add(&counters.get_misses, counted.misses);
        Counters::add(&counters.get_expired, counted.expired);
        Counters::add(&counters.get_flushed, counted.flushed);
    }
}
