//! Job entries: what a coordinator writes to publish a job, what a worker reads (and
//! validates) before touching one of its tasks, and a job's failure.

use crate::app::{App, InputRef, SplitUnit};
use crate::error::MrError;
use crate::input::Source;
use crate::layout::{job, task, ERROR_REGION_FULL, JOB_SLOTS, KIND_MAP, KIND_REDUCE};
use crate::region::{JobRegion, JobState};
use crate::registry::{check_app_name, Registry};
use crate::tasks::pid_alive;
use std::sync::atomic::Ordering;

/// Most reduce tasks a job may have.
pub const MAX_REDUCE_TASKS: u64 = 4096;

/// A running job as a worker sees it, validated.
pub(crate) struct JobView<'a> {
    pub index: u64,
    pub app: &'a dyn App,
    pub stage: u32,
    pub input: InputRef,
    pub params: InputRef,
    pub first_task: u64,
    pub maps: u64,
    pub reduces: u64,
}

impl<'a> JobView<'a> {
    /// Job `j` if it is running, its app found by name with `app` (an error: no worker writes
    /// anything for it); an error if its entry makes no sense to this build.
    pub fn running(
        region: &JobRegion,
        j: u64,
        app: impl FnOnce(&str) -> Result<&'a dyn App, MrError>,
    ) -> Result<Option<JobView<'a>>, MrError> {
        if region.job_state(j)? != JobState::Running {
            return Ok(None);
        }
        let word = |field| region.job(j, field).load(Ordering::Acquire);
        let app = app(&region.job_app(j))?;
        let view = JobView {
            index: j,
            app,
            stage: word(job::STAGE) as u32,
            input: InputRef {
                offset: word(job::INPUT),
                len: word(job::INPUT_LEN),
                file: word(job::INPUT_FILE),
            },
            params: InputRef { offset: word(job::PARAMS), len: word(job::PARAMS_LEN), file: 0 },
            first_task: word(job::FIRST_TASK),
            maps: word(job::MAP_TASKS),
            reduces: word(job::REDUCE_TASKS),
        };
        let g = region.geometry();
        let tasks_fit = view.maps.checked_add(view.reduces).and_then(|n| n.checked_add(view.first_task));
        if tasks_fit.is_none_or(|end| end > g.task_slots)
            || view.maps == 0
            || !(1..=MAX_REDUCE_TASKS).contains(&view.reduces)
            // An input read in place is checked against its file when a worker opens it.
            || (view.input.file == 0 && !region.in_arena(view.input.offset, view.input.len))
            || (view.input.file != 0 && !region.in_arena(view.input.file, 8))
            || !region.in_arena(view.params.offset, view.params.len)
        {
            return Err(region.corrupt(format!(
                "job {j} has tasks {}+{}+{}, input {:?} and params {:?} outside the region",
                view.first_task, view.maps, view.reduces, view.input, view.params
            )));
        }
        Ok(Some(view))
    }

    /// Task entries of this job's map (`reduce = false`) or reduce tasks.
    pub fn tasks(&self, reduce: bool) -> std::ops::Range<u64> {
        let start = self.first_task + if reduce { self.maps } else { 0 };
        start..start + if reduce { self.reduces } else { self.maps }
    }

    /// Task `t`'s split of the input (for a map task) after checking that the entry belongs to
    /// this job and has the kind its place says.
    pub fn check_task(&self, region: &JobRegion, t: u64) -> Result<InputRef, MrError> {
        let word = |field| region.task(t, field).load(Ordering::Acquire);
        let reduce = t >= self.first_task + self.maps;
        let kind =
            if reduce { KIND_REDUCE << 32 | (t - self.first_task - self.maps) } else { KIND_MAP << 32 };
        let split = InputRef { offset: word(task::INPUT), len: word(task::INPUT_LEN), file: self.input.file };
        let inside = split.offset >= self.input.offset
            && split.offset.checked_add(split.len).is_some_and(|e| e <= self.input.offset + self.input.len);
        if word(task::JOB) != self.index || word(task::KIND) != kind || (!reduce && !inside) {
            return Err(
                region.corrupt(format!("task {t} does not belong to job {} as its entry says", self.index))
            );
        }
        Ok(split)
    }
}

/// The app of job `j`, called `name`, from the apps this program registers; if it is not one
/// of them, an error naming the program that published the job (read from its coordinator's
/// `/proc/<pid>/exe`, when this process may) so that the user can start workers with it.
pub(crate) fn registered_app(
    region: &JobRegion,
    apps: &Registry,
    j: u64,
    name: &str,
) -> Result<&'static dyn App, MrError> {
    apps.find(name).map_err(|_| {
        let owner = region.job_owner(j);
        MrError::ForeignApp {
            path: region.path().to_path_buf(),
            job: j,
            app: name.to_string(),
            coordinator: std::fs::read_link(format!("/proc/{owner}/exe")).ok().filter(|_| owner != 0),
        }
    })
}

