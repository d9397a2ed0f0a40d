//! Property tests: random sequences of operations run against a region [`Writer`] and against a
//! plain `HashMap` model with memcached's semantics, compared after every operation.
//!
//! The key space is small (8 keys of assorted shapes) so that operations collide. The server
//! clock is driven by `tick` only, so expiry is exact and deterministic. After every operation
//! every key is read through the writer and through a [`Reader`] mapped on the same file; both
//! must agree with each other and with the model (value, flags, expiry and CAS unique). Every
//! modification must produce a CAS unique never seen before in the run; every operation that
//! changes nothing (or only the expiry, as `touch` does in memcached) must keep it.

use proptest::prelude::*;
use shoal_region::expiry::RELATIVE_LIMIT;
use shoal_region::{Config, Delta, Lookup, Reader, Store, Writer};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

// ---------------------------------------------------------------------------------------------
// Region files

/// A region file under /dev/shm, removed on drop (also when a test fails).
struct ShmFile(String);

impl ShmFile {
    fn new(tag: &str) -> ShmFile {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = format!("/dev/shm/shoal-model-{tag}-{}-{n}", std::process::id());
        let _ = std::fs::remove_file(&path);
        ShmFile(path)
    }
}

impl Drop for ShmFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Big enough that nothing is ever evicted (22 segments): 8 keys have items in at most 8
/// segments, and the expiries used fall in 7 time classes, each with an open segment. (16 MiB
/// would be 14 segments: rarely, after restarts sealed every open segment, too few.)
fn config() -> Config {
    Config { region_bytes: 24 << 20, max_item_bytes: 1 << 20, avg_item_bytes: 128 }
}

/// The key space: few keys, of different lengths and bytes (the store accepts binary keys).
fn keys() -> Vec<Vec<u8>> {
    vec![
        b"a".to_vec(),
        b"key:1".to_vec(),
        b"counter".to_vec(),
        b"k\0\xff\x01".to_vec(),
        "ключ".as_bytes().to_vec(),
        vec![b'x'; 250],
        b"with space".to_vec(),
        b"z".to_vec(),
    ]
}
const KEYS: usize = 8;

// ---------------------------------------------------------------------------------------------
// Operations

/// An expiry time, resolved against the server clock when the operation runs.
#[derive(Clone, Copy, Debug)]
enum Exp {
    /// 0: never expires.
    Never,
    /// Negative: expired on arrival.
    Negative,
    /// Relative seconds (≤ 30 days).
    Relative(i64),
    /// Exactly 30 days: the largest relative time.
    ThirtyDays,
    /// 30 days and a second: an absolute Unix time in 1970, so expired on arrival.
    JustOverThirtyDays,
    /// An absolute Unix time this many seconds in the past.
    AbsolutePast(i64),
    /// An absolute Unix time this many seconds in the future.
    AbsoluteFuture(i64),
}

