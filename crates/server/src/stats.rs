//! Counters and the `stats` command's answers.
//!
//! Each worker thread counts into its own [`Counters`] (relaxed atomics on its own cache
//! lines, so counting costs no sharing); `stats` sums them. The store's own numbers (items,
//! bytes, evictions) come from the region.

use crate::server::Shared;
use std::fmt::Write as _;
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

/// Sum of a counter over all workers.
fn total(shared: &Shared, name: &str) -> u64 {
    shared
        .counters
        .iter()
        .flat_map(|c| c.each())
        .filter(|(n, _)| *n == name)
        .map(|(_, c)| c.load(Ordering::Relaxed))
        .sum()
}

fn line(out: &mut Vec<u8>, name: impl std::fmt::Display, value: impl std::fmt::Display) {
    let mut s = String::new();
    let _ = write!(s, "STAT {name} {value}\r\n");
    out.extend_from_slice(s.as_bytes());
}

/// CPU time of the whole process (user, system) in seconds.
fn rusage() -> (f64, f64) {
    use nix::sys::resource::{getrusage, UsageWho};
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(r) => {
            let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
            (secs(r.user_time()), secs(r.system_time()))
        }
        Err(_) => (0.0, 0.0),
    }
}

/// `stats`: the general statistics.
pub fn general(shared: &Shared, out: &mut Vec<u8>) {
    let now = shared.clock.now();
    let (user, system) = rusage();
    let store = shared.tenants.store_stats();
    line(out, "pid", std::process::id());
    line(out, "uptime", now.saturating_sub(shared.clock.started()));
    line(out, "time", now);
    line(out, "version", crate::VERSION);
    line(out, "libevent", "none (mio)");
    line(out, "pointer_size", usize::BITS);
    line(out, "rusage_user", format_args!("{user:.6}"));
    line(out, "rusage_system", format_args!("{system:.6}"));
    line(out, "max_connections", shared.settings.max_connections);
    line(out, "curr_connections", shared.curr_connections.load(Ordering::Relaxed));
    line(out, "total_connections", shared.total_connections.load(Ordering::Relaxed));
    line(out, "rejected_connections", shared.rejected_connections.load(Ordering::Relaxed));
    line(out, "connection_structures", shared.curr_connections.load(Ordering::Relaxed));
    // memcached's response objects and read-buffer pool have no counterpart: each connection
    // owns its buffers (docs/PROTOCOL.md lists every constant).
    zeros(out, &["response_obj_oom", "response_obj_count", "response_obj_bytes"]);
    line(out, "read_buf_count", shared.curr_connections.load(Ordering::Relaxed));
    zeros(out, &["read_buf_bytes", "read_buf_bytes_free", "read_buf_oom", "reserved_fds"]);
    let names: Vec<&str> = shared.counters[0].each().map(|(n, _)| n).collect();
    for name in names {
        if name == "conn_yields" {
            continue; // memcached prints it after `threads`
        }
        if name == "idle_kicks" && shared.settings.idle_timeout.is_none() {
            continue; // memcached prints it only with `-o idle_timeout`
        }
        line(out, name, total(shared, name));
    }
    line(out, "limit_maxbytes", maxbytes(shared));
    line(out, "accepting_conns", 1);
    zeros(out, &["listen_disabled_num", "time_in_listen_disabled_us"]);
    line(out, "threads", shared.settings.threads);
    line(out, "conn_yields", total(shared, "conn_yields"));
    // The index: two-choice buckets of 64 bytes, sized at creation, never expanding.
    let buckets = (store.index_bytes / 64).max(1);
    line(out, "hash_power_level", buckets.ilog2());
    line(out, "hash_bytes", store.index_bytes);
    line(out, "hash_is_expanding", 0);
    // No slabs, no LRU crawler or maintainer, no logger threads: their counters stay 0.
    zeros(
        out,
        &[
            "slab_reassign_rescues",
            "slab_reassign_chunk_rescues",
            "slab_reassign_evictions_nomem",
            "slab_reassign_inline_reclaim",
            "slab_reassign_busy_items",
            "slab_reassign_busy_deletes",
            "slab_reassign_running",
            "slabs_moved",
            "lru_crawler_running",
            "lru_crawler_starts",
            "lru_maintainer_juggles",
            "malloc_fails",
            "log_worker_dropped",
            "log_worker_written",
        ],
    );
    // Lines go straight to the watchers' queues: no worker buffer drops or writes them.
    let (watchers, sent, skipped) = shared.logs.counts();
    line(out, "log_watcher_skipped", skipped);
    line(out, "log_watcher_sent", sent);
    line(out, "log_watchers", watchers);
    if let Some(tls) = &shared.tls {
        tls.stats_lines(now, |name, value| line(out, name, value));
    }
    zeros(out, &["unexpected_napi_ids", "round_robin_fallback"]);
    line(out, "bytes", store.bytes);
    line(out, "curr_items", store.items);
    line(out, "total_items", store.total_items);
    // memcached's free page pool: Shoal's free segments.
    line(out, "slab_global_page_pool", store.segments_free);
    line(out, "expired_unfetched", store.expired_unfetched);
    line(out, "evicted_unfetched", store.evicted_unfetched);
    zeros(out, &["evicted_active"]);
    line(out, "evictions", store.evictions);
    line(out, "reclaimed", store.reclaimed);
    zeros(
        out,
        &[
            "crawler_reclaimed",
            "crawler_items_checked",
            "lrutail_reflocked",
            "moves_to_cold",
            "moves_to_warm",
            "moves_within_lru",
            "direct_reclaims",
            "lru_bumps_dropped",
        ],
    );
    // Shoal's own: the store's shape (docs/PROTOCOL.md).
    line(out, "index_evictions", store.index_evictions);
    line(out, "segments", store.segments);
    line(out, "segments_free", store.segments_free);
    line(out, "segment_bytes", store.segment_bytes);
    line(out, "index_bytes", store.index_bytes);
    line(out, "segments_evicted", store.segments_evicted);
    line(out, "segments_reclaimed", store.segments_reclaimed);
    if let Some(digest) = &shared.digest {
        line(out, "digest_keys", digest.keys());
        line(out, "digest_bytes", digest.bytes());
        line(out, "digest_saturated_counters", digest.saturated());
    }
    out.extend_from_slice(b"END\r\n");
}

