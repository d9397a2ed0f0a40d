//! Hashing schemes and the placement a pool builds from one.
//!
//! Each scheme is a [`Ring`]: built once from the pool's servers, then asked for the owner of
//! a key's hash part (see [`crate::prefix::hash_part`]). Schemes named after a tool place keys
//! exactly as that tool does.

use crate::error::{Error, Result};
use crate::furc::{Ch3Ring, WeightedCh3Ring, MAX_POOL};
use crate::jump::{jump, jump_many};
use crate::ketama::KetamaRing;
use crate::prefix::hash_part;
use crate::proteus::ProteusRing;
use crate::pymemcache::PymemcacheRing;
use crate::server::Server;
use std::fmt;
use xxhash_rust::xxh3::xxh3_64;

/// How a pool maps keys to servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hashing {
    /// libmemcached's `MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED` (pylibmc `ketama_weighted`): 160
    /// points per server scaled by weight, four per md5 digest; twemproxy's `hash: md5` +
    /// `distribution: ketama` places keys the same way, and names points by a server's name
    /// when it has one (`host:port:weight name`). last.fm's libketama always names points
    /// `host:port-i`: write its servers as `host:port:weight host:port` to match it.
    KetamaWeighted,
    /// libmemcached's `MEMCACHED_BEHAVIOR_KETAMA` (pylibmc `ketama`): 100 points per server,
    /// one per digest of the configured key hash.
    Ketama,
    /// pymemcache's `HashClient` with its defaults: rendezvous hashing over murmur3.
    Pymemcache,
    /// memcached's built-in proxy default: XXH3 of the key, then jump hash.
    MemcachedProxy,
    /// mcrouter's `Ch3`: furc hash over MurmurHash64A.
    Ch3,
    /// mcrouter's `WeightedCh3`: `Ch3` with a weight in (0, 1] per server.
    WeightedCh3,
    /// Shoal's own: jump hash over XXH3 (the memcached proxy's scheme, also for unweighted use).
    Jump,
    /// Shoal's own: weighted rendezvous (highest random weight) over XXH3.
    Rendezvous,
    /// Proteus placement: every active server owns exactly 1/n of the ring, servers in the
    /// pool's provisioning order.
    Proteus,
    /// `hash % n`: the naive scheme, kept to measure the others against.
    Modulo,
}

impl Hashing {
    /// The names [`Hashing::parse`] accepts (first of each scheme's names).
    pub const NAMES: &'static [&'static str] = &[
        "ketama_weighted",
        "ketama",
        "pymemcache",
        "memcached_proxy",
        "ch3",
        "weighted_ch3",
        "jump",
        "rendezvous",
        "proteus",
        "modulo",
    ];

    /// A scheme by name. mcrouter's names (`Ch3`, `WeightedCh3`) and twemproxy's
    /// (`ketama` with md5 is `ketama_weighted`) are accepted case-insensitively.
    pub fn parse(name: &str) -> Result<Hashing> {
        Ok(match name.to_ascii_lowercase().replace('-', "_").as_str() {
            "ketama_weighted" | "libketama" | "twemproxy" => Hashing::KetamaWeighted,
            "ketama" => Hashing::Ketama,
            "pymemcache" | "pymemcache_rendezvous" => Hashing::Pymemcache,
            "memcached_proxy" | "proxy" | "xxh3_jump" => Hashing::MemcachedProxy,
            "ch3" => Hashing::Ch3,
            "weighted_ch3" | "weightedch3" => Hashing::WeightedCh3,
            "jump" => Hashing::Jump,
            "rendezvous" => Hashing::Rendezvous,
            "proteus" => Hashing::Proteus,
            "modulo" => Hashing::Modulo,
            _ => return Err(Error::UnknownHashing(name.to_string())),
        })
    }

    /// The scheme's canonical name.
    pub fn name(self) -> &'static str {
        Hashing::NAMES[self as usize]
    }
}

impl std::str::FromStr for Hashing {
    type Err = Error;
    fn from_str(name: &str) -> Result<Hashing> {
        Hashing::parse(name)
    }
}

impl fmt::Display for Hashing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A built placement of one scheme over one server list.
pub trait Ring: Send + Sync + fmt::Debug {
    /// The index of the server that owns a key whose hash part is `hash_key`.
    fn owner(&self, hash_key: &[u8]) -> usize;

    /// [`Ring::owner`] of the hash part of each of `keys` (whole keys: the hash stop is cut
    /// here), written to `owners` (of the same length). A scheme that places a batch faster
    /// than key by key says how.
    fn owner_each(&self, keys: &[&[u8]], owners: &mut [u32]) {
        for (key, owner) in keys.iter().zip(owners) {
            *owner = self.owner(hash_part(key)) as u32;
        }
    }

    /// The ring as a Proteus ring, if it is one.
    fn as_proteus(&self) -> Option<&ProteusRing> {
        None
    }
}

/// A pool's servers and the ring that places keys on them.
#[derive(Debug)]
pub struct Placement {
    hashing: Hashing,
    servers: Vec<Server>,
    ring: Box<dyn Ring>,
}

