//! mcrouter's JSON configuration, read into a tree of route handles.
//!
//! The file is JSON with comments and trailing commas (read as JSON5). Shapes accepted, as
//! mcrouter writes them:
//!
//! ```text
//! { "pools": { "A": { "servers": ["host:port", …], "server_timeout": ms, "connect_timeout": ms,
//!                     "keep_routing_prefix": bool, "weights": [w, …] } },
//!   "named_handles": [ { "name": "h", "type": …, … } ],
//!   "route": <route>                                  one route for every key, or
//!   "routes": [ { "aliases": ["/region/cluster/"], "route": <route> } ],
//!   "near_caches": ["host:port", …] }               near caches this router invalidates (near.rs)
//! <route> = "PoolRoute|A" | "AllSyncRoute|Pool|A" | "Pool|A" | "NullRoute" | "ErrorRoute|why"
//!         | "<a named handle>" | { "type": "…Route", … } | [<route>, …] (children)
//! ```
//!
//! A name this router does not know — a route handle type, a hash function, a pool, a named
//! handle — is refused with the name and its place in the file (`route.children[1].type`).

use crate::dest::Destination;
use crate::provisioned::{Provisioned, Transition};
use crate::route::{Child, Route};
use serde_json::Value;
use shoal_route::{Hashing, Placement, Server};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use xxhash_rust::xxh3::xxh3_64;

pub mod near;
mod provisioning;
mod routes;
use provisioning::{provisioning, Provisioning};

/// A configuration that cannot be used, and where in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Where: `route.children[1].type`, or empty for the file as a whole.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

type Result<T> = std::result::Result<T, ConfigError>;

fn error<T>(path: &str, message: impl Into<String>) -> Result<T> {
    Err(ConfigError { path: path.to_string(), message: message.into() })
}

/// How deep objects and lists may nest in a configuration (serde_json's own limit; a route
/// tree takes two levels per handle).
const MAX_NESTING: usize = 128;

