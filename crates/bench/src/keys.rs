//! Keys: their names on the wire, and the distributions requests draw them from.

use crate::random::{Rng, Zipf};
use shoal_proto::KEY_MAX;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Every key starts with this; the rest is the key's index, zero-padded to the key size.
const KEY_PREFIX: &[u8] = b"key:";

/// The keys of a run: `count` keys of exactly `size` bytes, `key:000…<index>`.
#[derive(Clone, Copy, Debug)]
pub struct KeySpace {
    count: u64,
    size: usize,
}

impl KeySpace {
    /// Keys `0..count`, each `size` bytes long; refused if `size` has no room for the prefix
    /// and the digits of the largest index, or exceeds memcached's `KEY_MAX` bytes.
    pub fn new(count: u64, size: usize) -> Result<Self, String> {
        if count == 0 {
            return Err("the key count must be at least 1".into());
        }
        let needed = KEY_PREFIX.len() + decimal_digits(count - 1);
        if size < needed {
            return Err(format!("--key-size {size} is too short for {count} keys: they need {needed} bytes"));
        }
        if size > KEY_MAX {
            return Err(format!("--key-size {size} is longer than memcached's {KEY_MAX}-byte limit"));
        }
        Ok(KeySpace { count, size })
    }

    /// How many keys there are.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The key with this index (taken modulo the count).
    pub fn key(&self, index: u64) -> Key {
        let mut bytes = [b'0'; KEY_MAX];
        bytes[..KEY_PREFIX.len()].copy_from_slice(KEY_PREFIX);
        let mut rest = index % self.count;
        for digit in bytes[KEY_PREFIX.len()..self.size].iter_mut().rev() {
            *digit = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        Key { bytes, len: self.size }
    }
}

fn decimal_digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// One key, held inline so that building a request allocates nothing.
#[derive(Clone, Copy)]
pub struct Key {
    bytes: [u8; KEY_MAX],
    len: usize,
}

impl Key {
    /// The key as sent on the wire.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl AsRef<[u8]> for Key {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// YCSB's default Zipfian skew, used when `zipf` or `latest` is given without one.
pub const DEFAULT_SKEW: f64 = 0.99;

/// How requests pick keys (`--distribution`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Distribution {
    /// Every key equally likely.
    Uniform,
    /// Zipf's law over key indices: key 0 is the most popular, key `k` is drawn with
    /// probability proportional to `1 / (k + 1)^skew`.
    Zipf {
        /// The exponent; larger is more skewed.
        skew: f64,
    },
    /// YCSB's "latest": sets write keys in sequence (wrapping around), and gets follow Zipf's
    /// law over recency, so the key written last is the most popular.
    Latest {
        /// The exponent of the recency distribution.
        skew: f64,
    },
}

impl FromStr for Distribution {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (name, skew) = match text.split_once(':') {
            Some((name, skew)) => {
                let skew: f64 = skew.parse().map_err(|_| format!("bad skew {skew:?} (expected a number)"))?;
                if !(skew > 0.0 && skew.is_finite()) {
                    return Err(format!("the skew must be positive, got {skew}"));
                }
                (name, Some(skew))
            }
            None => (text, None),
        };
        match (name, skew) {
            ("uniform", None) => Ok(Distribution::Uniform),
            ("zipf", skew) => Ok(Distribution::Zipf { skew: skew.unwrap_or(DEFAULT_SKEW) }),
            ("latest", skew) => Ok(Distribution::Latest { skew: skew.unwrap_or(DEFAULT_SKEW) }),
            _ => Err(format!("unknown distribution {text:?}: use uniform, zipf[:<skew>] or latest[:<skew>]")),
        }
    }
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Distribution::Uniform => write!(f, "uniform"),
            Distribution::Zipf { skew } => write!(f, "zipf:{skew}"),
            Distribution::Latest { skew } => write!(f, "latest:{skew}"),
        }
    }
}

/// Draws key indices for gets and sets. Cloned once per connection; clones of a `latest`
/// chooser share one count of keys written, so "latest" means latest across the whole run.
#[derive(Clone, Debug)]
pub struct KeyChooser {
    count: u64,
    /// `None`: uniform.
    ranks: Option<Zipf>,
    /// For `latest`: how many keys have been written in sequence (the newest is this minus
    /// one, modulo the count).
    written: Option<Arc<AtomicU64>>,
}

