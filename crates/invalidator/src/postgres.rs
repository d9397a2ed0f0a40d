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
//! A reconnect costs the slower of its two connections, not their sum (issue #26):
//!
//! ```text
//!   reconnect ─┬─► Stream::start (replication connection, START_REPLICATION) ─► rows decode
//!              │      └ "slot is active": end the old walsender once the SQL side is there, retry
//!              └─► thread: SQL connect ─► check_slot ──────────────► joined before any row is
//!                                                                    handed on (visibility)
//! ```
//!
//! The first connection of a process checks (or makes) the slot before its stream starts. While
//! a replica region's batch waits for its replica, [`Source::tend`] keeps the stream read and,
//! if it was lost, starts it again on a thread (the looks at the replica go on meanwhile), so a
//! cut is over before the replica is back. The connections' details: `connecting.rs`.
//!
//! A slot that disappears is never recreated silently: the commits made while it was gone
//! were not seen, so the caches may hold stale values. A marker file in the state directory
//! remembers that the slot was made; `--recreate-slot` is the operator's "I flushed the caches".

mod connecting;

pub use connecting::{config_of, CONNECT_WITHIN};

use crate::decoding::{self, Row};
use crate::replication::{lsn_text, slot_in_use, Stream};
use crate::rules::Rule;
use crate::snapshots::Keeper;
use crate::source::{keys_of_message, Batch, Commit, Fault, Position, Problem, Source};
use crate::watch::{Progress, Stage};
use connecting::{check_slot, connect, server_of, sql_config_of, transient, why, OnThread, SQL_WITHIN};
use postgres::{Client, SimpleQueryMessage};
use shoal_client::invalidation::POSTGRES_PREFIX;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a decoded commit may stay invisible to new snapshots before the batch is read
/// again (a transient fault: nothing is confirmed meanwhile).
const VISIBLE_WITHIN: Duration = Duration::from_secs(10);

/// How long the stream may send nothing before the primary is asked whether it should have.
const QUIET_LOOK: Duration = Duration::from_secs(5);

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
    /// The walsenders that may still hold the slot: the stream's own, and any of a stream given
    /// up or of a start that failed midway not ended yet; ended on reconnect if one still reads
    /// the slot.
    walsenders: Vec<i32>,
    /// The thread that moves the slot's restart point every second (`snapshots.rs`).
    _snapshots: Option<Keeper>,
    /// The last reconnect, until its stream's first row: when it began, when the stream
    /// started, and how much WAL lay between the slot's restart point and its confirmed position.
    restarted: Option<Restart>,
    /// The SQL connection being opened (and the slot checked) on a thread of its own while the
    /// stream starts and decodes: taken by the first use of the client.
    opening: Option<Opening>,
    /// While a held batch waits: when the last reconnect was tried, and how many failed in a row.
    tending: (Option<Instant>, u32),
    /// The stream being started by [`Source::tend`].
    starting: Option<Starting>,
    /// Whether the slot was found (or made) over the SQL connection once in this process: from
    /// then on a reconnect starts the stream without waiting for the SQL connection.
    slot_seen: bool,
}

/// A reconnect whose stream has sent nothing yet: when its first try began, how many tries
/// there were and when the last began, and how long after the first the last try's stream
/// started, its SQL connection was open with the slot checked, and the old walsender was ended
/// (`None`: not needed, or not yet).
struct Restart {
    began: Instant,
    tries: u32,
    last: Duration,
    stream: Duration,
    sql: Option<Duration>,
    ended: Option<Duration>,
    backlog: Option<i64>,
}

/// How long a reconnect keeps starting the stream while the old walsender still holds the slot.
const SLOT_FREE_WITHIN: Duration = Duration::from_secs(5);

/// The SQL connection of a reconnect, opened on a thread: it connects and checks the slot
/// ([`check_slot`]) while the stream starts, so that a reconnect costs the slower of the two,
/// not their sum (issue #26: 1.63 s inside one reconnect after a WAN cut, most of it before
/// the stream started).
type Opening = OnThread<Result<(Client, Option<i64>), Fault>>;

