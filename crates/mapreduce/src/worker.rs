//! Workers: threads that claim tasks of any running job in a region, run them and publish
//! their output. A worker process may start at any moment (it joins whatever phase the jobs
//! are in) and stop at any moment, even by SIGKILL (its claims lapse, see [`crate::tasks`]).
//!
//! ```text
//! thread: loop { next_task: jobs in table order → map tasks, or reduce tasks once every
//!                map task of the job has a result → try_claim
//!                run: map (combine into Emit) or reduce (read partition r of every map
//!                     output, combine) → one new area → publish (CAS; first wins) }
//! heartbeat: every lease/4, renew the leases of the claims this process holds
//! ```

use crate::app::SplitUnit;
use crate::error::MrError;
use crate::input::{open_input, FileRef, Source};
use crate::job::{fail_job, registered_app, worth_staying, JobView};
use crate::layout::JOB_SLOTS;
use crate::records::{decode, read_partition, Emit, Merge};
use crate::region::{JobRegion, JobState};
use crate::registry::Registry;
use crate::tasks::{pid_alive, publish, renew, result, try_claim, Claim};
use std::fs::File;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Default lease: a claim not renewed for this long is taken over.
pub const DEFAULT_LEASE_MS: u64 = 10_000;

/// How a worker runs.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// The apps whose jobs it works on: a job of another app stops it with an error naming the
    /// program that registers that app.
    pub apps: Registry,
    /// Threads claiming tasks.
    pub threads: usize,
    /// Lease length in milliseconds.
    pub lease_ms: u64,
    /// Leave after publishing this many task outputs (a worker that does a share and goes).
    pub max_tasks: Option<u64>,
    /// Hold each claimed task this long before running it: makes tests' and chaos runs' kills
    /// land while a claim is held. 0 in production.
    pub hold_ms: u64,
    /// The fixed-worker mode (the original Phoenix): this process's threads are the only
    /// workers, so claims take no lease, there is no heartbeat and no liveness check of other
    /// processes. Only for a region no other process can join (`shoal mr run --mode fixed`).
    pub fixed: bool,
}

impl WorkerOptions {
    /// `threads` threads working on the built-in apps' jobs, the default lease, no limit, no
    /// hold.
    pub fn threads(threads: usize) -> WorkerOptions {
        WorkerOptions {
            apps: Registry::builtin(),
            threads,
            lease_ms: DEFAULT_LEASE_MS,
            max_tasks: None,
            hold_ms: 0,
            fixed: false,
        }
    }
}

/// What a worker did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Tasks whose output this worker published.
    pub published: u64,
    /// Tasks it ran to the end but another attempt published first.
    pub lost: u64,
}

/// A running worker: its threads and its heartbeat.
pub struct Worker {
    threads: Vec<JoinHandle<Result<(), MrError>>>,
    heartbeat: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

struct Shared {
    region: Arc<JobRegion>,
    apps: Registry,
    stop: AtomicBool,
    held: Mutex<Vec<Claim>>,
    published: AtomicU64,
    lost: AtomicU64,
    /// The lease of a claim; `None` in the fixed-worker mode.
    lease_ms: Option<u64>,
    /// The parameters of the job a thread last read them for, shared by the threads.
    params: Arc<SharedParams>,
    max_tasks: u64,
    hold_ms: u64,
}

impl Worker {
    /// Starts `options.threads` threads working on `region`.
    pub fn start(region: Arc<JobRegion>, options: WorkerOptions) -> Worker {
        let lease_ms = (!options.fixed).then_some(options.lease_ms.max(10));
        let shared = Arc::new(Shared {
            region,
            apps: options.apps,
            stop: AtomicBool::new(false),
            held: Mutex::new(Vec::new()),
            published: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            lease_ms,
            params: Arc::default(),
            max_tasks: options.max_tasks.unwrap_or(u64::MAX),
            hold_ms: options.hold_ms,
        });
        let threads = (0..options.threads.max(1))
            .map(|_| {
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || {
                    let outcome = work(&shared);
                    if outcome.is_err() {
                        shared.stop.store(true, Ordering::Relaxed); // the others leave too
                    }
                    outcome
                })
            })
            .collect();
        let beat = Arc::clone(&shared);
        let heartbeat = lease_ms.map(|lease_ms| {
            std::thread::spawn(move || {
                while !beat.stop.load(Ordering::Relaxed) {
                    for claim in beat.held.lock().expect("held claims").iter() {
                        renew(&beat.region, *claim, lease_ms);
                    }
                    // Woken early by `join`, so stopping never waits for a beat.
                    std::thread::park_timeout(Duration::from_millis((lease_ms / 4).clamp(1, 1000)));
                }
            })
        });
        Worker { threads, heartbeat, shared }
    }

