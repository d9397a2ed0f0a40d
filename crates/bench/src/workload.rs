//! What each connection sends: the measured get/set mix, or sets of a range of keys in order
//! (prefill and fill). A [`RequestSource`] writes one request at a time into a connection's
//! output buffer.

use crate::keys::{KeyChooser, KeySpace};
use crate::protocol::{Protocol, RequestKind};
use crate::random::Rng;
use shoal_proto::MAX_VALUE_BYTES;
use std::fmt;
use std::ops::Range;
use std::str::FromStr;
use std::sync::Arc;

/// Sizes of the values sets write (`--value-size`): one size, or uniform over `MIN-MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueSize {
    /// Smallest value, in bytes.
    pub min: usize,
    /// Largest value, in bytes.
    pub max: usize,
}

impl ValueSize {
    /// A size drawn for one set.
    pub fn draw(&self, rng: &mut Rng) -> usize {
        self.min + rng.below((self.max - self.min + 1) as u64) as usize
    }

    /// The bytes every value is cut from (values are filler; only their size matters).
    pub fn filler(&self) -> Arc<[u8]> {
        vec![b'x'; self.max].into()
    }
}

impl FromStr for ValueSize {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bytes = |part: &str| part.parse::<usize>().map_err(|_| format!("bad value size {part:?}"));
        let (min, max) = match text.split_once('-') {
            Some((min, max)) => (bytes(min)?, bytes(max)?),
            None => (bytes(text)?, bytes(text)?),
        };
        if min > max {
            return Err(format!("value size range {text} is empty"));
        }
        if max > MAX_VALUE_BYTES {
            return Err(format!(
                "value size {max} is over memcached's largest item, {MAX_VALUE_BYTES} bytes (-I 1g)"
            ));
        }
        Ok(ValueSize { min, max })
    }
}

impl fmt::Display for ValueSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}-{}", self.min, self.max)
        }
    }
}

/// The measured mix of gets and sets.
#[derive(Clone, Debug)]
pub struct Mix {
    /// Fraction of requests that are gets, in `[0, 1]`.
    pub get_ratio: f64,
    /// Keys per get.
    pub multiget: u32,
    /// Where gets and sets go.
    pub keys: KeyChooser,
}

/// Which requests a source sends.
#[derive(Clone, Debug)]
pub enum Order {
    /// Gets and sets drawn from a mix, at most `remaining` of them (`None`: until the run ends).
    Mixed {
        /// The mix.
        mix: Mix,
        /// Requests this source may still send.
        remaining: Option<u64>,
    },
    /// Sets of keys `next..end`, in order.
    Sequential {
        /// The next key index to set.
        next: u64,
        /// One past the last key index to set.
        end: u64,
    },
}

impl Order {
    /// Sets of part `part` of `parts` equal contiguous parts of the key range `keys`.
    pub fn sequential_part(keys: Range<u64>, part: u64, parts: u64) -> Order {
        let boundary = |part: u64| keys.start + (keys.end - keys.start) * part / parts;
        Order::Sequential { next: boundary(part), end: boundary(part + 1) }
    }
}

/// The requests of one connection.
pub struct RequestSource {
    protocol: Protocol,
    space: KeySpace,
    value_size: ValueSize,
    filler: Arc<[u8]>,
    rng: Rng,
    order: Order,
}

impl RequestSource {
    /// A source of `order` requests over `space`; `seed` fixes its random choices.
    pub fn new(protocol: Protocol, space: KeySpace, value_size: ValueSize, order: Order, seed: u64) -> Self {
        RequestSource { protocol, space, value_size, filler: value_size.filler(), rng: Rng::new(seed), order }
    }

