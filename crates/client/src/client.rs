//! [`Client`]: the calls, each one request and its answer, and the choice between the
//! region and the network for reads.

use crate::conn::{Address, Connection};
use crate::error::{Error, Result};
pub use crate::item::{Item, ItemRef};
use crate::local::Local;
use crate::response::unexpected;
use shoal_proto::answer::{blocks, is_error_line, lines, number, stat, ValueHeader};
use shoal_proto::{encode_request, encode_retrieval, Body, Limits, Op, Shape};
use std::time::{Duration, Instant};

/// How a [`Client`] connects.
#[derive(Clone, Debug)]
pub struct Options {
    /// Limit on establishing a TCP connection.
    pub connect_timeout: Option<Duration>,
    /// Limit on each read or write of the socket.
    pub io_timeout: Option<Duration>,
    /// Read through the server's shared memory when it offers it (`shm`) and this process can
    /// map it; `false` keeps every read on the network.
    pub local: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            connect_timeout: Some(Duration::from_secs(5)),
            io_timeout: Some(Duration::from_secs(5)),
            local: true,
        }
    }
}

/// What a storage command did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// `STORED`.
    Stored,
    /// `NOT_STORED`: the condition of add, replace, append or prepend did not hold.
    NotStored,
    /// `EXISTS`: a cas whose unique no longer matches.
    Exists,
    /// `NOT_FOUND`: a cas of a key that is not there.
    NotFound,
}

/// A meta command's answers: each line (`HD`, `VA 2 f0`, `EN`, …) with its value, if any.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetaReply {
    /// The status line without `\r\n`.
    pub line: String,
    /// The value block of a `VA` answer.
    pub value: Option<Vec<u8>>,
}

/// What an extension command answered (see [`Client::command`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandAnswer {
    /// `STAT` lines up to `END`: each line without `STAT `, in the server's order.
    Stats(Vec<String>),
    /// One line (a status such as `OK`, or an error), without `\r\n`.
    Line(String),
}

/// A client for one server. Reads (`get`, `get_many`) come from the server's region when the
/// server is on this host and shares it; everything else goes over the connection, which is
/// opened again, with discovery, on the call after one that failed.
pub struct Client {
    address: Address,
    options: Options,
    conn: Option<Connection>,
    local: Option<Local>,
}

/// Keys per `gets` line of a network multiget.
const KEYS_PER_LINE: usize = 100;

impl Client {
    /// Connects to `address` (`host:port` or a unix socket path) and, unless
    /// `options.local` is off, looks for the server's region.
    pub fn connect(address: &str, options: Options) -> Result<Client> {
        let address = Address::parse(address)?;
        let mut client = Client { address, options, conn: None, local: None };
        client.connection()?;
        Ok(client)
    }

    /// Whether reads are served from the server's shared memory right now.
    pub fn is_local(&mut self) -> bool {
        self.local_region().is_some()
    }

    /// The region reads come from, if they are local.
    pub fn local_region_path(&mut self) -> Option<std::path::PathBuf> {
        self.local_region().map(|l| l.path().to_path_buf())
    }

