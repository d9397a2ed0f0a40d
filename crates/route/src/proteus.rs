//! Proteus placement (Chen et al., "Proteus: Power Proportional Memory Cache Cluster in Data
//! Centers", Algorithm 1): with the first `n` servers of a pool active, each owns exactly `1/n`
//! of the ring, and turning server `n + 1` on or off moves only the keys it gains or loses.
//!
//! The ring has `L = lcm(1..=N)` units for a pool of `N` servers, so every share `L/n` is a
//! whole number. Server 1 owns `[0, L)`. When server `k` joins (`k = 2..=N`, in the pool's list
//! order, the provisioning order), it takes exactly `L/(k-1) - L/k` units from each earlier
//! server, from that server's largest arcs (ties: the arc that starts first), splitting an arc
//! when it needs only part of one (it takes the arc's end). Afterwards each of the first `k`
//! servers owns exactly `L/k`.
//!
//! Every final arc keeps its owners in turn, so the owner of a point with any number of active
//! servers is one binary search over the arcs and one over the arc's chain. A key's point is
//! `floor(xxh3_64(key) * L / 2^64)`; because the construction only ever compares and splits
//! lengths proportional to `L`, the first `n` servers of a pool of `N` place every key exactly
//! as a pool of those `n` servers alone does.

use crate::error::{Error, Result};
use crate::hashing::Ring;
use crate::prefix::hash_part;
use xxhash_rust::xxh3::xxh3_64;

/// The most servers a Proteus ring takes: `lcm(1..=64) < 2^128` units fit a `u128`.
pub const MAX_SERVERS: usize = 64;

/// One arc of the final ring and the servers that owned it as servers joined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProteusArc {
    /// The arc's first unit.
    pub start: u128,
    /// How many units the arc spans.
    pub len: u128,
    /// `(step, server)`, steps ascending from `(1, 0)`: from `step` active servers on, `server`
    /// (an index in the pool's list) owns the arc, until the next entry's step.
    chain: Vec<(u8, u8)>,
}

impl ProteusArc {
    /// The index of the server that owns this arc while the first `active` servers are on
    /// (an `active` of 0 counts as 1).
    pub fn owner_with(&self, active: usize) -> usize {
        let later = self.chain.partition_point(|&(step, _)| usize::from(step) <= active);
        usize::from(self.chain[later.max(1) - 1].1)
    }

    /// The arc's owners in turn: `(step, server)`, meaning `server` owns it from `step` active
    /// servers on until the next pair's step.
    pub fn owners(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.chain.iter().map(|&(step, server)| (usize::from(step), usize::from(server)))
    }
}

/// A Proteus ring over `N` servers, answering for any number `1..=N` of active servers.
///
/// Memory: at most `1 + N(N-1)/2` arcs (each server that joins splits at most one arc of each
/// earlier server); a lookup is `O(log arcs + log N)`.
#[derive(Clone, Debug)]
pub struct ProteusRing {
    servers: usize,
    units: u128,
    /// Sorted by `start`; they tile `[0, units)`.
    arcs: Vec<ProteusArc>,
}

impl ProteusRing {
    /// Builds the ring of a pool of `servers` servers. Refuses an empty pool and more than
    /// [`MAX_SERVERS`].
    pub fn new(servers: usize) -> Result<ProteusRing> {
        if servers == 0 {
            return Err(Error::EmptyPool);
        }
        if servers > MAX_SERVERS {
            return Err(Error::TooManyServers { hashing: "proteus", servers, max: MAX_SERVERS });
        }
        let units = (1..=servers as u128).fold(1u128, |l, i| l / gcd(l, i) * i);
        let mut owned: Vec<Vec<ProteusArc>> =
            vec![vec![ProteusArc { start: 0, len: units, chain: vec![(1, 0)] }]];
        for k in 2..=servers {
            let share = units / (k as u128 * (k as u128 - 1));
            let mut taken = Vec::new();
            for arcs in &mut owned {
                let mut need = share;
                while need > 0 {
                    let mut piece = take_largest(arcs, need);
                    need -= piece.len;
                    piece.chain.push((k as u8, (k - 1) as u8));
                    taken.push(piece);
                }
            }
            owned.push(taken);
        }
        let mut arcs: Vec<ProteusArc> = owned.into_iter().flatten().collect();
        arcs.sort_unstable_by_key(|a| a.start);
        Ok(ProteusRing { servers, units, arcs })
    }

    /// The pool's size `N`.
    pub fn servers(&self) -> usize {
        self.servers
    }

    /// The ring's size `L = lcm(1..=N)` in units.
    pub fn units(&self) -> u128 {
        self.units
    }