    /// Waits until the threads leave by themselves (the region finished, or no coordinator is
    /// left), then reports.
    pub fn wait(mut self) -> Result<WorkerReport, MrError> {
        self.join()
    }

    /// Asks the threads to leave after their current task, waits for them and reports.
    pub fn stop(mut self) -> Result<WorkerReport, MrError> {
        self.shared.stop.store(true, Ordering::Relaxed);
        // Idle threads wait parked: woken, they leave now rather than after their wait.
        self.threads.iter().for_each(|t| t.thread().unpark());
        self.join()
    }

    /// Whether every worker thread has left (the region finished, no coordinator is left, or
    /// one failed).
    pub fn threads_finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// For a coordinator running this worker beside it (`Coordinator::give_up_when`): once
    /// every thread has left, the error they stopped with, or, in the fixed-worker mode (no
    /// other worker can ever come), that they left; `None` while any works, or when they left
    /// a region other workers may still join. Without it, a coordinator whose own worker
    /// threads failed waited forever for workers to come.
    pub fn gone(&mut self) -> Option<MrError> {
        if !self.threads_finished() {
            return None;
        }
        let fixed = self.shared.lease_ms.is_none();
        self.join().err().or_else(|| {
            fixed.then(|| {
                MrError::JobFailed(
                    "the fixed-mode worker threads left with the job unfinished, and no other worker can \
                     join a fixed-mode run"
                        .into(),
                )
            })
        })
    }

    fn join(&mut self) -> Result<WorkerReport, MrError> {
        let mut first_error = None;
        for t in self.threads.drain(..) {
            // A panic outside a task (tasks' panics fail their job, see `run_or_fail`) is this
            // worker's error, not its caller's panic; its message went to stderr.
            let outcome = t.join().unwrap_or_else(|_| {
                Err(MrError::JobFailed("a worker thread panicked (its message is above)".into()))
            });
            if let Err(e) = outcome {
                first_error.get_or_insert(e);
            }
        }
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.heartbeat.take() {
            h.thread().unpark();
            let _ = h.join();
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(WorkerReport {
                published: self.shared.published.load(Ordering::Relaxed),
                lost: self.shared.lost.load(Ordering::Relaxed),
            }),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let _ = self.join();
    }
}

/// Claims and runs at most one task of `region` in the calling thread: `None` if no task was
/// claimable, else whether this run's output was the one published. For embedding a worker of
/// the built-in apps in another loop (and for fuzzing). A job's failure is recorded in the
/// job; only a region this build cannot understand (or a job of another app) is an error.
pub fn step(region: &JobRegion, lease_ms: u64) -> Result<Option<bool>, MrError> {
    let Some((view, claim)) = next_task(region, &Registry::builtin(), Some(lease_ms))? else {
        return Ok(None);
    };
    run_or_fail(region, &view, claim.task, &mut JobCache::new(Arc::default())).map(Some)
}

/// Runs task `t`; a failure of the job (bad input, a full region, an app that panics) is
/// recorded in the job and reads as a lost run, a region this build cannot understand is the
/// caller's error.
fn run_or_fail(region: &JobRegion, view: &JobView, t: u64, cache: &mut JobCache) -> Result<bool, MrError> {
    // A panic in the app's map or combine fails the job, as a bad input does: it would recur
    // in every attempt, and a thread it unwound left its claim held (and renewed by the
    // heartbeat) with nobody running the task, every other worker waiting for it.
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| run_task(region, view, t, cache)))
        .unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("no message");
            Err(MrError::JobFailed(format!(
                "task {t} of job {} (app {}) panicked: {message}",
                view.index,
                view.app.name()
            )))
        });
    match outcome {
        Err(e @ MrError::Corrupt { .. }) => Err(e),
        Err(e) => {
            fail_job(region, view.index, &e);
            Ok(false)
        }
        won => won,
    }
}

