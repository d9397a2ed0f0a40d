//! Speaking to one server: `stats tenants`, `curve <tenant>` and `tenant_memlimit <tenant>
//! <bytes>` over memcached's text protocol (Shoal extensions; see docs/PROTOCOL.md), and
//! parsing their answers.
//!
//! Each is a line out and `STAT` lines or one status line back, sent with
//! [`shoal_client::Client::command`]. Every read is bounded (line length, line count, time), so
//! a wrong or stuck peer is an error, never a hang.

use shoal_client::{Client, CommandAnswer, Error, Options};
pub use shoal_curves::parse_curve;
use shoal_curves::HitRatioCurve;
use shoal_proto::{Limits, MAX_VALUE_BYTES};
use std::time::Duration;

/// What an answer may be: lines of 4096 bytes (a `STAT` line is far shorter), 100 000 of them
/// (a curve has 260; 100 tenants' stats about 1 600).
const LIMITS: Limits = Limits { line: 4096, value: MAX_VALUE_BYTES, stat_lines: 100_000 };

/// What went wrong talking to a server.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerError {
    /// It could not be reached, or the connection failed or timed out.
    Down(String),
    /// It answered `SERVER_ERROR <reason>`, `CLIENT_ERROR …` or `ERROR`: it refused.
    Refused(String),
    /// It answered something this controller does not understand.
    Garbled(String),
}

impl ServerError {
    /// What went wrong, in the server's or the system's words.
    pub fn reason(&self) -> &str {
        match self {
            ServerError::Down(why) | ServerError::Refused(why) | ServerError::Garbled(why) => why,
        }
    }
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerError::Down(why) => write!(f, "down: {why}"),
            ServerError::Refused(why) => write!(f, "refused: {why}"),
            ServerError::Garbled(why) => write!(f, "unexpected answer: {why}"),
        }
    }
}

/// One tenant's line of `stats tenants`.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantStats {
    /// Its name.
    pub name: String,
    /// Its current size (`limit_maxbytes`).
    pub limit_bytes: u64,
    /// The least it may have.
    pub min_bytes: u64,
    /// The most it may have.
    pub max_bytes: u64,
    /// Live item bytes.
    pub bytes: u64,
    /// Items stored.
    pub items: u64,
    /// Gets served since the server started.
    pub cmd_get: u64,
    /// Of those, hits.
    pub get_hits: u64,
    /// Items evicted since the server started.
    pub evictions: u64,
    /// Its weight under the priorities goal.
    pub priority: f64,
    /// Its minimum hit ratio (`None`: no objective; the server says 0).
    pub slo_hit_ratio: Option<f64>,
    /// Its eviction policy (`fifo`, `lru`).
    pub policy: String,
    /// The unit its size moves in.
    pub segment_bytes: u64,
}

/// A connection to one server.
pub struct Connection {
    client: Client,
}

impl Connection {
    /// Connects to `address` (`host:port`), with `timeout` for the connection and every read
    /// and write after it.
    pub fn open(address: &str, timeout: Duration) -> Result<Connection, ServerError> {
        let options = Options { connect_timeout: Some(timeout), io_timeout: Some(timeout), local: false };
        let client =
            Client::connect(address, options).map_err(|e| ServerError::Down(format!("{address}: {e}")))?;
        Ok(Connection { client })
    }

    /// `command`'s answer: its `STAT` lines (without `STAT `) up to `END`, or one line.
    fn command(&mut self, command: &str) -> Result<CommandAnswer, ServerError> {
        self.client.command(command, &LIMITS).map_err(|e| match e {
            Error::Server(line) => refusal(&line, command),
            Error::Protocol(what) => ServerError::Garbled(format!("{command}: {what}")),
            other => ServerError::Down(other.to_string()),
        })
    }

    /// `command`'s `STAT` lines (without `STAT `), up to `END`.
    pub fn stat_lines(&mut self, command: &str) -> Result<Vec<String>, ServerError> {
        match self.command(command)? {
            CommandAnswer::Stats(lines) => Ok(lines),
            CommandAnswer::Line(line) => Err(refusal(&line, command)),
        }
    }

    /// `stats tenants`, parsed.
    pub fn tenant_stats(&mut self) -> Result<Vec<TenantStats>, ServerError> {
        let lines = self.stat_lines("stats tenants").map_err(|e| match e {
            ServerError::Refused(why) => ServerError::Refused(format!(
                "`stats tenants` is not understood ({why}): is this a `shoal server` with tenants?"
            )),
            other => other,
        })?;
        parse_tenant_stats(&lines).map_err(ServerError::Garbled)
    }