    /// The final arcs, sorted by start, tiling `[0, L)`.
    pub fn arcs(&self) -> &[ProteusArc] {
        &self.arcs
    }

    /// The ring point of a hash key (the part before a hash stop, see [`hash_part`]):
    /// `floor(xxh3_64(hash_key) * L / 2^64)`, in `[0, L)`.
    pub fn point(&self, hash_key: &[u8]) -> u128 {
        let h = u128::from(xxh3_64(hash_key));
        // h * L is up to 192 bits: split L into 64-bit halves so nothing overflows.
        let (high, low) = (self.units >> 64, self.units & u128::from(u64::MAX));
        h * high + ((h * low) >> 64)
    }

    /// The index of the server that owns `key` with every server active. Only the part before
    /// a hash stop `|#|` counts.
    pub fn owner(&self, key: &[u8]) -> usize {
        self.owner_of_point(self.servers, self.point(hash_part(key)))
    }

    /// The index of the server that owns `key` while only the first `active` servers of the
    /// pool are on; refuses an `active` outside `1..=N`. Only the part before a hash stop
    /// `|#|` counts. During a transition from `n` to `n + 1` servers (or back), ask for both
    /// to find a key's old and new owner.
    pub fn owner_with(&self, active: usize, key: &[u8]) -> Result<usize> {
        if active == 0 || active > self.servers {
            return Err(Error::BadActive { active, servers: self.servers });
        }
        Ok(self.owner_of_point(active, self.point(hash_part(key))))
    }

    /// The arc holding a ring point (a point beyond the ring falls in the last arc).
    pub fn arc_of(&self, point: u128) -> &ProteusArc {
        &self.arcs[self.arcs.partition_point(|a| a.start <= point) - 1]
    }

    fn owner_of_point(&self, active: usize, point: u128) -> usize {
        self.arc_of(point).owner_with(active)
    }
}

impl Ring for ProteusRing {
    fn owner(&self, hash_key: &[u8]) -> usize {
        self.owner_of_point(self.servers, self.point(hash_key))
    }

    fn as_proteus(&self) -> Option<&ProteusRing> {
        Some(self)
    }
}

