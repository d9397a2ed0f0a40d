//! [`Hits`]: the items of a batch gathered in one place — values back to back in one buffer —
//! so that a batch of small values costs no allocation per item, and a buffer kept from one
//! batch to the next costs none at all. [`Gather`]: where a batch's local reads put each value
//! straight from the region, for a caller that keeps values its own way (Python's `bytes`).

use crate::item::ItemRef;
use shoal_region::ValueSink;

/// The receiver of [`Pool::get_many_local`](crate::Pool::get_many_local)'s reads. Each key is
/// looked up with the gatherer as the region's [`ValueSink`]: the lookup copies the value into
/// what the sink gives it (again on every retry, each copy replacing the last), and only once
/// the copy is validated and judged a hit does [`Gather::hit`] say whose value the last copy
/// was. Anything else ends in [`Gather::discard`]: the last copy may be torn, or the value of an
/// expired item, and must be dropped unseen.
pub trait Gather: ValueSink {
    /// Key `index` is a hit: the value last given to the sink is its, whole.
    fn hit(&mut self, index: usize, flags: u32, cas: u64);
    /// The value last given to the sink, if any, is no hit's: drop it.
    fn discard(&mut self);
}

/// Items gathered from a batch, each named by its key's index in the batch.
#[derive(Debug, Default)]
pub struct Hits {
    values: Vec<u8>,
    /// Per item: its key's index, flags, CAS, and where its value ends in `values` (it starts
    /// where the one before ends).
    items: Vec<(usize, u32, u64, usize)>,
}

impl Hits {
    /// Adds the item under key `index`, copying its value.
    #[inline]
    pub fn push(&mut self, index: usize, item: ItemRef<'_>) {
        self.values.extend_from_slice(item.value);
        self.items.push((index, item.flags, item.cas, self.values.len()));
    }

    /// Each item with its key's index, in the order they were added.
    pub fn iter(&self) -> impl Iterator<Item = (usize, ItemRef<'_>)> {
        let mut start = 0;
        self.items.iter().map(move |&(index, flags, cas, end)| {
            let value = &self.values[start..end];
            start = end;
            (index, ItemRef { value, flags, cas })
        })
    }

    /// How many items there are.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Forgets every item, keeping the buffers.
    pub fn clear(&mut self) {
        self.values.clear();
        self.items.clear();
    }

    /// Whether the buffers are small enough to keep for the next batch (up to 1 MiB of values
    /// and 65 536 items): a batch larger than that gives its memory back to the allocator.
    pub fn worth_keeping(&self) -> bool {
        self.values.capacity() <= 1 << 20 && self.items.capacity() <= 1 << 16
    }

    /// Where the items end now, for [`Hits::rewind`].
    pub(crate) fn mark(&self) -> (usize, usize) {
        (self.values.len(), self.items.len())
    }

    /// Forgets the items added since `mark` (an answer that failed halfway).
    pub(crate) fn rewind(&mut self, (values, items): (usize, usize)) {
        self.values.truncate(values);
        self.items.truncate(items);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(value: &[u8], flags: u32) -> ItemRef<'_> {
        ItemRef { value, flags, cas: u64::from(flags) * 10 }
    }

    #[test]
    fn items_come_back_as_added_and_a_rewind_forgets_the_last_ones() {
        let mut hits = Hits::default();
        hits.push(3, item(b"three", 3));
        hits.push(0, item(b"", 0));
        let mark = hits.mark();
        hits.push(7, item(b"seven", 7));
        hits.rewind(mark);
        hits.push(1, item(b"one", 1));
        let back: Vec<(usize, Vec<u8>, u32, u64)> =
            hits.iter().map(|(i, it)| (i, it.value.to_vec(), it.flags, it.cas)).collect();
        assert_eq!(back, [(3, b"three".to_vec(), 3, 30), (0, vec![], 0, 0), (1, b"one".to_vec(), 1, 10)]);
        hits.clear();
        assert!(hits.is_empty() && hits.worth_keeping());
        hits.push(0, item(&vec![0; (1 << 20) + 1], 0));
        assert!(!hits.worth_keeping(), "a batch of large values gives its buffer back");
    }
}
