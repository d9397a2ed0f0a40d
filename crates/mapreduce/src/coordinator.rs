//! The coordinator: publishes an app's jobs in a region, waits for workers (its own threads,
//! other processes, or both) to run them, and merges each job's reduce outputs.
//!
//! ```text
//! App::drive ─► Jobs::put_input (a reference to the input file, or a copy in the region)
//!            └► Jobs::run(stage, input, params) ─► split input ─► job entry + tasks ─► Running
//!                 wait: every reduce task published (or the job failed) ─► merge ─► Done
//!                 ◄── records, sorted ── (a chained app computes the next job's params)
//! ```

use crate::app::{App, Args, InputRef, Jobs, Records, Rendered};
use crate::error::MrError;
use crate::input::{open_input, Input, Source};
use crate::job::{
    fail_job, guided_split, job_error, publish_job, split_input, JobSpec, JobView, MAX_REDUCE_TASKS,
};
use crate::layout::{job, task, JOB_SLOTS};
use crate::records::{decode, read_partition};
use crate::region::{JobRegion, JobState};
use crate::tasks::{pid_alive, result};
use rayon::prelude::*;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How a coordinator cuts jobs into tasks.
#[derive(Clone, Copy, Debug)]
pub struct JobOptions {
    /// Bytes of input per map task (about: text splits end at a newline).
    pub split_bytes: u64,
    /// Reduce tasks (partitions of the keys) per job.
    pub reduce_tasks: u64,
    /// Copy an input file into the region rather than have workers read it in place (for
    /// workers that cannot see the file, or a file that may change while the job runs).
    pub copy_input: bool,
}

impl JobOptions {
    /// Splits of about 1/64 of the input, between 64 KiB and 16 MiB; 16 reduce tasks; an
    /// input file read in place.
    pub fn for_input(input_bytes: u64) -> JobOptions {
        JobOptions {
            split_bytes: (input_bytes / 64).clamp(64 << 10, 16 << 20),
            reduce_tasks: 16,
            copy_input: false,
        }
    }
}

/// How far the current job is, for a progress bar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// The job's slot in the region.
    pub job: u64,
    /// Its app's stage.
    pub stage: u32,
    /// Map until every map task has a result, then reduce.
    pub phase: Phase,
    /// Tasks of the phase with a published result.
    pub done: u64,
    /// All tasks of the phase.
    pub tasks: u64,
    /// Worker processes holding a task of the job now.
    pub workers: u64,
}

/// A job's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Map tasks run (reduce tasks wait for all of them).
    Map,
    /// Reduce tasks run.
    Reduce,
}

impl Phase {
    /// `map` or `reduce`.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Map => "map",
            Phase::Reduce => "reduce",
        }
    }
}

/// Publishes jobs in a region and collects their results.
pub struct Coordinator<'a> {
    region: &'a JobRegion,
    options: JobOptions,
    progress: Box<dyn FnMut(Progress) + 'a>,
    /// Asked as a job waits for its workers: an error ends the wait (see
    /// [`Coordinator::give_up_when`]).
    give_up: Option<Box<dyn FnMut() -> Option<MrError> + 'a>>,
}

impl<'a> Coordinator<'a> {
    /// A coordinator of jobs in `region`, reporting progress to `progress`.
    pub fn new(
        region: &'a JobRegion,
        options: JobOptions,
        progress: impl FnMut(Progress) + 'a,
    ) -> Result<Self, MrError> {
        if options.split_bytes == 0 || !(1..=MAX_REDUCE_TASKS).contains(&options.reduce_tasks) {
            return Err(MrError::BadInput(format!(
                "split bytes {} must be positive and reduce tasks {} between 1 and {MAX_REDUCE_TASKS}",
                options.split_bytes, options.reduce_tasks
            )));
        }
        Ok(Coordinator { region, options, progress: Box::new(progress), give_up: None })
    }

    /// Makes every wait for a job's workers ask `check` (every few milliseconds): an error it
    /// returns fails the job and ends the run with that error. Otherwise a coordinator waits as
    /// long as it must, since workers may join at any time; one running worker threads of its
    /// own gives up once they have failed ([`crate::Worker::gone`]).
    pub fn give_up_when(mut self, check: impl FnMut() -> Option<MrError> + 'a) -> Self {
        self.give_up = Some(Box::new(check));
        self
    }

    /// Runs `app` over `input` with `args`: every job it needs, then its rendering.
    pub fn run_app(&mut self, app: &dyn App, input: &Input, args: &Args) -> Result<Rendered, MrError> {
        app.drive(input, args, self)
    }

