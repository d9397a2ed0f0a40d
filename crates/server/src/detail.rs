//! `stats detail on|off|dump`: per-prefix counts of gets, hits, sets and deletes, as
//! memcached's `stats_prefix.c` keeps them. A key's prefix is what precedes the first prefix
//! delimiter (`-D`, `:` by default) in it; a key without one is not counted.
//!
//! ```text
//!  exec::ops (get, set, delete) ──record──► PrefixStats (one lock, as memcached's) ──dump──► stats
//! ```
//!
//! Off (the default, without `-D`) a request pays one relaxed load. memcached keeps every
//! prefix it sees; this keeps at most [`MAX_PREFIXES`] (a client choosing keys could otherwise
//! grow it without bound), and counts nothing for a prefix past that.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The most prefixes counted at once (`stats reset` forgets them all).
pub const MAX_PREFIXES: usize = 1 << 16;

/// What a request did with a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    Get { hit: bool },
    Set,
    Delete,
}

#[derive(Clone, Copy, Default)]
struct Counts {
    gets: u64,
    hits: u64,
    sets: u64,
    deletes: u64,
}

/// The per-prefix counts and whether they are being kept.
pub struct PrefixStats {
    enabled: AtomicBool,
    delimiter: u8,
    counts: Mutex<BTreeMap<Box<[u8]>, Counts>>,
}

impl PrefixStats {
    /// Counts keyed by what precedes `delimiter`; `enabled` as `-D` starts them (memcached:
    /// giving a delimiter turns detail on).
    pub fn new(delimiter: u8, enabled: bool) -> PrefixStats {
        PrefixStats { enabled: AtomicBool::new(enabled), delimiter, counts: Mutex::new(BTreeMap::new()) }
    }

    /// Counts `event` for `key`'s prefix, if detail is on and the key has one.
    #[inline]
    pub fn record(&self, key: &[u8], event: Event) {
        if self.enabled.load(Ordering::Relaxed) {
            self.count(key, event);
        }
    }

    fn count(&self, key: &[u8], event: Event) {
        // memcached's key scan stops at a NUL as at the key's end (binary keys may hold one).
        let key = key.split(|&b| b == 0).next().unwrap_or_default();
        let Some(end) = key.iter().position(|&b| b == self.delimiter) else { return };
        let prefix = &key[..end];
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if counts.len() >= MAX_PREFIXES && !counts.contains_key(prefix) {
            return;
        }
        let entry = counts.entry(prefix.into()).or_default();
        match event {
            Event::Get { hit } => {
                entry.gets += 1;
                entry.hits += u64::from(hit);
            }
            Event::Set => entry.sets += 1,
            Event::Delete => entry.deletes += 1,
        }
    }

    /// `stats detail on` / `off`.
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// Whether counting is on (`stats settings` detail_enabled).
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// The delimiter (`stats settings` stat_key_prefix).
    pub fn delimiter(&self) -> char {
        char::from(self.delimiter)
    }

    /// Forgets every prefix (`stats reset`).
    pub fn clear(&self) {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// `stats detail dump`: `PREFIX <prefix> get <n> hit <n> set <n> del <n>` per prefix (in
    /// byte order; memcached's is its hash table's), then `END`.
    pub fn dump(&self, out: &mut Vec<u8>) {
        use std::io::Write as _;
        let counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        for (prefix, c) in counts.iter() {
            out.extend_from_slice(b"PREFIX ");
            out.extend_from_slice(prefix);
            let _ = write!(out, " get {} hit {} set {} del {}\r\n", c.gets, c.hits, c.sets, c.deletes);
        }
        out.extend_from_slice(b"END\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(stats: &PrefixStats) -> String {
        let mut out = Vec::new();
        stats.dump(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn counts_per_prefix_as_memcached_does() {
        let stats = PrefixStats::new(b':', true);
        assert_eq!(dump(&stats), "END\r\n");
        stats.record(b"abc:123", Event::Set);
        stats.record(b"abc:123", Event::Get { hit: false });
        stats.record(b"abc:456", Event::Get { hit: true });
        stats.record(b"abc:", Event::Delete);
        stats.record(b"abc", Event::Set); // no delimiter: not counted
        stats.record(b"def\0:1", Event::Set); // the key scan stops at a NUL
        stats.record(b":x", Event::Set); // an empty prefix is one
        assert_eq!(
            dump(&stats),
            "PREFIX  get 0 hit 0 set 1 del 0\r\nPREFIX abc get 2 hit 1 set 1 del 1\r\nEND\r\n"
        );
        stats.set_enabled(false);
        stats.record(b"abc:1", Event::Set);
        assert!(dump(&stats).contains("abc get 2 hit 1 set 1 del 1"), "off counts nothing");
        stats.clear();
        assert_eq!(dump(&stats), "END\r\n");
    }

    #[test]
    fn another_delimiter_and_a_bounded_table() {
        let stats = PrefixStats::new(b'|', true);
        stats.record(b"a:b|c", Event::Set);
        assert_eq!(dump(&stats), "PREFIX a:b get 0 hit 0 set 1 del 0\r\nEND\r\n");
        for i in 0..MAX_PREFIXES + 10 {
            stats.record(format!("{i}|k").as_bytes(), Event::Set);
        }
        assert_eq!(dump(&stats).lines().count(), MAX_PREFIXES + 1, "at most MAX_PREFIXES, then END");
        stats.record(b"a:b|d", Event::Set);
        assert!(dump(&stats).contains("PREFIX a:b get 0 hit 0 set 2"), "known prefixes still count");
    }
}