    /// Appends the next request to `out` and says what it was, or returns `None` once the
    /// source has sent all it should.
    pub fn encode_next(&mut self, out: &mut Vec<u8>) -> Option<RequestKind> {
        let rng = &mut self.rng;
        let set_key = match &mut self.order {
            Order::Sequential { next, end } => {
                if next >= end {
                    return None;
                }
                *next += 1;
                *next - 1
            }
            Order::Mixed { mix, remaining } => {
                if let Some(remaining) = remaining {
                    *remaining = remaining.checked_sub(1)?;
                }
                if rng.next_f64() < mix.get_ratio {
                    let space = self.space;
                    let keys = (0..mix.multiget).map(|_| space.key(mix.keys.next_get(rng)));
                    self.protocol.encode_get(keys, out);
                    return Some(RequestKind::Get { keys: mix.multiget });
                }
                mix.keys.next_set(rng)
            }
        };
        let value = &self.filler[..self.value_size.draw(rng)];
        self.protocol.encode_set(&self.space.key(set_key), value, out);
        Some(RequestKind::Set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Distribution;

    #[test]
    fn value_sizes_are_one_size_or_a_range() {
        assert_eq!("100".parse(), Ok(ValueSize { min: 100, max: 100 }));
        assert_eq!("10-20".parse(), Ok(ValueSize { min: 10, max: 20 }));
        assert!("20-10".parse::<ValueSize>().is_err());
        assert!("big".parse::<ValueSize>().is_err());
        assert_eq!("1073741824".parse::<ValueSize>().map(|size| size.max), Ok(MAX_VALUE_BYTES));
        assert!("1-1073741825".parse::<ValueSize>().is_err(), "over memcached's largest item");
        let range = ValueSize { min: 10, max: 12 };
        let mut rng = Rng::new(1);
        let mut seen = [false; 3];
        for _ in 0..100 {
            seen[range.draw(&mut rng) - 10] = true;
        }
        assert_eq!(seen, [true; 3]);
        assert_eq!(range.to_string(), "10-12");
    }

    fn drain(source: &mut RequestSource) -> (Vec<RequestKind>, String) {
        let mut out = Vec::new();
        let kinds = std::iter::from_fn(|| source.encode_next(&mut out)).collect();
        (kinds, String::from_utf8(out).unwrap())
    }

    #[test]
    fn sequential_sources_set_their_range_once() {
        let space = KeySpace::new(10, 6).unwrap();
        let order = Order::Sequential { next: 3, end: 5 };
        let mut source = RequestSource::new(Protocol::Text, space, "2".parse().unwrap(), order, 0);
        let (kinds, wire) = drain(&mut source);
        assert_eq!(kinds, [RequestKind::Set; 2]);
        assert_eq!(wire, "set key:03 0 0 2\r\nxx\r\nset key:04 0 0 2\r\nxx\r\n");
    }

    #[test]
    fn sequential_parts_cover_a_range_exactly_once() {
        let parts: Vec<_> = (0..3)
            .map(|part| match Order::sequential_part(10..20, part, 3) {
                Order::Sequential { next, end } => next..end,
                Order::Mixed { .. } => unreachable!(),
            })
            .collect();
        assert_eq!(parts, [10..13, 13..16, 16..20]);
    }

    #[test]
    fn mixed_sources_honour_the_ratio_the_multiget_size_and_the_budget() {
        let space = KeySpace::new(1000, 16).unwrap();
        let mix = Mix { get_ratio: 0.75, multiget: 3, keys: KeyChooser::new(Distribution::Uniform, 1000) };
        let order = Order::Mixed { mix, remaining: Some(4000) };
        let mut source = RequestSource::new(Protocol::Meta, space, "100".parse().unwrap(), order, 9);
        let (kinds, wire) = drain(&mut source);
        assert_eq!(kinds.len(), 4000);
        let gets = kinds.iter().filter(|&&k| k == RequestKind::Get { keys: 3 }).count();
        assert!((2850..3150).contains(&gets), "{gets} gets of 4000");
        assert_eq!(wire.matches("mg ").count(), gets * 3);
        assert_eq!(wire.matches("ms ").count(), 4000 - gets);
    }
}
