//! A job region: creating, attaching (with validation), growing, and the typed accessors every
//! other module uses. All access is through [`shoal_region::Mapping`]'s atomics; every offset
//! read from the region is checked before use, so a damaged region yields [`MrError::Corrupt`],
//! never a wild access.
//!
//! **Growing.** Every process maps the region's maximum size at once (address space only:
//! pages past the end of the file are never touched). The file starts at its initial size and
//! grows, under an exclusive `flock` and never shrinking, when the arena's bump pointer passes
//! its end; the header's size is raised (release) only after the file is, and every access
//! checks against that size (acquire), so no process touches a page beyond the file's end and
//! no mapping ever moves.

use crate::error::MrError;
use crate::layout::{
    align_up, header, job, Geometry, APP_NAME_BYTES, AREA_ALIGN, JOB_SLOTS, LAYOUT_VERSION, MAGIC,
};
use shoal_region::Mapping;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Areas of at least this many bytes are written and read through the region's file.
const BULK_BYTES: usize = 256 << 10;
/// The finished word's bit 0 (`header::FINISHED`): every job done and the last coordinator gone.
const FINISHED_BIT: u64 = 1;
/// What taking a job slot adds to the finished word (the bits above `FINISHED_BIT` count them).
const SLOT_TAKEN: u64 = 2;

/// The life of a job entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum JobState {
    /// Never used.
    Free = 0,
    /// Taken by a coordinator that is writing its tasks.
    Preparing = 1,
    /// Its tasks may be claimed.
    Running = 2,
    /// Merged; the result is in the region.
    Done = 3,
    /// A task failed; the error field says why.
    Failed = 4,
}

impl JobState {
    fn from_word(w: u64) -> Option<JobState> {
        [JobState::Free, JobState::Preparing, JobState::Running, JobState::Done, JobState::Failed]
            .into_iter()
            .find(|s| *s as u64 == w)
    }
}

/// One mapped job region.
pub struct JobRegion {
    map: Mapping,
    geometry: Geometry,
    path: PathBuf,
    epoch_ms: u64,
    /// The file, for growing it (the mapping keeps its own descriptor).
    file: File,
    /// Serialises this process's threads around growing (`flock` serialises processes).
    grow: Mutex<()>,
    /// Milliseconds added to the wall clock as this mapping reads it: a test's clock step.
    #[cfg(test)]
    clock_shift_ms: std::sync::atomic::AtomicI64,
}

impl JobRegion {
    /// Creates a new region file at `path` (which must not exist) of `region_bytes`, sparse,
    /// growing up to `max_bytes`, with room for `task_slots` tasks. The magic is stored last,
    /// so a creation cut short leaves a file that attaching refuses.
    pub fn create(
        path: &Path,
        region_bytes: u64,
        max_bytes: u64,
        task_slots: u64,
    ) -> Result<JobRegion, MrError> {
        let geometry = Geometry::plan(region_bytes, max_bytes, task_slots).map_err(MrError::BadInput)?;
        let io = |action| move |source| MrError::Io { path: path.to_path_buf(), action, source };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(io("create job region"))?;
        file.set_len(region_bytes).map_err(io("size job region"))?;
        let map = map_file(path, &file, max_bytes)?;
        let epoch_ms = now_ms();
        let region = JobRegion::mapped(map, geometry, path, epoch_ms, file);
        let g = &geometry;
        for (field, value) in [
            (header::VERSION, LAYOUT_VERSION),
            (header::REGION_BYTES, g.region_bytes),
            (header::MAX_BYTES, g.max_bytes),
            (header::TASK_SLOTS, g.task_slots),
            (header::JOBS_OFFSET, g.jobs_offset),
            (header::TASKS_OFFSET, g.tasks_offset),
            (header::ARENA_OFFSET, g.arena_offset),
            (header::ARENA_NEXT, g.arena_offset),
            (header::EPOCH_MS, epoch_ms),
            (header::CREATOR, std::process::id() as u64),
        ] {
            region.word(field).store(value, Ordering::Relaxed);
        }
        region.word(header::MAGIC).store(MAGIC, Ordering::Release);
        Ok(region)
    }

