//! One server of a pool: its client, opened lazily, and whether it is marked down.

use crate::client::{Client, Options};
use crate::error::{Error, Result};
use std::time::{Duration, Instant};

/// A pool member. A member that fails at the connection level is marked down for the retry
/// interval: its client is dropped, and calls fail at once with [`Error::Down`] until then.
pub(crate) struct Member {
    pub(crate) address: String,
    client: Option<Client>,
    down_until: Option<Instant>,
}

impl Member {
    pub(crate) fn new(address: String) -> Member {
        Member { address, client: None, down_until: None }
    }

    /// Whether the member is marked down now.
    pub(crate) fn is_down(&self) -> bool {
        self.down_until.is_some_and(|t| Instant::now() < t)
    }

    /// Runs `call` on the member's client, connecting first if needed. A connection-level
    /// failure (refused, broken, timed out, garbled) marks the member down for `retry`.
    pub(crate) fn run<T>(
        &mut self,
        options: &Options,
        retry: Duration,
        call: impl FnOnce(&mut Client) -> Result<T>,
    ) -> Result<T> {
        if self.is_down() {
            return Err(Error::Down(self.address.clone()));
        }
        self.down_until = None;
        let result = match &mut self.client {
            Some(client) => call(client),
            None => Client::connect(&self.address, options.clone())
                .and_then(|client| call(self.client.insert(client))),
        };
        if result.as_ref().is_err_and(Error::is_connection) {
            self.client = None;
            self.down_until = Some(Instant::now() + retry);
        }
        result
    }

    /// The member's client, if it is connected now (nothing is opened here).
    pub(crate) fn connected(&mut self) -> Option<&mut Client> {
        self.client.as_mut()
    }

    /// Whether the member's reads are local now (false if it is not connected).
    pub(crate) fn is_local(&mut self) -> bool {
        self.client.as_mut().is_some_and(Client::is_local)
    }
}
