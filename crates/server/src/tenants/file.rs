//! The tenants file (`--tenants <file>`): TOML, or JSON when the name ends in `.json`.
//!
//! Parsing is serde's; this module checks what serde cannot — names, overlapping prefixes,
//! users or listeners claimed twice, sizes that do not fit the memory limit — and names the
//! line of the tenant at fault (TOML), or the tenant by position and name (JSON). Everything
//! is checked before the server binds a socket or creates a region.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The fewest segments a partition may have (one to write into, one for second chances).
const MIN_SEGMENTS: usize = shoal_region::MIN_LIMIT_SEGMENTS;

/// One tenant, checked, with its sizes in bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantSpec {
    pub name: String,
    /// Authenticated users whose connections are this tenant's.
    pub users: Vec<String>,
    /// Key prefixes that are this tenant's (for connections bound to no tenant).
    pub prefixes: Vec<Vec<u8>>,
    /// Listeners of its own.
    pub listen: Vec<Listen>,
    /// Its region file, if the file names one.
    pub region: Option<PathBuf>,
    pub min_bytes: usize,
    pub max_bytes: usize,
    /// The size it starts with.
    pub size_bytes: usize,
    pub priority: f64,
    /// The hit ratio its service-level objective asks for (a latency or bandwidth goal is
    /// turned into one).
    pub slo_hit_ratio: Option<f64>,
    /// How its partition evicts (`fifo` unless the file says).
    pub policy: shoal_region::Eviction,
}

/// A listener a tenant has to itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A TCP port on the server's first `-l` address.
    Port(u16),
    /// A TCP address.
    Tcp(String, u16),
    /// A unix socket.
    Unix(PathBuf),
}

/// The checked file: tenants in file order, and which one takes requests no tenant claims
/// (`None`: an implicit tenant named `default`, sized by what the others leave).
#[derive(Debug, Clone, PartialEq)]
pub struct TenantsFile {
    pub tenants: Vec<TenantSpec>,
    pub default: Option<usize>,
}

