//! Reads through the server's shared memory: discovery, the freshness checks that keep them
//! correct across restarts, and the hints that make them count at the server.
//!
//! A client reads locally only while all of these hold, checked before every local read:
//! the region's cookie and writer generation are what discovery found (a server restarted on
//! the region, warm or cold, changes the generation; a new region has another cookie), a
//! writer is attached (a server that stopped cleanly detached), the connection to the server
//! is still open (peeked every [`CONNECTION_CHECK`]: a server that died closed it), and the
//! server clock in the header has moved within [`STALE_CLOCK`] (the server publishes it every
//! 100 ms when the second changes; a server that hangs stops moving it). Otherwise the client
//! drops the region and asks the server again, over a new connection.
//!
//! Every local read is also screened for the server's hit-ratio curve (issue 27): the top 24
//! bits of the hash the region's probe computed for the key (`shoal_region::key_hash`, which
//! the server screens network gets with too) against the sampling threshold the server
//! publishes in the region's header; a read in the sample, hit or miss, is queued in the hints
//! area for the tenant's curve. An unsampled read costs a load and a compare, no hash of its
//! own.

use crate::conn::Connection;
use crate::error::Result;
use crate::item::{Item, ItemRef};
use shoal_curves::KeyHash;
use shoal_proto::handoff;
use shoal_proto::Shape;
use shoal_region::hints::{HintsWriter, SampledRead};
use shoal_region::layout::COOKIE_OFFSET;
use shoal_region::{Lookup, Reader, ValueSink};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long the region's clock may stand still before the server is presumed dead.
pub const STALE_CLOCK: Duration = Duration::from_secs(3);
/// How often a local reader checks that the server still holds its connection open: a server
/// that died leaves its region behind, unchanging, so this bounds reads of a dead region.
pub const CONNECTION_CHECK: Duration = Duration::from_millis(50);

/// A server's region, mapped read-only, and this client's hints area registered with it.
pub struct Local {
    lookups: Lookups,
    path: PathBuf,
    cookie: u64,
    generation: u64,
    clock: u32,
    /// When the region's clock, unmoved since, makes the server presumed dead: [`STALE_CLOCK`]
    /// after it last moved. Deadlines rather than the times they count from: a batch compares
    /// two instants per server, not two durations computed (#29's local multiget, third round).
    stale_at: Instant,
    /// When the connection is next checked: [`CONNECTION_CHECK`] after it was last seen open.
    connection_check_due: Instant,
    /// Where a read copies its value: apart from [`Lookups`], so that a read borrows both at
    /// once (no buffer taken out of the struct and put back for every key).
    value: Vec<u8>,
}

/// What a lookup needs: the region, the hints area it counts in, and how to answer.
struct Lookups {
    reader: Reader,
    hints: HintsWriter,
    /// Whether the server hands out CAS uniques (`-C` turns them off: every CAS reads 0).
    cas_enabled: bool,
    /// The server is a near cache (`--upstream`): a miss here is asked of it, which fetches it.
    near: bool,
}

/// What `shm` said.
#[derive(Debug, PartialEq, Eq)]
pub struct ShmAnswer {
    /// The region's path.
    pub path: PathBuf,
    /// Where the cookie lies in the region.
    pub offset: usize,
    /// The cookie's value.
    pub cookie: u64,
}

impl ShmAnswer {
    /// `SHM <path> <cookie offset> <cookie>` (the path may hold spaces); `None` for anything
    /// else, such as stock memcached's `ERROR`.
    pub fn parse(line: &[u8]) -> Option<ShmAnswer> {
        let rest = std::str::from_utf8(line.strip_prefix(b"SHM ")?).ok()?;
        let mut fields = rest.rsplitn(3, ' ');
        let cookie = fields.next()?.parse().ok()?;
        let offset = fields.next()?.parse().ok()?;
        let path = PathBuf::from(fields.next()?);
        Some(ShmAnswer { path, offset, cookie })
    }
}

