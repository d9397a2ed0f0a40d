//! `shoal mr …` (feature `cli`): the command line of this crate's jobs; the `shoal` program
//! parses it into [`MrArgs`] and calls [`run`]. A program of one's own apps gets the same
//! subcommands, as its own, from [`main`] (`shoal_mapreduce::main(&[&MyApp])`): the built-in
//! apps and its own, its worker processes started as `<program> worker <region>`.
//!
//! `mr run` is the coordinator (and, unless `--workers 0`, a worker too, plus `--workers − 1`
//! `shoal mr worker` processes it starts); `mr worker` joins a region's jobs from any process,
//! at any time. `mr run --mode fixed` and `--mode rayon` are the benchmarks' references (the
//! original Phoenix's fixed threads; the computation written directly with Rayon);
//! `mr generate` writes their inputs. `mr run --dask ADDRESS` hands a job over several shards
//! to the Python package's Dask backend (`python3 -m shoal.mr run --dask`: `run_on_dask`).

use crate::{
    apps, App, Coordinator, Input, JobOptions, JobRegion, MrError, Progress, Registry, Rendered, Worker,
    WorkerOptions, DEFAULT_LEASE_MS,
};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Instant;

/// `shoal mr` and its subcommands.
#[derive(Args)]
pub struct MrArgs {
    #[command(subcommand)]
    command: MrCommand,
}

/// A program of one's own apps ([`main`]): `shoal mr`'s subcommands at its top level.
#[derive(Parser)]
#[command(about = "MapReduce over a shared-memory job region; workers join and leave at any time.")]
struct Program {
    #[command(subcommand)]
    command: MrCommand,
}

