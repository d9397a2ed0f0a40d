//! Helpers for the apps' unit tests: a job run in a fresh region by two worker threads, with
//! small splits so that every job has many map tasks.

use crate::app::{App, Args, Rendered};
use crate::coordinator::{Coordinator, JobOptions};
use crate::error::MrError;
use crate::input::Input;
use crate::job::fail_job;
use crate::layout::{job, task, JOB_SLOTS};
use crate::region::tests::TempPath;
use crate::region::{JobRegion, JobState};
use crate::worker::{Worker, WorkerOptions};
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use crate::apps::Rng;

/// Runs `app` over `input` with `args` (`name=value`) in a fresh region.
pub(crate) fn run_local(app: &dyn App, input: &[u8], args: &[&str]) -> Result<Rendered, MrError> {
    let args = Args::parse(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())?;
    run_local_args(app, input, &args, WorkerOptions::threads(2))
}

/// [`run_local`] with parsed arguments and the workers' options; the input is copied into
/// the region.
pub(crate) fn run_local_args(
    app: &dyn App,
    input: &[u8],
    args: &Args,
    workers: WorkerOptions,
) -> Result<Rendered, MrError> {
    run_local_input(app, &Input::from_bytes(input.to_vec()), args, workers)
}

/// [`run_local_args`] with the input written to a file that the workers read in place.
pub(crate) fn run_local_in_place(
    app: &dyn App,
    input: &[u8],
    args: &Args,
    workers: WorkerOptions,
) -> Result<Rendered, MrError> {
    let file = TempPath::new("input");
    std::fs::write(&file.0, input).expect("write a test input");
    run_local_input(app, &Input::open(&file.0)?, args, workers)
}

fn run_local_input(
    app: &dyn App,
    input: &Input,
    args: &Args,
    workers: WorkerOptions,
) -> Result<Rendered, MrError> {
    let path = TempPath::new(app.name());
    let region = Arc::new(JobRegion::create(&path.0, 4 << 20, 1 << 30, 1 << 14)?);
    let worker = Worker::start(Arc::clone(&region), workers);
    let options = JobOptions { split_bytes: (input.len() / 9).max(64), reduce_tasks: 5, copy_input: false };
    let rendered = std::thread::scope(|s| {
        let coordinator = s.spawn(|| Coordinator::new(&region, options, |_| {})?.run_app(app, input, args));
        watch(&region, &worker, || coordinator.is_finished());
        coordinator.join().expect("the coordinator panicked")
    });
    worker.stop()?;
    rendered
}

/// How long a test's run may take before the watchdog fails it (a run takes milliseconds).
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// How long a coordinator may take to return once its jobs were failed before the watchdog
/// aborts the test binary (it sees a failed job within milliseconds).
const FAILED_LIMIT: Duration = Duration::from_secs(60);

/// A test fails, it never hangs: a coordinator waits for workers as long as it must (more may
/// join), so should every thread of the test's worker leave, or the run pass [`RUN_LIMIT`],
/// its running jobs are failed with what the region shows and the coordinator returns that.
/// Jobs are failed at every look from then on, not once: a job the coordinator was still
/// preparing then (under load, workers that leave at once may leave before it) is published
/// Running afterwards. A coordinator that does not return even so aborts the test binary with
/// the same account.
fn watch(region: &JobRegion, worker: &Worker, coordinator_finished: impl Fn() -> bool) {
    let start = Instant::now();
    let mut failed: Option<(Instant, &str)> = None;
    while !coordinator_finished() {
        if failed.is_none() {
            let why = if worker.threads_finished() {
                Some("every worker thread left")
            } else {
                (start.elapsed() > RUN_LIMIT).then_some("the run passed the test's limit")
            };
            failed = why.map(|why| (Instant::now(), why));
        }
        if let Some((at, why)) = failed {
            if at.elapsed() > FAILED_LIMIT {
                // Straight to the descriptor: the test harness's capture of `eprintln!` is
                // lost with the process.
                let account = describe(region);
                let _ = writeln!(
                    std::io::stderr(),
                    "test watchdog: the coordinator ignored its failed jobs; {account}"
                );
                std::process::abort();
            }
            for j in 0..JOB_SLOTS {
                match region.job_state(j) {
                    Ok(JobState::Free) => break,
                    Ok(JobState::Running) => {
                        // Told as the job is failed: a job published since shows in it.
                        let account = format!("test watchdog: {why}; {}", describe(region));
                        fail_job(region, j, &MrError::BadInput(account));
                    }
                    _ => {}
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// An app whose map panics on a split holding `boom` (a bug of an app's own), counting words
/// otherwise; no built-in registry has it, so the built-in workers refuse its jobs.
pub(crate) struct Panics;

impl App for Panics {
    fn name(&self) -> &'static str {
        "panics"
    }

    fn about(&self) -> &'static str {
        "a map that panics on `boom`, for tests"
    }

    fn map(&self, _stage: u32, _params: &[u8], split: &[u8], out: &mut crate::Emit) -> Result<(), String> {
        for word in split.split(|b| b.is_ascii_whitespace()).filter(|w| !w.is_empty()) {
            assert_ne!(word, b"boom", "the app's own bug");
            out.emit(word, &1u64.to_le_bytes());
        }
        Ok(())
    }

    fn combine(&self, _stage: u32, acc: &mut Vec<u8>, value: &[u8]) {
        crate::app::add_u64(acc, value);
    }

    fn drive(&self, input: &Input, _args: &Args, jobs: &mut dyn crate::Jobs) -> Result<Rendered, MrError> {
        let input = jobs.put_input(input)?;
        let records = jobs.run(self, 0, input, b"")?;
        Ok(Rendered { text: format!("{} words\n", records.len()), json: serde_json::Value::Null })
    }
}

/// The region's jobs and their tasks' claims and results, for a watchdog's message.
fn describe(region: &JobRegion) -> String {
    let mut out = String::new();
    for j in 0..JOB_SLOTS {
        let Ok(state) = region.job_state(j) else { return out + "a job of no known state" };
        if state == JobState::Free {
            break;
        }
        let word = |field| region.job(j, field).load(Ordering::Acquire);
        let first = word(job::FIRST_TASK);
        let tasks = word(job::MAP_TASKS).saturating_add(word(job::REDUCE_TASKS)).min(64);
        let claims: Vec<String> = (first..first.saturating_add(tasks))
            .filter(|&t| t < region.geometry().task_slots)
            .map(|t| {
                let claim = region.task(t, task::CLAIM).load(Ordering::Acquire);
                let done = region.task(t, task::RESULT).load(Ordering::Acquire) != 0;
                format!("{}:{}/{}{}", t, claim >> 32, claim as u32, if done { "+" } else { "" })
            })
            .collect();
        out += &format!("job {j} {state:?} tasks (pid/attempt, + published) {}; ", claims.join(" "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_whose_workers_all_left_fails_naming_its_tasks_instead_of_waiting() {
        let app = crate::apps::find("wordcount").unwrap();
        let gone = WorkerOptions { max_tasks: Some(0), ..WorkerOptions::threads(2) };
        let err = run_local_args(app, b"a b a\n", &Args::default(), gone).unwrap_err().to_string();
        assert!(err.contains("every worker thread left") && err.contains("job 0 Running tasks"), "{err}");
    }
}
