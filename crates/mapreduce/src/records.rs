//! Intermediate data: how a task's key/value records are combined in the task's memory and
//! laid out in its output area.
//!
//! A map attempt combines as it goes (one entry per distinct key and partition: word count
//! stores each word once per task, not once per occurrence), then writes one area, sized
//! exactly, holding every partition's records (in no order: a reducer combines them in a hash
//! table, and the coordinator sorts the job's result once):
//!
//! ```text
//! area: [len u64] [partitions u64] [end_0 … end_{p-1} u64] [records of partition 0][…]
//! record: [key_len u32][value_len u32][key][value]          (ends are relative to the data)
//! ```
//!
//! The arena is a bump allocator: an area is allocated once, at its final size, when the
//! attempt's output is complete, so keys seen once cost exactly their record and nothing is
//! ever freed or moved. An abandoned attempt's area is simply never published. A reducer's
//! table ([`Merge`]) points into the partitions it read rather than copying each record: a key
//! that only one map emitted (every key of matrix multiply) is copied once, into the output.

use crate::error::MrError;
use crate::region::JobRegion;
use hashbrown::HashTable;
use std::borrow::Cow;
use std::sync::atomic::Ordering;
use xxhash_rust::xxh3::xxh3_64;

/// Merges `value` into `acc`, the value already held for the same key (an app's combiner).
pub type Combine<'a> = dyn Fn(&mut Vec<u8>, &[u8]) + 'a;

/// A record held by [`Emit`]: the key's hash, the key, the value.
type Entry = (u64, Vec<u8>, Vec<u8>);

/// Where a map function sends its records: combined per key at once, per reduce partition.
pub struct Emit<'a> {
    /// Per partition, `(hash, key, value)` placed by the key's XXH3, which also chose the
    /// partition: one hash per record.
    partitions: Vec<HashTable<Entry>>,
    combine: &'a Combine<'a>,
}

impl<'a> Emit<'a> {
    /// An empty emitter for `partitions` reduce partitions (at least one).
    pub(crate) fn new(partitions: usize, combine: &'a Combine<'a>) -> Emit<'a> {
        Emit { partitions: (0..partitions.max(1)).map(|_| HashTable::new()).collect(), combine }
    }

    /// Emits one record: combined with the record already held for `key`, if any.
    pub fn emit(&mut self, key: &[u8], value: &[u8]) {
        self.emit_as(key, value, <[u8]>::to_vec)
    }

    /// [`Emit::emit`] of a value the caller hands over: a new key keeps it without a copy
    /// (matrix multiply emits a row of C per row of A, each key once).
    pub fn emit_owned(&mut self, key: &[u8], value: Vec<u8>) {
        self.emit_as(key, value, |v| v)
    }

    fn emit_as<V: AsRef<[u8]>>(&mut self, key: &[u8], value: V, own: impl FnOnce(V) -> Vec<u8>) {
        let hash = xxh3_64(key);
        let part = partition_of(hash, self.partitions.len());
        let combine = self.combine;
        combine_or_insert(
            &mut self.partitions[part],
            (hash, key),
            value,
            |acc, value| combine(acc, value.as_ref()),
            |value| (key.to_vec(), own(value)),
        );
    }

    /// The payload of the task's output area: every partition's records, in no order (the
    /// coordinator sorts the job's result once).
    pub(crate) fn into_payload(self) -> Vec<u8> {
        payload(self.partitions.iter().map(|t| t.iter().map(|(_, k, v)| (&k[..], &v[..]))))
    }
}

/// A record held by [`Merge`]: the key's hash, the key, the value (a copy once combined).
type Merged<'r> = (u64, &'r [u8], Cow<'r, [u8]>);

/// A reduce task's table: the records of one partition of every map output, combined per
/// key. Keys and values stay where they were decoded (in the partitions' bytes, which the
/// caller keeps) until a second value of a key makes its own copy to combine into.
pub(crate) struct Merge<'r, 'c> {
    table: HashTable<Merged<'r>>,
    combine: &'c Combine<'c>,
}

impl<'r, 'c> Merge<'r, 'c> {
    /// An empty table that combines with `combine`.
    pub(crate) fn new(combine: &'c Combine<'c>) -> Self {
        Merge { table: HashTable::new(), combine }
    }

