//! The `stats` command's answers.
//!
//! Each worker thread counts into its own [`Counters`](crate::counters::Counters); `stats`
//! sums them. The store's own numbers (items, bytes, evictions) come from the region.

use crate::state::Shared;
use shoal_proto::Tokens;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

/// `stats [group]`: appends the group's lines (`RESET` for `stats reset`, `OK` for `stats
/// detail on|off`, a `CLIENT_ERROR` for bad arguments); false for a group there is none of,
/// with nothing appended.
pub fn answer(shared: &Shared, group: Tokens<'_>, out: &mut Vec<u8>) -> bool {
    let words: Vec<&[u8]> = group.collect();
    match words.as_slice() {
        [] => general(shared, out),
        [b"settings"] => settings(shared, out),
        [b"items"] => items(shared, out),
        [b"slabs"] => slabs(shared, out),
        [b"conns"] => conns(shared, out),
        [b"tenants"] => tenants(shared, out),
        [b"shoal"] => shoal(shared, out),
        [b"hotkeys"] => shared.hotkeys.answer(out),
        [b"reset"] => {
            reset(shared);
            out.extend_from_slice(b"RESET\r\n");
        }
        // memcached reads the word after `detail` and ignores the rest.
        [b"detail", rest @ ..] => match detail(shared, rest.first().copied(), out) {
            Detail::Dumped => {}
            Detail::Switched => out.extend_from_slice(b"OK\r\n"),
            Detail::Usage => out.extend_from_slice(b"CLIENT_ERROR usage: stats detail on|off|dump\r\n"),
        },
        [b"cachedump", args @ ..] => cachedump(shared, args, out),
        _ => return false,
    }
    true
}

/// What `stats detail <word>` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detail {
    /// `on` or `off`: counting switched.
    Switched,
    /// `dump`: the `PREFIX` lines and `END` appended.
    Dumped,
    /// Another word, or none.
    Usage,
}

/// `stats detail on|off|dump` (the text and binary protocols answer it in their own words).
pub fn detail(shared: &Shared, word: Option<&[u8]>, out: &mut Vec<u8>) -> Detail {
    match word {
        Some(b"on") => shared.prefixes.set_enabled(true),
        Some(b"off") => shared.prefixes.set_enabled(false),
        Some(b"dump") => {
            shared.prefixes.dump(out);
            return Detail::Dumped;
        }
        _ => return Detail::Usage,
    }
    Detail::Switched
}

/// memcached's slab class ids run below this; `stats cachedump` refuses others.
pub const SLAB_CLASSES: u32 = 64;
/// The most a `stats cachedump` answer holds, as memcached's (2 MB, `END` included).
const CACHEDUMP_BYTES: usize = 2 << 20;

/// The class and limit of `stats cachedump <class> <limit> …` (words after the second are
/// ignored, as memcached ignores them), or memcached's refusal.
pub fn cachedump_args(args: &[&[u8]]) -> Result<(u32, u32), &'static str> {
    let [class, limit, ..] = args else { return Err("CLIENT_ERROR bad command line") };
    let number = |word: &[u8]| std::str::from_utf8(word).ok()?.parse::<u32>().ok();
    let (Some(class), Some(limit)) = (number(class), number(limit)) else {
        return Err("CLIENT_ERROR bad command line format");
    };
    if class >= SLAB_CLASSES {
        return Err("CLIENT_ERROR Illegal slab id");
    }
    Ok((class, limit))
}

