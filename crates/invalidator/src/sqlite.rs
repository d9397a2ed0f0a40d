//! SQLite, the embedded default: an outbox table the application writes in its own
//! transaction (`shoal_client::invalidation::emit_sqlite`), read in id order and emptied only
//! after the caller has handed the deletes on. SQLite runs one writer at a time, so ids are
//! committed in order and a row never appears behind one already read.

use crate::source::{keys_of_message, Batch, Commit, Fault, Position, Problem, Source};
use rusqlite::Connection;
use shoal_client::invalidation::SQLITE_OUTBOX_SCHEMA;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// An outbox table's commit log.
pub struct Sqlite {
    path: PathBuf,
    connection: Option<Connection>,
    /// The last id read: rows read and not yet confirmed are not read again (0 after a
    /// reconnect: from what is left, the confirmed position; ids are never reused).
    read: i64,
}

fn transient(what: &'static str) -> impl Fn(rusqlite::Error) -> Fault {
    move |e| Fault::Transient(format!("SQLite: {what}: {e}"))
}

impl Sqlite {
    /// Opens the database (which must exist: a typo should not start an empty one) and makes
    /// the outbox if it is missing.
    pub fn open(path: &Path) -> Result<Sqlite, Fault> {
        if !path.exists() {
            return Err(Fault::Fatal(format!(
                "--sqlite {}: no such database; give the application's database file",
                path.display()
            )));
        }
        let mut source = Sqlite { path: path.to_path_buf(), connection: None, read: 0 };
        source.reconnect()?;
        Ok(source)
    }

    fn connection(&mut self) -> Result<&Connection, Fault> {
        self.connection.as_ref().ok_or_else(|| Fault::Transient("SQLite: not open".into()))
    }
}

impl Source for Sqlite {
    fn read(&mut self, max: usize, wait: Duration) -> Result<Batch, Fault> {
        let after = self.read;
        let connection = self.connection()?;
        let mut statement = connection
            .prepare_cached("SELECT id, keys, created FROM shoal_outbox WHERE id > ?2 ORDER BY id LIMIT ?1")
            .map_err(transient("read the outbox"))?;
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        let rows = statement
            .query_map([limit, after], |row| {
                // Text or bytes; anything else (a number someone wrote) is reported, not retried.
                let keys = row.get_ref(1)?.as_bytes().ok().map(<[u8]>::to_vec);
                Ok((row.get::<_, i64>(0)?, keys, row.get::<_, Option<f64>>(2).ok().flatten()))
            })
            .map_err(transient("read the outbox"))?;
        let mut batch = Batch::default();
        for row in rows {
            let (id, payload, created) = row.map_err(transient("read an outbox row"))?;
            let mut keys = Vec::new();
            match payload {
                Some(payload) => keys_of_message(&payload, &mut keys, &mut batch.problems),
                None => batch.problems.push(Problem::Message(format!("outbox row {id}: keys is not text"))),
            }
            if !keys.is_empty() {
                let micros = created.filter(|&c| c > 0.0).map(|c| (c * 1e6) as u64);
                batch.commits.push(Commit { keys, micros, lsn: 0 });
            }
            batch.upto = Some(Position::Row(id));
        }
        drop(statement);
        if let Some(Position::Row(id)) = batch.upto {
            self.read = id;
        }
        if batch.upto.is_none() {
            // Nothing new: SQLite cannot tell us when there is, so poll.
            std::thread::sleep(wait);
        }
        Ok(batch)
    }

    fn confirm(&mut self, upto: &Position) -> Result<(), Fault> {
        let Position::Row(id) = upto else {
            return Err(Fault::Fatal(format!("an SQLite outbox cannot confirm {upto}")));
        };
        self.connection()?
            .execute("DELETE FROM shoal_outbox WHERE id <= ?1", [id])
            .map_err(transient("empty the outbox"))?;
        Ok(())
    }

    fn reconnect(&mut self) -> Result<(), Fault> {
        (self.connection, self.read) = (None, 0);
        let connection = Connection::open(&self.path).map_err(transient("open the database"))?;
        connection.busy_timeout(Duration::from_secs(5)).map_err(transient("set the busy timeout"))?;
        connection.execute(SQLITE_OUTBOX_SCHEMA, []).map_err(transient("create the outbox"))?;
        self.connection = Some(connection);
        Ok(())
    }
}
