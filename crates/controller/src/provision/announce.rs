//! Announcing a transition: the provisioner writes its state (the servers on, the transition
//! under way) to its state file and to the state file each router configuration's pool names
//! with `"provisioning"`; routers, like clients, follow those files. A router's configuration
//! is the operator's: it is read (the pool's servers, the state file's name), never written.
//!
//! `--announce active` writes no transition (Proteus without smooth transitions: moved keys
//! simply miss), for the comparison of the Proteus benchmark; a router whose pool is not placed
//! by Proteus cuts its list to the servers on whatever the state says.

use serde_json::{Map, Value};
use shoal_client::provisioning::State;
use std::path::{Path, PathBuf};

fn read(path: &Path) -> Result<Value, String> {
    let text = shoal_textfile::read_text(path, "--router-config", shoal_textfile::DEFAULT_MAX_BYTES)?;
    json5::from_str(&text).map_err(|e| format!("--router-config {}: not JSON ({e})", path.display()))
}

fn pool_of<'a>(config: &'a Value, path: &Path, pool: &str) -> Result<&'a Map<String, Value>, String> {
    config
        .get("pools")
        .and_then(|p| p.get(pool))
        .and_then(Value::as_object)
        .ok_or_else(|| format!("--router-config {}: no pool named {pool:?} under \"pools\"", path.display()))
}

/// The servers of `pool` in the router configuration at `path`, in its order.
pub fn pool_servers(path: &Path, pool: &str) -> Result<Vec<String>, String> {
    let config = read(path)?;
    pool_of(&config, path, pool)?
        .get("servers")
        .and_then(Value::as_array)
        .and_then(|list| list.iter().map(|s| s.as_str().map(str::to_string)).collect())
        .ok_or_else(|| format!("--router-config {}: pool {pool:?} has no list of servers", path.display()))
}

/// The state file that the router configured at `path` follows for `pool` (its
/// `"provisioning"`, relative to the configuration's directory).
pub fn followed_state(path: &Path, pool: &str) -> Result<PathBuf, String> {
    let config = read(path)?;
    match pool_of(&config, path, pool)?.get("provisioning") {
        Some(Value::String(file)) => Ok(path.parent().unwrap_or(Path::new(".")).join(file)),
        _ => Err(format!(
            "--router-config {}: pool {pool:?} names no state file for the router to follow: add \
             \"provisioning\": \"provision-{pool}.json\" to it (shoal provision writes that file, \
             and never the router's configuration)",
            path.display()
        )),
    }
}

/// How a router learns which servers are on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Announce {
    /// `active` and `transition`: Proteus with smooth transitions (old owners asked).
    Transition,
    /// `active` only: Proteus without smooth transitions.
    Active,
}

/// The state as announced `how`.
pub fn announced(state: &State, how: Announce) -> State {
    match how {
        Announce::Transition => state.clone(),
        Announce::Active => State { transition: None, ..state.clone() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_client::provisioning::Transition;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn reads_the_pool_and_its_state_file_and_names_the_fix_when_there_is_none() {
        let dir = std::env::temp_dir().join(format!("shoal-provision-announce-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("router.json");
        std::fs::write(
            &path,
            r#"// a comment
            { "pools": { "A": { "servers": ["a:1", "b:2"], "provisioning": "state/A.json", }, "B": { "servers": ["c:3"] } },
              "route": { "type": "PoolRoute", "pool": "A", "hash": "proteus" } }"#,
        )
        .unwrap();
        assert_eq!(pool_servers(&path, "A").unwrap(), ["a:1", "b:2"]);
        assert!(pool_servers(&path, "C").unwrap_err().contains("no pool named \"C\""));
        assert_eq!(followed_state(&path, "A").unwrap(), dir.join("state/A.json"));
        let missing = followed_state(&path, "B").unwrap_err();
        assert!(missing.contains("add \"provisioning\": \"provision-B.json\""), "{missing}");
        let state = State {
            servers: vec!["a:1".into(), "b:2".into()],
            active: 1,
            transition: Some(Transition { from: 2, until: UNIX_EPOCH + Duration::from_secs(100) }),
        };
        assert_eq!(announced(&state, Announce::Transition), state);
        assert_eq!(announced(&state, Announce::Active), State { transition: None, ..state.clone() });
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
