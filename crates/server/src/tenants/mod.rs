//! Tenants (issue 16, Moirai): partitions of the server's memory, each a region of its own.
//!
//! ```text
//!  connection ── bound by its listener, else by its user ──► tenant i
//!  unbound connection: each key ── longest-free prefix match ──► tenant j, else the default
//!  tenant: Writer (its own region file, created at max size, sparse; the limit is its size)
//!          CurveTracker (SHARDS over its reads)  ·  counters per worker
//!  tenant_memlimit <t> <bytes> ──► Writer::set_limit, checked against min/max and -m
//! ```
//!
//! A server without `--tenants` has one tenant, `default`, over the region it always had, so
//! every command path is the same with and without tenants. A region of its own per tenant
//! means the file's owner, group and mode keep one tenant's local readers out of another's
//! items, and a tenant's eviction never touches another's.

pub mod file;

use crate::config::Settings;
use crate::curve::CurveTracker;
use file::{TenantSpec, TenantsFile, DEFAULT_TENANT};
use shoal_curves::HitRatioCurve;
use shoal_region::{Config, Stats, Writer};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// One tenant's request counters in one worker (summed by `stats tenants`).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct TenantCounters {
    pub cmd_get: AtomicU64,
    pub get_hits: AtomicU64,
    pub get_misses: AtomicU64,
    pub cmd_set: AtomicU64,
    /// Reads the tenant's curve screened out (see [`CurveTracker::access`]); never reset.
    pub curve_unsampled: AtomicU64,
}

impl TenantCounters {
    /// Every counter with its `stats tenants` name.
    pub fn each(&self) -> [(&'static str, &AtomicU64); 4] {
        [
            ("cmd_get", &self.cmd_get),
            ("get_hits", &self.get_hits),
            ("get_misses", &self.get_misses),
            ("cmd_set", &self.cmd_set),
        ]
    }
}

/// One tenant: what the file said, its region, its curve.
pub struct Tenant {
    pub spec: TenantSpec,
    pub writer: Writer,
    /// Its hit-ratio curve (always with `--tenants`; with `--hit-curve` otherwise).
    pub curve: Option<CurveTracker>,
}

/// Every tenant, and how requests find theirs.
pub struct Tenants {
    list: Vec<Tenant>,
    default: usize,
    /// Which tenant a key's prefix names, for connections bound to no tenant.
    prefixes: Prefixes,
    users: HashMap<Vec<u8>, usize>,
    /// Whether a tenants file was given.
    configured: bool,
    /// Region files the server made up and removes at stop (no `-e`).
    temporary: bool,
    /// One resize at a time, so two cannot both pass the check against `-m`.
    resizing: Mutex<()>,
    /// What `lru_crawler crawl` looked at and unlinked, over every tenant (`stats`'
    /// `crawler_items_checked` and `crawler_reclaimed`).
    pub crawled: Crawled,
}

/// Totals of `lru_crawler crawl`'s sweeps.
#[derive(Default)]
pub struct Crawled {
    pub checked: AtomicU64,
    pub reclaimed: AtomicU64,
}

/// Key prefixes and their tenants. Every key of every get is looked up here, and most keys
/// have none of the prefixes: a bit per possible first byte turns those away before any
/// compare.
#[derive(Default)]
struct Prefixes {
    /// Bit `b` is set when some prefix starts with byte `b`.
    first_bytes: [u64; 4],
    /// (prefix, tenant); prefixes do not overlap (the file's check), so at most one matches.
    list: Vec<(Vec<u8>, usize)>,
}

impl Prefixes {
    fn new(list: impl IntoIterator<Item = (Vec<u8>, usize)>) -> Prefixes {
        let list: Vec<(Vec<u8>, usize)> = list.into_iter().collect();
        let mut first_bytes = [0u64; 4];
        for &b in list.iter().filter_map(|(p, _)| p.first()) {
            first_bytes[usize::from(b >> 6)] |= 1 << (b & 63);
        }
        Prefixes { first_bytes, list }
    }

