//! The memory limit and the room to raise it. memcached grows into more memory when
//! `cache_memlimit` raises its limit past `-m`; a Shoal region is a file mapped once by the
//! server and by every local reader, so it is created with that room already in it:
//!
//! ```text
//!   -m 64, --memory-max 256 (default 4 × -m, at least 64 MB)
//!   region file: header │ index (sized for -m's items) │ table │ segments ……………………… (256 MB)
//!                                                                used (-m) │ parked (sparse:
//!                                                                          │ no memory)
//!   cache_memlimit 128 ──► Writer::set_limit: parked segments join the free list
//!   cache_memlimit 8   ──► evicts whole segments, parks them, gives their pages back
//! ```
//!
//! Parked segments are holes in the file (tmpfs allocates nothing for them), so the room costs
//! address space and a 64-byte table entry per segment, not memory. The index is planned for
//! the items `-m` holds, not for the whole file: past -m, small items may fill the index before
//! the segments (those evictions count as `index_evictions`). `--memory-max` equal to `-m`
//! makes the region exactly as before (what a region file made by an earlier Shoal, reopened
//! with `-e`, needs); a device region (not a regular file) is never larger than `-m`.

use shoal_region::layout::SEGMENT_META_BYTES;
use shoal_region::{Config, Writer};
use std::path::Path;

/// The default room to grow: this many times `-m`…
const DEFAULT_GROWTH: usize = 4;
/// …and at least this many megabytes (memcached's suite raises `-m 3` to 16).
const DEFAULT_MIN_MAX_MB: usize = 64;

/// The region for `-m` (`asked` bytes): memcached runs in as little as `-m 2`, a region needs
/// two segments that each hold the largest item, and its index; a smaller `-m` is raised to
/// the smallest region that works, in whole MiB (at most by eight times the largest item; a
/// region that fails for another reason keeps `asked`, and the start says why).
pub fn region_bytes_for(asked: usize, max_item_bytes: usize, avg_item_bytes: usize) -> usize {
    let works = |bytes| {
        let config = Config { region_bytes: bytes, max_item_bytes, avg_item_bytes };
        config.layout().is_ok()
    };
    let ceiling = asked.saturating_add(max_item_bytes.saturating_mul(8));
    let mut bytes = asked;
    while !works(bytes) && bytes < ceiling {
        bytes += 1 << 20;
    }
    if works(bytes) {
        bytes
    } else {
        asked
    }
}

/// `--memory-max` in bytes: as given (at least `-m`), else the default; `-m` alone for a
/// region on a device, which cannot be larger than it is.
pub fn max_bytes(
    memory_mb: usize,
    max_mb: Option<usize>,
    region_path: Option<&Path>,
) -> Result<usize, String> {
    let device =
        region_path.and_then(|p| std::fs::metadata(p).ok()).is_some_and(|m| !m.file_type().is_file());
    let mb = match max_mb {
        Some(mb) if mb < memory_mb => {
            return Err(format!("--memory-max {mb}: below -m {memory_mb}, the limit at start"))
        }
        Some(mb) => mb,
        None if device => memory_mb,
        None => memory_mb.saturating_mul(DEFAULT_GROWTH).max(DEFAULT_MIN_MAX_MB),
    };
    mb.checked_mul(1 << 20).ok_or_else(|| format!("--memory-max {mb}: too large"))
}

/// The region for `-m` grown to hold `max_bytes` of segments, with the index `-m`'s region
/// would have: the same geometry plus the segments (and their table entries) the room adds.
/// The index is planned from the average item size over all segments, so that size is scaled
/// by the growth to plan the buckets `-m`'s items need. `None` when there is no room to add.
fn grown(base: &Config, max_bytes: usize) -> Option<Config> {
    let layout = base.layout().ok()?;
    let segments = max_bytes / layout.segment_bytes;
    let extra = segments.checked_sub(layout.segment_count).filter(|&n| n > 0)?;
    Some(Config {
        region_bytes: layout.region_bytes + extra * (layout.segment_bytes + SEGMENT_META_BYTES) + 4096,
        avg_item_bytes: (base.avg_item_bytes * segments).div_ceil(layout.segment_count),
        ..base.clone()
    })
}

/// The region the server creates: `base` (the region `-m` alone makes) with room for
/// `max_bytes` (`--memory-max`).
pub fn region_config(base: Config, max_bytes: usize) -> Config {
    grown(&base, max_bytes).unwrap_or(base)
}

/// Sets what the settings ask of a region the server opened: the memory limit `-m` gives
/// (`base`, when the region has room past it), and memcached's `temporary_ttl`.
pub fn prepare_region(writer: &Writer, base: &Config, temporary_ttl: Option<u32>) -> Result<(), String> {
    if let Some(ttl) = temporary_ttl {
        writer.set_temporary_ttl(ttl);
    }
    let Ok(start) = base.layout() else { return Ok(()) };
    let layout = writer.layout();
    if layout.segment_count > start.segment_count {
        writer
            .set_limit(start.segment_count * layout.segment_bytes)
            .map_err(|e| format!("region {}: {e}", writer.path().display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn the_default_room_is_four_times_m_and_at_least_64_mb() {
        assert_eq!(max_bytes(3, None, None).unwrap(), 64 * MIB);
        assert_eq!(max_bytes(64, None, None).unwrap(), 256 * MIB);
        assert_eq!(max_bytes(64, Some(64), None).unwrap(), 64 * MIB);
        assert!(max_bytes(64, Some(32), None).unwrap_err().contains("below -m"));
        assert!(max_bytes(1, Some(usize::MAX), None).unwrap_err().contains("too large"));
        // A device cannot be larger than it is: no room by default.
        assert_eq!(max_bytes(8, None, Some(Path::new("/dev/null"))).unwrap(), 8 * MIB);
    }

    #[test]
    fn a_grown_region_adds_segments_and_keeps_the_index_m_needs() {
        for (m, max) in [(3, 64), (64, 256), (1024, 4096)] {
            let base = Config { region_bytes: m * MIB, max_item_bytes: MIB, avg_item_bytes: 128 };
            let base = Config { region_bytes: region_bytes_for(base.region_bytes, MIB, 128), ..base };
            let small = base.layout().unwrap();
            let big = grown(&base, max * MIB).unwrap().layout().unwrap();
            assert!((max..=max + 1).contains(&big.segment_count), "-m {m}: {} segments", big.segment_count);
            assert_eq!(big.segment_bytes, small.segment_bytes);
            let ratio = big.bucket_count as f64 / small.bucket_count as f64;
            assert!((0.97..=1.01).contains(&ratio), "-m {m}: the index stays -m's ({ratio})");
        }
        let base = Config { region_bytes: 64 * MIB, max_item_bytes: MIB, avg_item_bytes: 128 };
        let segments = base.layout().unwrap().segment_count;
        assert!(grown(&base, segments * MIB).is_none(), "no room past -m: the region -m makes");
    }
}