impl Local {
    /// Asks the server behind `conn` for its region and attaches to it if this process can
    /// read it and everything matches; `Ok(None)` means reads stay on the network.
    pub fn discover(conn: &mut Connection) -> Result<Option<Local>> {
        conn.send(b"shm\r\n")?;
        let Some(answer) = ShmAnswer::parse(conn.line()?) else { return Ok(None) };
        if answer.offset != COOKIE_OFFSET {
            return Ok(None); // another layout than the one this client was built for
        }
        // Permissions, an unknown layout version, a vanished file: all mean "network".
        let Ok(reader) = Reader::open(&answer.path) else { return Ok(None) };
        if reader.cookie() != answer.cookie || !reader.writer_attached() {
            return Ok(None);
        }
        let Ok(hints) = HintsWriter::create() else { return Ok(None) };
        if !register_hints(conn, &hints)? {
            return Ok(None); // a server that cannot fold our hints in: local hits would not count
        }
        conn.send(b"stats settings\r\n")?;
        let settings = conn.answer(Shape::Stats)?;
        let cas_enabled = shoal_proto::answer::lines(settings).all(|line| line != b"STAT cas_enabled no");
        let near = shoal_proto::answer::lines(settings).any(|line| line.starts_with(b"STAT near_upstream "));
        let (generation, clock) = (reader.generation(), reader.clock());
        Ok(Some(Local {
            lookups: Lookups { reader, hints, cas_enabled, near },
            path: answer.path,
            cookie: answer.cookie,
            generation,
            clock,
            stale_at: Instant::now() + STALE_CLOCK,
            connection_check_due: Instant::now() + CONNECTION_CHECK,
            value: Vec::new(),
        }))
    }

    /// The region's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Whether the region is still the live one discovery found (`conn`: the connection to
    /// its server, checked every [`CONNECTION_CHECK`]).
    pub fn is_current(&mut self, conn: &mut Connection) -> bool {
        self.is_current_at(conn, Instant::now())
    }

    /// [`Local::is_current`] judged at `now` (a batch reads the clock once for all its
    /// servers: each reading is a system clock call).
    pub fn is_current_at(&mut self, conn: &mut Connection, now: Instant) -> bool {
        let r = &self.lookups.reader;
        if r.cookie() != self.cookie || r.generation() != self.generation || !r.writer_attached() {
            return false;
        }
        if now >= self.connection_check_due {
            if !conn.is_open() {
                return false;
            }
            self.connection_check_due = now + CONNECTION_CHECK;
        }
        let clock = r.clock();
        if clock != self.clock {
            (self.clock, self.stale_at) = (clock, now + STALE_CLOCK);
            return true;
        }
        now < self.stale_at
    }

    /// Looks `key` up in the region, counting the read in the hints area; `None` when the
    /// region could not answer (a writer held the key's bucket too long): ask the server.
    #[inline]
    pub fn get(&mut self, key: &[u8]) -> Option<Option<Item>> {
        let found = self.get_ref(key).map(|found| found.map(|item| item.to_item()));
        self.publish_counts();
        found
    }

    /// [`Local::get`] without copying: the hit's value stays in this reader's buffer, which
    /// the next read reuses (so a batch of reads allocates nothing per key). The read is
    /// counted at the next [`Local::publish_counts`], which the batch calls once at its end.
    /// Always inlined into the batch's loop, which then calls `Lookups::get_with` once a key
    /// rather than this (the compiler keeps one of the two a call; #29's lookup round).
    #[inline(always)]
    pub fn get_ref(&mut self, key: &[u8]) -> Option<Option<ItemRef<'_>>> {
        let found = self.lookups.get_with(key, &mut self.value);
        Some(found?.map(|(flags, cas)| ItemRef { value: &self.value, flags, cas }))
    }

    /// The lookup under [`Local::get_ref`], the value going to `sink` (which may be handed
    /// torn copies that the lookup then retries: it is whole only on a hit): a hit's flags and
    /// CAS, `Some(None)` for a miss, `None` when the region could not answer (ask the server).
    /// Generic over the sink, so that a plain vector's copy is inlined into the lookup rather
    /// than called through a vtable (Python's gatherer comes as a trait object, and stays one).
    /// Counted at the next [`Local::publish_counts`], as [`Local::get_ref`].
    #[inline]
    pub fn get_with<S: ValueSink + ?Sized>(
        &mut self,
        key: &[u8],
        sink: &mut S,
    ) -> Option<Option<(u32, u64)>> {
        self.lookups.get_with(key, sink)
    }

    /// Stores the counts of the reads made so far in the hints area, where the server reads
    /// them: after a read, or a batch of them (the counters once a batch, not two a key).
    #[inline]
    pub fn publish_counts(&mut self) {
        self.lookups.hints.publish();
    }

    /// Whether the server is a near cache, whose misses are asked of it (it fetches them).
    pub fn is_near(&self) -> bool {
        self.lookups.near
    }
}

