//! The Proteus digest: a counting Bloom filter of the keys a server holds, so that during a
//! transition a router asks the old owner only for keys it may still have.
//!
//! `m` counters of 4 bits; a key touches `k` of them, at `(h1 + i·h2) mod m` for `i` in `0..k`
//! (exact arithmetic, not wrapping), where `h1` and `h2` are the low and high 64 bits of
//! XXH3-128 of the key with the digest's seed. A counter saturates at 15: an insert leaves a
//! saturated counter at 15 and a remove never decrements it, so a saturated counter can only
//! make the digest answer "may contain" more often — it can never cause a false negative.
//! A counter that never saturated holds exactly the number of inserted keys (with
//! multiplicity) that touch it, less those removed.
//!
//! **Guarantee**: `may_contain(key)` is true for every key inserted more often than removed,
//! provided only inserted keys are removed. Removing a key whose counters include a 0 (a key
//! certainly absent) changes nothing; removing a never-inserted key that happens to look
//! present (a false positive) would decrement other keys' counters, so callers remove only
//! what they inserted.
//!
//! **Snapshot** ([`Digest::to_snapshot`]), all integers little-endian:
//!
//! ```text
//!   offset  size  field
//!        0     8  magic "SHOALDG1"
//!        8     1  version (1)
//!        9     1  counter bits (4)
//!       10     2  k, hash positions per key (1..=64)
//!       12     8  m, counters (1..=2^36)
//!       20     8  seed of XXH3-128
//!       28  ⌈m/2⌉ counters, two per byte: counter j in byte j/2, low nibble when j is even;
//!                 the unused high nibble of an odd m's last byte is 0
//! ```

use crate::error::{Error, Result};
use xxhash_rust::xxh3::xxh3_128_with_seed;

/// A snapshot's first 8 bytes.
pub const MAGIC: &[u8; 8] = b"SHOALDG1";
/// The snapshot version this build writes and reads.
pub const VERSION: u8 = 1;
/// Bits per counter.
pub const COUNTER_BITS: u8 = 4;
/// A counter's largest value; a counter there is saturated.
pub const COUNTER_MAX: u8 = 15;
/// The snapshot header's size in bytes, before the counters.
pub const HEADER_BYTES: usize = 28;
/// The most hash positions per key.
pub const MAX_HASHES: u32 = 64;
/// The most counters (2^36: 32 GiB of counters).
pub const MAX_COUNTERS: u64 = 1 << 36;

/// A counting Bloom filter of keys with 4-bit saturating counters (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digest {
    counters: u64,
    hashes: u32,
    seed: u64,
    /// Two counters per byte.
    packed: Vec<u8>,
}

impl Digest {
    /// An empty digest of `counters` counters and `hashes` positions per key, hashing with
    /// `seed`. Refuses 0 or more than [`MAX_COUNTERS`] counters and 0 or more than
    /// [`MAX_HASHES`] positions.
    pub fn new(counters: u64, hashes: u32, seed: u64) -> Result<Digest> {
        check_geometry(counters, hashes)?;
        let bytes = usize::try_from(packed_len(counters))
            .map_err(|_| Error::BadDigest(format!("{counters} counters do not fit this machine")))?;
        Ok(Digest { counters, hashes, seed, packed: vec![0; bytes] })
    }

    /// The geometry `(m, k)` for `expected_keys` keys at `false_positive_rate`, by the standard
    /// formulas `m = ⌈−n ln p / (ln 2)²⌉` and `k = round((m / n) ln 2)` (at least 1, at most
    /// [`MAX_HASHES`]). Refuses `n = 0`, a rate outside `(0, 1)` and a geometry over
    /// [`MAX_COUNTERS`].
    pub fn geometry(expected_keys: u64, false_positive_rate: f64) -> Result<(u64, u32)> {
        if expected_keys == 0 {
            return Err(Error::BadDigest("expected keys 0: size a digest for at least 1 key".into()));
        }
        let p = false_positive_rate;
        if !(p > 0.0 && p < 1.0) {
            return Err(Error::BadDigest(format!("false-positive rate {p}: it must be above 0 and below 1")));
        }
        let n = expected_keys as f64;
        let ln2 = std::f64::consts::LN_2;
        let m = (-n * p.ln() / (ln2 * ln2)).ceil();
        if m > MAX_COUNTERS as f64 {
            return Err(Error::BadDigest(format!(
                "{expected_keys} keys at false-positive rate {p} need {m} counters, over the {MAX_COUNTERS} allowed"
            )));
        }
        let m = (m as u64).max(1);
        let k = ((m as f64 / n) * ln2).round().clamp(1.0, f64::from(MAX_HASHES)) as u32;
        Ok((m, k))
    }

    /// An empty digest sized by [`Digest::geometry`] for `expected_keys` keys at
    /// `false_positive_rate`, seed 0. With those keys inserted, the chance that any counter
    /// saturates (reaches 16 increments) is at most
    /// `m · C(n·k, 16) · (1/m)^16 ≤ m · (e·n·k / (16 m))^16` — [`Digest::overflow_bound`]; for
    /// 50 000 keys at 1e-4 that is about 1e-9.
    pub fn sized(expected_keys: u64, false_positive_rate: f64) -> Result<Digest> {
        let (m, k) = Digest::geometry(expected_keys, false_positive_rate)?;
        Digest::new(m, k, 0)
    }

    /// The bound `m · (e·n·k / (16 m))^16` (capped at 1; 0 when `n·k < 16`) on the chance that
    /// some counter saturates once `keys` distinct keys are inserted.
    pub fn overflow_bound(&self, keys: u64) -> f64 {
        let touches = keys as f64 * f64::from(self.hashes);
        if touches < 16.0 {
            return 0.0;
        }
        let m = self.counters as f64;
        let ln = m.ln() + 16.0 * (1.0 + touches.ln() - (16.0 * m).ln());
        ln.exp().min(1.0)
    }