/// The implicit tenant's name.
pub const DEFAULT_TENANT: &str = "default";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    prefixes: Vec<String>,
    #[serde(default)]
    listen: Vec<String>,
    region: Option<PathBuf>,
    min_mb: Option<f64>,
    max_mb: Option<f64>,
    size_mb: Option<f64>,
    priority: Option<f64>,
    slo_hit_ratio: Option<f64>,
    slo_latency_us: Option<f64>,
    hit_latency_us: Option<f64>,
    miss_latency_us: Option<f64>,
    slo_bandwidth_mb_s: Option<f64>,
    hit_bandwidth_mb_s: Option<f64>,
    miss_bandwidth_mb_s: Option<f64>,
    policy: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlFile {
    default: Option<String>,
    #[serde(default)]
    tenant: Vec<toml::Spanned<Entry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonFile {
    default: Option<String>,
    #[serde(default)]
    tenant: Vec<Entry>,
}

/// Reads and checks a tenants file against the memory limit (`-m`, bytes) and the size
/// partitions move in (`segment_bytes`).
pub fn load(path: &Path, memory_bytes: usize, segment_bytes: usize) -> Result<TenantsFile, String> {
    let text = shoal_textfile::read_text(path, "--tenants", shoal_textfile::DEFAULT_MAX_BYTES)?;
    parse(&text, path.extension().is_some_and(|e| e == "json"), memory_bytes, segment_bytes)
        .map_err(|e| format!("--tenants {}: {e}", path.display()))
}

/// Parses and checks a tenants file's text.
pub fn parse(
    text: &str,
    json: bool,
    memory_bytes: usize,
    segment_bytes: usize,
) -> Result<TenantsFile, String> {
    let (default, entries): (Option<String>, Vec<(Entry, String)>) = if json {
        let file: JsonFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let entries = file.tenant.into_iter().enumerate().map(|(i, e)| {
            let at = format!("tenant {} ({:?})", i + 1, e.name);
            (e, at)
        });
        (file.default, entries.collect())
    } else {
        let file: TomlFile = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
        let entries = file.tenant.into_iter().map(|e| {
            let line = text[..e.span().start].matches('\n').count() + 1;
            (e.into_inner(), format!("line {line}"))
        });
        (file.default, entries.collect())
    };
    if entries.is_empty() {
        return Err("no tenants: give at least one [[tenant]] table".into());
    }
    let mb = |v: f64| (v * (1u64 << 20) as f64) as usize;
    let least = MIN_SEGMENTS * segment_bytes;
    let mut tenants = Vec::new();
    let mut sized: Vec<Option<usize>> = Vec::new();
    for (e, at) in entries {
        let fail = |why: String| format!("{at}: tenant {:?}: {why}", e.name);
        check_name(&e.name).map_err(fail)?;
        if e.name == DEFAULT_TENANT && default.is_none() {
            return Err(fail(format!(
                "the name {DEFAULT_TENANT:?} is the implicit tenant's; call it something else or say default = {:?}",
                e.name
            )));
        }
        let min_bytes = e.min_mb.map_or(least, mb);
        let max_bytes = e.max_mb.map_or(memory_bytes, mb);
        if min_bytes < least {
            return Err(fail(format!("min_mb is under two segments ({} MiB)", least >> 20)));
        }
        if max_bytes > memory_bytes {
            return Err(fail(format!("max_mb is over the memory limit of {} MiB (-m)", memory_bytes >> 20)));
        }
        if min_bytes > max_bytes {
            return Err(fail("min_mb is over max_mb".into()));
        }
        let size = e.size_mb.map(mb);
        if size.is_some_and(|s| s < min_bytes || s > max_bytes) {
            return Err(fail("size_mb must lie between min_mb and max_mb".into()));
        }
        let priority = e.priority.unwrap_or(1.0);
        if !(priority.is_finite() && priority > 0.0) {
            return Err(fail("priority must be a positive number".into()));
        }
        let policy = e
            .policy
            .as_deref()
            .unwrap_or("fifo")
            .parse()
            .map_err(|e: shoal_region::UnknownEviction| fail(e.to_string()))?;
        let slo_hit_ratio = slo(&e).map_err(fail)?;
        let prefixes = e.prefixes.iter().map(|p| p.as_bytes().to_vec()).collect::<Vec<_>>();
        if let Some(p) = prefixes.iter().find(|p| p.is_empty() || p.len() > shoal_proto::KEY_MAX) {
            let max = shoal_proto::KEY_MAX;
            return Err(fail(format!("prefix {:?} must be 1 to {max} bytes", String::from_utf8_lossy(p))));
        }
        let listen = e.listen.iter().map(|l| parse_listen(l)).collect::<Result<Vec<_>, _>>().map_err(fail)?;
        sized.push(size);
        tenants.push((
            TenantSpec {
                name: e.name.clone(),
                users: e.users.clone(),
                prefixes,
                listen,
                region: e.region.clone(),
                min_bytes,
                max_bytes,
                size_bytes: size.unwrap_or(0),
                priority,
                slo_hit_ratio,
                policy,
            },
            at,
        ));
    }
    check_claims(&tenants)?;
    let default = match default {
        Some(name) => Some(
            tenants
                .iter()
                .position(|(t, _)| t.name == name)
                .ok_or_else(|| format!("default = {name:?} names no tenant"))?,
        ),
        None => None,
    };
    let mut tenants: Vec<TenantSpec> = tenants.into_iter().map(|(t, _)| t).collect();
    share_memory(&mut tenants, &sized, default.is_none(), memory_bytes, segment_bytes)?;
    Ok(TenantsFile { tenants, default })
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = (1..=32).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err("a name is 1 to 32 of A-Z a-z 0-9 _ -".into())
    }
}