    /// The item under `key`, if there is one.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Item>> {
        check_key(key)?;
        if let Some(local) = self.local_region() {
            if let Some(found) = local.get(key) {
                return Ok(found);
            }
        }
        Ok(self.network_get(&[key])?.pop().map(|(_, item)| item))
    }

    /// The items under `keys` that exist, with their keys, in the order asked.
    pub fn get_many(&mut self, keys: &[&[u8]]) -> Result<Vec<(Vec<u8>, Item)>> {
        keys.iter().try_for_each(|k| check_key(k))?;
        let all: Vec<usize> = (0..keys.len()).collect();
        let mut found = Vec::with_capacity(keys.len());
        let remote = self.local_get_each(keys, &all, Instant::now(), &mut |i, item| {
            found.push((keys[i].to_vec(), item.to_item()))
        });
        let remote: Vec<&[u8]> = remote.iter().map(|&i| keys[i]).collect();
        for chunk in remote.chunks(KEYS_PER_LINE) {
            found.extend(self.network_get(chunk)?);
        }
        Ok(found)
    }

    /// Gets `key` and sets its expiry (`gat`); always over the network.
    pub fn gat(&mut self, exptime: i64, key: &[u8]) -> Result<Option<Item>> {
        check_key(key)?;
        Ok(self.retrieve(Op::Gats, exptime, &[key])?.pop().map(|(_, item)| item))
    }

    /// `set`.
    pub fn set(&mut self, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Result<Stored> {
        self.store(Op::Set, key, value, flags, exptime, None)
    }

    /// `add`: only if the key is absent.
    pub fn add(&mut self, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Result<Stored> {
        self.store(Op::Add, key, value, flags, exptime, None)
    }

    /// `replace`: only if the key is present.
    pub fn replace(&mut self, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Result<Stored> {
        self.store(Op::Replace, key, value, flags, exptime, None)
    }

    /// `append` to an existing value.
    pub fn append(&mut self, key: &[u8], value: &[u8]) -> Result<Stored> {
        self.store(Op::Append, key, value, 0, 0, None)
    }

    /// `prepend` to an existing value.
    pub fn prepend(&mut self, key: &[u8], value: &[u8]) -> Result<Stored> {
        self.store(Op::Prepend, key, value, 0, 0, None)
    }

    /// `cas`: store only if the item's unique is still `cas`.
    pub fn cas(&mut self, key: &[u8], value: &[u8], flags: u32, exptime: i64, cas: u64) -> Result<Stored> {
        self.store(Op::Cas, key, value, flags, exptime, Some(cas))
    }

    /// `delete`; whether there was an item.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        self.exchange(&request(Op::Delete, key, 0, Body::Delete { hold: None }), deleted_answer)
    }

    /// `incr`; the new value, or `None` without an item.
    pub fn incr(&mut self, key: &[u8], delta: u64) -> Result<Option<u64>> {
        self.arith(Op::Incr, key, delta)
    }

    /// `decr` (stops at 0); the new value, or `None` without an item.
    pub fn decr(&mut self, key: &[u8], delta: u64) -> Result<Option<u64>> {
        self.arith(Op::Decr, key, delta)
    }

    /// `touch`: a new expiry; whether there was an item.
    pub fn touch(&mut self, key: &[u8], exptime: i64) -> Result<bool> {
        check_key(key)?;
        self.exchange(&request(Op::Touch, key, exptime, Body::Touch), |line| match line {
            b"TOUCHED" => Ok(true),
            b"NOT_FOUND" => Ok(false),
            other => Err(unexpected(other, "TOUCHED or NOT_FOUND")),
        })
    }

    /// `flush_all [delay]`.
    pub fn flush_all(&mut self, delay: Option<u32>) -> Result<()> {
        let flush = Body::FlushAll { delay: delay.map(i64::from) };
        self.exchange(&request(Op::FlushAll, b"", 0, flush), |line| match line {
            b"OK" => Ok(()),
            other => Err(unexpected(other, "OK")),
        })
    }

    /// `stats [group]`: every `STAT` line as name and value, in the server's order.
    pub fn stats(&mut self, group: Option<&str>) -> Result<Vec<(String, String)>> {
        let request = match group {
            Some(g) => format!("stats {g}\r\n"),
            None => "stats\r\n".to_string(),
        };
        self.stats_answer(request.as_bytes(), &crate::conn::LIMITS, |answer| {
            lines(answer)
                .map(|line| {
                    let (name, value) = stat(line).ok_or_else(|| unexpected(line, "STAT lines"))?;
                    Ok((name.to_string(), value.to_string()))
                })
                .collect()
        })
    }

    /// Sends `command`, one line of a command outside memcached's (Shoal's `curve t`,
    /// `tenant_memlimit t 123`, …), and reads its answer within `limits` (line length, count
    /// of `STAT` lines; the time is the connection's I/O timeout): `STAT` lines up to `END`,
    /// or one line. An error line is [`Error::Server`].
    pub fn command(&mut self, command: &str, limits: &Limits) -> Result<CommandAnswer> {
        if command.contains(['\r', '\n']) {
            return Err(Error::Protocol("a command is one line, without \\r or \\n".into()));
        }
        let request = [command.as_bytes(), b"\r\n"].concat();
        self.stats_answer(&request, limits, |answer| {
            // A line of the answer (without `\r\n`), as text.
            let text = |line: &[u8]| {
                String::from_utf8(line.to_vec())
                    .map_err(|_| Error::Protocol(format!("{line:?} is not UTF-8")))
            };
            match lines(answer).next() {
                Some(line) if is_error_line(line) => Err(Error::Server(String::from_utf8_lossy(line).into())),
                Some(line) if !line.starts_with(b"STAT ") => Ok(CommandAnswer::Line(text(line)?)),
                _ => lines(answer)
                    .map(|line| text(&line[5..]))
                    .collect::<Result<_>>()
                    .map(CommandAnswer::Stats),
            }
        })
    }

    /// Sends `request` and hands its answer of [`Shape::Stats`] (without `END`) to `read`.
    fn stats_answer<T>(
        &mut self,
        request: &[u8],
        limits: &Limits,
        read: impl FnOnce(&[u8]) -> Result<T>,
    ) -> Result<T> {
        self.with_connection(|conn| {
            conn.send(request)?;
            read(conn.answer_within(Shape::Stats, limits)?)
        })
    }

    /// The server's Proteus digest of the keys it holds (Shoal's `digest` command): `None`
    /// when it keeps none (a Shoal server without `--digest-keys`, or stock memcached).
    pub fn digest(&mut self) -> Result<Option<shoal_route::digest::Digest>> {
        let answer = self.with_connection(|conn| {
            conn.send(b"digest\r\n")?;
            read_values(conn)
        });
        match answer {
            Ok(values) => match values.into_iter().next() {
                Some((_, item)) => Ok(Some(shoal_route::digest::Digest::from_snapshot(&item.value)?)),
                None => Ok(None),
            },
            Err(Error::Server(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The server's version string.
    pub fn version(&mut self) -> Result<String> {
        self.exchange(b"version\r\n", |line| match line.strip_prefix(b"VERSION ") {
            Some(v) => Ok(String::from_utf8_lossy(v).into_owned()),
            None => Err(unexpected(line, "VERSION")),
        })
    }

    /// Sends one meta command (`mg k v f`, `ms k 2 T60` with `value`, …) and returns its answer,
    /// or `None` when a quiet (`q`) command had nothing to say. A `mn` is sent behind it, so a
    /// quiet command never leaves the caller waiting.
    pub fn meta(&mut self, command: &str, value: Option<&[u8]>) -> Result<Option<MetaReply>> {
        if command.contains(['\r', '\n']) {
            return Err(Error::Protocol("a meta command is one line, without \\r or \\n".into()));
        }
        let mut request = Vec::with_capacity(command.len() + value.map_or(0, |v| v.len()) + 8);
        request.extend_from_slice(command.as_bytes());
        request.extend_from_slice(b"\r\n");
        if let Some(v) = value {
            request.extend_from_slice(v);
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(b"mn\r\n");
        self.with_connection(|conn| {
            conn.send(&request)?;
            let mut reply = None;
            loop {
                let answer = conn.answer(Shape::Meta)?;
                if answer == b"MN\r\n" {
                    return Ok(reply);
                }
                let line_end = answer.iter().position(|&b| b == b'\n').expect("a framed answer") - 1;
                let text = String::from_utf8_lossy(&answer[..line_end]).into_owned();
                // `frame` took the data block of a `VA` line: the bytes after the line.
                let value = text.starts_with("VA ").then(|| answer[line_end + 2..answer.len() - 2].to_vec());
                reply = Some(MetaReply { line: text, value });
            }
        })
    }

    fn store(
        &mut self,
        op: Op,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i64,
        cas: Option<u64>,
    ) -> Result<Stored> {
        check_key(key)?;
        let body = Body::Store { flags, data: value, extra: cas };
        self.exchange(&request(op, key, exptime, body), stored_answer)
    }

    fn arith(&mut self, op: Op, key: &[u8], delta: u64) -> Result<Option<u64>> {
        check_key(key)?;
        self.exchange(&request(op, key, 0, Body::Arith { delta }), |line| match line {
            b"NOT_FOUND" => Ok(None),
            other => number(other).map(Some).ok_or_else(|| unexpected(other, "a number")),
        })
    }

    fn network_get(&mut self, keys: &[&[u8]]) -> Result<Vec<(Vec<u8>, Item)>> {
        self.retrieve(Op::Gets, 0, keys)
    }

    /// Sends a retrieval of `keys` (`gets`, `gats <exptime>`) and reads the `VALUE` blocks up
    /// to `END`.
    fn retrieve(&mut self, op: Op, exptime: i64, keys: &[&[u8]]) -> Result<Vec<(Vec<u8>, Item)>> {
        let mut request = Vec::new();
        encode_retrieval(op, exptime, keys.iter().copied(), &mut request);
        self.send(&request)?;
        self.with_connection(read_values)
    }

    /// Sends `request` on the connection (opening one first if needed), without waiting for
    /// an answer: a pool sends to every server before it reads from any.
    pub(crate) fn send(&mut self, request: &[u8]) -> Result<()> {
        self.with_connection(|conn| conn.send(request))
    }

    /// Reads `VALUE` blocks up to `END`, handing each to `hit` (borrowed): the answer to a
    /// retrieval request.
    pub(crate) fn read_values_each(&mut self, hit: impl FnMut(&[u8], ItemRef<'_>)) -> Result<()> {
        self.with_connection(|conn| read_values_each(conn, hit))
    }

    /// Reads one answer line and interprets it.
    pub(crate) fn read_line<T>(&mut self, answer: impl FnOnce(&[u8]) -> Result<T>) -> Result<T> {
        self.with_connection(|conn| answer(conn.line()?))
    }

    /// Reads `keys[i]` for each `i` of `wanted` from the server's region (checked once for
    /// the whole batch, as of `now`), handing each hit to `hit`; returns the indexes the
    /// region could not answer (all of them when reads are not local).
    pub(crate) fn local_get_each(
        &mut self,
        keys: &[&[u8]],
        wanted: &[usize],
        now: Instant,
        hit: &mut impl FnMut(usize, ItemRef<'_>),
    ) -> Vec<usize> {
        let Some(local) = self.local_region_at(now) else { return wanted.to_vec() };
        let mut rest = Vec::new();
        for &i in wanted {
            match local.get_ref(keys[i]) {
                Some(Some(item)) => hit(i, item),
                Some(None) => {}
                None => rest.push(i),
            }
        }
        local.publish_counts();
        rest
    }

    /// [`Client::local_get_each`] into `gather` (each value copied once, straight from the
    /// region), for a caller that holds a lock of its own meanwhile: nothing here waits on the
    /// network, so a region that is no longer current, or a near cache's (whose misses go to
    /// the server), leaves every key to the network path (which rediscovers the region).
    pub(crate) fn local_gather(
        &mut self,
        keys: &[&[u8]],
        wanted: &[usize],
        now: Instant,
        gather: &mut dyn crate::hits::Gather,
    ) -> Vec<usize> {
        let current = match (self.local.as_mut(), self.conn.as_mut()) {
            (Some(local), Some(conn)) => !local.is_near() && local.is_current_at(conn, now),
            _ => false,
        };
        let Some(local) = self.local.as_mut().filter(|_| current) else { return wanted.to_vec() };
        let mut rest = Vec::new();
        for &i in wanted {
            match local.get_with(keys[i], gather) {
                Some(Some((flags, cas))) => gather.hit(i, flags, cas),
                Some(None) => gather.discard(),
                None => {
                    gather.discard();
                    rest.push(i);
                }
            }
        }
        local.publish_counts();
        rest
    }

    /// Sends a request whose answer is one line, and interprets that line.
    pub(crate) fn exchange<T>(
        &mut self,
        request: &[u8],
        answer: impl FnOnce(&[u8]) -> Result<T>,
    ) -> Result<T> {
        self.with_connection(|conn| {
            conn.send(request)?;
            answer(conn.line()?)
        })
    }

    /// Runs `talk` on the connection (opening one first if needed). A connection-level error
    /// drops the connection and the region with it: the next call starts afresh.
    pub(crate) fn with_connection<T>(
        &mut self,
        talk: impl FnOnce(&mut Connection) -> Result<T>,
    ) -> Result<T> {
        let result = talk(self.connection()?);
        if result.as_ref().is_err_and(Error::is_connection) {
            self.conn = None;
            self.local = None;
        }
        result
    }

    /// The open connection, or a new one (with discovery).
    fn connection(&mut self) -> Result<&mut Connection> {
        if self.conn.is_none() {
            let mut conn =
                Connection::open(&self.address, self.options.connect_timeout, self.options.io_timeout)?;
            self.local = if self.options.local { Local::discover(&mut conn)? } else { None };
            self.conn = Some(conn);
        }
        Ok(self.conn.as_mut().expect("just opened"))
    }

    /// The region, if reads may be local now. A region that is no longer current (the server
    /// restarted, stopped or died) sends the client back to the server for a new answer.
    fn local_region(&mut self) -> Option<&mut Local> {
        self.local_region_at(Instant::now())
    }

    /// [`Client::local_region`], its freshness judged at `now`.
    fn local_region_at(&mut self, now: Instant) -> Option<&mut Local> {
        let current = match (self.local.as_mut(), self.conn.as_mut()) {
            (Some(local), Some(conn)) => local.is_current_at(conn, now),
            _ => true, // nothing local to judge
        };
        if !current {
            self.local = None;
            self.conn = None;
            // Rediscover now; if the server is unreachable the read goes to the network and
            // reports the failure there.
            let _ = self.connection();
        }
        self.local.as_mut()
    }
}

/// Reads `VALUE` blocks up to `END` from `conn`: the answer to a retrieval request.
pub(crate) fn read_values(conn: &mut Connection) -> Result<Vec<(Vec<u8>, Item)>> {
    let mut found = Vec::new();
    read_values_each(conn, |key, item| found.push((key.to_vec(), item.to_item())))?;
    Ok(found)
}

/// [`read_values`] without copies: each item is handed to `hit` with its key, borrowed from
/// the connection's buffer.
pub(crate) fn read_values_each(conn: &mut Connection, mut hit: impl FnMut(&[u8], ItemRef<'_>)) -> Result<()> {
    let answer = conn.answer(Shape::Values)?;
    if let Some(line) = lines(answer).next().filter(|line| is_error_line(line)) {
        return Err(unexpected(line, "VALUE or END"));
    }
    for block in blocks(answer) {
        let header = ValueHeader::parse(block.line).ok_or_else(|| unexpected(block.line, "VALUE or END"))?;
        hit(header.key, ItemRef { value: block.data, flags: header.flags, cas: header.cas });
    }
    Ok(())
}

/// A request for one key, encoded.
pub(crate) fn request(op: Op, key: &[u8], exptime: i64, body: Body<&[u8]>) -> Vec<u8> {
    let mut request = Vec::new();
    encode_request(op, key, exptime, &body, &mut request);
    request
}

/// What a storage command's answer line says.
pub(crate) fn stored_answer(line: &[u8]) -> Result<Stored> {
    match line {
        b"STORED" => Ok(Stored::Stored),
        b"NOT_STORED" => Ok(Stored::NotStored),
        b"EXISTS" => Ok(Stored::Exists),
        b"NOT_FOUND" => Ok(Stored::NotFound),
        other => Err(unexpected(other, "STORED")),
    }
}

/// What a `delete`'s answer line says: whether there was an item.
pub(crate) fn deleted_answer(line: &[u8]) -> Result<bool> {
    match line {
        b"DELETED" => Ok(true),
        b"NOT_FOUND" => Ok(false),
        other => Err(unexpected(other, "DELETED or NOT_FOUND")),
    }
}

/// Refuses keys the text protocol cannot carry, before anything is sent.
#[inline]
pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if shoal_proto::valid_key(key) {
        Ok(())
    } else {
        Err(invalid_key(key))
    }
}

/// [`check_key`]'s error, out of line: the check itself stays small enough to inline into a
/// batch's loop over its keys.
#[cold]
fn invalid_key(key: &[u8]) -> Error {
    Error::InvalidKey(key.to_vec())
}
