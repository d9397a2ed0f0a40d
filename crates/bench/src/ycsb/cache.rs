//! The cache a YCSB client reads through: one server (`--cache tcp`/`shm`), or a pool of
//! servers (`--cache pool`) placed by Proteus, following a `shoal provision` state file and
//! spreading hot keys over replicas (issue #28: the Fig. 9 run with hot keys, bench/proteus.sh).
//!
//! ```text
//!   get / set / delete ──► Conn::One(Client)      one server
//!                     └──► Conn::Pool(Pool)       shoal_client::Pool, hashing proteus, reads
//!                          over the network (as from other hosts);
//!                          every 200 ms: Pool::follow_provisioning(--provisioning) (active
//!                          count, transitions); --hot-replicas R: hot keys read from R replicas
//! ```

use super::YcsbOptions;
use shoal_client::pool::HotOptions;
use shoal_client::{Client, Hashing, Item, Options, Pool, PoolOptions, Result, Stored};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How often a pool looks at its provisioning state file.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// One YCSB client's connection to its cache.
pub(super) enum Conn {
    /// A single server.
    One(Box<Client>),
    /// A pool, with the state file it follows and when it last looked.
    Pool { pool: Box<Pool>, provisioning: Option<PathBuf>, followed: Instant },
}

impl Conn {
    /// A pool over `--cache-server`'s comma-separated servers, following `--provisioning`.
    pub(super) fn pool(o: &YcsbOptions) -> std::result::Result<Conn, String> {
        let servers: Vec<&str> = o.cache_server.split(',').map(str::trim).collect();
        let options = PoolOptions {
            hashing: Hashing::Proteus,
            // Over the network, as clients on other hosts: a server's hot-key detection sees no
            // reads from shared memory.
            client: Options { local: false, ..Options::default() },
            hot: o.hot_replicas.map(|replicas| HotOptions {
                replicas,
                refresh: Duration::from_secs(2),
                ..HotOptions::default()
            }),
            ..PoolOptions::default()
        };
        let pool =
            Pool::new(&servers, options).map_err(|e| format!("--cache-server {}: {e}", o.cache_server))?;
        let mut conn = Conn::Pool {
            pool: Box::new(pool),
            provisioning: o.provisioning.clone(),
            followed: Instant::now(),
        };
        conn.follow(true).map_err(|e| format!("--provisioning: {e}"))?;
        Ok(conn)
    }

    /// A pool follows its state file when due (`now`: whatever the time).
    fn follow(&mut self, now: bool) -> Result<()> {
        if let Conn::Pool { pool, provisioning: Some(path), followed } = self {
            if now || followed.elapsed() >= FOLLOW_EVERY {
                *followed = Instant::now();
                pool.follow_provisioning(path)?;
            }
        }
        Ok(())
    }

    pub(super) fn get(&mut self, key: &[u8]) -> Result<Option<Item>> {
        self.follow(false)?;
        match self {
            Conn::One(c) => c.get(key),
            Conn::Pool { pool, .. } => pool.get(key),
        }
    }

    pub(super) fn set(&mut self, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Result<Stored> {
        match self {
            Conn::One(c) => c.set(key, value, flags, exptime),
            Conn::Pool { pool, .. } => pool.set(key, value, flags, exptime),
        }
    }

    pub(super) fn delete(&mut self, key: &[u8]) -> Result<bool> {
        match self {
            Conn::One(c) => c.delete(key),
            Conn::Pool { pool, .. } => pool.delete(key),
        }
    }

    pub(super) fn flush_all(&mut self, delay: Option<u32>) -> Result<()> {
        match self {
            Conn::One(c) => c.flush_all(delay),
            Conn::Pool { pool, .. } => pool.flush_all(delay),
        }
    }
}
