//! # shoal-spool: reliable deletes, a spool file per destination
//!
//! A spool file per destination, written before anyone is told the deletes are taken, and
//! delivered from there, in order, by a thread per destination that waits out the
//! destination's absence. Used by the router (`AllAsyncRoute` and broadcast deletes) and the
//! invalidator (every delete it sends). A process killed at any moment loses nothing: the file
//! is on disk (a `kill -9` keeps what was written; [`Durability::EveryAppend`] and
//! [`Durability::Grouped`] also survive the machine going down, the latter once a record's
//! [`Mark`] is safe) and the delivered offset is recorded after every
//! acknowledgement, so a restarted process delivers the rest (a delete may be sent twice; a
//! delete is idempotent). It needs nothing but the standard library: it speaks just enough of
//! memcached's protocol to send pipelined deletes and read their one-line answers.
//!
//! ```text
//!   router / invalidator: append_batch(dest, "delete a\r\ndelete b\r\n", 2, stamp)
//!        │ one record, appended under the spool's lock (EveryAppend: fsync'd before it
//!        │ returns; Grouped: fsync'd by the group syncer, sync.rs; the Mark it returns says
//!        │ when the record is flushed or acknowledged)
//!        ▼
//!   <dir>/<dest>.spool  "<len> <answers> <stamp>\n<bytes>" …   <dest>.address: where it goes
//!        │ wake
//!        ▼
//!   delivery thread (one per destination, delivery.rs) ──► connect, send, read the answers
//!        answer DELETED / NOT_FOUND / HD / NF ──► <dest>.offset moved on, observer told
//!        any other answer ──► that delete sent again 250 ms later, kept in memory; the later
//!            records go on (the offset stays before it)
//!        no connection, a timeout, a broken connection ──► kept the same way, sent with the
//!            next attempt: 100 ms after the failed one began (connects given 250 ms), so a
//!            destination whose link returns is reached within about 250 ms
//!        file drained ──► truncated to 0 (under the same lock as appends)
//! ```
//!
//! A record is a batch of pipelined deletes, one a line. Each delete is judged by its own
//! answer: one the destination refuses (a router whose server for that key is down) or does
//! not answer is sent again 250 ms later, and the records after it are not held behind it
//! (deletes are idempotent; delivery.rs says why the order this changes does not matter).
//! Records queued behind each other (a destination that is behind) go out together, up to 64
//! in one write.
//! Records written by earlier builds (`<len>\n<bytes>`) read as one answer, stamp 0.
//!
//! A destination that missed invalidations while it was down ([`Spools::append_missed`]) is
//! *behind* until its spool drains: a router sends it no reads meanwhile. A spool left by an
//! earlier run with anything undelivered counts as behind too.
//!
//! A spool left by an earlier run is checked before it is used: one with a record that does
//! not parse, or whose `.address` names another destination than its file name says, is
//! refused: set aside as `<file>.refused` (or `.refused.1`, …: nothing in it is deleted, nothing
//! set aside before is overwritten) with an error naming it, and the destination starts a new
//! spool. The bytes of a record cut short by a kill mid-append (no caller was told it was
//! taken) are appended to `<file>.torn`, said so.
//!
//! Spools opened with [`Spools::open_after`] send each record only once other spools' marks
//! given with it are acknowledged (after.rs: the invalidator's second delivery to a near cache).

mod after;
mod delivery;
mod sync;

pub use sync::{Durability, Mark, Syncer};

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The most records sent in one write.
const GATHER_RECORDS: usize = 64;

/// How long delivery waits for a destination before trying again.
const RETRY_EVERY: Duration = Duration::from_millis(250);

/// What a delivery thread reports after a destination acknowledged a record.
#[derive(Debug, Clone, Copy)]
pub struct Delivered {
    /// Deletes (answers) in the record.
    pub answers: u32,
    /// The stamp given to [`Spools::append_batch`] (the invalidator's commit time, in
    /// microseconds since the epoch; 0 when none was given).
    pub stamp: u64,
}

/// Called by a delivery thread with the destination's address after each acknowledged record.
pub type Observer = Arc<dyn Fn(&str, Delivered) + Send + Sync>;

/// What a destination's delivery thread is doing, for a process that explains a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// Nothing to send: the spool is drained.
    Idle,
    /// Connecting, sending deletes or waiting for their answers.
    Sending,
    /// Waiting out a failed delivery (no connection, a timeout, a broken connection).
    Resting,
    /// Only deletes the destination refused are left, waiting to be sent again.
    Holding,
    /// What is left waits for other destinations to acknowledge the same deletes
    /// ([`Spools::open_after`]).
    Gated,
}

