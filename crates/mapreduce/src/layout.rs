//! The bytes of a job region. Every field is a little-endian `u64` at a fixed offset, read and
//! written only as an atomic; every reference to other data is a `u64` offset from the start
//! of the file (never a pointer), so any process may map the file anywhere and regions past
//! 4 GiB work. The compile-time assertions below pin the layout.
//!
//! ```text
//! 0             header (4 KiB)          magic, layout version, geometry, arena and task
//!                                       bump pointers, creation time, finished flag
//! jobs_offset   jobs[JOB_SLOTS]         128 B each: state, app, stage, input, params,
//!                                       its tasks, error, owner pid, input file
//! tasks_offset  tasks[task_slots]       64 B each: job, kind, input, claim, lease, result
//! arena_offset  arena                   areas bump-allocated, 64-byte aligned: inputs (or
//!                                       references to input files read in place), params,
//!                                       task outputs, error messages
//! ```

/// First 8 bytes of every job region.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SHOALMRJ");
/// Version of the layout described here. Workers and coordinators refuse any other. 3: a job
/// slot being prepared carries its coordinator's pid in its state word.
pub const LAYOUT_VERSION: u64 = 4;
/// Bytes reserved for the header.
pub const HEADER_BYTES: u64 = 4096;
/// Jobs a region can ever hold (a job slot is not reused: its reduce outputs stay readable).
pub const JOB_SLOTS: u64 = 1024;
/// Bytes of one job entry.
pub const JOB_BYTES: u64 = 128;
/// Bytes of one task entry.
pub const TASK_BYTES: u64 = 64;
/// Areas of the arena start at multiples of this (a cache line: no false sharing between
/// attempts writing neighbouring areas).
pub const AREA_ALIGN: u64 = 64;
/// Longest app name a job entry holds.
pub const APP_NAME_BYTES: usize = 16;
/// The smallest region: header, tables and a little arena.
pub const MIN_REGION_BYTES: u64 = 1 << 20;
/// The largest a region may grow to (16 TiB of address space).
pub const MAX_REGION_BYTES: u64 = 1 << 44;

/// A map task's kind (the high half of its kind word).
pub const KIND_MAP: u64 = 1;
/// A reduce task's kind.
pub const KIND_REDUCE: u64 = 2;
/// The job error word's value for "an allocation did not fit".
pub const ERROR_REGION_FULL: u64 = 1;

/// Offsets of the header's fields.
pub mod header {
    /// [`super::MAGIC`], stored last at creation.
    pub const MAGIC: u64 = 0;
    /// [`super::LAYOUT_VERSION`].
    pub const VERSION: u64 = 8;
    /// Bytes of the file in use: grows (never shrinks) as the arena needs room.
    pub const REGION_BYTES: u64 = 16;
    /// Entries in the task table.
    pub const TASK_SLOTS: u64 = 24;
    /// Start of the job table.
    pub const JOBS_OFFSET: u64 = 32;
    /// Start of the task table.
    pub const TASKS_OFFSET: u64 = 40;
    /// Start of the arena.
    pub const ARENA_OFFSET: u64 = 48;
    /// Next free byte of the arena (bump pointer, absolute offset).
    pub const ARENA_NEXT: u64 = 56;
    /// Task entries handed out so far (bump counter).
    pub const TASKS_NEXT: u64 = 64;
    /// Wall-clock milliseconds at creation: leases count from here, in 32 bits.
    pub const EPOCH_MS: u64 = 72;
    /// Bit 0: set once every job is done and the last coordinator left. The bits above it
    /// count the job slots taken, so a coordinator that marks the region finished can tell
    /// that no slot was taken since it looked at the jobs (`JobRegion::mark_finished_unless_taken_since`).
    pub const FINISHED: u64 = 80;
    /// The pid of the coordinator that created the region (workers wait for its first job).
    pub const CREATOR: u64 = 88;
    /// The most the region may grow to: every process maps this much address space at once,
    /// so growing never moves a mapping.
    pub const MAX_BYTES: u64 = 96;
    /// End of the fields.
    pub const END: u64 = 104;
}

/// Offsets of a job entry's fields.
pub mod job {
    /// A [`crate::region::JobState`] in the low half; while Preparing, the pid of the
    /// coordinator that took the slot in the high half (taken and owned in one
    /// compare-and-swap, before [`OWNER`] is written).
    pub const STATE: u64 = 0;
    /// The app's name, NUL-padded ASCII (two words).
    pub const APP: u64 = 8;
    /// The app's stage (which map and combine a chained app runs).
    pub const STAGE: u64 = 24;
    /// Offset of the job's input (in the region, or in the file [`INPUT_FILE`] names).
    pub const INPUT: u64 = 32;
    /// Its length.
    pub const INPUT_LEN: u64 = 40;
    /// Offset of the job's parameters.
    pub const PARAMS: u64 = 48;
    /// Their length.
    pub const PARAMS_LEN: u64 = 56;
    /// The first of the job's task entries: its map tasks, then its reduce tasks.
    pub const FIRST_TASK: u64 = 64;
    /// How many map tasks.
    pub const MAP_TASKS: u64 = 72;
    /// How many reduce tasks (= partitions of the keys).
    pub const REDUCE_TASKS: u64 = 80;
    /// 0: none; [`super::ERROR_REGION_FULL`]; else the offset of a message area.
    pub const ERROR: u64 = 88;
    /// For a full region: the bytes the failed allocation asked for.
    pub const ERROR_DETAIL: u64 = 96;
    /// The coordinator's pid, written just after it took the slot (readers use
    /// `JobRegion::job_owner`, which also finds it in [`STATE`]).
    pub const OWNER: u64 = 104;
    /// 0: the input lies in the region; else the area of a reference to the input file that
    /// workers read in place (its path and identity, `crate::input::FileRef`).
    pub const INPUT_FILE: u64 = 112;
    /// End of the fields.
    pub const END: u64 = 120;
}