#[derive(Subcommand)]
enum MrCommand {
    /// Run an app over an input file: publish its jobs in a job region, work on them, merge and
    /// print the result. Other workers may join at any time with `shoal mr worker <region>`.
    /// With --dask, over several shards on a Dask cluster's hosts (the Python package runs it).
    Run(Box<RunArgs>),
    /// Join the jobs of a region (in any phase) until they are all done; stop it at any time.
    Worker(WorkerArgs),
    /// Show the jobs of a region: state, tasks done, current claims.
    Info(InfoArgs),
    /// Write a generated input for an app (reproducible from --seed), and print the --arg
    /// options to run it with.
    Generate(GenerateArgs),
    /// List the apps.
    Apps {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct RunArgs {
    /// The app (`shoal mr apps` lists them).
    app: String,
    /// The input file; with --dask, its shards (one or more files every Dask worker can read
    /// at the same path), as if concatenated.
    #[arg(required = true, value_name = "INPUT")]
    inputs: Vec<PathBuf>,
    /// Run on the hosts of this Dask scheduler (`tcp://scheduler:8786`): each shard is a Dask
    /// task running this engine on its worker's host (--workers, --threads, --lease-ms,
    /// --split-bytes, --reduce-tasks and --copy-input apply per host; --threads defaults to 1),
    /// and the shards' results are merged across hosts by the app's combine. Hands the job to
    /// `<--python> -m shoal.mr run --dask`, which needs the Python package shoal and
    /// dask[distributed]; the result is printed as JSON. Only built-in apps of one job (not kmeans).
    #[arg(long, value_name = "ADDRESS")]
    dask: Option<String>,
    /// With --dask: the shards' results merged per Dask task (the merge tree's fan-in; 2 by
    /// default).
    #[arg(long, value_name = "N")]
    fan_in: Option<u64>,
    /// With --dask: the Python interpreter to run the job with.
    #[arg(long, value_name = "PATH", default_value = "python3")]
    python: PathBuf,
    /// Job region file: created if missing (and removed at the end), joined if it exists (its
    /// jobs then queue after the ones already there). Default: /dev/shm/shoal-mr-<pid>.
    #[arg(long)]
    region: Option<PathBuf>,
    /// Initial size of a new region (bytes; K, M, G, T suffixes): it grows as jobs need, up
    /// to --region-max. Default: twice the input, at least 64M.
    #[arg(long, value_parser = parse_size)]
    region_size: Option<u64>,
    /// The most a new region may grow to (address space each process maps; memory is used
    /// only as jobs write). Default: 64G, or 16 times the input if that is more.
    #[arg(long, value_parser = parse_size)]
    region_max: Option<u64>,
    /// Task entries of a new region. Default: 65536.
    #[arg(long)]
    task_slots: Option<u64>,
    /// Workers: this process works too (with --threads threads) and starts N − 1 more worker
    /// processes. 0: only workers started elsewhere (`shoal mr worker <region>`).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Threads per worker. Default: the CPUs available.
    #[arg(long)]
    threads: Option<usize>,
    /// Input bytes per map task (K, M, G suffixes); the last quarter or so of the input goes in
    /// smaller tasks, down to an eighth of this. Default: 1/64 of the input, 64K–16M.
    #[arg(long, value_parser = parse_size)]
    split_bytes: Option<u64>,
    /// Reduce tasks per job.
    #[arg(long, default_value_t = 16)]
    reduce_tasks: u64,
    /// Copy the input file into the job region. By default workers read a regular input file
    /// in place (the region names it, with its inode, size and time: a file changed during
    /// the job fails it); copy it for workers that cannot see the file (another container or
    /// VM sharing only the region) or an input that may change while the job runs.
    #[arg(long)]
    copy_input: bool,
    /// An app argument `name=value` (repeatable; `shoal mr apps` says which each app takes).
    #[arg(long = "arg", value_name = "NAME=VALUE")]
    args: Vec<String>,
    /// Lease of a claimed task in milliseconds: a worker that stops renewing it (hung, or on
    /// another host's pid namespace) loses the task after this long; a dead one at once.
    #[arg(long, default_value_t = DEFAULT_LEASE_MS)]
    lease_ms: u64,
    /// Write the result here instead of printing it.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Keep a region this run created (to inspect it, or to queue more jobs in it).
    #[arg(long)]
    keep_region: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// How to run: `elastic` (workers may join and leave at any time), `fixed` (the original
    /// Phoenix: only this process's --threads threads, no leases or heartbeats, nobody can
    /// join), `rayon` (the computation written directly with Rayon, no framework: the
    /// benchmarks' baseline).
    #[arg(long, value_enum, default_value_t = Mode::Elastic)]
    mode: Mode,
}

/// How `shoal mr run` runs an app.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// In a job region that workers join and leave at any time.
    Elastic,
    /// In a private job region, by a fixed set of threads of this process.
    Fixed,
    /// Written directly with Rayon in this process, without the framework.
    Rayon,
}

#[derive(Args)]
struct GenerateArgs {
    /// The app.
    app: String,
    /// The file to write.
    output: PathBuf,
    /// About how many bytes (K, M, G suffixes).
    #[arg(long, value_parser = parse_size, default_value = "64M")]
    size: u64,
    /// The generator's seed: the same seed gives the same input.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct WorkerArgs {
    /// The job region to join.
    region: PathBuf,
    /// Threads claiming tasks. Default: the CPUs available.
    #[arg(long)]
    threads: Option<usize>,
    /// Lease of a claimed task in milliseconds (see `shoal mr run --help`).
    #[arg(long, default_value_t = DEFAULT_LEASE_MS)]
    lease_ms: u64,
    /// Leave after publishing this many task outputs.
    #[arg(long)]
    max_tasks: Option<u64>,
    /// Hold each claimed task this long (ms) before running it: tests' kills land while a
    /// claim is held.
    #[arg(long, default_value_t = 0, hide = true)]
    hold_ms: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct InfoArgs {
    /// The job region.
    region: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// The program running the subcommands: the apps it registers, and how a user calls it.
struct Host {
    apps: Registry,
    /// Its subcommands' command, for messages: `shoal mr`, or a program's name.
    command: String,
    /// Its arguments before `worker` that start a worker process (`mr` for `shoal`).
    prefix: &'static [&'static str],
}

/// Runs a `shoal mr` subcommand; `Err` is the message to print.
pub fn run(args: MrArgs) -> Result<(), String> {
    let host = Host { apps: Registry::builtin(), command: "shoal mr".into(), prefix: &["mr"] };
    execute(args.command, &host).map_err(|e| e.to_string())
}

/// The `main` of a program of one's own apps: `shoal mr`'s subcommands (`run`, `worker`,
/// `info`, `generate`, `apps`) and flags at the program's top level, knowing the built-in apps
/// and `apps`. `run --workers N` starts `<this program> worker` processes, and only this
/// program can work on its apps' jobs (`shoal mr worker` refuses them, naming it). An error
/// is printed as `<program>: <message>`, with exit status 1.
///
/// ```no_run
/// # struct MyApp;
/// # impl shoal_mapreduce::App for MyApp {
/// #     fn name(&self) -> &'static str { "myapp" }
/// #     fn about(&self) -> &'static str { "" }
/// #     fn map(&self, _: u32, _: &[u8], _: &[u8], _: &mut shoal_mapreduce::Emit) -> Result<(), String> { Ok(()) }
/// #     fn combine(&self, _: u32, _: &mut Vec<u8>, _: &[u8]) {}
/// #     fn drive(&self, _: &shoal_mapreduce::Input, _: &shoal_mapreduce::Args, _: &mut dyn shoal_mapreduce::Jobs)
/// #         -> Result<shoal_mapreduce::Rendered, shoal_mapreduce::MrError> { unimplemented!() }
/// # }
/// fn main() -> std::process::ExitCode {
///     shoal_mapreduce::main(&[&MyApp])
/// }
/// ```
pub fn main(apps: &[&'static dyn App]) -> ExitCode {
    let command = std::env::args_os()
        .next()
        .and_then(|arg| Path::new(&arg).file_name().map(|name| name.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "mapreduce".into());
    // clap keeps a program's name as `&'static str`: this one, once per process.
    let name: &'static str = Box::leak(command.clone().into_boxed_str());
    let matches = Program::command().name(name).get_matches();
    let program = Program::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let outcome = Registry::with(apps)
        .and_then(|apps| execute(program.command, &Host { apps, command: command.clone(), prefix: &[] }));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{command}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn execute(command: MrCommand, host: &Host) -> Result<(), MrError> {
    match command {
        MrCommand::Run(a) => run_job(*a, host),
        MrCommand::Worker(a) => worker(a, host),
        MrCommand::Info(a) => info(a),
        MrCommand::Generate(a) => generate(a, host),
        MrCommand::Apps { json } => {
            if json {
                let list: Vec<_> = host
                    .apps
                    .apps()
                    .iter()
                    .map(|a| json!({ "name": a.name(), "about": a.about() }))
                    .collect();
                println!("{}", serde_json::Value::Array(list));
            } else {
                host.apps.apps().iter().for_each(|a| println!("{:<10} {}", a.name(), a.about()));
            }
            Ok(())
        }
    }
}

/// A size in bytes with an optional binary suffix (K, M, G, T).
fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("{text:?}: the size suffix must be K, M, G or T")),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("{text:?} is not a size in bytes (e.g. 1048576, 512M, 8G)"))
}

fn threads(given: Option<usize>) -> usize {
    given.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1)
}

fn run_job(a: RunArgs, host: &Host) -> Result<(), MrError> {
    if let Some(address) = &a.dask {
        let (rendered, seconds) = run_on_dask(&a, address)?;
        return print_result(&a, &a.app, "dask", rendered, seconds, serde_json::Value::Null);
    }
    let [input] = a.inputs.as_slice() else {
        return Err(MrError::BadInput(format!(
            "{} inputs: a run on this host takes one input file (shards of one job run on a Dask \
             cluster with --dask ADDRESS)",
            a.inputs.len()
        )));
    };
    let app = host.apps.find(&a.app)?;
    let app_args = crate::Args::parse(&a.args)?;
    let input = Input::open(input)?;
    let (rendered, seconds, region) = match a.mode {
        Mode::Rayon => {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads(a.threads))
                .build()
                .map_err(|e| MrError::BadInput(format!("cannot start Rayon's threads: {e}")))?;
            let started = Instant::now();
            let rendered = pool.install(|| apps::direct(app.name(), &input, &app_args))?;
            (rendered, started.elapsed().as_secs_f64(), serde_json::Value::Null)
        }
        Mode::Elastic | Mode::Fixed => run_in_region(&a, host, app, &input, &app_args)?,
    };
    let mode = a.mode.to_possible_value().expect("no mode is skipped");
    print_result(&a, app.name(), mode.get_name(), rendered, seconds, region)
}

