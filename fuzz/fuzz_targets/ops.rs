//! Sequences of writer operations on a tiny region (eviction after a handful of items), checked
//! against a model of memcached's semantics, and with a reader in the same process that must
//! always agree with the writer.
//!
//! The model is exact about absence (an item never comes back once gone) and about values
//! (a hit must return the last value stored under its key, with its flags, expiry and, once
//! seen, CAS). It is exact about presence only while no live item can have been dropped to make
//! room: a key stored when the counters of such drops (segments evicted, index evictions) read
//! N is certainly present while they still read N.
//!
//! Input: one geometry byte, then operations: an opcode byte followed by its arguments.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_region::expiry::absolute_expiry;
use shoal_region::layout::item_bytes;
use shoal_region::{parse_counter, Delta, Lookup, OpError, Reader, Store, Writer};
use shoal_region_fuzz::{key, tiny_region, Input, Scratch, GEOMETRIES, KEYS};
use std::collections::HashMap;
use std::sync::OnceLock;

struct Templates {
    scratch: Scratch,
    regions: Vec<Vec<u8>>,
}

fn templates() -> &'static Templates {
    static T: OnceLock<Templates> = OnceLock::new();
    T.get_or_init(|| Templates { scratch: Scratch::new(), regions: GEOMETRIES.map(tiny_region).to_vec() })
}

#[derive(Clone, Debug)]
struct Entry {
    value: Vec<u8>,
    flags: u32,
    expiry: u32,
    /// Drop counter when the item was last known to be present.
    mark: u64,
    /// CAS unique, once a lookup has shown it.
    cas: Option<u64>,
}

/// What an operation answers.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Store(Store),
    Delta(Delta),
    Bool(bool),
    TooLarge,
}

/// What an operation does to the model.
#[derive(Clone, Debug)]
enum Effect {
    /// Nothing, but the item was seen present.
    Confirm,
    /// Nothing.
    Nothing,
    Remove,
    Put {
        value: Vec<u8>,
        flags: u32,
        expiry: u32,
    },
    Touch(u32),
}

#[derive(Default)]
struct Model {
    items: HashMap<Vec<u8>, Entry>,
}

/// Drops of live items to make room: memory eviction and index eviction.
fn drops(w: &Writer) -> u64 {
    let s = w.stats();
    s.segments_evicted + s.index_evictions
}

/// An entry without its whole value, for messages.
fn show(e: Option<&Entry>) -> String {
    match e {
        None => "no entry".into(),
        Some(e) => format!(
            "value of {} bytes starting {:?}, flags {}, expiry {}, mark {}, cas {:?}",
            e.value.len(),
            &e.value[..e.value.len().min(16)],
            e.flags,
            e.expiry,
            e.mark,
            e.cas
        ),
    }
}

/// Set `SHOAL_FUZZ_TRACE=1` to print every operation (for reproducing a failure).
fn trace() -> bool {
    static T: OnceLock<bool> = OnceLock::new();
    *T.get_or_init(|| std::env::var_os("SHOAL_FUZZ_TRACE").is_some())
}

fn is_live(e: &Entry, clock: u32) -> bool {
    e.expiry == 0 || e.expiry > clock
}

/// A storage outcome: too large (checked first, as memcached sizes the item before it looks
/// at its exptime), removed if `expiry` is `None` (already expired: stored expiring now, so
/// gone to every read), or stored.
fn store(key: &[u8], value: Vec<u8>, flags: u32, expiry: Option<u32>, max_item: usize) -> (Outcome, Effect) {
    if item_bytes(key.len(), value.len(), false) > max_item {
        return (Outcome::TooLarge, Effect::Nothing);
    }
    match expiry {
        None => (Outcome::Store(Store::Stored), Effect::Remove),
        Some(expiry) => (Outcome::Store(Store::Stored), Effect::Put { value, flags, expiry }),
    }
}

struct Run<'a> {
    w: &'a Writer,
    r: &'a Reader,
    model: Model,
    max_item: usize,
    seq: u32,
    buf: Vec<u8>,
    rbuf: Vec<u8>,
    /// Server time of a delayed `flush_all`; 0 if none.
    pending_flush: u32,
}

