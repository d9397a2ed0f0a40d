//! A job region is input from outside the process: `shoal mr worker` attaches to whatever
//! file it is given and works on the jobs it finds. Attaching and working must never panic,
//! crash or hang on any file; errors are fine (a worker refuses what it cannot understand).
//!
//! Input: one mode byte, then either the raw file (mode % 8 == 7) or patches applied to a
//! valid region holding a finished word-count job or one stopped half-way (some map and
//! every reduce task unpublished), its input copied into the region or read in place from a
//! file, so that patched job entries, task entries, output areas and file references all
//! reach the worker.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_mapreduce::layout::{header, job, task, Geometry, JOB_BYTES, TASK_BYTES};
use shoal_mapreduce::{
    apps, step, Args, Coordinator, Input as MrInput, JobOptions, JobRegion, Worker, WorkerOptions,
};
use shoal_region_fuzz::{Input, Scratch};
use std::sync::{Arc, OnceLock};

struct Templates {
    scratch: Scratch,
    regions: Vec<Vec<u8>>,
    geometry: Geometry,
}

/// Regions with one finished word-count job, and the same job turned back to running: its
/// input copied into the region, or read in place from a file (this target's own source, which
/// exists wherever the target was built), so that patches reach the file reference too.
fn templates() -> &'static Templates {
    static T: OnceLock<Templates> = OnceLock::new();
    T.get_or_init(|| {
        let mut regions = Vec::new();
        let mut geometry = None;
        let copied = b"the quick brown fox\njumps over\nthe lazy dog\n1 2 3\n4 5 6\nthe end\n".repeat(4);
        let in_place = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz_targets/mr_region_open.rs");
        for (input, split_bytes, copy_input) in [
            (MrInput::from_bytes(copied), 64, true),
            (MrInput::open(std::path::Path::new(in_place)).expect("the target's source"), 1024, false),
        ] {
            let (done, running, g) =
                template(&input, JobOptions { split_bytes, reduce_tasks: 3, copy_input });
            regions.extend([done, running]);
            geometry = Some(g);
        }
        Templates { scratch: Scratch::new(), regions, geometry: geometry.expect("a template") }
    })
}

/// A region holding one finished word-count job over `input`, and the same region with the job
/// running, half its map tasks and every reduce task unpublished.
fn template(input: &MrInput, options: JobOptions) -> (Vec<u8>, Vec<u8>, Geometry) {
    let path = std::path::PathBuf::from(format!("/dev/shm/shoal-fuzz-mr-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let region = Arc::new(JobRegion::create(&path, 2 << 20, 4 << 20, 64).expect("template region"));
    let worker = Worker::start(Arc::clone(&region), WorkerOptions::threads(1));
    let app = apps::find("wordcount").expect("wordcount");
    Coordinator::new(&region, options, |_| {})
        .unwrap()
        .run_app(app, input, &Args::default())
        .expect("template job");
    worker.stop().expect("template worker");
    let geometry = *region.geometry();
    drop(region);
    let done = std::fs::read(&path).expect("template bytes");
    let _ = std::fs::remove_file(&path);
    let mut running = done.clone();
    let mut put =
        |off: u64, v: u64| running[off as usize..off as usize + 8].copy_from_slice(&v.to_le_bytes());
    put(geometry.job_field(0, job::STATE), 2);
    put(header::FINISHED, 0);
    let word = |bytes: &[u8], off: u64| {
        u64::from_le_bytes(bytes[off as usize..off as usize + 8].try_into().unwrap())
    };
    let (first, maps, reduces) = (
        word(&done, geometry.job_field(0, job::FIRST_TASK)),
        word(&done, geometry.job_field(0, job::MAP_TASKS)),
        word(&done, geometry.job_field(0, job::REDUCE_TASKS)),
    );
    for t in (first + maps / 2)..(first + maps + reduces) {
        put(geometry.task_field(t, task::RESULT), 0);
        put(geometry.task_field(t, task::CLAIM), 0);
    }
    (done, running, geometry)
}

/// Applies patches decoded from `input` to `bytes`.
fn patch(bytes: &mut Vec<u8>, g: &Geometry, input: &mut Input) {
    while let Some(op) = input.byte() {
        if bytes.is_empty() {
            return;
        }
        match op % 8 {
            // A run of bytes at an offset into the header, the first jobs, the tasks or the arena.
            0..=3 => {
                let base = [0, g.jobs_offset, g.tasks_offset, g.arena_offset][op as usize % 4] as usize;
                let span = [512, 2 * JOB_BYTES as usize, 64 * TASK_BYTES as usize, 1 << 16][op as usize % 4];
                let off = input.u32() as usize % span;
                let len = input.u8() as usize % 16 + 1;
                let data = input.take(len);
                let at = (base + off) % bytes.len();
                let n = data.len().min(bytes.len() - at);
                bytes[at..at + n].copy_from_slice(&data[..n]);
            }
            // A whole word of a job or task entry: small numbers reach states, counts, kinds.
            4 | 5 => {
                let entry = if op % 8 == 4 {
                    g.job_field(input.u8() as u64 % 2, (input.u8() as u64 % 16) * 8)
                } else {
                    g.task_field(input.u8() as u64 % 64, (input.u8() as u64 % 8) * 8)
                };
                let v = if input.u8() % 2 == 0 { input.u8() as u64 } else { input.u64() };
                let at = entry as usize;
                if at + 8 <= bytes.len() {
                    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
                }
            }
            // One bit anywhere.
            6 => {
                let at = input.u32() as usize % bytes.len();
                bytes[at] ^= 1 << (input.u8() % 8);
            }
            // Truncate or extend the file.
            _ => {
                let delta = input.u16() as i16 as isize * 64;
                let len = (bytes.len() as isize + delta).clamp(0, 2 * bytes.len() as isize);
                bytes.resize(len as usize, 0);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let t = templates();
    let mut input = Input(data);
    let Some(mode) = input.byte() else { return };
    let bytes = if mode % 8 == 7 {
        input.0.to_vec()
    } else {
        let mut bytes = t.regions[(mode as usize >> 3) % t.regions.len()].clone();
        patch(&mut bytes, &t.geometry, &mut input);
        bytes
    };
    t.scratch.set(&bytes);
    let Ok(region) = JobRegion::attach(&t.scratch.path, mode & 0x80 != 0) else { return };
    let _ = region.jobs();
    for _ in 0..64 {
        if !matches!(step(&region, 10_000), Ok(Some(_))) {
            break;
        }
    }
    let _ = region.jobs();
    let _ = Coordinator::finish(&region);
});