/// What a coordinator publishes as one job.
pub(crate) struct JobSpec<'a> {
    pub app: &'a dyn App,
    pub stage: u32,
    pub input: InputRef,
    pub params: InputRef,
    pub reduces: u64,
    pub splits: Vec<InputRef>,
}

/// Writes job `j` (a slot this process took) and its tasks, then makes it claimable.
pub(crate) fn publish_job(region: &JobRegion, j: u64, spec: &JobSpec) -> Result<(), MrError> {
    // An app run by a coordinator embedded in a program is in no registry: checked here.
    check_app_name(spec.app.name())?;
    let maps = spec.splits.len() as u64;
    let first = region.take_tasks(maps + spec.reduces)?;
    for (i, split) in spec.splits.iter().enumerate() {
        let t = first + i as u64;
        region.task(t, task::JOB).store(j, Ordering::Relaxed);
        region.task(t, task::KIND).store(KIND_MAP << 32, Ordering::Relaxed);
        region.task(t, task::INPUT).store(split.offset, Ordering::Relaxed);
        region.task(t, task::INPUT_LEN).store(split.len, Ordering::Relaxed);
    }
    for r in 0..spec.reduces {
        let t = first + maps + r;
        region.task(t, task::JOB).store(j, Ordering::Relaxed);
        region.task(t, task::KIND).store(KIND_REDUCE << 32 | r, Ordering::Relaxed);
    }
    region.set_job_app(j, spec.app.name());
    for (field, value) in [
        (job::STAGE, spec.stage as u64),
        (job::INPUT, spec.input.offset),
        (job::INPUT_LEN, spec.input.len),
        (job::PARAMS, spec.params.offset),
        (job::PARAMS_LEN, spec.params.len),
        (job::FIRST_TASK, first),
        (job::MAP_TASKS, maps),
        (job::REDUCE_TASKS, spec.reduces),
        (job::INPUT_FILE, spec.input.file),
    ] {
        region.job(j, field).store(value, Ordering::Relaxed);
    }
    region.job(j, job::STATE).store(JobState::Running as u64, Ordering::Release);
    Ok(())
}

/// Cuts `input` into splits that respect `unit`, each of about `size(bytes left)` bytes: text
/// splits end after a newline (found by reading `source`, where the input lies, near each cut),
/// binary splits hold whole records. An empty input is one empty split.
pub(crate) fn split_input(
    source: &Source,
    input: InputRef,
    unit: SplitUnit,
    size: impl Fn(u64) -> u64,
) -> Result<Vec<InputRef>, MrError> {
    let end = input.offset + input.len;
    let mut splits = Vec::new();
    let mut at = input.offset;
    while at < end || splits.is_empty() {
        let split_bytes = size(end - at).max(1);
        let cut = match unit {
            SplitUnit::Fixed(record) => {
                let record = record.max(1) as u64;
                at + (split_bytes / record).max(1) * record
            }
            SplitUnit::Lines => next_line_start(source, at + split_bytes, end)?,
        };
        let cut = cut.min(end);
        splits.push(InputRef { offset: at, len: cut - at, file: input.file });
        at = cut;
    }
    Ok(splits)
}

/// The size of a job's next map split when `left` bytes of input remain to be cut: `split_bytes`
/// until the last quarter or so, then a sixteenth of what is left, down to an eighth of
/// `split_bytes` (guided scheduling). Workers claim map tasks in order, so the last tasks to
/// run are the smallest and the threads finish together: with even splits, the thread that
/// took the last one ran on alone for up to a whole split while the others waited.
pub(crate) fn guided_split(split_bytes: u64, left: u64) -> u64 {
    (left / 16).clamp((split_bytes / 8).max(1), split_bytes.max(1))
}

/// The offset just after the first newline at or after `from`, or `end`.
fn next_line_start(source: &Source, from: u64, end: u64) -> Result<u64, MrError> {
    const WINDOW: u64 = 4096;
    let mut at = from.min(end);
    let mut window = Vec::new();
    while at < end {
        window.clear();
        source.read_append(at, WINDOW.min(end - at), &mut window)?;
        if let Some(i) = window.iter().position(|&b| b == b'\n') {
            return Ok(at + i as u64 + 1);
        }
        at += window.len() as u64;
    }
    Ok(end)
}

