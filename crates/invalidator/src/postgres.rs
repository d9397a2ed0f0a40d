//! PostgreSQL: logical decoding from a replication slot the invalidator creates (plugin
//! `test_decoding`, which ships with PostgreSQL), streamed over a replication connection
//! (`replication.rs`) and confirmed only after the caller has handed the deletes on. A
//! restarted stream begins at the confirmed position, so a kill at any moment re-reads rather
//! than loses.
//!
//! A commit is decoded (its WAL record flushed) a moment before other sessions can see it: the
//! committing backend leaves PostgreSQL's list of running transactions only after the flush.
//! A delete sent in that moment lets a look-aside reader miss, read the old row and cache it
//! under a valid lease, stale until the next write (issue #26's lost delete). So a batch is
//! handed on only once every transaction in it is visible to a new snapshot
//! ([`first_invisible`]), checked over the SQL connection.
//!
//! A stream given up (it failed, or went silent: `replication.rs`'s keep-alive) may leave its
//! walsender running on the primary, holding the slot until it notices (`wal_sender_timeout`,
//! a minute by default): the reconnect ends it by its process id, and only if it is still the
//! one reading this slot ([`Postgres::end_old_walsender`]). Nothing is lost: the new stream
//! starts at the confirmed position, which only the caller's confirmations move.
//!
//! A slot that disappears is never recreated silently: the commits made while it was gone
//! were not seen, so the caches may hold stale values. A marker file in the state directory
//! remembers that the slot was made; `--recreate-slot` is the operator's "I flushed the caches".

use crate::decoding::{self, Row};
use crate::replication::{lsn_text, Stream};
use crate::rules::Rule;
use crate::snapshots::Keeper;
use crate::source::{keys_of_message, Batch, Commit, Fault, Position, Problem, Source};
use crate::watch::{Progress, Stage};
use postgres::{Client, NoTls, SimpleQueryMessage};
use shoal_client::invalidation::POSTGRES_PREFIX;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a decoded commit may stay invisible to new snapshots before the batch is read
/// again (a transient fault: nothing is confirmed meanwhile).
const VISIBLE_WITHIN: Duration = Duration::from_secs(10);

/// How long the stream may send nothing before the primary is asked whether it should have.
const QUIET_LOOK: Duration = Duration::from_secs(5);

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
fn sql_config_of(conninfo: &str) -> Result<postgres::Config, String> {
    let mut config = config_of(conninfo)?;
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(UNACKNOWLEDGED_WITHIN);
    }
    Ok(config)
}

/// A replication slot's commit log.
pub struct Postgres {
    conninfo: String,
    slot: String,
    rules: Vec<Rule>,
    client: Option<Client>,
    stream: Option<Stream>,
    /// The keys of a transaction whose COMMIT has not arrived yet.
    open: Option<Vec<String>>,
    /// The state directory's record that this slot was created.
    marker: PathBuf,
    recreate: bool,
    /// Told when a batch waits for visibility.
    progress: Option<Arc<Progress>>,
    /// While the stream sends nothing: since when, and the last look at the primary (its
    /// newest transaction id, `xmax`, and when), for [`Postgres::quiet_stream`].
    quiet: Option<Quiet>,
    /// The walsender of the last stream started (or being started), ended on reconnect if it
    /// still reads the slot.
    walsender: Option<i32>,
    /// The thread that moves the slot's restart point every second (`snapshots.rs`).
    _snapshots: Option<Keeper>,
    /// The last reconnect, until its stream's first row: when it began, when the stream
    /// started, and how much WAL lay between the slot's restart point and its confirmed position.
    restarted: Option<Restart>,
}

/// A reconnect whose stream has sent nothing yet: when it began, and how long after that its
/// SQL connection was open, the old walsender ended and the stream started.
struct Restart {
    began: Instant,
    steps: Vec<Duration>,
    backlog: Option<i64>,
}

/// A silence of the stream: since when, the last look at the primary (its `xmax`, and when),
/// and whether it was said.
type Quiet = (Instant, Option<(u64, Instant)>, bool);

fn transient(what: &str) -> impl Fn(postgres::Error) -> Fault + '_ {
    move |e| Fault::Transient(format!("PostgreSQL: {what}: {}", why(&e)))
}

