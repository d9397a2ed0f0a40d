//! # shoal-route: which server owns a key
//!
//! The routing core (docs/design/routing.md) of the Rust and Python clients and of `shoal router`:
//! given a pool's servers and a hashing scheme, it names the server that owns a key. It opens
//! no sockets and keeps no state beyond the placement it was built with.
//!
//! ```text
//!   key ──► prefix::Routed::parse ──► /region/cluster/ prefix, broadcast (/*/*/)
//!                 │
//!                 ▼ the part before a hash stop `|#|`
//!   Placement::owner(key) ──► Hashing: ketama_weighted | ketama | pymemcache | memcached_proxy
//!                                      | ch3 | weighted_ch3 | jump | rendezvous | proteus | modulo
//!                 │
//!                 ▼
//!          index into the pool's server list
//!                 │ a hot key (hot::HotSet, learned from the servers' `stats hotkeys`)
//!                 ▼
//!   Placement::replicas ──► the owner and its R-1 successors: reads pick one, writes all
//! ```
//!
//! Every scheme named after a tool places keys exactly as that tool does (test vectors in
//! `tests/`), so a pool can move to Shoal without a cold cache. `cli` (feature `cli`, which
//! the `shoal` program turns on) is `shoal route owner`: the same question from the command line.

#[cfg(feature = "cli")]
pub mod cli;
pub mod digest;
mod error;
pub mod furc;
pub mod hashing;
pub mod hot;
pub mod jump;
mod ketama;
pub mod prefix;
pub mod proteus;
pub mod pymemcache;
mod server;
pub mod spooky;

pub use digest::Digest;
pub use error::{Error, Result};
pub use hashing::{Hashing, Placement};
pub use hot::{ActiveHistory, HotSet, ReplicaSet};
pub use prefix::{hash_part, Routed};
pub use proteus::{ProteusArc, ProteusRing};
pub use server::{validate_key, Server};
