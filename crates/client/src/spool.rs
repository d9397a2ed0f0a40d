//! Reliable deletes: a spool file per destination, written before anyone is told the deletes
//! are taken, and delivered from there, in order, by a thread per destination that waits out
//! the destination's absence. Used by the router (`AllAsyncRoute` and broadcast deletes) and
//! the invalidator (every delete it sends). A process killed at any moment loses nothing: the
//! file is on disk (a `kill -9` keeps what was written; [`Spools::durable`] also survives the
//! machine going down) and the delivered offset is recorded after every acknowledgement, so a
//! restarted process delivers the rest (a delete may be sent twice; a delete is idempotent).
//!
//! ```text
//!   append_batch(dest, "delete a\r\ndelete b\r\n", 2, stamp)   "<len> <answers> <stamp>\n<bytes>"
//!                                 │ wake
//!   delivery thread (one per destination) ──► connect, send the record, read its answers
//!        every answer DELETED / NOT_FOUND / HD / NF ──► offset recorded, observer told
//!        file drained ──► truncated to 0 (under the same lock as appends)
//! ```
//!
//! A record is a batch of pipelined deletes acknowledged whole: any other answer, a timeout or
//! a broken connection sends it again. Records queued behind each other (a destination that
//! is behind) go out together, up to 64 in one write.
//! Records written by earlier builds (`<len>\n<bytes>`) read as one answer, stamp 0.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

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

/// One destination's spool.
struct Spool {
    address: String,
    path: PathBuf,
    file: Mutex<File>,
    wake: Condvar,
    /// Deletes written and not yet acknowledged.
    pending: AtomicU64,
}

/// Every destination's spool, in one directory.
pub struct Spools {
    dir: PathBuf,
    max_bytes: u64,
    /// Whether every append is flushed to the disk before it returns.
    durable: bool,
    /// Who is delivering, for messages ("shoal router", "shoal invalidator").
    owner: &'static str,
    observer: Option<Observer>,
    spools: Mutex<HashMap<String, Arc<Spool>>>,
    /// Deletes delivered from spools.
    pub delivered: AtomicU64,
    /// Deliveries a destination answered with something other than an acknowledgement.
    pub refused: AtomicU64,
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

    /// [`Spools::open`] with every append flushed to the disk (`durable`) and `observer`
    /// told of every acknowledged record.
    pub fn open_with(
        dir: &Path,
        max_bytes: u64,
        owner: &'static str,
        durable: bool,
        observer: Option<Observer>,
    ) -> std::io::Result<Arc<Spools>> {
        std::fs::create_dir_all(dir)?;
        let spools = Arc::new(Spools {
            dir: dir.to_path_buf(),
            max_bytes,
            durable,
            owner,
            observer,
            spools: Mutex::new(HashMap::new()),
            delivered: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "address") {
                let address = std::fs::read_to_string(&path)?.trim().to_string();
                spools.spool(&address)?;
            }
        }
        Ok(spools)
    }

    /// Appends one request for `address` (answered by one line); refused when its spool is full.
    pub fn append(self: &Arc<Self>, address: &str, request: &[u8]) -> std::io::Result<()> {
        self.append_batch(address, request, 1, 0)
    }

