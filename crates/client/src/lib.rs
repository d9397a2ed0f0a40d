//! # shoal-client: a client for memcached-protocol servers
//!
//! Owns the client (docs/design/client.md): memcached's text protocol over TCP or a unix socket for
//! every command, raw meta commands and Shoal's extension commands ([`Client::command`]), the
//! requests encoded and the answers framed by `shoal-proto`; and — Nahanni's idea — reads
//! served straight from the server's shared-memory region when the server runs on this host.
//! [`Client`] talks to one server; [`Pool`] to a pool of them, each key on the server the
//! routing core (`shoal-route`) names, batches sent to every owner at once (see [`pool`]).
//!
//! ```text
//!   Client::connect ──► Connection (TCP / unix) ──► `shm` ──► SHM <path> <offset> <cookie>
//!                                                  │         (stock memcached: ERROR)
//!                          Local::discover ◄───────┘ Reader::open(path) read-only, cookie
//!                                                    checked, hints area registered
//!   get / get_many ──► Local (region, no system call) ──hit/miss──► HintsWriter ──► server
//!                 └──► Connection (`gets`) when not local           folds into stats and
//!   set, delete, incr, … ──► Connection                             eviction every 100 ms
//! ```
//!
//! Local reads answer exactly what a network `gets` would: the same value, flags and CAS,
//! and expiry and `flush_all` judged by the server's clock in the region. Before each local
//! read the client checks that the region is still the live one it discovered (see
//! [`local`]); after a restart, a replacement by stock memcached or a broken connection it
//! asks the server again and goes on correctly, locally or not.

mod client;
mod conn;
mod error;
mod hits;
pub mod invalidation;
mod item;
mod lease;
pub mod local;
pub mod pool;
pub mod provisioning;
pub mod response;

pub use client::{Client, CommandAnswer, Item, ItemRef, MetaReply, Options, Stored};
pub use conn::Address;
pub use error::{Error, Result};
pub use hits::{Gather, Hits};
pub use lease::{FillOptions, Lease, LeaseStored};
pub use pool::{Active, Pool, PoolCounters, PoolOptions, Stats, WindowOptions};
pub use shoal_region::{ItemInfo, ValueSink};
pub use shoal_route::{Hashing, Server};
