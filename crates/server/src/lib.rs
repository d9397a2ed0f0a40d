//! # shoal-server: a drop-in memcached server over a shared-memory region
//!
//! Owns everything between a socket and the region: listeners (TCP, unix socket, UDP), worker
//! threads, connections and their buffers, the execution of each command with memcached's
//! exact answers, `stats`, and memcached's command line. Parsing is `shoal-proto`'s; storage is
//! `shoal-region`'s `Writer`, which the server is the one owner of.
//!
//! ```text
//!  socket ─► Conn (read buffer) ─► shoal_proto::Parser ─► exec::{text, meta, admin}
//!                                                              │
//!                                      shoal_region::Writer ◄──┘ (items live in the region,
//!  socket ◄─ one write per batch ◄─ Conn (output buffer) ◄──┘     which clients map read-only)
//! ```
//!
//! Module map: [`config`] (flags → settings), [`auth`] (users, what a connection proved), [`server`] (start, stop, clock, signals), [`hints`] and [`handoff`] (clients' local reads),
//! [`net`] (listeners, acceptor, workers), [`conn`] (one connection), [`exec`] (commands),
//! [`stats`] (counters and `stats` answers), [`tenants`] (partitions of memory, `--tenants`), [`metrics`] (Prometheus at `--metrics-listen`), [`tls`] (`-Z`), [`udp`], [`watch`] (`watch`'s log streams).

pub mod auth;
pub mod config;
pub mod conn;
pub mod curve;
pub mod digest;
pub mod exec;
pub mod handoff;
pub mod hints;
pub mod metrics;
pub mod net;
pub mod server;
pub mod stats;
pub mod tenants;
pub mod tls;
pub mod trace;
pub mod udp;
pub mod watch;

pub use config::{ServerArgs, Settings};
pub use server::run;

/// What `version` answers: the memcached release whose protocol Shoal speaks, and Shoal's own.
pub const VERSION: &str = concat!("1.6.18-shoal-", env!("CARGO_PKG_VERSION"));
