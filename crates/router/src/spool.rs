//! Reliable deletes: a spool file per destination, written before the client hears back and
//! delivered from there, in order, by a thread per destination that waits out the
//! destination's absence. The router killed at any moment loses nothing: the file is on disk
//! (a `kill -9` keeps what was written) and its delivered offset is recorded after every
//! acknowledgement, so a restarted router delivers the rest (a delete may be sent twice; a
//! delete is idempotent).
//!
//! ```text
//!   AllAsyncRoute delete ──► Spools::append(dest, "delete k\r\n")   <len>\n<bytes> appended
//!                                 │ wake
//!   delivery thread (one per destination) ──► connect, send, read the answer ──► offset
//!        file drained ──► truncated to 0 (under the same lock as appends)
//! ```

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How long delivery waits for a destination before trying again.
const RETRY_EVERY: Duration = Duration::from_millis(250);

/// One destination's spool.
#[derive(Debug)]
struct Spool {
    address: String,
    path: PathBuf,
    file: Mutex<File>,
    wake: Condvar,
    /// Records written and not yet acknowledged.
    pending: AtomicU64,
}

/// Every destination's spool, in one directory.
#[derive(Debug)]
pub struct Spools {
    dir: PathBuf,
    max_bytes: u64,
    spools: Mutex<HashMap<String, Arc<Spool>>>,
    /// Deletes delivered from spools.
    pub delivered: AtomicU64,
}

/// The file name of `address`'s spool: the address with anything but letters and digits
/// turned into `_`.
fn file_name(address: &str) -> String {
    let safe: String = address.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    format!("{safe}.spool")
}

impl Spools {
    /// Spools in `dir` (created if missing), each at most `max_bytes`. Spools left by an
    /// earlier run are delivered: their address is on their first line.
    pub fn open(dir: &Path, max_bytes: u64) -> std::io::Result<Arc<Spools>> {
        std::fs::create_dir_all(dir)?;
        let spools = Arc::new(Spools {
            dir: dir.to_path_buf(),
            max_bytes,
            spools: Mutex::new(HashMap::new()),
            delivered: AtomicU64::new(0),
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

    /// Appends one request for `address`; refused when its spool is full.
    pub fn append(self: &Arc<Self>, address: &str, request: &[u8]) -> std::io::Result<()> {
        let spool = self.spool(address)?;
        let mut file = spool.file.lock().unwrap_or_else(|p| p.into_inner());
        let length = file.metadata()?.len();
        if length + request.len() as u64 > self.max_bytes {
            return Err(std::io::Error::other(format!(
                "spool of {address} is full ({} bytes): the destination has been unreachable too long",
                self.max_bytes
            )));
        }
        let mut record = format!("{}\n", request.len()).into_bytes();
        record.extend_from_slice(request);
        file.seek(SeekFrom::End(0))?;
        file.write_all(&record)?;
        spool.pending.fetch_add(1, Ordering::Relaxed);
        spool.wake.notify_one();
        Ok(())
    }

    /// Records waiting per destination.
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
        let offset = read_offset(&spool.path);
        spool.pending.store(count_records(&spool.path, offset), Ordering::Relaxed);
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

/// Complete records from `offset` on.
fn count_records(path: &Path, offset: u64) -> u64 {
    let Ok(mut file) = File::open(path) else { return 0 };
    let mut n = 0;
    let mut at = offset;
    while let Ok(Some((_, next))) = record_at(&mut file, at) {
        n += 1;
        at = next;
    }
    n
}

/// The record at `offset` and where the next begins; `None` at the end or before a record
/// whose writing was cut short.
fn record_at(file: &mut File, offset: u64) -> std::io::Result<Option<(Vec<u8>, u64)>> {
    file.seek(SeekFrom::Start(offset))?;
    let mut reader = BufReader::new(file.take(64 << 20));
    let mut header = String::new();
    if reader.read_line(&mut header)? == 0 || !header.ends_with('\n') {
        return Ok(None);
    }
    let Ok(length) = header.trim().parse::<usize>() else {
        return Err(std::io::Error::other(format!("spool damaged at byte {offset}")));
    };
    let mut record = vec![0; length];
    if reader.read_exact(&mut record).is_err() {
        return Ok(None);
    }
    Ok(Some((record, offset + header.len() as u64 + length as u64)))
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

    /// Sends a request and reads its one-line answer.
    fn exchange(&mut self, request: &[u8]) -> std::io::Result<String> {
        let mut answer = String::new();
        match self {
            Line::Tcp(r) => {
                r.get_mut().write_all(request)?;
                r.read_line(&mut answer)?;
            }
            Line::Unix(r) => {
                r.get_mut().write_all(request)?;
                r.read_line(&mut answer)?;
            }
        }
        Ok(answer)
    }
}

/// Delivers `spool` for as long as the router runs.
fn deliver(spools: &Spools, spool: &Spool) {
    let mut connection: Option<Line> = None;
    let mut reader = match File::open(&spool.path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("shoal router: spool {}: {e}", spool.path.display());
            return;
        }
    };
    let mut offset = read_offset(&spool.path);
    loop {
        let next = match record_at(&mut reader, offset) {
            Ok(next) => next,
            Err(e) => {
                eprintln!("shoal router: {e}; {} is left for an operator", spool.path.display());
                return;
            }
        };
        let Some((request, after)) = next else {
            let file = spool.file.lock().unwrap_or_else(|p| p.into_inner());
            let length = file.metadata().map(|m| m.len()).unwrap_or(0);
            if length == offset && offset > 0 {
                // Drained: start the file over, under the lock appends take.
                if file.set_len(0).is_ok() && write_offset(&spool.path, 0).is_ok() {
                    offset = 0;
                }
            }
            if length == offset {
                let _ = spool.wake.wait_timeout(file, RETRY_EVERY);
            }
            continue;
        };
        let answered = connection
            .take()
            .map_or_else(|| Line::open(&spool.address), Ok)
            .and_then(|mut c| c.exchange(&request).map(|answer| (c, answer)));
        match answered {
            Ok((c, answer))
                if answer.starts_with("DELETED")
                    || answer.starts_with("NOT_FOUND")
                    || answer.starts_with("HD")
                    || answer.starts_with("NF") =>
            {
                connection = Some(c);
                if write_offset(&spool.path, after).is_ok() {
                    offset = after;
                    spool.pending.fetch_sub(1, Ordering::Relaxed);
                    spools.delivered.fetch_add(1, Ordering::Relaxed);
                }
            }
            _ => std::thread::sleep(RETRY_EVERY),
        }
    }
}
