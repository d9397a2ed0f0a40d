//! Cross-process tests of elasticity: worker processes joining a job in each phase, killed
//! with SIGKILL in each phase, stopped (hung) past their lease, two jobs sharing workers, and
//! a stress run killing and starting workers at random (`SHOAL_STRESS_SECS`, default 3).
//!
//! Workers are this very test binary re-run with `--exact child_worker` and the environment
//! variables below; `child_worker` returns at once unless it was started that way. The
//! coordinator runs in a thread of the test process with no worker threads of its own, so
//! only the child processes work and the tests decide who does what. Each job's input is a
//! file the workers read in place, or (`copy_input`) a copy in the region.

use shoal_mapreduce::{
    apps, Args, Coordinator, Input, JobOptions, JobRegion, JobState, JobStatus, MrError, Rendered, Worker,
    WorkerOptions,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The region a child worker joins (its presence makes `child_worker` a worker).
const REGION: &str = "SHOAL_MR_REGION";
/// A child's `WorkerOptions` as `threads,lease_ms,max_tasks,hold_ms` (max_tasks 0: none).
const OPTIONS: &str = "SHOAL_MR_WORKER";
/// The most any wait of these tests lasts before it fails naming what it waited for (a job
/// takes well under a second, a loaded machine's too): a test fails, it never hangs.
const LIMIT: Duration = Duration::from_secs(300);

#[test]
fn child_worker() {
    let Ok(path) = std::env::var(REGION) else { return };
    let o: Vec<u64> = std::env::var(OPTIONS).unwrap().split(',').map(|v| v.parse().unwrap()).collect();
    let options = WorkerOptions {
        lease_ms: o[1],
        max_tasks: (o[2] > 0).then_some(o[2]),
        hold_ms: o[3],
        ..WorkerOptions::threads(o[0] as usize)
    };
    let region = Arc::new(JobRegion::attach(Path::new(&path), false).unwrap());
    let report = Worker::start(region, options).wait().unwrap();
    println!("SHOAL-REPORT published={} lost={}", report.published, report.lost);
}

/// A region file removed at the end of the test.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        Scratch(PathBuf::from(format!("/dev/shm/shoal-mr-it-{tag}-{}-{n}", std::process::id())))
    }

    fn region(&self) -> Arc<JobRegion> {
        Arc::new(JobRegion::create(&self.0, 4 << 20, 1 << 30, 4096).unwrap())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A worker process; killed (and reaped, so its pid reads as dead) when dropped.
struct Proc(Child);

impl Proc {
    fn start(region: &Path, threads: u64, lease_ms: u64, max_tasks: u64, hold_ms: u64) -> Proc {
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_worker", "--nocapture", "--test-threads=1"])
            .env(REGION, region)
            .env(OPTIONS, format!("{threads},{lease_ms},{max_tasks},{hold_ms}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Proc(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// SIGKILL, then reap.
    fn kill(mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }

    /// Waits (up to [`LIMIT`]) for a normal exit and returns the worker's report line.
    fn finish(mut self) -> String {
        let deadline = Instant::now() + LIMIT;
        let status = loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "worker {} did not leave in {LIMIT:?}", self.pid());
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(status.success(), "worker exited with {status}");
        let mut text = String::new();
        std::io::Read::read_to_string(&mut self.0.stdout.take().unwrap(), &mut text).unwrap();
        let at = text.find("SHOAL-REPORT").unwrap_or_else(|| panic!("no report in {text}"));
        text[at..].lines().next().unwrap().to_string()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `app` in a coordinator thread (no worker threads of its own) over `input`, written
/// to a file for the job and removed after it.
fn coordinate(
    region: &Arc<JobRegion>,
    app: &str,
    input: Vec<u8>,
    args: &[&str],
    options: JobOptions,
) -> JoinHandle<Result<Rendered, MrError>> {
    let region = Arc::clone(region);
    let app = apps::find(app).unwrap();
    let args = Args::parse(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>()).unwrap();
    let file = Scratch::new("input");
    std::fs::write(&file.0, input).unwrap();
    std::thread::spawn(move || {
        let rendered =
            Coordinator::new(&region, options, |_| {})?.run_app(app, &Input::open(&file.0)?, &args);
        drop(file);
        rendered
    })
}

/// The result of the coordinator thread `job`, waited for up to [`LIMIT`]: a job whose
/// workers all died or left fails the test, naming the region's jobs, rather than hanging it.
fn finished_job(job: JoinHandle<Result<Rendered, MrError>>, region: &JobRegion) -> Result<Rendered, MrError> {
    let deadline = Instant::now() + LIMIT;
    while !job.is_finished() {
        assert!(Instant::now() < deadline, "the job did not finish in {LIMIT:?}: {:?}", region.jobs());
        std::thread::sleep(Duration::from_millis(5));
    }
    job.join().unwrap()
}

/// The same app run in this process by two worker threads in a region of its own.
fn in_process(app: &str, input: &[u8], args: &[&str]) -> Rendered {
    let scratch = Scratch::new("reference");
    let region = scratch.region();
    let worker = Worker::start(Arc::clone(&region), WorkerOptions::threads(2));
    let job = coordinate(&region, app, input.to_vec(), args, JobOptions::for_input(input.len() as u64));
    let rendered = finished_job(job, &region).unwrap();
    worker.stop().unwrap();
    rendered
}

/// Waits (up to [`LIMIT`]) until the latest job's status satisfies `ready`.
fn wait_for(region: &JobRegion, what: &str, ready: impl Fn(&JobStatus) -> bool) -> JobStatus {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(last) = region.jobs().unwrap().pop().filter(|j| ready(j)) {
            return last;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}: {:?}", region.jobs().unwrap());
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Text of `lines` lines of words from a small vocabulary, and its word counts.
fn words(lines: usize, seed: u64) -> (Vec<u8>, HashMap<String, u64>) {
    let mut x = seed;
    let mut text = String::new();
    let mut counts = HashMap::new();
    for _ in 0..lines {
        for _ in 0..8 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let word = format!("w{}", (x >> 33) % 700);
            *counts.entry(word.clone()).or_insert(0) += 1;
            text.push_str(&word);
            text.push(' ');
        }
        text.push('\n');
    }
    (text.into_bytes(), counts)
}

/// Checks a word count result against `expected`.
fn assert_counts(result: &Rendered, expected: &HashMap<String, u64>) {
    let got: HashMap<String, u64> = result.json["words"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| (pair[0].as_str().unwrap().to_string(), pair[1].as_u64().unwrap()))
        .collect();
    assert_eq!(&got, expected);
}

const SMALL: JobOptions = JobOptions { split_bytes: 2048, reduce_tasks: 4, copy_input: false };

#[test]
fn workers_joining_in_each_phase_finish_the_job_exactly() {
    let scratch = Scratch::new("join");
    let region = scratch.region();
    let (text, expected) = words(2000, 1);
    // Before any job: a worker that will run one map task and leave.
    let early = Proc::start(&scratch.0, 1, 10_000, 1, 0);
    let job = coordinate(&region, "wordcount", text, &[], SMALL);
    let status = wait_for(&region, "the job", |j| j.state == JobState::Running);
    let maps = status.maps.0;
    assert!(maps >= 6, "{maps} map tasks");
    early.finish();
    // In the map phase: one that runs three more, then one that runs the other maps and one
    // reduce, then in the reduce phase one that finishes.
    assert_eq!(region.jobs().unwrap()[0].maps.1, 1);
    Proc::start(&scratch.0, 1, 10_000, 3, 0).finish();
    assert_eq!(region.jobs().unwrap()[0].maps.1, 4);
    Proc::start(&scratch.0, 1, 10_000, maps - 4 + 1, 0).finish();
    let status = region.jobs().unwrap().pop().unwrap();
    assert_eq!((status.maps.1, status.reduces.1), (maps, 1));
    let last = Proc::start(&scratch.0, 2, 10_000, 0, 0);
    assert_counts(&finished_job(job, &region).unwrap(), &expected);
    assert!(Coordinator::finish(&region).unwrap());
    last.finish();
}

#[test]
fn workers_joining_between_chained_jobs_give_the_same_clusters() {
    let points: String =
        (0..600).map(|i: i64| format!("{} {}\n", (i * 37) % 101 + (i % 3) * 300, (i * 53) % 97)).collect();
    let args = ["k=3", "iterations=6"];
    let expected = in_process("kmeans", points.as_bytes(), &args);
    let scratch = Scratch::new("chain");
    let region = scratch.region();
    let options = JobOptions { split_bytes: 1024, reduce_tasks: 2, copy_input: true };
    let job = coordinate(&region, "kmeans", points.into_bytes(), &args, options);
    let status = wait_for(&region, "the first iteration", |j| j.state == JobState::Running);
    // Each worker runs one job's worth of tasks and leaves; the next joins between jobs.
    let per_job = status.maps.0 + status.reduces.0;
    let deadline = Instant::now() + LIMIT;
    while !job.is_finished() {
        assert!(Instant::now() < deadline, "k-means did not finish in {LIMIT:?}: {:?}", region.jobs());
        let worker = Proc::start(&scratch.0, 1, 10_000, per_job, 0);
        while !job.is_finished() && !worker_done(&worker) {
            std::thread::sleep(Duration::from_millis(2));
        }
        drop(worker);
    }
    assert_eq!(finished_job(job, &region).unwrap(), expected);
    assert!(region.jobs().unwrap().len() > 1, "k-means ran chained jobs");
}

/// Whether the worker process has exited (without reaping it: its `Proc` does that).
fn worker_done(worker: &Proc) -> bool {
    // SAFETY: siginfo_t is plain data; all zeroes is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
    // SAFETY: waitid on our own child with WNOWAIT only inspects its state, writing `info`.
    let rc = unsafe { libc::waitid(libc::P_PID, worker.pid(), &mut info, flags) };
    // SAFETY: after a successful waitid, si_pid is the child's pid if it exited, else 0.
    rc == 0 && unsafe { info.si_pid() } != 0
}

/// Kills a worker while it holds a claim in the map (`reduce = false`) or reduce phase; a
/// fresh worker re-runs the task at once (the claimer is dead), and nothing is lost or
/// counted twice.
fn kill_in_phase(reduce: bool) {
    let scratch = Scratch::new(if reduce { "kill-reduce" } else { "kill-map" });
    let region = scratch.region();
    let (text, expected) = words(1500, if reduce { 3 } else { 2 });
    let job = coordinate(&region, "wordcount", text, &[], SMALL);
    let status = wait_for(&region, "the job", |j| j.state == JobState::Running);
    if reduce {
        Proc::start(&scratch.0, 1, 10_000, status.maps.0, 0).finish();
    } else {
        Proc::start(&scratch.0, 1, 10_000, 2, 0).finish();
    }
    // The victim holds each claim for a minute, with a lease as long: only its death frees it.
    let victim = Proc::start(&scratch.0, 2, 60_000, 0, 60_000);
    let pid = victim.pid();
    let held =
        wait_for(&region, "the victim's claims", |j| j.claims.iter().filter(|c| c.1 == pid).count() == 2);
    assert!(held.claims.iter().all(|c| c.2 == reduce), "{held:?}");
    victim.kill();
    let rescuer = Proc::start(&scratch.0, 2, 60_000, 0, 0);
    assert_counts(&finished_job(job, &region).unwrap(), &expected);
    Coordinator::finish(&region).unwrap();
    assert!(rescuer.finish().contains("lost=0"));
}

#[test]
fn a_worker_killed_in_the_map_phase_loses_nothing() {
    kill_in_phase(false);
}

#[test]
fn a_worker_killed_in_the_reduce_phase_loses_nothing() {
    kill_in_phase(true);
}

#[test]
fn a_hung_worker_loses_its_tasks_when_its_lease_lapses_and_its_late_output_is_not_counted() {
    let scratch = Scratch::new("hung");
    let region = scratch.region();
    let (text, expected) = words(800, 4);
    let job = coordinate(&region, "wordcount", text, &[], SMALL);
    wait_for(&region, "the job", |j| j.state == JobState::Running);
    // Holds each claim 1.5 s; stopped (SIGSTOP) while holding one, so it renews nothing.
    let hung = Proc::start(&scratch.0, 1, 300, 0, 1500);
    let pid = hung.pid();
    wait_for(&region, "the hung worker's claim", |j| j.claims.iter().any(|c| c.1 == pid));
    // SAFETY: a signal to our own child.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGSTOP) }, 0);
    let rescuer = Proc::start(&scratch.0, 2, 300, 0, 0);
    let result = finished_job(job, &region).unwrap();
    assert_counts(&result, &expected);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGCONT) }, 0);
    Coordinator::finish(&region).unwrap();
    let report = hung.finish();
    assert!(report.contains("published=0 lost=1"), "{report}");
    rescuer.finish();
    assert_counts(&result, &expected);
}

#[test]
fn two_jobs_at_once_share_the_workers_and_both_are_exact() {
    let scratch = Scratch::new("two");
    let region = scratch.region();
    let (text, expected) = words(1500, 5);
    let image: Vec<u8> = (0..30_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let want_histogram = in_process("histogram", &image, &[]);
    let workers = [Proc::start(&scratch.0, 1, 10_000, 0, 0), Proc::start(&scratch.0, 1, 10_000, 0, 0)];
    let a = coordinate(&region, "wordcount", text, &[], SMALL);
    let b = coordinate(&region, "histogram", image, &[], SMALL);
    assert_counts(&finished_job(a, &region).unwrap(), &expected);
    assert_eq!(finished_job(b, &region).unwrap(), want_histogram);
    let jobs = region.jobs().unwrap();
    assert_eq!(jobs.len(), 2);
    assert!(jobs.iter().all(|j| j.state == JobState::Done));
    assert!(Coordinator::finish(&region).unwrap());
    for worker in workers {
        worker.finish();
    }
    let err = JobRegion::attach(&scratch.0, false).err().unwrap().to_string();
    assert!(err.contains("finished"), "{err}");
}

#[test]
fn stress_workers_killed_and_started_at_random_never_change_the_result() {
    let secs: u64 = std::env::var("SHOAL_STRESS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let end = Instant::now() + Duration::from_secs(secs);
    let mut x = 0x5eed_u64 ^ std::process::id() as u64;
    let mut random = move |n: u64| {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) % n
    };
    let mut rounds = 0;
    let mut kills = 0;
    while rounds == 0 || Instant::now() < end {
        rounds += 1;
        let scratch = Scratch::new("stress");
        let region = scratch.region();
        let (text, expected) = words(3000, rounds);
        // Every other round copies its input into the region; the others read it in place.
        let options = JobOptions { split_bytes: 1024, reduce_tasks: 6, copy_input: rounds % 2 == 0 };
        let job = coordinate(&region, "wordcount", text, &[], options);
        let mut workers: Vec<Proc> = Vec::new();
        let deadline = Instant::now() + LIMIT;
        while !job.is_finished() {
            assert!(Instant::now() < deadline, "round {rounds} did not finish: {:?}", region.jobs());
            while workers.len() < 2 {
                workers.push(Proc::start(&scratch.0, 1 + random(2), 10_000, 0, random(3)));
            }
            std::thread::sleep(Duration::from_millis(5 + random(40)));
            if random(2) == 0 {
                workers.swap_remove(random(2) as usize).kill();
                kills += 1;
            }
        }
        assert_counts(&finished_job(job, &region).unwrap(), &expected);
        Coordinator::finish(&region).unwrap();
    }
    eprintln!("stress: {rounds} jobs, {kills} workers killed");
}