/// Prints a run's result (as text, or with --json as JSON with the app, the mode, the seconds
/// its jobs took and the region left behind), or writes it to --output.
fn print_result(
    a: &RunArgs,
    app: &str,
    mode: &str,
    rendered: Rendered,
    seconds: f64,
    region: serde_json::Value,
) -> Result<(), MrError> {
    let text = if a.json {
        json!({ "app": app, "mode": mode, "region": region, "seconds": seconds, "result": rendered.json })
            .to_string()
            + "\n"
    } else {
        rendered.text
    };
    match &a.output {
        Some(out) => std::fs::write(out, text).map_err(|source| MrError::Io {
            path: out.clone(),
            action: "write output",
            source,
        }),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

/// Python's modules a Dask run needs, and a program that prints (and exits 1 with) the missing.
const DASK_MODULES_PROBE: &str = "import importlib.util as u, sys; \
    sys.exit(' and '.join(m for m in ('shoal', 'distributed') if u.find_spec(m) is None) or None)";

/// `run --dask`: hands the job to the Python package's Dask backend (`shoal.mr.dask`, through
/// its command line `python3 -m shoal.mr run --dask`: one implementation of the multi-host
/// run), this command's flags passed on as its own. Its progress and errors reach stderr as
/// they come; returns the result it prints (the app's JSON) and the seconds it took.
fn run_on_dask(a: &RunArgs, address: &str) -> Result<(Rendered, f64), MrError> {
    let single_host = [
        ("--region", a.region.is_some()),
        ("--region-size", a.region_size.is_some()),
        ("--region-max", a.region_max.is_some()),
        ("--task-slots", a.task_slots.is_some()),
        ("--keep-region", a.keep_region),
        ("--mode", a.mode != Mode::Elastic),
    ];
    if let Some((flag, _)) = single_host.iter().find(|(_, given)| *given) {
        return Err(MrError::BadInput(format!(
            "{flag} is for a run on this host: with --dask each shard's job runs in a region of its \
             own on its Dask worker's host (leave {flag} out)"
        )));
    }
    let python = a.python.display();
    let cannot_start = |source: std::io::Error| {
        MrError::BadInput(format!(
            "--dask runs the job with Python, and {python} cannot be started ({source}): install Python 3, \
             or name its interpreter with --python"
        ))
    };
    let probe = Command::new(&a.python).args(["-c", DASK_MODULES_PROBE]).output().map_err(cannot_start)?;
    if !probe.status.success() {
        let missing = String::from_utf8_lossy(&probe.stderr);
        return Err(MrError::BadInput(format!(
            "--dask runs the job with the Python package shoal on dask.distributed, and {python} cannot \
             import {}: pip install shoal 'dask[distributed]' (the shoal wheel: scripts/python-package.sh), \
             or name another interpreter with --python",
            missing.trim()
        )));
    }
    let started = Instant::now();
    let output = dask_command(a, address).stderr(Stdio::inherit()).output().map_err(cannot_start)?;
    let seconds = started.elapsed().as_secs_f64();
    if !output.status.success() {
        return Err(MrError::BadInput(format!(
            "the Dask job failed ({python} -m shoal.mr run --dask: {}; its message is above)",
            output.status
        )));
    }
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).map_err(|e| {
        MrError::BadInput(format!("{python} -m shoal.mr run --dask printed no JSON result ({e})"))
    })?;
    let text = serde_json::to_string_pretty(&json).expect("a JSON value prints") + "\n";
    Ok((Rendered { text, json }, seconds))
}

/// The Python package's command line running `a`'s job on the Dask scheduler at `address`:
/// `a`'s flags as its own.
fn dask_command(a: &RunArgs, address: &str) -> Command {
    let mut command = Command::new(&a.python);
    command.args(["-m", "shoal.mr", "run"]).args(&a.inputs).args(["--dask", address, "--app", &a.app]);
    for arg in &a.args {
        command.args(["--arg", arg]);
    }
    let numbers = [
        ("--workers", Some(a.workers as u64)),
        ("--threads", a.threads.map(|n| n as u64)),
        ("--lease-ms", Some(a.lease_ms)),
        ("--split-bytes", a.split_bytes),
        ("--reduce-tasks", Some(a.reduce_tasks)),
        ("--fan-in", a.fan_in),
    ];
    for (flag, value) in numbers {
        if let Some(value) = value {
            command.args([flag, &value.to_string()]);
        }
    }
    if a.copy_input {
        command.arg("--copy-input");
    }
    command
}

/// Runs `app` through the framework (`--mode elastic` or `fixed`); returns its result, the
/// seconds its jobs took, and the region's path if it is left behind.
fn run_in_region(
    a: &RunArgs,
    host: &Host,
    app: &'static dyn App,
    input: &Input,
    app_args: &crate::Args,
) -> Result<(Rendered, f64, serde_json::Value), MrError> {
    let fixed = a.mode == Mode::Fixed;
    if fixed && (a.workers != 1 || a.region.is_some() || a.keep_region) {
        return Err(MrError::BadInput(
            "--mode fixed runs this process's --threads threads in a region of its own: leave out \
             --workers, --region and --keep-region (or use --mode elastic)"
                .into(),
        ));
    }
    let path = a
        .region
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("/dev/shm/shoal-mr-{}", std::process::id())));
    let input_bytes = input.len();
    let size = a.region_size.unwrap_or((2 * input_bytes).max(64 << 20)).div_ceil(64) * 64;
    let max = a.region_max.unwrap_or((16 * input_bytes).max(64 << 30)).max(size).div_ceil(64) * 64;
    let (region, created) = JobRegion::open_or_create(&path, size, max, a.task_slots.unwrap_or(1 << 16))?;
    let region = Arc::new(region);
    if fixed {
        // Nobody can join a region whose file is gone; the mapping lives on until the end.
        let _ = std::fs::remove_file(&path);
    } else {
        if created && !a.keep_region {
            remove_on_interrupt(&path, &host.command)?;
        }
        let (command, region) = (&host.command, path.display());
        eprintln!("{command}: job region {region} (join with: {command} worker {region})");
    }
    let threads = threads(a.threads);
    let lease_ms = a.lease_ms;
    let mut worker = (a.workers > 0).then(|| {
        Worker::start(
            Arc::clone(&region),
            WorkerOptions { apps: host.apps.clone(), threads, lease_ms, max_tasks: None, hold_ms: 0, fixed },
        )
    });
    let children = spawn_workers(host, &path, a.workers.saturating_sub(1), threads, lease_ms)?;
    let mut options = JobOptions::for_input(input_bytes);
    options.split_bytes = a.split_bytes.unwrap_or(options.split_bytes);
    options.reduce_tasks = a.reduce_tasks;
    options.copy_input = a.copy_input;
    let started = Instant::now();
    let bar = progress_bar();
    // Should this process's worker threads fail (or, in fixed mode, all leave), the run fails
    // with their error rather than waiting for workers that may never come.
    let outcome = Coordinator::new(&region, options, |p| show(&bar, p, a.json))
        .map(|c| c.give_up_when(|| worker.as_mut().and_then(Worker::gone)))
        .and_then(|mut c| c.run_app(app, input, app_args));
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    let report = worker.map(Worker::stop).transpose();
    let finished = Coordinator::finish(&region);
    for mut child in children {
        let _ = child.wait();
    }
    let removed = fixed || (created && !a.keep_region);
    if removed && !fixed && matches!(finished, Ok(true)) {
        let _ = std::fs::remove_file(&path);
    }
    let rendered = outcome?;
    report?;
    Ok((rendered, seconds, if removed { serde_json::Value::Null } else { json!(path) }))
}

