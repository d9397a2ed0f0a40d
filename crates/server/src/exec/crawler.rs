//! `lru_crawler`: memcached's key dump (`metadump`), streamed from a walk of the regions'
//! indexes, and the crawler's controls, answered as memcached 1.6.18 answers them.
//!
//! Shoal has no crawler thread: dead items go with their segments, which the clock thread
//! reclaims every 100 ms. `crawl` unlinks every dead item at once (so the item counts drop
//! even while the item's segment still holds live ones); `tocrawl` and `sleep` tune nothing.
//! A dump is written a slice of buckets at a time, between the connection's other work, so
//! it never holds more than the output limit of lines in memory however many keys there are.

use super::{push_u64, reply, Context, Flow};
use shoal_proto::crawler::push_uriencoded;
use shoal_proto::{Classes, LruCrawler};
use std::sync::atomic::Ordering;

/// Buckets walked per slice of a dump (each holds up to 7 items).
const BUCKETS_PER_SLICE: usize = 4096;

/// A dump in progress: where its walk is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dump {
    /// The tenant being walked, and the last one to walk.
    tenant: usize,
    last_tenant: usize,
    /// The next bucket of the tenant's index.
    bucket: usize,
}

/// Executes `lru_crawler …`.
pub fn execute(cx: &mut Context<'_>, command: LruCrawler, out: &mut Vec<u8>) -> Flow {
    let enabled_flag = &cx.shared.crawler_enabled;
    let enabled = enabled_flag.load(Ordering::Relaxed);
    let classes = match command {
        LruCrawler::Metadump(_) | LruCrawler::Crawl(_) if !enabled => {
            reply(out, b"CLIENT_ERROR lru crawler disabled");
            return Flow::Continue;
        }
        LruCrawler::Metadump(Classes::Bad) | LruCrawler::Crawl(Classes::Bad) => {
            reply(out, b"BADCLASS invalid class id");
            return Flow::Continue;
        }
        // memcached walks its hash table only to dump, and says so this way.
        LruCrawler::Crawl(Classes::Hash) => {
            reply(out, b"ERROR an unknown error happened");
            return Flow::Continue;
        }
        LruCrawler::Metadump(classes) => classes,
        // Every item is in class 1: a crawl of other classes finds nothing.
        LruCrawler::Crawl(classes) => {
            if classes.contains(1) {
                crawl(cx);
            }
            reply(out, b"OK");
            return Flow::Continue;
        }
        LruCrawler::Enable if enabled => {
            reply(out, b"ERROR failed to start lru crawler thread");
            return Flow::Continue;
        }
        LruCrawler::Enable | LruCrawler::Disable => {
            enabled_flag.store(command == LruCrawler::Enable, Ordering::Relaxed);
            reply(out, b"OK");
            return Flow::Continue;
        }
        LruCrawler::Tocrawl(_) | LruCrawler::Sleep(_) => {
            reply(out, b"OK");
            return Flow::Continue;
        }
    };
    // memcached hands the socket to its crawler, which cannot follow answers still queued.
    if !out.is_empty() {
        reply(out, b"ERROR cannot pipeline other commands before metadump");
        return Flow::Continue;
    }
    // Every item is in class 1, the one class `stats items` reports.
    if !classes.contains(1) {
        reply(out, b"END");
        return Flow::Continue;
    }
    let tenants = walked_tenants(cx);
    Flow::Dump(Dump { tenant: tenants.start, last_tenant: tenants.end - 1, bucket: 0 })
}

/// `lru_crawler crawl`: unlinks the dead items of the connection's tenants, counting them as
/// memcached's crawler does, then reclaims the segments that left empty. Done before the
/// answer (memcached's crawler runs behind it; a client polls `lru_crawler_running`).
fn crawl(cx: &Context<'_>) {
    let tenants = &cx.shared.tenants;
    let now = cx.shared.clock.now();
    for t in walked_tenants(cx) {
        let writer = &tenants.get(t).writer;
        let swept = writer.sweep_dead(0..writer.bucket_count());
        tenants.crawled.checked.fetch_add(swept.checked, Ordering::Relaxed);
        tenants.crawled.reclaimed.fetch_add(swept.reclaimed, Ordering::Relaxed);
        writer.tick(now);
    }
}

/// The tenants a connection sees: its own if it is bound to one, else all.
fn walked_tenants(cx: &Context<'_>) -> std::ops::Range<usize> {
    match cx.bound {
        Some(t) => t..t + 1,
        None => 0..cx.shared.tenants.all().len(),
    }
}

/// Writes the next slice of a dump; true when it is complete (and `END` written).
pub fn dump_slice(cx: &Context<'_>, dump: &mut Dump, out: &mut Vec<u8>) -> bool {
    let shared = cx.shared;
    let writer = &shared.tenants.get(dump.tenant).writer;
    let started = shared.clock.started();
    let end = dump.bucket + BUCKETS_PER_SLICE;
    writer.walk_buckets(dump.bucket..end, |item| {
        // memcached's format, each line ending in a bare `\n`: `exp` and `la` are absolute
        // Unix times (`exp=-1`: never); `size` is the item's bytes in its segment.
        let info = &item.info;
        out.extend_from_slice(b"key=");
        push_uriencoded(out, item.key);
        out.extend_from_slice(b" exp=");
        if info.expiry == 0 {
            out.extend_from_slice(b"-1");
        } else {
            push_u64(out, u64::from(info.expiry));
        }
        out.extend_from_slice(b" la=");
        push_u64(out, u64::from(if info.last_access == 0 { started } else { info.last_access }));
        out.extend_from_slice(b" cas=");
        push_u64(out, shared.settings.visible_cas(info.cas));
        out.extend_from_slice(if info.fetched { b" fetch=yes" } else { b" fetch=no" });
        out.extend_from_slice(b" cls=1 size=");
        push_u64(out, shoal_region::layout::item_bytes(item.key.len(), info.value_len, false) as u64);
        out.push(b'\n');
    });
    dump.bucket = end;
    if dump.bucket < writer.bucket_count() {
        return false;
    }
    if dump.tenant < dump.last_tenant {
        dump.tenant += 1;
        dump.bucket = 0;
        return false;
    }
    reply(out, b"END");
    true
}
