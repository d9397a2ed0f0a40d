//! The owed-deletes file of a near cache (`--owed-deletes`, by default beside the `-e` region
//! file): the deletes the near cache acknowledged but could not forward to its upstream, kept
//! on disk so that a near cache killed before it paid them sends them when it restarts — before
//! it reads anything from the upstream (docs/design/near-cache.md, "Owed deletes").
//!
//! ```text
//!  delete, upstream unreachable ──► OwedFile::append("delete <key>\r\n") ── fsync'd ──►
//!        then the client is answered (so an acknowledged delete is on disk, never only in memory)
//!  owed deletes paid (the upstream answered them) ──► OwedFile::rewrite(what is still owed):
//!        written whole beside the file, fsync'd, renamed over it (a kill leaves old or new)
//!  start ──► OwedFile::open ──► parse: header naming the upstream, then one delete a line
//!        ├── a line cut short by a kill mid-append (never acknowledged): dropped, said so
//!        └── anything else unexpected (another upstream's file, a foreign or damaged file,
//!            more deletes than can be owed): refused, the error naming the file; the server
//!            does not start until an operator moves it away
//! ```
//!
//! The format: `shoal near cache owed deletes v1 to <upstream>\n`, then `delete <key>\r\n`
//! (or `delete <key> hold <s>\r\n`) lines, as the near cache forwards them. The `near_owed_file`
//! fuzz target reads arbitrary bytes through [`parse`].

use shoal_proto::{Parse, Parser, Request, KEY_MAX};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The header line's text before the upstream's address.
const HEADER: &str = "shoal near cache owed deletes v1 to ";

/// The largest line of a delete the near cache writes (`delete <key> hold <u32>\r\n`).
const MAX_LINE: usize = KEY_MAX + 32;

/// What a file left by an earlier run holds.
#[derive(Debug, PartialEq, Eq)]
pub struct Loaded {
    /// The owed `delete` requests, each a whole line with its `\r\n`.
    pub deletes: Vec<Vec<u8>>,
    /// Bytes at the end that were a line (or the header) cut short by a kill mid-append.
    pub torn: usize,
}

/// The header line of a file of deletes owed to `upstream`.
fn header(upstream: &str) -> String {
    format!("{HEADER}{upstream}\n")
}

/// Reads a file of deletes owed to `upstream` (at most `max` of them), or says why it is not one.
pub fn parse(bytes: &[u8], upstream: &str, max: usize) -> Result<Loaded, String> {
    let expected = header(upstream);
    let Some(nl) = bytes.iter().position(|&b| b == b'\n') else {
        // Empty, or a header cut short by a kill while the file was made.
        if expected.as_bytes().starts_with(bytes) {
            return Ok(Loaded { deletes: Vec::new(), torn: bytes.len() });
        }
        return Err(format!("not a near cache's owed-deletes file (it does not start with {HEADER:?})"));
    };
    let first = &bytes[..=nl];
    if first != expected.as_bytes() {
        let shown = String::from_utf8_lossy(&first[..first.len().min(120)]).trim_end().to_string();
        return Err(match shown.strip_prefix(HEADER) {
            Some(other) => format!("it holds deletes owed to {other:?}, not to --upstream {upstream:?}"),
            None => format!("not a near cache's owed-deletes file (its first line is {shown:?})"),
        });
    }
    let mut deletes = Vec::new();
    let mut at = nl + 1;
    let mut parser = Parser::new(0);
    while at < bytes.len() {
        let rest = &bytes[at..];
        let Some(end) = rest.iter().take(MAX_LINE + 1).position(|&b| b == b'\n') else {
            if rest.len() > MAX_LINE {
                return Err(format!("damaged: the line at byte {at} is longer than any delete"));
            }
            return Ok(Loaded { deletes, torn: rest.len() });
        };
        let line = &rest[..=end];
        let damaged = || {
            let shown = String::from_utf8_lossy(&line[..line.len().min(80)]).trim_end().to_string();
            format!("damaged: the line at byte {at} is not a delete: {shown:?}")
        };
        if !line.ends_with(b"\r\n") {
            return Err(damaged());
        }
        match parser.parse(line) {
            Parse::Done { request: Request::Delete { noreply: false, .. }, consumed }
                if consumed == line.len() => {}
            _ => return Err(damaged()),
        }
        if deletes.len() == max {
            return Err(format!("it holds more than {max} deletes, more than a near cache owes"));
        }
        deletes.push(line.to_vec());
        at += end + 1;
    }
    Ok(Loaded { deletes, torn: 0 })
}

/// The owed-deletes file, open for appending.
pub struct OwedFile {
    path: PathBuf,
    upstream: String,
    file: File,
}

