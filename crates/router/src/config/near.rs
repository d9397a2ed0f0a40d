//! `"near_caches"`: the near caches of this router's region (docs/design/near-cache.md), each
//! the address of a near cache's invalidation listener (`shoal server --upstream …
//! --invalidation-listen ADDR`), to which the router hands a delete of every key a client
//! changed through it.
//!
//! ```text
//!  "near_caches": ["10.0.1.1:11312", "10.0.1.2:11312", "/run/shoal/near.sock"]
//! ```

use super::{error, Result};
use serde_json::Value;

/// The most near caches one router lists (each has a spool and a delivery thread).
pub const MAX_NEAR_CACHES: usize = 1024;

/// One listed near cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NearCache {
    /// Where its invalidations go: `host:port` or a unix socket path.
    pub address: String,
}

/// Reads `"near_caches"`: a list of `host:port` (port 1–65535) or absolute unix socket paths,
/// each listed once.
pub fn read(value: &Value) -> Result<Vec<NearCache>> {
    let Value::Array(list) = value else {
        return error("near_caches", "a list of near caches' invalidation addresses (\"host:port\")");
    };
    if list.len() > MAX_NEAR_CACHES {
        return error("near_caches", format!("{} near caches: at most {MAX_NEAR_CACHES}", list.len()));
    }
    let mut caches: Vec<NearCache> = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let path = format!("near_caches[{i}]");
        let Some(address) = entry.as_str() else {
            return error(&path, "an address, \"host:port\" or a unix socket path");
        };
        let cache = parse(address).map_err(|message| super::ConfigError { path: path.clone(), message })?;
        if caches.iter().any(|c| c.address == cache.address) {
            return error(&path, format!("{address:?} is listed twice"));
        }
        caches.push(cache);
    }
    Ok(caches)
}

/// One near cache's address.
fn parse(address: &str) -> std::result::Result<NearCache, String> {
    if address.starts_with('/') {
        if address.len() > 107 || address.contains('\0') {
            return Err(format!("{address:?} is no unix socket path (at most 107 bytes)"));
        }
        return Ok(NearCache { address: address.to_string() });
    }
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(format!("{address:?}: \"host:port\" or an absolute unix socket path"));
    };
    let port_ok = port.parse::<u16>().is_ok_and(|p| p > 0);
    let host_ok =
        !host.is_empty() && host.len() <= 253 && !host.chars().any(|c| c.is_whitespace() || c == '/');
    if !port_ok || !host_ok {
        return Err(format!("{address:?}: \"host:port\" with a port from 1 to 65535"));
    }
    Ok(NearCache { address: address.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_caches_are_addresses_listed_once() {
        let caches =
            read(&serde_json::json!(["10.0.1.1:11312", "[::1]:11312", "app-2:11312", "/run/n.sock"]))
                .unwrap();
        assert_eq!(caches.len(), 4);
        assert_eq!(caches[1].address, "[::1]:11312");
        for bad in [
            serde_json::json!("10.0.1.1:11312"),
            serde_json::json!([1]),
            serde_json::json!(["10.0.1.1"]),
            serde_json::json!(["10.0.1.1:0"]),
            serde_json::json!(["10.0.1.1:70000"]),
            serde_json::json!([":11312"]),
            serde_json::json!(["a:1", "a:1"]),
        ] {
            let e = read(&bad).unwrap_err();
            assert!(e.path.starts_with("near_caches"), "{bad}: {e}");
        }
    }
}
