//! `shoal.invalidation_message` and `shoal.invalidate`: the keys a database transaction makes
//! stale, written into that transaction for `shoal invalidator` (see
//! `shoal_client::invalidation`), through the application's own DB-API cursor.

use crate::{key_bytes, raise};
use pyo3::prelude::*;
use shoal_client::invalidation::{message, POSTGRES_PREFIX, SQLITE_OUTBOX_INSERT, SQLITE_OUTBOX_SCHEMA};

/// The invalidation message for `keys` (a list of `str` or `bytes`); raises `IllegalInput`
/// for a key memcached cannot carry.
#[pyfunction]
pub fn invalidation_message(keys: Vec<Bound<'_, PyAny>>) -> PyResult<String> {
    let keys = keys.iter().map(key_bytes).collect::<PyResult<Vec<_>>>()?;
    message(&keys).map_err(raise)
}

/// Writes the invalidation message for `keys` through `cursor`, inside the transaction it is
/// in: an `sqlite3` cursor or connection inserts into the outbox table (made if missing);
/// any other DB-API cursor (psycopg, psycopg2, pg8000) is taken to be PostgreSQL's and
/// emits a transactional logical-decoding message. Nothing happens unless the transaction
/// commits.
#[pyfunction]
pub fn invalidate(cursor: &Bound<'_, PyAny>, keys: Vec<Bound<'_, PyAny>>) -> PyResult<()> {
    let text = invalidation_message(keys)?;
    let module: String = cursor.get_type().getattr("__module__")?.extract()?;
    if module == "sqlite3" {
        cursor.call_method1("execute", (SQLITE_OUTBOX_SCHEMA,))?;
        cursor.call_method1("execute", (SQLITE_OUTBOX_INSERT, (text,)))?;
    } else {
        // DB-API drivers for PostgreSQL take `%s` where the Rust driver takes `$1`.
        let emit = format!("SELECT pg_logical_emit_message(true, '{POSTGRES_PREFIX}', %s)");
        cursor.call_method1("execute", (emit, (text,)))?;
    }
    Ok(())
}
