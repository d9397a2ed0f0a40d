//! # shoal-server: a drop-in memcached server over a shared-memory region
//!
//! Owns everything between a socket and the region: listeners (TCP, unix socket, UDP), worker
//! threads, connections and their buffers, the execution of each command with memcached's
//! exact answers, `stats`, and memcached's command line. Parsing is `shoal-proto`'s; storage is
//! `shoal-region`'s `Writer`, which the server is the one owner of.
//!
//! ```text
//!  socket ─► Conn (read buffer) ─► shoal_proto::Parser ─► exec: text, meta, binary, lease, admin
//!                                                            │ ▲ results       │ answers
//!                                                            ▼ │               ▼
//!                           exec::ops: reads, stores, deletes, incr/decr    Conn (output buffer)
//!                              │                       │ events             │ one write per batch
//!                              ▼                       ▼                    ▼
//!                  shoal_region::Writer           watch::Logs             socket
//!                  (items live in the region, which clients map read-only)
//! ```
//!
//! Module map, from the bottom up (a module uses only those on its own floor or below; no
//! module circle, which `scripts/module-cycles.py` checks):
//!
//! - plain parts: [`config`] (flags → settings), [`config_file`] (`--config`: a
//!   memcached.conf-style file's flags before the command line's), [`counters`] (per-worker request counters),
//!   [`curve`] (hit-ratio curves), [`detail`] (`stats detail`'s per-prefix counts), [`hotkeys`] (the keys read most, `stats hotkeys`), [`tenants`] (partitions of memory, `--tenants`), [`auth`]
//!   (users, what a connection proved), [`hints`] (clients' local reads folded in), [`digest`]
//!   (`--digest-keys`), [`syscalls`] (the epoll path's receive and send, made as system calls
//!   without glibc's wrappers), [`epoll`] (the epoll instance a worker waits on, and its
//!   waker), [`tls`] (`-Z`), [`trace`], [`uring_options`] (`-o io_uring`, the data path's counts), [`watch`] (`watch`'s log streams, told of
//!   events as plain data);
//! - [`state`]: what every thread shares ([`state::Shared`], the clock, the connections, how
//!   to stop), holding those parts and calling up into nothing;
//! - [`stats`] (`stats` answers), [`exec`] (commands: [`exec::ops`] the protocol-neutral
//!   operations, the protocols' answer writers above them), [`conn`] (one connection),
//!   [`udp`], [`handoff`] (clients' hints areas over a socket), [`metrics`] (Prometheus at
//!   `--metrics-listen`), [`net`] (listeners, acceptor, workers), [`uring`] (the io_uring data
//!   path: the same connections driven by completions);
//! - [`launch`]: [`run`] starts it all (region, listeners, privileges, signal and clock
//!   threads) and stops it.

pub mod auth;
pub mod config;
pub mod config_file;
pub mod conn;
pub mod counters;
pub mod curve;
pub mod detail;
pub mod digest;
pub mod epoll;
pub mod exec;
pub mod handoff;
pub mod hints;
pub mod hotkeys;
pub mod launch;
pub mod memory;
pub mod metrics;
pub mod net;
pub mod restart;
pub mod state;
pub mod stats;
pub mod suboptions;
pub mod syscalls;
pub mod tenants;
pub mod tls;
pub mod trace;
pub mod udp;
pub mod upstream;
pub mod uring;
pub mod uring_options;
pub mod watch;

pub use config::{ServerArgs, Settings};
pub use launch::run;

/// What `version` answers: the memcached release whose protocol Shoal speaks, and Shoal's own.
pub const VERSION: &str = concat!("1.6.18-shoal-", env!("CARGO_PKG_VERSION"));
