//! Word count: how often each word occurs. A word is a run of ASCII letters and digits,
//! lowercased. The map combines as it goes, so a task stores each distinct word once.

use crate::app::{add_u64, le_u64, App, Args, Jobs, Rendered, SplitUnit};
use crate::error::MrError;
use crate::input::Input;
use crate::records::Emit;
use hashbrown::HashTable;
use xxhash_rust::xxh3::xxh3_64;

/// The word count app.
pub struct WordCount;

impl App for WordCount {
    fn name(&self) -> &'static str {
        "wordcount"
    }

    fn about(&self) -> &'static str {
        "occurrences of each word (text); args: top=N (only the N most frequent)"
    }

    fn map(&self, _stage: u32, _params: &[u8], split: &[u8], out: &mut Emit) -> Result<(), String> {
        let one = 1u64.to_le_bytes();
        for_each_word(split, |word| out.emit(word, &one));
        Ok(())
    }

    fn combine(&self, _stage: u32, acc: &mut Vec<u8>, value: &[u8]) {
        add_u64(acc, value);
    }

    fn drive(&self, input: &Input, args: &Args, jobs: &mut dyn Jobs) -> Result<Rendered, MrError> {
        let top = top_argument(args)?;
        let input = jobs.put_input(input)?;
        let records = jobs.run(self, 0, input, &[])?;
        let mut counts: Vec<(String, u64)> = records
            .into_iter()
            .map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), le_u64(&v)))
            .collect();
        Ok(render(&mut counts, top))
    }
}

/// The `top` argument (0: all words), after refusing others.
fn top_argument(args: &Args) -> Result<usize, MrError> {
    args.only(WordCount.name(), &["top"])?;
    Ok(args.number("top", 0, 0..=u64::MAX)? as usize)
}

/// Calls `found` with each word of `text`, lowercased.
fn for_each_word(text: &[u8], mut found: impl FnMut(&[u8])) {
    let mut word = Vec::with_capacity(32);
    for &b in text.iter().chain(std::iter::once(&b' ')) {
        if b.is_ascii_alphanumeric() {
            word.push(b.to_ascii_lowercase());
        } else if !word.is_empty() {
            found(&word);
            word.clear();
        }
    }
}

/// The same count written directly with Rayon in one process, without the framework (the
/// baseline of `shoal mr run --mode rayon`): a hash map per Rayon fold, merged.
pub(super) fn direct(input: &Input, args: &Args) -> Result<Rendered, MrError> {
    let top = top_argument(args)?;
    // The table the framework's `Emit` uses (one XXH3 per word), so that the comparison
    // measures the framework, not a choice of hash.
    fn add(counts: &mut HashTable<(u64, Vec<u8>, u64)>, word: &[u8], n: u64) {
        let hash = xxh3_64(word);
        match counts.find_mut(hash, |(h, w, _)| *h == hash && w == word) {
            Some((_, _, count)) => *count += n,
            None => {
                counts.insert_unique(hash, (hash, word.to_vec(), n), |e| e.0);
            }
        }
    }
    let counts = super::fold_pieces(
        input,
        SplitUnit::Lines,
        HashTable::new,
        |mut counts, piece| {
            for_each_word(piece, |word| add(&mut counts, word, 1));
            counts
        },
        |a, b| {
            let (mut into, from) = if a.len() >= b.len() { (a, b) } else { (b, a) };
            from.into_iter().for_each(|(_, word, n)| add(&mut into, &word, n));
            into
        },
    )?;
    let mut counts: Vec<(String, u64)> =
        counts.into_iter().map(|(_, k, v)| (String::from_utf8_lossy(&k).into_owned(), v)).collect();
    Ok(render(&mut counts, top))
}

/// Most frequent first, ties alphabetically; all words, or the `top` first.
fn render(counts: &mut Vec<(String, u64)>, top: usize) -> Rendered {
    let total: u64 = counts.iter().map(|c| c.1).sum();
    let distinct = counts.len();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    if top > 0 {
        counts.truncate(top);
    }
    let text = counts.iter().map(|(w, c)| format!("{w} {c}\n")).collect();
    let json = serde_json::json!({ "total": total, "distinct": distinct, "words": counts });
    Rendered { text, json }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{run_local, Rng};
    use std::collections::HashMap;

    #[test]
    fn counts_equal_a_single_threaded_count() {
        let mut rng = Rng(3);
        let vocabulary: Vec<String> = (0..300).map(|i| format!("W{}x{}", i, i % 7)).collect();
        let mut text = String::new();
        for i in 0..20_000 {
            text.push_str(&vocabulary[(rng.below(300) * rng.below(300) / 300) as usize]);
            text.push_str(if i % 13 == 0 { ".\n" } else { ", " });
        }
        let mut expected: HashMap<String, u64> = HashMap::new();
        for word in text.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()) {
            *expected.entry(word.to_ascii_lowercase()).or_default() += 1;
        }
        let mut expected: Vec<_> = expected.into_iter().collect();
        let want = render(&mut expected, 0);
        assert_eq!(run_local(&WordCount, text.as_bytes(), &[]).unwrap(), want);
        let top = run_local(&WordCount, text.as_bytes(), &["top=5"]).unwrap();
        assert_eq!(top.json["words"].as_array().unwrap().len(), 5);
        assert_eq!(top.json["words"][0], want.json["words"][0]);
    }

    #[test]
    fn empty_input_has_no_words_and_bad_arguments_are_named() {
        let r = run_local(&WordCount, b"", &[]).unwrap();
        assert_eq!(r.json["distinct"], 0);
        let err = run_local(&WordCount, b"a", &["k=2"]).unwrap_err().to_string();
        assert!(err.contains("\"k\""), "{err}");
    }
}
