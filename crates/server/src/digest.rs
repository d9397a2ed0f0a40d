//! The server's Proteus digest (`--digest-keys`): a counting Bloom filter of the keys the
//! region holds, kept by the region writer's key observer (a key counts once however often it
//! is overwritten; it leaves when deleted, evicted or reclaimed), fetched whole with the
//! `digest` extension command so a router or client in a transition can ask the old owner
//! only for keys it may still hold (docs/PROTOCOL.md).
//!
//! One mutex guards the counters: an update is a few nibble changes, far shorter than the
//! bucket lock it is taken under, and each worker takes it once per new or departing key.

use shoal_region::KeyObserver;
use shoal_route::digest::Digest;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The digest and what it holds.
#[derive(Debug)]
pub struct ServerDigest {
    digest: Mutex<Digest>,
    /// Keys added less keys removed.
    keys: AtomicU64,
}

/// The writer's observer, feeding a shared [`ServerDigest`].
struct Feed(Arc<ServerDigest>);

impl KeyObserver for Feed {
    fn key_added(&self, key: &[u8]) {
        self.0.digest.lock().unwrap_or_else(|p| p.into_inner()).insert(key);
        self.0.keys.fetch_add(1, Ordering::Relaxed);
    }

    fn key_removed(&self, key: &[u8]) {
        self.0.digest.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
        self.0.keys.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ServerDigest {
    /// A digest sized for `expected_keys` at `false_positive_rate` (Proteus's formulas in
    /// `shoal_route::digest`), fed by `writer` from now on with every key it already holds.
    pub fn attach(
        writer: &shoal_region::Writer,
        expected_keys: u64,
        false_positive_rate: f64,
    ) -> Result<Arc<ServerDigest>, String> {
        let digest = Digest::sized(expected_keys, false_positive_rate)
            .map_err(|e| format!("--digest-keys {expected_keys} --digest-fp {false_positive_rate}: {e}"))?;
        let shared = Arc::new(ServerDigest { digest: Mutex::new(digest), keys: AtomicU64::new(0) });
        writer
            .observe_keys(Box::new(Feed(shared.clone())))
            .map_err(|_| "the region already has a key observer".to_string())?;
        Ok(shared)
    }

    /// The snapshot `digest` answers with.
    pub fn snapshot(&self) -> Vec<u8> {
        self.digest.lock().unwrap_or_else(|p| p.into_inner()).to_snapshot()
    }

    /// Keys counted in, for `stats`.
    pub fn keys(&self) -> u64 {
        self.keys.load(Ordering::Relaxed)
    }

    /// Counters stuck at their maximum (they never count down: a source of false positives).
    pub fn saturated(&self) -> u64 {
        self.digest.lock().unwrap_or_else(|p| p.into_inner()).saturated_counters()
    }

    /// The snapshot's size in bytes.
    pub fn bytes(&self) -> u64 {
        let digest = self.digest.lock().unwrap_or_else(|p| p.into_inner());
        28 + digest.counters().div_ceil(2)
    }
}