impl std::fmt::Display for Activity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Activity::Idle => "idle (drained)",
            Activity::Sending => "sending or waiting for answers",
            Activity::Resting => "waiting to try again after a failed delivery",
            Activity::Holding => "holding refused deletes until their next try",
            Activity::Gated => "holding deletes until the other destinations have acknowledged them",
        })
    }
}

/// One destination's spool.
struct Spool {
    address: String,
    path: PathBuf,
    file: Mutex<File>,
    wake: Condvar,
    /// Deletes written and not yet acknowledged.
    pending: AtomicU64,
    /// The destination missed invalidations and its spool has not drained since.
    behind: AtomicBool,
    /// A delivery failed (no connection, a timeout, a refusal) and the spool has not drained
    /// since ([`Spools::is_failing`]).
    failing: AtomicBool,
    /// Deletes refused or unanswered, held in memory to be sent again (also still in the file).
    held: AtomicU64,
    /// What the delivery thread is doing, and since when.
    activity: Mutex<(Activity, Instant)>,
    /// Where the file's byte 0 is in the spool's logical positions (bytes ever appended,
    /// across truncations): moved on, under the file's lock, when a drained file is truncated.
    base: AtomicU64,
    /// The logical position before which every record is on the disk as [`Durability`] asks
    /// (fsync'd, for [`Durability::Grouped`]).
    synced: AtomicU64,
    /// The logical position before which every record is acknowledged by the destination.
    acked: AtomicU64,
    /// The file, for the group syncer (a second handle: it syncs without the appends' lock).
    sync_file: File,
    /// What holds its records back until other spools' are acknowledged
    /// ([`Spools::open_after`]; `None`: sent at once).
    gate: Option<after::Gate>,
}

impl Spool {
    fn set_activity(&self, activity: Activity) {
        let mut now = self.activity.lock().unwrap_or_else(|p| p.into_inner());
        if now.0 != activity {
            *now = (activity, Instant::now());
        }
    }
}

/// Every destination's spool, in one directory.
pub struct Spools {
    dir: PathBuf,
    max_bytes: u64,
    /// When appends reach the disk.
    durability: Durability,
    /// How a file is flushed to the disk (`File::sync_data`; tests give a slow one).
    syncer: Syncer,
    /// Set by an append while [`Durability::Grouped`]: the group syncer has work.
    sync_due: (Mutex<bool>, Condvar),
    /// Group syncs done (each one `fsync` of a spool file).
    pub syncs: AtomicU64,
    /// Who is delivering, for messages ("shoal router", "shoal invalidator").
    owner: &'static str,
    observer: Option<Observer>,
    spools: Mutex<HashMap<String, Arc<Spool>>>,
    /// Deletes delivered from spools.
    pub delivered: AtomicU64,
    /// Deliveries a destination answered with something other than an acknowledgement.
    pub refused: AtomicU64,
    /// Appends refused because the spool was full.
    pub full: AtomicU64,
    /// Spool files left by an earlier run that were refused (set aside) as damaged or foreign.
    pub files_refused: AtomicU64,
    /// Spools that are behind (so that asking costs no lock while none is).
    behind: AtomicU64,
    /// [`Spools::open_after`]: every spool is gated, and what an earlier run left in one waits
    /// for these marks.
    after: Option<Vec<Mark>>,
}

impl std::fmt::Debug for Spools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spools").field("dir", &self.dir).field("depths", &self.depths()).finish()
    }
}

/// The file name of `address`'s spool: the address with anything but letters and digits
/// turned into `_`.
fn file_name(address: &str) -> String {
    let safe: String = address.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    format!("{safe}.spool")
}

impl Spools {
    /// Spools in `dir` (created if missing), each at most `max_bytes`, not flushed to the disk
    /// on every append. Spools left by an earlier run are delivered: their address is in a
    /// `.address` file beside them.
    pub fn open(dir: &Path, max_bytes: u64, owner: &'static str) -> std::io::Result<Arc<Spools>> {
        Self::open_with(dir, max_bytes, owner, false, None)
    }

