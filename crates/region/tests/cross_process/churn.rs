//! Counting what lookups find, and the churning writer (used in-process by the stress test and
//! in `churn` children).

use super::*;

/// What a series of lookups found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub hits: u64,
    pub misses: u64,
    pub expired: u64,
    pub flushed: u64,
    pub busy: u64,
    pub bad: u64,
}

impl Counts {
    pub fn lookups(&self) -> u64 {
        self.hits + self.misses + self.expired + self.flushed + self.busy + self.bad
    }

    /// Counts one lookup of `key`; a hit is checked. Returns an error text for a bad read.
    pub fn record(&mut self, key: &[u8], result: Result<Lookup, OpError>, value: &[u8]) -> Option<String> {
        match result {
            Ok(Lookup::Hit(info)) => {
                let check = if info.value_len != value.len() {
                    Err(format!("info says {} bytes, {} copied", info.value_len, value.len()))
                } else {
                    check_value(key, value, info.flags)
                };
                match check {
                    Ok(()) => self.hits += 1,
                    Err(e) => {
                        self.bad += 1;
                        return Some(format!("bad read of {}: {e}", String::from_utf8_lossy(key)));
                    }
                }
            }
            Ok(Lookup::Missing) => self.misses += 1,
            Ok(Lookup::Expired) => self.expired += 1,
            Ok(Lookup::Flushed) => self.flushed += 1,
            Err(OpError::Busy) => self.busy += 1,
            Err(e) => {
                self.bad += 1;
                return Some(format!("lookup of {} failed: {e}", String::from_utf8_lossy(key)));
            }
        }
        None
    }

    pub fn line(&self) -> String {
        format!(
            "hits={} misses={} expired={} flushed={} busy={} bad={}",
            self.hits, self.misses, self.expired, self.flushed, self.busy, self.bad
        )
    }

    pub fn parse(line: &str) -> Counts {
        let mut c = Counts::default();
        for field in line.split_whitespace() {
            let Some((name, value)) = field.split_once('=') else { continue };
            let Ok(n) = value.parse() else { continue };
            match name {
                "hits" => c.hits = n,
                "misses" => c.misses = n,
                "expired" => c.expired = n,
                "flushed" => c.flushed = n,
                "busy" => c.busy = n,
                "bad" => c.bad = n,
                _ => {}
            }
        }
        c
    }
}

/// Looks up every key in `keys` with `get` and checks every hit; prints the first bad reads.
pub fn verify_keys(
    keys: &[Vec<u8>],
    mut get: impl FnMut(&[u8], &mut Vec<u8>) -> Result<Lookup, OpError>,
) -> Counts {
    let mut counts = Counts::default();
    let mut value = Vec::new();
    for key in keys {
        let result = get(key, &mut value);
        if let Some(e) = counts.record(key, result, &value) {
            if counts.bad <= 5 {
                eprintln!("{e}");
            }
        }
    }
    counts
}

/// What one lookup found, with the value of a hit.
pub type Seen = Result<(Lookup, Vec<u8>), OpError>;

/// Like [`verify_keys`], also returning what each key's lookup found.
pub fn snapshot(
    keys: &[Vec<u8>],
    mut get: impl FnMut(&[u8], &mut Vec<u8>) -> Result<Lookup, OpError>,
) -> (Counts, std::collections::HashMap<Vec<u8>, Seen>) {
    let mut seen = std::collections::HashMap::new();
    let counts = verify_keys(keys, |k, v| {
        let result = get(k, v);
        let value = if matches!(result, Ok(Lookup::Hit(_))) { v.clone() } else { Vec::new() };
        seen.insert(k.to_vec(), result.clone().map(|l| (l, value)));
        result
    });
    (counts, seen)
}

// ---------------------------------------------------------------------------------------------
// The churning writer (used in-process by the stress test and in `churn` children)

/// What a churning writer thread did.
#[derive(Debug, Default)]
pub struct ChurnCounts {
    pub ops: u64,
    pub stored: u64,
    pub deleted: u64,
    pub too_large: u64,
    /// Changes that gave up on a bucket the other writer thread held past the readers'
    /// patience (preempted, on an oversubscribed machine): rare, not impossible.
    pub busy: u64,
    pub errors: u64,
    /// Lookups done by the writer itself, each hit checked.
    pub gets: Counts,
}

