//! A Fenwick (binary indexed) tree of byte counts over access times: the bytes of the objects
//! whose last access lies in a range of times, in O(log n).

/// Sums of `u64` weights over positions `0..len`.
#[derive(Debug, Clone)]
pub struct Fenwick {
    tree: Vec<u64>,
}

impl Fenwick {
    /// All zeros over `len` positions.
    pub fn new(len: usize) -> Fenwick {
        Fenwick { tree: vec![0; len + 1] }
    }

    /// Positions it covers.
    pub fn len(&self) -> usize {
        self.tree.len() - 1
    }

    /// Adds `delta` (wrapping, so a negative delta is its two's complement) at `at`.
    pub fn add(&mut self, at: usize, delta: u64) {
        let mut i = at + 1;
        while i < self.tree.len() {
            self.tree[i] = self.tree[i].wrapping_add(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// The sum over positions `0..end` (the tests' reference for [`Fenwick::range`]).
    #[cfg(test)]
    pub fn prefix(&self, end: usize) -> u64 {
        let mut sum = 0u64;
        let mut i = end.min(self.len());
        while i > 0 {
            sum = sum.wrapping_add(self.tree[i]);
            i -= i & i.wrapping_neg();
        }
        sum
    }

    /// The sum over positions `lo..hi` (`lo <= hi`): `prefix(hi) - prefix(lo)`, but the two
    /// walks stop where they meet, so a short range of recent positions (a hot key's reuse)
    /// takes a step or two instead of two whole walks.
    #[inline]
    pub fn range(&self, lo: usize, hi: usize) -> u64 {
        let (mut i, mut j) = (hi.min(self.len()), lo.min(self.len()));
        let mut sum = 0u64;
        // Each walk clears its lowest set bit; both reach the indexes' common high bits, and
        // the terms below that are the same for both.
        while i != j {
            if i > j {
                sum = sum.wrapping_add(self.tree[i]);
                i &= i - 1;
            } else {
                sum = sum.wrapping_sub(self.tree[j]);
                j &= j - 1;
            }
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::Fenwick;

    #[test]
    fn sums_match_a_plain_array() {
        let mut tree = Fenwick::new(100);
        let mut plain = [0u64; 100];
        for (step, at) in [3usize, 97, 0, 50, 3, 99, 64].iter().enumerate() {
            tree.add(*at, step as u64 + 1);
            plain[*at] += step as u64 + 1;
        }
        tree.add(3, 2u64.wrapping_neg());
        plain[3] -= 2;
        for end in 0..=100 {
            assert_eq!(tree.prefix(end), plain[..end].iter().sum::<u64>(), "prefix {end}");
            for lo in 0..=end {
                assert_eq!(tree.range(lo, end), plain[lo..end].iter().sum::<u64>(), "range {lo}..{end}");
            }
        }
    }
}
