//! Announcing a transition to routers: the pool's `active` and `transition` fields in each
//! router's configuration file (mcrouter's JSON, read with comments), which the router
//! reloads on its own. The file is rewritten whole and renamed into place; it is written as
//! plain JSON, so comments in it do not survive (keep the commented original elsewhere).
//!
//! Two other ways to announce exist for comparison (the Proteus benchmark): `active` alone (a
//! Proteus pool without smooth transitions: moved keys simply miss) and the pool's server
//! list cut to the servers on (what a ketama, jump or modulo pool can do).

use serde_json::{json, Map, Value};
use shoal_client::provisioning::{write_atomically, State};
use std::path::Path;
use std::time::UNIX_EPOCH;

fn read(path: &Path) -> Result<Value, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--router-config {}: {e}", path.display()))?;
    json5::from_str(&text).map_err(|e| format!("--router-config {}: not JSON ({e})", path.display()))
}

fn pool_of<'a>(config: &'a mut Value, path: &Path, pool: &str) -> Result<&'a mut Map<String, Value>, String> {
    config
        .get_mut("pools")
        .and_then(|p| p.get_mut(pool))
        .and_then(Value::as_object_mut)
        .ok_or_else(|| format!("--router-config {}: no pool named {pool:?} under \"pools\"", path.display()))
}

/// The servers of `pool` in the router configuration at `path`, in its order.
pub fn pool_servers(path: &Path, pool: &str) -> Result<Vec<String>, String> {
    let mut config = read(path)?;
    let fields = pool_of(&mut config, path, pool)?;
    fields
        .get("servers")
        .and_then(Value::as_array)
        .and_then(|list| list.iter().map(|s| s.as_str().map(str::to_string)).collect())
        .ok_or_else(|| format!("--router-config {}: pool {pool:?} has no list of servers", path.display()))
}

/// How a router learns which servers are on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Announce {
    /// `active` and `transition`: Proteus with smooth transitions (old owners asked).
    Transition,
    /// `active` only: Proteus without smooth transitions.
    Active,
    /// The pool's `servers` cut to those on: any hashing (ketama, jump, modulo).
    Servers,
}

/// Writes `state` into `pool` of the router configuration at `path`, as `how` says.
pub fn announce(path: &Path, pool: &str, state: &State, how: Announce) -> Result<(), String> {
    let mut config = read(path)?;
    let fields = pool_of(&mut config, path, pool)?;
    fields.remove("transition");
    match how {
        Announce::Servers => {
            fields.remove("active");
            fields.insert("servers".into(), json!(state.servers[..state.active]));
        }
        Announce::Active => {
            fields.insert("active".into(), json!(state.active));
        }
        Announce::Transition => {
            fields.insert("active".into(), json!(state.active));
            if let Some(t) = state.transition {
                let until = t.until.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
                fields.insert("transition".into(), json!({ "from": t.from, "until": until }));
            }
        }
    }
    write_atomically(path, &serde_json::to_string_pretty(&config).expect("JSON"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_client::provisioning::Transition;
    use std::time::Duration;

    #[test]
    fn rewrites_only_the_pool_fields() {
        let dir = std::env::temp_dir().join(format!("shoal-provision-announce-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("router.json");
        std::fs::write(
            &path,
            r#"// a comment
            { "pools": { "A": { "servers": ["a:1", "b:2"], "server_timeout": 200, }, "B": { "servers": ["c:3"] } },
              "route": { "type": "PoolRoute", "pool": "A", "hash": "proteus" } }"#,
        )
        .unwrap();
        assert_eq!(pool_servers(&path, "A").unwrap(), ["a:1", "b:2"]);
        assert!(pool_servers(&path, "C").unwrap_err().contains("no pool named \"C\""));
        let state = State {
            servers: vec!["a:1".into(), "b:2".into()],
            active: 1,
            transition: Some(Transition { from: 2, until: UNIX_EPOCH + Duration::from_secs(100) }),
        };
        announce(&path, "A", &state, Announce::Transition).unwrap();
        let written: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(written["pools"]["A"]["active"], 1);
        assert_eq!(written["pools"]["A"]["transition"], json!({"from": 2, "until": 100.0}));
        assert_eq!(written["pools"]["A"]["server_timeout"], 200);
        assert_eq!(written["pools"]["B"], json!({"servers": ["c:3"]}));
        announce(&path, "A", &state, Announce::Active).unwrap();
        let written: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert!(written["pools"]["A"].get("transition").is_none());
        assert_eq!(written["pools"]["A"]["active"], 1);
        announce(&path, "A", &state, Announce::Servers).unwrap();
        let written: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(written["pools"]["A"]["servers"], json!(["a:1"]));
        assert!(written["pools"]["A"].get("active").is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
