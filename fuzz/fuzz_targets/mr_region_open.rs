//! A job region is input from outside the process: `shoal mr worker` attaches to whatever
//! file it is given and works on the jobs it finds. Attaching and working must never panic,
//! crash or hang on any file; errors are fine (a worker refuses what it cannot understand).
//!
//! Input: one mode byte, then either the raw file (mode % 8 == 7) or patches applied to a
//! valid region holding a finished word-count job or one stopped half-way (some map and
//! every reduce task unpublished), so that patched job entries, task entries and output
//! areas all reach the worker.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_mapreduce::layout::{header, job, task, Geometry, JOB_BYTES, TASK_BYTES};
use shoal_mapreduce::{apps, step, Args, Coordinator, JobOptions, JobRegion, Worker, WorkerOptions};
use shoal_region_fuzz::{Input, Scratch};
use std::sync::{Arc, OnceLock};

struct Templates {
    scratch: Scratch,
    regions: Vec<Vec<u8>>,
    geometry: Geometry,
}

/// A region with one finished word-count job, and the same job turned back to running.
fn templates() -> &'static Templates {
    static T: OnceLock<Templates> = OnceLock::new();
    T.get_or_init(|| {
        let path = std::path::PathBuf::from(format!("/dev/shm/shoal-fuzz-mr-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let region = Arc::new(JobRegion::create(&path, 2 << 20, 4 << 20, 64).expect("template region"));
        let worker = Worker::start(Arc::clone(&region), WorkerOptions::threads(1));
        let options = JobOptions { split_bytes: 64, reduce_tasks: 3 };
        let input = b"the quick brown fox\njumps over\nthe lazy dog\n1 2 3\n4 5 6\nthe end\n".repeat(4);
        let app = apps::find("wordcount").expect("wordcount");
        Coordinator::new(&region, options, |_| {})
            .unwrap()
            .run_app(app, &input, &Args::default())
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
        Templates { scratch: Scratch::new(), regions: vec![done, running], geometry }
    })
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