/// The hit ratio a tenant's objective asks for: given, or from a latency or a bandwidth goal
/// (Moirai §3). Both are a cost a hit and a miss pay in different measure, averaged by the hit
/// ratio `h`: mean latency = h·hit + (1−h)·miss; time per byte read = h/hit bandwidth +
/// (1−h)/miss bandwidth. A goal is met when the mean costs at most the goal's.
fn slo(e: &Entry) -> Result<Option<f64>, String> {
    let latency = e.slo_latency_us.map(|goal| -> Result<f64, String> {
        let (Some(hit), Some(miss)) = (e.hit_latency_us, e.miss_latency_us) else {
            return Err("slo_latency_us needs hit_latency_us and miss_latency_us".into());
        };
        hit_ratio_for(goal, hit, miss).ok_or_else(|| {
            "latencies must satisfy 0 <= hit_latency_us <= slo_latency_us and hit < miss".into()
        })
    });
    let bandwidth = e.slo_bandwidth_mb_s.map(|goal| -> Result<f64, String> {
        let (Some(hit), Some(miss)) = (e.hit_bandwidth_mb_s, e.miss_bandwidth_mb_s) else {
            return Err("slo_bandwidth_mb_s needs hit_bandwidth_mb_s and miss_bandwidth_mb_s".into());
        };
        let valid = goal > 0.0 && miss > 0.0 && hit > 0.0;
        valid.then(|| hit_ratio_for(1.0 / goal, 1.0 / hit, 1.0 / miss)).flatten().ok_or_else(|| {
            "bandwidths must satisfy 0 < miss_bandwidth_mb_s < hit_bandwidth_mb_s and slo_bandwidth_mb_s <= hit".into()
        })
    });
    let ratio = match (e.slo_hit_ratio, latency, bandwidth) {
        (None, None, None) => return Ok(None),
        (Some(r), None, None) => r,
        (None, Some(r), None) | (None, None, Some(r)) => r?,
        _ => return Err("give one of slo_hit_ratio, slo_latency_us and slo_bandwidth_mb_s".into()),
    };
    if (0.0..=1.0).contains(&ratio) {
        Ok(Some(ratio))
    } else {
        Err(format!("slo_hit_ratio {ratio} must lie between 0 and 1"))
    }
}

/// The least hit ratio whose mean cost, `h·hit + (1−h)·miss`, is at most `goal`; `None` unless
/// `0 <= hit <= goal` and `hit < miss`.
fn hit_ratio_for(goal: f64, hit: f64, miss: f64) -> Option<f64> {
    (hit >= 0.0 && miss > hit && goal >= hit).then(|| ((miss - goal) / (miss - hit)).max(0.0))
}

fn parse_listen(text: &str) -> Result<Listen, String> {
    if text.contains('/') {
        return Ok(Listen::Unix(PathBuf::from(text)));
    }
    let port = |p: &str| {
        p.parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(|| {
            format!("listen {text:?}: a port (11312), host:port (127.0.0.1:11312) or a unix socket path")
        })
    };
    match text.rsplit_once(':') {
        Some((host, p)) => Ok(Listen::Tcp(host.trim_matches(['[', ']']).to_string(), port(p)?)),
        None => Ok(Listen::Port(port(text)?)),
    }
}

/// No prefix may be a prefix of another (a key would belong to two tenants), and no user or
/// listener may be claimed twice, nor a name used twice.
fn check_claims(tenants: &[(TenantSpec, String)]) -> Result<(), String> {
    let mut names = BTreeMap::new();
    let mut users = BTreeMap::new();
    let mut listeners: Vec<(&Listen, &str)> = Vec::new();
    let mut prefixes: Vec<(&[u8], &str, &str)> = Vec::new();
    for (t, at) in tenants {
        if let Some(first) = names.insert(t.name.as_str(), at.as_str()) {
            return Err(format!("{at}: the name {:?} is taken already ({first})", t.name));
        }
        for u in &t.users {
            if let Some(other) = users.insert(u.as_str(), t.name.as_str()) {
                return Err(format!("{at}: user {u:?} is tenant {other:?}'s already"));
            }
        }
        for l in &t.listen {
            if let Some((_, other)) = listeners.iter().find(|(m, _)| *m == l) {
                return Err(format!("{at}: listener {l:?} is tenant {other:?}'s already"));
            }
            listeners.push((l, t.name.as_str()));
        }
        for p in &t.prefixes {
            for (q, other, other_at) in &prefixes {
                if p.starts_with(q) || q.starts_with(p) {
                    return Err(format!(
                        "{at}: prefix {:?} of tenant {:?} overlaps prefix {:?} of tenant {other:?} ({other_at}): \
                         a key would belong to both",
                        String::from_utf8_lossy(p),
                        t.name,
                        String::from_utf8_lossy(q)
                    ));
                }
            }
            prefixes.push((p, t.name.as_str(), at.as_str()));
        }
    }
    Ok(())
}