impl Exp {
    fn exptime(self, clock: u32) -> i64 {
        match self {
            Exp::Never => 0,
            Exp::Negative => -1,
            Exp::Relative(s) => s,
            Exp::ThirtyDays => RELATIVE_LIMIT,
            Exp::JustOverThirtyDays => RELATIVE_LIMIT + 1,
            Exp::AbsolutePast(s) => clock as i64 - s,
            Exp::AbsoluteFuture(s) => clock as i64 + s,
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Set(usize, Vec<u8>, u32, Exp),
    Add(usize, Vec<u8>, u32, Exp),
    Replace(usize, Vec<u8>, u32, Exp),
    Append(usize, Vec<u8>),
    Prepend(usize, Vec<u8>),
    /// `cas` with the CAS unique the store's `get` reports now.
    CasCurrent(usize, Vec<u8>, u32, Exp),
    /// `cas` with a CAS unique that is not the current one (current + this, non-zero).
    CasWrong(usize, Vec<u8>, u32, Exp, u64),
    Incr(usize, u64),
    Decr(usize, u64),
    Delete(usize),
    Touch(usize, Exp),
    Get(usize),
    /// `flush_all delay`.
    Flush(i64),
    /// Advance the server clock by this many seconds.
    Tick(u32),
    /// Detach the writer cleanly and attach a new one to the region (a server restart).
    Restart,
}

fn exp() -> impl Strategy<Value = Exp> {
    prop_oneof![
        4 => Just(Exp::Never),
        1 => Just(Exp::Negative),
        3 => prop::sample::select(vec![1i64, 2, 5]).prop_map(Exp::Relative),
        1 => Just(Exp::ThirtyDays),
        1 => Just(Exp::JustOverThirtyDays),
        1 => (1i64..1000).prop_map(Exp::AbsolutePast),
        1 => (1i64..6).prop_map(Exp::AbsoluteFuture),
    ]
}

/// Values: many decimal numbers (so `incr`/`decr` have work), padded numbers, overflowing
/// numbers, text, binary bytes, empty.
fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => (0u64..1000).prop_map(|n| n.to_string().into_bytes()),
        2 => any::<u64>().prop_map(|n| n.to_string().into_bytes()),
        1 => prop::sample::select(vec![
            "18446744073709551615",
            "18446744073709551614",
            "18446744073709551616",
            "99999999999999999999999",
            "00000000000000000007",
            "0",
            "-1",
            "1 2",
            " 1",
            "12 ",
            "1a",
            "",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        1 => (0u64..1000, 1usize..4).prop_map(|(n, pad)| format!("{n}{}", " ".repeat(pad)).into_bytes()),
        2 => "[a-z0-9 ]{0,12}".prop_map(String::into_bytes),
        2 => prop::collection::vec(any::<u8>(), 0..24),
    ]
}

fn delta() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..20,
        2 => 0u64..100_000,
        1 => any::<u64>(),
        1 => Just(u64::MAX),
    ]
}

fn flags() -> impl Strategy<Value = u32> {
    prop_oneof![Just(0u32), any::<u32>()]
}

fn op() -> impl Strategy<Value = Op> {
    let k = || 0..KEYS;
    prop_oneof![
        6 => (k(), value(), flags(), exp()).prop_map(|(k, v, f, e)| Op::Set(k, v, f, e)),
        3 => (k(), value(), flags(), exp()).prop_map(|(k, v, f, e)| Op::Add(k, v, f, e)),
        3 => (k(), value(), flags(), exp()).prop_map(|(k, v, f, e)| Op::Replace(k, v, f, e)),
        2 => (k(), value()).prop_map(|(k, v)| Op::Append(k, v)),
        2 => (k(), value()).prop_map(|(k, v)| Op::Prepend(k, v)),
        3 => (k(), value(), flags(), exp()).prop_map(|(k, v, f, e)| Op::CasCurrent(k, v, f, e)),
        2 => (k(), value(), flags(), exp(), 1u64..u64::MAX)
            .prop_map(|(k, v, f, e, off)| Op::CasWrong(k, v, f, e, off)),
        4 => (k(), delta()).prop_map(|(k, d)| Op::Incr(k, d)),
        4 => (k(), delta()).prop_map(|(k, d)| Op::Decr(k, d)),
        2 => k().prop_map(Op::Delete),
        2 => (k(), exp()).prop_map(|(k, e)| Op::Touch(k, e)),
        2 => k().prop_map(Op::Get),
        1 => prop_oneof![Just(0i64), Just(-1), 1i64..4].prop_map(Op::Flush),
        4 => prop_oneof![3 => 0u32..3, 1 => Just(10u32)].prop_map(Op::Tick),
        1 => Just(Op::Restart),
    ]
}

// ---------------------------------------------------------------------------------------------
// The model

#[derive(Clone, Debug)]
struct Item {
    value: Vec<u8>,
    flags: u32,
    /// Absolute expiry, 0 = never.
    expiry: u32,
    /// The CAS unique the store gave this version (learnt after each modification).
    cas: u64,
    /// Written before a flush that has taken effect.
    flushed: bool,
}