    /// [`Spools::open`] with every append flushed to the disk before it returns (`durable`)
    /// and `observer` told of every acknowledged record.
    pub fn open_with(
        dir: &Path,
        max_bytes: u64,
        owner: &'static str,
        durable: bool,
        observer: Option<Observer>,
    ) -> std::io::Result<Arc<Spools>> {
        let durability = if durable { Durability::EveryAppend } else { Durability::Unflushed };
        Self::open_durable(dir, max_bytes, owner, durability, Syncer::default(), observer)
    }

    /// [`Spools::open`] with appends reaching the disk as `durability` says, flushed by
    /// `syncer`, and `observer` told of every acknowledged record. [`Durability::Grouped`]
    /// starts the group syncer's thread.
    pub fn open_durable(
        dir: &Path,
        max_bytes: u64,
        owner: &'static str,
        durability: Durability,
        syncer: Syncer,
        observer: Option<Observer>,
    ) -> std::io::Result<Arc<Spools>> {
        Self::open_gated(dir, max_bytes, owner, durability, syncer, observer, None)
    }

    /// [`Spools::open_durable`], gated when `after` is given ([`Spools::open_after`]).
    fn open_gated(
        dir: &Path,
        max_bytes: u64,
        owner: &'static str,
        durability: Durability,
        syncer: Syncer,
        observer: Option<Observer>,
        after: Option<Vec<Mark>>,
    ) -> std::io::Result<Arc<Spools>> {
        std::fs::create_dir_all(dir)?;
        let spools = Arc::new(Spools {
            dir: dir.to_path_buf(),
            max_bytes,
            durability,
            syncer,
            sync_due: (Mutex::new(false), Condvar::new()),
            syncs: AtomicU64::new(0),
            owner,
            observer,
            spools: Mutex::new(HashMap::new()),
            delivered: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            full: AtomicU64::new(0),
            files_refused: AtomicU64::new(0),
            behind: AtomicU64::new(0),
            after,
        });
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if !path.exists() {
                continue; // set aside with its pair earlier in this loop
            }
            let extension = path.extension().and_then(|e| e.to_str());
            let result = match extension {
                Some("address") => spools.resume(&path),
                Some("spool") if !path.with_extension("address").exists() => Err(format!(
                    "{} has no .address file beside it: nobody knows where it goes",
                    path.display()
                )),
                _ => Ok(()),
            };
            if let Err(why) = result {
                // The process keeps running: the file is set aside for an operator.
                spools.files_refused.fetch_add(1, Ordering::Relaxed);
                let spool = path.with_extension("spool");
                let aside = set_aside(&spool, "refused");
                let _ =
                    std::fs::rename(path.with_extension("address"), spool.with_extension("address.refused"));
                let _ = std::fs::remove_file(offset_path(&spool));
                eprintln!("{owner}: refused the spool file {}: {why}; {aside}", spool.display());
            }
        }
        if durability == Durability::Grouped {
            sync::start(&spools)?;
        }
        Ok(spools)
    }

    /// Checks and takes up the spool an earlier run left, named by its `.address` file.
    fn resume(self: &Arc<Self>, address_path: &Path) -> Result<(), String> {
        let address = std::fs::read_to_string(address_path).map_err(|e| e.to_string())?.trim().to_string();
        let path = address_path.with_extension("spool");
        if path.file_name().and_then(|n| n.to_str()) != Some(&file_name(&address)) {
            return Err(format!("it is for {address:?}, whose spool file would be {}", file_name(&address)));
        }
        let length = std::fs::metadata(&path).map_or(0, |m| m.len());
        // An offset past the end (left by an older build) is [`Spools::spool`]'s to reset.
        let offset = Some(read_offset(&path)).filter(|&o| o <= length).unwrap_or(0);
        let (_, end) = scan(&path, offset)?;
        if length > end {
            // A record cut short by a kill mid-append: nobody was told it was taken.
            let torn = std::fs::read(&path).map_err(|e| e.to_string())?;
            let aside = path.with_extension("spool.torn");
            // Appended: bytes set aside by an earlier start stay.
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(&aside)
                .and_then(|mut f| f.write_all(&torn[end as usize..]))
                .map_err(|e| e.to_string())?;
            OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_len(end))
                .map_err(|e| e.to_string())?;
            eprintln!(
                "{}: {}: its last record was cut short by a kill while it was written (no caller was told \
                 it was taken); its {} bytes are set aside in {}",
                self.owner,
                path.display(),
                length - end,
                aside.display()
            );
        }
        let spool = self.spool(&address).map_err(|e| e.to_string())?;
        if spool.pending.load(Ordering::Relaxed) > 0 {
            self.mark_behind(&spool);
        }
        Ok(())
    }

    /// Appends a delete `address` missed (it is down): it is behind until its spool drains.
    pub fn append_missed(self: &Arc<Self>, address: &str, request: &[u8]) -> std::io::Result<()> {
        self.append(address, request)?;
        // Marked after the record is in: a drain seen before it would clear the mark again.
        self.mark_behind(&*self.spool(address)?);
        Ok(())
    }

    fn mark_behind(&self, spool: &Spool) {
        if !spool.behind.swap(true, Ordering::AcqRel) {
            self.behind.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Whether `address` missed invalidations that are not delivered yet (or a spool an earlier
    /// run left for it is not drained yet).
    pub fn is_behind(&self, address: &str) -> bool {
        if self.behind.load(Ordering::Acquire) == 0 {
            return false;
        }
        let map = self.spools.lock().unwrap_or_else(|p| p.into_inner());
        map.get(address).is_some_and(|s| s.behind.load(Ordering::Acquire))
    }

    /// Whether a delivery to `address` failed (it could not be reached, timed out or refused)
    /// and its spool has not drained since: what it was sent is still undelivered.
    pub fn is_failing(&self, address: &str) -> bool {
        let map = self.spools.lock().unwrap_or_else(|p| p.into_inner());
        map.get(address).is_some_and(|s| s.failing.load(Ordering::Acquire))
    }

    /// Appends one request for `address` (answered by one line); refused when its spool is full.
    pub fn append(self: &Arc<Self>, address: &str, request: &[u8]) -> std::io::Result<()> {
        self.append_batch(address, request, 1, 0).map(|_| ())
    }

    /// Appends `requests`, answered by `answers` lines, as one record for `address`, delivered
    /// in one write; `stamp` comes back to the observer. Refused when the spool is full. The
    /// [`Mark`] tells when the record (and every one before it) is safe: on the disk as the
    /// spools' [`Durability`] asks, or acknowledged.
    pub fn append_batch(
        self: &Arc<Self>,
        address: &str,
        requests: &[u8],
        answers: u32,
        stamp: u64,
    ) -> std::io::Result<Mark> {
        self.append_after(address, requests, answers, stamp, Vec::new())
    }

    /// [`Spools::append_batch`] of a record sent only once every mark in `after` is
    /// acknowledged by its destination (at once on spools not opened with
    /// [`Spools::open_after`] or with `after` empty). The [`Mark`] returned says when it is safe
    /// (flushed or acknowledged), as any.
    pub fn append_after(
        self: &Arc<Self>,
        address: &str,
        requests: &[u8],
        answers: u32,
        stamp: u64,
        after: Vec<Mark>,
    ) -> std::io::Result<Mark> {
        let spool = self.spool(address)?;
        let mut file = spool.file.lock().unwrap_or_else(|p| p.into_inner());
        let length = file.metadata()?.len();
        let mut record = format!("{} {answers} {stamp}\n", requests.len()).into_bytes();
        if length + record.len() as u64 + requests.len() as u64 > self.max_bytes {
            self.full.fetch_add(1, Ordering::Relaxed);
            return Err(std::io::Error::other(format!(
                "spool of {address} is full ({} bytes): the destination has been unreachable too long",
                self.max_bytes
            )));
        }
        record.extend_from_slice(requests);
        // Counted before it is written: the delivery thread reads the file without the lock
        // and may take the record the moment it is there.
        spool.pending.fetch_add(u64::from(answers), Ordering::Relaxed);
        let written = file.seek(SeekFrom::End(0)).and_then(|_| file.write_all(&record));
        if let Err(e) = written {
            spool.pending.fetch_sub(u64::from(answers), Ordering::Relaxed);
            return Err(e);
        }
        let end = spool.base.load(Ordering::Acquire) + length + record.len() as u64;
        if let Some(gate) = &spool.gate {
            // Queued under the appends' lock, so gate entries are in the file's order; the
            // delivery thread, which may already see the record, sends nothing past the gate.
            gate.hold(end, u64::from(answers), after);
        }
        match self.durability {
            Durability::EveryAppend => {
                self.syncer.sync(&file)?;
                spool.synced.fetch_max(end, Ordering::AcqRel);
            }
            Durability::Unflushed => {
                spool.synced.fetch_max(end, Ordering::AcqRel);
            }
            Durability::Grouped => self.sync_due(),
        }
        drop(file);
        spool.wake.notify_one();
        Ok(Mark { spool, end })
    }

    /// What `address`'s delivery thread is doing and for how long it has been, with the deletes
    /// it holds to send again (refused or unanswered); `None` for an address with no spool.
    pub fn activity(&self, address: &str) -> Option<(Activity, Duration, u64)> {
        let map = self.spools.lock().unwrap_or_else(|p| p.into_inner());
        let spool = map.get(address)?;
        let (activity, since) = *spool.activity.lock().unwrap_or_else(|p| p.into_inner());
        Some((activity, since.elapsed(), spool.held.load(Ordering::Relaxed)))
    }

    /// Deletes waiting per destination, by address.
    pub fn depths(&self) -> Vec<(String, u64)> {
        let map = self.spools.lock().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<_> =
            map.values().map(|s| (s.address.clone(), s.pending.load(Ordering::Relaxed))).collect();
        all.sort();
        all
    }

    /// `address`'s spool, opened (and its delivery thread started) on first use.
    fn spool(self: &Arc<Self>, address: &str) -> std::io::Result<Arc<Spool>> {
        let mut map = self.spools.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = map.get(address) {
            return Ok(s.clone());
        }
        let path = self.dir.join(file_name(address));
        std::fs::write(path.with_extension("address"), address)?;
        let file = OpenOptions::new().create(true).read(true).append(true).open(&path)?;
        let length = file.metadata()?.len();
        // An offset past the end was left by an older build that truncated before resetting it.
        let offset = Some(read_offset(&path)).filter(|&o| o <= length).unwrap_or(0);
        if offset != read_offset(&path) {
            write_offset(&path, offset)?;
        }
        let (answers, end) = complete_records(&path, offset);
        // A record cut short by a kill mid-append would swallow the next one: drop its bytes
        // (nobody was told it was taken) before anything is appended after them.
        if length > end {
            file.set_len(end)?;
        }
        let sync_file = file.try_clone()?;
        let spool = Arc::new(Spool {
            address: address.to_string(),
            path,
            file: Mutex::new(file),
            wake: Condvar::new(),
            pending: AtomicU64::new(answers),
            behind: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            held: AtomicU64::new(0),
            activity: Mutex::new((Activity::Idle, Instant::now())),
            base: AtomicU64::new(0),
            synced: AtomicU64::new(0),
            acked: AtomicU64::new(offset),
            sync_file,
            // What an earlier run left waits for the marks given at open.
            gate: self.after.as_deref().map(|after| after::Gate::new(offset, end, answers, after)),
        });
        map.insert(address.to_string(), spool.clone());
        let spools = self.clone();
        let delivering = spool.clone();
        std::thread::Builder::new()
            .name(format!("spool {address}"))
            .spawn(move || delivery::deliver(&spools, &delivering))
            .map_err(std::io::Error::other)?;
        Ok(spool)
    }
}

/// Why a spool cannot be read past `offset`.
fn damaged_message(offset: u64) -> String {
    format!("damaged: a record from byte {offset} on has a header that does not parse")
}

/// Renames `path` to `<path>.<suffix>` (`.<suffix>.1`, … if taken: nothing set aside before is
/// overwritten) and says where it went (or why it could not).
fn set_aside(path: &Path, suffix: &str) -> String {
    let named = |n: usize| {
        let mut aside = path.as_os_str().to_owned();
        aside.push(if n == 0 { format!(".{suffix}") } else { format!(".{suffix}.{n}") });
        PathBuf::from(aside)
    };
    let aside = (0..).map(named).find(|p| !p.exists()).expect("a free name");
    match std::fs::rename(path, &aside) {
        Ok(()) => format!("set aside, undelivered, as {}; a new spool starts", aside.display()),
        Err(e) => format!("could not set it aside as {}: {e}", aside.display()),
    }
}

fn offset_path(path: &Path) -> PathBuf {
    path.with_extension("offset")
}

fn read_offset(path: &Path) -> u64 {
    std::fs::read_to_string(offset_path(path)).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0)
}

/// Records `offset` in place: one fixed-width write at the start of the offset file (created
/// the first time), which a kill cannot tear (one write within a page) and which never waits
/// for the disk. The file used to be written beside and renamed over: each rename unlinked the
/// previous file, whose pages the rename itself had sent to the disk (ext4's `auto_da_alloc`),
/// so behind another process's writeback the rename waited seconds for them, holding the
/// directory's lock, and every delivery thread of the directory waited in its own rename
/// (issue #26: both invalidators delivered nothing for 5–15 s while a build wrote).
fn write_offset(path: &Path, offset: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let path = offset_path(path);
    // Not O_CREAT first: creating takes the directory's lock, opening does not.
    let file = match OpenOptions::new().write(true).open(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            OpenOptions::new().write(true).create(true).truncate(false).open(&path)?
        }
        opened => opened?,
    };
    // 20 digits hold any u64, so each write covers the last (and any shorter older text).
    file.write_all_at(format!("{offset:020}\n").as_bytes(), 0)
}

