//! Bob Jenkins's SpookyHash V2 (public domain), as folly's `SpookyHashV2` computes it on
//! little-endian machines: mcrouter's `WeightedCh3` draws its weight test from `Hash32`.
//!
//! Messages under 192 bytes take the short path (four lanes, 32 bytes a round); longer ones
//! mix twelve lanes over 96-byte blocks and a zero-padded last block ending in its length.

/// `sc_const`: the lanes' start value that no seed supplies.
const SC_CONST: u64 = 0xdead_beef_dead_beef;
/// `sc_numVars`: lanes of the long path.
const NUM_VARS: usize = 12;
/// `sc_blockSize`: bytes of one long-path block.
const BLOCK: usize = NUM_VARS * 8;
/// `sc_bufSize`: messages from this length take the long path.
const SHORT_LIMIT: usize = 2 * BLOCK;
/// `Mix`'s rotation of each lane.
const MIX_ROT: [u32; NUM_VARS] = [11, 32, 43, 31, 17, 28, 39, 57, 55, 54, 22, 46];
/// `EndPartial`'s rotation at each step.
const END_ROT: [u32; NUM_VARS] = [44, 15, 34, 21, 38, 33, 10, 13, 38, 53, 42, 54];

/// SpookyHash V2's 32-bit hash of `message` with `seed` (`SpookyHashV2::Hash32`).
pub fn hash32(message: &[u8], seed: u32) -> u32 {
    hash128(message, u64::from(seed), u64::from(seed)).0 as u32
}

/// SpookyHash V2's 128-bit hash of `message` from the seeds `(seed1, seed2)`.
pub fn hash128(message: &[u8], seed1: u64, seed2: u64) -> (u64, u64) {
    if message.len() < SHORT_LIMIT {
        return short(message, seed1, seed2);
    }
    let mut h = [0u64; NUM_VARS];
    for (i, lane) in h.iter_mut().enumerate() {
        *lane = [seed1, seed2, SC_CONST][i % 3];
    }
    let blocks = message.chunks_exact(BLOCK);
    let tail = blocks.remainder();
    for block in blocks {
        mix(&words(block), &mut h);
    }
    let mut last = [0u8; BLOCK];
    last[..tail.len()].copy_from_slice(tail);
    last[BLOCK - 1] = tail.len() as u8;
    for (lane, word) in h.iter_mut().zip(words(&last)) {
        *lane = lane.wrapping_add(word);
    }
    for _ in 0..3 {
        end_partial(&mut h);
    }
    (h[0], h[1])
}

/// A 96-byte block as twelve little-endian words.
fn words(block: &[u8]) -> [u64; NUM_VARS] {
    let mut out = [0u64; NUM_VARS];
    for (word, bytes) in out.iter_mut().zip(block.chunks_exact(8)) {
        *word = le(bytes);
    }
    out
}

/// Up to eight bytes as a little-endian number.
fn le(bytes: &[u8]) -> u64 {
    bytes.iter().rev().fold(0, |v, &b| (v << 8) | u64::from(b))
}

/// `Mix`: one block into the twelve lanes.
fn mix(data: &[u64; NUM_VARS], s: &mut [u64; NUM_VARS]) {
    for i in 0..NUM_VARS {
        let (next, prev, far) = ((i + 1) % NUM_VARS, (i + 11) % NUM_VARS, (i + 2) % NUM_VARS);
        s[i] = s[i].wrapping_add(data[i]);
        s[far] ^= s[(i + 10) % NUM_VARS];
        s[prev] ^= s[i];
        s[i] = s[i].rotate_left(MIX_ROT[i]);
        s[prev] = s[prev].wrapping_add(s[next]);
    }
}

/// `EndPartial`: one round of the final mixing.
fn end_partial(h: &mut [u64; NUM_VARS]) {
    for (i, &rot) in END_ROT.iter().enumerate() {
        let (next, prev, far) = ((i + 1) % NUM_VARS, (i + 11) % NUM_VARS, (i + 2) % NUM_VARS);
        h[prev] = h[prev].wrapping_add(h[next]);
        h[far] ^= h[prev];
        h[next] = h[next].rotate_left(rot);
    }
}

/// `ShortMix`'s rotations, two rounds of (h2, h3, h0, h1).
const SHORT_MIX_ROT: [u32; 12] = [50, 52, 30, 41, 54, 48, 38, 37, 62, 34, 5, 36];
/// `ShortEnd`'s rotations.
const SHORT_END_ROT: [u32; 11] = [15, 52, 26, 51, 28, 9, 47, 54, 32, 25, 63];

/// `ShortMix` over lanes `[h0, h1, h2, h3]`: step `k` rotates lane `(k + 2) % 4`, adds the
/// next lane to it, and xors it into the lane two on.
fn short_mix(h: &mut [u64; 4]) {
    for (k, &rot) in SHORT_MIX_ROT.iter().enumerate() {
        let (x, y, z) = ((k + 2) % 4, (k + 3) % 4, k % 4);
        h[x] = h[x].rotate_left(rot).wrapping_add(h[y]);
        h[z] ^= h[x];
    }
}

/// `ShortEnd` over lanes `[h0, h1, h2, h3]`: step `k` xors lane `(k + 2) % 4` into the lane
/// after it, rotates it, and adds it back.
fn short_end(h: &mut [u64; 4]) {
    for (k, &rot) in SHORT_END_ROT.iter().enumerate() {
        let (x, y) = ((k + 2) % 4, (k + 3) % 4);
        h[y] ^= h[x];
        h[x] = h[x].rotate_left(rot);
        h[y] = h[y].wrapping_add(h[x]);
    }
}

/// `Short`: messages under 192 bytes.
fn short(message: &[u8], seed1: u64, seed2: u64) -> (u64, u64) {
    let mut h = [seed1, seed2, SC_CONST, SC_CONST];
    let mut rest = message;
    if message.len() > 15 {
        while rest.len() >= 32 {
            h[2] = h[2].wrapping_add(le(&rest[0..8]));
            h[3] = h[3].wrapping_add(le(&rest[8..16]));
            short_mix(&mut h);
            h[0] = h[0].wrapping_add(le(&rest[16..24]));
            h[1] = h[1].wrapping_add(le(&rest[24..32]));
            rest = &rest[32..];
        }
        if rest.len() >= 16 {
            h[2] = h[2].wrapping_add(le(&rest[0..8]));
            h[3] = h[3].wrapping_add(le(&rest[8..16]));
            short_mix(&mut h);
            rest = &rest[16..];
        }
    }
    h[3] = h[3].wrapping_add((message.len() as u64) << 56);
    if rest.is_empty() {
        h[2] = h[2].wrapping_add(SC_CONST);
        h[3] = h[3].wrapping_add(SC_CONST);
    } else {
        // The last 1..15 bytes: the first eight into h2, the rest into h3, little-endian.
        h[2] = h[2].wrapping_add(le(&rest[..rest.len().min(8)]));
        h[3] = h[3].wrapping_add(le(&rest[rest.len().min(8)..]));
    }
    short_end(&mut h);
    (h[0], h[1])
}