impl Run<'_> {
    fn value(&mut self, input: &mut Input) -> Vec<u8> {
        self.seq = self.seq.wrapping_add(1);
        let kind = input.u8();
        match kind % 4 {
            0 => {
                let mut v = (input.u64() >> (input.u8() % 64)).to_string().into_bytes();
                v.resize(v.len() + (kind as usize >> 2) % 3, b' ');
                v
            }
            1 => {
                let len = input.u16() as usize % (self.max_item + 64);
                (0..len).map(|i| (self.seq as usize * 31 + i) as u8).collect()
            }
            _ => {
                let len = input.u8() as usize * 2;
                (0..len).map(|i| (self.seq as usize * 7 + i) as u8).collect()
            }
        }
    }

    fn exptime(&self, input: &mut Input) -> i64 {
        let clock = self.w.clock() as i64;
        [0, 0, 0, -1, 1, 2, 3, 10, 60, 2_592_000, 2_592_001, clock + 5, clock - 5, i64::MAX, i64::MIN]
            [input.u8() as usize % 15]
    }

    /// Checks an operation's actual outcome against the model and applies its effect.
    fn check(
        &mut self,
        what: &str,
        key: &[u8],
        actual: Result<Outcome, OpError>,
        if_live: Vec<(Outcome, Effect)>,
        if_absent: (Outcome, Effect),
        drops_before: u64,
    ) {
        let name = String::from_utf8_lossy(key);
        if trace() {
            eprintln!(
                "{what} {:?} -> {actual:?} (drops before {drops_before}, now {})",
                String::from_utf8_lossy(key),
                drops(self.w)
            );
        }
        let actual = match actual {
            Ok(o) => o,
            Err(OpError::ValueTooLarge { .. }) => Outcome::TooLarge,
            Err(OpError::OutOfMemory) => {
                // Nothing changed, except that a failed `set` removes the old value.
                if what == "set" {
                    self.model.items.remove(key);
                }
                return;
            }
            Err(e) => panic!("{what} {name}: unexpected error {e}"),
        };
        let clock = self.w.clock();
        let now = drops(self.w);
        let entry = self.model.items.get(key).filter(|e| is_live(e, clock));
        // An operation may evict the very item it works on (to make room for its result):
        // presence is certain only if nothing was dropped up to the end of the operation.
        let live_certain = entry.is_some_and(|e| e.mark == now);
        let mut allowed: Vec<(Outcome, Effect)> = Vec::new();
        if entry.is_some() {
            allowed.extend(if_live);
        }
        if !live_certain {
            allowed.push(if_absent);
        }
        let Some((_, effect)) = allowed.into_iter().find(|(o, _)| *o == actual) else {
            panic!(
                "{what} {name}: got {actual:?}; model has {} (clock {clock})",
                show(self.model.items.get(key))
            )
        };
        match effect {
            Effect::Nothing => {}
            Effect::Confirm => {
                if let Some(e) = self.model.items.get_mut(key) {
                    e.mark = now;
                }
            }
            Effect::Remove => {
                self.model.items.remove(key);
            }
            Effect::Put { value, flags, expiry } => {
                self.model.items.insert(key.to_vec(), Entry { value, flags, expiry, mark: now, cas: None });
            }
            Effect::Touch(expiry) => {
                let e = self.model.items.get_mut(key).expect("touched a live item");
                e.expiry = expiry;
                e.mark = now;
            }
        }
    }

    /// Looks `key` up through the writer and the reader; both must agree with the model.
    fn get(&mut self, key: &[u8]) {
        let name = String::from_utf8_lossy(key);
        let before = drops(self.w);
        let by_reader = self.r.get(key, &mut self.rbuf).expect("reader lookup");
        let by_writer = self.w.get(key, &mut self.buf).expect("writer lookup");
        if trace() {
            eprintln!("get {:?} -> {by_writer:?}", String::from_utf8_lossy(key));
        }
        assert_eq!(by_reader.settled(), by_writer.settled(), "reader and writer disagree on {name}");
        let clock = self.w.clock();
        let entry = self.model.items.get_mut(key);
        match by_writer {
            Lookup::Hit(info) => {
                assert_eq!(self.rbuf, self.buf, "reader and writer copied different values");
                let e = entry.unwrap_or_else(|| panic!("{name} came back: {info:?}"));
                assert!(
                    is_live(e, clock),
                    "{name} should have expired: {info:?} model {} clock {clock}",
                    show(Some(e))
                );
                assert_eq!(self.buf, e.value, "value of {name}");
                assert_eq!((info.flags, info.expiry, info.value_len), (e.flags, e.expiry, e.value.len()));
                if let Some(cas) = e.cas {
                    assert_eq!(info.cas, cas, "CAS of {name} changed without a store");
                }
                e.cas = Some(info.cas);
                e.mark = before;
            }
            Lookup::Missing | Lookup::Flushed => {
                if let Some(e) = entry {
                    assert!(
                        !(is_live(e, clock) && e.mark == before),
                        "{name} vanished ({by_writer:?}) though nothing was evicted: model {}",
                        show(Some(e))
                    );
                    self.model.items.remove(key);
                }
            }
            Lookup::Expired => {
                if let Some(e) = entry {
                    assert!(
                        !is_live(e, clock),
                        "{name} expired early: model {} clock {clock}",
                        show(Some(e))
                    );
                }
            }
        }
    }

    fn step(&mut self, input: &mut Input) {
        let op = input.u8();
        let key = key(input.u8() as usize % KEYS);
        let w = self.w;
        let clock = w.clock();
        let before = drops(w);
        let current = self.model.items.get(&key).filter(|e| is_live(e, clock)).cloned();
        let max = self.max_item;
        match op % 14 {
            0..=2 => {
                let value = self.value(input);
                let flags = input.u32();
                let exptime = self.exptime(input);
                let expiry = absolute_expiry(exptime, clock);
                let (name, result, live, absent) = match op % 14 {
                    0 => {
                        let mut o = store(&key, value.clone(), flags, expiry, max);
                        if o.0 == Outcome::TooLarge {
                            o.1 = Effect::Remove; // as memcached does: a failed set removes the old value
                        }
                        ("set", w.set(&key, &value, flags, exptime), vec![o.clone()], o)
                    }
                    1 => (
                        "add",
                        w.add(&key, &value, flags, exptime),
                        vec![(Outcome::Store(Store::NotStored), Effect::Confirm)],
                        store(&key, value.clone(), flags, expiry, max),
                    ),
                    _ => (
                        "replace",
                        w.replace(&key, &value, flags, exptime),
                        vec![store(&key, value.clone(), flags, expiry, max)],
                        (Outcome::Store(Store::NotStored), Effect::Nothing),
                    ),
                };
                self.check(name, &key, result.map(Outcome::Store), live, absent, before);
            }
            3 | 4 => {
                let given = self.value(input);
                let prepend = op % 14 == 4;
                let live = current
                    .map(|e| {
                        let value = if prepend {
                            [&given[..], &e.value].concat()
                        } else {
                            [&e.value, &given[..]].concat()
                        };
                        vec![store(&key, value, e.flags, Some(e.expiry), max)]
                    })
                    .unwrap_or_default();
                let result = if prepend { w.prepend(&key, &given) } else { w.append(&key, &given) };
                let absent = (Outcome::Store(Store::NotStored), Effect::Nothing);
                self.check(
                    if prepend { "prepend" } else { "append" },
                    &key,
                    result.map(Outcome::Store),
                    live,
                    absent,
                    before,
                );
            }
            5 => {
                let value = self.value(input);
                let flags = input.u32();
                let exptime = self.exptime(input);
                let guess = input.u8().is_multiple_of(4);
                let known = current.as_ref().and_then(|e| e.cas);
                let cas = match known {
                    Some(cas) if !guess => cas,
                    _ => input.u64() >> (input.u8() % 64),
                };
                let stored = store(&key, value.clone(), flags, absolute_expiry(exptime, clock), max);
                let exists = (Outcome::Store(Store::Exists), Effect::Confirm);
                let live = match known {
                    Some(k) if k == cas => vec![stored],
                    Some(_) => vec![exists],
                    None => vec![stored, exists],
                };
                let result = w.cas(&key, &value, flags, exptime, cas);
                let absent = (Outcome::Store(Store::NotFound), Effect::Nothing);
                self.check("cas", &key, result.map(Outcome::Store), live, absent, before);
            }
            6 | 7 => {
                let delta = input.u64() >> (input.u8() % 64);
                let incr = op % 14 == 6;
                let live = current
                    .map(|e| match parse_counter(&e.value) {
                        None => vec![(Outcome::Delta(Delta::NonNumeric), Effect::Confirm)],
                        Some(n) => {
                            let n = if incr { n.wrapping_add(delta) } else { n.saturating_sub(delta) };
                            let mut text = n.to_string().into_bytes();
                            if text.len() < e.value.len() {
                                text.resize(e.value.len(), b' ');
                            }
                            let put = Effect::Put { value: text, flags: e.flags, expiry: e.expiry };
                            vec![(Outcome::Delta(Delta::Value(n)), put)]
                        }
                    })
                    .unwrap_or_default();
                let result = if incr { w.incr(&key, delta) } else { w.decr(&key, delta) };
                let absent = (Outcome::Delta(Delta::NotFound), Effect::Nothing);
                self.check(
                    if incr { "incr" } else { "decr" },
                    &key,
                    result.map(Outcome::Delta),
                    live,
                    absent,
                    before,
                );
            }
            8 => {
                let result = w.delete(&key).map(Outcome::Bool);
                let live = vec![(Outcome::Bool(true), Effect::Remove)];
                self.check("delete", &key, result, live, (Outcome::Bool(false), Effect::Nothing), before);
            }
            9 => {
                let exptime = self.exptime(input);
                let expiry = absolute_expiry(exptime, clock).unwrap_or(1);
                let result = w.touch(&key, exptime).map(Outcome::Bool);
                let live = vec![(Outcome::Bool(true), Effect::Touch(expiry))];
                self.check("touch", &key, result, live, (Outcome::Bool(false), Effect::Nothing), before);
            }
            10 => {
                if trace() {
                    eprintln!("flush");
                }
                let delay = [0, -1, 1, 3, 50, 2_592_001, clock as i64 + 20][input.u8() as usize % 7];
                match absolute_expiry(delay, clock).filter(|&at| at != 0) {
                    Some(at) => self.pending_flush = at,
                    None => {
                        self.pending_flush = 0;
                        self.model.items.clear();
                    }
                }
                w.flush(delay);
            }
            11 => {
                let now =
                    clock.saturating_add([0, 1, 2, 4, 10, 31, 100, 3600, 2_592_000][input.u8() as usize % 9]);
                if self.pending_flush != 0 && self.pending_flush <= now {
                    self.pending_flush = 0;
                    self.model.items.clear();
                }
                if trace() {
                    eprintln!("tick {now} (clock {clock})");
                }
                w.tick(now);
            }
            _ => self.get(&key),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let t = templates();
    let mut input = Input(data);
    let g = input.u8() as usize % t.regions.len();
    t.scratch.set(&t.regions[g]);
    let w = Writer::open(&t.scratch.path, true).expect("attach a tiny region");
    let r = Reader::open(&t.scratch.path).expect("open a tiny region");
    let mut run = Run {
        w: &w,
        r: &r,
        model: Model::default(),
        max_item: w.layout().max_item_bytes,
        seq: 0,
        buf: Vec::new(),
        rbuf: Vec::new(),
        pending_flush: 0,
    };
    let mut steps = 0;
    while !input.is_empty() && steps < 2000 {
        run.step(&mut input);
        steps += 1;
    }
    for i in 0..KEYS {
        run.get(&key(i));
    }
});
