//! `shoal server --config FILE`: flags from a file in the format of Debian's
//! `/etc/memcached.conf` (one flag per line, `#` comments), followed by the command line's.
//!
//! ```text
//!  FILE ─► lines ─► words (comment cut, `\#` kept) ─► each line parsed alone: one flag, known,
//!                   its value well-formed, not set on an earlier line ─► the file's argv
//!  the file's argv ++ the command line ─► one parse ─► ServerArgs::settings ─► Settings
//! ```
//!
//! Debian's `systemd-memcached-wrapper` joins the file's lines into memcached's command line,
//! skipping `-d` (systemd supervises the process in the foreground) and `logfile` (the journal
//! keeps the output); the same lines are skipped here. Where the wrapper passes anything on,
//! this reader is stricter, so that a typo stops the start rather than half-applying a file:
//! an unknown flag, a flag set on two lines, a value the flag refuses, two flags on one line
//! or a line that is not a flag is an error naming `FILE:LINE`. The file's flags come first
//! and the command line's after them, parsed as one command line: a flag given in both takes
//! the command line's value (as a flag given twice on a command line takes its last), and the
//! repeatable ones (`-v`, `-o`) add up. The file's `-l` lines make one list of addresses, as
//! memcached's do. Nothing starts until the whole of it is checked.

use crate::config::{ServerArgs, Settings};
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, Args, Command, FromArgMatches};
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::Path;

/// A config file is a few dozen lines; anything past this is not one (and is not read whole).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// The settings from `file`'s flags followed by `command_line`'s (the arguments after
/// `shoal server`); the error says which line, or which combination, to fix.
pub fn settings(file: &Path, command_line: impl IntoIterator<Item = OsString>) -> Result<Settings, String> {
    let name = file.display().to_string();
    let text = read(file)?;
    settings_from(&name, file_arguments(&name, &text)?, command_line)
}

/// The settings from a file's command line ([`file_arguments`]) followed by `command_line`.
pub fn settings_from(
    name: &str,
    file_argv: Vec<String>,
    command_line: impl IntoIterator<Item = OsString>,
) -> Result<Settings, String> {
    merge(name, file_argv, command_line)?
        .settings()
        .map_err(|why| format!("{why} (the flags of {name}, then the command line's)"))
}

/// Reads the file, bounded, as UTF-8 text.
fn read(file: &Path) -> Result<String, String> {
    shoal_textfile::read_text(file, "--config", MAX_FILE_BYTES)
}

/// The command line `text` (a config file called `name` in messages) stands for, every line
/// checked on its own.
pub fn file_arguments(name: &str, text: &str) -> Result<Vec<String>, String> {
    let mut command = server_command();
    let mut first_set_on: HashMap<String, usize> = HashMap::new();
    let mut argv = Vec::new();
    let mut listen: Vec<String> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let at = |why: String| format!("{name}:{number}: {why}");
        let words = line_words(line);
        let Some(first) = words.first() else { continue };
        if !first.starts_with('-') {
            if first == "logfile" && words.len() == 2 {
                continue;
            }
            return Err(at(format!(
                "expected one flag, such as `-m 64` or `--rejoin-hold 5` (or `logfile PATH`), found `{line}`"
            )));
        }
        let matches = command
            .try_get_matches_from_mut(std::iter::once("shoal server").chain(words.iter().map(String::as_str)))
            .map_err(|e| at(clap_message(&e)))?;
        let given: Vec<&Arg> = command
            .get_arguments()
            .filter(|arg| matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine))
            .collect();
        let [arg] = given[..] else {
            return Err(at(format!("one flag per line, found `{line}`")));
        };
        let flag = flag_name(arg);
        match arg.get_id().as_str() {
            "daemonize" => continue,
            "help" | "version" | "config" => {
                return Err(at(format!("{flag} has no place in a config file")));
            }
            // memcached joins its -l flags into one list (`-l 127.0.0.1` and `-l ::1` lines).
            "listen" => {
                listen.extend(matches.get_one::<String>("listen").cloned());
                continue;
            }
            _ => {}
        }
        let repeatable = matches!(arg.get_action(), ArgAction::Append | ArgAction::Count);
        if !repeatable {
            if let Some(earlier) = first_set_on.insert(arg.get_id().to_string(), number) {
                return Err(at(format!(
                    "{flag} is already set on line {earlier}; give each flag once (only -v, -o and -l repeat)"
                )));
            }
        }
        argv.extend(words);
    }
    if !listen.is_empty() {
        argv.extend(["-l".to_string(), listen.join(",")]);
    }
    Ok(argv)
}