impl KeyChooser {
    /// A chooser over `count` keys. `latest` starts as if keys `0..count` had just been
    /// written in order (which is what `--prefill` does).
    pub fn new(distribution: Distribution, count: u64) -> Self {
        let (ranks, written) = match distribution {
            Distribution::Uniform => (None, None),
            Distribution::Zipf { skew } => (Some(Zipf::new(count, skew)), None),
            Distribution::Latest { skew } => {
                (Some(Zipf::new(count, skew)), Some(Arc::new(AtomicU64::new(count))))
            }
        };
        KeyChooser { count, ranks, written }
    }

    /// The index of the next key to read.
    pub fn next_get(&self, rng: &mut Rng) -> u64 {
        let rank = match &self.ranks {
            Some(zipf) => zipf.sample(rng),
            None => rng.below(self.count),
        };
        match &self.written {
            Some(written) => {
                let newest = (written.load(Ordering::Relaxed) + self.count - 1) % self.count;
                (newest + self.count - rank) % self.count
            }
            None => rank,
        }
    }

    /// The index of the next key to write: the next in sequence for `latest`, otherwise
    /// drawn like a read (YCSB's updates).
    pub fn next_set(&self, rng: &mut Rng) -> u64 {
        match &self.written {
            Some(written) => written.fetch_add(1, Ordering::Relaxed) % self.count,
            None => self.next_get(rng),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::tests::{chi_square, zipf_probabilities, CHI_SQUARE_99_DOF_P999};

    #[test]
    fn keys_have_the_requested_size_and_distinct_names() {
        let space = KeySpace::new(1000, 16).unwrap();
        assert_eq!(space.key(0).as_bytes(), b"key:000000000000");
        assert_eq!(space.key(999).as_bytes(), b"key:000000000999");
        assert_eq!(space.key(1000).as_bytes(), space.key(0).as_bytes(), "indices wrap");
        let tight = KeySpace::new(1000, 7).unwrap();
        assert_eq!(tight.key(42).as_bytes(), b"key:042");
    }

    #[test]
    fn key_sizes_that_cannot_work_are_refused() {
        assert!(KeySpace::new(1001, 7).unwrap_err().contains("need 8 bytes"));
        assert!(KeySpace::new(10, 251).unwrap_err().contains("250-byte"));
        assert!(KeySpace::new(0, 16).is_err());
        assert!(KeySpace::new(1, 5).is_ok(), "one key needs one digit");
    }

    #[test]
    fn distributions_parse_and_print_back() {
        for text in ["uniform", "zipf:0.99", "zipf:1.2", "latest:0.5"] {
            assert_eq!(text.parse::<Distribution>().unwrap().to_string(), text);
        }
        assert_eq!("zipf".parse::<Distribution>(), Ok(Distribution::Zipf { skew: DEFAULT_SKEW }));
        assert_eq!("latest".parse::<Distribution>(), Ok(Distribution::Latest { skew: DEFAULT_SKEW }));
        for bad in ["zipf:0", "zipf:-1", "zipf:x", "uniform:1", "normal"] {
            assert!(bad.parse::<Distribution>().is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn latest_reads_follow_zipf_over_recency_and_move_with_writes() {
        let chooser = KeyChooser::new(Distribution::Latest { skew: 0.99 }, 100);
        let mut rng = Rng::new(11);
        let mut by_age = vec![0u64; 100];
        for _ in 0..200_000 {
            // Key 99 was written last: age 0.
            by_age[(99 - chooser.next_get(&mut rng)) as usize] += 1;
        }
        let chi = chi_square(&by_age, &zipf_probabilities(100, 0.99));
        assert!(chi < CHI_SQUARE_99_DOF_P999, "chi-square {chi:.1}");

        // Writes continue the sequence from the prefill, wrapping around; clones share it.
        let other_connection = chooser.clone();
        assert_eq!(chooser.next_set(&mut rng), 0);
        assert_eq!(other_connection.next_set(&mut rng), 1);
        let newest_hits = (0..10_000).filter(|_| chooser.next_get(&mut rng) == 1).count();
        assert!(newest_hits > 10_000 / 8, "the newest key is the most read: {newest_hits}");
    }

    #[test]
    fn uniform_and_zipf_choosers_write_where_they_read() {
        let mut rng = Rng::new(5);
        let uniform = KeyChooser::new(Distribution::Uniform, 10);
        assert!((0..1000).all(|_| uniform.next_set(&mut rng) < 10));
        let zipf = KeyChooser::new(Distribution::Zipf { skew: 2.0 }, 1_000_000);
        let zeros = (0..10_000).filter(|_| zipf.next_set(&mut rng) == 0).count();
        // Zipf(2): P(0) = 6/π² ≈ 0.61.
        assert!((5800..6400).contains(&zeros), "{zeros}");
    }
}
