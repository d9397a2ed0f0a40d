//! Connections to PostgreSQL: the connection strings' defaults, the SQL connection and the
//! slot's check, the messages that say where and why a connection failed, and the work a
//! reconnect does on threads of its own (issue #26: a reconnect costs the slower of its
//! connections, not their sum).

use crate::source::Fault;
use postgres::{Client, NoTls};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Duration;

/// How long a connection to PostgreSQL may take to open when the connection string gives no
/// `connect_timeout`: without one, a connect whose first packet a cut link dropped waits out
/// the kernel's retransmissions (minutes), long after the link is back.
pub const CONNECT_WITHIN: Duration = Duration::from_secs(2);

/// `conninfo` parsed, with [`CONNECT_WITHIN`] unless it sets its own `connect_timeout`.
pub fn config_of(conninfo: &str) -> Result<postgres::Config, String> {
    let mut config: postgres::Config =
        conninfo.parse().map_err(|e| format!("--postgres {conninfo:?}: {e}"))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_WITHIN);
    }
    Ok(config)
}

/// How long what the SQL connection sends may go unacknowledged by the server's TCP before the
/// connection fails (`tcp_user_timeout`, unless the connection string sets one). The kernel
/// acknowledges, so a loaded server does not trip it; a link cut mid-query does, where the query
/// would otherwise wait out TCP's retransmission back-off, seconds past the link's return
/// (issue #26: region B's deletes held 5.6 s "until their transactions are visible" after a
/// 4.9 s cut of the primary's host).
const UNACKNOWLEDGED_WITHIN: Duration = Duration::from_secs(1);

/// [`config_of`] for the SQL connection (with [`UNACKNOWLEDGED_WITHIN`]).
pub(super) fn sql_config_of(conninfo: &str) -> Result<postgres::Config, String> {
    let mut config = config_of(conninfo)?;
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(UNACKNOWLEDGED_WITHIN);
    }
    Ok(config)
}

/// How long the SQL connection opened beside a restarted stream may take (its connect, the
/// start-up and the slot's look-up) before it is given up and the reconnect tried again. The
/// connect alone is bounded by `connect_timeout`; the rest has no bound of its own.
pub(super) const SQL_WITHIN: Duration = Duration::from_secs(10);

/// Work done on a thread of its own (a connection being opened while another starts), its
/// result taken once there.
pub(super) struct OnThread<T> {
    answer: Receiver<T>,
}

impl<T: Send + 'static> OnThread<T> {
    pub(super) fn spawn(name: &str, work: impl FnOnce() -> T + Send + 'static) -> OnThread<T> {
        let (tell, answer) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new().name(name.into()).spawn(move || {
            let _ = tell.send(work());
        });
        if let Err(e) = spawned {
            // No thread: the receiver's sender is gone, so the first look reports it.
            eprintln!("shoal invalidator: could not start a thread ({name}): {e}");
        }
        OnThread { answer }
    }

    /// Its result once there: `None` not yet, `Some(None)` never (the thread ended without it).
    pub(super) fn ready(&self) -> Option<Option<T>> {
        match self.answer.try_recv() {
            Ok(done) => Some(Some(done)),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(None),
        }
    }

    /// Its result, waiting up to `within` (`None`: not within it, or never).
    pub(super) fn wait(self, within: Duration) -> Option<T> {
        self.answer.recv_timeout(within).ok()
    }
}

/// A SQL connection with `config` (`server`: where, for the message).
pub(super) fn connect(config: &postgres::Config, server: &str) -> Result<Client, Fault> {
    config.connect(NoTls).map_err(|e| {
        use std::error::Error;
        // The cause alone: "error connecting to server" adds nothing to what is said first.
        let cause = e.source().filter(|_| e.as_db_error().is_none()).map_or_else(|| why(&e), chain);
        Fault::Transient(format!("connecting to PostgreSQL at {server}: {cause}"))
    })
}

pub(super) fn transient(what: &str) -> impl Fn(postgres::Error) -> Fault + '_ {
    move |e| Fault::Transient(format!("PostgreSQL: {what}: {}", why(&e)))
}

/// Why a PostgreSQL call failed: the server's message, or the error and its causes (for a
/// connection that failed, tokio-postgres says only "error connecting to server"; its source
/// says why, e.g. "Connection refused (os error 111)").
pub(super) fn why(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => chain(e),
    }
}

/// An error and its causes: `outer: inner: …`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.ends_with(&more) {
            text = format!("{text}: {more}");
        }
        cause = c.source();
    }
    text
}

/// Where a connection string points, for messages: `host=db port=5432` (not the password).
pub(super) fn server_of(conninfo: &str) -> String {
    let Ok(config) = conninfo.parse::<postgres::Config>() else {
        return format!("{conninfo:?} (not a connection string)");
    };
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            postgres::config::Host::Tcp(name) => name.clone(),
            postgres::config::Host::Unix(dir) => dir.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    let or_default = |list: Vec<String>, default: &str| match list.is_empty() {
        true => default.to_string(),
        false => list.join(","),
    };
    format!("host={} port={}", or_default(hosts, "/var/run/postgresql"), or_default(ports, "5432"))
}

/// Makes sure `slot` exists and is ours to read over `client` (creating it when it was never
/// made; see the module's note on dropped slots): the WAL between its restart point and its
/// confirmed position, in bytes (`None` for a slot just made).
pub(super) fn check_slot(
    client: &mut Client,
    slot: &str,
    marker: &std::path::Path,
    recreate: bool,
) -> Result<Option<i64>, Fault> {
    let row = client
        .query_opt(
            "SELECT plugin, slot_type, (confirmed_flush_lsn - restart_lsn)::bigint FROM pg_replication_slots \
             WHERE slot_name = $1",
            &[&slot],
        )
        .map_err(transient("look up the replication slot"))?;
    match row {
        Some(row) => {
            let (plugin, kind): (Option<String>, String) = (row.get(0), row.get(1));
            if kind != "logical" || plugin.as_deref() != Some("test_decoding") {
                return Err(Fault::Fatal(format!(
                    "replication slot {slot} exists but is a {kind} slot with plugin {plugin:?}; \
                     give the invalidator a slot of its own with --slot"
                )));
            }
            Ok(row.get(2))
        }
        None if marker.exists() && !recreate => Err(Fault::Fatal(format!(
            "replication slot {slot} was dropped after this invalidator created it ({}): the \
             commits made since were not seen, so caches may hold stale values. Flush every \
             cluster (`flush_all` through each router), then start again with --recreate-slot",
            marker.display()
        ))),
        None => {
            let level: String =
                client.query_one("SHOW wal_level", &[]).map_err(transient("read wal_level"))?.get(0);
            if level != "logical" {
                return Err(Fault::Fatal(format!(
                    "PostgreSQL runs with wal_level={level}; logical decoding needs wal_level=logical \
                     (set it in postgresql.conf and restart PostgreSQL)"
                )));
            }
            client
                .execute("SELECT pg_create_logical_replication_slot($1, 'test_decoding')", &[&slot])
                .map_err(transient("create the replication slot"))?;
            std::fs::write(marker, format!("{slot}\n"))
                .map_err(|e| Fault::Fatal(format!("cannot record the slot in {}: {e}", marker.display())))?;
            eprintln!("shoal invalidator: created logical replication slot {slot}");
            Ok(None)
        }
    }
}