    /// Marks the region finished if every job in it is done, failed, or abandoned by a
    /// coordinator that died; `true` if so. A coordinator calls this as it leaves, so workers
    /// leave too.
    pub fn finish(region: &JobRegion) -> Result<bool, MrError> {
        // Read before looking at the jobs: a slot another coordinator takes after this changes
        // the word, and the mark below then fails rather than send that job's workers away.
        let seen = region.finished_word();
        for j in 0..JOB_SLOTS {
            match region.job_state(j)? {
                JobState::Free => break,
                JobState::Done | JobState::Failed => {}
                JobState::Preparing | JobState::Running => {
                    if pid_alive(region.job_owner(j)) {
                        return Ok(false);
                    }
                }
            }
        }
        Ok(region.mark_finished_unless_taken_since(seen))
    }

    /// Waits for job `j` (of `app`, which this coordinator published) to finish; returns its
    /// reduce outputs' areas.
    fn wait(&mut self, j: u64, app: &dyn App) -> Result<Vec<u64>, MrError> {
        let region = self.region;
        let view = JobView::running(region, j, |_| Ok(app))?.ok_or_else(|| job_error(region, j))?;
        let mut last = None;
        let mut claimers = Vec::new();
        loop {
            if region.job_state(j)? == JobState::Failed {
                return Err(job_error(region, j));
            }
            if let Some(e) = self.give_up.as_mut().and_then(|check| check()) {
                fail_job(region, j, &e); // other processes' workers leave it too
                return Err(e);
            }
            let done = |reduce| view.tasks(reduce).filter(|&t| result(region, t).is_some()).count() as u64;
            let maps_done = done(false);
            let reduces_done = done(true);
            if reduces_done == view.reduces {
                return Ok(view.tasks(true).filter_map(|t| result(region, t)).collect());
            }
            let (phase, done, tasks, reduce) = match maps_done < view.maps {
                true => (Phase::Map, maps_done, view.maps, false),
                false => (Phase::Reduce, reduces_done, view.reduces, true),
            };
            // The distinct pids claiming the phase's unfinished tasks (a handful).
            claimers.clear();
            for t in view.tasks(reduce).filter(|&t| result(region, t).is_none()) {
                let pid = region.task(t, task::CLAIM).load(Ordering::Relaxed) >> 32;
                if pid != 0 && !claimers.contains(&pid) && pid_alive(pid as u32) {
                    claimers.push(pid);
                }
            }
            let now =
                Progress { job: j, stage: view.stage, phase, done, tasks, workers: claimers.len() as u64 };
            if last != Some(now) {
                (self.progress)(now);
                last = Some(now);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Jobs for Coordinator<'_> {
    fn put_input(&mut self, input: &Input) -> Result<InputRef, MrError> {
        match input.file_ref() {
            Some(file) if !self.options.copy_input => {
                let area = self.region.put_area(&file.encode())?;
                Ok(InputRef { offset: 0, len: file.len, file: area })
            }
            _ => self.put_bytes(input.contents()?),
        }
    }

    fn put_bytes(&mut self, bytes: &[u8]) -> Result<InputRef, MrError> {
        let area = self.region.put_area(bytes)?;
        Ok(InputRef { offset: area + 8, len: bytes.len() as u64, file: 0 })
    }

    fn run(&mut self, app: &dyn App, stage: u32, input: InputRef, params: &[u8]) -> Result<Records, MrError> {
        let region = self.region;
        let j = region.take_job_slot()?;
        let prepared = (|| {
            let unit = app.split_unit(stage, params);
            let params = self.put_bytes(params)?;
            let size = |left| guided_split(self.options.split_bytes, left);
            let splits = match input.file {
                0 => split_input(&Source::Region(region), input, unit, size)?,
                _ => {
                    // Opened again per job: a chained app's later job sees a changed file too.
                    let (file, reference) = open_input(region, input)?;
                    split_input(&Source::File(&file, &reference), input, unit, size)?
                }
            };
            let spec = JobSpec { app, stage, input, params, reduces: self.options.reduce_tasks, splits };
            publish_job(region, j, &spec)
        })();
        if let Err(e) = prepared {
            region.job(j, job::STATE).store(JobState::Failed as u64, Ordering::Release);
            return Err(e);
        }
        let outputs = self.wait(j, app)?;
        // The reduce outputs are read and decoded in parallel (the workers are idle now: this
        // is the job's serial tail, and for matmul a pass over all of C).
        let parts = outputs
            .par_iter()
            .map(|&area| {
                let bytes = read_partition(region, area, 0)?;
                decode(&bytes)
                    .map(|record| {
                        let (k, v) = record.map_err(|e| region.corrupt(format!("job {j}'s output: {e}")))?;
                        Ok((k.to_vec(), v.to_vec()))
                    })
                    .collect::<Result<Records, MrError>>()
            })
            .collect::<Result<Vec<Records>, MrError>>()?;
        let mut records = parts.concat();
        // Partitions hold disjoint keys: one sort orders the whole result. The records go to
        // the app only: they stay readable in the region as the reduce outputs.
        records.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        region.job(j, job::STATE).store(JobState::Done as u64, Ordering::Release);
        Ok(records)
    }
}