/// What an [`Opening`] gave (`None`: nothing within [`SQL_WITHIN`], or its thread ended).
fn sql_opened(done: Option<Result<(Client, Option<i64>), Fault>>) -> Result<(Client, Option<i64>), Fault> {
    done.unwrap_or_else(|| {
        Err(Fault::Transient(format!(
            "PostgreSQL: the SQL connection did not open within {} s",
            SQL_WITHIN.as_secs()
        )))
    })
}

/// A stream being started on a thread ([`Source::tend`]'s reconnect): the start, and its
/// walsender's process id.
type Starting = OnThread<(Result<Stream, String>, Option<i32>)>;

/// What a [`Starting`] gave (`None`: nothing within [`SQL_WITHIN`], or its thread ended).
fn stream_started(
    done: Option<(Result<Stream, String>, Option<i32>)>,
) -> (Result<Stream, String>, Option<i32>) {
    done.unwrap_or_else(|| {
        (
            Err(format!(
                "PostgreSQL: the replication stream did not start within {} s",
                SQL_WITHIN.as_secs()
            )),
            None,
        )
    })
}

/// A silence of the stream: since when, the last look at the primary (its `xmax`, and when),
/// and whether it was said.
type Quiet = (Instant, Option<(u64, Instant)>, bool);

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
            walsenders: Vec::new(),
            _snapshots: None,
            restarted: None,
            opening: None,
            tending: (None, 0),
            starting: None,
            slot_seen: false,
        };
        source.reconnect()?;
        if let Some(every) = snapshot_every {
            source._snapshots = Some(Keeper::spawn(conninfo, slot, every).map_err(Fault::Fatal)?);
        }
        Ok(source)
    }

    /// The SQL connection, waiting for the one being opened if need be.
    fn client(&mut self) -> Result<&mut Client, Fault> {
        if let Some(opening) = self.opening.take() {
            self.opened(sql_opened(opening.wait(SQL_WITHIN)))?;
        }
        self.client.as_mut().ok_or_else(|| Fault::Transient("PostgreSQL: not connected".into()))
    }

    /// Takes the opened SQL connection (and the slot's backlog, for the reconnect's steps).
    fn opened(&mut self, opened: Result<(Client, Option<i64>), Fault>) -> Result<(), Fault> {
        let (client, backlog) = opened?;
        self.client = Some(client);
        self.slot_seen = true;
        if let Some(restart) = self.restarted.as_mut() {
            (restart.sql, restart.backlog) = (Some(restart.began.elapsed()), backlog);
        }
        Ok(())
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
            self.client = Some(connect(&config, &server_of(&self.conninfo)).map_err(|f| f.to_string())?);
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
        let sent = self.stream.as_ref().map_or(0, Stream::received);
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
        let rows = self.live_stream()?.rows(wait, max).map_err(Fault::Transient)?;
        if rows.is_empty() {
            self.quiet_stream()?;
        } else {
            // Nothing is handed on before the SQL connection of a reconnect has checked the slot.
            self.client()?;
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
        // A stream being started is not waited for: the confirmation fails, and the reconnect
        // reads again from the position confirmed before (nothing is confirmed past it).
        let stream =
            self.stream.as_mut().ok_or_else(|| Fault::Transient("PostgreSQL: not connected".into()))?;
        stream.confirm(lsn + u64::from(*past)).map_err(Fault::Transient)
    }

    fn given(&self) -> u64 {
        self.stream.as_ref().map_or(0, Stream::received)
    }

    fn tend(&mut self) -> Result<(), Fault> {
        if let Some(stream) = self.stream.as_mut() {
            let Err(why) = stream.tend() else { return Ok(()) };
            eprintln!("shoal invalidator: {why}; reconnecting while the batch waits for the replica");
            (self.stream, self.open, self.quiet, self.tending) = (None, None, None, (None, 0));
        }
        if let Some(starting) = self.starting.take() {
            let Some(done) = starting.ready() else {
                self.starting = Some(starting);
                return Ok(());
            };
            let (started, pid) = stream_started(done);
            match self.started(started, pid) {
                Ok(stream) => self.install(stream),
                Err(why) => {
                    if slot_in_use(&why) {
                        self.end_old_walsenders_when_connected()?;
                    }
                    self.tending = (Some(Instant::now()), self.tending.1 + 1);
                }
            }
            return Ok(());
        }
        // Tried again after 20 ms, doubling to 500 ms, as the main loop does.
        let (tried, failures) = self.tending;
        let pause = crate::pause_after(failures, crate::REREAD_FIRST, crate::REREAD_CAP);
        if tried.is_some_and(|at| at.elapsed() < pause) {
            return Ok(());
        }
        if self.client.is_none() && self.opening.is_none() {
            self.opening = Some(self.spawn_opening()?);
        }
        // On a thread: a connect through a link still cut waits out its timeout, and the
        // replica the batch waits for must be watched meanwhile (it may be back first).
        self.restarted.get_or_insert_with(Restart::new).try_again();
        let (conninfo, slot) = (self.conninfo.clone(), self.slot.clone());
        self.starting = Some(OnThread::spawn("invalidator-stream", move || {
            let mut pid = None;
            (Stream::start(&conninfo, &slot, &mut pid), pid)
        }));
        Ok(())
    }

    fn set_progress(&mut self, progress: Arc<Progress>) {
        self.progress = Some(progress);
    }

    /// Starts the stream and, beside it on a thread, the SQL connection: the stream needs only
    /// the slot, and its first rows wait for the SQL connection only where they need it (the
    /// slot checked, commits visible). The first connection of a process checks (or makes) the
    /// slot before the stream starts.
    fn reconnect(&mut self) -> Result<(), Fault> {
        (self.client, self.stream, self.open, self.quiet, self.opening, self.starting) =
            (None, None, None, None, None, None);
        self.restarted.get_or_insert_with(Restart::new).try_again();
        let opening = self.spawn_opening()?;
        if self.slot_seen {
            self.opening = Some(opening);
        } else {
            self.opened(sql_opened(opening.wait(SQL_WITHIN)))?;
        }
        let stream = self.start_stream()?;
        self.install(stream);
        Ok(())
    }
}