    /// Appends `requests`, answered by `answers` lines, as one record for `address`, delivered
    /// in one write; `stamp` comes back to the observer. Refused when the spool is full.
    pub fn append_batch(
        self: &Arc<Self>,
        address: &str,
        requests: &[u8],
        answers: u32,
        stamp: u64,
    ) -> std::io::Result<()> {
        let spool = self.spool(address)?;
        let mut file = spool.file.lock().unwrap_or_else(|p| p.into_inner());
        let length = file.metadata()?.len();
        let mut record = format!("{} {answers} {stamp}\n", requests.len()).into_bytes();
        if length + record.len() as u64 + requests.len() as u64 > self.max_bytes {
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
        if self.durable {
            file.sync_data()?;
        }
        spool.wake.notify_one();
        Ok(())
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
        let spool = Arc::new(Spool {
            address: address.to_string(),
            path,
            file: Mutex::new(file),
            wake: Condvar::new(),
            pending: AtomicU64::new(0),
        });
        let length = spool.file.lock().unwrap_or_else(|p| p.into_inner()).metadata()?.len();
        // An offset past the end was left by an older build that truncated before resetting it.
        let offset = Some(read_offset(&spool.path)).filter(|&o| o <= length).unwrap_or(0);
        if offset != read_offset(&spool.path) {
            write_offset(&spool.path, offset)?;
        }
        let (answers, end) = complete_records(&spool.path, offset);
        // A record cut short by a kill mid-append would swallow the next one: drop its bytes
        // (nobody was told it was taken) before anything is appended after them.
        if length > end {
            spool.file.lock().unwrap_or_else(|p| p.into_inner()).set_len(end)?;
        }
        spool.pending.store(answers, Ordering::Relaxed);
        map.insert(address.to_string(), spool.clone());
        let spools = self.clone();
        let delivering = spool.clone();
        std::thread::Builder::new()
            .name(format!("spool {address}"))
            .spawn(move || deliver(&spools, &delivering))
            .map_err(std::io::Error::other)?;
        Ok(spool)
    }
}

fn offset_path(path: &Path) -> PathBuf {
    path.with_extension("offset")
}

fn read_offset(path: &Path) -> u64 {
    std::fs::read_to_string(offset_path(path)).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0)
}

fn write_offset(path: &Path, offset: u64) -> std::io::Result<()> {
    // Written whole then renamed, so a kill mid-write leaves the old offset, never a torn one.
    let temporary = path.with_extension("offset.new");
    std::fs::write(&temporary, offset.to_string())?;
    std::fs::rename(temporary, offset_path(path))
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
    let damaged = || std::io::Error::other(format!("spool damaged at byte {offset}"));
    let mut fields = header.split_ascii_whitespace().map(|f| f.parse::<u64>());
    let length = fields.next().ok_or_else(damaged)?.map_err(|_| damaged())?;
    let answers = fields.next().unwrap_or(Ok(1)).map_err(|_| damaged())?;
    let stamp = fields.next().unwrap_or(Ok(0)).map_err(|_| damaged())?;
    let (Ok(length), Ok(answers)) = (usize::try_from(length), u32::try_from(answers)) else {
        return Err(damaged());
    };
    if length > 64 << 20 {
        return Err(damaged());
    }
    let mut requests = vec![0; length];
    if reader.read_exact(&mut requests).is_err() {
        return Ok(None);
    }
    Ok(Some(Record { requests, answers, stamp, next: offset + header.len() as u64 + length as u64 }))
}

/// A blocking connection for delivery.
enum Line {
    Tcp(BufReader<TcpStream>),
    Unix(BufReader<UnixStream>),
}

impl Line {
    fn open(address: &str) -> std::io::Result<Line> {
        let timeout = Some(Duration::from_secs(1));
        if address.contains('/') {
            let s = UnixStream::connect(address)?;
            s.set_read_timeout(timeout)?;
            Ok(Line::Unix(BufReader::new(s)))
        } else {
            let addr = std::net::ToSocketAddrs::to_socket_addrs(address)?
                .next()
                .ok_or_else(|| std::io::Error::other("no address"))?;
            let s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
            s.set_read_timeout(timeout)?;
            s.set_nodelay(true)?;
            Ok(Line::Tcp(BufReader::new(s)))
        }
    }