/// One worker thread's loop.
fn work(shared: &Shared) -> Result<(), MrError> {
    let region = &*shared.region;
    let mut idle = 0u32;
    let mut cache = JobCache::new(Arc::clone(&shared.params));
    while !shared.stop.load(Ordering::Relaxed) {
        if shared.published.load(Ordering::Relaxed) >= shared.max_tasks {
            break;
        }
        let Some((view, claim)) = next_task(region, &shared.apps, shared.lease_ms)? else {
            if !worth_staying(region)? {
                break;
            }
            std::thread::park_timeout(idle_wait(idle));
            idle += 1;
            continue;
        };
        idle = 0;
        shared.held.lock().expect("held claims").push(claim);
        std::thread::sleep(Duration::from_millis(shared.hold_ms));
        let won = run_or_fail(region, &view, claim.task, &mut cache);
        shared.held.lock().expect("held claims").retain(|c| *c != claim);
        if won? {
            shared.published.fetch_add(1, Ordering::Relaxed);
        } else {
            shared.lost.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// How long a worker thread that found nothing to claim `idle` times in a row waits (parked:
/// [`Worker::stop`] wakes it) before looking again: 200 µs for the first 50 looks (the usual
/// wait is for another thread's last map task, then the reduce tasks, or for a job about to be
/// published: a longer sleep there delays the whole job), then doubling to 16 ms (a worker
/// waiting for jobs to come).
fn idle_wait(idle: u32) -> Duration {
    const QUICK_LOOKS: u32 = 50;
    match idle.checked_sub(QUICK_LOOKS) {
        None => Duration::from_micros(200),
        Some(over) => Duration::from_millis(1 << over.min(4)),
    }
}

/// Claims the first claimable task, in job order: map tasks, then (once all of a job's map
/// tasks have results) its reduce tasks. Every thread claims in task order, so a job's last
/// map tasks, its smallest (see [`crate::job::guided_split`]), run last.
/// `lease_ms` is `None` in the fixed-worker mode (see [`try_claim`]).
fn next_task(
    region: &JobRegion,
    apps: &Registry,
    lease_ms: Option<u64>,
) -> Result<Option<(JobView<'static>, Claim)>, MrError> {
    for j in 0..JOB_SLOTS {
        if region.job_state(j)? == JobState::Free {
            break;
        }
        let Some(view) = JobView::running(region, j, |name| registered_app(region, apps, j, name))? else {
            continue;
        };
        if lease_ms.is_some() && !pid_alive(region.job_owner(j)) {
            continue; // its coordinator died: nobody would merge it
        }
        for reduce in [false, true] {
            let tasks = view.tasks(reduce);
            let mut pending = false;
            for t in tasks {
                if result(region, t).is_some() {
                    continue;
                }
                pending = true;
                view.check_task(region, t)?;
                if let Some(claim) = try_claim(region, t, lease_ms) {
                    return Ok(Some((view, claim)));
                }
            }
            if pending {
                break; // reduce tasks wait for every map task's result
            }
        }
    }
    Ok(None)
}

/// Runs task `t` of `view` and publishes its output; `Ok(false)` if another attempt won.
fn run_task(region: &JobRegion, view: &JobView, t: u64, cache: &mut JobCache) -> Result<bool, MrError> {
    let split = view.check_task(region, t)?;
    let (params, source) = cache.of(region, view)?;
    let app = view.app;
    let combine = |acc: &mut Vec<u8>, value: &[u8]| app.combine_with(view.stage, params, acc, value);
    let body = if t < view.first_task + view.maps {
        let mut emit = Emit::new(view.reduces as usize, &combine);
        map_split(&source, view, params, split, &mut emit)?;
        source.check()?;
        emit.into_payload()
    } else {
        // Partition `part` of every map output, combined in one table, as a map combines.
        let part = t - view.first_task - view.maps;
        let parts = view
            .tasks(false)
            .map(|m| {
                let area =
                    result(region, m).ok_or_else(|| region.corrupt(format!("map task {m} has no result")))?;
                Ok((m, read_partition(region, area, part)?))
            })
            .collect::<Result<Vec<_>, MrError>>()?;
        let mut merged = Merge::new(&combine);
        for (m, bytes) in &parts {
            for record in decode(bytes) {
                let (key, value) = record.map_err(|e| region.corrupt(format!("map task {m}: {e}")))?;
                merged.add(key, value);
            }
        }
        merged.into_payload()
    };
    let area = region.put_area(&body)?;
    Ok(publish(region, t, area))
}

/// A job's parameters as read once for all the threads of a worker process: `(job, bytes)`.
/// One copy, not one per thread: matrix multiply's are all of B, which every map streams
/// through, and a copy per thread halved what the shared cache held of it.
type SharedParams = Mutex<Option<(u64, Arc<Vec<u8>>)>>;

/// What a worker thread keeps of the job it last ran a task of, set up once per job rather
/// than once per task: its parameters and, for an input read in place, the input file,
/// opened and checked.
struct JobCache {
    job: Option<u64>,
    shared: Arc<SharedParams>,
    params: Arc<Vec<u8>>,
    input: Option<(File, FileRef)>,
}

impl JobCache {
    fn new(shared: Arc<SharedParams>) -> JobCache {
        JobCache { job: None, shared, params: Arc::default(), input: None }
    }

    /// The parameters of `view`'s job, and where its input is read from.
    fn of<'a>(
        &'a mut self,
        region: &'a JobRegion,
        view: &JobView,
    ) -> Result<(&'a [u8], Source<'a>), MrError> {
        if self.job != Some(view.index) {
            self.job = None;
            self.input = None;
            // A task that panicked holding it (see `run_or_fail`) left nothing half-written.
            let mut shared = self.shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            self.params = match &*shared {
                Some((job, params)) if *job == view.index => Arc::clone(params),
                _ => {
                    let mut params = Vec::new();
                    region.read_append(view.params.offset, view.params.len, &mut params)?;
                    let params = Arc::new(params);
                    *shared = Some((view.index, Arc::clone(&params)));
                    params
                }
            };
            drop(shared);
            if view.input.file != 0 {
                self.input = Some(open_input(region, view.input)?);
            }
            self.job = Some(view.index);
        }
        let source = match &self.input {
            Some((file, reference)) => Source::File(file, reference),
            None => Source::Region(region),
        };
        Ok((&self.params, source))
    }
}

/// Bytes of a split a map is given at a time.
const PIECE_BYTES: usize = 1 << 20;

/// Runs the map of `view`'s app over `split`, read in pieces of whole records (lines, or
/// fixed-size records) of about [`PIECE_BYTES`] into one reused buffer: a task never holds its
/// whole split, and the buffer stays in cache. The app's combiner makes the pieces' records
/// one, so the output is the same as from a single call.
fn map_split(
    source: &Source,
    view: &JobView,
    params: &[u8],
    split: crate::app::InputRef,
    emit: &mut Emit,
) -> Result<(), MrError> {
    let unit = view.app.split_unit(view.stage, params);
    let mut buf = Vec::with_capacity(PIECE_BYTES);
    let (mut at, end) = (split.offset, split.offset + split.len);
    loop {
        // A line longer than the buffer doubles it until the line fits.
        let want = (PIECE_BYTES.max(2 * buf.len()) - buf.len()).min((end - at) as usize);
        source.read_append(at, want as u64, &mut buf)?;
        at += want as u64;
        let last = at == end;
        let cut = match unit {
            _ if last => buf.len(),
            SplitUnit::Fixed(record) => buf.len() - buf.len() % record.max(1),
            SplitUnit::Lines => buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1),
        };
        if cut > 0 || last {
            view.app.map(view.stage, params, &buf[..cut], emit).map_err(MrError::BadInput)?;
            buf.drain(..cut);
        }
        if last {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::{InputRef, SplitUnit};
    use crate::apps;
    use crate::coordinator::Coordinator;
    use crate::job::{publish_job, split_input, JobSpec};
    use crate::layout::job;
    use crate::region::tests::TempPath;

    #[test]
    fn splits_larger_than_a_piece_are_mapped_in_whole_records() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for app in ["wordcount", "histogram", "pca"] {
            let (mut input, args) = apps::generate(app, 5 * PIECE_BYTES as u64, 3).unwrap();
            if app == "wordcount" {
                // A line longer than a piece, which must not be cut.
                let long: Vec<u8> = (0..PIECE_BYTES + 999).map(|i| [b'x', b'y', b' '][i % 3]).collect();
                input.splice(1000..1000, long.into_iter().chain([b'\n']));
            }
            let args = crate::app::Args::parse(&args).unwrap();
            let got = crate::testing::run_local_args(
                apps::find(app).unwrap(),
                &input,
                &args,
                WorkerOptions::threads(2),
            )
            .unwrap();
            let direct = pool.install(|| apps::direct(app, &crate::Input::from_bytes(input.clone()), &args));
            assert_eq!(got, direct.unwrap(), "{app}");
        }
    }

    #[test]
    fn an_app_that_panics_fails_its_job_naming_the_task_instead_of_leaving_it_claimed() {
        let apps = Registry::with(&[&crate::testing::Panics]).unwrap();
        let mut input = b"one two\n".repeat(50);
        input.extend_from_slice(b"boom\n");
        for fixed in [false, true] {
            let options = WorkerOptions { apps: apps.clone(), fixed, ..WorkerOptions::threads(2) };
            let got = crate::testing::run_local_args(
                &crate::testing::Panics,
                &input,
                &crate::Args::default(),
                options,
            );
            let err = got.unwrap_err().to_string();
            assert!(err.contains("(app panics) panicked") && err.contains("the app's own bug"), "{err}");
        }
    }

    #[test]
    fn a_coordinator_gives_up_with_what_stopped_its_own_worker_threads() {
        let p = TempPath::new("gone");
        let region = Arc::new(JobRegion::create(&p.0, 8 << 20, 8 << 20, 1000).unwrap());
        let options = crate::JobOptions { split_bytes: 64, reduce_tasks: 2, copy_input: false };
        let input = crate::Input::from_bytes(b"a b\n".to_vec());
        let run = |worker: &mut Worker| {
            Coordinator::new(&region, options, |_| {})
                .unwrap()
                .give_up_when(|| worker.gone())
                .run_app(&crate::testing::Panics, &input, &crate::Args::default())
                .unwrap_err()
        };
        // Workers of the built-in apps only: a job of `panics` stops them with an error.
        let mut worker = Worker::start(Arc::clone(&region), WorkerOptions::threads(2));
        let err = run(&mut worker);
        assert!(matches!(err, MrError::ForeignApp { .. }), "{err}");
        assert_eq!(region.job_state(0).unwrap(), JobState::Failed, "other processes' workers leave it");
        assert!(worker.stop().is_ok(), "the error was handed over once");
        // Fixed-mode threads that left (here: after no task at all) leave nobody to come.
        let apps = Registry::with(&[&crate::testing::Panics]).unwrap();
        let options = WorkerOptions { apps, fixed: true, max_tasks: Some(0), ..WorkerOptions::threads(2) };
        let err = run(&mut Worker::start(Arc::clone(&region), options)).to_string();
        assert!(err.contains("fixed-mode worker threads left"), "{err}");
    }

    #[test]
    fn jobs_of_a_dead_coordinator_are_left_alone() {
        let p = TempPath::new("orphan");
        let region = JobRegion::create(&p.0, 8 << 20, 8 << 20, 100).unwrap();
        let j = region.take_job_slot().unwrap();
        let off = region.put_area(b"one two\nthree\n").unwrap();
        let input = InputRef { offset: off + 8, len: 14, file: 0 };
        let splits = split_input(&Source::Region(&region), input, SplitUnit::Lines, |_| 4).unwrap();
        let app = apps::find("wordcount").unwrap();
        let spec = JobSpec { app, stage: 0, input, params: input, reduces: 2, splits };
        publish_job(&region, j, &spec).unwrap();
        assert!(!Coordinator::finish(&region).unwrap(), "a live coordinator's job keeps the region open");
        region.job(j, job::OWNER).store(i32::MAX as u64, Ordering::Relaxed);
        assert_eq!(step(&region, 1000).unwrap(), None);
        assert!(Coordinator::finish(&region).unwrap(), "an abandoned job does not");
        region.job(j, job::OWNER).store(std::process::id() as u64, Ordering::Relaxed);
        assert_eq!(step(&region, 1000).unwrap(), Some(true));
    }

    #[test]
    fn an_input_file_changed_during_the_job_fails_it_naming_the_fix() {
        let file = TempPath::new("changing-input");
        std::fs::write(&file.0, "one two\nthree\n".repeat(100)).unwrap();
        let p = TempPath::new("changing");
        let region = std::sync::Arc::new(JobRegion::create(&p.0, 8 << 20, 8 << 20, 1000).unwrap());
        let input = crate::Input::open(&file.0).unwrap();
        let coordinator = {
            let region = std::sync::Arc::clone(&region);
            std::thread::spawn(move || {
                let options = crate::JobOptions { split_bytes: 64, reduce_tasks: 2, copy_input: false };
                Coordinator::new(&region, options, |_| {})?.run_app(
                    apps::find("wordcount").unwrap(),
                    &input,
                    &crate::Args::default(),
                )
            })
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while region.job_state(0).unwrap() != crate::JobState::Running {
            if coordinator.is_finished() || std::time::Instant::now() > deadline {
                panic!(
                    "the coordinator published no job: {:?}",
                    coordinator.is_finished().then(|| coordinator.join())
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(step(&region, 1000).unwrap(), Some(true), "the unchanged file maps");
        std::fs::write(&file.0, "one two\nthree\n".repeat(99)).unwrap();
        while step(&region, 1000).unwrap().is_some() {}
        let err = coordinator.join().unwrap().unwrap_err().to_string();
        assert!(err.contains("changed or was replaced") && err.contains("--copy-input"), "{err}");
    }

    #[test]
    fn a_job_of_an_app_this_program_does_not_register_is_refused_untouched_naming_its_program() {
        let p = TempPath::new("unknown-app");
        let region = JobRegion::create(&p.0, 8 << 20, 8 << 20, 100).unwrap();
        let j = region.take_job_slot().unwrap();
        let off = region.put_area(b"one two\n").unwrap();
        let input = InputRef { offset: off + 8, len: 8, file: 0 };
        let splits = split_input(&Source::Region(&region), input, SplitUnit::Lines, |_| 4).unwrap();
        let app = apps::find("wordcount").unwrap();
        publish_job(&region, j, &JobSpec { app, stage: 0, input, params: input, reduces: 1, splits })
            .unwrap();
        region.set_job_app(j, "elsewhere");
        let err = step(&region, 1000).unwrap_err().to_string();
        let program = std::env::current_exe().unwrap();
        assert!(
            err.contains("runs app \"elsewhere\", which this program does not register")
                && err.contains(&format!("`{} worker {}`", program.display(), p.0.display())),
            "{err}"
        );
        let status = &region.jobs().unwrap()[0];
        assert!(status.claims.is_empty() && status.maps.1 == 0, "nothing written: {status:?}");
    }
}
