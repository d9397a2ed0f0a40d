//! A pool's servers on and its transition: the pool's own `active`/`transition` fields, or the
//! state file `shoal provision` writes and the pool's `"provisioning"` field names (read
//! bounded, checked against the pool's servers, fingerprinted so a change reloads).

use super::{error, Builder, ConfigError, Result};
use serde_json::{Map, Value};
use shoal_client::provisioning::State;
use std::path::Path;
use std::time::{Duration, SystemTime};
use xxhash_rust::xxh3::xxh3_64;

/// A pool's servers on, and the transition under way: the pool's own `active` and
/// `transition` fields, or the state file `shoal provision` writes that its `provisioning`
/// field names.
#[derive(Debug, Clone, Copy)]
pub(super) struct Provisioning {
    pub(super) active: Option<usize>,
    /// `from` active servers, until then.
    pub(super) transition: Option<(usize, SystemTime)>,
    /// Read from a state file: any hashing may follow it (a pool that is not Proteus's is
    /// cut to its servers on).
    pub(super) from_file: bool,
}

impl Builder {
    /// The provisioning state in `file` (relative to the configuration's directory) for a
    /// pool of `servers`; none, every server on, until `shoal provision` first writes it.
    pub(super) fn follow(
        &mut self,
        file: &str,
        servers: &[String],
        path: &str,
    ) -> Result<Option<Provisioning>> {
        let file = self.base.join(file);
        let bytes = match read_state(&file) {
            Ok(bytes) => bytes,
            Err(e) => return error(path, format!("{}: {e}", file.display())),
        };
        self.followed.push((file.clone(), bytes.as_deref().map(xxh3_64)));
        let Some(bytes) = bytes else { return Ok(None) };
        let state = serde_json::from_slice(&bytes)
            .map_err(|e| format!("not JSON ({e})"))
            .and_then(|value| State::from_json(&value))
            .map_err(|e| ConfigError {
                path: path.to_string(),
                message: format!("{}: {e}", file.display()),
            })?;
        if state.servers != servers {
            return error(
                path,
                format!(
                    "{} is the state of the servers {:?}, not of this pool's {servers:?} (same servers, same order)",
                    file.display(),
                    state.servers
                ),
            );
        }
        let transition = state.transition.map(|t| (t.from, t.until));
        Ok(Some(Provisioning { active: Some(state.active), transition, from_file: true }))
    }
}

/// A pool's `active` (1 to its server count) and `transition` (`{"from": n, "until": unix
/// seconds}`, from another count), as `shoal provision` writes them.
pub(super) fn provisioning(
    fields: &Map<String, Value>,
    servers: usize,
    path: &str,
) -> Result<Option<Provisioning>> {
    let count = |value: &Value, at: String| -> Result<usize> {
        match value.as_u64() {
            Some(n) if n >= 1 && n as usize <= servers => Ok(n as usize),
            _ => error(&at, format!("a number of active servers, 1 to the pool's {servers}")),
        }
    };
    let active = match fields.get("active") {
        None => None,
        Some(v) => Some(count(v, format!("{path}.active"))?),
    };
    let transition = match fields.get("transition") {
        None | Some(Value::Null) => None,
        Some(Value::Object(t)) => {
            if let Some(key) = t.keys().find(|k| !["from", "until"].contains(&k.as_str())) {
                return error(
                    &format!("{path}.transition.{key}"),
                    "a transition has only \"from\" and \"until\"",
                );
            }
            let from = count(t.get("from").unwrap_or(&Value::Null), format!("{path}.transition.from"))?;
            // A time past what a SystemTime holds is refused, as the state file's is.
            let until =
                t.get("until").and_then(Value::as_f64).and_then(|u| Duration::try_from_secs_f64(u).ok());
            let Some(until) = until.and_then(|u| SystemTime::UNIX_EPOCH.checked_add(u)) else {
                return error(
                    &format!("{path}.transition.until"),
                    "when the transition ends, in Unix seconds",
                );
            };
            if active.is_none() {
                return error(
                    &format!("{path}.transition"),
                    "a transition needs the pool's \"active\" count",
                );
            }
            Some((from, until))
        }
        Some(_) => {
            return error(&format!("{path}.transition"), "an object {\"from\": n, \"until\": unix seconds}")
        }
    };
    Ok((active.is_some() || transition.is_some()).then_some(Provisioning {
        active,
        transition,
        from_file: false,
    }))
}

/// The most a provisioning state file may hold: 64 servers' addresses fit many times over.
pub(super) const MAX_STATE_BYTES: u64 = 1 << 20;

/// A state file's bytes (`None`: it does not exist yet). Only a regular file is opened (a FIFO
/// would block the reload, a device never end), and only up to [`MAX_STATE_BYTES`].
fn read_state(file: &Path) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    match std::fs::metadata(file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
        Ok(m) if !m.is_file() => return Err(std::io::Error::other("not a regular file")),
        Ok(_) => {}
    }
    let mut bytes = Vec::new();
    std::fs::File::open(file)?.take(MAX_STATE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_STATE_BYTES {
        return Err(std::io::Error::other(format!("larger than {MAX_STATE_BYTES} bytes")));
    }
    Ok(Some(bytes))
}
