//! `shoal mr` end to end: the built binary runs apps (with worker processes it starts), writes
//! JSON output, and answers bad input with clear errors.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Output};

fn shoal(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shoal")).args(args).output().unwrap()
}

fn temp(name: &str, contents: &[u8]) -> PathBuf {
    let path = std::env::temp_dir().join(format!("shoal-mr-cli-{}-{name}", std::process::id()));
    std::fs::write(&path, contents).unwrap();
    path
}

#[test]
fn word_count_with_worker_processes_matches_a_direct_count() {
    let text: String = (0..4000).map(|i| format!("w{} W{} x\n", i % 37, i % 11)).collect();
    let mut expected: HashMap<String, u64> = HashMap::new();
    for w in text.split_whitespace() {
        *expected.entry(w.to_lowercase()).or_default() += 1;
    }
    let input = temp("words", text.as_bytes());
    let output = temp("out.json", b"");
    let out = shoal(&[
        "mr",
        "run",
        "wordcount",
        input.to_str().unwrap(),
        "--workers",
        "3",
        "--threads",
        "1",
        "--split-bytes",
        "2K",
        "--reduce-tasks",
        "3",
        "--json",
        "--output",
        output.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&output).unwrap()).unwrap();
    let got: HashMap<String, u64> = json["result"]["words"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_str().unwrap().to_string(), p[1].as_u64().unwrap()))
        .collect();
    assert_eq!(got, expected);
    assert!(json["region"].is_null(), "the region it created is gone: {json}");
    let _ = std::fs::remove_file(input);
    let _ = std::fs::remove_file(output);
}

#[test]
fn bad_apps_inputs_regions_and_arguments_get_clear_errors() {
    let input = temp("small", b"1 2\n3 4\n");
    let path = input.to_str().unwrap();
    for (args, says) in [
        (vec!["mr", "run", "nope", path], "no app named \"nope\"; the apps are: wordcount"),
        (vec!["mr", "run", "wordcount", "/nonexistent/input"], "cannot read input /nonexistent/input"),
        (vec!["mr", "run", "kmeans", path, "--arg", "k=zero"], "k=\"zero\""),
        (vec!["mr", "run", "kmeans", path, "--arg", "k"], "name=value"),
        (vec!["mr", "run", "wordcount", path, "--region-size", "1M"], "--region-size"),
        (vec!["mr", "worker", path], "not a Shoal job region"),
        (vec!["mr", "worker", "/nonexistent/region"], "cannot open job region"),
    ] {
        let out = shoal(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{args:?}: {err}");
    }
    let _ = std::fs::remove_file(input);
}

#[test]
fn generated_inputs_give_the_same_result_in_every_mode() {
    for app in ["wordcount", "linreg", "strmatch"] {
        let input = temp(&format!("gen-{app}"), b"");
        let out = shoal(&["mr", "generate", app, input.to_str().unwrap(), "--size", "300K", "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let generated: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut results = Vec::new();
        // Elastic twice: its input read in place, and copied into the region.
        for (mode, copy) in [("elastic", false), ("elastic", true), ("fixed", false), ("rayon", false)] {
            let mut args = vec!["mr", "run", app, input.to_str().unwrap(), "--mode", mode, "--threads", "2"];
            if copy {
                args.push("--copy-input");
            }
            args.extend(["--split-bytes", "16K", "--json"]);
            let app_args: Vec<String> = generated["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect();
            app_args.iter().for_each(|a| args.extend(["--arg", a]));
            let out = shoal(&args);
            assert!(out.status.success(), "{mode}: {}", String::from_utf8_lossy(&out.stderr));
            let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(json["mode"], mode);
            assert!(json["region"].is_null(), "{mode}: nothing left behind");
            results.push(json["result"].clone());
        }
        assert!(results.iter().all(|r| *r == results[0]), "{app}: {results:?}");
        let _ = std::fs::remove_file(input);
    }
}

#[test]
fn fixed_mode_and_generate_refuse_what_they_cannot_do() {
    let input = temp("fixed-bad", b"a b\n");
    let path = input.to_str().unwrap();
    for (args, says) in [
        (vec!["mr", "run", "wordcount", path, "--mode", "fixed", "--workers", "2"], "leave out --workers"),
        (vec!["mr", "run", "wordcount", path, "--mode", "fixed", "--region", "/dev/shm/x"], "--region"),
        (vec!["mr", "run", "wordcount", path, "--mode", "rayon", "--arg", "k=1"], "\"k\""),
        (vec!["mr", "generate", "nope", path], "no app named \"nope\""),
        (vec!["mr", "generate", "linreg", "/nonexistent/dir/input"], "cannot write input"),
    ] {
        let out = shoal(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{args:?}: {err}");
    }
    let _ = std::fs::remove_file(input);
}

#[test]
fn workers_refuse_finished_regions_and_other_layout_versions_by_name() {
    let input = temp("kept", b"one two\n");
    let region = std::env::temp_dir().join(format!("shoal-mr-cli-{}-kept-region", std::process::id()));
    let out = shoal(
        &["mr", "run", "wordcount", input.to_str().unwrap(), "--keep-region", "--region"]
            .into_iter()
            .chain([region.to_str().unwrap()])
            .collect::<Vec<_>>(),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let worker = |says: &str| {
        let out = shoal(&["mr", "worker", region.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{err}");
    };
    worker("is finished: every job in it is done");
    let mut bytes = std::fs::read(&region).unwrap();
    bytes[8..16].copy_from_slice(&99u64.to_le_bytes()); // the header's layout version
    std::fs::write(&region, bytes).unwrap();
    worker("has layout version 99, this build reads version ");
    let out = shoal(&["mr", "run", "wordcount", std::env::temp_dir().to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read input"), "a directory");
    let _ = std::fs::remove_file(region);
    let _ = std::fs::remove_file(input);
}

#[test]
fn apps_are_listed() {
    let out = shoal(&["mr", "apps", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = list.as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["wordcount", "histogram", "linreg", "matmul", "strmatch", "kmeans", "pca"]);
}

#[test]
fn an_interrupted_run_removes_the_region_it_created() {
    let input = temp("interrupted", b"some words\n");
    let region = std::env::temp_dir().join(format!("shoal-mr-cli-{}-region", std::process::id()));
    let mut run = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["mr", "run", "wordcount", input.to_str().unwrap(), "--workers", "0", "--region"])
        .arg(&region)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    // With no workers the job waits; once its tasks are published, interrupt it.
    while !Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["mr", "info", "--json"])
        .arg(&region)
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("\"running\""))
    {
        assert!(std::time::Instant::now() < deadline, "the job never started");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SAFETY: a signal to our own child.
    assert_eq!(unsafe { libc::kill(run.id() as i32, libc::SIGINT) }, 0);
    assert_eq!(run.wait().unwrap().code(), Some(130));
    assert!(!region.exists(), "the region is removed");
    let _ = std::fs::remove_file(input);
}