/// What the spool file at `path` holds from `offset` on, read as a starting router or
/// invalidator reads a file an earlier run left: the deletes in its complete records and where
/// the last of them ends (bytes after that are an append a kill cut short), or why the file is
/// refused. At most one record (64 MiB) is in memory at a time. The `spool_file` fuzz target
/// reads arbitrary files through it.
pub fn scan(path: &Path, offset: u64) -> Result<(u64, u64), String> {
    match complete_records(path, offset) {
        (_, u64::MAX) => Err(damaged_message(offset)),
        found => Ok(found),
    }
}

/// Deletes in the complete records from `offset` on, and where the last of them ends
/// (`u64::MAX` when a damaged record follows: that is for an operator, not for truncation).
fn complete_records(path: &Path, offset: u64) -> (u64, u64) {
    let Ok(mut file) = File::open(path) else { return (0, offset) };
    let mut n = 0;
    let mut at = offset;
    loop {
        match record_at(&mut file, at) {
            Ok(Some(record)) => {
                n += u64::from(record.answers);
                at = record.next;
            }
            Ok(None) => return (n, at),
            Err(_) => return (n, u64::MAX),
        }
    }
}

/// One record read back from a spool.
struct Record {
    requests: Vec<u8>,
    answers: u32,
    stamp: u64,
    /// Where the next record begins.
    next: u64,
}