/// `STAT <name> 0` for each name: memcached counters of machinery Shoal does not have.
fn zeros(out: &mut Vec<u8>, names: &[&str]) {
    for name in names {
        line(out, name, 0);
    }
}

/// The memory limit as memcached reports it: what `cache_memlimit` last set, else `-m`.
fn maxbytes(shared: &Shared) -> usize {
    match shared.memlimit.load(Ordering::Relaxed) {
        0 => shared.settings.region_bytes,
        set => set as usize,
    }
}

/// `stats settings`.
pub fn settings(shared: &Shared, out: &mut Vec<u8>) {
    let s = &shared.settings;
    let tcp_port = s.tcp.first().map_or(0, |(_, p)| *p);
    let on = |b: bool| if b { "yes" } else { "no" };
    line(out, "maxbytes", maxbytes(shared));
    line(out, "maxconns", s.max_connections);
    line(out, "tcpport", tcp_port);
    line(out, "udpport", s.udp.as_ref().map_or(0, |(_, p)| *p));
    line(out, "inter", s.tcp.first().map_or("NULL", |(h, _)| h.as_str()));
    line(out, "verbosity", shared.verbosity.load(Ordering::Relaxed));
    line(out, "evictions", if s.evict { "on" } else { "off" });
    line(
        out,
        "domain_socket",
        s.unix_socket.as_ref().map_or("NULL".into(), |(p, _)| p.display().to_string()),
    );
    line(out, "umask", format_args!("{:o}", s.unix_socket.as_ref().map_or(0o700, |(_, m)| *m)));
    line(out, "num_threads", s.threads);
    line(out, "stat_key_prefix", ":");
    line(out, "detail_enabled", "no");
    line(out, "reqs_per_event", s.reqs_per_event);
    line(out, "cas_enabled", on(s.use_cas));
    line(out, "tcp_backlog", s.backlog);
    line(out, "binding_protocol", s.protocol.name());
    line(out, "auth_enabled_sasl", on(s.sasl));
    line(out, "auth_enabled_ascii", s.auth_file.as_ref().map_or("no".into(), |f| f.display().to_string()));
    line(out, "item_size_max", s.max_item_bytes);
    line(out, "flush_enabled", on(s.enable_flush));
    line(out, "shutdown_command", on(s.enable_shutdown));
    s.tls.settings_lines(|name, value| line(out, name, value));
    line(out, "memory_file", shared.tenants.default_tenant().writer.path().display());
    line(out, "region_bytes", s.region_bytes);
    line(out, "avg_item_bytes", s.avg_item_bytes);
    line(out, "lease_ttl", s.lease_ttl);
    line(out, "stale_ttl", s.stale_ttl);
    line(out, "test_mode", on(s.test_mode));
    out.extend_from_slice(b"END\r\n");
}

