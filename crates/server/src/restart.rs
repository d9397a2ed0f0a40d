//! memcached's restart metadata beside `-e FILE`: `FILE.meta`, in memcached's format (a tag
//! line `T<tag>`, then `K<key> <value>` lines), written at a graceful stop and read at the
//! next start.
//!
//! ```text
//!  start with -e FILE ──► FILE.meta absent ──► the region decides (Shoal's own warm restart,
//!                     │                        after any stop, a crash included)
//!                     ├─► empty or not memcached's format ──► refuse to start (memcached aborts)
//!                     ├─► settings recorded ≠ this start's ──► start with a clean cache
//!                     └─► the same settings ──► warm restart
//!                     (read or not, the file is removed: it describes one stop only)
//!  graceful stop (SIGUSR1, `shutdown graceful`) ──► region detached ──► FILE.meta written
//! ```

use crate::config::Settings;
use std::path::{Path, PathBuf};

/// The tag of Shoal's section of the file.
const TAG: &str = "shoal";

/// The settings a warm restart must find unchanged, as memcached's `.meta` records them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    /// The region file (`-e`).
    region: PathBuf,
    /// `-m`, as the region holds it.
    maxbytes: usize,
    /// `-I`.
    item_size_max: usize,
    /// `-C` turns it off.
    use_cas: bool,
}

impl Meta {
    /// The settings of a region at `region`.
    pub fn new(region: PathBuf, maxbytes: usize, item_size_max: usize, use_cas: bool) -> Meta {
        Meta { region, maxbytes, item_size_max, use_cas }
    }

    /// What this start's settings would record; `None` without `-e` (or with tenants, each of
    /// which has its own region).
    pub fn of(settings: &Settings) -> Option<Meta> {
        let region = settings.region_path.clone().filter(|_| settings.tenants_file.is_none())?;
        Some(Meta {
            region,
            maxbytes: settings.region_bytes,
            item_size_max: settings.max_item_bytes,
            use_cas: settings.use_cas,
        })
    }

    /// `FILE.meta` beside the region file.
    fn path(&self) -> PathBuf {
        meta_path(&self.region)
    }

    /// The file's text.
    fn render(&self, stop_time: u64) -> String {
        format!(
            "T{TAG}\nKmaxbytes {}\nKitem_size_max {}\nKuse_cas {}\nKstop_time {stop_time}\n",
            self.maxbytes, self.item_size_max, self.use_cas
        )
    }

    /// Writes `FILE.meta` (mode 0600, as memcached's), after a graceful stop has detached the
    /// region. A failure is reported and the stop goes on: the next start is then Shoal's own
    /// warm restart from the region.
    pub fn save(&self) {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let path = self.path();
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| f.write_all(self.render(now).as_bytes()));
        if let Err(e) = written {
            eprintln!("[restart] failed to write metadata file {}: {e}", path.display());
        }
    }
}

/// `FILE.meta` for region file `FILE`.
fn meta_path(region: &Path) -> PathBuf {
    let mut name = region.as_os_str().to_owned();
    name.push(".meta");
    PathBuf::from(name)
}

/// What a start does with the region, given the metadata file.
#[derive(Debug, PartialEq, Eq)]
pub enum Restart {
    /// No metadata file: the region file, if any, is attached as it is.
    Region,
    /// The recorded settings are this start's: warm restart.
    Warm,
    /// They differ (the first that does is named): the region starts empty.
    Clean(String),
}

/// Reads the text of a metadata file against this start's settings: `Err` if it is not
/// memcached's format (empty included), as memcached refuses to start on one.
pub fn judge(text: &str, want: &Meta) -> Result<Restart, String> {
    let mut lines = text.lines();
    match lines.next() {
        Some(tag) if tag.strip_prefix('T').is_some_and(|t| !t.is_empty()) => {
            if tag != format!("T{TAG}") {
                return Ok(Restart::Clean(format!("tag {tag:?}")));
            }
        }
        _ => return Err("[restart] corrupt metadata file".into()),
    }
    let recorded = want.render(0);
    for line in lines {
        let Some((key, value)) = line.strip_prefix('K').and_then(|kv| kv.split_once(' ')) else {
            return Err(format!("[restart] invalid metadata line: {line:?}"));
        };
        if key == "stop_time" {
            continue;
        }
        let mine = recorded.lines().find_map(|l| l.strip_prefix('K')?.strip_prefix(key)?.strip_prefix(' '));
        if mine != Some(value) {
            return Ok(Restart::Clean(format!(
                "[restart] restart incompatible due to setting for [{key}] [old value: {value}]"
            )));
        }
    }
    Ok(Restart::Warm)
}

/// Before anything is created: reads and removes `FILE.meta` (if there is one) and, if the
/// settings it records differ, removes the region file so that this start creates it afresh.
/// An unreadable metadata file stops the start.
pub fn check(settings: &Settings) -> Result<Restart, String> {
    let Some(want) = Meta::of(settings) else { return Ok(Restart::Region) };
    let path = want.path();
    let text = match std::fs::read(&path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Restart::Region),
        Err(e) => return Err(format!("[restart] could not read {}: {e}", path.display())),
    };
    let verdict = judge(&text, &want).map_err(|why| format!("{why} ({})", path.display()))?;
    // memcached removes it once read: it describes the stop that wrote it, no later one.
    std::fs::remove_file(&path).map_err(|e| format!("[restart] could not remove {}: {e}", path.display()))?;
    if let Restart::Clean(why) = &verdict {
        eprintln!("{why}: starting with a clean cache");
        match std::fs::remove_file(&want.region) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("could not remove {}: {e}", want.region.display())),
        }
    }
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Meta {
        Meta { region: PathBuf::from("/tmp/r"), maxbytes: 128 << 20, item_size_max: 2 << 20, use_cas: true }
    }

    #[test]
    fn the_file_beside_the_region() {
        assert_eq!(meta_path(Path::new("/tmp/mc_restart.7")), Path::new("/tmp/mc_restart.7.meta"));
    }

    #[test]
    fn what_a_graceful_stop_writes_restarts_warm() {
        let m = meta();
        assert_eq!(judge(&m.render(1_700_000_000), &m), Ok(Restart::Warm));
    }

    #[test]
    fn changed_settings_start_clean() {
        let old = Meta { maxbytes: 64 << 20, ..meta() };
        let Ok(Restart::Clean(why)) = judge(&old.render(1), &meta()) else { panic!() };
        assert!(why.contains("[maxbytes] [old value: 67108864]"), "{why}");
        let old = Meta { use_cas: false, ..meta() };
        assert!(matches!(judge(&old.render(1), &meta()), Ok(Restart::Clean(_))));
        // Another program's section (memcached's own `Tmc`) is not ours to reuse.
        assert!(matches!(judge("Tmc\nKmaxbytes 1\n", &meta()), Ok(Restart::Clean(_))));
    }

    #[test]
    fn an_empty_or_damaged_file_stops_the_start() {
        for bad in ["", "\n", "garbage\n", "T\n", "Tshoal\nmaxbytes 1\n", "Tshoal\nKmaxbytes\n"] {
            assert!(judge(bad, &meta()).is_err(), "{bad:?}");
        }
    }
}
