//! Creating, formatting and attaching to a region file, and what attaching rebuilds: crash
//! recovery of half-finished writes and the in-process segment pool.

use super::*;

impl Writer {
    /// Creates a new region file at `path` (which must not exist) and attaches to it.
    pub fn create(path: impl AsRef<Path>, config: &Config, evict: bool) -> Result<Writer, RegionError> {
        let path = path.as_ref();
        config.layout()?; // an impossible configuration must not leave an empty file behind
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(io_err(path, "create"))?;
        Self::format_file(file, path, config, evict)
    }

    /// Initialises a region in an existing file or device at `path`, discarding what was there.
    pub fn format(path: impl AsRef<Path>, config: &Config, evict: bool) -> Result<Writer, RegionError> {
        let path = path.as_ref();
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(io_err(path, "open"))?;
        Self::format_file(file, path, config, evict)
    }

    /// Creates a region in an anonymous memory file (memfd). Other processes open it through
    /// [`Writer::path`], a `/proc/<pid>/fd/<n>` path valid while this process lives.
    pub fn create_anonymous(config: &Config, evict: bool) -> Result<Writer, RegionError> {
        let name = c"shoal-region";
        // SAFETY: memfd_create with a valid NUL-terminated name; the result is checked.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), 0) };
        let path = PathBuf::from(format!("/proc/{}/fd/{fd}", std::process::id()));
        if fd < 0 {
            return Err(io_err(&path, "create memfd")(std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        Self::format_file(file, &path, config, evict)
    }

    pub(super) fn format_file(
        mut file: File,
        path: &Path,
        config: &Config,
        evict: bool,
    ) -> Result<Writer, RegionError> {
        if !lock_exclusive(&file) {
            return Err(RegionError::InUse { pid: Self::recorded_pid(&file, path) });
        }
        let mut layout = config.layout()?;
        let (size, regular) = file_size(&mut file, path)?;
        if regular {
            // Truncating to zero first also discards any old contents.
            file.set_len(0).map_err(io_err(path, "resize"))?;
            file.set_len(layout.region_bytes as u64).map_err(io_err(path, "resize"))?;
        } else if size < layout.region_bytes {
            return Err(RegionError::Config(format!(
                "device {} has {size} bytes, fewer than the {} requested",
                path.display(),
                layout.region_bytes
            )));
        }
        let [seed, cookie] = random_u64s().map_err(io_err(Path::new("/dev/urandom"), "read"))?;
        layout.hash_seed = seed;
        layout.cookie = cookie;
        let map =
            crate::mapping::Mapping::map(file, layout.region_bytes, true).map_err(io_err(path, "map"))?;
        if !regular {
            // A device keeps old bytes: clear the header, index and segment table.
            map.write(0, &vec![0u8; layout.segments_offset]);
        }
        let region = Region { map, layout };
        let h = region.header();
        region.layout.store(h);
        let now = unix_now();
        h.clock.store(now, Ordering::Relaxed);
        h.created_unix.store(now, Ordering::Relaxed);
        h.next_segment_gen.store(1, Ordering::Relaxed);
        h.clean.store(1, Ordering::Relaxed);
        // The magic goes last: a region whose creation was interrupted has none.
        h.magic.store(MAGIC, Ordering::Release);
        Self::start(region, path, evict, true)
    }

    /// Attaches to an existing region, recovering it if its last writer crashed.
    pub fn open(path: impl AsRef<Path>, evict: bool) -> Result<Writer, RegionError> {
        let path = path.as_ref();
        let mut file = OpenOptions::new().read(true).write(true).open(path).map_err(io_err(path, "open"))?;
        if !lock_exclusive(&file) {
            return Err(RegionError::InUse { pid: Self::recorded_pid(&file, path) });
        }
        let (size, exact) = file_size(&mut file, path)?;
        let region = Region::attach(file, size, true, path, exact)?;
        Self::start(region, path, evict, false)
    }

    /// Attaches to the region at `path` if there is one (it must match `config`), else
    /// creates it: what `shoal server -e <file>` does.
    pub fn open_or_create(
        path: impl AsRef<Path>,
        config: &Config,
        evict: bool,
    ) -> Result<Writer, RegionError> {
        let path = path.as_ref();
        if !path.exists() {
            return Self::create(path, config, evict);
        }
        let writer = Self::open(path, evict)?;
        let want = config.layout()?;
        let have = &writer.region.layout;
        if want.region_bytes != have.region_bytes || want.max_item_bytes != have.max_item_bytes {
            return Err(RegionError::Config(format!(
                "region {} holds {} MiB with items up to {} bytes, but {} MiB and {} bytes were \
                 asked for: start with the region's settings, or remove the file to start afresh",
                path.display(),
                have.region_bytes >> 20,
                have.max_item_bytes,
                want.region_bytes >> 20,
                want.max_item_bytes
            )));
        }
        Ok(writer)
    }

    pub(super) fn recorded_pid(file: &File, path: &Path) -> u32 {
        let Ok(clone) = file.try_clone() else { return 0 };
        let size = file.metadata().map(|m| m.len() as usize).unwrap_or(0);
        Region::attach(clone, size, false, path, false)
            .map(|r| r.header().writer_pid.load(Ordering::Relaxed))
            .unwrap_or(0)
    }

    pub(super) fn start(
        region: Region,
        path: &Path,
        evict: bool,
        fresh: bool,
    ) -> Result<Writer, RegionError> {
        let h = region.header();
        // Holding the file's exclusive lock proves that no other writer lives, so a locked
        // bucket or a reservation in flight can only be left over (a corrupt file, or a panic
        // while holding a bucket), even in a region marked clean; left as is, they would make
        // this writer wait forever. Recover then too.
        let crashed = !fresh && (h.clean.load(Ordering::Acquire) == 0 || Self::stale_writes(&region));
        h.clean.store(0, Ordering::Release);
        h.writer_pid.store(std::process::id(), Ordering::Relaxed);
        h.generation.fetch_add(1, Ordering::AcqRel);
        h.curve_threshold.store(0, Ordering::Relaxed); // retired: stays 0 (layout.rs)
        h.probe_threshold.store(0, Ordering::Relaxed); // the previous server's, if any
        let classes = TimeClasses::for_segments(region.layout.segment_count);
        let slots = region.layout.bucket_count * BUCKET_SLOTS;
        let recency = Recency::new(&region);
        let writer = Writer {
            region,
            path: path.to_owned(),
            evict,
            pool: Mutex::new(Pool {
                free: Vec::new(),
                parked: Vec::new(),
                fifo: VecDeque::new(),
                temporary: VecDeque::new(),
                retained: None,
                flushed_at: 0,
            }),
            class_merge: AtomicUsize::new(classes.merge()),
            temporary_ttl: AtomicU32::new(0),
            active: (0..=TimeClasses::TEMPORARY).map(|_| AtomicU32::new(NO_SEGMENT)).collect(),
            last_access: (0..slots).map(|_| AtomicU32::new(0)).collect(),
            observer: OnceLock::new(),
            evictions: OnceLock::new(),
            recency,
            previous_stop: match (fresh, crashed) {
                (true, _) => PreviousStop::None,
                (false, false) => PreviousStop::Clean,
                (false, true) => PreviousStop::Unclean,
            },
        };
        if crashed {
            writer.recover();
        }
        writer.rebuild_pool();
        writer.tick(unix_now().max(writer.clock()));
        Ok(writer)
    }

    /// True if any bucket is locked or any segment has a reservation in flight: impossible
    /// after a clean detach. O(buckets), one word each.
    pub(super) fn stale_writes(region: &Region) -> bool {
        let l = &region.layout;
        (0..l.bucket_count).any(|b| region.bucket(b).version.load(Ordering::Relaxed) & 1 == 1)
            || (0..l.segment_count).any(|s| region.meta(s).in_flight.load(Ordering::Relaxed) != 0)
    }

    /// After a crash: release stuck bucket locks, mark segments that may hold torn writes as
    /// not walkable, drop slots that point nowhere, and recount live items. O(index).
    pub(super) fn recover(&self) {
        let l = &self.region.layout;
        for b in 0..l.bucket_count {
            let v = &self.region.bucket(b).version;
            let now = v.load(Ordering::Relaxed);
            if now & 1 == 1 {
                v.store(now.wrapping_add(1), Ordering::Release);
            }
        }
        for s in 0..l.segment_count {
            let m = self.region.meta(s);
            let st = m.state.load(Ordering::Relaxed);
            if st == state::OPEN || m.in_flight.load(Ordering::Relaxed) != 0 {
                m.walkable.store(0, Ordering::Relaxed);
            }
            if st == state::OPEN {
                m.write_offset.store(SEALED_OFFSET, Ordering::Relaxed);
                m.state.store(state::SEALED, Ordering::Relaxed);
            }
            m.in_flight.store(0, Ordering::Relaxed);
            m.live_items.store(0, Ordering::Relaxed);
            m.live_bytes.store(0, Ordering::Relaxed);
        }
        for b in 0..l.bucket_count {
            for cell in &self.region.bucket(b).slots {
                let Some(slot) = self.region.layout.slot(cell.load(Ordering::Relaxed)) else { continue };
                match self.region.item_header(slot) {
                    Some(h)
                        if self.region.meta(slot.segment).state.load(Ordering::Relaxed) != state::FREE =>
                    {
                        self.account(slot.segment, h.size());
                    }
                    _ => cell.store(0, Ordering::Release),
                }
            }
        }
    }

    /// Rebuilds the free list and FIFO from the segment table; seals segments left open by a
    /// clean shutdown and finishes evictions a crash interrupted.
    pub(super) fn rebuild_pool(&self) {
        let mut pool = self.pool();
        let mut sealed = Vec::new();
        let mut evicting = Vec::new();
        for s in 0..self.region.layout.segment_count {
            let m = self.region.meta(s);
            match m.state.load(Ordering::Acquire) {
                state::FREE => pool.free.push(s),
                state::OPEN => {
                    self.seal(s);
                    sealed.push(s);
                }
                state::SEALED => sealed.push(s),
                _ => evicting.push(s),
            }
        }
        sealed.sort_by_key(|&s| self.region.meta(s).generation.load(Ordering::Relaxed));
        pool.fifo.extend(sealed);
        for s in evicting {
            self.evict(&mut pool, s, 0);
        }
        // Pop low segment numbers first: a fresh region fills from its start.
        pool.free.reverse();
    }

    pub(super) fn pool(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