/// Takes up to `need` units off the largest arc of `arcs` (ties: the one that starts first):
/// the whole arc if it is no longer than `need`, else its last `need` units.
fn take_largest(arcs: &mut Vec<ProteusArc>, need: u128) -> ProteusArc {
    let (i, _) = arcs
        .iter()
        .enumerate()
        .max_by(|(_, a), (_, b)| a.len.cmp(&b.len).then(b.start.cmp(&a.start)))
        .expect("a server that must give units owns some");
    if arcs[i].len <= need {
        return arcs.swap_remove(i);
    }
    let arc = &mut arcs[i];
    arc.len -= need;
    ProteusArc { start: arc.start + arc.len, len: need, chain: arc.chain.clone() }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Units each server owns with the first `active` on, from the arcs alone.
    fn shares(ring: &ProteusRing, active: usize) -> Vec<u128> {
        let mut owned = vec![0u128; ring.servers()];
        for arc in ring.arcs() {
            owned[arc.owner_with(active)] += arc.len;
        }
        owned
    }

    #[test]
    fn arcs_tile_the_ring_and_stay_few() {
        for n in [1, 2, 3, 7, 20, 64] {
            let ring = ProteusRing::new(n).unwrap();
            let mut next = 0u128;
            for arc in ring.arcs() {
                assert_eq!(arc.start, next, "a gap or an overlap at {next}");
                assert!(arc.len > 0);
                next += arc.len;
            }
            assert_eq!(next, ring.units());
            assert!(ring.arcs().len() <= 1 + n * (n - 1) / 2, "{} arcs for {n}", ring.arcs().len());
        }
        assert_eq!(ProteusRing::new(6).unwrap().units(), 60);
    }

    #[test]
    fn every_active_count_shares_exactly_and_moves_only_the_joiner() {
        let ring = ProteusRing::new(MAX_SERVERS).unwrap();
        let l = ring.units();
        for n in 1..=MAX_SERVERS {
            let owned = shares(&ring, n);
            for (server, &units) in owned.iter().enumerate() {
                let expected = if server < n { l / n as u128 } else { 0 };
                assert_eq!(units, expected, "server {server} with {n} active");
            }
            if n == MAX_SERVERS {
                continue;
            }
            // From n to n + 1 (and back): exactly the units server n + 1 takes change owner,
            // all to it, and going back only its units move.
            let mut moved = 0u128;
            for arc in ring.arcs() {
                let (before, after) = (arc.owner_with(n), arc.owner_with(n + 1));
                if before != after {
                    assert_eq!(after, n, "an arc moved between old servers going to {} active", n + 1);
                    moved += arc.len;
                } else {
                    assert_ne!(after, n, "server {} owned an arc before it joined", n + 1);
                }
            }
            assert_eq!(moved, l / (n as u128 + 1), "units moved from {n} to {} active", n + 1);
        }
    }

    /// With `active` on: maximal runs `(start, owner)` of one owner, starts scaled by `scale`.
    fn runs(ring: &ProteusRing, active: usize, scale: u128) -> Vec<(u128, usize)> {
        let mut runs: Vec<(u128, usize)> = Vec::new();
        for arc in ring.arcs() {
            let owner = arc.owner_with(active);
            if runs.last().is_none_or(|&(_, last)| last != owner) {
                runs.push((arc.start * scale, owner));
            }
        }
        runs
    }

    #[test]
    fn the_first_n_of_a_pool_own_what_a_pool_of_n_owns() {
        let big = ProteusRing::new(MAX_SERVERS).unwrap();
        for n in 1..=MAX_SERVERS {
            let small = ProteusRing::new(n).unwrap();
            let scale = big.units() / small.units();
            assert_eq!(runs(&big, n, 1), runs(&small, n, scale), "{n} of {MAX_SERVERS} against {n}");
        }
    }

    #[test]
    fn keys_share_near_one_nth_and_agree_with_a_smaller_pool() {
        let big = ProteusRing::new(MAX_SERVERS).unwrap();
        let keys: Vec<String> = (0..20_000).map(|i| format!("key:{i}")).collect();
        for n in [1, 2, 3, 5, 8, 13, 33, 64] {
            let small = ProteusRing::new(n).unwrap();
            let mut counts = vec![0usize; n];
            for key in &keys {
                let owner = big.owner_with(n, key.as_bytes()).unwrap();
                assert_eq!(owner, small.owner(key.as_bytes()), "{key} with {n} active");
                counts[owner] += 1;
            }
            let fair = keys.len() as f64 / n as f64;
            for (server, &c) in counts.iter().enumerate() {
                // Binomial: 6 standard deviations of fair share.
                let slack = 6.0 * (fair * (1.0 - 1.0 / n as f64)).sqrt() + 1.0;
                assert!((c as f64 - fair).abs() <= slack, "server {server} of {n}: {c}, fair {fair}");
            }
        }
    }

    #[test]
    fn points_stay_on_the_ring_and_the_hash_stop_counts() {
        let ring = ProteusRing::new(MAX_SERVERS).unwrap();
        for i in 0..1000 {
            assert!(ring.point(format!("{i}").as_bytes()) < ring.units());
        }
        assert_eq!(ring.owner(b"user:7|#|a"), ring.owner(b"user:7"));
        assert_eq!(ring.owner_with(3, b"user:7|#|a").unwrap(), ring.owner_with(3, b"user:7").unwrap());
        assert_eq!(ring.arc_of(ring.units() - 1).owner_with(1), 0);
    }

    #[test]
    fn a_proteus_placement_answers_for_every_active_count() {
        let servers: Vec<String> = (0..9).map(|i| format!("10.0.0.{i}:11211")).collect();
        let placement = crate::Placement::from_strings(crate::Hashing::Proteus, &servers).unwrap();
        let ring = placement.proteus().expect("a proteus placement has a Proteus ring");
        assert_eq!(ring.servers(), 9);
        for i in 0..2000 {
            let key = format!("k{i}|#|x");
            assert_eq!(placement.owner(key.as_bytes()), ring.owner_with(9, key.as_bytes()).unwrap());
        }
        let jump = crate::Placement::from_strings(crate::Hashing::Jump, &servers).unwrap();
        assert!(jump.proteus().is_none());
        let too_many: Vec<String> = (0..65).map(|i| format!("10.0.1.{i}:11211")).collect();
        assert!(matches!(
            crate::Placement::from_strings(crate::Hashing::Proteus, &too_many),
            Err(Error::TooManyServers { servers: 65, .. })
        ));
    }

    #[test]
    fn refuses_empty_pools_too_many_servers_and_bad_active_counts() {
        assert_eq!(ProteusRing::new(0).unwrap_err(), Error::EmptyPool);
        let err = ProteusRing::new(65).unwrap_err();
        assert_eq!(err, Error::TooManyServers { hashing: "proteus", servers: 65, max: 64 });
        assert!(err.to_string().contains("65"), "{err}");
        let ring = ProteusRing::new(4).unwrap();
        for active in [0, 5] {
            let err = ring.owner_with(active, b"k").unwrap_err();
            assert_eq!(err, Error::BadActive { active, servers: 4 });
            assert!(err.to_string().contains(&active.to_string()), "{err}");
        }
    }
}