/// Offsets of a task entry's fields.
pub mod task {
    /// The job it belongs to.
    pub const JOB: u64 = 0;
    /// [`super::KIND_MAP`] or [`super::KIND_REDUCE`] in the high 32 bits,
    /// the reduce partition in the low 32.
    pub const KIND: u64 = 8;
    /// A map task's split of the job's input (absolute offset in the region or the file).
    pub const INPUT: u64 = 16;
    /// The split's length.
    pub const INPUT_LEN: u64 = 24;
    /// `pid << 32 | attempt`; 0 = never claimed.
    pub const CLAIM: u64 = 32;
    /// `attempt << 32 | lease deadline` (milliseconds since the region's epoch).
    pub const LEASE: u64 = 40;
    /// The winning attempt's output area; 0 until one is published.
    pub const RESULT: u64 = 48;
    /// End of the fields.
    pub const END: u64 = 56;
}

const _: () = assert!(header::END <= HEADER_BYTES);
const _: () = assert!(job::END <= JOB_BYTES);
const _: () = assert!(task::END <= TASK_BYTES);
const _: () = assert!(job::APP + APP_NAME_BYTES as u64 <= job::STAGE);
const _: () = assert!(HEADER_BYTES.is_multiple_of(AREA_ALIGN) && JOB_BYTES.is_multiple_of(8));
const _: () = assert!((JOB_SLOTS * JOB_BYTES).is_multiple_of(AREA_ALIGN) && TASK_BYTES.is_multiple_of(8));

/// Where the parts of a region are, as created or as validated on attach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Size of the file when created (or, attached, when checked): it grows.
    pub region_bytes: u64,
    /// The most it may grow to.
    pub max_bytes: u64,
    /// Entries in the task table.
    pub task_slots: u64,
    /// Start of the job table.
    pub jobs_offset: u64,
    /// Start of the task table.
    pub tasks_offset: u64,
    /// Start of the arena (it runs to the end of the file).
    pub arena_offset: u64,
}

impl Geometry {
    /// The geometry of a new region of `region_bytes`, growing up to `max_bytes`, with
    /// `task_slots` tasks, or why not.
    pub fn plan(region_bytes: u64, max_bytes: u64, task_slots: u64) -> Result<Geometry, String> {
        if task_slots == 0 || task_slots > 1 << 32 {
            return Err(format!("task slots {task_slots} must be between 1 and 2^32"));
        }
        let jobs_offset = HEADER_BYTES;
        let tasks_offset = jobs_offset + JOB_SLOTS * JOB_BYTES;
        let arena_offset = align_up(tasks_offset + task_slots * TASK_BYTES);
        let least = arena_offset + MIN_REGION_BYTES;
        if region_bytes < least || !region_bytes.is_multiple_of(AREA_ALIGN) {
            return Err(format!(
                "region size {region_bytes} is too small or not a multiple of {AREA_ALIGN}: use --region-size \
                 {least} or more"
            ));
        }
        if max_bytes < region_bytes || max_bytes > MAX_REGION_BYTES || !max_bytes.is_multiple_of(AREA_ALIGN) {
            return Err(format!(
                "region maximum {max_bytes} must be a multiple of {AREA_ALIGN} from the size {region_bytes} to \
                 {MAX_REGION_BYTES}: use --region-max"
            ));
        }
        Ok(Geometry { region_bytes, max_bytes, task_slots, jobs_offset, tasks_offset, arena_offset })
    }

    /// Offset of job `j`'s field `field`.
    pub fn job_field(&self, j: u64, field: u64) -> u64 {
        debug_assert!(j < JOB_SLOTS && field < JOB_BYTES);
        self.jobs_offset + j * JOB_BYTES + field
    }

    /// Offset of task `t`'s field `field`.
    pub fn task_field(&self, t: u64, field: u64) -> u64 {
        debug_assert!(t < self.task_slots && field < TASK_BYTES);
        self.tasks_offset + t * TASK_BYTES + field
    }
}

/// `n` rounded up to a multiple of [`AREA_ALIGN`] (the largest such multiple when that would
/// overflow, so sizes read from a damaged region fail their bounds checks instead of panicking).
pub(crate) fn align_up(n: u64) -> u64 {
    n.div_ceil(AREA_ALIGN).checked_mul(AREA_ALIGN).unwrap_or(!(AREA_ALIGN - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_planned_geometry_keeps_its_parts_in_order_and_aligned() {
        let g = Geometry::plan(64 << 20, 1 << 30, 1000).unwrap();
        assert!(g.jobs_offset >= HEADER_BYTES && g.tasks_offset >= g.jobs_offset + JOB_SLOTS * JOB_BYTES);
        assert!(g.arena_offset >= g.tasks_offset + 1000 * TASK_BYTES);
        assert_eq!(g.arena_offset % AREA_ALIGN, 0);
    }

    #[test]
    fn impossible_geometries_are_refused_with_the_size_to_use() {
        let err = Geometry::plan(4096, 1 << 20, 10).unwrap_err();
        assert!(err.contains("--region-size"), "{err}");
        assert!(Geometry::plan(64 << 20, 64 << 20, 0).is_err());
        assert!(Geometry::plan((64 << 20) + 1, 1 << 30, 10).is_err());
        let err = Geometry::plan(64 << 20, 32 << 20, 10).unwrap_err();
        assert!(err.contains("--region-max"), "{err}");
        assert!(Geometry::plan(64 << 20, MAX_REGION_BYTES * 2, 10).is_err());
    }
}
