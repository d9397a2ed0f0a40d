//! An inverted index, written outside Shoal against `shoal_mapreduce::App`: for each word, the
//! files it occurs in. Its input is a list of text files, one path a line; a map task reads
//! the files of its split of the list, and the combiner merges sorted lists of files.
//!
//! `shoal_mapreduce::main` makes this program `shoal mr` with one more app:
//!
//! ```sh
//! find docs -name '*.txt' > files.txt
//! inverted-index run invindex files.txt --workers 4 --json
//! inverted-index run invindex files.txt --workers 0 --region /dev/shm/idx &   # then, anywhere:
//! inverted-index worker /dev/shm/idx
//! ```

use shoal_mapreduce::{App, Args, Emit, Input, Jobs, MrError, Rendered};
use std::collections::BTreeSet;
use std::process::ExitCode;

fn main() -> ExitCode {
    shoal_mapreduce::main(&[&InvertedIndex])
}

/// The app: word → the files it occurs in.
struct InvertedIndex;

impl App for InvertedIndex {
    fn name(&self) -> &'static str {
        "invindex"
    }

    fn about(&self) -> &'static str {
        "the files each word occurs in (input: a list of text files, one path a line)"
    }

    fn map(&self, _stage: u32, _params: &[u8], split: &[u8], out: &mut Emit) -> Result<(), String> {
        for path in split.split(|&b| b == b'\n').filter(|line| !line.is_empty()) {
            let name = String::from_utf8_lossy(path);
            let text = std::fs::read(&*name).map_err(|e| format!("cannot read {name}: {e}"))?;
            let words: BTreeSet<Vec<u8>> = words(&text).collect();
            let files = encode(&[path]);
            words.iter().for_each(|word| out.emit(word, &files));
        }
        Ok(())
    }

    fn combine(&self, _stage: u32, acc: &mut Vec<u8>, value: &[u8]) {
        let mut files: Vec<&[u8]> = decode(acc).chain(decode(value)).collect();
        files.sort_unstable();
        files.dedup();
        *acc = encode(&files);
    }

    fn drive(&self, input: &Input, args: &Args, jobs: &mut dyn Jobs) -> Result<Rendered, MrError> {
        args.only(self.name(), &[])?;
        // Paths made absolute here, so that a worker started in any directory finds the files,
        // and a missing file is named before any work starts.
        let mut list = Vec::new();
        for line in input.contents()?.split(|&b| b == b'\n') {
            let path = String::from_utf8_lossy(line);
            if path.trim().is_empty() {
                continue;
            }
            let absolute = std::fs::canonicalize(&*path)
                .map_err(|e| MrError::BadInput(format!("cannot read listed file {path}: {e}")))?;
            list.extend_from_slice(absolute.to_string_lossy().as_bytes());
            list.push(b'\n');
        }
        let list = jobs.put_bytes(&list)?;
        let index: Vec<(String, Vec<String>)> = jobs
            .run(self, 0, list, &[])?
            .iter()
            .map(|(word, files)| {
                let files = decode(files).map(|f| String::from_utf8_lossy(f).into_owned()).collect();
                (String::from_utf8_lossy(word).into_owned(), files)
            })
            .collect();
        let text = index.iter().map(|(word, files)| format!("{word}: {}\n", files.join(", "))).collect();
        let json = serde_json::json!({ "words": index.len(), "index": index });
        Ok(Rendered { text, json })
    }
}

/// The words of `text`: runs of ASCII letters and digits, lower-cased (word count's rule).
fn words(text: &[u8]) -> impl Iterator<Item = Vec<u8>> + '_ {
    text.split(|b| !b.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).map(|w| w.to_ascii_lowercase())
}

/// A list of files as a value: each path's length (`u32`, little-endian), then the path.
fn encode(files: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(files.iter().map(|f| 4 + f.len()).sum());
    for file in files {
        out.extend_from_slice(&(file.len() as u32).to_le_bytes());
        out.extend_from_slice(file);
    }
    out
}

/// The files of a value; a damaged end (values come from a shared file) ends the list.
fn decode(mut value: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let len = u32::from_le_bytes(value.get(..4)?.try_into().ok()?) as usize;
        let file = value.get(4..4 + len)?;
        value = &value[4 + len..];
        Some(file)
    })
}