/// The record at `offset`; `None` at the end or before a record whose writing was cut short.
fn record_at(file: &mut File, offset: u64) -> std::io::Result<Option<Record>> {
    file.seek(SeekFrom::Start(offset))?;
    let mut reader = BufReader::new(file.take(64 << 20));
    let mut header = String::new();
    if reader.read_line(&mut header)? == 0 || !header.ends_with('\n') {
        return Ok(None);
    }
    let damaged = || std::io::Error::other(damaged_message(offset));
    let mut fields = header.split_ascii_whitespace().map(|f| f.parse::<u64>());
    let length = fields.next().ok_or_else(damaged)?.map_err(|_| damaged())?;
    let answers = fields.next().unwrap_or(Ok(1)).map_err(|_| damaged())?;
    let stamp = fields.next().unwrap_or(Ok(0)).map_err(|_| damaged())?;
    let (Ok(length), Ok(answers)) = (usize::try_from(length), u32::try_from(answers)) else {
        return Err(damaged());
    };
    // Each answer is to a request of at least one byte: a header claiming more answers than
    // bytes would have the delivery wait for answers that never come.
    if length > 64 << 20 || answers as usize > length {
        return Err(damaged());
    }
    let mut requests = vec![0; length];
    if reader.read_exact(&mut requests).is_err() {
        return Ok(None);
    }
    Ok(Some(Record { requests, answers, stamp, next: offset + header.len() as u64 + length as u64 }))
}

#[cfg(test)]
mod tests {
    use super::{offset_path, read_offset, write_offset};
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_offset_is_rewritten_in_place_and_reads_back_whatever_was_there_before() {
        let dir = std::env::temp_dir().join(format!("shoal-spool-offset-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let spool = dir.join("d.spool");
        // An offset file as older builds wrote it (no padding), longer than the next offset.
        std::fs::write(offset_path(&spool), "123456789").unwrap();
        assert_eq!(read_offset(&spool), 123_456_789);
        let inode = std::fs::metadata(offset_path(&spool)).unwrap().ino();
        for offset in [7, u64::MAX, 0, 4096] {
            write_offset(&spool, offset).unwrap();
            assert_eq!(read_offset(&spool), offset);
        }
        // The same file throughout: nothing renamed over it, nothing unlinked.
        assert_eq!(std::fs::metadata(offset_path(&spool)).unwrap().ino(), inode);
        std::fs::remove_file(offset_path(&spool)).unwrap();
        write_offset(&spool, 3).unwrap();
        assert_eq!(read_offset(&spool), 3, "created when missing");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