    /// Attaches to an existing region, validating its header against the file. Refuses
    /// another layout version, a damaged header and (unless `allow_finished`) a finished region.
    pub fn attach(path: &Path, allow_finished: bool) -> Result<JobRegion, MrError> {
        let io = |action| move |source| MrError::Io { path: path.to_path_buf(), action, source };
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(io("open job region"))?;
        let file_len = file.metadata().map_err(io("inspect job region"))?.len();
        let corrupt = |what: String| MrError::Corrupt { path: path.to_path_buf(), what };
        if file_len < crate::layout::HEADER_BYTES {
            return Err(MrError::BadMagic(path.to_path_buf()));
        }
        let header_map = map_file(path, &file, crate::layout::HEADER_BYTES)?;
        let word = |field: u64| header_map.u64_at(field as usize).load(Ordering::Acquire);
        if word(header::MAGIC) != MAGIC {
            return Err(MrError::BadMagic(path.to_path_buf()));
        }
        let found = word(header::VERSION);
        if found != LAYOUT_VERSION {
            return Err(MrError::UnsupportedVersion { path: path.to_path_buf(), found });
        }
        let region_bytes = word(header::REGION_BYTES);
        if region_bytes > file_len {
            return Err(corrupt(format!("its header says {region_bytes} bytes but the file has {file_len}")));
        }
        let geometry = Geometry::plan(region_bytes, word(header::MAX_BYTES), word(header::TASK_SLOTS))
            .map_err(|e| corrupt(format!("impossible geometry ({e})")))?;
        let recorded = (word(header::JOBS_OFFSET), word(header::TASKS_OFFSET), word(header::ARENA_OFFSET));
        if recorded != (geometry.jobs_offset, geometry.tasks_offset, geometry.arena_offset) {
            return Err(corrupt(format!("table offsets {recorded:?} disagree with its sizes")));
        }
        let next = word(header::ARENA_NEXT);
        if next < geometry.arena_offset {
            return Err(corrupt(format!("arena pointer {next} lies before the arena")));
        }
        if !allow_finished && word(header::FINISHED) & FINISHED_BIT != 0 {
            return Err(MrError::Finished(path.to_path_buf()));
        }
        let epoch_ms = word(header::EPOCH_MS);
        let map = map_file(path, &file, geometry.max_bytes)?;
        Ok(JobRegion::mapped(map, geometry, path, epoch_ms, file))
    }

    /// The region over `map`, of `file` at `path`, as this process holds it.
    fn mapped(map: Mapping, geometry: Geometry, path: &Path, epoch_ms: u64, file: File) -> JobRegion {
        JobRegion {
            map,
            geometry,
            path: path.to_path_buf(),
            epoch_ms,
            file,
            grow: Mutex::new(()),
            #[cfg(test)]
            clock_shift_ms: Default::default(),
        }
    }

