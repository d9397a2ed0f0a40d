//! Remote markers (Scaling Memcache §5.1), for web servers in a *replica* region, whose
//! database is a lagging replica of the master region's:
//!
//! ```text
//!   write:  set_remote_marker(k) ─► write the master database (its transaction names k) ─► delete(k)
//!   read:   get(k) miss ─► has_remote_marker(k)? ─ yes ─► read the master database
//!                                                 └ no ──► read the local replica
//!   later:  the replica applies the write ─► this region's invalidator (--wait-for-replica,
//!           --remote-markers) deletes k and its marker
//! ```
//!
//! A marker is an ordinary item under [`remote_marker_key`], so it lives on the server that
//! owns the marker key and needs nothing from the server but `set`, `get` and `delete`.

use super::Pool;
use crate::invalidation::remote_marker_key;
use crate::Result;

impl Pool {
    /// Marks `key` as written from this region until its invalidation arrives (or `ttl`
    /// seconds pass, a bound for a lost invalidation; 0 keeps it until then). Set it
    /// *before* writing the master database.
    pub fn set_remote_marker(&mut self, key: &[u8], ttl: i64) -> Result<()> {
        self.set(&remote_marker_key(key), b"1", 0, ttl).map(|_| ())
    }

    /// Whether `key` carries a remote marker: a read that missed should then go to the
    /// master database, since the local replica may not have the write yet.
    pub fn has_remote_marker(&mut self, key: &[u8]) -> Result<bool> {
        Ok(self.get(&remote_marker_key(key))?.is_some())
    }
}
