//! mcrouter's routing prefix (`/region/cluster/key`) and hash stop (`key|#|rest`).
//!
//! A key that starts with `/` and has two more `/` carries a routing prefix: the router picks
//! the route for that region and cluster and, unless the pool keeps it, sends the key without
//! it. `/*/*/key` is a broadcast to every cluster of every region. Independently, a key that
//! contains `|#|` is hashed only on what precedes it, so related keys land on one server while
//! the whole key is stored.

/// The hash stop: only the bytes before it choose the server.
pub const HASH_STOP: &[u8] = b"|#|";

/// A key split into its routing prefix (if any) and the key the servers see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Routed<'a> {
    /// The region of `/region/cluster/`, or `None` without a prefix.
    pub region: Option<&'a [u8]>,
    /// The cluster of `/region/cluster/`, or `None` without a prefix.
    pub cluster: Option<&'a [u8]>,
    /// The key without its routing prefix.
    pub key: &'a [u8],
}

impl<'a> Routed<'a> {
    /// Splits `/region/cluster/rest`; any other key has no prefix. A key that starts with `/`
    /// but has no complete prefix (`/a/b` with nothing after, `/a`) is taken as a plain key,
    /// as a server would store it.
    pub fn parse(key: &'a [u8]) -> Routed<'a> {
        let plain = Routed { region: None, cluster: None, key };
        let Some(rest) = key.strip_prefix(b"/") else { return plain };
        let Some(r) = rest.iter().position(|&b| b == b'/') else { return plain };
        let (region, rest) = (&rest[..r], &rest[r + 1..]);
        let Some(c) = rest.iter().position(|&b| b == b'/') else { return plain };
        let (cluster, key_part) = (&rest[..c], &rest[c + 1..]);
        if region.is_empty() || cluster.is_empty() || key_part.is_empty() {
            return plain;
        }
        Routed { region: Some(region), cluster: Some(cluster), key: key_part }
    }

    /// Whether the prefix is `/*/*/`: every cluster of every region.
    pub fn is_broadcast(&self) -> bool {
        self.region == Some(b"*") && self.cluster == Some(b"*")
    }

    /// Whether the prefix selects `region`/`cluster` (`*` matches any).
    pub fn selects(&self, region: &[u8], cluster: &[u8]) -> bool {
        let matches = |pattern: Option<&[u8]>, name: &[u8]| match pattern {
            None => true,
            Some(b"*") => true,
            Some(p) => p == name,
        };
        matches(self.region, region) && matches(self.cluster, cluster)
    }
}

/// The bytes of `key` that choose its server: all of it, or what precedes the first `|#|`.
/// Always inlined: a placement's per-key loop called it otherwise.
#[inline(always)]
pub fn hash_part(key: &[u8]) -> &[u8] {
    // Only a `|` makes the bytes after it worth a look, and `|`s are found eight bytes at a
    // time (comparing every 3-byte window as a slice called memcmp per window, which cost a
    // sixth of a jump placement). Most keys hold no `|` at all, which a look at each of their
    // words settles without finding where (#29's local multiget, third round: 36 → 30
    // instructions a key of 12–13 bytes).
    if key.len() >= 8 && !has_bar(key) {
        return key;
    }
    let mut from = 0;
    while let Some(at) = find_bar(key, from) {
        if key[at..].starts_with(HASH_STOP) {
            return &key[..at];
        }
        from = at + 1;
    }
    key
}

/// The 8 bytes of `key` at `at`, as a little-endian word.
#[inline(always)]
fn word_at(key: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(key[at..at + 8].try_into().expect("8 bytes"))
}

/// Whether `key` (of 8 bytes or more) holds a `|`: its whole words, and the word that ends
/// where it ends (which covers the bytes after the last whole one).
#[inline]
fn has_bar(key: &[u8]) -> bool {
    let mut bars = bar_bytes(word_at(key, key.len() - 8));
    let mut at = 0;
    while at + 8 < key.len() {
        bars |= bar_bytes(word_at(key, at));
        at += 8;
    }
    bars != 0
}

/// Where the first `|` (the hash stop's first byte) at or after `from` is in `key`.
#[inline]
fn find_bar(key: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while at + 8 <= key.len() {
        let bars = bar_bytes(word_at(key, at));
        if bars != 0 {
            return Some(at + bars.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    if at < key.len() && key.len() >= 8 {
        // The rest as one word ending where the key ends (a 12-byte key's last 4 bytes cost a
        // step, not 4): its bytes before `at` were looked at already, and are masked off.
        let start = key.len() - 8;
        let bars = bar_bytes(word_at(key, start)) & (u64::MAX << (8 * (at - start)));
        return (bars != 0).then(|| start + bars.trailing_zeros() as usize / 8);
    }
    key[at..].iter().position(|&b| b == b'|').map(|p| at + p)
}

/// The top bit of each byte of `word` that is a `|`, and no other bit: exact per byte (no
/// borrow runs from one byte into the next), so that bytes can be masked off.
#[inline]
fn bar_bytes(word: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let x = word ^ (0x0101_0101_0101_0101 * u64::from(b'|'));
    // A byte's top bit ends up clear exactly when the byte of `x` is zero.
    !(((x & LOW7) + LOW7) | x | LOW7)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_part_ends_at_the_first_hash_stop() {
        let naive = |key: &[u8]| key.windows(3).position(|w| w == HASH_STOP).map_or(key.len(), |p| p);
        let bytes = [b'a', b'|', b'#', b'\xff'];
        for len in 0..=19usize {
            // Every key of `len` bytes over `bytes`, sampled (4^len keys in all).
            for seed in 0..4u64.pow(len.min(7) as u32) {
                let key: Vec<u8> = (0..len).map(|i| bytes[((seed >> (2 * (i % 7))) & 3) as usize]).collect();
                assert_eq!(hash_part(&key).len(), naive(&key), "{:?}", String::from_utf8_lossy(&key));
            }
        }
        assert_eq!(hash_part(b"user:1|#|x|#|y"), b"user:1");
        assert_eq!(hash_part(b"||#|"), b"|");
    }

    #[test]
    fn finds_the_stop_at_every_place_of_longer_keys() {
        // A lone `|` before or after the stop, at every place, in keys of bytes one bit from
        // `|` (`}`, which a borrowing zero-byte test flags above a real one) or far from it.
        let naive = |key: &[u8]| key.windows(3).position(|w| w == HASH_STOP).map_or(key.len(), |p| p);
        for fill in [b'}', b'k'] {
            for len in 3..=40usize {
                for stop in 0..=len - 3 {
                    for bar in 0..len {
                        let mut key = vec![fill; len];
                        key[bar] = b'|';
                        key[stop..stop + 3].copy_from_slice(HASH_STOP);
                        assert_eq!(hash_part(&key).len(), naive(&key), "{:?}", String::from_utf8_lossy(&key));
                        key[stop + 1] = fill; // no stop: only bars
                        assert_eq!(hash_part(&key).len(), naive(&key), "{:?}", String::from_utf8_lossy(&key));
                    }
                }
            }
        }
    }

    #[test]
    fn splits_routing_prefixes() {
        let r = Routed::parse(b"/east/web/user:1");
        assert_eq!((r.region, r.cluster, r.key), (Some(&b"east"[..]), Some(&b"web"[..]), &b"user:1"[..]));
        assert!(!r.is_broadcast());
        assert!(r.selects(b"east", b"web") && !r.selects(b"west", b"web"));
        let b = Routed::parse(b"/*/*/user:1");
        assert!(b.is_broadcast() && b.selects(b"west", b"any"));
        for plain in [&b"user:1"[..], b"/a", b"/a/b", b"/a/b/", b"//b/k", b"/a//k"] {
            let r = Routed::parse(plain);
            assert_eq!((r.region, r.key), (None, plain), "{:?}", String::from_utf8_lossy(plain));
        }
    }

    #[test]
    fn hashes_only_before_the_stop() {
        assert_eq!(hash_part(b"user:1|#|profile"), b"user:1");
        assert_eq!(hash_part(b"user:1|#|a|#|b"), b"user:1");
        assert_eq!(hash_part(b"|#|x"), b"");
        assert_eq!(hash_part(b"user:1"), b"user:1");
        assert_eq!(hash_part(b"a|#"), b"a|#");
    }
}
