//! PostgreSQL's streaming replication protocol, logical flavour: one long decoding session
//! (`START_REPLICATION SLOT … LOGICAL`), so new commits arrive as they happen instead of
//! being re-decoded from the slot's restart point on every poll. Positions are confirmed with
//! standby status updates carrying the flush position the caller chose — never more.
//!
//! ```text
//!   startup (replication=database) ─► authentication (trust, password, md5, SCRAM-SHA-256)
//!   START_REPLICATION ─► 'W' CopyBothResponse ─► CopyData:  'w' XLogData (start, end, time, row)
//!                                                           'k' keepalive (end, time, reply?)
//!   ◄─ CopyData 'r' standby status (written, flushed, applied, time, 0)
//! ```
//!
//! Message framing and authentication exchanges come from `postgres-protocol` (the codecs the
//! `postgres` crate uses); the copy-both stream, which that crate does not parse, is read here.
//!
//! A stream that goes silent is asked whether it is alive: after [`PROBE_AFTER`] with nothing
//! received, a standby status update asking for a reply (its last byte 1; the walsender answers
//! with a keepalive at once), asked again every [`PROBE_AFTER`] while nothing comes. When
//! [`UNANSWERED_MAX`] questions in a row went unanswered (nothing at all received: about 5 s of
//! silence), the stream fails, so that the caller reconnects rather than wait out TCP's
//! retransmission back-off on a link that was cut (issue #26); the walsender's process id (given
//! to [`Stream::start`]'s caller) lets it end the old walsender, which holds the slot until it
//! notices itself. Counted in questions, not in time since the first: each is asked by a look
//! of our own, so a stall of this process (it is not scheduled, the machine stops) is one
//! question, not a dead stream. Not 1 s as before: on a loaded machine PostgreSQL left both
//! invalidators' keep-alives unanswered for 1.5-3 s with no fault near (while ending a
//! walsender took it 1-2 s), and each such give-up cost a reconnect and seconds of stale reads;
//! answers after 3.0 s of silence were seen beside two fault runs and four CPU burners. 5 s is
//! also what the fault harness gives its replica's own stream (`wal_receiver_timeout`), so a cut
//! behind a proxy, which only this question notices, is not noticed later than the replica does.

use bytes::BytesMut;
use postgres::config::Host;
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256, SCRAM_SHA_256};
use postgres_protocol::message::frontend;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Microseconds between 1970-01-01 and PostgreSQL's epoch, 2000-01-01.
const POSTGRES_EPOCH_MICROS: u64 = 946_684_800_000_000;
/// How often the flush position is reported even when nothing is asked.
const STATUS_EVERY: Duration = Duration::from_secs(10);
/// How long the stream may send nothing before it is asked for a reply, and how long each
/// question is given before the next.
pub const PROBE_AFTER: Duration = Duration::from_millis(500);
/// How many questions in a row may go unanswered (nothing at all received) before the stream
/// is given up as dead: the last one is given [`PROBE_AFTER`] too, so a dead stream is given up
/// after about `(UNANSWERED_MAX + 1) × PROBE_AFTER` of silence.
pub const UNANSWERED_MAX: u32 = 9;
/// How long a write to the walsender may block (a peer that stopped reading).
const WRITE_WITHIN: Duration = Duration::from_secs(2);
/// An answer that comes only after this many questions is said: the 1 s bound before gave
/// such a stream up as cut (its silence was 1.5 s at the third question).
const SAID_AFTER: u32 = 3;

/// The most [`Stream::tend`] takes in without the rows being read.
const HOLD_MAX: usize = 16 << 20;