/// `stats cachedump <class> <limit>`: `ITEM <key> [<value bytes> b; <expiry> s]` for up to
/// `limit` items (0: as many as fit in 2 MB) of the class, then `END`. Every item is in class 1
/// (as `stats items` reports); keys a client sent in base64 are left out, as memcached leaves
/// binary keys out.
fn cachedump(shared: &Shared, args: &[&[u8]], out: &mut Vec<u8>) {
    let (class, limit) = match cachedump_args(args) {
        Ok(args) => args,
        Err(refusal) => {
            out.extend_from_slice(refusal.as_bytes());
            out.extend_from_slice(b"\r\n");
            return;
        }
    };
    let start = out.len();
    let mut shown = 0u32;
    // Stops at the limit, or at the first line that would take the answer past 2 MB.
    let mut done = false;
    if class == 1 {
        for writer in shared.tenants.all().iter().map(|t| &t.writer) {
            let mut bucket = 0;
            while bucket < writer.bucket_count() && !done {
                writer.walk_buckets(bucket..bucket + 1024, |item| {
                    if done || item.info.marks.binary_key {
                        return;
                    }
                    let mut entry = b"ITEM ".to_vec();
                    entry.extend_from_slice(item.key);
                    let size = format!(" [{} b; {} s]\r\n", item.info.value_len, item.info.expiry);
                    entry.extend_from_slice(size.as_bytes());
                    if out.len() - start + entry.len() + b"END\r\n".len() > CACHEDUMP_BYTES {
                        done = true;
                        return;
                    }
                    out.extend_from_slice(&entry);
                    shown += 1;
                    done = shown == limit;
                });
                bucket += 1024;
            }
        }
    }
    out.extend_from_slice(b"END\r\n");
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
    line(out, "libevent", "none (epoll)");
    line(out, "pointer_size", usize::BITS);
    line(out, "rusage_user", format_args!("{user:.6}"));
    line(out, "rusage_system", format_args!("{system:.6}"));
    line(out, "max_connections", shared.settings.max_connections);
    line(out, "curr_connections", shared.curr_connections.load(Ordering::Relaxed));
    line(out, "total_connections", shared.total_connections.load(Ordering::Relaxed));
    if shared.settings.maxconns_fast {
        line(out, "rejected_connections", shared.rejected_connections.load(Ordering::Relaxed));
    }
    line(out, "connection_structures", shared.curr_connections.load(Ordering::Relaxed));
    // memcached's response objects and read-buffer pool have no counterpart: each connection
    // owns its buffers (docs/PROTOCOL.md lists every constant); `-o read_buf_mem_limit` caps
    // the answers a connection holds unsent, and the refusals count as memcached's.
    line(out, "response_obj_oom", total(shared, "response_obj_oom"));
    zeros(out, &["response_obj_count", "response_obj_bytes"]);
    line(out, "read_buf_count", shared.curr_connections.load(Ordering::Relaxed));
    zeros(out, &["read_buf_bytes", "read_buf_bytes_free", "read_buf_oom", "reserved_fds"]);
    let names: Vec<&str> = shared.counters[0].each().map(|(n, _)| n).collect();
    for name in names {
        if name == "conn_yields" || name == "response_obj_oom" {
            continue; // memcached prints them elsewhere
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
    // No slab page mover, LRU crawler thread, maintainer or logger threads: their counters
    // stay 0, each group printed when memcached 1.6.18 prints it (its page mover and
    // maintainer are on by default, and `-o no_modern` turns them off, as the crawler).
    let s = &shared.settings;
    if s.slab_reassign {
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
            ],
        );
    }
    if shared.crawler_enabled.load(Ordering::Relaxed) {
        zeros(out, &["lru_crawler_running", "lru_crawler_starts"]);
    }
    if s.lru_maintainer {
        zeros(out, &["lru_maintainer_juggles"]);
    }
    zeros(out, &["malloc_fails", "log_worker_dropped", "log_worker_written"]);
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
    if s.lru_maintainer {
        zeros(out, &["evicted_active"]);
    }
    line(out, "evictions", store.evictions);
    line(out, "reclaimed", store.reclaimed);
    let crawled = &shared.tenants.crawled;
    line(out, "crawler_reclaimed", crawled.reclaimed.load(Ordering::Relaxed));
    line(out, "crawler_items_checked", crawled.checked.load(Ordering::Relaxed));
    zeros(out, &["lrutail_reflocked"]);
    if s.lru_maintainer {
        zeros(
            out,
            &["moves_to_cold", "moves_to_warm", "moves_within_lru", "direct_reclaims", "lru_bumps_dropped"],
        );
    }
    out.extend_from_slice(b"END\r\n");
}

