//! memcached's expiry rules and the time classes that group segments by expiry.
//!
//! Stored expiry is absolute server time in Unix seconds; 0 means never. An item is expired
//! once the server clock (published in the header) reaches its expiry.

/// Expiry times up to this many seconds are relative; larger ones are absolute Unix times.
pub const RELATIVE_LIMIT: i64 = 60 * 60 * 24 * 30;

/// Converts a protocol `exptime` to a stored expiry at server time `now`, as memcached does:
/// 0 never expires, negative is already expired, up to 30 days is relative, larger is an
/// absolute Unix time. `None` means the item is expired on arrival.
pub fn absolute_expiry(exptime: i64, now: u32) -> Option<u32> {
    let at = match exptime {
        0 => return Some(0),
        e if e < 0 => return None,
        e if e <= RELATIVE_LIMIT => now as i64 + e,
        e => e,
    };
    // u32::MAX would read as "never" in segment bookkeeping; one second earlier is far enough.
    (at > now as i64).then(|| at.min(u32::MAX as i64 - 1) as u32)
}

/// True if an item with stored expiry `expiry` is expired at server time `now`.
#[inline]
pub fn is_expired(expiry: u32, now: u32) -> bool {
    expiry != 0 && expiry <= now
}

/// Number of fine time classes: "never" plus four per power of two of the remaining lifetime.
const FINE_CLASSES: usize = 1 + 4 * 32;

/// The most classes a region has (its largest [`TimeClasses`]), so the class memcached's
/// `-o temporary_ttl` items go to ([`TimeClasses::TEMPORARY`]) comes after every other.
pub(crate) const MAX_CLASSES: usize = FINE_CLASSES;

/// The fine time class of an item: "never" is 0, then four classes per power of two of the
/// remaining lifetime.
#[inline]
fn fine_class(expiry: u32, now: u32) -> usize {
    if expiry == 0 {
        return 0;
    }
    let ttl = expiry.saturating_sub(now).max(1);
    let log = 31 - ttl.leading_zeros();
    let quarter = if log >= 2 { (ttl >> (log - 2)) & 3 } else { ttl & 3 };
    1 + (log * 4 + quarter) as usize
}

/// How a region groups items by lifetime. Items of one class share segments, so a segment's
/// items expire at about the same time and the segment is reclaimed whole, without looking at
/// its items. Every class in use keeps one segment open, so a region gets at most one class per
/// eight segments: neighbouring fine classes merge in small regions, and open segments never
/// hold more than about an eighth of memory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TimeClasses {
    merge: usize,
}

impl TimeClasses {
    /// The class of items whose lifetime is within memcached's `temporary_ttl`: its segments
    /// are never evicted, only reclaimed when their items expire. Past every other class.
    pub const TEMPORARY: usize = MAX_CLASSES;

    /// The classes of a region with `segments` segments (in use: the memory limit's).
    pub fn for_segments(segments: usize) -> TimeClasses {
        let limit = (segments / 8).clamp(2, FINE_CLASSES);
        TimeClasses::merging((FINE_CLASSES - 1).div_ceil(limit - 1))
    }

    /// The classes that merge `merge` neighbouring fine classes into one (1 or more).
    pub fn merging(merge: usize) -> TimeClasses {
        let merge = merge.clamp(1, FINE_CLASSES - 1);
        TimeClasses { merge }
    }

    /// How many fine classes each class merges ([`TimeClasses::merging`] gives them back).
    pub fn merge(&self) -> usize {
        self.merge
    }

    /// Number of classes.
    #[cfg(test)]
    pub fn count(&self) -> usize {
        1 + (FINE_CLASSES - 1).div_ceil(self.merge)
    }

    /// The class of an item with stored expiry `expiry` at server time `now`.
    #[inline]
    pub fn of(&self, expiry: u32, now: u32) -> usize {
        match fine_class(expiry, now) {
            0 => 0,
            fine => 1 + (fine - 1) / self.merge,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_expiry_rules() {
        let now = 1_700_000_000;
        assert_eq!(absolute_expiry(0, now), Some(0));
        assert_eq!(absolute_expiry(-1, now), None);
        assert_eq!(absolute_expiry(10, now), Some(now + 10));
        assert_eq!(absolute_expiry(RELATIVE_LIMIT, now), Some(now + RELATIVE_LIMIT as u32));
        assert_eq!(absolute_expiry(RELATIVE_LIMIT + 1, now), None, "absolute time in 1970");
        assert_eq!(absolute_expiry(now as i64 + 5, now), Some(now + 5));
        assert_eq!(absolute_expiry(i64::MAX, now), Some(u32::MAX - 1));
        assert!(is_expired(now, now) && !is_expired(now + 1, now) && !is_expired(0, now));
    }

    #[test]
    fn time_classes_are_ordered_and_bounded() {
        let now = 1000;
        for segments in [2, 16, 59, 500, 1024, 100_000] {
            let classes = TimeClasses::for_segments(segments);
            assert!(classes.count() <= (segments / 8).max(2) + 1, "{segments}: {classes:?}");
            let mut last = 0;
            for ttl in (1..100_000u32).chain([u32::MAX - 1 - now]) {
                let c = classes.of(now + ttl, now);
                assert!(c >= last && c >= 1 && c < classes.count(), "ttl {ttl} class {c}");
                last = c;
            }
            assert_eq!(classes.of(0, now), 0);
        }
        assert_eq!(TimeClasses::for_segments(100_000).count(), FINE_CLASSES);
        for segments in [2, 16, 59, 500, 100_000] {
            let classes = TimeClasses::for_segments(segments);
            let again = TimeClasses::merging(classes.merge());
            assert_eq!((again.count(), again.merge()), (classes.count(), classes.merge()));
            assert!(classes.count() <= MAX_CLASSES && TimeClasses::TEMPORARY >= classes.count());
        }
    }
}