    /// The tenant whose prefix `key` has, if any.
    #[inline]
    fn tenant_of(&self, key: &[u8]) -> Option<usize> {
        let &b = key.first()?;
        if self.first_bytes[usize::from(b >> 6)] & (1 << (b & 63)) == 0 {
            return None;
        }
        self.list.iter().find(|(p, _)| key.starts_with(p)).map(|&(_, t)| t)
    }
}

/// Where the region lives when no `-e` file is named: a fresh file in /dev/shm named after
/// the process, removed when the server stops.
fn default_region_path() -> PathBuf {
    PathBuf::from(format!("/dev/shm/shoal-{}.region", std::process::id()))
}

/// A tenant's region beside the server's own: `<stem>-<tenant>.<extension>`.
fn tenant_region_path(base: &Path, tenant: &str) -> PathBuf {
    let stem = base.file_stem().map_or_else(|| "shoal".into(), |s| s.to_string_lossy().into_owned());
    let name = match base.extension() {
        Some(ext) => format!("{stem}-{tenant}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{tenant}"),
    };
    base.with_file_name(name)
}

/// Removes default regions left by servers that were killed (their pid is gone), so that
/// killed servers do not leak memory in /dev/shm (`shoal-<pid>.region`, their tenants'
/// `shoal-<pid>-<tenant>.region`, and the handoff socket `shoal-<pid>.region.hints`).
fn sweep_orphaned_regions() {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else { return };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let rest = |suffix: &str| name.to_str()?.strip_prefix("shoal-")?.strip_suffix(suffix);
        let Some(rest) = rest(".region").or_else(|| rest(".region.hints")) else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or("");
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

impl Tenants {
    /// Reads and checks the tenants file, if `--tenants` named one (before anything is bound
    /// or created, so a bad file stops the start with nothing to undo).
    pub fn read_file(settings: &Settings) -> Result<Option<TenantsFile>, String> {
        let Some(path) = &settings.tenants_file else { return Ok(None) };
        let layout =
            region_config(settings, settings.region_bytes).layout().map_err(|e| format!("-m: {e}"))?;
        file::load(path, settings.region_bytes, layout.segment_bytes).map(Some)
    }

    /// Opens (or creates) every tenant's region: without a tenants file, the one region the
    /// server always had.
    pub fn open(settings: &Settings, file: Option<TenantsFile>) -> Result<Tenants, String> {
        let temporary = settings.region_path.is_none();
        if temporary {
            sweep_orphaned_regions();
        }
        let base = settings.region_path.clone().unwrap_or_else(default_region_path);
        let file = match file {
            Some(file) => file,
            None => {
                let writer = open_writer(&base, &settings.region_config(), settings, temporary)?;
                settings.prepare_region(&writer)?;
                let spec = TenantSpec {
                    name: DEFAULT_TENANT.into(),
                    users: Vec::new(),
                    prefixes: Vec::new(),
                    listen: Vec::new(),
                    region: None,
                    min_bytes: 0,
                    max_bytes: writer.stats().region_bytes,
                    size_bytes: writer.stats().region_bytes,
                    priority: 1.0,
                    slo_hit_ratio: None,
                    policy: shoal_region::Eviction::default(),
                };
                let curve = settings.hit_curve.then(|| {
                    CurveTracker::new(writer.stats().region_bytes as u64, writer.layout().hash_seed)
                });
                return Ok(Tenants {
                    list: vec![Tenant { spec, writer, curve }],
                    default: 0,
                    prefixes: Prefixes::default(),
                    users: HashMap::new(),
                    configured: false,
                    temporary,
                    resizing: Mutex::new(()),
                    crawled: Crawled::default(),
                });
            }
        };
        Tenants::from_file(file, &base, settings, temporary)
    }

    fn from_file(
        file: TenantsFile,
        base: &Path,
        settings: &Settings,
        temporary: bool,
    ) -> Result<Tenants, String> {
        let default = file.default.unwrap_or(file.tenants.len() - 1);
        let mut list: Vec<Tenant> = Vec::new();
        for (i, mut spec) in file.tenants.into_iter().enumerate() {
            let path = match &spec.region {
                Some(path) => path.clone(),
                None if i == default => base.to_path_buf(),
                None => tenant_region_path(base, &spec.name),
            };
            let writer = open_writer(&path, &region_config(settings, spec.max_bytes), settings, temporary)
                .map_err(|e| format!("tenant {:?}: {e}", spec.name))?;
            // Sizes are item memory in whole segments, as the region counts it.
            let most = writer.stats().segments * writer.stats().segment_bytes;
            spec.max_bytes = spec.max_bytes.min(most);
            spec.size_bytes = spec.size_bytes.min(most);
            writer.set_eviction(spec.policy);
            if let Some(ttl) = settings.temporary_ttl {
                writer.set_temporary_ttl(ttl);
            }
            writer.set_limit(spec.size_bytes).map_err(|e| format!("tenant {:?}: {e}", spec.name))?;
            let curve = Some(CurveTracker::new(spec.max_bytes as u64, writer.layout().hash_seed));
            list.push(Tenant { spec, writer, curve });
        }
        let prefixes = Prefixes::new(
            list.iter().enumerate().flat_map(|(i, t)| t.spec.prefixes.iter().map(move |p| (p.clone(), i))),
        );
        let users = list
            .iter()
            .enumerate()
            .flat_map(|(i, t)| t.spec.users.iter().map(move |u| (u.as_bytes().to_vec(), i)))
            .collect();
        Ok(Tenants {
            list,
            default,
            prefixes,
            users,
            configured: true,
            temporary,
            resizing: Mutex::new(()),
            crawled: Crawled::default(),
        })
    }

    /// Every tenant, in file order.
    pub fn all(&self) -> &[Tenant] {
        &self.list
    }

    /// Tenant `i`.
    #[inline]
    pub fn get(&self, i: usize) -> &Tenant {
        &self.list[i]
    }

    /// The tenant that takes what no other claims (the only one without `--tenants`).
    pub fn default_tenant(&self) -> &Tenant {
        &self.list[self.default]
    }

    /// The tenant named `name`.
    pub fn by_name(&self, name: &[u8]) -> Option<&Tenant> {
        self.index_of(name).map(|i| &self.list[i])
    }

    /// The index of the tenant named `name`.
    pub fn index_of(&self, name: &[u8]) -> Option<usize> {
        self.list.iter().position(|t| t.spec.name.as_bytes() == name)
    }

    /// The index of the default tenant.
    pub fn default_index(&self) -> usize {
        self.default
    }

    /// Tenant `i`'s curve now, in its region's bytes, its sampling rate and the keys tracked
    /// (`None`: curves off), with the screened-out reads `counters` hold folded in.
    pub fn curve(&self, i: usize, counters: &[Box<[TenantCounters]>]) -> Option<(HitRatioCurve, f64, usize)> {
        let tenant = &self.list[i];
        let tracker = tenant.curve.as_ref()?;
        Some(tracker.curve(unsampled_total(counters, i), &tenant.writer.stats()))
    }

    /// The tenant an authenticated user's connections are bound to.
    pub fn of_user(&self, user: &[u8]) -> Option<usize> {
        self.users.get(user).copied()
    }

    /// The tenant whose `key` it is: the connection's, if it is bound to one; else the one
    /// whose prefix it has; else the default.
    #[inline]
    pub fn of_key(&self, bound: Option<usize>, key: &[u8]) -> usize {
        if let Some(t) = bound {
            return t;
        }
        self.prefixes.tenant_of(key).unwrap_or(self.default)
    }

    /// The tenant whose region a connection's client may read locally: the one it is bound
    /// to, else the default — unless keys go to tenants by prefix, when a client reading one
    /// region would take another tenant's keys for misses.
    pub fn local_tenant(&self, bound: Option<usize>) -> Option<usize> {
        bound.or((self.prefixes.list.is_empty()).then_some(self.default))
    }

    /// Whether a tenants file was given.
    pub fn configured(&self) -> bool {
        self.configured
    }

    /// Ages every tenant's curve by `factor` (see [`CurveTracker::age`]).
    pub fn age_curves(&self, factor: f64, counters: &[Box<[TenantCounters]>]) {
        let now = self.clock();
        for (i, t) in self.list.iter().enumerate() {
            if let Some(tracker) = &t.curve {
                tracker.age(factor, unsampled_total(counters, i), now);
            }
        }
    }

    /// Publishes the clock to every region.
    pub fn tick(&self, now: u32) {
        for t in &self.list {
            if t.writer.clock() != now {
                t.writer.tick(now);
            }
        }
    }

    /// The server clock the regions judge expiry by (all are ticked together).
    #[inline]
    pub fn clock(&self) -> u32 {
        self.list[self.default].writer.clock()
    }

    /// The store's numbers summed over tenants (for `stats`).
    pub fn store_stats(&self) -> Stats {
        let mut all = self.list[0].writer.stats();
        for t in &self.list[1..] {
            all += &t.writer.stats();
        }
        all
    }

    /// The memory all tenants may use now, bytes (their limits summed).
    pub fn limit_bytes(&self) -> usize {
        self.list.iter().map(|t| t.writer.limit_bytes()).sum()
    }

    /// `tenant_memlimit`: gives tenant `name` `bytes` of memory (whole segments), within its
    /// bounds and with all tenants' sizes within `memory_bytes` (`-m`). Shrinking evicts its
    /// oldest segments; the items in the rest stay.
    pub fn resize(&self, name: &[u8], bytes: u64, memory_bytes: usize) -> Result<(), String> {
        let _one_at_a_time = self.resizing.lock().unwrap_or_else(|p| p.into_inner());
        let tenant =
            self.by_name(name).ok_or_else(|| format!("no tenant named {}", String::from_utf8_lossy(name)))?;
        let spec = &tenant.spec;
        let segment = tenant.writer.stats().segment_bytes;
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX) / segment * segment;
        if bytes < spec.min_bytes.max(shoal_region::MIN_LIMIT_SEGMENTS * segment) {
            return Err(format!(
                "{bytes} bytes is under tenant {}'s minimum of {}",
                spec.name, spec.min_bytes
            ));
        }
        if bytes > spec.max_bytes {
            return Err(format!(
                "{bytes} bytes is over tenant {}'s maximum of {}",
                spec.name, spec.max_bytes
            ));
        }
        let others = self.limit_bytes() - tenant.writer.limit_bytes();
        if others + bytes > memory_bytes {
            return Err(format!(
                "tenants would hold {} bytes, over the memory limit of {memory_bytes} (-m): shrink another first",
                others + bytes
            ));
        }
        tenant.writer.set_limit(bytes).map(|_| ()).map_err(|e| e.to_string())
    }

    /// The region files to remove at stop (those the server made up), all of them.
    pub fn temporary_files(&self) -> Vec<PathBuf> {
        if self.temporary {
            self.list.iter().map(|t| t.writer.path().to_path_buf()).collect()
        } else {
            Vec::new()
        }
    }
}

/// A region of `region_bytes` for the items the settings allow.
fn region_config(settings: &Settings, region_bytes: usize) -> Config {
    Config { region_bytes, max_item_bytes: settings.max_item_bytes, avg_item_bytes: settings.avg_item_bytes }
}

fn open_writer(path: &Path, config: &Config, settings: &Settings, fresh: bool) -> Result<Writer, String> {
    let opened = if fresh {
        Writer::create(path, config, settings.evict)
    } else {
        Writer::open_or_create(path, config, settings.evict)
    };
    opened.map_err(|e| format!("region {}: {e}", path.display()))
}

/// Tenant `tenant`'s reads its curve screened out, over every worker.
fn unsampled_total(counters: &[Box<[TenantCounters]>], tenant: usize) -> u64 {
    counters.iter().map(|row| row[tenant].curve_unsampled.load(Ordering::Relaxed)).sum()
}

/// Sums tenant `tenant`'s counters over every worker, in [`TenantCounters::each`]'s order.
pub fn totals(counters: &[Box<[TenantCounters]>], tenant: usize) -> [(&'static str, u64); 4] {
    let mut sums = TenantCounters::default().each().map(|(name, _)| (name, 0));
    for row in counters {
        for (sum, (_, counter)) in sums.iter_mut().zip(row[tenant].each()) {
            sum.1 += counter.load(Ordering::Relaxed);
        }
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_regions_sit_beside_the_servers() {
        assert_eq!(
            tenant_region_path(Path::new("/dev/shm/shoal-7.region"), "web"),
            Path::new("/dev/shm/shoal-7-web.region")
        );
        assert_eq!(tenant_region_path(Path::new("/var/cache/r"), "a"), Path::new("/var/cache/r-a"));
    }

    #[test]
    fn a_key_goes_to_the_tenant_whose_prefix_it_has() {
        let prefixes = Prefixes::new([(b"web:".to_vec(), 1), (b"w".to_vec(), 2), (vec![0xff, b'x'], 3)]);
        assert_eq!(prefixes.tenant_of(b"web:1"), Some(1));
        assert_eq!(prefixes.tenant_of(b"wx"), Some(2));
        assert_eq!(prefixes.tenant_of(&[0xff, b'x', b'1']), Some(3));
        for none in [&b""[..], b"key:1", b"Web:1", &[0xff, b'y'], &[0x7f]] {
            assert_eq!(prefixes.tenant_of(none), None, "{none:?}");
        }
        assert_eq!(Prefixes::default().tenant_of(b"web:1"), None);
    }
}