/// Every key the model knows, dead items included: the store keeps those in its index too
/// (until their segment is reclaimed), and reports them as `Expired`/`Flushed` meanwhile.
#[derive(Default)]
struct Model {
    items: HashMap<usize, Item>,
    clock: u32,
    /// Time a delayed flush takes effect.
    flush_at: Option<u32>,
}

/// memcached's expiry rule, written independently of the crate's: `None` = expired on arrival.
fn model_expiry(exptime: i64, now: u32) -> Option<u32> {
    let at = if exptime == 0 {
        return Some(0);
    } else if exptime < 0 {
        return None;
    } else if exptime <= 60 * 60 * 24 * 30 {
        now as i64 + exptime
    } else {
        exptime
    };
    (at > now as i64).then_some(at as u32)
}

/// memcached's counter parse as the store documents it: decimal digits, then only spaces.
/// memcached's `safe_strtoull`, restated: skip leading white space; the first token is an
/// optionally signed decimal below 2^64, ended by white space or the end of the value; a minus
/// sign wraps the number and is refused if the result is negative as a signed integer.
fn model_counter(value: &[u8]) -> Option<u64> {
    // memcached reads bytes; only ASCII matters here, so a lossy conversion is exact.
    let text = String::from_utf8_lossy(value);
    let space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r');
    let token = text.trim_start_matches(space).split(space).next()?;
    let (negative, digits) = match token.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, token.strip_prefix('+').unwrap_or(token)),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u128 = digits.trim_start_matches('0').parse().unwrap_or(0);
    if digits.trim_start_matches('0').len() > 20 || n > u64::MAX as u128 {
        return None;
    }
    let n = n as u64;
    if !negative {
        return Some(n);
    }
    let wrapped = 0u64.wrapping_sub(n);
    (wrapped < 1 << 63).then_some(wrapped)
}

impl Model {
    fn live(&self, k: usize) -> Option<&Item> {
        self.items.get(&k).filter(|i| !i.flushed && (i.expiry == 0 || i.expiry > self.clock))
    }

    fn live_mut(&mut self, k: usize) -> Option<&mut Item> {
        let clock = self.clock;
        self.items.get_mut(&k).filter(|i| !i.flushed && (i.expiry == 0 || i.expiry > clock))
    }

    /// Stores a new version (expiring now if it is expired on arrival, as the store and
    /// memcached do). Returns true if a live new version exists and needs its CAS learnt.
    fn write(&mut self, k: usize, value: Vec<u8>, flags: u32, expiry: Option<u32>) -> bool {
        let live = expiry.is_some();
        let expiry = expiry.unwrap_or(self.clock.max(1));
        self.items.insert(k, Item { value, flags, expiry, cas: 0, flushed: false });
        live
    }

    fn flush_now(&mut self) {
        for item in self.items.values_mut() {
            item.flushed = true;
        }
        self.flush_at = None;
    }
}

// ---------------------------------------------------------------------------------------------
// Running a sequence

struct Harness {
    keys: Vec<Vec<u8>>,
    /// Always `Some`, except for a moment while the writer restarts.
    writer: Option<Writer>,
    reader: Reader,
    model: Model,
    /// Every CAS unique the store has given a version of an item.
    seen_cas: HashSet<u64>,
    buf: Vec<u8>,
    rbuf: Vec<u8>,
    file: ShmFile,
}

impl Harness {
    fn new(tag: &str) -> Harness {
        let file = ShmFile::new(tag);
        let writer = Writer::create(&file.0, &config(), true).expect("create region");
        let reader = Reader::open(&file.0).expect("open reader");
        let model = Model { clock: writer.clock(), ..Model::default() };
        Harness {
            keys: keys(),
            writer: Some(writer),
            reader,
            model,
            seen_cas: HashSet::new(),
            buf: Vec::new(),
            rbuf: Vec::new(),
            file,
        }
    }