impl OwedFile {
    /// Opens the file at `path` for deletes owed to `upstream` (made if missing), with the
    /// deletes an earlier run left in it (at most `max`). A file that is not one, is another
    /// upstream's or is damaged is refused: the error names it.
    pub fn open(path: &Path, upstream: &str, max: usize) -> Result<(OwedFile, Vec<Vec<u8>>), String> {
        let named = |why: String| format!("the owed-deletes file {}: {why}", path.display());
        let limit = (max * MAX_LINE + header(upstream).len()) as u64;
        let loaded = match std::fs::metadata(path) {
            Ok(m) if m.len() > limit => {
                return Err(named(format!("{} bytes, more than {max} owed deletes take", m.len())))
            }
            Ok(_) => {
                let bytes = std::fs::read(path).map_err(|e| named(e.to_string()))?;
                parse(&bytes, upstream, max).map_err(named)?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Loaded { deletes: Vec::new(), torn: 0 },
            Err(e) => return Err(named(e.to_string())),
        };
        if loaded.torn > 0 {
            eprintln!(
                "shoal server: {}: its last {} bytes were a delete cut short by a kill while it was written \
                 (never acknowledged): dropped",
                path.display(),
                loaded.torn
            );
        }
        // Written anew: the header, the deletes left, nothing torn after them.
        let file = write_whole(path, upstream, &loaded.deletes).map_err(|e| named(e.to_string()))?;
        Ok((OwedFile { path: path.to_path_buf(), upstream: upstream.to_string(), file }, loaded.deletes))
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one owed delete (a whole request line) and flushes it to the disk.
    pub fn append(&mut self, request: &[u8]) -> std::io::Result<()> {
        self.file.write_all(request)?;
        self.file.sync_data()
    }

    /// Replaces the file's deletes by `owed`: written whole beside it, flushed, renamed over it.
    pub fn rewrite(&mut self, owed: &[Vec<u8>]) -> std::io::Result<()> {
        self.file = write_whole(&self.path, &self.upstream, owed)?;
        Ok(())
    }
}

/// Writes the file at `path` whole (the header, then `owed`) beside it, flushes it, renames it
/// over `path`, and opens it for appending.
fn write_whole(path: &Path, upstream: &str, owed: &[Vec<u8>]) -> std::io::Result<File> {
    let mut fresh = path.as_os_str().to_owned();
    fresh.push(".new");
    let fresh = PathBuf::from(fresh);
    let mut bytes = header(upstream).into_bytes();
    owed.iter().for_each(|d| bytes.extend_from_slice(d));
    let mut file = OpenOptions::new().create(true).write(true).truncate(true).open(&fresh)?;
    file.write_all(&bytes)?;
    file.sync_data()?;
    std::fs::rename(&fresh, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // The rename itself reaches the disk (best effort: some file systems refuse).
        let _ = File::open(dir).and_then(|d| d.sync_all());
    }
    OpenOptions::new().append(true).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UP: &str = "127.0.0.1:5000";

    fn file(lines: &[&str]) -> Vec<u8> {
        let mut bytes = header(UP).into_bytes();
        lines.iter().for_each(|l| bytes.extend_from_slice(l.as_bytes()));
        bytes
    }

    #[test]
    fn deletes_are_read_back_and_a_torn_tail_is_dropped() {
        let loaded = parse(&file(&["delete a\r\n", "delete b hold 3\r\n"]), UP, 10).unwrap();
        assert_eq!(loaded.deletes, vec![b"delete a\r\n".to_vec(), b"delete b hold 3\r\n".to_vec()]);
        assert_eq!(loaded.torn, 0);
        let loaded = parse(&file(&["delete a\r\n", "delete b"]), UP, 10).unwrap();
        assert_eq!((loaded.deletes.len(), loaded.torn), (1, 8));
        assert_eq!(parse(b"", UP, 10).unwrap().torn, 0);
        assert_eq!(parse(b"shoal near", UP, 10).unwrap().torn, 10);
    }

    #[test]
    fn foreign_damaged_and_oversized_files_are_refused() {
        let other = format!("{HEADER}10.0.0.1:1\ndelete a\r\n");
        assert!(parse(other.as_bytes(), UP, 10).unwrap_err().contains("owed to \"10.0.0.1:1\""));
        assert!(parse(b"12 1 0\ndelete a\r\n", UP, 10).unwrap_err().contains("not a near cache's"));
        assert!(parse(b"\x00\x01garbage", UP, 10).unwrap_err().contains("not a near cache's"));
        for bad in
            ["set a 0 0 1\r\n", "delete a noreply\r\n", "delete a\n", "delete\r\n", "delete a b c d\r\n"]
        {
            assert!(parse(&file(&[bad]), UP, 10).unwrap_err().contains("not a delete"), "{bad:?}");
        }
        let long = "x".repeat(MAX_LINE + 10);
        assert!(parse(&file(&[&long]), UP, 10).unwrap_err().contains("longer than any delete"));
        let many = vec!["delete a\r\n"; 3];
        assert!(parse(&file(&many), UP, 2).unwrap_err().contains("more than 2"));
    }

    #[test]
    fn a_file_is_appended_rewritten_and_reopened() {
        let dir = std::env::temp_dir().join(format!("shoal-owed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("near.owed");
        let _ = std::fs::remove_file(&path);
        let (mut owed, left) = OwedFile::open(&path, UP, 10).unwrap();
        assert!(left.is_empty());
        owed.append(b"delete a\r\n").unwrap();
        owed.append(b"delete b\r\n").unwrap();
        drop(owed);
        // A kill mid-append: a torn line after the two.
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"delete c").unwrap();
        let (mut owed, left) = OwedFile::open(&path, UP, 10).unwrap();
        assert_eq!(left, vec![b"delete a\r\n".to_vec(), b"delete b\r\n".to_vec()]);
        owed.rewrite(&[b"delete b\r\n".to_vec()]).unwrap();
        owed.append(b"delete d\r\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), file(&["delete b\r\n", "delete d\r\n"]));
        let refused = OwedFile::open(&path, "127.0.0.1:6000", 10).map(|_| ()).unwrap_err();
        assert!(refused.contains(&path.display().to_string()) && refused.contains("owed to"), "{refused}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
