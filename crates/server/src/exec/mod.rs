//! Executing parsed requests against the region, writing memcached's answers.
//!
//! [`ops`] carries out what the protocols share (reads counted and logged, stores, deletes,
//! incr/decr, flush, lease records); above it one answer writer per family calls it and
//! answers in its protocol's words: [`text`] (storage, retrieval, delete, incr/decr, touch),
//! [`binary`] (memcached's binary protocol), [`meta`] (`mg ms md ma mn me`), [`lease`]
//! (`lease-get`, `lease-set`, delete hold-off and stale values), [`crawler`] (`lru_crawler`,
//! its `metadump`) and [`admin`] (stats, flush_all, version, verbosity, quit, shutdown, and
//! Shoal's `shm` and `debugtime`). No writer calls another. Answers are appended to the
//! connection's output buffer, so a batch of pipelined requests leaves in one write.

pub mod admin;
pub mod binary;
pub mod crawler;
pub mod lease;
pub mod meta;
pub mod near;
pub mod ops;
pub mod text;

use crate::counters::Counters;
use crate::state::Shared;
use crate::tenants::{Tenant, TenantCounters};
use shoal_proto::{decode_base64, Forget, Request, ShutdownMode, StoreCmd, KEY_MAX};
use shoal_region::{OpError, Writer};

/// What the connection does after a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Read the next request.
    Continue,
    /// Send what was answered so far, then close (`quit`).
    Close,
    /// Close, and stop the server (`shutdown`, with `-A`).
    Shutdown(ShutdownMode),
    /// Stream a key dump (`lru_crawler metadump`), then read the next request.
    Dump(crawler::Dump),
    /// Become a watcher of these kinds of log lines (`watch`): no more requests.
    Watch(u16),
    /// Close at once, dropping the answers not sent yet: the connection held more than
    /// `-o read_buf_mem_limit` allows (memcached closes it the same way).
    Abort,
}

/// A worker's view while executing: the server, its own counters, and scratch space.
pub struct Context<'a> {
    pub shared: &'a Shared,
    pub counters: &'a Counters,
    /// This worker's counters of each tenant.
    pub tenant_counters: &'a [TenantCounters],
    /// The tenant the connection being served is bound to (by its listener or user), if any.
    pub bound: Option<usize>,
    /// Reused for every value read, so a get allocates nothing once warm.
    pub value: Vec<u8>,
    /// The connection whose requests are executed ([`NO_CONNECTION`] for UDP).
    pub conn: u64,
    /// The placement of the first key of the request being executed, if it was made before
    /// the request was parsed (`Conn::read_ahead`, which starts loading a get's index while
    /// other connections are read): a get takes it instead of hashing the key again.
    pub placed_ahead: Option<ops::Placed>,
    /// Answers the connection `held_by` holds unsent, counted only under
    /// `-o read_buf_mem_limit` ([`Context::hold_answers`]).
    held: usize,
    held_by: u64,
}

/// [`Context::conn`] for requests that came in datagrams.
pub const NO_CONNECTION: u64 = u64::MAX;

impl<'a> Context<'a> {
    /// A context for one worker thread, counting in row `row` of the server's counters.
    pub fn new(shared: &'a Shared, row: usize) -> Self {
        Context {
            shared,
            counters: &shared.counters[row],
            tenant_counters: &shared.tenant_counters[row],
            bound: None,
            value: Vec::new(),
            conn: NO_CONNECTION,
            placed_ahead: None,
            held: 0,
            held_by: NO_CONNECTION,
        }
    }

    /// The tenant whose `key` it is, by index (for its counters) and itself.
    #[inline]
    pub fn tenant(&self, key: &[u8]) -> (usize, &'a Tenant) {
        let i = self.shared.tenants.of_key(self.bound, key);
        (i, self.shared.tenants.get(i))
    }

