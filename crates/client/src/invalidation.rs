//! Invalidation messages: the keys a database transaction makes stale, written into that same
//! transaction so that `shoal invalidator` deletes them from every cluster once — and only if —
//! the transaction commits (docs/design/invalidation.md).
//!
//! The message is the keys separated by single spaces (any ASCII white space is accepted when
//! reading). PostgreSQL carries it in a transactional logical-decoding message with the prefix
//! [`POSTGRES_PREFIX`]; SQLite in a row of the outbox table [`SQLITE_OUTBOX_TABLE`]. With the
//! `postgres` and `sqlite` features, [`emit_postgres`] and [`emit_sqlite`] write it for you.
//!
//! ```text
//!   BEGIN; UPDATE users …; SELECT pg_logical_emit_message(true, 'shoal', 'user:7 feed:7'); COMMIT
//!      └──► commit log ──► shoal invalidator ──► parse_message ──► delete user:7, delete feed:7
//! ```

use crate::{Error, Result};
use shoal_route::validate_key;

/// The prefix of PostgreSQL logical-decoding messages that carry keys.
pub const POSTGRES_PREFIX: &str = "shoal";

/// The statement that emits a message inside the current PostgreSQL transaction.
pub const POSTGRES_EMIT: &str = "SELECT pg_logical_emit_message(true, 'shoal', $1)";

/// The SQLite outbox table the invalidator tails and empties.
pub const SQLITE_OUTBOX_TABLE: &str = "shoal_outbox";

/// The outbox's schema (created by the invalidator and by [`emit_sqlite`] when missing).
/// `created` is the insert time in seconds since the epoch, written by the writer's SQLite (the
/// julianday form works in every SQLite version), from which the invalidator measures lag.
pub const SQLITE_OUTBOX_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS shoal_outbox (\
     id INTEGER PRIMARY KEY AUTOINCREMENT, \
     keys TEXT NOT NULL, \
     created REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0))";

/// The statement that puts a message into the outbox inside the current SQLite transaction.
pub const SQLITE_OUTBOX_INSERT: &str = "INSERT INTO shoal_outbox (keys) VALUES (?1)";

/// What a remote marker's key starts with (see [`remote_marker_key`]).
pub const REMOTE_MARKER_PREFIX: &[u8] = b"__shoal_rm:";

/// The key of `key`'s remote marker (Scaling Memcache §5.1): `__shoal_rm:<key>`, or, when
/// that would pass [`shoal_proto::KEY_MAX`] bytes, `__shoal_rm#` and the key's XXH3-128 in hex (a collision only
/// sends a read to the master database). `shoal invalidator --remote-markers` deletes it with
/// the key; [`crate::Pool::set_remote_marker`] sets it.
pub fn remote_marker_key(key: &[u8]) -> Vec<u8> {
    let mut marker = REMOTE_MARKER_PREFIX.to_vec();
    if marker.len() + key.len() <= shoal_proto::KEY_MAX {
        marker.extend_from_slice(key);
    } else {
        marker.pop();
        marker.extend_from_slice(format!("#{:032x}", xxhash_rust::xxh3::xxh3_128(key)).as_bytes());
    }
    marker
}

/// The message for `keys`, each checked to be a key memcached's text protocol carries.
pub fn message<K: AsRef<[u8]>>(keys: &[K]) -> Result<String> {
    if keys.is_empty() {
        return Err(Error::Invalidation("an invalidation message needs at least one key".into()));
    }
    let mut text = String::new();
    for key in keys {
        let key = key.as_ref();
        // The message is text (PostgreSQL's and SQLite's text types), so keys are UTF-8 too.
        let Ok(text_key) = std::str::from_utf8(key) else { return Err(Error::InvalidKey(key.to_vec())) };
        validate_key(key).map_err(|_| Error::InvalidKey(key.to_vec()))?;
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(text_key);
    }
    Ok(text)
}

/// What [`parse_message`] found in a message.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Parsed<'a> {
    /// The keys that are valid, in order.
    pub keys: Vec<&'a str>,
    /// Why each rejected word was rejected.
    pub rejected: Vec<String>,
}

/// The keys of a message: its words (split on ASCII white space); a word that is not a valid
/// key (too long, a control character) is rejected with the reason, and the rest kept.
pub fn parse_message(payload: &[u8]) -> std::result::Result<Parsed<'_>, String> {
    let text = std::str::from_utf8(payload).map_err(|e| {
        format!("the message is not UTF-8 text (byte {}), so not a key list", e.valid_up_to())
    })?;
    let mut parsed = Parsed::default();
    for word in text.split_ascii_whitespace() {
        match validate_key(word.as_bytes()) {
            Ok(()) => parsed.keys.push(word),
            Err(e) => parsed.rejected.push(e.to_string()),
        }
    }
    if parsed.keys.is_empty() && parsed.rejected.is_empty() {
        return Err("the message holds no keys".into());
    }
    Ok(parsed)
}

/// Emits the message for `keys` in `transaction` (PostgreSQL, `wal_level=logical`).
#[cfg(feature = "postgres")]
pub fn emit_postgres<K: AsRef<[u8]>>(
    transaction: &mut impl postgres::GenericClient,
    keys: &[K],
) -> Result<()> {
    let text = message(keys)?;
    transaction
        .execute(POSTGRES_EMIT, &[&text])
        .map_err(|e| Error::Invalidation(format!("PostgreSQL: {e}")))?;
    Ok(())
}

/// Puts the message for `keys` into the outbox, in the connection's open transaction.
#[cfg(feature = "sqlite")]
pub fn emit_sqlite<K: AsRef<[u8]>>(connection: &rusqlite::Connection, keys: &[K]) -> Result<()> {
    let text = message(keys)?;
    let sqlite = |e: rusqlite::Error| Error::Invalidation(format!("SQLite: {e}"));
    connection.execute(SQLITE_OUTBOX_SCHEMA, []).map_err(sqlite)?;
    connection.execute(SQLITE_OUTBOX_INSERT, [&text]).map_err(sqlite)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reads_back_as_its_keys() {
        let text = message(&["user:7", "feed:7", "ключ"]).unwrap();
        assert_eq!(text, "user:7 feed:7 ключ");
        assert_eq!(parse_message(text.as_bytes()).unwrap().keys, ["user:7", "feed:7", "ключ"]);
    }

    #[test]
    fn remote_marker_keys_are_valid_keys() {
        assert_eq!(remote_marker_key(b"user:7"), b"__shoal_rm:user:7");
        let long = remote_marker_key(&[b'k'; 250]);
        assert!(long.starts_with(b"__shoal_rm#") && long.len() == 11 + 32);
        assert_ne!(long, remote_marker_key(&[b'j'; 250]));
        assert!(validate_key(&long).is_ok());
    }

    #[test]
    fn bad_keys_are_refused_when_writing_and_reported_when_reading() {
        assert!(message(&["has space"]).is_err());
        assert!(message(&["x".repeat(251)]).is_err());
        assert!(message::<&str>(&[]).is_err());
        let long = "y".repeat(251);
        let payload = format!("a\n{long}\tb  c\u{7f}d");
        let parsed = parse_message(payload.as_bytes()).unwrap();
        assert_eq!(parsed.keys, ["a", "b"]);
        assert_eq!(parsed.rejected.len(), 2, "{:?}", parsed.rejected);
        assert!(parse_message(b"  \n").is_err());
        assert!(parse_message(b"a \xff").is_err());
    }
}
