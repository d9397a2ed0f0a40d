//! Deletes for the near caches of the router's region (`"near_caches"`,
//! docs/design/near-cache.md): every change a client makes through this router (any request
//! but a read or `flush_all`) is handed, as a delete of its key, to each listed near cache
//! (the one it came through too: idempotent), off the client's answer path.
//!
//! ```text
//!  client's read of requests ──► routed, the pool answers (proxy.rs: carry_out)
//!        │ the changed keys of the read: "delete k1\r\ndelete k2\r\n…" (md <base64> b for a
//!        │ key no text command can carry), one record per near cache, appended to its spool
//!        │ (<spool dir>/near/, written before the client's answer, not fsync'd)
//!        ▼
//!  client answered ──► spool's delivery thread: pipelined, up to 64 records a write, to the
//!        near cache's invalidation listener, which drops its copy and forwards nothing
//!        (a near cache that is down gets them when it is back)
//! ```
//!
//! A router killed with `kill -9` loses none: the records are in the spool files (in the
//! kernel's page cache, which outlives the process) before the client is answered, and the
//! next router delivers what the offset files say is left. A crash of the router's machine
//! may lose the last ones (not flushed to the disk: an fsync per client read would put the
//! disk on the answer path); a near copy then lives until its `--near-ttl`.

use crate::config::near::NearCache;
use crate::request::{Op, Request};
use shoal_spool::Spools;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The near caches' spools and counters.
pub struct NearDelivery {
    pub spools: Arc<Spools>,
    /// Deletes appended to near caches' spools.
    pub spooled: AtomicU64,
    /// Deletes a full spool refused (the near cache unreachable far too long).
    pub lost: AtomicU64,
}

impl NearDelivery {
    pub fn new(spools: Arc<Spools>) -> NearDelivery {
        NearDelivery { spools, spooled: AtomicU64::new(0), lost: AtomicU64::new(0) }
    }

    /// Hands `deletes` (`count` of them, one answer each) to every near cache of `caches` —
    /// the one the change came through too: a client on that host may have written through
    /// the router directly, and a delete of a key the near cache already dropped costs nothing.
    pub fn deliver(&self, caches: &[NearCache], deletes: &[u8], count: u32) {
        if count == 0 {
            return;
        }
        for cache in caches {
            match self.spools.append_batch(&cache.address, deletes, count, 0) {
                Ok(_) => self.spooled.fetch_add(u64::from(count), Ordering::Relaxed),
                Err(e) => {
                    if self.lost.fetch_add(u64::from(count), Ordering::Relaxed) == 0 {
                        eprintln!(
                            "shoal router: near cache {}: {e} (its copies live until --near-ttl)",
                            cache.address
                        );
                    }
                    0
                }
            };
        }
    }
}

/// Adds the delete standing for `request` to `deletes` if it changes its key; true if it did.
pub fn note_change(request: &Request, deletes: &mut Vec<u8>) -> bool {
    if request.op.is_read() || request.op == Op::FlushAll {
        return false;
    }
    deletes.extend_from_slice(&crate::ctx::invalidation(request, false));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_become_deletes_of_the_routed_key() {
        let mut deletes = Vec::new();
        assert!(note_change(&Request::delete(b"/a/b/k", 5), &mut deletes));
        let mut get = Request::delete(b"k2", 0);
        get.op = Op::Get;
        assert!(!note_change(&get, &mut deletes));
        assert_eq!(deletes, b"delete k\r\n");
    }
}