/// `stats shoal` (a Shoal extension): the store's shape, which memcached's `stats` has no
/// fields for, then the warm-restart hold and the digest when they are on (docs/PROTOCOL.md).
pub fn shoal(shared: &Shared, out: &mut Vec<u8>) {
    let store = shared.tenants.store_stats();
    line(out, "index_evictions", store.index_evictions);
    line(out, "segments", store.segments);
    line(out, "segments_free", store.segments_free);
    line(out, "segment_bytes", store.segment_bytes);
    line(out, "index_bytes", store.index_bytes);
    line(out, "segments_evicted", store.segments_evicted);
    line(out, "segments_reclaimed", store.segments_reclaimed);
    if shared.settings.rejoin_hold > 0 {
        let writer = &shared.tenants.default_tenant().writer;
        line(out, "rejoin_hold_remaining", writer.hold_remaining());
        line(out, "previous_stop", writer.previous_stop().name());
    }
    if let Some(digest) = &shared.digest {
        line(out, "digest_keys", digest.keys());
        line(out, "digest_bytes", digest.bytes());
        line(out, "digest_saturated_counters", digest.saturated());
    }
    shared.io.write(|name, value| line(out, name, value));
    if let Some(up) = &shared.upstream {
        up.counter_stats(out);
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

/// `stats settings`, in memcached's order: the settings Shoal has, and those of memcached's LRU
/// crawler and maintainer that the Prometheus exporter reads, as constants for machinery Shoal
/// does not have (docs/PROTOCOL.md); then Shoal's own.
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
    line(out, "shutdown_command", on(s.enable_shutdown));
    line(out, "num_threads", s.threads);
    line(out, "stat_key_prefix", shared.prefixes.delimiter());
    line(out, "detail_enabled", on(shared.prefixes.enabled()));
    line(out, "reqs_per_event", s.reqs_per_event);
    line(out, "cas_enabled", on(s.use_cas));
    line(out, "tcp_backlog", s.backlog);
    line(out, "binding_protocol", s.protocol.name());
    line(out, "auth_enabled_sasl", on(s.sasl));
    line(out, "auth_enabled_ascii", s.auth_file.as_ref().map_or("no".into(), |f| f.display().to_string()));
    line(out, "item_size_max", s.max_item_bytes);
    // `lru_crawler enable|disable` switch the key dump; the crawler's pace is memcached's
    // default, as `-o lru_crawler_sleep`/`tocrawl` and their commands change nothing.
    line(out, "lru_crawler", on(shared.crawler_enabled.load(Ordering::Relaxed)));
    line(out, "lru_crawler_sleep", 100);
    line(out, "lru_crawler_tocrawl", 0);
    line(out, "flush_enabled", on(s.enable_flush));
    // No LRU maintainer and no hot or warm LRU: every item is in the one queue eviction takes
    // from, which `stats items` reports as cold.
    line(out, "lru_maintainer_thread", "no");
    line(out, "lru_segmented", "no");
    line(out, "hot_lru_pct", 0);
    line(out, "warm_lru_pct", 0);
    line(out, "hot_max_factor", "0.00");
    line(out, "warm_max_factor", "0.00");
    // memcached's TEMP LRU: Shoal's temporary time class (`-o temporary_ttl`).
    line(out, "temp_lru", on(s.temporary_ttl.is_some()));
    line(out, "temporary_ttl", s.temporary_ttl.unwrap_or(crate::suboptions::DEFAULT_TEMPORARY_TTL));
    s.tls.settings_lines(|name, value| line(out, name, value));
    line(out, "memory_file", shared.tenants.default_tenant().writer.path().display());
    line(out, "region_bytes", s.region_bytes);
    line(out, "memory_max", s.memory_max_bytes);
    line(out, "avg_item_bytes", s.avg_item_bytes);
    line(out, "lease_ttl", s.lease_ttl);
    line(out, "stale_ttl", s.stale_ttl);
    line(out, "test_mode", on(s.test_mode));
    if let Some(up) = &shared.upstream {
        up.settings_stats(out);
    }
    out.extend_from_slice(b"END\r\n");
}

/// `stats items`: Shoal has no slab classes; it reports its store (every tenant) as one class,
/// 1, with memcached's fields in memcached's order. Without hot and warm LRUs every item is
/// cold, and every hit a hit to cold. `age`, `evicted_nonzero` and `evicted_time` are left
/// out: the store keeps no queue of write times and no record of what it evicted.
pub fn items(shared: &Shared, out: &mut Vec<u8>) {
    let store = shared.tenants.store_stats();
    if store.items > 0 {
        let no_memory = total(shared, "store_no_memory");
        let hits = total(shared, "get_hits");
        let fields: [(&str, u64); 25] = [
            ("number", store.items),
            ("number_hot", 0),
            ("number_warm", 0),
            ("number_cold", store.items),
            ("age_hot", 0),
            ("age_warm", 0),
            ("mem_requested", store.bytes),
            ("evicted", store.evictions),
            ("outofmemory", no_memory),
            ("tailrepairs", 0),
            ("reclaimed", store.reclaimed),
            ("expired_unfetched", store.expired_unfetched),
            ("evicted_unfetched", store.evicted_unfetched),
            ("evicted_active", 0),
            ("crawler_reclaimed", shared.tenants.crawled.reclaimed.load(Ordering::Relaxed)),
            ("crawler_items_checked", shared.tenants.crawled.checked.load(Ordering::Relaxed)),
            ("lrutail_reflocked", 0),
            ("moves_to_cold", 0),
            ("moves_to_warm", 0),
            ("moves_within_lru", 0),
            ("direct_reclaims", 0),
            ("hits_to_hot", 0),
            ("hits_to_warm", 0),
            ("hits_to_cold", hits),
            ("hits_to_temp", 0),
        ];
        for (field, value) in fields {
            line(out, format_args!("items:1:{field}"), value);
        }
    }
    out.extend_from_slice(b"END\r\n");
}

/// `stats slabs`: one class, 1, whose pages are the segments in use and whose chunks are the
/// items, of the size they take on average (the configured `--avg-item-bytes` while there are
/// none); free segments are `slab_global_page_pool`. Its command counters are the server's.
/// The class is listed once anything was stored, as memcached keeps a class's first page when
/// its items are gone (a class with 0 pages while every segment is free again).
pub fn slabs(shared: &Shared, out: &mut Vec<u8>) {
    let store = shared.tenants.store_stats();
    let pages = store.segments.saturating_sub(store.segments_free + store.segments_parked);
    let listed = pages > 0 || store.total_items > 0;
    if listed {
        let chunk = match store.items {
            0 => shared.settings.avg_item_bytes as u64,
            items => store.bytes.div_ceil(items),
        }
        .clamp(1, store.segment_bytes as u64);
        let per_page = store.segment_bytes as u64 / chunk;
        let chunks = pages as u64 * per_page;
        let sizes = [
            ("chunk_size", chunk),
            ("chunks_per_page", per_page),
            ("total_pages", pages as u64),
            ("total_chunks", chunks),
            ("used_chunks", store.items),
            ("free_chunks", chunks.saturating_sub(store.items)),
            ("free_chunks_end", 0),
        ];
        for (field, value) in sizes {
            line(out, format_args!("1:{field}"), value);
        }
        let commands = [
            "get_hits",
            "cmd_set",
            "delete_hits",
            "incr_hits",
            "decr_hits",
            "cas_hits",
            "cas_badval",
            "touch_hits",
        ];
        for name in commands {
            line(out, format_args!("1:{name}"), total(shared, name));
        }
    }
    line(out, "active_slabs", usize::from(listed));
    line(out, "total_malloced", pages * store.segment_bytes);
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
        line(
            out,
            format_args!("{id}:state"),
            crate::state::conn_state::name(conn.state.load(Ordering::Relaxed)),
        );
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

/// `stats reset`: zeroes the request counters and forgets `stats detail`'s prefixes (the
/// store's own totals stay, as memcached's `curr_items` and `total_items` do).
pub fn reset(shared: &Shared) {
    shared.prefixes.clear();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cachedump_arguments_are_checked_as_memcached_checks_them() {
        assert_eq!(cachedump_args(&[b"1", b"100"]), Ok((1, 100)));
        assert_eq!(cachedump_args(&[b"63", b"0", b"extra"]), Ok((63, 0)));
        assert_eq!(cachedump_args(&[b"1"]), Err("CLIENT_ERROR bad command line"));
        assert_eq!(cachedump_args(&[b"x", b"1"]), Err("CLIENT_ERROR bad command line format"));
        assert_eq!(cachedump_args(&[b"1", b"-1"]), Err("CLIENT_ERROR bad command line format"));
        assert_eq!(cachedump_args(&[b"64", b"1"]), Err("CLIENT_ERROR Illegal slab id"));
    }
}