/// Gives every tenant without `size_mb` an equal share of what the sized ones leave (the
/// implicit default tenant, if any, sharing too), clamped to its bounds, in whole segments;
/// then checks that everything fits the memory limit. The implicit tenant is appended.
fn share_memory(
    tenants: &mut Vec<TenantSpec>,
    sized: &[Option<usize>],
    implicit_default: bool,
    memory_bytes: usize,
    segment_bytes: usize,
) -> Result<(), String> {
    let whole = |b: usize| b / segment_bytes * segment_bytes;
    let given: usize = sized.iter().flatten().sum();
    let sharers = sized.iter().filter(|s| s.is_none()).count() + usize::from(implicit_default);
    let share = memory_bytes.saturating_sub(given).checked_div(sharers).unwrap_or(0);
    for (t, size) in tenants.iter_mut().zip(sized) {
        t.size_bytes = whole(size.unwrap_or(share).clamp(t.min_bytes, t.max_bytes)).max(t.min_bytes);
    }
    let mins: usize = tenants.iter().map(|t| t.min_bytes).sum();
    let used: usize = tenants.iter().map(|t| t.size_bytes).sum();
    let least = MIN_SEGMENTS * segment_bytes;
    if mins + if implicit_default { least } else { 0 } > memory_bytes {
        return Err(format!(
            "the tenants' min_mb add up to {} MiB, over the memory limit of {} MiB (-m)",
            mins >> 20,
            memory_bytes >> 20
        ));
    }
    if used > memory_bytes {
        return Err(format!(
            "the tenants' sizes add up to {} MiB, over the memory limit of {} MiB (-m): lower size_mb or min_mb, or raise -m",
            used >> 20,
            memory_bytes >> 20
        ));
    }
    if implicit_default {
        let left = whole(memory_bytes - used);
        if left < least {
            return Err(format!(
                "the tenants' sizes leave {} MiB of the {} MiB memory limit (-m) for keys no tenant claims, under the \
                 two segments a tenant needs: lower the sizes, or name one tenant with default = \"<name>\"",
                left >> 20,
                memory_bytes >> 20
            ));
        }
        tenants.push(TenantSpec {
            name: DEFAULT_TENANT.to_string(),
            users: Vec::new(),
            prefixes: Vec::new(),
            listen: Vec::new(),
            region: None,
            min_bytes: least,
            max_bytes: memory_bytes,
            size_bytes: left,
            priority: 1.0,
            slo_hit_ratio: None,
            policy: shoal_region::Eviction::default(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: usize = 1 << 20;

    fn toml(text: &str) -> Result<TenantsFile, String> {
        parse(text, false, 64 * MB, MB)
    }

    #[test]
    fn a_full_file_parses_and_the_implicit_default_takes_what_is_left() {
        let file = toml(
            r#"
[[tenant]]
name = "web"
users = ["www"]
prefixes = ["web:"]
listen = ["11312", "/tmp/web.sock", "127.0.0.1:11313"]
min_mb = 4
max_mb = 32
size_mb = 16
priority = 2.0
slo_hit_ratio = 0.9
policy = "lru"

[[tenant]]
name = "batch"
prefixes = ["batch:"]
slo_latency_us = 300
hit_latency_us = 100
miss_latency_us = 2100

[[tenant]]
name = "video"
prefixes = ["v:"]
slo_bandwidth_mb_s = 400
hit_bandwidth_mb_s = 1000
miss_bandwidth_mb_s = 100
"#,
        )
        .unwrap();
        assert_eq!(file.default, None);
        let names: Vec<_> = file.tenants.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["web", "batch", "video", "default"]);
        let web = &file.tenants[0];
        assert_eq!((web.min_bytes, web.max_bytes, web.size_bytes), (4 * MB, 32 * MB, 16 * MB));
        assert_eq!(web.policy, "lru".parse().unwrap());
        assert_eq!(
            web.listen,
            [
                Listen::Port(11312),
                Listen::Unix("/tmp/web.sock".into()),
                Listen::Tcp("127.0.0.1".into(), 11313)
            ]
        );
        // The 48 MiB left are shared by batch, video and the implicit default.
        assert!(file.tenants[1..].iter().all(|t| t.size_bytes == 16 * MB));
        // (2100 − 300) / (2100 − 100)
        assert!((file.tenants[1].slo_hit_ratio.unwrap() - 0.9).abs() < 1e-9);
        // Time per byte: (1/100 − 1/400) / (1/100 − 1/1000)
        assert!((file.tenants[2].slo_hit_ratio.unwrap() - 0.75 / 0.9).abs() < 1e-9);
    }

    #[test]
    fn json_files_parse_the_same() {
        let file = parse(
            r#"{"default": "a", "tenant": [{"name": "a", "size_mb": 40}, {"name": "b", "prefixes": ["b:"]}]}"#,
            true,
            64 * MB,
            MB,
        )
        .unwrap();
        assert_eq!(file.default, Some(0));
        assert_eq!(file.tenants.len(), 2);
        assert_eq!(file.tenants[1].size_bytes, 24 * MB);
    }

    #[test]
    fn bad_files_are_refused_naming_the_line() {
        let cases = [
            ("[[tenant]]\nname = \"a\"\npolicy = \"random\"\n", "line 1", "fifo"),
            ("[[tenant]]\nname = \"a\"\n\n[[tenant]]\nname = \"b\"\nprefixes = [\"a:\"]\n[[tenant]]\nname = \"c\"\nprefixes = [\"a:b\"]\n", "line 7", "overlaps"),
            ("[[tenant]]\nname = \"a\"\nsize_mb = 70\n", "line 1", "between"),
            ("[[tenant]]\nname = \"a\"\nsize_mb = 40\n[[tenant]]\nname = \"b\"\nsize_mb = 30\n", "", "add up to 70 MiB"),
            ("[[tenant]]\nname = \"a\"\nsize_mb = 63\n", "", "leave 1 MiB"),
            ("[[tenant]]\nname = \"a\"\ncolour = \"red\"\n", "line 3", "unknown field"),
            ("[[tenant]]\nname = \"a\"\n[[tenant]]\nname = \"a\"\n", "line 3", "taken already"),
            ("[[tenant]]\nname = \"a b\"\n", "line 1", "a name is"),
            ("[[tenant]]\nname = \"a\"\nusers = [\"u\"]\n[[tenant]]\nname = \"b\"\nusers = [\"u\"]\n", "line 4", "user"),
            ("[[tenant]]\nname = \"a\"\nlisten = [\"http\"]\n", "line 1", "a port"),
            ("[[tenant]]\nname = \"a\"\nslo_hit_ratio = 1.5\n", "line 1", "between 0 and 1"),
            ("[[tenant]]\nname = \"a\"\nslo_latency_us = 5\n", "line 1", "needs hit_latency_us"),
            ("[[tenant]]\nname = \"a\"\nslo_bandwidth_mb_s = 5\nhit_bandwidth_mb_s = 9\n", "line 1", "needs hit_bandwidth_mb_s and miss"),
            ("[[tenant]]\nname = \"a\"\nslo_bandwidth_mb_s = 50\nhit_bandwidth_mb_s = 40\nmiss_bandwidth_mb_s = 10\n", "line 1", "bandwidths must"),
            ("[[tenant]]\nname = \"a\"\nslo_bandwidth_mb_s = 0\nhit_bandwidth_mb_s = 40\nmiss_bandwidth_mb_s = 10\n", "line 1", "bandwidths must"),
            ("[[tenant]]\nname = \"a\"\nslo_hit_ratio = 0.5\nslo_latency_us = 5\n", "line 1", "give one of"),
            ("default = \"z\"\n[[tenant]]\nname = \"a\"\n", "", "names no tenant"),
            ("[[tenant]\nname = \"a\"\n", "line 1", ""),
            ("", "", "no tenants"),
        ];
        for (text, at, why) in cases {
            let error = toml(text).expect_err(text);
            assert!(error.contains(at) && error.contains(why), "{text:?} gave {error:?}");
        }
    }

    #[test]
    fn a_named_default_takes_unclaimed_keys_and_no_implicit_tenant_is_added() {
        let file = toml("default = \"a\"\n[[tenant]]\nname = \"a\"\n[[tenant]]\nname = \"b\"\n").unwrap();
        assert_eq!(file.default, Some(0));
        assert_eq!(file.tenants.iter().map(|t| t.size_bytes).collect::<Vec<_>>(), [32 * MB, 32 * MB]);
    }
}
