//! memcached's `-o` sub-options (`-o modern,idle_timeout=600,...`, the flag given any number
//! of times), checked and gathered for [`crate::config::ServerArgs::settings`]. TLS's `ssl_*`
//! options and the data path's `io_uring*` options are parsed by their own modules
//! ([`crate::tls`], [`crate::uring_options`]); those memcached has for machinery Shoal does not
//! have are accepted and ignored ([`IGNORED_SUBOPTIONS`], listed in docs/PROTOCOL.md).

use crate::tls::TlsOptions;
use crate::uring_options::IoOptions;

/// `-o` sub-options memcached has that tune machinery Shoal does not have (slab classes, LRU
/// crawler, hash table growth, extstore): accepted so existing command lines keep working, and
/// ignored (listed in docs/PROTOCOL.md).
const IGNORED_SUBOPTIONS: &[&str] = &[
    "hashpower",
    "tail_repair_time",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "lru_segmented",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
    "watcher_logbuf_size",
    "worker_logbuf_size",
    "track_sizes",
    "no_inline_ascii_resp",
    "no_chunked_items",
    "slab_automove",
    "slab_automove_ratio",
    "slab_automove_window",
    "slab_chunk_max",
    "no_hashexpand",
    "hash_algorithm",
    "relaxed_privileges",
    "resp_obj_mem_limit",
];

/// memcached's default `temporary_ttl` (shown by `stats settings` even when the TEMP LRU is
/// off).
pub const DEFAULT_TEMPORARY_TTL: u32 = 61;

/// What the `-o` options say.
#[derive(Clone, Debug)]
pub struct Suboptions {
    /// `idle_timeout=N` (None: 0, off).
    pub idle_timeout: Option<u32>,
    pub lru_crawler: bool,
    pub lru_maintainer: bool,
    pub slab_reassign: bool,
    pub maxconns_fast: bool,
    /// `read_buf_mem_limit=MB`, in bytes (0: none).
    pub read_buf_mem_limit: usize,
    pub hotkeys: usize,
    pub hotkeys_sample: u32,
    /// `temporary_ttl=N`: memcached's TEMP LRU is on (`temp_lru`) with this TTL; `None`: off.
    pub temporary_ttl: Option<u32>,
    pub tls: TlsOptions,
    pub io: IoOptions,
}

/// Parses every `-o` argument given; `enable_ssl` is `-Z`.
pub fn parse(extended: &[String], enable_ssl: bool) -> Result<Suboptions, String> {
    let mut o = Suboptions {
        idle_timeout: None,
        lru_crawler: true,
        lru_maintainer: true,
        slab_reassign: true,
        maxconns_fast: true,
        read_buf_mem_limit: 0,
        hotkeys: crate::hotkeys::DEFAULT_TOP,
        hotkeys_sample: crate::hotkeys::DEFAULT_SAMPLE,
        temporary_ttl: None,
        tls: TlsOptions { enabled: enable_ssl, ..TlsOptions::default() },
        io: IoOptions::from_env()?,
    };
    for opts in extended {
        for opt in opts.split(',').filter(|o| !o.is_empty()) {
            let (name, value) = opt.split_once('=').unwrap_or((opt, ""));
            if let Some(taken) = o.tls.suboption(name, opt.split_once('=').map(|(_, v)| v)) {
                taken?;
                continue;
            }
            if let Some(taken) = o.io.suboption(name, value) {
                taken?;
                continue;
            }
            o.one(opt, name, value)?;
        }
    }
    Ok(o)
}

impl Suboptions {
    /// One option other than TLS's and the data path's.
    fn one(&mut self, opt: &str, name: &str, value: &str) -> Result<(), String> {
        match name {
            "idle_timeout" => {
                let seconds: u32 = value
                    .parse()
                    .map_err(|_| format!("-o idle_timeout={value}: seconds, e.g. idle_timeout=600"))?;
                self.idle_timeout = (seconds > 0).then_some(seconds);
            }
            "lru_crawler" => self.lru_crawler = true,
            "no_lru_crawler" => self.lru_crawler = false,
            "lru_maintainer" => self.lru_maintainer = true,
            "no_lru_maintainer" => self.lru_maintainer = false,
            "slab_reassign" => self.slab_reassign = true,
            "no_slab_reassign" => self.slab_reassign = false,
            // memcached 1.6's defaults are the modern ones already.
            "modern" => {}
            "maxconns_fast" => self.maxconns_fast = true,
            "no_maxconns_fast" => self.maxconns_fast = false,
            "no_modern" => {
                (self.lru_crawler, self.lru_maintainer, self.slab_reassign, self.maxconns_fast) =
                    (false, false, false, false)
            }
            "read_buf_mem_limit" => {
                self.read_buf_mem_limit =
                    value.parse::<usize>().ok().and_then(|mb| mb.checked_mul(1 << 20)).ok_or_else(|| {
                        format!("-o read_buf_mem_limit={value}: megabytes, e.g. read_buf_mem_limit=64")
                    })?;
            }
            "hotkeys" => {
                self.hotkeys =
                    value.parse().ok().filter(|&k| k <= shoal_proto::MAX_HOTKEYS).ok_or_else(|| {
                        format!("-o hotkeys={value}: keys to list, 0 (off) to 1024, e.g. hotkeys=64")
                    })?;
            }
            "hotkeys_sample" => {
                self.hotkeys_sample = value.parse().ok().filter(|&n| n >= 1).ok_or_else(|| {
                    format!("-o hotkeys_sample={value}: count one read in N, N ≥ 1, e.g. hotkeys_sample=64")
                })?;
            }
            // memcached: the option turns its TEMP LRU on, with this TTL.
            "temporary_ttl" => {
                let seconds = value.parse::<u32>().map_err(|_| {
                    format!("-o temporary_ttl={value}: seconds, e.g. temporary_ttl=61 (items living at most that long are never evicted)")
                })?;
                self.temporary_ttl = Some(seconds);
            }
            _ if IGNORED_SUBOPTIONS.contains(&name) => {}
            _ => return Err(format!("Illegal suboption \"{opt}\"")),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(opts: &[&str]) -> Result<Suboptions, String> {
        parse(&opts.iter().map(|s| s.to_string()).collect::<Vec<_>>(), false)
    }

    #[test]
    fn temporary_ttl_turns_the_temporary_class_on_with_its_ttl() {
        assert_eq!(parsed(&[]).unwrap().temporary_ttl, None);
        let o = parsed(&["lru_maintainer,lru_crawler,temporary_ttl=61"]).unwrap();
        assert_eq!(o.temporary_ttl, Some(61));
        assert_eq!(parsed(&["temporary_ttl=0"]).unwrap().temporary_ttl, Some(0));
        for bad in ["temporary_ttl", "temporary_ttl=x", "temporary_ttl=-1"] {
            assert!(parsed(&[bad]).unwrap_err().contains("temporary_ttl"), "{bad}");
        }
    }

    #[test]
    fn options_accumulate_over_every_flag_and_unknown_ones_are_refused() {
        let o = parsed(&["no_modern", "lru_crawler,idle_timeout=5", "hashpower=20"]).unwrap();
        assert!(o.lru_crawler && !o.lru_maintainer && !o.slab_reassign && !o.maxconns_fast);
        assert_eq!(o.idle_timeout, Some(5));
        assert_eq!(parsed(&["bogus=1"]).unwrap_err(), "Illegal suboption \"bogus=1\"");
    }
}