/// Why a PostgreSQL call failed: the server's message, or the error and its causes (for a
/// connection that failed, tokio-postgres says only "error connecting to server"; its source
/// says why, e.g. "Connection refused (os error 111)").
fn why(e: &postgres::Error) -> String {
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
fn server_of(conninfo: &str) -> String {
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

impl Postgres {
    /// Connects, and creates the slot on first use (see the module's note on dropped slots).
    /// `snapshot_every`: how often a standby snapshot moves the slot's restart point
    /// (`snapshots.rs`; `None`: only PostgreSQL's own, every 15 s).
    pub fn open(
        conninfo: &str,
        slot: &str,
        rules: Vec<Rule>,
        state_dir: &std::path::Path,
        recreate: bool,
        snapshot_every: Option<Duration>,
    ) -> Result<Postgres, Fault> {
        if slot.is_empty() || !slot.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(Fault::Fatal(format!(
                "--slot {slot:?}: a replication slot name is lower-case letters, digits and `_`"
            )));
        }
        let mut source = Postgres {
            conninfo: conninfo.to_string(),
            slot: slot.to_string(),
            rules,
            client: None,
            stream: None,
            open: None,
            marker: state_dir.join(format!("slot-{slot}.created")),
            recreate,
            progress: None,
            quiet: None,
            walsender: None,
            _snapshots: None,
            restarted: None,
        };
        source.reconnect()?;
        if let Some(every) = snapshot_every {
            source._snapshots = Some(Keeper::spawn(conninfo, slot, every).map_err(Fault::Fatal)?);
        }
        Ok(source)
    }

    fn client(&mut self) -> Result<&mut Client, Fault> {
        self.client.as_mut().ok_or_else(|| Fault::Transient("PostgreSQL: not connected".into()))
    }

    /// Makes sure the slot exists and is ours to read; the WAL between its restart point and its
    /// confirmed position, in bytes (what a stream started now decodes again before its first
    /// new row; `None` for a slot just made).
    fn ensure_slot(&mut self) -> Result<Option<i64>, Fault> {
        let slot = self.slot.clone();
        let (marker, recreate) = (self.marker.clone(), self.recreate);
        let client = self.client()?;
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
                std::fs::write(&marker, format!("{slot}\n")).map_err(|e| {
                    Fault::Fatal(format!("cannot record the slot in {}: {e}", marker.display()))
                })?;
                eprintln!("shoal invalidator: created logical replication slot {slot}");
                Ok(None)
            }
        }
    }

    /// Waits until every transaction of `xids` (decoded commits) is visible to a new snapshot,
    /// so that a reader who misses after the deletes reads the new rows. A SQL connection that
    /// fails meanwhile (a link cut mid-query fails it within [`UNACKNOWLEDGED_WITHIN`]) is made
    /// again and the batch held: reading it again would also restart the stream, end its
    /// walsender and decode again, seconds more after a cut.
    fn wait_visible(&mut self, xids: &[u32]) -> Result<(), Fault> {
        if xids.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + VISIBLE_WITHIN;
        let mut failing: Option<String> = None;
        loop {
            match self.current_snapshot() {
                Ok(snapshot) => {
                    if failing.take().is_some() {
                        eprintln!("shoal invalidator: a new SQL connection to PostgreSQL answers; the batch goes on");
                    }
                    let Some(xid) = first_invisible(&snapshot, xids).map_err(Fault::Transient)? else {
                        return Ok(());
                    };
                    if Instant::now() >= deadline {
                        return Err(Fault::Transient(format!(
                            "PostgreSQL: transaction {xid} is decoded but still not visible to readers after {} s \
                             (snapshot {snapshot}); its deletes wait",
                            VISIBLE_WITHIN.as_secs()
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(why) => {
                    self.client = None;
                    if Instant::now() >= deadline {
                        return Err(Fault::Transient(format!(
                            "PostgreSQL: read a snapshot: {why}; its deletes wait"
                        )));
                    }
                    if failing.as_deref() != Some(&why) {
                        eprintln!(
                            "shoal invalidator: PostgreSQL: read a snapshot: {why}; connecting again, the batch \
                             waiting for its transactions to be visible is held"
                        );
                        failing = Some(why);
                    }
                    std::thread::sleep(crate::REREAD_FIRST);
                }
            }
        }
    }

    /// `pg_current_snapshot()` as text, over the SQL connection (made first if there is none).
    fn current_snapshot(&mut self) -> Result<String, String> {
        if self.client.is_none() {
            let config = sql_config_of(&self.conninfo)?;
            self.client = Some(config.connect(NoTls).map_err(|e| chain(&e))?);
        }
        let client = self.client.as_mut().expect("connected above");
        // The simple protocol: one round trip (a replica region's invalidator asks over the WAN).
        let answer = client.simple_query("SELECT pg_current_snapshot()::text").map_err(|e| why(&e))?;
        answer
            .iter()
            .find_map(|message| match message {
                SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
                _ => None,
            })
            .ok_or_else(|| "pg_current_snapshot() gave no row".to_string())
    }

    /// The stream has sent nothing for a while: every [`QUIET_LOOK`] the primary is asked
    /// whether write transactions committed meanwhile; when they did and the stream still
    /// sends nothing (test_decoding sends every transaction of the slot's database, even one
    /// with no keys), it is said once per silence, so that a stalled walsender explains itself.
    fn quiet_stream(&mut self) -> Result<(), Fault> {
        let Some((since, last, said)) = self.quiet else {
            self.quiet = Some((Instant::now(), None, false));
            return Ok(());
        };
        if said || last.is_some_and(|(_, at)| at.elapsed() < QUIET_LOOK) || since.elapsed() < QUIET_LOOK {
            return Ok(());
        }
        let answer = self
            .client()?
            .simple_query("SELECT pg_current_snapshot()::text, pg_current_wal_flush_lsn()::text")
            .map_err(transient("look at the primary"))?;
        let Some((snapshot, flushed)) = answer.iter().find_map(|message| match message {
            SimpleQueryMessage::Row(row) => Some((row.get(0)?.to_string(), row.get(1)?.to_string())),
            _ => None,
        }) else {
            return Ok(());
        };
        let xmax = snapshot.split(':').nth(1).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
        let sent = self.stream.as_ref().map_or(0, Stream::sent);
        let stalled = last.is_some_and(|(before, _)| xmax > before);
        if stalled {
            eprintln!(
                "shoal invalidator: the commit log stream has sent nothing for {:.1} s while write transactions                  committed on PostgreSQL (newest id {xmax}, WAL flushed to {flushed}; the walsender's last                  position {}): its walsender is behind or stuck (a starved primary?), or the writes were in                  another database",
                since.elapsed().as_secs_f64(),
                lsn_text(sent)
            );
        }
        self.quiet = Some((since, Some((xmax, Instant::now())), stalled));
        Ok(())
    }

    /// Keys of one decoded row, into the open transaction's list.
    fn keys_of_row(&self, row: Row<'_>, keys: &mut Vec<String>, problems: &mut Vec<Problem>) {
        match row {
            Row::Message { prefix, content, .. } if prefix == POSTGRES_PREFIX => {
                keys_of_message(content, keys, problems)
            }
            Row::Change { table, operation, columns } => {
                for rule in self.rules.iter().filter(|r| r.table == table) {
                    if operation == "TRUNCATE" {
                        problems.push(Problem::Row(format!(
                            "{table} was truncated, so every key of rule {} is stale; flush the caches",
                            rule.table
                        )));
                        continue;
                    }
                    match rule.keys(&columns) {
                        Ok(found) => keys.extend(found),
                        Err(why) => problems.push(Problem::Row(why)),
                    }
                }
            }
            _ => {}
        }
    }
}

impl Source for Postgres {
    fn read(&mut self, max: usize, wait: std::time::Duration) -> Result<Batch, Fault> {
        let stream =
            self.stream.as_mut().ok_or_else(|| Fault::Transient("PostgreSQL: not connected".into()))?;
        let rows = stream.rows(wait, max).map_err(Fault::Transient)?;
        if rows.is_empty() {
            self.quiet_stream()?;
        } else {
            self.quiet = None;
            self.say_restarted();
        }
        let mut batch = Batch::default();
        let mut xids = Vec::new();
        for row in rows {
            let decoded = match decoding::parse(&row.data) {
                Ok(decoded) => decoded,
                Err(why) => {
                    batch.problems.push(Problem::Message(why));
                    continue;
                }
            };
            match decoded {
                Row::Begin => self.open = Some(Vec::new()),
                Row::Commit(micros) => {
                    let keys = self.open.take().unwrap_or_default();
                    if !keys.is_empty() {
                        batch.commits.push(Commit { keys, micros, lsn: row.lsn });
                        xids.extend(decoding::commit_xid(&row.data));
                    }
                    batch.upto = Some(Position::Lsn(row.lsn, false));
                }
                row_data @ Row::Message { transactional: false, prefix, .. } if prefix == POSTGRES_PREFIX => {
                    batch.problems.push(Problem::Message(
                        "a non-transactional message (it is delivered even when its transaction rolls \
                         back); its keys are deleted anyway; emit with transactional = true"
                            .into(),
                    ));
                    let mut keys = Vec::new();
                    self.keys_of_row(row_data, &mut keys, &mut batch.problems);
                    if !keys.is_empty() {
                        batch.commits.push(Commit { keys, micros: None, lsn: row.lsn });
                    }
                    if self.open.is_none() {
                        batch.upto = Some(Position::Lsn(row.lsn, true));
                    }
                }
                row_data => {
                    let mut keys = self.open.take();
                    if let Some(keys) = keys.as_mut() {
                        self.keys_of_row(row_data, keys, &mut batch.problems);
                    }
                    self.open = keys;
                }
            }
        }
        if let (Some(progress), false) = (&self.progress, xids.is_empty()) {
            progress.enter(Stage::Visibility, batch.commits.iter().map(|c| c.keys.len()).sum());
        }
        self.wait_visible(&xids)?;
        Ok(batch)
    }

    fn confirm(&mut self, upto: &Position) -> Result<(), Fault> {
        let Position::Lsn(lsn, past) = upto else {
            return Err(Fault::Fatal(format!("a PostgreSQL slot cannot confirm {upto}")));
        };
        let stream =
            self.stream.as_mut().ok_or_else(|| Fault::Transient("PostgreSQL: not connected".into()))?;
        stream.confirm(lsn + u64::from(*past)).map_err(Fault::Transient)
    }

    fn set_progress(&mut self, progress: Arc<Progress>) {
        self.progress = Some(progress);
    }

    fn reconnect(&mut self) -> Result<(), Fault> {
        (self.client, self.stream, self.open, self.quiet) = (None, None, None, None);
        let began = Instant::now();
        self.restarted = None;
        let config = sql_config_of(&self.conninfo).map_err(Fault::Fatal)?;
        let client = config.connect(NoTls).map_err(|e| {
            use std::error::Error;
            // The cause alone: "error connecting to server" adds nothing to what is said first.
            let cause = e.source().filter(|_| e.as_db_error().is_none()).map_or_else(|| why(&e), chain);
            Fault::Transient(format!("connecting to PostgreSQL at {}: {cause}", server_of(&self.conninfo)))
        })?;
        self.client = Some(client);
        let connected = began.elapsed();
        let backlog = self.ensure_slot()?;
        self.end_old_walsender()?;
        let slot_free = began.elapsed();
        // The SQL connection manages the slot and waits for commits to be visible; changes
        // come over the stream.
        self.stream =
            Some(Stream::start(&self.conninfo, &self.slot, &mut self.walsender).map_err(Fault::Transient)?);
        self.restarted = Some(Restart { began, steps: vec![connected, slot_free, began.elapsed()], backlog });
        Ok(())
    }
}

impl Postgres {
    /// Says, once per reconnect, how long the new stream took to its first row and what it
    /// decoded again (issue #26: where the time after a cut goes). The time is the Unix time,
    /// to line it up with a fault's log.
    fn say_restarted(&mut self) {
        let Some(Restart { began, steps, backlog }) = self.restarted.take() else { return };
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        eprintln!(
            "shoal invalidator: the restarted stream's first row came {:.0} ms after the reconnect began \
             (connected at {:.0} ms, the slot free at {:.0} ms, the stream started at {:.0} ms; {} kB of WAL \
             decoded again from the slot's restart point; unix time {unix:.3})",
            ms(began.elapsed()),
            ms(steps[0]),
            ms(steps[1]),
            ms(steps[2]),
            backlog.map_or_else(|| "?".to_string(), |b| (b / 1000).to_string()),
        );
    }

    /// Ends the walsender of the stream given up, if it still reads this slot (and waits up to
    /// a second for it to go): a walsender whose connection was cut holds the slot until it
    /// notices, and the new stream's start would fail with "slot … is active" meanwhile. A
    /// process id that now reads another slot, or none, is left alone.
    fn end_old_walsender(&mut self) -> Result<(), Fault> {
        let Some(pid) = self.walsender.take() else { return Ok(()) };
        let slot = self.slot.clone();
        let ended = self
            .client()?
            .query_opt(
                "SELECT pg_terminate_backend(active_pid, 1000) FROM pg_replication_slots \
                 WHERE slot_name = $1 AND active_pid = $2",
                &[&slot, &pid],
            )
            .map_err(|e| why(&e));
        // Not allowed, or the query failed: the old walsender goes when it notices itself.
        let ended = match ended {
            Ok(ended) => ended,
            Err(why) => {
                eprintln!("shoal invalidator: could not end the old walsender (process {pid}): {why}");
                None
            }
        };
        if let Some(row) = ended {
            let gone: bool = row.get(0);
            eprintln!(
                "shoal invalidator: ended the walsender of the stream given up (process {pid}){}",
                if gone { "" } else { "; it has not gone yet" }
            );
        }
        Ok(())
    }
}

/// The first of `xids` (32-bit transaction ids, as test_decoding shows them) that a snapshot
/// (`pg_current_snapshot()`'s text, `xmin:xmax:xip,…` of 64-bit ids) does not see: at or after
/// its `xmax`, or still running. `None`: every one is visible. A 32-bit id is taken as the
/// latest 64-bit id below `xmax` (or at it) with those low bits: the ids checked were just
/// decoded, so they are recent.
pub fn first_invisible(snapshot: &str, xids: &[u32]) -> Result<Option<u32>, String> {
    let bad = || format!("PostgreSQL: a snapshot {snapshot:?} that does not read as xmin:xmax:xip");
    let mut parts = snapshot.trim().split(':');
    let (_xmin, xmax, running) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(xmin), Some(xmax), Some(running), None) => (xmin, xmax, running),
        _ => return Err(bad()),
    };
    let xmax: u64 = xmax.parse().map_err(|_| bad())?;
    let running: Vec<u64> = running
        .split(',')
        .filter(|x| !x.is_empty())
        .map(|x| x.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    Ok(xids.iter().copied().find(|&xid| {
        let mut full = (xmax & !0xffff_ffff) | u64::from(xid);
        if full > xmax {
            full = full.saturating_sub(1 << 32);
        }
        full >= xmax || running.contains(&full)
    }))
}

#[cfg(test)]
mod tests {
    use super::first_invisible;

    #[test]
    fn a_commit_is_visible_once_below_xmax_and_not_running() {
        assert_eq!(first_invisible("740:745:", &[741, 744]), Ok(None));
        assert_eq!(first_invisible("740:745:741,743", &[742, 743]), Ok(Some(743)));
        assert_eq!(first_invisible("740:745:741", &[745]), Ok(Some(745)));
        assert_eq!(first_invisible("10:12:", &[5]), Ok(None), "long committed");
        // Across a 32-bit wrap: xmax 2^32 + 5; 4294967290 is 2^32 - 6, before it.
        assert_eq!(first_invisible("4294967290:4294967301:4294967300", &[4_294_967_290, 3]), Ok(None));
        assert_eq!(first_invisible("4294967290:4294967301:4294967300", &[4]), Ok(Some(4)));
        assert_eq!(first_invisible("4294967290:4294967301:", &[5]), Ok(Some(5)));
        for bad in ["", "1:2", "1:x:", "1:2:3:4", "1:2:a"] {
            assert!(first_invisible(bad, &[1]).is_err(), "{bad:?}");
        }
    }
}