impl Placement {
    /// Builds the placement of `hashing` over `servers` (in the order given: for Proteus, the
    /// provisioning order). Refuses an empty pool, a server named twice, and a pool larger than
    /// the scheme supports.
    pub fn new(hashing: Hashing, servers: Vec<Server>) -> Result<Placement> {
        if servers.is_empty() {
            return Err(Error::EmptyPool);
        }
        for (i, s) in servers.iter().enumerate() {
            if servers[..i].iter().any(|t| t.address == s.address) {
                return Err(Error::DuplicateServer(s.address.clone()));
            }
        }
        if hashing != Hashing::KetamaWeighted {
            if let Some(s) = servers.iter().find(|s| s.name.is_some()) {
                return Err(Error::NamedServer { hashing: hashing.name(), server: s.address.clone() });
            }
        }
        let ring: Box<dyn Ring> = match hashing {
            Hashing::Jump | Hashing::MemcachedProxy => Box::new(JumpRing { servers: servers.len() as u32 }),
            Hashing::Rendezvous => Box::new(RendezvousRing::new(&servers)),
            Hashing::Modulo => Box::new(ModuloRing { servers: servers.len() as u64 }),
            Hashing::KetamaWeighted => Box::new(KetamaRing::weighted(&servers)?),
            Hashing::Ketama => Box::new(KetamaRing::unweighted(&servers)?),
            Hashing::Pymemcache => Box::new(PymemcacheRing::new(&servers)),
            Hashing::Ch3 | Hashing::WeightedCh3 if servers.len() > MAX_POOL => {
                return Err(Error::TooManyServers {
                    hashing: hashing.name(),
                    servers: servers.len(),
                    max: MAX_POOL,
                });
            }
            Hashing::Ch3 => Box::new(Ch3Ring { servers: servers.len() as u32 }),
            Hashing::WeightedCh3 => {
                if let Some(s) = servers.iter().find(|s| s.weight > 1.0) {
                    return Err(Error::UnsupportedWeight {
                        hashing: "weighted_ch3",
                        server: s.address.clone(),
                        weight: s.weight,
                        why: "mcrouter's WeightedCh3 weights are in (0, 1]",
                    });
                }
                Box::new(WeightedCh3Ring { weights: servers.iter().map(|s| s.weight).collect() })
            }
            Hashing::Proteus => Box::new(ProteusRing::new(servers.len())?),
        };
        Ok(Placement { hashing, servers, ring })
    }

    /// Parses server strings (see [`Server::parse`]) and builds the placement.
    pub fn from_strings<S: AsRef<str>>(hashing: Hashing, servers: &[S]) -> Result<Placement> {
        let servers = servers.iter().map(|s| Server::parse(s.as_ref())).collect::<Result<Vec<_>>>()?;
        Placement::new(hashing, servers)
    }

    /// The index (in [`Placement::servers`]) of the server that owns `key`. Only the part
    /// before a hash stop `|#|` counts; a routing prefix is the caller's to strip.
    pub fn owner(&self, key: &[u8]) -> usize {
        if self.servers.len() == 1 {
            return 0;
        }
        self.ring.owner(hash_part(key))
    }

    /// [`Placement::owner`] of each of `keys`, written to `owners` (of the same length): the
    /// same answers, with the per-key work of schemes such as `jump` overlapped across keys.
    pub fn owner_each(&self, keys: &[&[u8]], owners: &mut [u32]) {
        assert_eq!(keys.len(), owners.len(), "one owner per key");
        if self.servers.len() == 1 {
            owners.fill(0);
        } else {
            self.ring.owner_each(keys, owners);
        }
    }

    /// The pool's servers, in the order they were given.
    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    /// The scheme.
    pub fn hashing(&self) -> Hashing {
        self.hashing
    }

    /// The Proteus ring of a `proteus` placement (owners with fewer servers active), else `None`.
    pub fn proteus(&self) -> Option<&ProteusRing> {
        self.ring.as_proteus()
    }
}

/// Jump hash over XXH3-64 (seed 0): memcached's proxy default and Shoal's `jump`. memcached's
/// proxy hashes a key with `XXH3_64bits_withSeed(key, len, 0)` when its pool has no `seed`
/// (`proxy_xxhash.c`, `mcplib_pool` in `proxy_lua.c`) and picks a backend with the same jump
/// loop (`proxy_jump_hash.c`, memcached 2d51e36).
#[derive(Debug)]
struct JumpRing {
    servers: u32,
}

impl Ring for JumpRing {
    fn owner(&self, hash_key: &[u8]) -> usize {
        jump(xxh3_64(hash_key), self.servers) as usize
    }

    /// The keys hashed first, then jumped side by side ([`jump_many`]), a chunk at a time.
    fn owner_each(&self, keys: &[&[u8]], owners: &mut [u32]) {
        const CHUNK: usize = 64;
        let mut hashes = [0u64; CHUNK];
        for (keys, owners) in keys.chunks(CHUNK).zip(owners.chunks_mut(CHUNK)) {
            let hashes = &mut hashes[..keys.len()];
            for (hash, key) in hashes.iter_mut().zip(keys) {
                *hash = xxh3_64(hash_part(key));
            }
            jump_many(hashes, self.servers, owners);
        }
    }
}

