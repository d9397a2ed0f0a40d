//! Ketama continuums as libmemcached builds them (`update_continuum` in
//! `src/libmemcached/hosts.cc` of libmemcached 1.x, as in Debian's 1.1.4), which twemproxy's
//! `ketama_update` (`src/hashkit/nc_ketama.c`) copies for `distribution: ketama`.
//!
//! Each server contributes points named `host-<i>` when its port is 11211 (libmemcached's
//! `MEMCACHED_DEFAULT_PORT`; twemproxy's `CONF_DEFAULT_KETAMA_PORT` "to maintain backward
//! compatibility with libmemcached") and `host:port-<i>` otherwise. A key belongs to the first
//! point at or after its hash, wrapping to the first point.

use crate::error::{Error, Result};
use crate::hashing::Ring;
use crate::server::Server;
use md5::{Digest, Md5};

/// `MEMCACHED_POINTS_PER_SERVER`: points per server of the unweighted continuum.
const POINTS_PER_SERVER: u32 = 100;
/// `MEMCACHED_POINTS_PER_SERVER_KETAMA` (twemproxy's `KETAMA_POINTS_PER_SERVER`): points per
/// server of the weighted continuum at the average weight.
const POINTS_PER_SERVER_KETAMA: f32 = 160.0;
/// The longest twemproxy server name whose point names (`name-<i>`, `i` below 100000) fit its
/// 86-byte buffer with the terminating NUL.
const MAX_NAME: usize = 79;
/// libmemcached's `MEMCACHED_DEFAULT_PORT`, left out of point names.
const DEFAULT_PORT: u16 = 11211;

/// A sorted continuum of `(point, server index)`.
#[derive(Debug)]
pub(crate) struct KetamaRing {
    points: Vec<(u32, u32)>,
    key_hash: fn(&[u8]) -> u32,
}

impl KetamaRing {
    /// libmemcached's `MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED` (and twemproxy's `hash: md5`,
    /// `distribution: ketama`): `floor(weight / total * 40 * servers) * 4` points per server,
    /// four per md5 digest of its point name; keys hashed by md5. The weights must be whole
    /// numbers, as both tools read them.
    pub(crate) fn weighted(servers: &[Server]) -> Result<KetamaRing> {
        let mut weights = Vec::with_capacity(servers.len());
        for s in servers {
            if s.weight.fract() != 0.0 || s.weight > f64::from(u32::MAX) {
                return Err(Error::UnsupportedWeight {
                    hashing: "ketama_weighted",
                    server: s.address.clone(),
                    weight: s.weight,
                    why: "libmemcached and twemproxy take whole-number weights",
                });
            }
            // twemproxy formats point names into 86 bytes (`KETAMA_MAX_HOSTLEN`) and hashes
            // past the end of longer ones: there is nothing to match.
            if s.name.as_ref().is_some_and(|n| n.len() > MAX_NAME) {
                return Err(Error::BadServer(format!(
                    "{} {}: a twemproxy server name is at most {MAX_NAME} bytes",
                    s.address,
                    s.name.as_deref().unwrap_or_default()
                )));
            }
            weights.push(s.weight as u64);
        }
        let total: u64 = weights.iter().sum();
        let live = servers.len() as f32;
        let mut points = Vec::new();
        for (index, (server, &weight)) in servers.iter().zip(&weights).enumerate() {
            // libmemcached computes in `float`, as written here, so the counts round the same.
            let pct = weight as f32 / total as f32;
            let per_server =
                ((pct * POINTS_PER_SERVER_KETAMA / 4.0 * live + 0.000_000_000_1_f32).floor() * 4.0) as u32;
            for i in 0..per_server / 4 {
                let digest = Md5::digest(point_name(server, i).as_bytes());
                for x in 0..4 {
                    let b = &digest[4 * x..4 * x + 4];
                    points.push((u32::from_le_bytes([b[0], b[1], b[2], b[3]]), index as u32));
                }
            }
        }
        Ok(KetamaRing::sorted(points, md5_hash))
    }

    /// libmemcached's `MEMCACHED_BEHAVIOR_KETAMA` with its default hash (pylibmc
    /// `{"ketama": True}` leaves `hash` at `default`): 100 points per server, each the
    /// one-at-a-time hash of its point name; keys hashed by one-at-a-time. A weight other than
    /// 1 is refused: libmemcached switches to a weighted continuum when a server of weight
    /// above 1 joins a consistent pool, and pylibmc aborts on such a pool (`realloc(): invalid
    /// old size`), so there is no one placement to match.
    pub(crate) fn unweighted(servers: &[Server]) -> Result<KetamaRing> {
        if let Some(s) = servers.iter().find(|s| s.weight != 1.0) {
            return Err(Error::UnsupportedWeight {
                hashing: "ketama",
                server: s.address.clone(),
                weight: s.weight,
                why: "libmemcached's unweighted ketama has no weights (use ketama_weighted)",
            });
        }
        let mut points = Vec::with_capacity(servers.len() * POINTS_PER_SERVER as usize);
        for (index, server) in servers.iter().enumerate() {
            for i in 0..POINTS_PER_SERVER {
                points.push((one_at_a_time(point_name(server, i).as_bytes()), index as u32));
            }
        }
        Ok(KetamaRing::sorted(points, one_at_a_time))
    }