/// The run's progress bar, drawn on stderr from the first [`show`] on.
fn progress_bar() -> ProgressBar {
    let style = ProgressStyle::with_template("{prefix:>6} [{bar:40}] {pos}/{len} tasks  {msg}")
        .expect("a valid template")
        .progress_chars("=> ");
    ProgressBar::hidden().with_style(style)
}

/// Shows `p` on `bar`: the phase, its tasks done of all, the job and the workers at work. A
/// bar is drawn on stderr unless `quiet` (`--json`: a script reads the output, while a
/// terminal may be watching stderr all the same), and only if stderr is a terminal
/// (indicatif's own check).
fn show(bar: &ProgressBar, p: Progress, quiet: bool) {
    bar.update(|state| {
        state.set_len(p.tasks);
        state.set_pos(p.done);
    });
    let workers = if p.workers == 1 { "worker" } else { "workers" };
    bar.set_message(format!("job {} stage {}, {} {workers}", p.job, p.stage, p.workers));
    let attach = bar.prefix().is_empty() && !quiet;
    bar.set_prefix(p.phase.name());
    if attach {
        // Once its first state is complete. Each setter draws, rate-limited: the tick draws
        // the latest state even when nothing changes for a while (a job waiting for workers).
        bar.set_draw_target(ProgressDrawTarget::stderr());
        bar.enable_steady_tick(std::time::Duration::from_millis(250));
    }
}