    /// Counts `key` in: each of its counters goes up by one unless saturated.
    pub fn insert(&mut self, key: &[u8]) {
        for j in self.positions(key) {
            let c = self.counter(j);
            if c < COUNTER_MAX {
                self.set_counter(j, c + 1);
            }
        }
    }

    /// Counts one `key` out: each of its counters goes down by one, except saturated ones.
    /// Returns false, changing nothing, when the key is certainly absent (a counter at 0).
    /// Remove only keys inserted (see the module docs).
    pub fn remove(&mut self, key: &[u8]) -> bool {
        if !self.may_contain(key) {
            return false;
        }
        for j in self.positions(key) {
            let c = self.counter(j);
            // A key touching one counter twice decrements it twice, as it incremented it.
            if c > 0 && c < COUNTER_MAX {
                self.set_counter(j, c - 1);
            }
        }
        true
    }

    /// False only if `key` is certainly not in the digest.
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.positions(key).all(|j| self.counter(j) > 0)
    }

    /// How many counters are saturated (at 15).
    pub fn saturated_counters(&self) -> u64 {
        self.packed
            .iter()
            .map(|&b| u64::from(b & 0xf == COUNTER_MAX) + u64::from(b >> 4 == COUNTER_MAX))
            .sum()
    }

    /// `m`, the number of counters.
    pub fn counters(&self) -> u64 {
        self.counters
    }

    /// `k`, the hash positions per key.
    pub fn hashes(&self) -> u32 {
        self.hashes
    }

    /// The XXH3-128 seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The snapshot described in the module docs: 28 bytes of header, then `⌈m/2⌉` bytes.
    pub fn to_snapshot(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + self.packed.len());
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.push(COUNTER_BITS);
        out.extend_from_slice(&(self.hashes as u16).to_le_bytes());
        out.extend_from_slice(&self.counters.to_le_bytes());
        out.extend_from_slice(&self.seed.to_le_bytes());
        out.extend_from_slice(&self.packed);
        out
    }

    /// Reads a snapshot back. Refuses one that is truncated, has another magic, version or
    /// counter width, a geometry out of range or that does not match its length, or a nonzero
    /// unused nibble; so every accepted snapshot is exactly what [`Digest::to_snapshot`] of the
    /// result writes.
    pub fn from_snapshot(bytes: &[u8]) -> Result<Digest> {
        let bad = |why: String| Err(Error::BadDigest(why));
        if bytes.len() < HEADER_BYTES {
            return bad(format!(
                "snapshot of {} bytes is truncated: the header alone is {HEADER_BYTES}",
                bytes.len()
            ));
        }
        if &bytes[..8] != MAGIC {
            return bad(format!(
                "snapshot starts {:?}, not \"SHOALDG1\"",
                String::from_utf8_lossy(&bytes[..8])
            ));
        }
        if bytes[8] != VERSION {
            return bad(format!("snapshot version {}: this build reads version {VERSION}", bytes[8]));
        }
        if bytes[9] != COUNTER_BITS {
            return bad(format!(
                "counters of {} bits: this build reads {COUNTER_BITS}-bit counters",
                bytes[9]
            ));
        }
        let hashes = u32::from(u16::from_le_bytes([bytes[10], bytes[11]]));
        let counters = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
        let seed = u64::from_le_bytes(bytes[20..28].try_into().expect("8 bytes"));
        check_geometry(counters, hashes)?;
        let body = &bytes[HEADER_BYTES..];
        let want = packed_len(counters);
        if body.len() as u64 != want {
            let what = if (body.len() as u64) < want { "truncated" } else { "too long" };
            return bad(format!(
                "{counters} counters take {want} bytes, the snapshot has {} ({what})",
                body.len()
            ));
        }
        if counters % 2 == 1 && body[body.len() - 1] >> 4 != 0 {
            return bad(format!("the unused half of the last byte is {}, not 0", body[body.len() - 1] >> 4));
        }
        Ok(Digest { counters, hashes, seed, packed: body.to_vec() })
    }

    fn positions(&self, key: &[u8]) -> impl Iterator<Item = u64> {
        let h = xxh3_128_with_seed(key, self.seed);
        let (h1, h2) = (h & u128::from(u64::MAX), h >> 64);
        let m = u128::from(self.counters);
        (0..u128::from(self.hashes)).map(move |i| ((h1 + i * h2) % m) as u64)
    }

    fn counter(&self, j: u64) -> u8 {
        (self.packed[(j / 2) as usize] >> ((j % 2) * 4)) & 0xf
    }

    fn set_counter(&mut self, j: u64, value: u8) {
        let (byte, shift) = (&mut self.packed[(j / 2) as usize], (j % 2) * 4);
        *byte = (*byte & !(0xf << shift)) | (value << shift);
    }
}

fn check_geometry(counters: u64, hashes: u32) -> Result<()> {
    if counters == 0 || counters > MAX_COUNTERS {
        return Err(Error::BadDigest(format!("{counters} counters: a digest has 1 to {MAX_COUNTERS}")));
    }
    if hashes == 0 || hashes > MAX_HASHES {
        return Err(Error::BadDigest(format!(
            "{hashes} hash positions per key: a digest uses 1 to {MAX_HASHES}"
        )));
    }
    Ok(())
}

fn packed_len(counters: u64) -> u64 {
    counters / 2 + counters % 2
}

#[cfg(test)]
mod tests;