/// Runs a random mix of operations over the churn key space until `stop` or `deadline`.
/// `ticker` publishes the clock once a second. `abort_on_bad` ends the process at the first
/// bad read (a child cannot report otherwise before the parent kills it).
pub fn churn(
    w: &Writer,
    seed: u64,
    stop: &AtomicBool,
    deadline: Instant,
    ticker: bool,
    abort_on_bad: bool,
) -> ChurnCounts {
    let mut rng = Rng::new(seed);
    let mut c = ChurnCounts::default();
    let mut buf = Vec::new();
    let mut last_tick = Instant::now();
    let exptime = |rng: &mut Rng| -> i64 {
        match rng.percent() {
            0..=79 => 0,
            80..=84 => 2,
            85..=89 => 10,
            90..=94 => 30,
            _ => 600,
        }
    };
    while !stop.load(Ordering::Relaxed) {
        c.ops += 1;
        if c.ops.is_multiple_of(256) {
            if Instant::now() >= deadline {
                break;
            }
            if ticker && last_tick.elapsed() >= Duration::from_secs(1) {
                w.tick(unix_now().max(w.clock()));
                last_tick = Instant::now();
            }
        }
        let counter = rng.below(10) == 0;
        let key = if counter {
            counter_key(rng.below(COUNTER_KEYS as u64) as usize)
        } else {
            record_key(rng.below(RECORD_KEYS as u64) as usize)
        };
        let op = rng.percent();
        let result: Result<(), OpError> = (|| {
            if counter {
                match op {
                    0..=59 => match w.incr(&key, rng.below(1000))? {
                        Delta::NotFound => {
                            w.add(&key, b"0", COUNTER_FLAGS, exptime(&mut rng))?;
                        }
                        Delta::NonNumeric => {
                            c.gets.bad += 1;
                            eprintln!("incr of {}: non-numeric counter", String::from_utf8_lossy(&key));
                        }
                        Delta::Value(_) => c.stored += 1,
                    },
                    60..=74 => {
                        w.decr(&key, rng.below(5000))?;
                    }
                    75..=84 => {
                        let n = rng.next() >> rng.below(64);
                        w.set(&key, n.to_string().as_bytes(), COUNTER_FLAGS, exptime(&mut rng))?;
                        c.stored += 1;
                    }
                    85..=92 => c.deleted += w.delete(&key)? as u64,
                    _ => {
                        let r = w.get(&key, &mut buf);
                        if let Some(e) = c.gets.record(&key, r, &buf) {
                            eprintln!("writer {e}");
                        }
                    }
                }
                return Ok(());
            }
            match op {
                0..=49 => {
                    let (v, flags) = record_value(&key, rng.range(RECORD_OVERHEAD, 2000), &mut rng);
                    w.set(&key, &v, flags, exptime(&mut rng))?;
                    c.stored += 1;
                }
                50..=64 => {
                    let mut v = Vec::new();
                    push_record(&mut v, &key, rng.range(0, 300), &mut rng);
                    if w.append(&key, &v)? == Store::Stored {
                        c.stored += 1;
                    }
                }
                65..=74 => c.deleted += w.delete(&key)? as u64,
                75..=82 => {
                    let e = if rng.below(20) == 0 { -1 } else { exptime(&mut rng) };
                    w.touch(&key, e)?;
                }
                83..=87 => {
                    let (v, flags) = record_value(&key, rng.range(RECORD_OVERHEAD, 2000), &mut rng);
                    if w.add(&key, &v, flags, exptime(&mut rng))? == Store::Stored {
                        c.stored += 1;
                    }
                }
                88..=92 => {
                    let r = w.get(&key, &mut buf);
                    if let Some(e) = c.gets.record(&key, r.clone(), &buf) {
                        eprintln!("writer {e}");
                    }
                    if let Ok(Lookup::Hit(info)) = r {
                        let (v, flags) = record_value(&key, rng.range(RECORD_OVERHEAD, 2000), &mut rng);
                        if w.cas(&key, &v, flags, exptime(&mut rng), info.cas)? == Store::Stored {
                            c.stored += 1;
                        }
                    }
                }
                _ => {
                    let r = w.get(&key, &mut buf);
                    if let Some(e) = c.gets.record(&key, r, &buf) {
                        eprintln!("writer {e}");
                    }
                }
            }
            Ok(())
        })();
        match result {
            Ok(()) => {}
            Err(OpError::ValueTooLarge { .. }) => c.too_large += 1,
            Err(OpError::Busy) => c.busy += 1,
            Err(e) => {
                c.errors += 1;
                if c.errors <= 5 {
                    eprintln!("writer: {} failed: {e}", String::from_utf8_lossy(&key));
                }
            }
        }
        if abort_on_bad && c.gets.bad > 0 {
            eprintln!("churn writer saw a bad value: aborting");
            std::process::abort();
        }
    }
    c
}

/// Asserts that `r` and `w` answer every one of `keys` alike, hit values included.
pub fn assert_reader_agrees(w: &Writer, r: &Reader, keys: &[Vec<u8>], context: &str) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for key in keys {
        let by_reader = r.get(key, &mut a).unwrap().settled();
        let by_writer = w.get(key, &mut b).unwrap().settled();
        let key = String::from_utf8_lossy(key);
        assert_eq!(by_reader, by_writer, "{context}: reader and writer disagree on {key}");
        if by_reader.hit().is_some() {
            assert_eq!(a, b, "{context}: {key}");
        }
    }
}
