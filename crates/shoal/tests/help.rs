//! Every `shoal` subcommand's help names the whole command in its usage line (`Usage: shoal
//! server`, `Usage: shoal region create`), whichever way it is asked for: clap's `--help`, or
//! `-h` where the subcommand takes it as a flag of its own (`shoal server`, as memcached).

use std::process::Command;

fn help(path: &[&str], flag: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_shoal")).args(path).arg(flag).output().unwrap();
    assert!(out.status.success(), "shoal {path:?} {flag}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommands a help text lists under `Commands:` (clap's own `help` left out).
fn subcommands(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter(|line| !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn every_subcommands_usage_names_the_whole_command() {
    let top = help(&[], "--help");
    let mut pending: Vec<Vec<String>> = subcommands(&top).into_iter().map(|s| vec![s]).collect();
    assert!(pending.len() >= 9, "shoal lists its subcommands: {top}");
    let mut checked = 0;
    while let Some(path) = pending.pop() {
        let path_args: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help(&path_args, "--help");
        let usage = format!("Usage: shoal {} ", path.join(" "));
        assert!(text.contains(&usage), "`shoal {} --help` should say `{usage}`:\n{text}", path.join(" "));
        checked += 1;
        for sub in subcommands(&text) {
            pending.push([path.clone(), vec![sub]].concat());
        }
    }
    assert!(checked > 20, "nested subcommands were found too ({checked})");
    // memcached's -h, which `shoal server` takes as its own flag.
    assert!(help(&["server"], "-h").contains("Usage: shoal server [OPTIONS]"));
}
