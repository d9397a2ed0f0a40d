//! pymemcache's `HashClient` with its default hasher: `RendezvousHash` over `murmur3_32`
//! (`pymemcache/client/rendezvous.py`, `murmur3.py`, `hash.py`, pymemcache 4.x).
//!
//! A server is named `host:port` (`HashClient._make_client_key`, after `normalize_server_spec`
//! strips an IPv6 address's brackets), a key scores `murmur3_32("<name>-<key>", seed 0)` on
//! each server, and the highest score wins; on a tie the greater name wins.

use crate::hashing::Ring;
use crate::server::Server;

/// Rendezvous hashing over murmur3 as pymemcache's `RendezvousHash` does it.
#[derive(Debug)]
pub(crate) struct PymemcacheRing {
    names: Vec<String>,
}

impl PymemcacheRing {
    /// The ring over `servers` named as pymemcache names them. Weights are ignored: pymemcache
    /// has none.
    pub(crate) fn new(servers: &[Server]) -> PymemcacheRing {
        // A unix socket is named by its path (`normalize_server_spec` keeps it as a string).
        let name = |s: &Server| if s.port == 0 { s.host.clone() } else { format!("{}:{}", s.host, s.port) };
        PymemcacheRing { names: servers.iter().map(name).collect() }
    }
}

impl Ring for PymemcacheRing {
    fn owner(&self, hash_key: &[u8]) -> usize {
        let mut best: Option<(usize, u32)> = None;
        for (i, name) in self.names.iter().enumerate() {
            let score = murmur3_32(&python_text(&[name.as_bytes(), b"-", hash_key].concat()), 0);
            best = match best {
                Some((_, high)) if score < high => best,
                Some((winner, high)) if score == high && self.names[winner] >= *name => Some((winner, high)),
                _ => Some((i, score)),
            };
        }
        best.map_or(0, |(i, _)| i)
    }
}

/// What pymemcache's pure-Python `murmur3_32` reads of a `str`: one byte per character, its
/// code point's low eight bits (`ord(c) & 0xFF`). ASCII keys are their own bytes; bytes that
/// are not UTF-8 are taken as they are.
fn python_text(text: &[u8]) -> Vec<u8> {
    match std::str::from_utf8(text) {
        Ok(s) if !s.is_ascii() => s.chars().map(|c| (u32::from(c) & 0xff) as u8).collect(),
        _ => text.to_vec(),
    }
}

/// MurmurHash3's x86 32-bit function (Austin Appleby, public domain).
pub fn murmur3_32(data: &[u8], seed: u32) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mix = |k: u32| k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
    let mut h = seed;
    let blocks = data.chunks_exact(4);
    let tail = blocks.remainder();
    for block in blocks {
        h ^= mix(u32::from_le_bytes([block[0], block[1], block[2], block[3]]));
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    if !tail.is_empty() {
        let k = tail.iter().rev().fold(0u32, |k, &b| (k << 8) | u32::from(b));
        h ^= mix(k);
    }
    h ^= data.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Vectors from pymemcache's own tests: pymemcache/test/test_rendezvous.py (4.x).
    #[test]
    fn murmur3_matches_pymemcache() {
        assert_eq!(murmur3_32(b"6666", 0), 1_361_238_019);
        assert_eq!(murmur3_32(b"6666", 10), 2_981_722_772);
    }

    #[test]
    fn rendezvous_matches_pymemcache() {
        let ring = |names: &[&str]| PymemcacheRing { names: names.iter().map(|n| n.to_string()).collect() };
        let name = |ring: &PymemcacheRing, key: &str| ring.names[ring.owner(key.as_bytes())].clone();
        let three = ring(&["0", "1", "2"]);
        for (key, node) in [("ok", "0"), ("mykey", "1"), ("wat", "2"), ("lol", "2")] {
            assert_eq!(name(&three, key), node, "{key}");
        }
        let removed = ring(&["0", "2"]);
        for (key, node) in [("ok", "0"), ("mykey", "0"), ("wat", "2")] {
            assert_eq!(name(&removed, key), node, "{key}");
        }
        let added = ring(&["0", "1", "2", "3"]);
        for (key, node) in [("ok", "0"), ("mykey", "1"), ("wat", "2"), ("lol", "3")] {
            assert_eq!(name(&added, key), node, "{key}");
        }
    }

    #[test]
    fn non_ascii_text_hashes_by_code_point() {
        assert_eq!(python_text("é".as_bytes()), vec![0xe9]);
        assert_eq!(python_text(b"plain"), b"plain".to_vec());
        assert_eq!(python_text(&[0xff, 0x41]), vec![0xff, 0x41]);
    }
}
