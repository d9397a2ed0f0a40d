//! Small tools: randomness, checksums, self-checking values.

use super::*;

/// SplitMix64: small, fast, good enough for choosing keys and lengths.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        fmix(self.0)
    }

    /// Uniform in `0..n` (n > 0), near enough.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }

    pub fn range(&mut self, lo: usize, hi_inclusive: usize) -> usize {
        lo + self.below((hi_inclusive - lo + 1) as u64) as usize
    }

    pub fn percent(&mut self) -> u64 {
        self.below(100)
    }
}

pub fn fmix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

pub fn fresh_seed() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
    fmix(nanos ^ (std::process::id() as u64) << 40 ^ COUNTER.fetch_add(1, Ordering::Relaxed) << 20)
}

/// A 64-bit checksum of a key and a payload (independent of the region's own hash).
pub fn checksum(key: &[u8], payload: &[u8]) -> u64 {
    let mut h = 0x243f_6a88_85a3_08d3 ^ ((key.len() as u64) << 32 | payload.len() as u64);
    for part in [key, payload] {
        let mut words = part.chunks_exact(8);
        for w in &mut words {
            h = fmix(h.rotate_left(7) ^ u64::from_le_bytes(w.try_into().unwrap()));
        }
        let rest = words.remainder();
        let mut b = [0u8; 8];
        b[..rest.len()].copy_from_slice(rest);
        h = fmix(h.rotate_left(7) ^ u64::from_le_bytes(b) ^ (rest.len() as u64) << 60);
    }
    h
}

pub const RECORD_OVERHEAD: usize = 2 + 8;

/// Appends one record with `payload_len` random payload bytes; returns its checksum.
pub fn push_record(out: &mut Vec<u8>, key: &[u8], payload_len: usize, rng: &mut Rng) -> u64 {
    out.extend_from_slice(&(payload_len as u16).to_le_bytes());
    let start = out.len();
    while out.len() < start + payload_len {
        let n = (start + payload_len - out.len()).min(8);
        out.extend_from_slice(&rng.next().to_le_bytes()[..n]);
    }
    let sum = checksum(key, &out[start..]);
    out.extend_from_slice(&sum.to_le_bytes());
    sum
}

/// A self-checking value of `total` bytes (at least [`RECORD_OVERHEAD`]) and its flags.
pub fn record_value(key: &[u8], total: usize, rng: &mut Rng) -> (Vec<u8>, u32) {
    let mut v = Vec::with_capacity(total);
    let sum = push_record(&mut v, key, total.max(RECORD_OVERHEAD) - RECORD_OVERHEAD, rng);
    (v, sum as u32)
}

/// Checks a value found under a record key; returns the number of records.
pub fn check_record_value(key: &[u8], value: &[u8], flags: u32) -> Result<usize, String> {
    let mut at = 0;
    let mut first = None;
    let mut n = 0;
    while at < value.len() {
        if value.len() - at < RECORD_OVERHEAD {
            return Err(format!("truncated record at {at} of {}", value.len()));
        }
        let len = u16::from_le_bytes([value[at], value[at + 1]]) as usize;
        if at + RECORD_OVERHEAD + len > value.len() {
            return Err(format!("record at {at} of length {len} overruns the value ({})", value.len()));
        }
        let payload = &value[at + 2..at + 2 + len];
        let sum = u64::from_le_bytes(value[at + 2 + len..at + RECORD_OVERHEAD + len].try_into().unwrap());
        if checksum(key, payload) != sum {
            return Err(format!("record {n} at {at} (length {len}) fails its checksum"));
        }
        first.get_or_insert(sum);
        at += RECORD_OVERHEAD + len;
        n += 1;
    }
    match first {
        None => Err("empty value".into()),
        Some(sum) if sum as u32 != flags => {
            Err(format!("flags {flags:#x} do not match the first record ({:#x})", sum as u32))
        }
        Some(_) => Ok(n),
    }
}

/// Checks a value found under a counter key: digits, then only spaces, fitting 64 bits.
pub fn check_counter_value(value: &[u8], flags: u32) -> Result<u64, String> {
    let digits = value.iter().position(|&b| b == b' ').unwrap_or(value.len());
    let text = std::str::from_utf8(&value[..digits]).map_err(|_| format!("counter not UTF-8: {value:?}"))?;
    if flags != COUNTER_FLAGS {
        return Err(format!("counter flags {flags:#x}"));
    }
    if digits == 0 || value[digits..].iter().any(|&b| b != b' ') || !text.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(format!("counter value {:?}", String::from_utf8_lossy(value)));
    }
    text.parse().map_err(|_| format!("counter value {text:?} does not fit 64 bits"))
}

/// Checks any value found under `key` (a record key or a counter key).
pub fn check_value(key: &[u8], value: &[u8], flags: u32) -> Result<(), String> {
    if key.starts_with(b"c:") {
        check_counter_value(value, flags).map(drop)
    } else {
        check_record_value(key, value, flags).map(drop)
    }
}

pub fn record_key(i: usize) -> Vec<u8> {
    format!("r:{i}").into_bytes()
}

pub fn counter_key(i: usize) -> Vec<u8> {
    format!("c:{i}").into_bytes()
}

pub fn all_churn_keys() -> Vec<Vec<u8>> {
    (0..RECORD_KEYS).map(record_key).chain((0..COUNTER_KEYS).map(counter_key)).collect()
}

pub fn unix_now() -> u32 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as u32
}
