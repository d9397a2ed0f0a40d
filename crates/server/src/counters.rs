//! The request counters every worker keeps, named as memcached's `stats` names them.
//!
//! Each worker thread counts into its own [`Counters`] (relaxed atomics on its own cache
//! lines, so counting costs no sharing); `stats` ([`crate::stats`]) sums them.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// Per-thread request counters, named as memcached's `stats` names them.
        #[derive(Debug, Default)]
        #[repr(align(128))]
        pub struct Counters {
            $($(#[$doc])* pub $name: AtomicU64,)*
        }

        impl Counters {
            /// Every counter with its name, in `stats` order.
            pub fn each(&self) -> impl Iterator<Item = (&'static str, &AtomicU64)> {
                [$((stringify!($name), &self.$name)),*].into_iter()
            }
        }
    };
}

counters! {
    cmd_get, cmd_set, cmd_flush, cmd_touch, cmd_meta,
    get_hits, get_misses, get_expired, get_flushed,
    delete_misses, delete_hits, incr_misses, incr_hits, decr_misses, decr_hits,
    cas_misses, cas_hits, cas_badval, touch_hits, touch_misses,
    store_too_large, store_no_memory,
    /// SASL and ascii authentication attempts, and those that failed.
    auth_cmds, auth_errors,
    /// Connections closed for idling past `-o idle_timeout`.
    idle_kicks,
    bytes_read, bytes_written,
    /// Times a connection gave way to others after `-R` requests.
    conn_yields,
    /// Requests refused, or connections closed, for holding more answers than
    /// `-o read_buf_mem_limit` allows ([`crate::config::Settings::answers_held`]).
    response_obj_oom,
}

impl Counters {
    /// Adds one to a counter of the calling thread's own row. A row has one writer (its
    /// worker, or the UDP thread), so a plain load and store suffice: no locked instruction on
    /// the request path, where a get bumps several. A `stats reset` racing with it may see one
    /// counter keep its count (memcached's reset is not atomic with requests in flight either).
    /// Counters that several threads write take [`Counters::add`].
    #[inline]
    pub fn bump(counter: &AtomicU64) {
        counter.store(counter.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }

    /// Adds `n` to a counter, atomically (any thread).
    #[inline]
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}