/// Marks job `j` failed because of `error` (the first failure is the one kept).
pub(crate) fn fail_job(region: &JobRegion, j: u64, error: &MrError) {
    let word = match error {
        MrError::RegionFull { needed, .. } => {
            region.job(j, job::ERROR_DETAIL).store(*needed, Ordering::Relaxed);
            ERROR_REGION_FULL
        }
        other => match region.put_area(other.to_string().as_bytes()) {
            Ok(area) => area,
            Err(MrError::RegionFull { needed, .. }) => {
                region.job(j, job::ERROR_DETAIL).store(needed, Ordering::Relaxed);
                ERROR_REGION_FULL
            }
            Err(_) => ERROR_REGION_FULL,
        },
    };
    let _ = region.job(j, job::ERROR).compare_exchange(0, word, Ordering::AcqRel, Ordering::Relaxed);
    let _ = region.job(j, job::STATE).compare_exchange(
        JobState::Running as u64,
        JobState::Failed as u64,
        Ordering::AcqRel,
        Ordering::Relaxed,
    );
}

/// Why job `j` failed, as an error.
pub(crate) fn job_error(region: &JobRegion, j: u64) -> MrError {
    match region.job(j, job::ERROR).load(Ordering::Acquire) {
        ERROR_REGION_FULL => MrError::RegionFull {
            path: region.path().to_path_buf(),
            size: region.geometry().max_bytes,
            needed: region
                .job(j, job::ERROR_DETAIL)
                .load(Ordering::Relaxed)
                .max(region.geometry().max_bytes * 2),
        },
        0 => MrError::JobFailed(format!("job {j} failed without saying why")),
        area => match region.area(area) {
            Ok(message) => MrError::JobFailed(String::from_utf8_lossy(&message).into_owned()),
            Err(e) => e,
        },
    }
}

/// Whether a worker should stay: the region is not finished, and some job's coordinator (or,
/// before the first job, the region's creator) is alive.
pub(crate) fn worth_staying(region: &JobRegion) -> Result<bool, MrError> {
    if region.finished() {
        return Ok(false);
    }
    for j in 0..JOB_SLOTS {
        if region.job_state(j)? == JobState::Free {
            if j == 0 {
                return Ok(pid_alive(
                    region.word(crate::layout::header::CREATOR).load(Ordering::Relaxed) as u32
                ));
            }
            break;
        }
        if pid_alive(region.job_owner(j)) {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_slot_being_taken_keeps_workers_and_its_region_open_before_its_owner_is_written() {
        let p = crate::region::tests::TempPath::new("taking");
        let region = JobRegion::create(&p.0, 4 << 20, 4 << 20, 16).unwrap();
        // Only the job being prepared may keep workers: the region's creator is gone.
        region.word(crate::layout::header::CREATOR).store(i32::MAX as u64, Ordering::Relaxed);
        assert!(!worth_staying(&region).unwrap());
        let j = region.take_job_slot().unwrap();
        // The moment between the coordinator's taking the slot and its writing the owner field:
        // CI's hang, where every worker thread of a run left and its coordinator waited.
        region.job(j, job::OWNER).store(0, Ordering::Relaxed);
        assert_eq!(region.job_state(j).unwrap(), JobState::Preparing);
        assert!(worth_staying(&region).unwrap(), "a job being prepared keeps its workers");
        assert!(!crate::Coordinator::finish(&region).unwrap(), "and its region open");
        // A coordinator that died preparing it does not.
        let dead = u64::from(i32::MAX as u32) << 32 | JobState::Preparing as u64;
        region.job(j, job::STATE).store(dead, Ordering::Relaxed);
        assert!(!worth_staying(&region).unwrap());
        // Only a slot being prepared carries a pid in its state.
        region.job(j, job::STATE).store(dead - 1 + JobState::Running as u64, Ordering::Relaxed);
        assert!(matches!(region.job_state(j), Err(MrError::Corrupt { .. })));
    }

    #[test]
    fn guided_splits_cover_the_input_and_shrink_only_in_the_tail() {
        let (len, split_bytes) = (64 << 20, 1 << 20);
        let input = InputRef { offset: 0, len, file: 0 };
        let bytes = Source::Memory(&[]);
        let splits =
            split_input(&bytes, input, SplitUnit::Fixed(1000), |left| guided_split(split_bytes, left))
                .unwrap();
        let mut at = 0;
        for s in &splits {
            assert_eq!(s.offset, at, "splits are contiguous");
            assert!(s.len % 1000 == 0 || s.offset + s.len == len, "whole records: {s:?}");
            at += s.len;
        }
        assert_eq!(at, len);
        let sizes: Vec<u64> = splits.iter().map(|s| s.len).collect();
        assert!(sizes.windows(2).all(|w| w[1] <= w[0]), "never larger than the split before");
        let full = sizes.iter().filter(|&&s| s > split_bytes - 1000).count();
        assert!((44..=52).contains(&full), "about three quarters in full splits, not {full}");
        let last = sizes[sizes.len() - 2]; // the very last one holds what is left
        assert!(last < split_bytes / 7 && last > split_bytes / 9, "the tail ends at an eighth: {last}");
        assert!(splits.len() < 2 * 64, "{} splits", splits.len());
    }
}