fn generate(a: GenerateArgs, host: &Host) -> Result<(), MrError> {
    let app = host.apps.find(&a.app)?.name();
    if apps::find(app).is_err() {
        return Err(MrError::BadInput(format!(
            "app {app:?} has no input generator (only the built-in apps have one): write its input yourself"
        )));
    }
    let (input, args) = apps::generate(app, a.size, a.seed)?;
    std::fs::write(&a.output, &input).map_err(|source| MrError::Io {
        path: a.output.clone(),
        action: "write input",
        source,
    })?;
    if a.json {
        println!("{}", json!({ "path": a.output, "bytes": input.len(), "args": args }));
    } else {
        let options: Vec<String> = args.iter().map(|arg| format!("--arg '{arg}'")).collect();
        println!(
            "{}: {} bytes; run with: {} run {} {} {}",
            a.output.display(),
            input.len(),
            host.command,
            a.app,
            a.output.display(),
            options.join(" ")
        );
    }
    Ok(())
}

/// Removes the region file when the run is interrupted (SIGINT, SIGTERM, SIGHUP), so that an
/// abandoned run leaves no memory behind in /dev/shm; its workers leave by themselves once
/// they see that their coordinator is gone.
fn remove_on_interrupt(path: &Path, command: &str) -> Result<(), MrError> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|source| MrError::Io { path: path.to_path_buf(), action: "watch signals for", source })?;
    let (path, command) = (path.to_path_buf(), command.to_string());
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            let _ = std::fs::remove_file(&path);
            eprintln!("{command}: interrupted; removed job region {}", path.display());
            std::process::exit(128 + signal);
        }
    });
    Ok(())
}

