//! Facebook's leases from the client's side: `lease-get`, `lease-set`, `delete … hold`, and
//! [`Client::get_or_fill`], the whole look-aside read with leases (docs/PROTOCOL.md has the
//! server's answers).
//!
//! ```text
//!  get_or_fill(key) ──► get (shared memory when local) ──hit──► value
//!        │ miss
//!        ▼
//!   lease-get ──VALUE──► value (someone filled it meanwhile)
//!        ├──LVALUE token──► fill() ──► lease-set token ──► value
//!        └──LVALUE 1 (hot miss)──► stale value if allowed, else wait (2 ms, doubling to
//!                                   50 ms) and start again; past `max_wait`, fill() uncached
//! ```

use crate::client::{check_key, deleted_answer, request, Client, Item};
use crate::error::{Error, Result};
use crate::response::unexpected;
use shoal_proto::answer::{blocks, is_error_line, lines, LeaseHeader, ValueHeader};
use shoal_proto::{Body, Op, Shape};
use std::time::{Duration, Instant};

/// What `lease-get` said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lease {
    /// The key has a value.
    Hit(Item),
    /// A miss, and this caller holds the key's lease: fill it with [`Client::lease_set`].
    Token {
        /// The lease token.
        token: u64,
        /// The value the key held before it was deleted or invalidated, if the caller
        /// accepted stale data and there is one.
        stale: Option<Item>,
    },
    /// Another caller holds the lease: wait and ask again, or use the stale value.
    HotMiss {
        /// As for [`Lease::Token`].
        stale: Option<Item>,
    },
}

/// What `lease-set` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseStored {
    /// The token was still valid: the value is stored, fresh.
    Stored,
    /// The token was void but the key held a stale value, which this one replaced (still
    /// stale).
    StaleStored,
    /// The token was void: a newer write won.
    NotStored,
}

/// How [`Client::get_or_fill`] behaves on a hot miss.
#[derive(Clone, Copy, Debug)]
pub struct FillOptions {
    /// Expiry of the value it stores (memcached's exptime).
    pub exptime: i64,
    /// Take a stale value on a hot miss instead of waiting.
    pub accept_stale: bool,
    /// How long to wait for another caller's fill before filling without caching.
    pub max_wait: Duration,
}

impl Default for FillOptions {
    fn default() -> FillOptions {
        FillOptions { exptime: 0, accept_stale: false, max_wait: Duration::from_secs(2) }
    }
}

/// The first and the longest wait between tries on a hot miss.
const FIRST_WAIT: Duration = Duration::from_millis(2);
const LONGEST_WAIT: Duration = Duration::from_millis(50);

impl Client {
    /// `lease-get <key> [stale]`.
    pub fn lease_get(&mut self, key: &[u8], accept_stale: bool) -> Result<Lease> {
        check_key(key)?;
        let request = request(Op::LeaseGet, key, 0, Body::LeaseGet { stale: accept_stale });
        self.with_connection(|conn| {
            conn.send(&request)?;
            let answer = conn.answer(Shape::Values)?;
            let Some(first) = lines(answer).next() else {
                return Err(Error::Protocol("lease-get answered END alone".into()));
            };
            if is_error_line(first) {
                return Err(unexpected(first, "VALUE or LVALUE"));
            }
            let mut found = blocks(answer);
            let block = found.next().expect("a framed answer of VALUE or LVALUE blocks");
            if let Some(another) = found.next() {
                return Err(unexpected(another.line, "END"));
            }
            let (token, flags) = match ValueHeader::parse(block.line) {
                Some(h) => (None, h.flags),
                None => LeaseHeader::parse(block.line)
                    .map(|h| (Some(h.token), h.flags))
                    .ok_or_else(|| unexpected(block.line, "VALUE or LVALUE"))?,
            };
            let item = Item { value: block.data.to_vec(), flags, cas: 0 };
            // An LVALUE without data carries no stale value (flags 0, no bytes).
            let stale = || (!item.value.is_empty() || item.flags != 0).then(|| item.clone());
            Ok(match token {
                None => Lease::Hit(item),
                Some(1) => Lease::HotMiss { stale: stale() },
                Some(token) => Lease::Token { token, stale: stale() },
            })
        })
    }

    /// `lease-set <key> <token> <flags> <exptime> <bytes>`.
    pub fn lease_set(
        &mut self,
        key: &[u8],
        token: u64,
        value: &[u8],
        flags: u32,
        exptime: i64,
    ) -> Result<LeaseStored> {
        check_key(key)?;
        let body = Body::Store { flags, data: value, extra: Some(token) };
        self.exchange(&request(Op::LeaseSet, key, exptime, body), |line| match line {
            b"STORED" => Ok(LeaseStored::Stored),
            b"STALE_STORED" => Ok(LeaseStored::StaleStored),
            b"NOT_STORED" => Ok(LeaseStored::NotStored),
            other => Err(unexpected(other, "STORED, STALE_STORED or NOT_STORED")),
        })
    }

    /// `delete <key> hold <seconds>`: deletes, then refuses `add` of the key for `seconds`
    /// (a Shoal extension: stock memcached refuses this form); whether there was an item.
    pub fn delete_hold(&mut self, key: &[u8], seconds: u32) -> Result<bool> {
        check_key(key)?;
        let request = request(Op::Delete, key, 0, Body::Delete { hold: Some(seconds) });
        self.exchange(&request, deleted_answer)
    }

    /// The look-aside read with leases: the cached value if there is one (read through shared
    /// memory when local); else, if this caller wins the key's lease, `fill`'s value, stored
    /// with it; else the value another caller's fill stores, waited for up to
    /// `options.max_wait` (or a stale value, if accepted). `fill` runs only when this caller
    /// holds the lease, or once the wait is over (its value then not cached).
    pub fn get_or_fill<E>(
        &mut self,
        key: &[u8],
        options: FillOptions,
        fill: impl FnOnce() -> std::result::Result<Vec<u8>, E>,
    ) -> Result<std::result::Result<Vec<u8>, E>> {
        let started = Instant::now();
        let mut wait = FIRST_WAIT;
        loop {
            if let Some(item) = self.get(key)? {
                return Ok(Ok(item.value));
            }
            match self.lease_get(key, options.accept_stale)? {
                Lease::Hit(item) => return Ok(Ok(item.value)),
                Lease::Token { token, .. } => {
                    let value = match fill() {
                        Ok(v) => v,
                        Err(e) => return Ok(Err(e)),
                    };
                    self.lease_set(key, token, &value, 0, options.exptime)?;
                    return Ok(Ok(value));
                }
                Lease::HotMiss { stale: Some(item) } if options.accept_stale => return Ok(Ok(item.value)),
                Lease::HotMiss { .. } if started.elapsed() >= options.max_wait => return Ok(fill()),
                Lease::HotMiss { .. } => {
                    std::thread::sleep(wait.min(options.max_wait.saturating_sub(started.elapsed())));
                    wait = (wait * 2).min(LONGEST_WAIT);
                }
            }
        }
    }
}