    /// The store's current CAS for key `k` (through the writer's `get`), if it has a live item.
    fn store_cas(&mut self, k: usize) -> Option<u64> {
        self.writer.as_ref().unwrap().get(&self.keys[k], &mut self.buf).unwrap().hit().map(|i| i.cas)
    }

    /// After a modification of `k`: its new CAS must be new to the whole run.
    fn learn_cas(&mut self, k: usize, op: &Op) {
        let info = self.reader.get(&self.keys[k], &mut self.rbuf).unwrap();
        let Lookup::Hit(info) = info else { panic!("{op:?}: stored item not readable: {info:?}") };
        assert!(self.seen_cas.insert(info.cas), "{op:?}: CAS {:#x} was given before", info.cas);
        self.model.items.get_mut(&k).expect("model has it").cas = info.cas;
    }

    fn run(&mut self, op: &Op) {
        let clock = self.model.clock;
        let w = self.writer.as_ref().unwrap();
        match op.clone() {
            Op::Set(k, v, f, e) => {
                let exptime = e.exptime(clock);
                assert_eq!(w.set(&self.keys[k], &v, f, exptime).unwrap(), Store::Stored, "{op:?}");
                if self.model.write(k, v, f, model_expiry(exptime, clock)) {
                    self.learn_cas(k, op);
                }
            }
            Op::Add(k, v, f, e) => {
                let exptime = e.exptime(clock);
                let got = w.add(&self.keys[k], &v, f, exptime).unwrap();
                if self.model.live(k).is_some() {
                    assert_eq!(got, Store::NotStored, "{op:?}");
                } else {
                    assert_eq!(got, Store::Stored, "{op:?}");
                    if self.model.write(k, v, f, model_expiry(exptime, clock)) {
                        self.learn_cas(k, op);
                    }
                }
            }
            Op::Replace(k, v, f, e) => {
                let exptime = e.exptime(clock);
                let got = w.replace(&self.keys[k], &v, f, exptime).unwrap();
                if self.model.live(k).is_some() {
                    assert_eq!(got, Store::Stored, "{op:?}");
                    if self.model.write(k, v, f, model_expiry(exptime, clock)) {
                        self.learn_cas(k, op);
                    }
                } else {
                    assert_eq!(got, Store::NotStored, "{op:?}");
                }
            }
            Op::Append(k, v) | Op::Prepend(k, v) => {
                let prepend = matches!(op, Op::Prepend(..));
                let got = if prepend { w.prepend(&self.keys[k], &v) } else { w.append(&self.keys[k], &v) };
                match self.model.live_mut(k) {
                    Some(item) => {
                        assert_eq!(got.unwrap(), Store::Stored, "{op:?}");
                        item.value = if prepend {
                            [&v[..], &item.value].concat()
                        } else {
                            [&item.value[..], &v].concat()
                        };
                        self.learn_cas(k, op);
                    }
                    None => assert_eq!(got.unwrap(), Store::NotStored, "{op:?}"),
                }
            }
            Op::CasCurrent(k, v, f, e) | Op::CasWrong(k, v, f, e, _) => {
                let current = self.store_cas(k);
                assert_eq!(current, self.model.live(k).map(|i| i.cas), "{op:?}: CAS before");
                let cas = match (op, current) {
                    (Op::CasWrong(.., off), Some(c)) => c.wrapping_add(*off),
                    (Op::CasWrong(.., off), None) => *off,
                    (_, Some(c)) => c,
                    (_, None) => 1,
                };
                let exptime = e.exptime(clock);
                let got = self.writer.as_ref().unwrap().cas(&self.keys[k], &v, f, exptime, cas).unwrap();
                match self.model.live(k).map(|i| i.cas) {
                    None => assert_eq!(got, Store::NotFound, "{op:?}"),
                    Some(c) if c != cas => assert_eq!(got, Store::Exists, "{op:?}"),
                    Some(_) => {
                        assert_eq!(got, Store::Stored, "{op:?}");
                        if self.model.write(k, v, f, model_expiry(exptime, clock)) {
                            self.learn_cas(k, op);
                        }
                    }
                }
            }
            Op::Incr(k, d) | Op::Decr(k, d) => {
                let incr = matches!(op, Op::Incr(..));
                let got = if incr { w.incr(&self.keys[k], d) } else { w.decr(&self.keys[k], d) }.unwrap();
                let Some(item) = self.model.live_mut(k) else {
                    assert_eq!(got, Delta::NotFound, "{op:?}");
                    return;
                };
                let Some(n) = model_counter(&item.value) else {
                    assert_eq!(got, Delta::NonNumeric, "{op:?} on {:?}", item.value);
                    return;
                };
                let n = if incr { n.wrapping_add(d) } else { n.saturating_sub(d) };
                assert_eq!(got, Delta::Value(n), "{op:?} on {:?}", String::from_utf8_lossy(&item.value));
                // memcached rewrites a shorter number in place, padded with spaces.
                let mut text = n.to_string().into_bytes();
                if text.len() < item.value.len() {
                    text.resize(item.value.len(), b' ');
                }
                item.value = text;
                self.learn_cas(k, op);
            }
            Op::Delete(k) => {
                let got = w.delete(&self.keys[k]).unwrap();
                if self.model.live(k).is_some() {
                    assert!(got, "{op:?}");
                    self.model.items.remove(&k);
                } else {
                    assert!(!got, "{op:?}");
                }
            }
            Op::Touch(k, e) => {
                let got = w.touch(&self.keys[k], e.exptime(clock)).unwrap();
                match self.model.live_mut(k) {
                    Some(item) => {
                        assert!(got, "{op:?}");
                        // Expired on arrival: stored as 1, a time every clock has passed.
                        item.expiry = model_expiry(e.exptime(clock), clock).unwrap_or(1);
                    }
                    None => assert!(!got, "{op:?}"),
                }
            }
            Op::Get(k) => {
                // Every key is read after every operation anyway; this read goes through the
                // writer first, which marks the item as read (no visible change may follow).
                let got = w.get(&self.keys[k], &mut self.buf).unwrap();
                assert_eq!(got.hit().is_some(), self.model.live(k).is_some(), "{op:?}: {got:?}");
            }
            Op::Flush(delay) => {
                w.flush(delay);
                match model_expiry(delay, clock).filter(|&at| at != 0) {
                    Some(at) => self.model.flush_at = Some(at),
                    None => self.model.flush_now(),
                }
            }
            Op::Restart => {
                drop(self.writer.take());
                let w = Writer::open(&self.file.0, true).expect("reattach");
                // Attaching publishes the wall clock if it is ahead, and applies a due flush.
                assert!(w.clock() >= self.model.clock, "the clock went back on restart");
                self.model.clock = w.clock();
                if self.model.flush_at.is_some_and(|at| at <= self.model.clock) {
                    self.model.flush_now();
                }
                self.writer = Some(w);
            }
            Op::Tick(secs) => {
                self.model.clock += secs;
                w.tick(self.model.clock);
                if self.model.flush_at.is_some_and(|at| at <= self.model.clock) {
                    self.model.flush_now();
                }
            }
        }
    }