/// Where the text first opens an object or list more than [`MAX_NESTING`] levels deep, if it
/// does: brackets inside strings and comments (JSON5's `//`, `/* */`) do not count.
fn too_deep(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let (mut depth, mut i) = (0usize, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Some(i);
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            quote @ (b'"' | b'\'') => {
                i += 1;
                while i < bytes.len() && bytes[i] != quote {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i += bytes[i..].iter().position(|&b| b == b'\n').unwrap_or(bytes.len() - i);
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i +=
                    bytes[i + 2..].windows(2).position(|w| w == b"*/").map_or(bytes.len() - i, |end| end + 3);
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// A whole configuration: the destinations and the routes.
#[derive(Debug)]
pub struct Config {
    /// Every server named by a pool, indexed by `Route::Destination` (shared with the
    /// transport's senders: a new table tells each worker the configuration changed).
    pub destinations: Arc<[Destination]>,
    /// Routes by routing prefix (`/region/cluster/`, `*` wildcards), in file order.
    pub prefixed: Vec<(String, Child)>,
    /// The route of keys without a routing prefix (`route`, or the first of `routes`).
    pub default: Child,
    /// Every power-proportional pool route (`active`/`transition`), for `stats` and digests.
    pub provisioned: Vec<Arc<Provisioned>>,
    /// Every pool, in the order read: its name and servers, and how many are on when a
    /// provisioning state says so (for the log).
    pub pools: Vec<(String, Vec<String>, Option<usize>)>,
    /// The provisioning state files the pools follow, with the fingerprint of the bytes read
    /// (`None`: not written yet); the router reloads when one changes.
    pub followed: Vec<(PathBuf, Option<u64>)>,
    /// Every pool route with `"hot_replicas"`: the pool's name and its hot keys (`stats`).
    pub hot: Vec<(String, Arc<crate::route::hot::HotPool>)>,
    /// The near caches every change through this router is delivered to as a delete
    /// (`"near_caches"`, `crate::near`).
    pub near_caches: Vec<near::NearCache>,
}

/// What identifies a version of a file: its bytes' hash (`None` if it cannot be read).
pub fn fingerprint(path: &Path) -> Option<u64> {
    shoal_textfile::read_bytes(path, "", shoal_textfile::DEFAULT_MAX_BYTES).ok().map(|bytes| xxh3_64(&bytes))
}

/// `n` and the noun, singular for one (`1 server`, `3 servers`).
pub fn plural(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

impl Config {
    /// Reads a configuration file's text; a pool's `"provisioning"` file is found relative to
    /// the working directory.
    pub fn parse(text: &str) -> Result<Config> {
        Config::parse_in(text, Path::new("."))
    }

    /// Reads the text of a configuration file in directory `base` (where a pool's relative
    /// `"provisioning"` path starts).
    pub fn parse_in(text: &str, base: &Path) -> Result<Config> {
        // The JSON5 parser and the tree it builds recurse once per level: a file nested
        // deeper than any route tree overflowed the stack (a router reloading it died).
        if let Some(at) = too_deep(text) {
            return error("", format!("nested more than {MAX_NESTING} levels deep (at byte {at})"));
        }
        let value: Value = json5::from_str(text).map_err(|e| ConfigError {
            path: String::new(),
            message: format!("not JSON (comments and trailing commas are fine): {e}"),
        })?;
        let Value::Object(top) = value else { return error("", "the configuration must be a JSON object") };
        for key in top.keys() {
            if !["pools", "route", "routes", "named_handles", "near_caches"].contains(&key.as_str()) {
                return error(
                    key,
                    format!(
                        "unsupported top-level field {key:?} (known: pools, route, routes, named_handles, \
                         near_caches)"
                    ),
                );
            }
        }
        let mut builder = Builder { base: base.to_path_buf(), ..Builder::default() };
        if let Some(pools) = top.get("pools") {
            builder.read_pools(pools)?;
        }
        if let Some(handles) = top.get("named_handles") {
            let Value::Array(list) = handles else {
                return error("named_handles", "a list of route objects");
            };
            for (i, handle) in list.iter().enumerate() {
                let path = format!("named_handles[{i}]");
                let Some(name) = handle.get("name").and_then(Value::as_str) else {
                    return error(&path, "a named handle needs a \"name\"");
                };
                let route = builder.route(handle, &path)?;
                builder.named.insert(name.to_string(), route);
            }
        }
        let (prefixed, default) = match (top.get("route"), top.get("routes")) {
            (Some(route), None) => (Vec::new(), builder.route(route, "route")?),
            (None, Some(Value::Array(routes))) if !routes.is_empty() => {
                let mut prefixed = Vec::new();
                for (i, entry) in routes.iter().enumerate() {
                    let path = format!("routes[{i}]");
                    let route = builder
                        .route(entry.get("route").unwrap_or(&Value::Null), &format!("{path}.route"))?;
                    let Some(Value::Array(aliases)) = entry.get("aliases") else {
                        return error(
                            &path,
                            "each entry of routes needs \"aliases\" (a list of /region/cluster/ prefixes)",
                        );
                    };
                    for (j, alias) in aliases.iter().enumerate() {
                        let Some(alias) = alias.as_str().filter(|a| valid_prefix(a)) else {
                            return error(
                                &format!("{path}.aliases[{j}]"),
                                "a routing prefix is /region/cluster/",
                            );
                        };
                        prefixed.push((alias.to_string(), route.clone()));
                    }
                }
                let default = prefixed[0].1.clone();
                (prefixed, default)
            }
            (Some(_), Some(_)) => return error("", "give either \"route\" or \"routes\", not both"),
            _ => return error("", "no \"route\" (or non-empty \"routes\"): nothing to send requests to"),
        };
        Ok(Config {
            destinations: builder.destinations.into(),
            prefixed,
            default,
            provisioned: builder.provisioned,
            pools: builder.described,
            followed: builder.followed,
            hot: builder.hot,
            near_caches: top.get("near_caches").map(near::read).transpose()?.unwrap_or_default(),
        })
    }

    /// The pools for the log: `pool A: 3 servers (a:1, b:2, c:3), 2 on; pool B: …`, and the
    /// near caches listed (`; near caches: a:1, b:2`).
    pub fn describe_pools(&self) -> String {
        let pools = self.pools.iter().map(|(name, servers, active)| {
            let on = active.map(|n| format!(", {n} on")).unwrap_or_default();
            format!("pool {name}: {} ({}){on}", plural(servers.len(), "server"), servers.join(", "))
        });
        let mut text = pools.collect::<Vec<_>>().join("; ");
        if !self.near_caches.is_empty() {
            let near: Vec<&str> = self.near_caches.iter().map(|c| c.address.as_str()).collect();
            text.push_str(&format!("; near caches: {}", near.join(", ")));
        }
        text
    }

    /// Fetches the old owners' digests of every power-proportional pool in a transition
    /// (blocking, half a second per server at most): done as a configuration is put in
    /// service, never by `--validate`.
    pub fn fetch_digests(&self) {
        for pool in &self.provisioned {
            pool.fetch_digests(Duration::from_millis(500));
        }
    }

    /// The route for a key's routing prefix (`None` for a key without one: the default).
    pub fn route_for(&self, region: Option<&[u8]>, cluster: Option<&[u8]>) -> Option<&Child> {
        let (Some(region), Some(cluster)) = (region, cluster) else { return Some(&self.default) };
        self.prefixed.iter().find(|(alias, _)| prefix_matches(alias, region, cluster)).map(|(_, r)| r)
    }

    /// Every route whose prefix `/region/cluster/` (with `*` wildcards) selects.
    pub fn routes_matching(&self, region: &[u8], cluster: &[u8]) -> Vec<&Child> {
        let mut matched: Vec<&Child> = Vec::new();
        for (alias, route) in &self.prefixed {
            let mut parts = alias.trim_matches('/').split('/');
            let (r, c) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let ok = |pattern: &[u8], name: &str| pattern == b"*" || pattern == name.as_bytes();
            if ok(region, r) && ok(cluster, c) && !matched.iter().any(|m| Arc::ptr_eq(m, route)) {
                matched.push(route);
            }
        }
        matched
    }
}

/// `/region/cluster/` with two non-empty parts.
fn valid_prefix(alias: &str) -> bool {
    let Some(inner) = alias.strip_prefix('/').and_then(|a| a.strip_suffix('/')) else { return false };
    let mut parts = inner.split('/');
    matches!((parts.next(), parts.next(), parts.next()), (Some(r), Some(c), None) if !r.is_empty() && !c.is_empty())
}

/// Whether an alias `/r/c/` (with `*` in either part) covers `region`/`cluster`.
fn prefix_matches(alias: &str, region: &[u8], cluster: &[u8]) -> bool {
    let mut parts = alias.trim_matches('/').split('/');
    let (r, c) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    (r == "*" || r.as_bytes() == region) && (c == "*" || c.as_bytes() == cluster)
}

/// A pool as the file describes it.
#[derive(Debug, Clone)]
struct PoolSpec {
    /// The pool's name (its path in the file, for a pool given inline).
    name: String,
    destinations: Vec<usize>,
    servers: Vec<Server>,
    keep_routing_prefix: bool,
    /// `active` and `transition` (a power-proportional pool, `hash: proteus`).
    provisioning: Option<Provisioning>,
    /// `hot_replicas` and its siblings (`hot.rs`).
    hot: Option<crate::route::hot::HotOptions>,
}

impl PoolSpec {
    /// The hot keys of one route over this pool (each route polls for its own).
    fn hot(&self) -> Option<Arc<crate::route::hot::HotPool>> {
        let addresses = self.servers.iter().map(|s| s.address.clone()).collect();
        self.hot.clone().map(|o| Arc::new(crate::route::hot::HotPool::new(o, addresses)))
    }
}

#[derive(Default)]
struct Builder {
    /// The configuration file's directory.
    base: PathBuf,
    destinations: Vec<Destination>,
    pools: HashMap<String, PoolSpec>,
    named: HashMap<String, Child>,
    provisioned: Vec<Arc<Provisioned>>,
    described: Vec<(String, Vec<String>, Option<usize>)>,
    followed: Vec<(PathBuf, Option<u64>)>,
    hot: Vec<(String, Arc<crate::route::hot::HotPool>)>,
}

/// mcrouter's default timeouts.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

impl Builder {
    /// The hot keys of a route over `pool`, kept for `stats`.
    fn hot(&mut self, pool: &PoolSpec) -> Option<Arc<crate::route::hot::HotPool>> {
        let hot = pool.hot()?;
        self.hot.push((pool.name.clone(), hot.clone()));
        Some(hot)
    }

    fn read_pools(&mut self, pools: &Value) -> Result<()> {
        let Value::Object(pools) = pools else { return error("pools", "an object of pools by name") };
        for (name, pool) in pools {
            let spec = self.pool(pool, &format!("pools.{name}"), name)?;
            self.pools.insert(name.clone(), spec);
        }
        Ok(())
    }

    fn pool(&mut self, pool: &Value, path: &str, name: &str) -> Result<PoolSpec> {
        let Value::Object(fields) = pool else { return error(path, "a pool is an object with \"servers\"") };
        for key in fields.keys() {
            let known = [
                "servers",
                "server_timeout",
                "connect_timeout",
                "keep_routing_prefix",
                "weights",
                "protocol",
                "active",
                "transition",
                "provisioning",
            ];
            if !known.contains(&key.as_str()) && !crate::route::hot::FIELDS.contains(&key.as_str()) {
                return error(&format!("{path}.{key}"), format!("unsupported pool field {key:?}"));
            }
        }
        let millis = |field: &str| -> Result<Duration> {
            match fields.get(field) {
                None => Ok(DEFAULT_TIMEOUT),
                Some(v) => match v.as_u64() {
                    Some(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
                    _ => error(&format!("{path}.{field}"), "milliseconds, above 0"),
                },
            }
        };
        let (server_timeout, connect_timeout) = (millis("server_timeout")?, millis("connect_timeout")?);
        let keep_routing_prefix = fields.get("keep_routing_prefix").and_then(Value::as_bool).unwrap_or(false);
        let Some(Value::Array(list)) = fields.get("servers") else {
            return error(&format!("{path}.servers"), "a list of \"host:port\" strings");
        };
        if list.is_empty() {
            return error(&format!("{path}.servers"), "a pool needs at least one server");
        }
        let weights = match fields.get("weights") {
            None => None,
            Some(Value::Array(w)) if w.len() == list.len() => Some(w),
            Some(_) => return error(&format!("{path}.weights"), "one weight per server"),
        };
        let mut spec = PoolSpec {
            name: name.to_string(),
            destinations: Vec::new(),
            servers: Vec::new(),
            keep_routing_prefix,
            provisioning: None,
            hot: crate::route::hot::options(fields)
                .map_err(|(field, message)| ConfigError { path: format!("{path}.{field}"), message })?,
        };
        for (i, server) in list.iter().enumerate() {
            let here = format!("{path}.servers[{i}]");
            let text = server
                .as_str()
                .ok_or_else(|| ConfigError { path: here.clone(), message: "\"host:port\"".into() })?;
            let mut parsed = Server::parse(text)
                .map_err(|e| ConfigError { path: here.clone(), message: e.to_string() })?;
            if let Some(w) = weights {
                let weight = w[i].as_f64().unwrap_or(f64::NAN);
                parsed = parsed.with_weight(weight).map_err(|e| ConfigError {
                    path: format!("{path}.weights[{i}]"),
                    message: e.to_string(),
                })?;
            }
            spec.destinations.push(self.destination(&parsed.address, server_timeout, connect_timeout));
            spec.servers.push(parsed);
        }
        let addresses: Vec<String> = spec.servers.iter().map(|s| s.address.clone()).collect();
        spec.provisioning = match fields.get("provisioning") {
            None => provisioning(fields, list.len(), path)?,
            Some(_) if fields.contains_key("active") || fields.contains_key("transition") => {
                return error(
                    &format!("{path}.provisioning"),
                    "a pool follows a state file or has \"active\"/\"transition\" of its own, not both",
                )
            }
            Some(Value::String(file)) => self.follow(file, &addresses, &format!("{path}.provisioning"))?,
            Some(_) => {
                return error(
                    &format!("{path}.provisioning"),
                    "the path of the state file `shoal provision --state` writes",
                )
            }
        };
        self.described.push((name.to_string(), addresses, spec.provisioning.and_then(|p| p.active)));
        Ok(spec)
    }

    /// The index of `address`'s destination; a new one takes the timeouts of the first pool
    /// that names it (mcrouter's default: 1 s each).
    fn destination(&mut self, address: &str, server_timeout: Duration, connect_timeout: Duration) -> usize {
        if let Some(i) = self.destinations.iter().position(|d| d.address == address) {
            return i;
        }
        self.destinations.push(Destination { address: address.to_string(), server_timeout, connect_timeout });
        self.destinations.len() - 1
    }

    /// A pool named `name`, or given inline as an object.
    fn pool_ref(&mut self, pool: &Value, path: &str) -> Result<PoolSpec> {
        match pool {
            Value::String(name) => match self.pools.get(name) {
                Some(spec) => Ok(spec.clone()),
                None => error(path, format!("no pool named {name:?}")),
            },
            Value::Object(_) => self.pool(pool, path, path),
            _ => error(path, "a pool's name or a pool object"),
        }
    }

    /// A pool's servers placed by `hashing`; a pool with `active`/`transition` must be placed
    /// by Proteus, whose ring gives owners for any number of active servers, unless a state
    /// file says them: any other placement is then over the servers on alone.
    fn pool_route(&mut self, pool: &PoolSpec, hashing: Hashing, path: &str) -> Result<Route> {
        let placed = |servers: &[Server]| {
            Placement::new(hashing, servers.to_vec())
                .map_err(|e| ConfigError { path: path.to_string(), message: e.to_string() })
        };
        let provisioned = match pool.provisioning {
            None => None,
            Some(Provisioning { active: Some(on), from_file: true, .. }) if hashing != Hashing::Proteus => {
                let children = Self::pool_children(pool).into_iter().take(on).collect();
                let placement = placed(&pool.servers[..on])?.into();
                return Ok(Route::Hash { children, placement, provisioned: None, hot: self.hot(pool) });
            }
            Some(_) if hashing != Hashing::Proteus => {
                return error(
                    path,
                    format!(
                        "pool {:?} has \"active\" or \"transition\", which need \"hash\": \"proteus\" (not {hashing})",
                        pool.name
                    ),
                )
            }
            Some(p) => {
                let provisioned = Arc::new(Provisioned {
                    pool: pool.name.clone(),
                    active: p.active.unwrap_or(pool.servers.len()),
                    transition: p.transition.map(|(from, until)| Transition::new(from, until)),
                    addresses: pool.servers.iter().map(|s| s.address.clone()).collect(),
                    migrated: Default::default(),
                    digest_skips: Default::default(),
                });
                self.provisioned.push(provisioned.clone());
                Some(provisioned)
            }
        };
        let (children, hot) = (Self::pool_children(pool), self.hot(pool));
        Ok(Route::Hash { children, placement: placed(&pool.servers)?.into(), provisioned, hot })
    }

    /// One destination per server of the pool, as children.
    fn pool_children(pool: &PoolSpec) -> Vec<Child> {
        pool.destinations
            .iter()
            .map(|&dest| Arc::new(Route::Destination { dest, keep_routing_prefix: pool.keep_routing_prefix }))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_past_the_limit_is_refused_before_parsing_and_strings_and_comments_do_not_count() {
        let deep = |n: usize| format!("{{\"route\": {}\"PoolRoute|A\"{}}}", "[".repeat(n), "]".repeat(n));
        // 100 000 levels overflowed the stack in the JSON5 parser.
        let err = Config::parse(&deep(100_000)).unwrap_err().to_string();
        assert!(err.contains("nested more than 128 levels deep (at byte 137)"), "{err}");
        assert_eq!(too_deep(&deep(MAX_NESTING - 1)), None);
        assert_eq!(too_deep(&deep(MAX_NESTING)), Some(10 + MAX_NESTING - 1));
        let quoted = format!(
            "{{\"a\": \"{}\", 'b': '\\'{}', // {}\n /* {} */ \"c\": 1}}",
            "[".repeat(200),
            "{".repeat(200),
            "[".repeat(200),
            "{".repeat(200)
        );
        assert_eq!(too_deep(&quoted), None);
        // Unclosed strings and comments end the scan, as the parser will then refuse them.
        assert_eq!(too_deep("{\"a\": \"[[[["), None);
        assert_eq!(too_deep("{/* [[[["), None);
    }

    #[test]
    fn a_pool_follows_its_state_file_relative_to_the_configuration() {
        let dir = std::env::temp_dir().join(format!("shoal-router-follow-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("state")).unwrap();
        let config = |hash: &str, extra: &str| {
            format!(
                r#"{{ "pools": {{ "A": {{ "servers": ["127.0.0.1:1", "127.0.0.1:2"], "provisioning": "state/A.json"{extra} }} }},
                     "route": {{ "type": "PoolRoute", "pool": "A", "hash": "{hash}" }} }}"#
            )
        };
        // Not written yet: every server on, and the file is watched.
        let loaded = Config::parse_in(&config("proteus", ""), &dir).unwrap();
        assert_eq!(loaded.followed, [(dir.join("state/A.json"), None)]);
        assert_eq!(loaded.pools, [("A".to_string(), vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()], None)]);
        let state = r#"{"servers": ["127.0.0.1:1", "127.0.0.1:2"], "active": 1, "transition": {"from": 2, "until": 1}}"#;
        std::fs::write(dir.join("state/A.json"), state).unwrap();
        let loaded = Config::parse_in(&config("proteus", ""), &dir).unwrap();
        assert_eq!(loaded.followed, [(dir.join("state/A.json"), Some(xxh3_64(state.as_bytes())))]);
        assert_eq!(loaded.provisioned[0].active, 1);
        assert_eq!(loaded.describe_pools(), "pool A: 2 servers (127.0.0.1:1, 127.0.0.1:2), 1 on");
        // Any other placement is cut to the servers on.
        let jump = Config::parse_in(&config("jump", ""), &dir).unwrap();
        let Route::Hash { children, provisioned: None, .. } = &*jump.default else {
            panic!("{:?}", jump.default)
        };
        assert_eq!(children.len(), 1);
        let both = Config::parse_in(&config("proteus", r#", "active": 1"#), &dir).unwrap_err();
        assert!(both.to_string().contains("pools.A.provisioning: a pool follows a state file"), "{both}");
        std::fs::write(
            dir.join("state/A.json"),
            r#"{"servers": ["127.0.0.1:2", "127.0.0.1:1"], "active": 1}"#,
        )
        .unwrap();
        let order = Config::parse_in(&config("proteus", ""), &dir).unwrap_err().to_string();
        assert!(order.contains("not of this pool's"), "{order}");
        std::fs::write(dir.join("state/A.json"), "{").unwrap();
        let damaged = Config::parse_in(&config("proteus", ""), &dir).unwrap_err().to_string();
        assert!(damaged.contains("pools.A.provisioning") && damaged.contains("not JSON"), "{damaged}");
        // A device is refused rather than read for ever; a file past the bound is not read whole.
        let device = config("proteus", "").replace("state/A.json", "/dev/zero");
        let refused = Config::parse_in(&device, &dir).unwrap_err().to_string();
        assert!(refused.contains("/dev/zero: not a regular file"), "{refused}");
        std::fs::write(dir.join("state/A.json"), vec![b' '; provisioning::MAX_STATE_BYTES as usize + 1])
            .unwrap();
        let large = Config::parse_in(&config("proteus", ""), &dir).unwrap_err().to_string();
        assert!(large.contains("larger than 1048576 bytes"), "{large}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_transition_ending_past_what_a_system_time_holds_is_refused_not_a_panic() {
        let config = r#"{ "pools": { "A": { "servers": ["127.0.0.1:1"], "active": 1,
                          "transition": { "from": 1, "until": 1e300 } } },
                          "route": { "type": "PoolRoute", "pool": "A", "hash": "proteus" } }"#;
        let error = Config::parse(config).unwrap_err().to_string();
        assert!(error.contains("pools.A.transition.until"), "{error}");
    }
}