/// A line's words: what precedes its first `#` not written `\#`, split at whitespace, with
/// `\#` standing for `#` (as Debian's wrapper and the shell it hands the line to read it).
fn line_words(line: &str) -> Vec<String> {
    let mut kept = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'#') => kept.push(chars.next().unwrap_or('#')),
            '#' => break,
            _ => kept.push(c),
        }
    }
    kept.split_whitespace().map(str::to_string).collect()
}

/// The file's flags, then the command line's, parsed as one command line.
fn merge(
    name: &str,
    file_argv: Vec<String>,
    command_line: impl IntoIterator<Item = OsString>,
) -> Result<ServerArgs, String> {
    let argv = std::iter::once(OsString::from("shoal server"))
        .chain(file_argv.into_iter().map(OsString::from))
        .chain(command_line);
    let matches = server_command()
        .try_get_matches_from(argv)
        .map_err(|e| format!("{name} with the command line: {}", clap_message(&e)))?;
    ServerArgs::from_arg_matches(&matches).map_err(|e| clap_message(&e))
}

/// `shoal server`'s flags, as a command of their own.
fn server_command() -> Command {
    ServerArgs::augment_args(Command::new("shoal server"))
}

/// How a flag is written in messages: its short form if it has one, as memcached.conf writes
/// flags.
fn flag_name(arg: &Arg) -> String {
    match (arg.get_short(), arg.get_long()) {
        (Some(short), _) => format!("-{short}"),
        (None, Some(long)) => format!("--{long}"),
        (None, None) => arg.get_id().to_string(),
    }
}