    /// Reads every key through the writer and the reader and compares with the model.
    fn check_all(&mut self, op: &Op) {
        assert_eq!(self.writer.as_ref().unwrap().clock(), self.model.clock, "{op:?}: writer clock");
        assert_eq!(self.reader.clock(), self.model.clock, "{op:?}: reader clock");
        for k in 0..KEYS {
            let key = &self.keys[k];
            let wl = self.writer.as_ref().unwrap().get(key, &mut self.buf).unwrap();
            let rl = self.reader.get(key, &mut self.rbuf).unwrap();
            assert_eq!(wl.settled(), rl.settled(), "{op:?}: writer and reader disagree on key {k}");
            let model = self.model.items.get(&k);
            match (wl, model) {
                (Lookup::Missing, None) => {}
                (Lookup::Hit(info), Some(item)) if self.model.live(k).is_some() => {
                    assert_eq!(self.buf, item.value, "{op:?}: value of key {k}");
                    assert_eq!(self.rbuf, item.value, "{op:?}: reader's value of key {k}");
                    assert_eq!(info.value_len, item.value.len(), "{op:?}");
                    assert_eq!(info.flags, item.flags, "{op:?}: flags of key {k}");
                    assert_eq!(info.expiry, item.expiry, "{op:?}: expiry of key {k}");
                    assert_eq!(info.cas, item.cas, "{op:?}: CAS of key {k} changed without a write");
                }
                // A dead item stays in the index, reported as such, until its segment is
                // reclaimed; then it is simply missing.
                (Lookup::Flushed | Lookup::Missing, Some(item)) if item.flushed => {}
                (Lookup::Expired | Lookup::Missing, Some(item))
                    if !item.flushed && self.model.live(k).is_none() => {}
                (got, want) => panic!(
                    "{op:?}: key {k}: store says {got:?}, model has {want:?} at clock {}",
                    self.model.clock
                ),
            }
        }
        let stats = self.writer.as_ref().unwrap().stats();
        let live = (0..KEYS).filter(|&k| self.model.live(k).is_some()).count() as u64;
        assert!(
            live <= stats.items && stats.items <= self.model.items.len() as u64,
            "{op:?}: stats say {} items; the model has {live} live of {}",
            stats.items,
            self.model.items.len()
        );
        assert_eq!(stats.evictions, 0, "{op:?}: nothing should be evicted in a region this large");
    }
}