/// `stats items`: Shoal has no slab classes; it reports its store as one class, 1 (what
/// memcached prints per class, for the whole store).
pub fn items(shared: &Shared, out: &mut Vec<u8>) {
    let store = shared.tenants.store_stats();
    if store.items > 0 {
        line(out, "items:1:number", store.items);
        line(out, "items:1:evicted", store.evictions);
        line(out, "items:1:evicted_unfetched", store.evicted_unfetched);
        line(out, "items:1:expired_unfetched", store.expired_unfetched);
        line(out, "items:1:reclaimed", store.reclaimed);
        line(out, "items:1:outofmemory", total(shared, "store_no_memory"));
    }
    out.extend_from_slice(b"END\r\n");
}

/// `stats slabs`: segments play the part of slab pages (one class of 1 MiB pages).
pub fn slabs(shared: &Shared, out: &mut Vec<u8>) {
    let store = shared.tenants.store_stats();
    let used = store.segments - store.segments_free;
    if used > 0 {
        line(out, "1:chunk_size", store.segment_bytes);
        line(out, "1:total_pages", used);
        line(out, "1:used_chunks", store.items);
        line(out, "1:mem_requested", store.bytes);
    }
    line(out, "active_slabs", usize::from(used > 0));
    line(out, "total_malloced", used * store.segment_bytes);
    out.extend_from_slice(b"END\r\n");
}

/// `stats conns`: the listening sockets, then one block per open connection in the state
/// memcached would show it in (`conn_new_cmd` before its first request, `conn_read` between
/// requests, `conn_nread` for a value on its way, `conn_mwrite` for an answer the client has not
/// taken, `conn_watch` for a watcher or a key dump, `conn_parse_cmd` for the one asking).
pub fn conns(shared: &Shared, out: &mut Vec<u8>) {
    let now = shared.clock.now();
    let uptime = now.saturating_sub(shared.clock.started());
    // memcached lists its listening sockets first (UDP ones with a `UDP` line and
    // `conn_read`: they are read like connections).
    for (fd, addr) in &shared.listening {
        if addr.starts_with("udp:") {
            line(out, format_args!("{fd}:UDP"), "UDP");
        }
        line(out, format_args!("{fd}:addr"), addr);
        line(
            out,
            format_args!("{fd}:state"),
            if addr.starts_with("udp:") { "conn_read" } else { "conn_listening" },
        );
        line(out, format_args!("{fd}:secs_since_last_cmd"), uptime);
    }
    for (id, conn) in shared.conns.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        line(out, format_args!("{id}:addr"), &conn.addr);
        line(out, format_args!("{id}:listen_addr"), &conn.listen_addr);
        line(out, format_args!("{id}:state"), crate::conn::state::name(conn.state.load(Ordering::Relaxed)));
        let last = conn.last_cmd.load(Ordering::Relaxed) as u32;
        line(out, format_args!("{id}:secs_since_last_cmd"), now.saturating_sub(last));
    }
    out.extend_from_slice(b"END\r\n");
}

/// `stats tenants` (a Shoal extension): each tenant's partition and requests, as
/// `STAT <tenant>:<field> <value>`, in the tenants file's order.
pub fn tenants(shared: &Shared, out: &mut Vec<u8>) {
    use crate::tenants::totals;
    for (i, t) in shared.tenants.all().iter().enumerate() {
        let name = &t.spec.name;
        let store = t.writer.stats();
        line(out, format_args!("{name}:limit_maxbytes"), t.writer.limit_bytes());
        line(out, format_args!("{name}:min_bytes"), t.spec.min_bytes);
        line(out, format_args!("{name}:max_bytes"), t.spec.max_bytes);
        line(out, format_args!("{name}:bytes"), store.bytes);
        line(out, format_args!("{name}:curr_items"), store.items);
        for (field, sum) in totals(&shared.tenant_counters, i) {
            line(out, format_args!("{name}:{field}"), sum);
        }
        line(out, format_args!("{name}:evictions"), store.evictions);
        line(out, format_args!("{name}:priority"), t.spec.priority);
        line(out, format_args!("{name}:slo_hit_ratio"), t.spec.slo_hit_ratio.unwrap_or(0.0));
        line(out, format_args!("{name}:policy"), t.spec.policy);
        line(out, format_args!("{name}:segment_bytes"), store.segment_bytes);
        line(out, format_args!("{name}:region"), t.writer.path().display());
    }
    out.extend_from_slice(b"END\r\n");
}

/// `stats reset`: zeroes the request counters (the store's own totals stay, as memcached's
/// `curr_items` and `total_items` do).
pub fn reset(shared: &Shared) {
    for c in shared.counters.iter() {
        for (_, counter) in c.each() {
            counter.store(0, Ordering::Relaxed);
        }
    }
    for row in &shared.tenant_counters {
        for t in row.iter() {
            for (_, c) in t.each() {
                c.store(0, Ordering::Relaxed);
            }
        }
    }
    shared.total_connections.store(0, Ordering::Relaxed);
    shared.rejected_connections.store(0, Ordering::Relaxed);
}
