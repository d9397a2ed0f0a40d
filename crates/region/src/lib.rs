//! # shoal-region: the shared-memory item store
//!
//! Owns the region: one mapped file (`/dev/shm/…`, a memfd, a file on tmpfs or hugetlbfs, a
//! device such as an ivshmem BAR) holding a header, a hash index and fixed-size segments of
//! items. It has two faces:
//!
//! ```text
//!   server threads ──► Writer ──┐                       ┌── Reader ◄── client processes
//!   (set/add/cas/…, get)        │   region (mmap file)  │   (get, read-only mapping)
//!                               ├─► header  clock, cookie, flush generation
//!                               ├─► index   buckets: version + 7 slots (tag|segment|offset)
//!                               └─► segments items appended, grouped by time class
//! ```
//!
//! Writers append items to segments and publish them by storing an index slot under the
//! bucket's lock; readers copy, then validate the bucket version (see [`seqlock`]'s module
//! docs for the protocol). Segments are reclaimed whole when their items expire, are flushed
//! or deleted, and evicted by the writer's policy ([`Eviction`]): oldest first with a second
//! chance for items read since written, or least recently used.
//! `docs/design/region.md` explains the choices; [`layout`] pins the bytes. `cli` (feature
//! `cli`, which the `shoal` program turns on) is `shoal region`: create, inspect, read and write
//! regions from the command line, and measure them.

#[cfg(all(feature = "cli", not(loom)))]
pub mod cli;
#[cfg(not(loom))]
mod error;
#[cfg(not(loom))]
pub mod expiry;
#[cfg(not(loom))]
pub mod hints;
#[cfg(not(loom))]
pub mod key;
#[cfg(not(loom))]
pub mod layout;
#[cfg(not(loom))]
mod mapping;
#[cfg(not(loom))]
mod reader;
#[cfg(not(loom))]
mod region;
mod seqlock;
mod sync;
#[cfg(not(loom))]
mod writer;

#[cfg(not(loom))]
pub use error::{OpError, RegionError};
#[cfg(not(loom))]
pub use expiry::absolute_expiry;
#[cfg(not(loom))]
pub use layout::{Layout, Marks};
#[cfg(not(loom))]
pub use mapping::Mapping;
#[cfg(not(loom))]
pub use reader::Reader;
#[cfg(not(loom))]
pub use region::{key_hash, ItemInfo, KeyHash, Lookup, ValueSink};
#[cfg(not(loom))]
pub use writer::{
    counter_text, parse_counter, touch_expiry, visible, Change, Config, Current, Delta, Eviction,
    EvictionObserver, IndexedItem, KeyObserver, LimitError, Mark, NewItem, PreviousStop, Stats, Store, Swept,
    UnknownEviction, Value, Writer, MIN_LIMIT_SEGMENTS,
};