fn run_sequence(tag: &str, ops: &[Op]) {
    let mut h = Harness::new(tag);
    for op in ops {
        h.run(op);
        h.check_all(op);
    }
    // Final comparison of the full contents, through a freshly mapped reader too.
    let fresh = Reader::open(&h.file.0).unwrap();
    let mut v = Vec::new();
    for k in 0..KEYS {
        let got = fresh.get(&h.keys[k], &mut v).unwrap();
        match h.model.live(k) {
            Some(item) => {
                let info = got.hit().unwrap_or_else(|| panic!("key {k}: {got:?}, model has {item:?}"));
                assert_eq!(
                    (&v, info.flags, info.expiry, info.cas),
                    (&item.value, item.flags, item.expiry, item.cas)
                );
            }
            None => assert!(got.hit().is_none(), "key {k}: {got:?}, model has it dead or absent"),
        }
    }
}

proptest! {
    // 400 cases each by default (about a second in release); PROPTEST_CASES=n runs more.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(400),
        max_shrink_iters: 2000,
        ..ProptestConfig::default()
    })]

    /// Every operation, mixed, over 8 keys.
    #[test]
    fn store_matches_model(ops in prop::collection::vec(op(), 1..120)) {
        run_sequence("mixed", &ops);
    }

    /// Mostly counters: numeric values, `incr`/`decr` with small and huge deltas, the padding
    /// quirk, wrap-around and the floor at 0, with overwrites and appends in between.
    #[test]
    fn counters_match_model(ops in prop::collection::vec(
        prop_oneof![
            2 => (0..3usize, prop_oneof![
                (0u64..200).prop_map(|n| n.to_string().into_bytes()),
                any::<u64>().prop_map(|n| n.to_string().into_bytes()),
                Just(b"18446744073709551615".to_vec()),
                Just(b"1000000".to_vec()),
            ]).prop_map(|(k, v)| Op::Set(k, v, 7, Exp::Never)),
            5 => (0..3usize, delta()).prop_map(|(k, d)| Op::Incr(k, d)),
            5 => (0..3usize, delta()).prop_map(|(k, d)| Op::Decr(k, d)),
            1 => (0..3usize, prop::sample::select(vec!["0", "5", "x", " "]))
                .prop_map(|(k, s)| Op::Append(k, s.as_bytes().to_vec())),
            1 => (0..3usize, prop::sample::select(vec!["1", "0", "x"]))
                .prop_map(|(k, s)| Op::Prepend(k, s.as_bytes().to_vec())),
            1 => (0..3usize, exp()).prop_map(|(k, e)| Op::Touch(k, e)),
            1 => prop_oneof![0u32..3].prop_map(Op::Tick),
        ],
        1..80,
    )) {
        run_sequence("counters", &ops);
    }

    /// Mostly time: short expiries, touches, delayed and immediate flushes, clock jumps.
    #[test]
    fn expiry_and_flush_match_model(ops in prop::collection::vec(
        prop_oneof![
            4 => (0..KEYS, value(), exp()).prop_map(|(k, v, e)| Op::Set(k, v, 1, e)),
            2 => (0..KEYS, value(), exp()).prop_map(|(k, v, e)| Op::Add(k, v, 2, e)),
            2 => (0..KEYS, exp()).prop_map(|(k, e)| Op::Touch(k, e)),
            1 => (0..KEYS, value()).prop_map(|(k, v)| Op::Append(k, v)),
            1 => (0..KEYS).prop_map(Op::Delete),
            2 => prop_oneof![Just(0i64), Just(-5), 1i64..6].prop_map(Op::Flush),
            5 => prop_oneof![0u32..4, Just(10)].prop_map(Op::Tick),
            1 => Just(Op::Restart),
        ],
        1..100,
    )) {
        run_sequence("time", &ops);
    }
}

