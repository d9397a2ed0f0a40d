//! Reads that clients served themselves through shared memory, folded into the server.
//!
//! A client that reads the region directly registers its hints area over its connection
//! (`shm hints <path>`, see `shoal_region::hints` for the area itself). Every 100 ms the clock
//! thread drains each area: its gets, hits and misses are added to the server's counters and
//! its tenant's (so `stats` shows them within a second), and every item it hit is marked read
//! in the index of the tenant whose region the client reads, as a network get would mark it,
//! so eviction keeps it. The area goes when its connection closes, after one last drain.

use crate::server::Shared;
use crate::stats::Counters;
use shoal_region::hints::HintsReader;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

/// The registered hints areas, by connection, with the tenant whose region they read.
#[derive(Default)]
pub struct Hints {
    areas: Mutex<BTreeMap<u64, (usize, HintsReader)>>,
    /// Gets and hits that clients served from the region themselves (folded in so far):
    /// they are in `cmd_get` and `get_hits` too; these say how many were local.
    pub local_gets: std::sync::atomic::AtomicU64,
    pub local_hits: std::sync::atomic::AtomicU64,
}

impl Hints {
    /// Registers (or replaces) connection `conn`'s hints area at `path`, for reads of
    /// tenant `tenant`'s region.
    pub fn register(&self, conn: u64, tenant: usize, path: &Path) -> Result<(), String> {
        let area = HintsReader::open(path)?;
        self.areas.lock().unwrap_or_else(|p| p.into_inner()).insert(conn, (tenant, area));
        Ok(())
    }

    /// Drains every area into the counters and the indexes.
    pub fn fold(&self, shared: &Shared) {
        for (tenant, area) in self.areas.lock().unwrap_or_else(|p| p.into_inner()).values_mut() {
            self.drain(*tenant, area, shared);
        }
    }

    /// Drops connection `conn`'s area, if it has one, after draining it a last time.
    pub fn unregister(&self, conn: u64, shared: &Shared) {
        let removed = self.areas.lock().unwrap_or_else(|p| p.into_inner()).remove(&conn);
        if let Some((tenant, mut area)) = removed {
            self.drain(tenant, &mut area, shared);
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
    fn drain(&self, tenant: usize, area: &mut HintsReader, shared: &Shared) {
        let writer = &shared.tenants.get(tenant).writer;
        let counted = area.drain(|location| writer.mark_read(location));
        let counters = shared.local_reads();
        let mine = &shared.tenant_counters[shared.settings.threads + 1][tenant];
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