/// Starts `n` worker processes of this program (`shoal mr worker`) on the region at `path`.
fn spawn_workers(
    host: &Host,
    path: &Path,
    n: usize,
    threads: usize,
    lease_ms: u64,
) -> Result<Vec<Child>, MrError> {
    let exe = std::env::current_exe().map_err(|source| MrError::Io {
        path: "shoal".into(),
        action: "find",
        source,
    })?;
    (0..n)
        .map(|_| {
            Command::new(&exe)
                .args(host.prefix)
                .args(["worker", "--threads", &threads.to_string(), "--lease-ms", &lease_ms.to_string()])
                .arg(path)
                .stdout(Stdio::null())
                .spawn()
                .map_err(|source| MrError::Io { path: exe.clone(), action: "start a worker process", source })
        })
        .collect()
}

fn worker(a: WorkerArgs, host: &Host) -> Result<(), MrError> {
    let region = Arc::new(JobRegion::attach(&a.region, false)?);
    let started = Instant::now();
    let report = Worker::start(
        region,
        WorkerOptions {
            apps: host.apps.clone(),
            threads: threads(a.threads),
            lease_ms: a.lease_ms,
            max_tasks: a.max_tasks,
            hold_ms: a.hold_ms,
            fixed: false,
        },
    )
    .wait()?;
    let seconds = started.elapsed().as_secs_f64();
    if a.json {
        println!(
            "{}",
            json!({ "pid": std::process::id(), "published": report.published, "lost": report.lost, "seconds": seconds })
        );
    } else {
        println!(
            "worker {}: published {} task outputs ({} runs lost to faster attempts) in {seconds:.2} s",
            std::process::id(),
            report.published,
            report.lost
        );
    }
    Ok(())
}