impl Restart {
    fn new() -> Restart {
        let began = Instant::now();
        Restart {
            began,
            tries: 0,
            last: Duration::ZERO,
            stream: Duration::ZERO,
            sql: None,
            ended: None,
            backlog: None,
        }
    }

    /// Another try begins: the steps said are its own.
    fn try_again(&mut self) {
        (self.tries, self.last) = (self.tries + 1, self.began.elapsed());
        (self.sql, self.ended) = (None, None);
    }
}

impl Postgres {
    /// The SQL connection opened (and the slot checked) on a thread.
    fn spawn_opening(&self) -> Result<Opening, Fault> {
        let config = sql_config_of(&self.conninfo).map_err(Fault::Fatal)?;
        let (server, slot, marker, recreate) =
            (server_of(&self.conninfo), self.slot.clone(), self.marker.clone(), self.recreate);
        Ok(OnThread::spawn("invalidator-sql", move || {
            let mut client = connect(&config, &server)?;
            let backlog = check_slot(&mut client, &slot, &marker, recreate)?;
            Ok((client, backlog))
        }))
    }

    /// Starts the stream from the slot's confirmed position. While the walsender of a stream
    /// given up still holds the slot, it is ended once the SQL connection is there, and the
    /// start tried again after 20 ms, doubling to 500 ms (for up to [`SLOT_FREE_WITHIN`]).
    fn start_stream(&mut self) -> Result<Stream, Fault> {
        let deadline = Instant::now() + SLOT_FREE_WITHIN;
        let mut tries = 0;
        loop {
            tries += 1;
            let mut pid = None;
            let started = Stream::start(&self.conninfo, &self.slot, &mut pid);
            let why = match self.started(started, pid) {
                Ok(stream) => return Ok(stream),
                Err(why) => why,
            };
            if !slot_in_use(&why) || Instant::now() >= deadline {
                // PostgreSQL refused the stream (a slot that is gone, say): the SQL connection's
                // check says why, if it can. A connection that failed is not waited for: the
                // SQL side may hang as long as the link is down.
                if let Some(opening) = self.opening.take().filter(|_| why.contains("(SQLSTATE ")) {
                    self.opened(sql_opened(opening.wait(SQL_WITHIN)))?;
                }
                return Err(Fault::Transient(why));
            }
            self.end_old_walsenders_when_connected()?;
            std::thread::sleep(crate::pause_after(tries, crate::REREAD_FIRST, crate::REREAD_CAP));
        }
    }