    /// The region that holds `key`.
    #[inline]
    pub fn writer(&self, key: &[u8]) -> &'a Writer {
        &self.tenant(key).1.writer
    }

    /// The connection whose requests are executed, if they did not come in datagrams.
    #[inline]
    pub fn connection(&self) -> Option<u64> {
        (self.conn != NO_CONNECTION).then_some(self.conn)
    }

    /// The server clock the regions judge expiry by.
    #[inline]
    pub fn region_clock(&self) -> u32 {
        self.shared.tenants.clock()
    }

    /// Executes one request, appending its answer (if any) to `out`. The request is borrowed
    /// where the parser left it: passed by value (over 200 bytes) it was copied into each call.
    /// Inlined into the connection's loop: the dispatch is short, and as a call its entry and
    /// exit were a fifth of it (#29's tenth round).
    #[inline(always)]
    pub fn execute(&mut self, request: &Request<'_>, out: &mut Vec<u8>) -> Flow {
        // Every request takes an answer, as every memcached request takes a response object.
        if !self.hold_answers(1, out) {
            return Flow::Abort;
        }
        if self.shared.upstream.is_some() {
            if let Some(flow) = near::intercept(self, request, out) {
                return flow;
            }
        }
        match *request {
            Request::Get(ref get) => text::get(self, get, out),
            Request::Store(ref store) => match store.cmd {
                StoreCmd::LeaseSet(token) => lease::set(self, store, token, out),
                _ => text::store(self, store, out),
            },
            Request::Delete { key, hold, noreply } => text::delete(self, key, hold, noreply, out),
            Request::LeaseGet { key, stale } => lease::get(self, key, stale, out),
            Request::Arith { incr, key, delta, noreply } => text::arith(self, incr, key, delta, noreply, out),
            Request::Touch { key, exptime, noreply } => text::touch(self, key, exptime, noreply, out),
            Request::Meta(ref m) => meta::execute(self, m, out),
            // A stream needs a connection to stream to.
            Request::LruCrawler(_) | Request::Watch(_) if self.conn == NO_CONNECTION => reply(out, b"ERROR"),
            Request::LruCrawler(command) => return crawler::execute(self, command, out),
            // memcached hands the socket to its logger, which cannot follow answers still queued.
            Request::Watch(_) if !out.is_empty() => {
                reply(out, b"ERROR cannot pipeline other commands before watch")
            }
            Request::Watch(kinds) => return Flow::Watch(kinds),
            _ => return admin::execute(self, request.clone(), out),
        }
        Flow::Continue
    }

    /// Answers a request the parser refused; if it named a value that must go with the
    /// refusal (a `set` too large), removes it.
    /// Under `-o read_buf_mem_limit`, takes `n` more answers for the connection: false (and
    /// counted in `response_obj_oom`) if it would then hold more than the limit unsent. An
    /// empty `out` means everything answered before was sent.
    pub fn hold_answers(&mut self, n: usize, out: &[u8]) -> bool {
        let Some(limit) = self.shared.settings.answers_held else { return true };
        if out.is_empty() || self.held_by != self.conn {
            (self.held, self.held_by) = (0, self.conn);
        }
        if self.held + n > limit {
            Counters::bump(&self.counters.response_obj_oom);
            return false;
        }
        self.held += n;
        true
    }

    pub fn refuse(&mut self, line: Option<&str>, forget: Option<Forget<'_>>, out: &mut Vec<u8>) {
        if let Some(f) = forget {
            self.forget(Some(f.key), f.base64);
        }
        if let Some(line) = line {
            reply(out, line.as_bytes());
        }
    }

    /// Removes the value of a key whose store was refused for size (`base64`: the key is
    /// meta's base64), counting the refusal.
    pub fn forget(&mut self, key: Option<&[u8]>, base64: bool) {
        let Some(key) = key else { return };
        Counters::bump(&self.counters.store_too_large);
        let mut scratch = [0u8; KEY_MAX];
        let key =
            if base64 { decode_base64(key, &mut scratch).map_or(&[][..], |n| &scratch[..n]) } else { key };
        let _ = ops::delete_key(self, key);
    }

    /// Checks an ascii authentication token (`-Y`), answering as memcached does; true if it
    /// names a user.
    pub fn ascii_auth(&mut self, user: &[u8], password: &[u8], out: &mut Vec<u8>) -> bool {
        Counters::bump(&self.counters.auth_cmds);
        let ok = self.shared.ascii_users.check(user, password);
        if ok {
            reply(out, b"STORED");
        } else {
            Counters::bump(&self.counters.auth_errors);
            reply(out, b"CLIENT_ERROR authentication failure");
        }
        ok
    }
}

/// Appends a line and its `\r\n`.
#[inline]
pub fn reply(out: &mut Vec<u8>, line: &[u8]) {
    out.extend_from_slice(line);
    out.extend_from_slice(b"\r\n");
}

/// Appends a line unless the request said `noreply`.
#[inline]
pub fn reply_unless(noreply: bool, out: &mut Vec<u8>, line: &[u8]) {
    if !noreply {
        reply(out, line);
    }
}

pub use shoal_proto::push_u64;

/// memcached's answer to a store that failed in the region.
pub fn store_error(counters: &Counters, e: &OpError) -> &'static [u8] {
    match e {
        OpError::ValueTooLarge { .. } => {
            Counters::bump(&counters.store_too_large);
            b"SERVER_ERROR object too large for cache"
        }
        OpError::OutOfMemory => {
            Counters::bump(&counters.store_no_memory);
            b"SERVER_ERROR out of memory storing object"
        }
        // The parser refuses bad keys; a lock a crashed writer left (impossible here: the
        // server is the writer) would be the only other cause.
        OpError::Busy | OpError::KeyEmpty | OpError::KeyTooLong(_) => b"SERVER_ERROR temporary failure",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_region::{ItemInfo, Marks};

    /// The settings of a server started without flags.
    pub(crate) fn default_settings() -> crate::config::Settings {
        use crate::config::ServerArgs;
        use clap::{Args, FromArgMatches};
        let matches = ServerArgs::augment_args(clap::Command::new("server")).get_matches_from(["server"]);
        ServerArgs::from_arg_matches(&matches).unwrap().settings().unwrap()
    }

    /// An item as a lookup hands it to a sink: never read, no marks.
    pub(crate) fn item(flags: u32, cas: u64, value_len: usize) -> ItemInfo {
        ItemInfo { flags, cas, expiry: 0, value_len, fetched: false, marks: Marks::default(), last_access: 0 }
    }

    #[test]
    fn numbers_print_in_decimal() {
        for n in [0, 7, 10, 99, 12345, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
    }
}