/// `xxh3 % n`.
#[derive(Debug)]
struct ModuloRing {
    servers: u64,
}

impl Ring for ModuloRing {
    fn owner(&self, hash_key: &[u8]) -> usize {
        (xxh3_64(hash_key) % self.servers) as usize
    }
}

/// Weighted rendezvous: each server scores a key `-weight / ln(u)`, `u` uniform in (0, 1) from
/// XXH3 of the key seeded by the server's address hash; the highest score wins. Adding or
/// removing a server moves only the keys it wins or won.
#[derive(Debug)]
struct RendezvousRing {
    seeds: Vec<(u64, f64)>,
}

impl RendezvousRing {
    fn new(servers: &[Server]) -> RendezvousRing {
        RendezvousRing { seeds: servers.iter().map(|s| (xxh3_64(s.address.as_bytes()), s.weight)).collect() }
    }
}

impl Ring for RendezvousRing {
    fn owner(&self, hash_key: &[u8]) -> usize {
        let mut best = (0, f64::NEG_INFINITY);
        for (i, &(seed, weight)) in self.seeds.iter().enumerate() {
            let h = xxhash_rust::xxh3::xxh3_64_with_seed(hash_key, seed);
            // 53 random bits, shifted into (0, 1): never 0, so ln is finite.
            let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            let score = -weight / u.ln();
            if score > best.1 {
                best = (i, score);
            }
        }
        best.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize) -> Vec<Server> {
        (0..n).map(|i| Server::tcp("127.0.0.1", 11211 + i as u16)).collect()
    }

    #[test]
    fn names_round_trip() {
        for name in Hashing::NAMES {
            assert_eq!(Hashing::parse(name).unwrap().name(), *name);
        }
        assert_eq!(Hashing::parse("WeightedCh3").unwrap(), Hashing::WeightedCh3);
        assert!(matches!(Hashing::parse("crc32"), Err(Error::UnknownHashing(n)) if n == "crc32"));
    }

    #[test]
    fn refuses_bad_pools() {
        assert_eq!(Placement::new(Hashing::Jump, vec![]).unwrap_err(), Error::EmptyPool);
        let mut twice = pool(2);
        twice.push(twice[0].clone());
        assert!(matches!(Placement::new(Hashing::Jump, twice), Err(Error::DuplicateServer(_))));
        assert!(
            matches!(Placement::from_strings(Hashing::Jump, &["h:1", "nope"]), Err(Error::BadServer(s)) if s == "nope")
        );
    }

    #[test]
    fn the_hash_stop_keeps_related_keys_together() {
        for hashing in [Hashing::Jump, Hashing::Rendezvous, Hashing::Modulo] {
            let p = Placement::new(hashing, pool(7)).unwrap();
            for i in 0..500 {
                let base = format!("user:{i}");
                assert_eq!(p.owner(format!("{base}|#|profile").as_bytes()), p.owner(base.as_bytes()));
            }
        }
    }

    #[test]
    fn a_batch_is_placed_as_key_by_key() {
        let keys: Vec<String> = (0..300).map(|i| format!("key:{i}")).chain(["a|#|b".into()]).collect();
        let keys: Vec<&[u8]> = keys.iter().map(String::as_bytes).collect();
        for hashing in [Hashing::Jump, Hashing::MemcachedProxy, Hashing::Rendezvous, Hashing::Modulo] {
            for n in [1, 2, 8, 33] {
                let p = Placement::new(hashing, pool(n)).unwrap();
                let mut owners = vec![u32::MAX; keys.len()];
                p.owner_each(&keys, &mut owners);
                for (key, owner) in keys.iter().zip(&owners) {
                    assert_eq!(*owner as usize, p.owner(key), "{hashing} over {n}");
                }
            }
        }
    }

    #[test]
    fn rendezvous_follows_weights_and_moves_little() {
        let mut servers = pool(4);
        servers[0].weight = 3.0;
        let p = Placement::new(Hashing::Rendezvous, servers.clone()).unwrap();
        let mut counts = [0usize; 4];
        let keys: Vec<String> = (0..60_000).map(|i| format!("k{i}")).collect();
        for k in &keys {
            counts[p.owner(k.as_bytes())] += 1;
        }
        // Weight 3 of 6 → half the keys, the others a sixth each.
        assert!((counts[0] as f64 / 60_000.0 - 0.5).abs() < 0.02, "{counts:?}");
        servers.push(Server::tcp("127.0.0.1", 12000));
        let q = Placement::new(Hashing::Rendezvous, servers).unwrap();
        for k in &keys {
            let (a, b) = (p.owner(k.as_bytes()), q.owner(k.as_bytes()));
            assert!(a == b || b == 4, "a key moved between old servers");
        }
    }
}