/// A socket to PostgreSQL.
enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Socket {
    fn io(&mut self) -> &mut dyn ReadWrite {
        match self {
            Socket::Tcp(s) => s,
            Socket::Unix(s) => s,
        }
    }

    fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_read_timeout(timeout),
            Socket::Unix(s) => s.set_read_timeout(timeout),
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// One decoded row from the stream.
pub struct StreamRow {
    /// Its position (for a COMMIT, the position past the transaction).
    pub lsn: u64,
    /// test_decoding's text.
    pub data: Vec<u8>,
}

/// A TCP connection to `host:port` within `within` (each of its addresses in turn).
fn connect_within(host: &str, port: u16, within: Duration) -> Result<TcpStream, Failure> {
    let addresses = std::net::ToSocketAddrs::to_socket_addrs(&(host, port)).map_err(io_failure("resolve"))?;
    let mut last = std::io::Error::other(format!("{host} has no address"));
    for address in addresses {
        match TcpStream::connect_timeout(&address, within) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(io_failure("connect")(last))
}

/// A replication connection streaming a logical slot.
pub struct Stream {
    socket: Socket,
    /// What arrived: whole messages from `start` (what lies before was taken), then a part.
    buffer: Vec<u8>,
    start: usize,
    /// How far the buffer's whole messages were looked through for their positions.
    scanned: usize,
    /// The furthest WAL position of a message in the buffer or taken from it.
    received: u64,
    flushed: u64,
    last_status: Instant,
    /// The furthest WAL position the server said it has sent (its `walEnd`).
    sent: u64,
    /// When bytes last arrived.
    heard: Instant,
    /// While nothing has arrived since the first question: when the last status update asking
    /// for a reply was sent, and how many were.
    asked: Option<(Instant, u32)>,
    /// The walsender's process id (the startup's `BackendKeyData`).
    walsender: Option<i32>,
    /// How long a message of the start-up exchange may take.
    answer_within: Duration,
}

/// Why the stream failed: a message for the operator.
pub type Failure = String;

fn io_failure(what: &str) -> impl Fn(std::io::Error) -> Failure + '_ {
    move |e| format!("PostgreSQL replication connection: {what}: {e}")
}

impl Stream {
    /// Connects with `conninfo` as a replication connection and starts streaming `slot` from
    /// its confirmed position. `walsender` is given the server's process id for the
    /// connection as soon as it is known, even when the start then fails.
    pub fn start(conninfo: &str, slot: &str, walsender: &mut Option<i32>) -> Result<Stream, Failure> {
        let config = crate::postgres::config_of(conninfo)?;
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let within = config.get_connect_timeout().copied().unwrap_or(crate::postgres::CONNECT_WITHIN);
        let socket = match config.get_hosts().first() {
            Some(Host::Tcp(host)) => Socket::Tcp(connect_within(host, port, within)?),
            Some(Host::Unix(dir)) => Socket::Unix(
                UnixStream::connect(dir.join(format!(".s.PGSQL.{port}"))).map_err(io_failure("connect"))?,
            ),
            None => Socket::Unix(
                UnixStream::connect(format!("/var/run/postgresql/.s.PGSQL.{port}"))
                    .map_err(io_failure("connect"))?,
            ),
        };
        if let Socket::Tcp(s) = &socket {
            s.set_nodelay(true).map_err(io_failure("set TCP_NODELAY"))?;
        }
        // The start-up exchange is given the connect's time for each answer (at least 2 s): a
        // connection through a proxy whose own connect to PostgreSQL is lost in a cut link
        // would otherwise wait out that connect's retransmissions.
        let answer_within = within.max(crate::postgres::CONNECT_WITHIN);
        let mut stream = Stream {
            socket,
            buffer: Vec::new(),
            start: 0,
            scanned: 0,
            received: 0,
            flushed: 0,
            last_status: Instant::now(),
            sent: 0,
            heard: Instant::now(),
            asked: None,
            walsender: None,
            answer_within,
        };
        if let Socket::Tcp(s) = &stream.socket {
            // A write to a peer that stopped reading fails rather than blocks.
            s.set_write_timeout(Some(WRITE_WITHIN)).map_err(io_failure("set a timeout"))?;
        }
        stream.socket.set_read_timeout(Some(answer_within)).map_err(io_failure("set a timeout"))?;
        let user = config
            .get_user()
            .map(str::to_string)
            .unwrap_or_else(|| std::env::var("USER").unwrap_or_default());
        let dbname = config.get_dbname().unwrap_or(&user).to_string();
        let mut out = BytesMut::new();
        let parameters =
            [("user", user.as_str()), ("database", dbname.as_str()), ("replication", "database")];
        frontend::startup_message(parameters.iter().copied(), &mut out).map_err(io_failure("startup"))?;
        stream.send(&out)?;
        stream.authenticate(user.as_bytes(), config.get_password().unwrap_or_default())?;
        // Ready: ParameterStatus, BackendKeyData … ReadyForQuery.
        loop {
            let (tag, body) = stream.message()?;
            if tag == b'K' && body.len() >= 4 {
                stream.walsender = Some(i32::from_be_bytes(body[..4].try_into().expect("4 bytes")));
                *walsender = stream.walsender;
            }
            if tag == b'Z' {
                break;
            }
        }
        let mut out = BytesMut::new();
        let command = format!(
            "START_REPLICATION SLOT \"{slot}\" LOGICAL 0/0 (\"include-xids\" '1', \"include-timestamp\" '1')"
        );
        frontend::query(&command, &mut out).map_err(io_failure("start replication"))?;
        stream.send(&out)?;
        loop {
            let (tag, _) = stream.message()?;
            if tag == b'W' {
                break;
            }
        }
        Ok(stream)
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        self.socket.io().write_all(bytes).map_err(io_failure("send"))
    }

    /// The next whole message, waiting for it: its tag and body.
    fn message(&mut self) -> Result<(u8, Vec<u8>), Failure> {
        loop {
            if let Some(message) = self.buffered_message()? {
                return Ok(message);
            }
            if !self.read_more(Some(self.answer_within))? {
                return Err(format!(
                    "PostgreSQL did not answer within {:.1} s",
                    self.answer_within.as_secs_f64()
                ));
            }
        }
    }

    /// A whole message already in the buffer, if there is one. An `ErrorResponse` becomes
    /// the failure.
    fn buffered_message(&mut self) -> Result<Option<(u8, Vec<u8>)>, Failure> {
        let Some(length) = whole_message(&self.buffer[self.start..])? else { return Ok(None) };
        let message = &self.buffer[self.start..self.start + 1 + length];
        let (tag, body) = (message[0], message[5..].to_vec());
        // Taken by moving the start (the bytes are dropped when the next read needs the room):
        // draining each message from the front moved the whole buffer, a backlog's megabytes,
        // once per row.
        self.start += 1 + length;
        if tag == b'E' {
            return Err(format!("PostgreSQL: {}", error_text(&body)));
        }
        Ok(Some((tag, body)))
    }

    /// Looks through the whole messages that arrived since the last look for their WAL
    /// positions (XLogData's and keep-alives' `walEnd`), without taking them.
    fn scan_received(&mut self) {
        let mut at = self.scanned.max(self.start);
        while let Ok(Some(length)) = whole_message(&self.buffer[at..]) {
            self.received = self.received.max(position_of(&self.buffer[at..at + 1 + length]));
            at += 1 + length;
        }
        self.scanned = at;
    }

    /// Reads what arrives within `wait` (`None`: only what is already there); whether
    /// anything came.
    fn read_more(&mut self, wait: Option<Duration>) -> Result<bool, Failure> {
        let nonblocking = wait.is_none();
        let set = |s: &Socket| match s {
            Socket::Tcp(s) => s.set_nonblocking(nonblocking),
            Socket::Unix(s) => s.set_nonblocking(nonblocking),
        };
        set(&self.socket).map_err(io_failure("set blocking"))?;
        if let Some(wait) = wait {
            self.socket
                .set_read_timeout(Some(wait.max(Duration::from_millis(1))))
                .map_err(io_failure("set a timeout"))?;
        }
        if self.start > 0 && self.start * 2 >= self.buffer.len() {
            self.buffer.drain(..self.start);
            self.scanned = self.scanned.saturating_sub(self.start);
            self.start = 0;
        }
        let mut chunk = [0u8; 64 << 10];
        match self.socket.io().read(&mut chunk) {
            Ok(0) => Err("PostgreSQL closed the replication connection".into()),
            Ok(n) => {
                self.buffer.extend_from_slice(&chunk[..n]);
                self.scan_received();
                self.heard_now();
                Ok(true)
            }
            // A read with a timeout fails with EINTR when the process is stopped and continued
            // (SIGSTOP/SIGCONT, signal(7)): nothing came, the connection is fine.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(io_failure("read")(e)),
        }
    }

    fn authenticate(&mut self, user: &[u8], password: &[u8]) -> Result<(), Failure> {
        let mut scram: Option<ScramSha256> = None;
        loop {
            let (tag, body) = self.message()?;
            if tag != b'R' || body.len() < 4 {
                return Err(format!("PostgreSQL: expected authentication, got message {:?}", tag as char));
            }
            let code = i32::from_be_bytes(body[..4].try_into().expect("4 bytes"));
            let data = &body[4..];
            let mut out = BytesMut::new();
            match code {
                0 => return Ok(()),
                3 => frontend::password_message(password, &mut out).map_err(io_failure("password"))?,
                5 if data.len() >= 4 => {
                    let hash = md5_hash(user, password, data[..4].try_into().expect("4 bytes"));
                    frontend::password_message(hash.as_bytes(), &mut out).map_err(io_failure("password"))?;
                }
                10 => {
                    let mechanisms: Vec<&[u8]> = data.split(|&b| b == 0).collect();
                    if !mechanisms.contains(&SCRAM_SHA_256.as_bytes()) {
                        return Err(
                            "PostgreSQL offers no SASL mechanism this client speaks (SCRAM-SHA-256)".into()
                        );
                    }
                    let client = ScramSha256::new(password, ChannelBinding::unsupported());
                    frontend::sasl_initial_response(SCRAM_SHA_256, client.message(), &mut out)
                        .map_err(io_failure("SASL"))?;
                    scram = Some(client);
                }
                11 => {
                    let client = scram.as_mut().ok_or("PostgreSQL: SASL continue without a start")?;
                    client.update(data).map_err(io_failure("SCRAM"))?;
                    frontend::sasl_response(client.message(), &mut out).map_err(io_failure("SASL"))?;
                }
                12 => {
                    let client = scram.as_mut().ok_or("PostgreSQL: SASL final without a start")?;
                    client.finish(data).map_err(io_failure("SCRAM"))?;
                    continue;
                }
                other => {
                    return Err(format!(
                        "PostgreSQL asks for authentication method {other}, which this client does not speak"
                    ))
                }
            }
            self.send(&out)?;
        }
    }

    /// Rows that arrive within `wait`: once one has come, only those already here follow it.
    pub fn rows(&mut self, wait: Duration, max: usize) -> Result<Vec<StreamRow>, Failure> {
        let mut rows = Vec::new();
        let deadline = Instant::now() + wait;
        loop {
            while rows.len() < max {
                let Some((tag, body)) = self.buffered_message()? else { break };
                if tag != b'd' || body.is_empty() {
                    continue;
                }
                self.sent = self.sent.max(wal_end(&body));
                match body[0] {
                    b'w' if body.len() >= 25 => {
                        let lsn = u64::from_be_bytes(body[1..9].try_into().expect("8 bytes"));
                        rows.push(StreamRow { lsn, data: body[25..].to_vec() });
                    }
                    // A keepalive that asks for an answer gets the flush position.
                    b'k' if body.len() >= 18 && body[17] == 1 => self.status(false)?,
                    _ => {}
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let wait = (rows.is_empty() && !left.is_zero()).then_some(left);
            if rows.len() >= max || !self.read_more(wait)? {
                break;
            }
        }
        if rows.is_empty() {
            self.keep_alive()?;
        }
        if self.last_status.elapsed() >= STATUS_EVERY {
            self.status(false)?;
        }
        Ok(rows)
    }

    /// After a silence of [`PROBE_AFTER`], asks the walsender for a reply, and again every
    /// [`PROBE_AFTER`] while nothing arrives; fails when [`UNANSWERED_MAX`] questions went
    /// unanswered and the last one had its [`PROBE_AFTER`] too.
    fn keep_alive(&mut self) -> Result<(), Failure> {
        let (last, unanswered) = self.asked.unwrap_or((self.heard, 0));
        if last.elapsed() < PROBE_AFTER {
            return Ok(());
        }
        if unanswered >= UNANSWERED_MAX {
            return Err(format!(
                "PostgreSQL replication connection: nothing received for {:.1} s, and no answer to a \
                 keep-alive asked {unanswered} times {:.1} s apart (walsender {}): given up as cut",
                self.heard.elapsed().as_secs_f64(),
                PROBE_AFTER.as_secs_f64(),
                self.walsender.map_or_else(|| "unknown".to_string(), |pid| pid.to_string())
            ));
        }
        self.status(true)?;
        self.asked = Some((Instant::now(), unanswered + 1));
        Ok(())
    }

    /// Bytes arrived: the stream is alive. An answer that came only after [`SAID_AFTER`]
    /// questions is said, the evidence for [`UNANSWERED_MAX`].
    fn heard_now(&mut self) {
        if let Some((_, unanswered)) = self.asked.filter(|&(_, unanswered)| unanswered >= SAID_AFTER) {
            eprintln!(
                "shoal invalidator: the replication stream answered after {:.1} s of silence ({unanswered} \
                 keep-alives asked; walsender {})",
                self.heard.elapsed().as_secs_f64(),
                self.walsender.map_or_else(|| "unknown".to_string(), |pid| pid.to_string())
            );
        }
        (self.heard, self.asked) = (Instant::now(), None);
    }

    /// Keeps the stream alive while the caller holds rows back (a replica region's batch
    /// waiting for its replica, `replica.rs`): takes what has arrived into the buffer without
    /// parsing it (up to [`HOLD_MAX`]; the next [`Stream::rows`] reads it), reports the flush
    /// position every [`STATUS_EVERY`], and asks for a reply after a silence, failing as
    /// [`Stream::rows`] does when none comes: a link cut meanwhile is noticed while the batch
    /// waits, not after it (issue #26).
    pub fn tend(&mut self) -> Result<(), Failure> {
        if self.buffer.len() - self.start < HOLD_MAX {
            self.read_more(None)?;
        } else {
            // A full buffer is a stream that talks: nothing to ask.
            self.heard_now();
        }
        self.keep_alive()?;
        if self.last_status.elapsed() >= STATUS_EVERY {
            self.status(false)?;
        }
        Ok(())
    }

    /// The furthest WAL position of what has arrived, read or not (rows and keep-alives held
    /// in the buffer while a batch waits for the replica count): this process has those rows
    /// and hands them on as soon as the batch before them is done (`hold.rs`).
    pub fn received(&self) -> u64 {
        self.received.max(self.sent)
    }

    /// Confirms everything before `lsn`: PostgreSQL may forget it and never sends it again.
    pub fn confirm(&mut self, lsn: u64) -> Result<(), Failure> {
        self.flushed = self.flushed.max(lsn);
        self.status(false)
    }

    /// A standby status update with the flush position; `reply`: asking for an answer at once.
    fn status(&mut self, reply: bool) -> Result<(), Failure> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        let mut body = vec![b'r'];
        for position in [self.flushed, self.flushed, self.flushed, now.saturating_sub(POSTGRES_EPOCH_MICROS)]
        {
            body.extend_from_slice(&position.to_be_bytes());
        }
        body.push(u8::from(reply));
        let mut frame = vec![b'd'];
        frame.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        frame.extend_from_slice(&body);
        self.last_status = Instant::now();
        self.send(&frame)
    }
}

/// The length field of the whole message at the start of `bytes` (the message is `1 + length`
/// bytes), or `None` while it has not all arrived.
fn whole_message(bytes: &[u8]) -> Result<Option<usize>, Failure> {
    if bytes.len() < 5 {
        return Ok(None);
    }
    let length = u32::from_be_bytes(bytes[1..5].try_into().expect("4 bytes")) as usize;
    if !(4..=1 << 30).contains(&length) {
        return Err(format!("PostgreSQL sent a message of length {length}"));
    }
    Ok((bytes.len() > length).then_some(length))
}

/// The `walEnd` of a CopyData body: an XLogData's (`w`) or a keep-alive's (`k`); 0 for others.
fn wal_end(body: &[u8]) -> u64 {
    let end = match body {
        [b'w', _, _, _, _, _, _, _, _, end @ ..] | [b'k', end @ ..] if end.len() >= 8 => &end[..8],
        _ => return 0,
    };
    u64::from_be_bytes(end.try_into().expect("8 bytes"))
}

/// The WAL position a whole message carries (a CopyData's `walEnd`; 0 for others).
fn position_of(message: &[u8]) -> u64 {
    if message[0] == b'd' {
        wal_end(&message[5..])
    } else {
        0
    }
}

/// Whether [`Stream::start`] failed because another connection still reads the slot
/// (`object_in_use`: "replication slot … is active for PID …").
pub fn slot_in_use(failure: &str) -> bool {
    failure.ends_with("(SQLSTATE 55006)")
}

/// The `M` (message) field of an ErrorResponse, with its SQLSTATE.
fn error_text(body: &[u8]) -> String {
    let (mut message, mut code) = (String::new(), String::new());
    for field in body.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        let text = String::from_utf8_lossy(&field[1..]).into_owned();
        match field[0] {
            b'M' => message = text,
            b'C' => code = text,
            _ => {}
        }
    }
    format!("{message} (SQLSTATE {code})")
}

/// `X/Y` as PostgreSQL writes an LSN.
pub fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CopyData message with `body`.
    fn copy_data(body: &[u8]) -> Vec<u8> {
        let mut message = vec![b'd'];
        message.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        message.extend_from_slice(body);
        message
    }

    #[test]
    fn whole_messages_are_told_from_parts_and_bad_lengths_refused() {
        let message = copy_data(b"k12345678");
        assert_eq!(whole_message(&message), Ok(Some(13)));
        assert_eq!(whole_message(&message[..8]), Ok(None), "a part");
        assert_eq!(whole_message(&message[..3]), Ok(None), "not even the length");
        assert!(whole_message(&[b'd', 0, 0, 0, 2]).is_err(), "shorter than its own length field");
        assert!(whole_message(&[b'd', 0x7f, 0xff, 0xff, 0xff]).is_err(), "over 1 GiB");
    }

    #[test]
    fn positions_come_from_xlogdata_and_keepalives_only() {
        let mut xlogdata = vec![b'w'];
        xlogdata.extend_from_slice(&7u64.to_be_bytes()); // start
        xlogdata.extend_from_slice(&9u64.to_be_bytes()); // walEnd
        xlogdata.extend_from_slice(&[0; 8]); // send time
        assert_eq!(position_of(&copy_data(&xlogdata)), 9);
        let mut keepalive = vec![b'k'];
        keepalive.extend_from_slice(&11u64.to_be_bytes());
        assert_eq!(position_of(&copy_data(&keepalive)), 11);
        assert_eq!(wal_end(&xlogdata[..12]), 0, "cut short");
        assert_eq!(wal_end(b"k1234"), 0, "cut short");
        assert_eq!(wal_end(b""), 0);
        assert_eq!(position_of(&[b'Z', 0, 0, 0, 5, b'I']), 0, "not CopyData");
    }
}