    /// Sends requests and reads their `answers`: `None` when every one acknowledged a delete,
    /// else the first answer that did not.
    fn exchange(&mut self, requests: &[u8], answers: u64) -> std::io::Result<Option<String>> {
        match self {
            Line::Tcp(r) => r.get_mut().write_all(requests)?,
            Line::Unix(r) => r.get_mut().write_all(requests)?,
        }
        let reader: &mut dyn BufRead = match self {
            Line::Tcp(r) => r,
            Line::Unix(r) => r,
        };
        let mut refusal = None;
        let mut answer = String::new();
        for _ in 0..answers {
            answer.clear();
            if reader.read_line(&mut answer)? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            if refusal.is_none()
                && !["DELETED", "NOT_FOUND", "HD", "NF"].iter().any(|a| answer.starts_with(a))
            {
                refusal = Some(answer.trim_end().to_string());
            }
        }
        Ok(refusal)
    }
}

/// Delivers `spool` for as long as the process runs.
fn deliver(spools: &Spools, spool: &Spool) {
    let owner = spools.owner;
    let mut connection: Option<Line> = None;
    let mut reader = match File::open(&spool.path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{owner}: spool {}: {e}", spool.path.display());
            return;
        }
    };
    let mut offset = read_offset(&spool.path);
    let mut refusing = false;
    loop {
        let next = match record_at(&mut reader, offset) {
            Ok(next) => next,
            Err(e) => {
                eprintln!("{owner}: {e}; {} is left for an operator", spool.path.display());
                return;
            }
        };
        let Some(record) = next else {
            let file = spool.file.lock().unwrap_or_else(|p| p.into_inner());
            let length = file.metadata().map(|m| m.len()).unwrap_or(0);
            if length == offset && offset > 0 {
                // Drained: start the file over, under the lock appends take. The offset goes to 0
                // first: a kill between the two steps then re-sends delivered deletes (harmless)
                // instead of leaving an offset past the end of a file that new records refill.
                if write_offset(&spool.path, 0).is_ok() && file.set_len(0).is_ok() {
                    offset = 0;
                }
            }
            if length == offset {
                let _ = spool.wake.wait_timeout(file, RETRY_EVERY);
            }
            continue;
        };
        // Records that queued up behind this one go in the same write: one offset update and
        // one round trip for all of them when the destination is behind.
        let mut records = vec![record];
        while records.len() < GATHER_RECORDS {
            let last = records.last().expect("one record at least");
            match record_at(&mut reader, last.next) {
                Ok(Some(more)) => records.push(more),
                _ => break,
            }
        }
        let answers: u64 = records.iter().map(|r| u64::from(r.answers)).sum();
        let requests = records.iter().flat_map(|r| r.requests.iter().copied()).collect::<Vec<u8>>();
        let next = records.last().expect("one record at least").next;
        let answered = connection
            .take()
            .map_or_else(|| Line::open(&spool.address), Ok)
            .and_then(|mut c| c.exchange(&requests, answers).map(|refusal| (c, refusal)));
        match answered {
            Ok((c, None)) => {
                connection = Some(c);
                refusing = false;
                if write_offset(&spool.path, next).is_ok() {
                    offset = next;
                    spool.pending.fetch_sub(answers, Ordering::Relaxed);
                    spools.delivered.fetch_add(answers, Ordering::Relaxed);
                    if let Some(observer) = &spools.observer {
                        for record in &records {
                            observer(
                                &spool.address,
                                Delivered { answers: record.answers, stamp: record.stamp },
                            );
                        }
                    }
                }
            }
            // A refusal (say, a router whose servers are down) keeps the connection; the
            // first of a run is told to the operator.
            Ok((c, Some(answer))) => {
                connection = Some(c);
                spools.refused.fetch_add(1, Ordering::Relaxed);
                if !refusing {
                    eprintln!(
                        "{owner}: {} answered {answer:?} to a delete; the deletes stay in its spool and are \
                         sent again every {} ms until it takes them (check the servers behind it)",
                        spool.address,
                        RETRY_EVERY.as_millis()
                    );
                    refusing = true;
                }
                std::thread::sleep(RETRY_EVERY);
            }
            Err(_) => std::thread::sleep(RETRY_EVERY),
        }
    }
}