    /// `curve <tenant>`, parsed.
    pub fn curve(&mut self, tenant: &str) -> Result<HitRatioCurve, ServerError> {
        let lines = self.stat_lines(&format!("curve {tenant}"))?;
        parse_curve(&lines).map_err(|e| ServerError::Garbled(format!("curve {tenant}: {e}")))
    }

    /// `tenant_memlimit <tenant> <bytes>`: `Ok` on `OK`, [`ServerError::Refused`] with the
    /// server's reason otherwise.
    pub fn set_tenant_limit(&mut self, tenant: &str, bytes: u64) -> Result<(), ServerError> {
        let command = format!("tenant_memlimit {tenant} {bytes}");
        match self.command(&command)? {
            CommandAnswer::Line(line) if line == "OK" => Ok(()),
            CommandAnswer::Line(line) => Err(refusal(&line, &command)),
            CommandAnswer::Stats(_) => Err(ServerError::Garbled(format!("{command}: STAT lines"))),
        }
    }
}

/// An answer line that is not what `command` expects: a refusal with the server's reason when
/// it is one of memcached's error lines.
fn refusal(line: &str, command: &str) -> ServerError {
    let reason = line
        .strip_prefix("SERVER_ERROR ")
        .or_else(|| line.strip_prefix("CLIENT_ERROR "))
        .or((line == "ERROR").then_some("ERROR: unknown command"));
    match reason {
        Some(reason) => ServerError::Refused(reason.to_string()),
        None => ServerError::Garbled(format!("{command}: {line:?}")),
    }
}

/// `stats tenants`' lines (`<tenant>:<field> <value>`, without `STAT `) as tenants, in the
/// server's order. Fields this controller does not know are skipped (a newer server may add
/// some); the ones it plans with must be there.
pub fn parse_tenant_stats(lines: &[String]) -> Result<Vec<TenantStats>, String> {
    let mut fields: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for line in lines {
        let (name, value) = line.split_once(' ').ok_or_else(|| format!("{line:?}: no value"))?;
        let (tenant, field) =
            name.split_once(':').ok_or_else(|| format!("{line:?}: not <tenant>:<field> <value>"))?;
        match fields.iter_mut().find(|(t, _)| t == tenant) {
            Some((_, list)) => list.push((field.to_string(), value.to_string())),
            None => fields.push((tenant.to_string(), vec![(field.to_string(), value.to_string())])),
        }
    }
    if fields.is_empty() {
        return Err("`stats tenants` lists no tenant".into());
    }
    fields.into_iter().map(|(name, list)| tenant_from_fields(name, &list)).collect()
}