    /// Attaches to `path` if it exists (even finished: a coordinator's new job reopens it),
    /// else creates it; `true` with a region this call created. A region being created by
    /// another process is waited for (up to a second).
    pub fn open_or_create(
        path: &Path,
        region_bytes: u64,
        max_bytes: u64,
        task_slots: u64,
    ) -> Result<(JobRegion, bool), MrError> {
        match JobRegion::create(path, region_bytes, max_bytes, task_slots) {
            Ok(region) => return Ok((region, true)),
            Err(MrError::Io { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let mut tries = 0;
        loop {
            match JobRegion::attach(path, true) {
                Err(MrError::BadMagic(_)) if tries < 100 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => return other.map(|region| (region, false)),
            }
        }
    }

    /// The region file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the region's parts are.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// Bytes of the file in use now (it grows).
    pub fn size(&self) -> u64 {
        self.word(header::REGION_BYTES).load(Ordering::Acquire)
    }

    /// Whether `[off, off + len)` lies inside the arena as it is now.
    pub(crate) fn in_arena(&self, off: u64, len: u64) -> bool {
        off >= self.geometry.arena_offset && off.checked_add(len).is_some_and(|end| end <= self.size())
    }

    /// Whether every job is done and the last coordinator left.
    pub fn finished(&self) -> bool {
        self.word(header::FINISHED).load(Ordering::Acquire) & FINISHED_BIT != 0
    }

    /// Marks the region finished: workers leave and new ones refuse to attach.
    #[cfg(test)]
    pub(crate) fn set_finished(&self) {
        self.word(header::FINISHED).fetch_or(FINISHED_BIT, Ordering::SeqCst);
    }

    /// The finished word as it is now: read it before looking at the jobs, then pass it to
    /// `mark_finished_unless_taken_since`.
    pub(crate) fn finished_word(&self) -> u64 {
        self.word(header::FINISHED).load(Ordering::SeqCst)
    }

    /// Marks the region finished unless a job slot was taken since `seen` was read (that job
    /// may be one the looker did not see: its coordinator needs the workers to stay); `true`
    /// if the region is finished now.
    pub(crate) fn mark_finished_unless_taken_since(&self, seen: u64) -> bool {
        match self.word(header::FINISHED).compare_exchange(
            seen,
            seen | FINISHED_BIT,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            Ok(_) => true,
            Err(now) => now == seen | FINISHED_BIT,
        }
    }

    /// Milliseconds since the region was created, as every process sees them (wall clock: a
    /// step of it at worst runs a task twice, see `tasks::tests`; 0 before the epoch).
    pub(crate) fn now_rel_ms(&self) -> u64 {
        let now = now_ms();
        #[cfg(test)]
        let now = now.saturating_add_signed(self.clock_shift_ms.load(Ordering::Relaxed));
        now.saturating_sub(self.epoch_ms)
    }

    /// Steps this mapping's wall clock `ms` away from the real one (a test's NTP step).
    #[cfg(test)]
    pub(crate) fn set_clock_shift_ms(&self, ms: i64) {
        self.clock_shift_ms.store(ms, Ordering::Relaxed);
    }

    /// The header field (or any in-bounds word) at `off`.
    pub(crate) fn word(&self, off: u64) -> &AtomicU64 {
        self.map.u64_at(off as usize)
    }

    /// Job `j`'s `field`.
    pub(crate) fn job(&self, j: u64, field: u64) -> &AtomicU64 {
        self.word(self.geometry.job_field(j, field))
    }

    /// Task `t`'s `field`.
    pub(crate) fn task(&self, t: u64, field: u64) -> &AtomicU64 {
        self.word(self.geometry.task_field(t, field))
    }

    /// Job `j`'s state; a word no state has reads as corruption.
    pub fn job_state(&self, j: u64) -> Result<JobState, MrError> {
        let w = self.job(j, job::STATE).load(Ordering::Acquire);
        JobState::from_word(w & 0xffff_ffff)
            // Only a slot being prepared carries its coordinator's pid (see `take_job_slot`).
            .filter(|state| w >> 32 == 0 || *state == JobState::Preparing)
            .ok_or_else(|| self.corrupt(format!("job {j} has state {w}")))
    }

    /// The pid of job `j`'s coordinator, from the moment it took the slot (0 for a free slot).
    /// The slot is taken with the pid in its state word, and the owner field is written just
    /// after: a reader that judged a job by the owner field alone, between the two, saw a job
    /// of pid 0, a dead coordinator's, and its workers left it (CI hung so: see
    /// `take_job_slot`).
    pub(crate) fn job_owner(&self, j: u64) -> u32 {
        match self.job(j, job::STATE).load(Ordering::Acquire) >> 32 {
            // Running, Done or Failed were stored (release) after the owner field.
            0 => self.job(j, job::OWNER).load(Ordering::Relaxed) as u32,
            pid => pid as u32,
        }
    }

    /// Job `j`'s app name as stored.
    pub(crate) fn job_app(&self, j: u64) -> String {
        let mut name = [0u8; APP_NAME_BYTES];
        self.map.read(self.geometry.job_field(j, job::APP) as usize, &mut name);
        let end = name.iter().position(|&b| b == 0).unwrap_or(APP_NAME_BYTES);
        String::from_utf8_lossy(&name[..end]).into_owned()
    }

    /// Stores job `j`'s app name (at most [`APP_NAME_BYTES`], checked by the app registry).
    pub(crate) fn set_job_app(&self, j: u64, name: &str) {
        let mut bytes = [0u8; APP_NAME_BYTES];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        self.map.write(self.geometry.job_field(j, job::APP) as usize, &bytes);
    }

    /// A corruption error about this region.
    pub(crate) fn corrupt(&self, what: String) -> MrError {
        MrError::Corrupt { path: self.path.clone(), what }
    }

    /// Reserves `len` bytes of the arena (64-byte aligned), growing the file if they pass its
    /// end, and returns their offset. The bump pointer never passes the maximum, so a full
    /// region stays usable for smaller requests.
    pub(crate) fn alloc(&self, len: u64) -> Result<u64, MrError> {
        let size = align_up(len.max(1));
        let next = self.word(header::ARENA_NEXT);
        let max = self.geometry.max_bytes;
        let mut at = next.load(Ordering::Relaxed);
        loop {
            // Every writer bumps by an aligned size from the arena's start, so anything else
            // means the header was overwritten; refuse rather than write at a torn offset.
            if at < self.geometry.arena_offset || at > max || !at.is_multiple_of(AREA_ALIGN) {
                return Err(
                    self.corrupt(format!("arena pointer {at} is not an aligned offset inside the arena"))
                );
            }
            let Some(end) = at.checked_add(size).filter(|&end| end <= max) else {
                let used = at.saturating_sub(self.geometry.arena_offset);
                let twice_used = used.saturating_add(size).saturating_mul(2);
                let needed = align_up(
                    self.geometry.arena_offset.saturating_add(twice_used).max(max.saturating_mul(2)),
                );
                return Err(MrError::RegionFull { path: self.path.clone(), size: max, needed });
            };
            match next.compare_exchange_weak(at, end, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    self.ensure_size(end)?;
                    return Ok(at);
                }
                Err(seen) => at = seen,
            }
        }
    }

    /// Grows the file (by half its size at least, up to the maximum) until it holds `end`.
    fn ensure_size(&self, end: u64) -> Result<(), MrError> {
        let size = self.word(header::REGION_BYTES);
        if size.load(Ordering::Acquire) >= end {
            return Ok(());
        }
        let io = |action| move |source| MrError::Io { path: self.path.clone(), action, source };
        let _threads = self.grow.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let _processes = FileLock::exclusive(&self.file).map_err(io("lock job region to grow it"))?;
        let current = size.load(Ordering::Acquire);
        if current >= end {
            return Ok(());
        }
        let target = align_up(end.max(current + current / 2)).min(self.geometry.max_bytes);
        let file_len = self.file.metadata().map_err(io("inspect job region"))?.len();
        if file_len < target {
            let free = free_bytes(&self.file).map_err(io("inspect the job region's file system"))?;
            if target - file_len > free {
                return Err(MrError::NoSpace { path: self.path.clone(), grow_to: target, free });
            }
            self.file.set_len(target).map_err(io("grow job region"))?;
        }
        size.fetch_max(target, Ordering::Release);
        Ok(())
    }

    /// Copies `bytes` into a new area: `[len u64][bytes]`. Returns the area's offset. Bulk
    /// bytes (an input) go through the file rather than the mapping: the kernel copies them
    /// into the file's pages, so this process neither faults in nor zeroes a page of them, and
    /// the copy is complete before the offset is published to anyone.
    pub(crate) fn put_area(&self, bytes: &[u8]) -> Result<u64, MrError> {
        let off = self.alloc(8 + bytes.len() as u64)?;
        self.word(off).store(bytes.len() as u64, Ordering::Relaxed);
        if bytes.len() >= BULK_BYTES {
            self.file.write_all_at(bytes, off + 8).map_err(|source| MrError::Io {
                path: self.path.clone(),
                action: "write to job region",
                source,
            })?;
        } else {
            self.map.write(off as usize + 8, bytes);
        }
        Ok(off)
    }

    /// The bytes of the area at `off` (as [`JobRegion::put_area`] wrote them), bounds-checked.
    pub(crate) fn area(&self, off: u64) -> Result<Vec<u8>, MrError> {
        if !self.in_arena(off, 8) || !off.is_multiple_of(8) {
            return Err(self.corrupt(format!("area offset {off} lies outside the arena")));
        }
        let len = self.word(off).load(Ordering::Relaxed);
        self.bytes(off + 8, len)
    }

    /// A copy of `len` bytes at `off`, which must lie inside the arena.
    pub(crate) fn bytes(&self, off: u64, len: u64) -> Result<Vec<u8>, MrError> {
        let mut out = Vec::new();
        self.read_append(off, len, &mut out)?;
        Ok(out)
    }

    /// Appends a copy of the `len` bytes at `off`, which must lie inside the arena, to `out`.
    /// Bulk reads go through the file (see [`JobRegion::put_area`]).
    pub(crate) fn read_append(&self, off: u64, len: u64, out: &mut Vec<u8>) -> Result<(), MrError> {
        if !self.in_arena(off, len) {
            return Err(self.corrupt(format!("{len} bytes at offset {off} run outside the arena")));
        }
        if len < BULK_BYTES as u64 {
            self.map.read_append(off as usize, len as usize, out);
            return Ok(());
        }
        let at = out.len();
        if out.capacity() == 0 {
            // calloc: the kernel zeroes the pages as the read faults them in, no pass of ours.
            *out = vec![0; len as usize];
        } else {
            out.resize(at + len as usize, 0);
        }
        self.file.read_exact_at(&mut out[at..], off).map_err(|source| MrError::Io {
            path: self.path.clone(),
            action: "read from job region",
            source,
        })
    }

    /// Takes the first free job slot for a new job of this process. The slot's state becomes
    /// Preparing with this process's pid in its high half, in the one compare-and-swap that
    /// takes it, so no process ever sees the job without a live owner: a worker idle between
    /// a state of Preparing and an owner field stored after it judged the job abandoned and
    /// left, and with every worker thread of the run gone so, its coordinator waited forever
    /// (a CI run's hang; `job_owner` reads the pid wherever it is).
    pub(crate) fn take_job_slot(&self) -> Result<u64, MrError> {
        let pid = std::process::id() as u64;
        for j in 0..JOB_SLOTS {
            let state = self.job(j, job::STATE);
            if state.load(Ordering::Relaxed) == JobState::Free as u64
                && state
                    .compare_exchange(
                        JobState::Free as u64,
                        pid << 32 | JobState::Preparing as u64,
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                self.job(j, job::OWNER).store(pid, Ordering::Relaxed);
                // One more slot taken, and the region open again: a coordinator that looked
                // at the jobs before this cannot mark it finished any more.
                let reopen = |word: u64| Some((word & !FINISHED_BIT).wrapping_add(SLOT_TAKEN));
                let _ = self.word(header::FINISHED).fetch_update(Ordering::SeqCst, Ordering::SeqCst, reopen);
                return Ok(j);
            }
        }
        Err(MrError::TableFull(format!(
            "job region {} has used all its {JOB_SLOTS} job slots: start the job in a new region",
            self.path.display()
        )))
    }

    /// Reserves `n` consecutive task entries; returns the first.
    pub(crate) fn take_tasks(&self, n: u64) -> Result<u64, MrError> {
        let first = self.word(header::TASKS_NEXT).fetch_add(n, Ordering::Relaxed);
        if first.checked_add(n).is_none_or(|end| end > self.geometry.task_slots) {
            return Err(MrError::TableFull(format!(
                "job region {} has no room for {n} more tasks (it holds {}): raise --split-bytes, or \
                 create the region with more --task-slots",
                self.path.display(),
                self.geometry.task_slots
            )));
        }
        Ok(first)
    }
}

/// Maps `len` bytes of `file` read-write (past its end too: address space for growing).
fn map_file(path: &Path, file: &File, len: u64) -> Result<Mapping, MrError> {
    let io = |action| move |source| MrError::Io { path: path.to_path_buf(), action, source };
    let len = usize::try_from(len)
        .map_err(|_| MrError::BadInput(format!("region size {len} does not fit in memory")))?;
    Mapping::map(file.try_clone().map_err(io("reopen job region"))?, len, true).map_err(io("map job region"))
}

/// An exclusive `flock` on a file, released when dropped.
struct FileLock<'a>(&'a File);

impl<'a> FileLock<'a> {
    fn exclusive(file: &'a File) -> std::io::Result<FileLock<'a>> {
        // SAFETY: flock on a descriptor this File owns for the guard's lifetime.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(FileLock(file))
    }
}

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        // SAFETY: as in `exclusive`; unlocking a lock we hold.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Bytes free for an unprivileged writer on the file system holding `file`.
fn free_bytes(file: &File) -> std::io::Result<u64> {
    // SAFETY: statvfs is plain data: all zeroes is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatvfs fills `st` from a descriptor we own.
    if unsafe { libc::fstatvfs(file.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Wall-clock milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fresh path in /dev/shm (or the temp dir) that no other test uses; removed on drop.
    pub(crate) struct TempPath(pub PathBuf);

    impl TempPath {
        pub(crate) fn new(tag: &str) -> TempPath {
            static N: AtomicU64 = AtomicU64::new(0);
            let dir =
                if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
            let n = N.fetch_add(1, Ordering::Relaxed);
            TempPath(dir.join(format!("shoal-mr-test-{tag}-{}-{n}", std::process::id())))
        }
    }

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn a_created_region_attaches_and_keeps_its_areas() {
        let p = TempPath::new("attach");
        let r = JobRegion::create(&p.0, 8 << 20, 8 << 20, 100).unwrap();
        let a = r.put_area(b"hello areas").unwrap();
        let b = r.put_area(b"").unwrap();
        assert!(b > a && a.is_multiple_of(64));
        let again = JobRegion::attach(&p.0, false).unwrap();
        assert_eq!(again.geometry(), r.geometry());
        assert_eq!(again.area(a).unwrap(), b"hello areas");
        assert!(again.area(b).unwrap().is_empty());
        assert!(matches!(again.area(8), Err(MrError::Corrupt { .. })));
        assert!(matches!(JobRegion::create(&p.0, 8 << 20, 8 << 20, 100), Err(MrError::Io { .. })));
    }

    #[test]
    fn a_job_slot_taken_while_a_leaving_coordinator_looks_at_the_jobs_keeps_the_region_open() {
        let p = TempPath::new("finish-race");
        let r = JobRegion::create(&p.0, 8 << 20, 8 << 20, 100).unwrap();
        // A leaving coordinator reads the word and finds every slot free; before it marks the
        // region, another coordinator takes a slot (the order the old finish raced on).
        let seen = r.finished_word();
        let j = r.take_job_slot().unwrap();
        assert!(!r.mark_finished_unless_taken_since(seen), "the new job's workers must stay");
        assert!(!r.finished());
        assert!(!crate::Coordinator::finish(&r).unwrap(), "its coordinator lives");
        // Its job done, the region is marked; a slot taken after that opens it again.
        r.job(j, crate::layout::job::STATE).store(JobState::Done as u64, Ordering::Relaxed);
        assert!(crate::Coordinator::finish(&r).unwrap());
        assert!(r.finished() && JobRegion::attach(&p.0, false).is_err());
        let seen = r.finished_word();
        r.take_job_slot().unwrap();
        assert!(!r.finished(), "a new job reopens a finished region, as before");
        assert!(!r.mark_finished_unless_taken_since(seen));
    }

    #[test]
    fn other_versions_damaged_headers_and_finished_regions_are_refused() {
        let p = TempPath::new("refuse");
        let r = JobRegion::create(&p.0, 8 << 20, 8 << 20, 100).unwrap();
        r.word(header::VERSION).store(LAYOUT_VERSION + 1, Ordering::Relaxed);
        let err = JobRegion::attach(&p.0, false).err().unwrap();
        assert!(
            matches!(err, MrError::UnsupportedVersion { found, .. } if found == LAYOUT_VERSION + 1),
            "{err}"
        );
        r.word(header::VERSION).store(LAYOUT_VERSION, Ordering::Relaxed);
        r.word(header::TASKS_OFFSET).store(12345, Ordering::Relaxed);
        assert!(matches!(JobRegion::attach(&p.0, false), Err(MrError::Corrupt { .. })));
        r.word(header::TASKS_OFFSET).store(r.geometry().tasks_offset, Ordering::Relaxed);
        r.set_finished();
        let err = JobRegion::attach(&p.0, false).err().unwrap();
        assert!(err.to_string().contains("finished"), "{err}");
        assert!(JobRegion::attach(&p.0, true).is_ok());
        r.word(header::MAGIC).store(0, Ordering::Relaxed);
        assert!(matches!(JobRegion::attach(&p.0, true), Err(MrError::BadMagic(_))));
    }

    #[test]
    fn the_region_grows_as_the_arena_needs_and_a_full_one_says_how_large_to_make_it() {
        let p = TempPath::new("grow");
        let r = JobRegion::create(&p.0, 2 << 20, 16 << 20, 16).unwrap();
        let other = JobRegion::attach(&p.0, false).unwrap();
        let file_len = || std::fs::metadata(&p.0).unwrap().len();
        assert_eq!(file_len(), 2 << 20);
        let mut areas = Vec::new();
        for i in 0..10u8 {
            let area = r.put_area(&vec![i; 1 << 20]).unwrap();
            areas.push(area);
            assert!(r.size() >= area + (1 << 20) && file_len() >= r.size(), "grown before use");
        }
        assert!(r.size() <= 16 << 20);
        for (i, &area) in areas.iter().enumerate() {
            assert_eq!(other.area(area).unwrap(), vec![i as u8; 1 << 20], "seen through another mapping");
        }
        let err = r.alloc(8 << 20).err().unwrap();
        let MrError::RegionFull { needed, .. } = err else { panic!("{err}") };
        assert!(needed >= 32 << 20);
        assert!(r.alloc(8 << 20).err().unwrap().to_string().contains(&format!("--region-max {needed}")));
        assert!(r.alloc(1000).is_ok(), "a refused allocation leaves room for smaller ones");
        assert!(JobRegion::attach(&p.0, false).is_ok());
    }

    #[test]
    fn a_header_larger_than_its_file_is_refused() {
        let p = TempPath::new("short");
        let r = JobRegion::create(&p.0, 2 << 20, 4 << 20, 16).unwrap();
        r.word(header::REGION_BYTES).store(3 << 20, Ordering::Release);
        let err = JobRegion::attach(&p.0, false).err().unwrap().to_string();
        assert!(err.contains("3145728 bytes but the file has 2097152"), "{err}");
    }

    #[test]
    fn regions_past_four_gib_address_their_far_end() {
        let p = TempPath::new("big");
        let r = JobRegion::create(&p.0, 4 << 20, 6 << 30, 16).unwrap();
        // A sparse gap of 4.5 GiB, then an area past it: the file grows, and stays sparse.
        r.alloc(9 << 29).unwrap();
        let off = r.put_area(b"beyond four gibibytes").unwrap();
        assert!(off > 4 << 30 && r.size() > off);
        assert_eq!(JobRegion::attach(&p.0, false).unwrap().area(off).unwrap(), b"beyond four gibibytes");
    }
}
