//! # shoal-textfile: an operator's file, read so that a wrong path cannot hang or flood a program
//!
//! Every program reads files it is pointed at (`--config`, `--tenants`, a router's pools, a
//! provisioning state, a schedule). A wrong path must give a clear error, never a hang (a FIFO
//! blocks at `open` until a writer comes) or unbounded memory (`/dev/zero`, a multi-gigabyte log):
//!
//! ```text
//!   path ──► metadata: a regular file? ── no ──► "FLAG PATH: not a regular file (a fifo)"
//!              │ yes
//!              ▼
//!            open, read at most max + 1 bytes ── more ──► "FLAG PATH: larger than … bytes"
//!              ▼
//!            UTF-8? ── no ──► "PATH:LINE: not UTF-8 text"
//!              ▼
//!            the text
//! ```
//!
//! The check before `open` leaves a race (the path replaced by a FIFO in between); the bound on
//! the read holds whatever is opened.

use std::fs::File;
use std::io::Read;
use std::path::Path;

/// What a configuration file may weigh unless a reader says otherwise: far above any real one.
pub const DEFAULT_MAX_BYTES: u64 = 16 << 20;

/// Reads `path` as UTF-8 text of at most `max_bytes`; `flag` (`--config`, or empty) starts
/// every error message, followed by the path.
pub fn read_text(path: &Path, flag: &str, max_bytes: u64) -> Result<String, String> {
    let bytes = read_bytes(path, flag, max_bytes)?;
    String::from_utf8(bytes).map_err(|e| {
        let line = e.as_bytes()[..e.utf8_error().valid_up_to()].iter().filter(|b| **b == b'\n').count() + 1;
        format!("{}:{line}: not UTF-8 text", path.display())
    })
}

/// Reads `path`'s bytes, at most `max_bytes`, refusing anything but a regular file.
pub fn read_bytes(path: &Path, flag: &str, max_bytes: u64) -> Result<Vec<u8>, String> {
    let name =
        if flag.is_empty() { path.display().to_string() } else { format!("{flag} {}", path.display()) };
    let kind = std::fs::metadata(path).map_err(|e| format!("{name}: {e}"))?.file_type();
    if !kind.is_file() {
        return Err(format!("{name}: not a regular file ({})", describe(kind)));
    }
    let file = File::open(path).map_err(|e| format!("{name}: {e}"))?;
    let mut bytes = Vec::new();
    file.take(max_bytes + 1).read_to_end(&mut bytes).map_err(|e| format!("{name}: {e}"))?;
    if bytes.len() as u64 > max_bytes {
        return Err(format!("{name}: larger than {max_bytes} bytes; not a file this reads"));
    }
    Ok(bytes)
}

fn describe(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a fifo"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("shoal-textfile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_small_text_file_is_read() {
        let d = dir("small");
        let file = d.join("c.conf");
        std::fs::write(&file, "-p 11211\n").unwrap();
        assert_eq!(read_text(&file, "--config", 100).unwrap(), "-p 11211\n");
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_fifo_a_device_and_a_directory_are_refused_without_blocking() {
        let d = dir("special");
        let fifo = d.join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let why = read_text(&fifo, "--tenants", 100).unwrap_err();
        assert!(why.starts_with("--tenants ") && why.ends_with("not a regular file (a fifo)"), "{why}");
        let why = read_text(Path::new("/dev/zero"), "--config", 100).unwrap_err();
        assert_eq!(why, "--config /dev/zero: not a regular file (a character device)");
        let why = read_text(&d, "", 100).unwrap_err();
        assert!(why.ends_with("not a regular file (a directory)"), "{why}");
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn too_large_missing_and_not_utf8_are_named() {
        let d = dir("bad");
        let big = d.join("big");
        std::fs::write(&big, vec![b'#'; 101]).unwrap();
        let why = read_text(&big, "--config", 100).unwrap_err();
        assert!(why.ends_with("larger than 100 bytes; not a file this reads"), "{why}");
        assert_eq!(read_text(&big, "", 101).unwrap().len(), 101);
        let binary = d.join("bin");
        std::fs::write(&binary, b"ok\nok\n\xff\n").unwrap();
        assert_eq!(
            read_text(&binary, "", 100).unwrap_err(),
            format!("{}:3: not UTF-8 text", binary.display())
        );
        let why = read_text(&d.join("absent"), "--config", 100).unwrap_err();
        assert!(why.contains("No such file"), "{why}");
        std::fs::remove_dir_all(d).unwrap();
    }
}
