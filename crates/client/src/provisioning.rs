//! A power-proportional pool's provisioning state: which servers are on and the transition
//! under way — the file `shoal provision --state` writes (whole, then renamed) before it
//! announces anything, so a provisioner that stops at any moment restarts from a state it
//! knows, and clients follow it ([`crate::Pool::follow_provisioning`]).
//!
//! ```text
//! { "servers": ["host:port", …],            the pool in its provisioning order
//!   "active": n,                            the first n are on
//!   "transition": { "from": n0, "until": unix seconds } | null }
//! ```

use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A transition from `from` servers on, lasting until `until`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transition {
    /// The count before.
    pub from: usize,
    /// When it ends (the drain period after it started).
    pub until: SystemTime,
}

/// The pool's provisioning state.
#[derive(Clone, Debug, PartialEq)]
pub struct State {
    /// Every server, in the provisioning order.
    pub servers: Vec<String>,
    /// Servers on: the first `active`.
    pub active: usize,
    /// The transition under way, if any.
    pub transition: Option<Transition>,
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64()
}

impl State {
    /// The state as JSON (the file's content, and `/status`).
    pub fn to_json(&self) -> Value {
        json!({
            "servers": self.servers,
            "active": self.active,
            "transition": self.transition.map(|t| json!({ "from": t.from, "until": unix_seconds(t.until) })),
        })
    }

    /// Reads a state written by [`State::save`]; a message saying what is wrong otherwise.
    pub fn from_json(value: &Value) -> Result<State, String> {
        let servers: Vec<String> = value
            .get("servers")
            .and_then(Value::as_array)
            .and_then(|list| list.iter().map(|s| s.as_str().map(str::to_string)).collect())
            .ok_or("no \"servers\" list")?;
        let count = |v: Option<&Value>, what: &str| -> Result<usize, String> {
            match v.and_then(Value::as_u64) {
                Some(n) if n >= 1 && n as usize <= servers.len() => Ok(n as usize),
                _ => Err(format!("\"{what}\" is not a count from 1 to {}", servers.len())),
            }
        };
        let active = count(value.get("active"), "active")?;
        let transition = match value.get("transition") {
            None | Some(Value::Null) => None,
            Some(t) => {
                let from = count(t.get("from"), "transition.from")?;
                let until = t
                    .get("until")
                    .and_then(Value::as_f64)
                    .and_then(|u| Duration::try_from_secs_f64(u).ok())
                    .and_then(|u| UNIX_EPOCH.checked_add(u))
                    .ok_or("\"transition.until\" is not a Unix time")?;
                Some(Transition { from, until })
            }
        };
        Ok(State { servers, active, transition })
    }

    /// Reads the state file, if there is one.
    pub fn load(path: &Path) -> Result<Option<State>, String> {
        if matches!(std::fs::metadata(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound) {
            return Ok(None);
        }
        let text = shoal_textfile::read_text(path, "--state", shoal_textfile::DEFAULT_MAX_BYTES)?;
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| format!("--state {}: not JSON ({e}); remove it to start afresh", path.display()))?;
        State::from_json(&value)
            .map(Some)
            .map_err(|e| format!("--state {}: {e}; remove it to start afresh", path.display()))
    }

    /// Writes the state file whole, then renames it into place.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        write_atomically(path, &serde_json::to_string_pretty(&self.to_json()).expect("JSON"))
    }
}

/// Writes `text` to a file beside `path`, then renames it over `path`: a reader sees the old
/// content or the new, never a part.
pub fn write_atomically(path: &Path, text: &str) -> Result<(), String> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".new");
    std::fs::write(&temporary, text).map_err(|e| format!("{}: {e}", Path::new(&temporary).display()))?;
    std::fs::rename(&temporary, path).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_it_cannot_trust() {
        let state = State {
            servers: vec!["a:1".into(), "b:2".into(), "c:3".into()],
            active: 2,
            transition: Some(Transition { from: 3, until: UNIX_EPOCH + Duration::from_secs(1_000) }),
        };
        assert_eq!(State::from_json(&state.to_json()).unwrap(), state);
        let mut bad = state.to_json();
        bad["active"] = json!(4);
        assert!(State::from_json(&bad).unwrap_err().contains("\"active\""));
        let mut bad = state.to_json();
        bad["transition"]["from"] = json!(0);
        assert!(State::from_json(&bad).unwrap_err().contains("transition.from"));
        let mut bad = state.to_json();
        for until in [json!("soon"), json!(-1.0), json!(1e300)] {
            // 1e300 s is past what a SystemTime holds: refused, not a panic.
            bad["transition"]["until"] = until;
            assert!(State::from_json(&bad).unwrap_err().contains("transition.until"));
        }
        assert!(State::from_json(&json!({"active": 1})).unwrap_err().contains("servers"));
    }

    #[test]
    fn files_are_written_whole() {
        let dir = std::env::temp_dir().join(format!("shoal-provision-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.json");
        assert_eq!(State::load(&path).unwrap(), None);
        let state = State { servers: vec!["a:1".into()], active: 1, transition: None };
        state.save(&path).unwrap();
        assert_eq!(State::load(&path).unwrap(), Some(state));
        std::fs::write(&path, "{").unwrap();
        assert!(State::load(&path).unwrap_err().contains("remove it"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
