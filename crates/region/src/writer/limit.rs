//! The memory limit: how many of the region's segments the writer may use. A region is
//! created at its largest size (a sparse file costs nothing until written); the limit moves
//! within it at run time — memcached's `cache_memlimit`, and a tenant's partition being
//! resized. Shrinking evicts whole segments in the eviction policy's order (oldest first under
//! `fifo`, least recently used under `lru`) until the segments in use fit, and gives their
//! pages back to the system (a hole punched in the file); growing hands parked segments back
//! to the free list. Items in the segments that stay are untouched, and readers
//! in other processes see nothing but evictions.
//!
//! The limit lives in the writer's memory: a writer attaching again starts with every segment
//! usable, and the server sets the limit it was given.

use super::*;

/// The fewest segments a limit may leave: one to write into, one for second chances.
pub const MIN_LIMIT_SEGMENTS: usize = 2;

/// Why a memory limit cannot be set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitError {
    /// Below [`MIN_LIMIT_SEGMENTS`] segments.
    TooSmall { bytes: usize, least: usize },
    /// Above the region's size: a region does not grow past what it was created with.
    TooLarge { bytes: usize, most: usize },
}

impl std::fmt::Display for LimitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitError::TooSmall { bytes, least } => {
                write!(f, "a memory limit of {bytes} bytes is under the least of {least} (two segments)")
            }
            LimitError::TooLarge { bytes, most } => write!(
                f,
                "a memory limit of {bytes} bytes is over the {most} bytes of segments the region was created with"
            ),
        }
    }
}

impl std::error::Error for LimitError {}

impl Writer {
    /// The segments the writer may use now.
    pub fn limit_segments(&self) -> usize {
        self.usable(&self.pool())
    }

    /// The memory limit in bytes: the segments the writer may use, whole.
    pub fn limit_bytes(&self) -> usize {
        self.limit_segments() * self.region.layout.segment_bytes
    }

    /// Sets the memory limit to `bytes` of segments (rounded down to whole segments), evicting
    /// segments (as the eviction policy picks them, whole) while more are in use, and returns
    /// the new limit in bytes.
    pub fn set_limit(&self, bytes: usize) -> Result<usize, LimitError> {
        let l = &self.region.layout;
        let wanted = bytes / l.segment_bytes;
        if wanted < MIN_LIMIT_SEGMENTS {
            return Err(LimitError::TooSmall { bytes, least: MIN_LIMIT_SEGMENTS * l.segment_bytes });
        }
        if wanted > l.segment_count {
            return Err(LimitError::TooLarge { bytes, most: l.segment_count * l.segment_bytes });
        }
        let mut pool = self.pool();
        loop {
            let usable = self.usable(&pool);
            if usable < wanted {
                let s = pool.parked.pop().expect("fewer usable than all means some are parked");
                pool.free.push(s);
            } else if usable == wanted {
                break;
            } else if let Some(s) = pool.free.pop() {
                self.park(&mut pool, s);
            } else if self.reclaim_dead(&mut pool, 0) == 0 {
                // Nothing free and nothing dead: the policy's victim goes, items and all.
                let Some(victim) = self.take_victim(&mut pool) else {
                    break; // nothing left to take (cannot happen above two segments)
                };
                self.evict(&mut pool, victim, 0);
                self.region.header().segments_evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        let usable = self.usable(&pool);
        self.fit_classes(&mut pool, usable);
        Ok(usable * l.segment_bytes)
    }

    /// Segments not parked (pool lock held).
    fn usable(&self, pool: &Pool) -> usize {
        self.region.layout.segment_count - pool.parked.len()
    }

    /// Holds free segment `s` back and gives its memory to the system (best effort: a device
    /// region keeps it).
    fn park(&self, pool: &mut Pool, s: usize) {
        let l = &self.region.layout;
        let _ = self.region.map.discard(l.segment_offset(s), l.segment_bytes);
        pool.parked.push(s);
    }
}