impl Lookups {
    /// [`Local::get_with`].
    #[inline]
    fn get_with<S: ValueSink + ?Sized>(&mut self, key: &[u8], sink: &mut S) -> Option<Option<(u32, u64)>> {
        let (lookup, location, hash) = self.reader.get_located(key, sink).ok()?;
        self.hints.record(&lookup, location, self.reader.clock());
        // Threshold 0 (no curve) samples nothing.
        if KeyHash::from_raw(hash).spatial() < u64::from(self.reader.curve_threshold()) {
            self.hints.record_sampled(hash, SampledRead::of(&lookup, key.len()));
        }
        Some(match lookup {
            Lookup::Hit(info) => Some((info.flags, if self.cas_enabled { info.cas } else { 0 })),
            _ if self.near => return None,
            _ => None,
        })
    }
}

/// How long handing the hints area over may take (connecting, sending, the answer).
pub const HANDOFF_TIMEOUT: Duration = Duration::from_secs(2);

/// Registers `hints` with the server behind `conn`: handed over as a descriptor on the
/// server's handoff socket when it offers one (the server may run as another user, which
/// cannot open our `/proc/<pid>/fd/<n>`), else by that path (servers without the socket, and
/// a socket this process may not connect to). Whether the server took it.
fn register_hints(conn: &mut Connection, hints: &HintsWriter) -> Result<bool> {
    conn.send(b"shm handoff\r\n")?;
    let offer = handoff::parse_answer(conn.line()?).map(|(token, socket)| (token, socket.to_vec()));
    if let Some((token, socket)) = offer {
        let socket = std::path::Path::new(std::ffi::OsStr::from_bytes(&socket));
        if hand_over(socket, &token, hints).is_ok_and(|answer| answer == b"OK\r\n") {
            return Ok(true);
        }
    }
    let mut request = b"shm hints ".to_vec();
    request.extend_from_slice(hints.path().as_os_str().as_bytes());
    request.extend_from_slice(b"\r\n");
    conn.send(&request)?;
    Ok(conn.line()? == b"OK")
}

/// Sends `token` and the hints area's memfd on the handoff socket at `socket`; the server's
/// answer line (`OK\r\n` or `SERVER_ERROR <why>\r\n`).
fn hand_over(
    socket: &std::path::Path,
    token: &handoff::Token,
    hints: &HintsWriter,
) -> std::io::Result<Vec<u8>> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    use std::io::{IoSlice, Read};
    use std::os::fd::AsRawFd;
    let stream = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    // A full backlog makes a unix connect wait, for as long as the send timeout allows.
    stream.set_write_timeout(Some(HANDOFF_TIMEOUT))?;
    stream.set_read_timeout(Some(HANDOFF_TIMEOUT))?;
    stream.connect(&socket2::SockAddr::unix(socket)?)?;
    let mut stream = std::os::unix::net::UnixStream::from(std::os::fd::OwnedFd::from(stream));
    let message = handoff::message(token);
    let fds = [hints.fd().as_raw_fd()];
    let sent = sendmsg::<()>(
        stream.as_raw_fd(),
        &[IoSlice::new(&message)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    if sent != message.len() {
        return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "the handoff message went out cut"));
    }
    // The server answers one short line and closes.
    let mut answer = Vec::new();
    stream.by_ref().take(512).read_to_end(&mut answer)?;
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shm_answers() {
        let a = ShmAnswer::parse(b"SHM /dev/shm/a b.region 16 12345").unwrap();
        assert_eq!((a.path, a.offset, a.cookie), (PathBuf::from("/dev/shm/a b.region"), 16, 12345));
        for other in [&b"ERROR"[..], b"SHM", b"SHM /x 16", b"SHM /x y 1", b"SHM /x 16 -1", b"SHM \xff 1 2"] {
            assert!(ShmAnswer::parse(other).is_none(), "{}", String::from_utf8_lossy(other));
        }
    }
}