    /// The stream to read, waiting for one being started ([`Source::tend`]'s, begun while a
    /// batch waited for the replica).
    fn live_stream(&mut self) -> Result<&mut Stream, Fault> {
        if let Some(starting) = self.starting.take() {
            let (started, pid) = stream_started(starting.wait(SQL_WITHIN));
            let stream = self.started(started, pid).map_err(Fault::Transient)?;
            self.install(stream);
        }
        self.stream.as_mut().ok_or_else(|| Fault::Transient("PostgreSQL: not connected".into()))
    }

    /// Reads `stream` from now on (its walsender noted by [`Postgres::started`]).
    fn install(&mut self, stream: Stream) {
        self.stream = Some(stream);
        self.tending = (None, 0);
        if let Some(restart) = self.restarted.as_mut() {
            restart.stream = restart.began.elapsed();
        }
    }

    /// Notes the walsender of a start (`pid`): once the stream started, it is the one to end
    /// after this stream is given up, and the earlier ones no longer hold the slot; after a
    /// start that failed past the start-up, other than for a slot in use, it may hold the slot.
    fn started(&mut self, started: Result<Stream, String>, pid: Option<i32>) -> Result<Stream, String> {
        match (&started, pid) {
            (Ok(_), _) => self.walsenders = pid.into_iter().collect(),
            (Err(why), Some(pid)) if !slot_in_use(why) => self.walsenders.push(pid),
            (Err(_), _) => {}
        }
        started
    }

    /// Ends the walsenders of the streams given up once the SQL connection being opened is
    /// there (not waiting for it), noting when for the reconnect's steps.
    fn end_old_walsenders_when_connected(&mut self) -> Result<(), Fault> {
        if let Some(done) = self.opening.as_ref().and_then(OnThread::ready) {
            self.opening = None;
            self.opened(sql_opened(done))?;
        }
        if self.client.is_none() || self.walsenders.is_empty() {
            return Ok(());
        }
        for pid in std::mem::take(&mut self.walsenders) {
            self.end_old_walsender(pid)?;
        }
        if let Some(restart) = self.restarted.as_mut() {
            restart.ended = Some(restart.began.elapsed());
        }
        Ok(())
    }

    /// Says, once per reconnect, how long the new stream took to its first row and what it
    /// decoded again (issue #26: where the time after a cut goes). The time is the Unix time,
    /// to line it up with a fault's log.
    fn say_restarted(&mut self) {
        let Some(Restart { began, tries, last, stream, sql, ended, backlog }) = self.restarted.take() else {
            return;
        };
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        eprintln!(
            "shoal invalidator: the restarted stream's first row came {:.0} ms after the reconnect began \
             ({tries} tries, the last begun at {:.0} ms; the stream started at {:.0} ms, the SQL connection open with the slot checked at {}{}; {} kB \
             of WAL decoded again from the slot's restart point; unix time {unix:.3})",
            ms(began.elapsed()),
            ms(last),
            ms(stream),
            sql.map_or_else(|| "?".to_string(), |d| format!("{:.0} ms", ms(d))),
            ended.map_or_else(String::new, |d| format!(", the old walsender ended at {:.0} ms", ms(d))),
            backlog.map_or_else(|| "?".to_string(), |b| (b / 1000).to_string()),
        );
    }

    /// Ends the walsender of the stream given up, if it still reads this slot (and waits up to
    /// a second for it to go): a walsender whose connection was cut holds the slot until it
    /// notices, and the new stream's start would fail with "slot … is active" meanwhile. A
    /// process id that now reads another slot, or none, is left alone.
    fn end_old_walsender(&mut self, pid: i32) -> Result<(), Fault> {
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