/// clap's message without its `error: ` label, usage and tips: the first line says it.
fn clap_message(error: &clap::Error) -> String {
    let text = error.to_string();
    let first = text.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn argv(text: &str) -> Result<Vec<String>, String> {
        file_arguments("shoal.conf", text)
    }

    fn merged(text: &str, command_line: &[&str]) -> Result<Settings, String> {
        settings_from("shoal.conf", argv(text)?, command_line.iter().map(OsString::from))
    }

    #[test]
    fn debians_memcached_conf_reads_as_memcached_reads_it() {
        let debian = "# memcached default config file\n\n-d\n\nlogfile /var/log/memcached.log\n\
                      # -v\n-m 64\n-p 11211\n-u memcache\n-l 127.0.0.1\n# -c 1024\n\
                      -P /var/run/memcached/memcached.pid\n";
        assert_eq!(
            argv(debian).unwrap().join(" "),
            "-m 64 -p 11211 -u memcache -P /var/run/memcached/memcached.pid -l 127.0.0.1"
        );
        let s = merged(debian, &[]).unwrap();
        assert_eq!(s.tcp, vec![("127.0.0.1".to_string(), 11211)]);
        assert_eq!((s.region_bytes, s.user.as_deref()), (64 << 20, Some("memcache")));
        assert!(!s.daemonize, "-d in the file is skipped, as Debian's systemd wrapper skips it");
    }

    #[test]
    fn shoals_own_flags_comments_and_escapes() {
        let text = "  --rejoin-hold 5   # seconds\n-e /dev/shm/x\\#1\n--region-mode=640\n-vv\n-v\n\
                    -o modern\n-o idle_timeout=9\n\t\n#-m 1\n";
        assert_eq!(
            argv(text).unwrap().join(" "),
            "--rejoin-hold 5 -e /dev/shm/x#1 --region-mode=640 -vv -v -o modern -o idle_timeout=9"
        );
        let s = merged(text, &[]).unwrap();
        assert_eq!((s.rejoin_hold, s.verbose, s.region_mode), (5, 3, 0o640));
        assert_eq!(s.region_path, Some(PathBuf::from("/dev/shm/x#1")));
        assert_eq!(s.idle_timeout, Some(9));
    }

    #[test]
    fn listen_lines_make_one_list_as_memcacheds_do() {
        let s = merged("-l 127.0.0.1\n-p 7000\n-l [::1]:7001\n--listen=127.0.0.2\n", &[]).unwrap();
        let expected = [("127.0.0.1", 7000), ("::1", 7001), ("127.0.0.2", 7000)];
        assert_eq!(s.tcp, expected.map(|(host, port)| (host.to_string(), port)));
        let s = merged("-l 127.0.0.1\n-l ::1\n", &["-l", "10.0.0.1"]).unwrap();
        assert_eq!(s.tcp, [("10.0.0.1".to_string(), 11211)], "the command line's -l replaces the file's");
    }

    #[test]
    fn the_command_line_comes_after_the_file() {
        let text = "-m 64\n-p 11211\n-v\n";
        let s = merged(text, &["-p", "7000", "-v", "--config", "shoal.conf"]).unwrap();
        assert_eq!((s.tcp[0].1, s.region_bytes, s.verbose), (7000, 64 << 20, 2));
        assert_eq!(
            merged("-e /dev/shm/a\n", &["--region-path", "/dev/shm/b"]).unwrap_err(),
            "shoal.conf with the command line: the argument '--memory-file <FILE>' cannot be used with '--region-path <FILE>'"
        );
    }

    #[test]
    fn bad_lines_are_named_and_nothing_is_kept() {
        let error = |text: &str| argv(text).unwrap_err();
        assert_eq!(error("-m 64\n-k\n"), "shoal.conf:2: unexpected argument '-k' found");
        assert_eq!(
            error("-m 64\n-p 1\n\n-m 128\n"),
            "shoal.conf:4: -m is already set on line 1; give each flag once (only -v, -o and -l repeat)"
        );
        assert_eq!(
            error("--memory-limit 64\n-m 128\n"),
            "shoal.conf:2: -m is already set on line 1; give each flag once (only -v, -o and -l repeat)"
        );
        assert!(
            error("-m lots\n").starts_with("shoal.conf:1: invalid value 'lots' for '--memory-limit <MB>'")
        );
        assert!(error("-m\n").starts_with("shoal.conf:1: a value is required for '--memory-limit <MB>'"));
        assert_eq!(error("-m 64 -p 1\n"), "shoal.conf:1: one flag per line, found `-m 64 -p 1`");
        assert_eq!(error("-Mv\n"), "shoal.conf:1: one flag per line, found `-Mv`");
        assert_eq!(error("-m 64 128\n"), "shoal.conf:1: unexpected argument '128' found");
        assert!(error("memory 64\n").starts_with("shoal.conf:1: expected one flag"));
        assert!(error("logfile\n").starts_with("shoal.conf:1: expected one flag"));
        assert_eq!(error("-h\n"), "shoal.conf:1: -h has no place in a config file");
        assert_eq!(error("--config other.conf\n"), "shoal.conf:1: --config has no place in a config file");
        // Values each flag accepts alone, refused together, with memcached's message.
        assert_eq!(
            merged("-m 64\n-I 1000\n", &[]).unwrap_err(),
            "Item max size cannot be less than 1024 bytes. (the flags of shoal.conf, then the command line's)"
        );
    }

    #[test]
    fn settings_reads_the_file_and_names_it_in_errors() {
        let dir = std::env::temp_dir().join(format!("shoal-config-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("shoal.conf");
        std::fs::write(&file, "-m 32\n-S\n-B ascii\n").unwrap();
        let message = settings(&file, []).unwrap_err();
        assert_eq!(
            message,
            format!(
                "ERROR: You cannot allow the ASCII protocol while using SASL. (the flags of {}, then the command line's)",
                file.display()
            )
        );
        assert_eq!(settings(&file, ["-B".into(), "binary".into()]).unwrap().region_bytes, 32 << 20);
        std::fs::write(&file, b"-m 32\n-l \xff\n").unwrap();
        assert_eq!(settings(&file, []).unwrap_err(), format!("{}:2: not UTF-8 text", file.display()));
        std::fs::write(&file, vec![b'#'; MAX_FILE_BYTES as usize + 1]).unwrap();
        assert!(settings(&file, []).unwrap_err().contains("larger than 1048576 bytes"));
        assert!(settings(&dir.join("missing.conf"), []).unwrap_err().contains("No such file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
