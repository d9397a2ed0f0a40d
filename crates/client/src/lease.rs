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

use crate::client::{check_key, request_line, Client, Item};
use crate::error::{Error, Result};
use crate::response::{number, unexpected, ValueHeader};
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
        let suffix: &[u8] = if accept_stale { b" stale" } else { b"" };
        let request = request_line(&[b"lease-get ", key, suffix]);
        self.with_connection(|conn| {
            conn.send(&request)?;
            let line = conn.line()?.to_vec();
            if line == b"END" {
                return Err(Error::Protocol("lease-get answered END alone".into()));
            }
            let (token, len, flags) = match ValueHeader::parse(&line) {
                Some(h) => (None, h.len, h.flags),
                None => lvalue(&line)
                    .map(|(t, len, flags)| (Some(t), len, flags))
                    .ok_or_else(|| unexpected(&line, "VALUE or LVALUE"))?,
            };
            let item = Item { value: conn.data(len)?, flags, cas: 0 };
            let end = conn.line()?;
            if end != b"END" {
                return Err(unexpected(end, "END"));
            }
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
        let mut request = request_line(&[
            b"lease-set ",
            key,
            format!(" {token} {flags} {exptime} {}", value.len()).as_bytes(),
        ]);
        request.extend_from_slice(value);
        request.extend_from_slice(b"\r\n");
        self.exchange(&request, |line| match line {
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
        let request = request_line(&[b"delete ", key, format!(" hold {seconds}").as_bytes()]);
        self.exchange(&request, |line| match line {
            b"DELETED" => Ok(true),
            b"NOT_FOUND" => Ok(false),
            other => Err(unexpected(other, "DELETED or NOT_FOUND")),
        })
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

/// `LVALUE <key> <token> <flags> <bytes>` as (token, bytes, flags).
fn lvalue(line: &[u8]) -> Option<(u64, usize, u32)> {
    let mut words = line.strip_prefix(b"LVALUE ")?.split(|&b| b == b' ');
    let _key = words.next()?;
    let token = number(words.next()?)?;
    let flags = number(words.next()?)?;
    let bytes = number(words.next()?)?;
    words.next().is_none().then_some((token, bytes, flags))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lvalue_lines() {
        assert_eq!(lvalue(b"LVALUE k 12345 7 3"), Some((12345, 3, 7)));
        assert_eq!(lvalue(b"LVALUE k 1 0 0"), Some((1, 0, 0)));
        for bad in [&b"VALUE k 1 0"[..], b"LVALUE k 1 0", b"LVALUE k x 0 0", b"LVALUE k 1 0 0 9"] {
            assert_eq!(lvalue(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