fn tenant_from_fields(name: String, fields: &[(String, String)]) -> Result<TenantStats, String> {
    let text = |field: &str| fields.iter().find(|(f, _)| f == field).map(|(_, v)| v.as_str());
    let number = |field: &str| -> Result<u64, String> {
        let value = text(field).ok_or_else(|| format!("tenant {name}: no {field}"))?;
        value.parse().map_err(|_| format!("tenant {name}: {field} {value:?} is not a whole number"))
    };
    let fraction = |field: &str, default: f64| -> Result<f64, String> {
        match text(field) {
            None => Ok(default),
            Some(value) => value
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("tenant {name}: {field} {value:?} is not a number ≥ 0")),
        }
    };
    let segment_bytes = number("segment_bytes")?;
    if segment_bytes == 0 {
        return Err(format!("tenant {name}: segment_bytes 0"));
    }
    let slo = fraction("slo_hit_ratio", 0.0)?;
    Ok(TenantStats {
        limit_bytes: number("limit_maxbytes")?,
        min_bytes: number("min_bytes")?,
        max_bytes: number("max_bytes")?,
        bytes: number("bytes").unwrap_or(0),
        items: number("curr_items").unwrap_or(0),
        cmd_get: number("cmd_get")?,
        get_hits: number("get_hits")?,
        evictions: number("evictions").unwrap_or(0),
        priority: fraction("priority", 1.0)?,
        slo_hit_ratio: (slo > 0.0).then_some(slo),
        policy: text("policy").unwrap_or("fifo").to_string(),
        segment_bytes,
        name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines()
            .map(|l| l.trim().trim_start_matches("STAT ").to_string())
            .filter(|l| !l.is_empty())
            .collect()
    }

    const TWO_TENANTS: &str = "
        STAT web:limit_maxbytes 16777216
        STAT web:min_bytes 2097152
        STAT web:max_bytes 67108864
        STAT web:bytes 1000
        STAT web:curr_items 3
        STAT web:cmd_get 40
        STAT web:get_hits 30
        STAT web:get_misses 10
        STAT web:cmd_set 12
        STAT web:evictions 0
        STAT web:priority 2.5
        STAT web:slo_hit_ratio 0.9
        STAT web:policy lru
        STAT web:segment_bytes 1048576
        STAT web:region /dev/shm/web.region
        STAT default:limit_maxbytes 8388608
        STAT default:min_bytes 2097152
        STAT default:max_bytes 67108864
        STAT default:cmd_get 0
        STAT default:get_hits 0
        STAT default:priority 1
        STAT default:slo_hit_ratio 0
        STAT default:segment_bytes 1048576
        STAT default:some_future_field x";

    #[test]
    fn tenant_stats_parse_in_order_with_their_objectives() {
        let tenants = parse_tenant_stats(&lines(TWO_TENANTS)).unwrap();
        assert_eq!(tenants.len(), 2);
        let web = &tenants[0];
        assert_eq!(
            (web.name.as_str(), web.limit_bytes, web.min_bytes, web.max_bytes),
            ("web", 16 << 20, 2 << 20, 64 << 20)
        );
        assert_eq!((web.cmd_get, web.get_hits, web.items, web.policy.as_str()), (40, 30, 3, "lru"));
        assert_eq!((web.priority, web.slo_hit_ratio, web.segment_bytes), (2.5, Some(0.9), 1 << 20));
        assert_eq!(tenants[1].name, "default");
        assert_eq!(tenants[1].slo_hit_ratio, None, "0 means no objective");
    }

    #[test]
    fn bad_tenant_stats_name_what_is_wrong() {
        let err = |text: &str| parse_tenant_stats(&lines(text)).unwrap_err();
        assert!(err("").contains("no tenant"));
        assert!(err("STAT web:limit_maxbytes 1").contains("tenant web: no segment_bytes"));
        assert!(err("STAT nocolon 1").contains("not <tenant>:<field>"));
        let bad_number = TWO_TENANTS.replace("web:cmd_get 40", "web:cmd_get -4");
        assert!(err(&bad_number).contains("cmd_get \"-4\""), "{}", err(&bad_number));
        let bad_priority = TWO_TENANTS.replace("web:priority 2.5", "web:priority NaN");
        assert!(err(&bad_priority).contains("priority"));
        let zero_unit = TWO_TENANTS.replace("web:segment_bytes 1048576", "web:segment_bytes 0");
        assert!(err(&zero_unit).contains("segment_bytes 0"));
    }

    #[test]
    fn curves_parse_and_check_their_steps() {
        let curve = parse_curve(&lines(
            "STAT rate 0.5
             STAT tracked 10
             STAT step_bytes 100
             STAT hit_ratio 0 0
             STAT hit_ratio 100 0.25
             STAT hit_ratio 200 0.5",
        ))
        .unwrap();
        assert_eq!((curve.step(), curve.points()), (100, &[0.0, 0.25, 0.5][..]));
        let err = |text: &str| parse_curve(&lines(text)).unwrap_err();
        assert!(err("STAT hit_ratio 0 0").contains("before step_bytes"));
        assert!(
            err("STAT step_bytes 100\nSTAT hit_ratio 0 0\nSTAT hit_ratio 300 0.1").contains("at 100 bytes")
        );
        assert!(err("STAT step_bytes 100\nSTAT hit_ratio 0 1.5").contains("ratio"));
        assert!(err("STAT step_bytes 0").contains("step_bytes"));
        assert!(err("STAT step_bytes 100").contains("no hit_ratio"));
        // A step too large for a second point is refused, not an overflow.
        let huge = format!(
            "STAT step_bytes {0}\nSTAT hit_ratio 0 0\nSTAT hit_ratio {0} 0.5\nSTAT hit_ratio 0 1",
            u64::MAX
        );
        assert!(err(&huge).contains("past 18446744073709551615 bytes"));
    }

    #[test]
    fn error_lines_are_refusals_with_the_reason() {
        assert_eq!(
            refusal("SERVER_ERROR below its minimum", "x"),
            ServerError::Refused("below its minimum".into())
        );
        assert!(matches!(refusal("ERROR", "x"), ServerError::Refused(_)));
        assert!(matches!(refusal("VALUE k 0 1", "x"), ServerError::Garbled(_)));
    }
}
