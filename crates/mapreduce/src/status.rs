//! What a region's jobs are doing, for `shoal mr info` and for tests that wait for a phase.

use crate::error::MrError;
use crate::layout::{job, task, JOB_SLOTS};
use crate::region::{JobRegion, JobState};
use crate::tasks::result;
use std::sync::atomic::Ordering;

/// One job's progress and current claims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobStatus {
    /// The job's slot.
    pub index: u64,
    /// Its state.
    pub state: JobState,
    /// Its app's name.
    pub app: String,
    /// The app's stage.
    pub stage: u32,
    /// Map tasks: all, and those with a published output.
    pub maps: (u64, u64),
    /// Reduce tasks: all, and those with a published output.
    pub reduces: (u64, u64),
    /// Claims on tasks without an output yet: (task, claimer's pid, is a reduce task).
    pub claims: Vec<(u64, u32, bool)>,
}

impl JobRegion {
    /// Every job ever published in the region, in order. Tasks outside the table read as
    /// corruption.
    pub fn jobs(&self) -> Result<Vec<JobStatus>, MrError> {
        let mut out = Vec::new();
        for j in 0..JOB_SLOTS {
            let state = self.job_state(j)?;
            if state == JobState::Free {
                break;
            }
            let word = |field| self.job(j, field).load(Ordering::Acquire);
            let (first, maps, reduces) =
                (word(job::FIRST_TASK), word(job::MAP_TASKS), word(job::REDUCE_TASKS));
            let end = first.checked_add(maps).and_then(|e| e.checked_add(reduces));
            if end.is_none_or(|e| e > self.geometry().task_slots) {
                return Err(
                    self.corrupt(format!("job {j}'s tasks {first}+{maps}+{reduces} are outside the table"))
                );
            }
            let done =
                |range: std::ops::Range<u64>| range.filter(|&t| result(self, t).is_some()).count() as u64;
            let claims = (first..first + maps + reduces)
                .filter(|&t| result(self, t).is_none())
                .filter_map(|t| {
                    let pid = (self.task(t, task::CLAIM).load(Ordering::Acquire) >> 32) as u32;
                    (pid != 0).then_some((t, pid, t >= first + maps))
                })
                .collect();
            out.push(JobStatus {
                index: j,
                state,
                app: self.job_app(j),
                stage: word(job::STAGE) as u32,
                maps: (maps, done(first..first + maps)),
                reduces: (reduces, done(first + maps..first + maps + reduces)),
                claims,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use crate::coordinator::{Coordinator, JobOptions};
    use crate::region::tests::TempPath;
    use crate::region::{JobRegion, JobState};
    use crate::worker::{Worker, WorkerOptions};
    use crate::{apps, Args};
    use std::sync::Arc;

    #[test]
    fn status_follows_a_job_from_its_tasks_to_done() {
        let p = TempPath::new("status");
        let region = Arc::new(JobRegion::create(&p.0, 16 << 20, 16 << 20, 100).unwrap());
        assert!(region.jobs().unwrap().is_empty());
        let worker = Worker::start(Arc::clone(&region), WorkerOptions::threads(1));
        // An input this small is all tail (see `guided_split`): a split per line.
        let options = JobOptions { split_bytes: 4, reduce_tasks: 3, copy_input: false };
        let app = apps::find("wordcount").unwrap();
        Coordinator::new(&region, options, |_| {})
            .unwrap()
            .run_app(app, &crate::Input::from_bytes(b"a b\nc d\ne f\n".to_vec()), &Args::default())
            .unwrap();
        worker.stop().unwrap();
        let jobs = region.jobs().unwrap();
        assert_eq!(jobs.len(), 1);
        let j = &jobs[0];
        assert_eq!(
            (j.state, j.app.as_str(), j.maps, j.reduces),
            (JobState::Done, "wordcount", (3, 3), (3, 3))
        );
        assert!(j.claims.is_empty());
    }
}