    /// Adds one record.
    pub(crate) fn add(&mut self, key: &'r [u8], value: &'r [u8]) {
        let combine = self.combine;
        combine_or_insert(
            &mut self.table,
            (xxh3_64(key), key),
            value,
            |acc, value| combine(acc.to_mut(), value),
            |value| (key, Cow::Borrowed(value)),
        );
    }

    /// The payload of the reduce output area: one partition of the combined records.
    pub(crate) fn into_payload(self) -> Vec<u8> {
        payload(std::iter::once(self.table.iter().map(|(_, k, v)| (*k, &v[..]))))
    }
}

/// The find-or-insert both tables are: `value` combined into the entry of `key` (whose XXH3
/// is `hash`) with `combine`, or a new entry made of it by `insert`.
fn combine_or_insert<K: AsRef<[u8]>, V, W>(
    table: &mut HashTable<(u64, K, V)>,
    (hash, key): (u64, &[u8]),
    value: W,
    combine: impl FnOnce(&mut V, W),
    insert: impl FnOnce(W) -> (K, V),
) {
    match table.find_mut(hash, |(h, k, _)| *h == hash && k.as_ref() == key) {
        Some((_, _, acc)) => combine(acc, value),
        None => {
            let (k, v) = insert(value);
            table.insert_unique(hash, (hash, k, v), |e| e.0);
        }
    }
}

/// The reduce partition, among `partitions`, of a key whose XXH3 is `hash`: chosen by the
/// top bits of its low half (a multiply, not a division, once per record), so that it is
/// independent of the bits a partition's table places by (the lowest, and the top seven).
fn partition_of(hash: u64, partitions: usize) -> usize {
    (((hash & 0xffff_ffff) * partitions as u64) >> 32) as usize
}

/// An area payload holding `parts` as partitions, each its records back to back in the
/// order given; written in one pass into a vector sized once.
pub(crate) fn payload<'r, R>(parts: impl Iterator<Item = R> + Clone) -> Vec<u8>
where
    R: Iterator<Item = (&'r [u8], &'r [u8])>,
{
    let sizes: Vec<usize> =
        parts.clone().map(|records| records.map(|(k, v)| 8 + k.len() + v.len()).sum()).collect();
    let mut out = Vec::with_capacity(8 + 8 * sizes.len() + sizes.iter().sum::<usize>());
    out.extend_from_slice(&(sizes.len() as u64).to_le_bytes());
    let mut end = 0u64;
    for size in &sizes {
        end += *size as u64;
        out.extend_from_slice(&end.to_le_bytes());
    }
    for (k, v) in parts.flatten() {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(v);
    }
    out
}

/// The encoded records of partition `part` of the output area at `area`, bounds-checked.
pub(crate) fn read_partition(region: &JobRegion, area: u64, part: u64) -> Result<Vec<u8>, MrError> {
    let corrupt = |what: String| region.corrupt(format!("output area at {area}: {what}"));
    if !region.in_arena(area, 16) || !area.is_multiple_of(8) {
        return Err(corrupt("outside the arena".into()));
    }
    let len = region.word(area).load(Ordering::Relaxed);
    let parts = region.word(area + 8).load(Ordering::Relaxed);
    let head = parts.checked_add(1).and_then(|p| p.checked_mul(8));
    if part >= parts || head.is_none_or(|h| h > len) || !region.in_arena(area + 8, len) {
        return Err(corrupt(format!("{parts} partitions in {len} bytes, partition {part} asked for")));
    }
    let data = area + 8 + 8 + 8 * parts;
    let start = if part == 0 { 0 } else { region.word(area + 16 + 8 * (part - 1)).load(Ordering::Relaxed) };
    let end = region.word(area + 16 + 8 * part).load(Ordering::Relaxed);
    let room = len - 8 - 8 * parts;
    if start > end || end > room {
        return Err(corrupt(format!("partition {part} spans {start}..{end} of {room} bytes")));
    }
    region.bytes(data + start, end - start)
}

