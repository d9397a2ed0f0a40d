//! mcrouter's `Ch3`: `furc_hash` over MurmurHash64A (`mcrouter/lib/fbi/hash.c`,
//! `mcrouter/lib/Ch3HashFunc.h`).
//!
//! Bits come from a chain of 64-bit hashes: the first is MurmurHash64A of the key with seed
//! 4193360111, each next one a rehash of the one before; bit `i` is bit `i % 64` of hash
//! `i / 64`. From the pool size's bit width `d` down, the first set bit picks a width, then
//! `d - 1` bits 23 apart make a candidate, kept if it is below the pool size; 32 tries, then 0.

use crate::hashing::Ring;

/// `SEED` of `hash.c`.
const SEED: u32 = 4_193_360_111;
/// `MAX_TRIES` of `hash.c`.
const MAX_TRIES: u32 = 32;
/// `FURC_SHIFT` of `hash.c`: the stride between bits of one candidate.
const FURC_SHIFT: u32 = 23;
/// MurmurHash64A's multiplier.
const M: u64 = 0xc6a4_a793_5bd1_e995;

/// `furc_maximum_pool_size()`: the largest pool `Ch3` places keys on.
pub const MAX_POOL: usize = 1 << FURC_SHIFT;

/// Austin Appleby's MurmurHash64A, reading 8-byte blocks little-endian as mcrouter does on
/// x86-64.
pub fn murmur_hash_64a(key: &[u8], seed: u32) -> u64 {
    let mut h = u64::from(seed) ^ (key.len() as u64).wrapping_mul(M);
    let blocks = key.chunks_exact(8);
    let tail = blocks.remainder();
    for block in blocks {
        let mut k = u64::from_le_bytes(block.try_into().expect("8-byte block"));
        k = k.wrapping_mul(M);
        k ^= k >> 47;
        h = (h ^ k.wrapping_mul(M)).wrapping_mul(M);
    }
    if !tail.is_empty() {
        h ^= tail.iter().rev().fold(0u64, |k, &b| (k << 8) | u64::from(b));
        h = h.wrapping_mul(M);
    }
    h ^= h >> 47;
    h = h.wrapping_mul(M);
    h ^ (h >> 47)
}

/// `murmur_rehash_64A`: MurmurHash64A of one 8-byte word, seed `SEED`.
fn rehash(k: u64) -> u64 {
    murmur_hash_64a(&k.to_le_bytes(), SEED)
}

/// The bits `furc_hash` draws, hashed lazily.
struct Bits<'a> {
    key: &'a [u8],
    hashes: Vec<u64>,
}

impl Bits<'_> {
    fn get(&mut self, idx: u32) -> bool {
        let ord = (idx >> 6) as usize;
        while self.hashes.len() <= ord {
            let next = match self.hashes.last() {
                None => murmur_hash_64a(self.key, SEED),
                Some(&h) => rehash(h),
            };
            self.hashes.push(next);
        }
        (self.hashes[ord] >> (idx & 0x3f)) & 1 == 1
    }
}

/// mcrouter's `furc_hash(key, len, m)`: the bucket in `0..m` of `key` (0 when `m <= 1`).
pub fn furc_hash(key: &[u8], m: u32) -> u32 {
    if m <= 1 {
        return 0;
    }
    let mut bits = Bits { key, hashes: Vec::new() };
    let mut d = 32 - (m - 1).leading_zeros();
    let mut a = d;
    for _ in 0..MAX_TRIES {
        while !bits.get(a) {
            d -= 1;
            if d == 0 {
                return 0;
            }
            a = d;
        }
        a += FURC_SHIFT;
        let mut num: u32 = 1;
        for _ in 0..d - 1 {
            num = (num << 1) | u32::from(bits.get(a));
            a += FURC_SHIFT;
        }
        if num < m {
            return num;
        }
    }
    0
}

/// mcrouter's `Ch3HashFunc` over a pool of `servers` (at most [`MAX_POOL`]).
#[derive(Debug)]
pub(crate) struct Ch3Ring {
    pub(crate) servers: u32,
}

impl Ring for Ch3Ring {
    fn owner(&self, hash_key: &[u8]) -> usize {
        furc_hash(hash_key, self.servers) as usize
    }
}

/// `kHashSeed` of mcrouter's `WeightedCh3HashFunc::hash`.
const WEIGHTED_SEED: u32 = 0xface_2014;
/// `kNumTries` of mcrouter's `WeightedChHashFuncBase`.
const WEIGHTED_TRIES: u32 = 32;

/// mcrouter's `WeightedCh3HashFunc::hash` (`mcrouter/lib/WeightedCh3HashFunc.cpp`): the Ch3
/// bucket of `key` is kept when SpookyHash V2 `Hash32(key, 0xface2014)` is below the bucket's
/// weight (in [0, 1]) times `u32::MAX`; otherwise the key is salted with a counter's decimal
/// digits, lowest first, and hashed again, 32 times at most, the last bucket winning.
pub fn weighted_ch3(key: &[u8], weights: &[f64]) -> u32 {
    let n = weights.len() as u32;
    let mut salted = key.to_vec();
    let mut index = 0;
    for salt in 0..WEIGHTED_TRIES {
        index = furc_hash(&salted, n);
        let p = u64::from(crate::spooky::hash32(&salted, WEIGHTED_SEED));
        let w = (weights[index as usize] * f64::from(u32::MAX)) as u64;
        if p < w {
            return index;
        }
        salted.truncate(key.len());
        let mut s = salt;
        loop {
            salted.push(b'0' + (s % 10) as u8);
            s /= 10;
            if s == 0 {
                break;
            }
        }
    }
    index
}

/// mcrouter's `WeightedCh3HashFunc` over servers weighted in (0, 1].
#[derive(Debug)]
pub(crate) struct WeightedCh3Ring {
    pub(crate) weights: Vec<f64>,
}

impl Ring for WeightedCh3Ring {
    fn owner(&self, hash_key: &[u8]) -> usize {
        weighted_ch3(hash_key, &self.weights) as usize
    }
}
