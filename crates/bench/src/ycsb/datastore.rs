//! The datastore behind the cache: a YCSB `usertable` (key text primary key, value bytes) in
//! SQLite (embedded, the default) or PostgreSQL (a real server; `bench/ycsb.sh` starts one).

use postgres::NoTls;
use rusqlite::OptionalExtension;
use std::path::PathBuf;

/// Where the records live (`--datastore`).
#[derive(Clone, Debug)]
pub enum DatastoreKind {
    /// A SQLite database file.
    Sqlite(PathBuf),
    /// A PostgreSQL connection string (`host=127.0.0.1 port=5432 user=… dbname=…`).
    Postgres(String),
}

impl std::fmt::Display for DatastoreKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DatastoreKind::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            DatastoreKind::Postgres(conn) => write!(f, "postgres:{conn}"),
        }
    }
}

/// One client's connection to the datastore.
pub enum Datastore {
    /// SQLite, one connection per client (WAL: readers do not wait for the writer).
    Sqlite(rusqlite::Connection),
    /// PostgreSQL, with its statements prepared once.
    Postgres(Box<Postgres>),
}

/// A PostgreSQL connection and its prepared read and write.
pub struct Postgres {
    client: postgres::Client,
    read: postgres::Statement,
    write: postgres::Statement,
}

impl Datastore {
    /// Opens a connection, creating the table if needed.
    pub fn open(kind: &DatastoreKind) -> Result<Datastore, String> {
        match kind {
            DatastoreKind::Sqlite(path) => {
                let c = rusqlite::Connection::open(path)
                    .map_err(|e| format!("cannot open SQLite {}: {e}", path.display()))?;
                c.busy_timeout(std::time::Duration::from_secs(10)).map_err(sqlite)?;
                c.execute_batch(
                    "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;
                     CREATE TABLE IF NOT EXISTS usertable (key TEXT PRIMARY KEY, value BLOB NOT NULL);",
                )
                .map_err(sqlite)?;
                Ok(Datastore::Sqlite(c))
            }
            DatastoreKind::Postgres(conn) => {
                let mut c = postgres::Client::connect(conn, NoTls).map_err(|e| {
                    format!("cannot connect to PostgreSQL at {conn:?}: {e} (is it running? bench/ycsb.sh starts one)")
                })?;
                c.batch_execute(
                    "CREATE TABLE IF NOT EXISTS usertable (key TEXT PRIMARY KEY, value BYTEA NOT NULL)",
                )
                .map_err(pg)?;
                let read = c.prepare("SELECT value FROM usertable WHERE key = $1").map_err(pg)?;
                let write = c
                    .prepare(
                        "INSERT INTO usertable (key, value) VALUES ($1, $2)
                         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    )
                    .map_err(pg)?;
                Ok(Datastore::Postgres(Box::new(Postgres { client: c, read, write })))
            }
        }
    }

    /// Replaces the table's contents with `records` records made by `value_of`, in batches.
    pub fn load(
        &mut self,
        keys: impl Iterator<Item = Vec<u8>>,
        value_of: impl Fn(&[u8]) -> Vec<u8>,
    ) -> Result<(), String> {
        const BATCH: usize = 5000;
        let keys: Vec<Vec<u8>> = keys.collect();
        match self {
            Datastore::Sqlite(c) => {
                c.execute("DELETE FROM usertable", []).map_err(sqlite)?;
                for chunk in keys.chunks(BATCH) {
                    let tx = c.transaction().map_err(sqlite)?;
                    {
                        let mut insert = tx
                            .prepare_cached("INSERT INTO usertable (key, value) VALUES (?1, ?2)")
                            .map_err(sqlite)?;
                        for key in chunk {
                            insert.execute((text(key), value_of(key))).map_err(sqlite)?;
                        }
                    }
                    tx.commit().map_err(sqlite)?;
                }
            }
            Datastore::Postgres(p) => {
                p.client.batch_execute("TRUNCATE usertable").map_err(pg)?;
                for chunk in keys.chunks(BATCH) {
                    let mut tx = p.client.transaction().map_err(pg)?;
                    let insert =
                        tx.prepare("INSERT INTO usertable (key, value) VALUES ($1, $2)").map_err(pg)?;
                    for key in chunk {
                        tx.execute(&insert, &[&text(key), &value_of(key)]).map_err(pg)?;
                    }
                    tx.commit().map_err(pg)?;
                }
            }
        }
        Ok(())
    }

    /// The record under `key`.
    pub fn read(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        match self {
            Datastore::Sqlite(c) => c
                .prepare_cached("SELECT value FROM usertable WHERE key = ?1")
                .and_then(|mut s| s.query_row([text(key)], |row| row.get(0)).optional())
                .map_err(sqlite),
            Datastore::Postgres(p) => {
                Ok(p.client.query_opt(&p.read, &[&text(key)]).map_err(pg)?.map(|row| row.get(0)))
            }
        }
    }

    /// Writes the record under `key` (YCSB's update and insert: insert or replace).
    pub fn write(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        match self {
            Datastore::Sqlite(c) => c
                .prepare_cached(
                    "INSERT INTO usertable (key, value) VALUES (?1, ?2)
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                )
                .and_then(|mut s| s.execute((text(key), value)))
                .map(drop)
                .map_err(sqlite),
            Datastore::Postgres(p) => p.client.execute(&p.write, &[&text(key), &value]).map(drop).map_err(pg),
        }
    }
}

/// Keys are ASCII (`key:000…`), so text columns hold them as they are.
fn text(key: &[u8]) -> &str {
    std::str::from_utf8(key).expect("benchmark keys are ASCII")
}

fn sqlite(e: rusqlite::Error) -> String {
    format!("SQLite: {e}")
}

fn pg(e: postgres::Error) -> String {
    format!("PostgreSQL: {e}")
}