/// The records of an encoded partition, in order; `Err` names the first malformed one.
pub(crate) fn decode(bytes: &[u8]) -> impl Iterator<Item = Result<(&[u8], &[u8]), String>> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        if at == bytes.len() {
            return None;
        }
        let head = bytes.get(at..at + 8);
        let record = head.and_then(|h| {
            let klen = u32::from_le_bytes(h[..4].try_into().ok()?) as usize;
            let vlen = u32::from_le_bytes(h[4..].try_into().ok()?) as usize;
            let key = bytes.get(at + 8..at.checked_add(8 + klen)?)?;
            let value = bytes.get(at + 8 + klen..(at + 8 + klen).checked_add(vlen)?)?;
            Some((key, value, 8 + klen + vlen))
        });
        match record {
            Some((k, v, n)) => {
                at += n;
                Some(Ok((k, v)))
            }
            None => {
                let err = format!("malformed record at byte {at} of {}", bytes.len());
                at = bytes.len();
                Some(Err(err))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::tests::TempPath;

    fn add(acc: &mut Vec<u8>, v: &[u8]) {
        let sum = u64::from_le_bytes(acc[..].try_into().unwrap()) + u64::from_le_bytes(v.try_into().unwrap());
        *acc = sum.to_le_bytes().to_vec();
    }

    #[test]
    fn emitted_records_are_combined_partitioned_and_read_back() {
        let p = TempPath::new("records");
        let region = JobRegion::create(&p.0, 4 << 20, 4 << 20, 10).unwrap();
        let mut emit = Emit::new(3, &add);
        for word in ["b", "a", "c", "a", "b", "a", "dd"] {
            emit.emit(word.as_bytes(), &1u64.to_le_bytes());
        }
        let area = region.put_area(&emit.into_payload()).unwrap();
        let mut all = Vec::new();
        for part in 0..3 {
            let bytes = read_partition(&region, area, part).unwrap();
            let recs: Vec<_> = decode(&bytes).map(|r| r.unwrap()).collect();
            for (k, v) in recs {
                assert_eq!(partition_of(xxh3_64(k), 3), part as usize);
                all.push((String::from_utf8(k.to_vec()).unwrap(), u64::from_le_bytes(v.try_into().unwrap())));
            }
        }
        all.sort();
        assert_eq!(all, [("a".into(), 3), ("b".into(), 2), ("c".into(), 1), ("dd".into(), 1)]);
        assert!(read_partition(&region, area, 3).is_err());
    }

    #[test]
    fn a_merge_combines_repeated_keys_and_copies_each_record_once() {
        let first = payload(std::iter::once(
            [(&b"a"[..], &1u64.to_le_bytes()[..]), (b"b", &2u64.to_le_bytes())].into_iter(),
        ));
        let second = payload(std::iter::once(
            [(&b"a"[..], &5u64.to_le_bytes()[..]), (b"c", &7u64.to_le_bytes())].into_iter(),
        ));
        let mut merge = Merge::new(&add);
        for area in [&first, &second] {
            decode(&area[16..]).for_each(|r| {
                let (k, v) = r.unwrap();
                merge.add(k, v)
            });
        }
        assert!(
            matches!(merge.table.iter().find(|e| e.1 == b"b").unwrap().2, Cow::Borrowed(_)),
            "unique: borrowed"
        );
        assert!(
            matches!(merge.table.iter().find(|e| e.1 == b"a").unwrap().2, Cow::Owned(_)),
            "combined: owned"
        );
        let out = merge.into_payload();
        let mut all: Vec<(Vec<u8>, u64)> = decode(&out[16..])
            .map(|r| r.map(|(k, v)| (k.to_vec(), u64::from_le_bytes(v.try_into().unwrap()))).unwrap())
            .collect();
        all.sort();
        assert_eq!(all, [(b"a".to_vec(), 6), (b"b".to_vec(), 2), (b"c".to_vec(), 7)]);
    }

    #[test]
    fn malformed_records_and_areas_are_errors() {
        let area_bytes = payload(std::iter::once([(&b"k"[..], &b"v"[..])].into_iter()));
        let good = &area_bytes[16..];
        for cut in 0..good.len() {
            let results: Vec<_> = decode(&good[..cut]).collect();
            assert!(cut == 0 || results.last().unwrap().is_err(), "cut at {cut}");
        }
        let p = TempPath::new("bad-area");
        let region = JobRegion::create(&p.0, 4 << 20, 4 << 20, 10).unwrap();
        let area = region.put_area(&area_bytes).unwrap();
        region.word(area + 16).store(1 << 40, Ordering::Relaxed);
        assert!(read_partition(&region, area, 0).is_err());
        region.word(area + 8).store(u64::MAX, Ordering::Relaxed);
        assert!(read_partition(&region, area, 0).is_err());
        assert!(read_partition(&region, 3, 0).is_err());
    }
}