/// Hand-picked cases the generators might reach only rarely.
#[test]
fn model_edge_cases() {
    use Exp::*;
    let ops = vec![
        // decr pads with spaces; incr parses the padded value; incr wraps; decr floors at 0.
        Op::Set(2, b"100".to_vec(), 0, Never),
        Op::Decr(2, 1),
        Op::Decr(2, 95),
        Op::Incr(2, 996),
        Op::Set(2, b"18446744073709551615".to_vec(), 0, Never),
        Op::Incr(2, 2),
        Op::Decr(2, 5),
        Op::Set(2, b"12abc".to_vec(), 0, Never),
        Op::Incr(2, 1),
        // cas with the current and a stale CAS.
        Op::Set(0, b"v".to_vec(), 3, Relative(5)),
        Op::CasCurrent(0, b"w".to_vec(), 4, Never),
        Op::CasWrong(0, b"x".to_vec(), 4, Never, 1),
        Op::CasCurrent(1, b"nothing".to_vec(), 4, Never),
        // expiry by the writer's clock, touch to extend and to expire.
        Op::Set(3, b"t".to_vec(), 0, Relative(2)),
        Op::Tick(1),
        Op::Touch(3, Relative(5)),
        Op::Tick(2),
        Op::Touch(3, Negative),
        Op::Add(3, b"again".to_vec(), 0, AbsoluteFuture(3)),
        Op::Tick(3),
        Op::Replace(3, b"gone".to_vec(), 0, Never),
        // delayed flush: items written before it takes effect go, later ones stay.
        Op::Set(4, b"before".to_vec(), 0, Never),
        Op::Flush(2),
        Op::Set(5, b"during".to_vec(), 0, Never),
        Op::Tick(1),
        Op::Tick(1),
        Op::Set(6, b"after".to_vec(), 0, Never),
        Op::Tick(10),
        // A delayed flush and the items survive a restart.
        Op::Set(0, b"kept".to_vec(), 1, Never),
        Op::Flush(3),
        Op::Restart,
        Op::Tick(1),
        Op::Set(1, b"kept too".to_vec(), 1, Relative(5)),
        Op::Restart,
        Op::Tick(5),
        Op::Flush(0),
        Op::Set(7, b"x".to_vec(), 0, JustOverThirtyDays),
        Op::Set(7, b"y".to_vec(), 0, ThirtyDays),
        Op::Set(7, b"z".to_vec(), 0, AbsolutePast(1)),
    ];
    run_sequence("edge", &ops);
}