    fn sorted(mut points: Vec<(u32, u32)>, key_hash: fn(&[u8]) -> u32) -> KetamaRing {
        points.sort_unstable();
        KetamaRing { points, key_hash }
    }
}

impl Ring for KetamaRing {
    fn owner(&self, hash_key: &[u8]) -> usize {
        let hash = (self.key_hash)(hash_key);
        let at = self.points.partition_point(|&(value, _)| value < hash);
        self.points.get(at).unwrap_or(&self.points[0]).1 as usize
    }
}

/// The name of a server's `i`th point: `name-i` for a server named as in twemproxy's
/// `host:port:weight name`, else `host-i` on port 11211 and `host:port-i` otherwise.
fn point_name(server: &Server, i: u32) -> String {
    if let Some(name) = &server.name {
        format!("{name}-{i}")
    } else if server.port == DEFAULT_PORT {
        format!("{}-{i}", server.host)
    } else {
        format!("{}:{}-{i}", server.host, server.port)
    }
}

/// md5's initial state (RFC 1321, 3.3).
const MD5_INITIAL: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
/// The longest message md5 pads into one 64-byte block (the padding takes 9 bytes at least).
const MD5_ONE_BLOCK: usize = 55;

/// libhashkit's `hashkit_md5`: the first four bytes of the md5 digest, little-endian.
pub(crate) fn md5_hash(key: &[u8]) -> u32 {
    if key.len() <= MD5_ONE_BLOCK {
        // Most keys: padded here into the one block they make and compressed, without the
        // streaming hasher's buffering (5 % of a short key's hash). The first four
        // bytes of the digest, little-endian, are the first word of the state.
        let mut block = [0u8; 64];
        block[..key.len()].copy_from_slice(key);
        block[key.len()] = 0x80;
        block[56..].copy_from_slice(&(key.len() as u64 * 8).to_le_bytes());
        let mut state = MD5_INITIAL;
        md5::block_api::compress(&mut state, &[block]);
        return state[0];
    }
    let digest = Md5::digest(key);
    u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// libhashkit's `hashkit_one_at_a_time` (`MEMCACHED_HASH_DEFAULT`). Its bytes are C `char`,
/// signed on x86-64 and sign-extended, so bytes from 0x80 count as `0xffffff80` and up.
pub(crate) fn one_at_a_time(key: &[u8]) -> u32 {
    let mut value: u32 = 0;
    for &b in key {
        value = value.wrapping_add(b as i8 as u32);
        value = value.wrapping_add(value << 10);
        value ^= value >> 6;
    }
    value = value.wrapping_add(value << 3);
    value ^= value >> 11;
    value.wrapping_add(value << 15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn point_names_leave_out_the_default_port() {
        assert_eq!(point_name(&Server::tcp("10.0.0.1", 11211), 3), "10.0.0.1-3");
        assert_eq!(point_name(&Server::tcp("10.0.0.1", 11212), 0), "10.0.0.1:11212-0");
        assert_eq!(point_name(&Server::parse("10.0.0.1:11211:1 cache-a").unwrap(), 7), "cache-a-7");
    }

    #[test]
    fn weighted_point_counts_follow_weights() {
        let mut servers = vec![Server::tcp("a", 1), Server::tcp("b", 2), Server::tcp("c", 3)];
        servers[0].weight = 2.0;
        let ring = KetamaRing::weighted(&servers).unwrap();
        let count = |i| ring.points.iter().filter(|p| p.1 == i).count();
        // 2/4 * 40 * 3 = 60 digests of 4 points; 1/4 * 40 * 3 = 30.
        assert_eq!((count(0), count(1), count(2)), (240, 120, 120));
        servers[1].weight = 1.5;
        assert!(
            matches!(KetamaRing::weighted(&servers), Err(Error::UnsupportedWeight { weight, .. }) if weight == 1.5)
        );
    }

    #[test]
    fn a_short_keys_one_block_hashes_as_md5_does() {
        // Every length around the one-block limit, and bytes of every value.
        for len in 0..=130 {
            let key: Vec<u8> = (0..len).map(|i| (i * 37 + len) as u8).collect();
            let digest = Md5::digest(&key);
            let expected = u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]]);
            assert_eq!(md5_hash(&key), expected, "a key of {len} bytes");
        }
    }

    #[test]
    fn hashes_match_libhashkit() {
        // libhashkit's md5 of "" is d41d8cd9…: its first four bytes little-endian.
        assert_eq!(md5_hash(b""), 0xd98c_1dd4);
        // Sign extension: a high byte is not its unsigned value.
        assert_ne!(one_at_a_time(&[0x80]), {
            let mut v: u32 = 0x80;
            v = v.wrapping_add(v << 10);
            v ^= v >> 6;
            v = v.wrapping_add(v << 3);
            v ^= v >> 11;
            v.wrapping_add(v << 15)
        });
    }
}