fn info(a: InfoArgs) -> Result<(), MrError> {
    let region = JobRegion::attach(&a.region, true)?;
    let jobs = region.jobs()?;
    if a.json {
        let list: Vec<_> = jobs
            .iter()
            .map(|j| {
                json!({
                    "job": j.index, "state": format!("{:?}", j.state).to_lowercase(), "app": j.app, "stage": j.stage,
                    "maps": j.maps.0, "maps_done": j.maps.1, "reduces": j.reduces.0, "reduces_done": j.reduces.1,
                    "claims": j.claims.iter().map(|(t, pid, _)| json!({ "task": t, "pid": pid })).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!("{}", json!({ "region": a.region, "finished": region.finished(), "jobs": list }));
        return Ok(());
    }
    println!(
        "{}: {} jobs{}",
        a.region.display(),
        jobs.len(),
        if region.finished() { ", finished" } else { "" }
    );
    for j in &jobs {
        println!(
            "job {} {:?} {} stage {}: maps {}/{}, reduces {}/{}, {} claimed",
            j.index,
            j.state,
            j.app,
            j.stage,
            j.maps.1,
            j.maps.0,
            j.reduces.1,
            j.reduces.0,
            j.claims.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes_and_name_bad_values() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("6g"), Ok(6 << 30));
        assert!(parse_size("12Q").unwrap_err().contains("\"12Q\""));
        assert!(parse_size("lots").unwrap_err().contains("\"lots\""));
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn a_dask_run_passes_its_flags_to_the_python_command_line() {
        let line =
            "mr run wordcount a b --dask tcp://s:8786 --arg top=2 --threads 3 --split-bytes 16K --copy-input";
        let Program { command: MrCommand::Run(a) } = Program::parse_from(line.split(' ')) else {
            panic!("`{line}` is a run");
        };
        let command = dask_command(&a, a.dask.as_deref().expect("--dask given"));
        assert_eq!(command.get_program(), "python3");
        let args: Vec<_> = command.get_args().map(|arg| arg.to_string_lossy()).collect();
        let expected = format!(
            "-m shoal.mr run a b --dask tcp://s:8786 --app wordcount --arg top=2 --workers 1 --threads 3 \
             --lease-ms {DEFAULT_LEASE_MS} --split-bytes 16384 --reduce-tasks 16 --copy-input"
        );
        assert_eq!(args.join(" "), expected);
    }
}
