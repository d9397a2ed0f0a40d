//! Word count: how often each word occurs. By default a word is a run of ASCII letters and
//! digits, lowercased (`café` counts as `caf`: fast, and Phoenix's rule); with `words=unicode`
//! it is a word of Unicode's word boundaries (UAX #29, `unicode-segmentation`), lowercased by
//! Unicode's rules, without normalization. The map combines as it goes, so a task stores each
//! distinct word once.

use crate::app::{add_u64, le_u64, App, Args, Jobs, Rendered, SplitUnit};
use crate::error::MrError;
use crate::input::Input;
use crate::records::Emit;
use hashbrown::HashTable;
use unicode_segmentation::UnicodeSegmentation;
use xxhash_rust::xxh3::xxh3_64;

/// The word count app.
pub struct WordCount;

impl App for WordCount {
    fn name(&self) -> &'static str {
        "wordcount"
    }

    fn about(&self) -> &'static str {
        "occurrences of each word (text); args: top=N (only the N most frequent), words=ascii|unicode"
    }

    fn map(&self, _stage: u32, params: &[u8], split: &[u8], out: &mut Emit) -> Result<(), String> {
        let one = 1u64.to_le_bytes();
        Words::from_params(params).for_each(split, |word| out.emit(word, &one));
        Ok(())
    }

    fn combine(&self, _stage: u32, acc: &mut Vec<u8>, value: &[u8]) {
        add_u64(acc, value);
    }

    fn drive(&self, input: &Input, args: &Args, jobs: &mut dyn Jobs) -> Result<Rendered, MrError> {
        let (top, words) = arguments(args)?;
        let input = jobs.put_input(input)?;
        let records = jobs.run(self, 0, input, words.params())?;
        let mut counts: Vec<(String, u64)> = records
            .into_iter()
            .map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), le_u64(&v)))
            .collect();
        Ok(render(&mut counts, top))
    }
}

/// The `top` argument (0: all words) and the `words` mode, after refusing others.
fn arguments(args: &Args) -> Result<(usize, Words), MrError> {
    args.only(WordCount.name(), &["top", "words"])?;
    let words = match args.values("words").pop() {
        None | Some("ascii") => Words::Ascii,
        Some("unicode") => Words::Unicode,
        Some(other) => {
            return Err(MrError::BadInput(format!("argument words={other:?} must be ascii or unicode")))
        }
    };
    Ok((args.number("top", 0, 0..=u64::MAX)? as usize, words))
}

/// How text is cut into words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Words {
    /// Runs of ASCII letters and digits (any other byte separates words), lowercased.
    Ascii,
    /// Unicode words (UAX #29), lowercased; bytes that are not UTF-8 separate words.
    Unicode,
}

impl Words {
    /// The job's parameters that say this mode.
    fn params(self) -> &'static [u8] {
        match self {
            Words::Ascii => b"",
            Words::Unicode => b"unicode",
        }
    }

    /// The mode the job's parameters say (any other bytes: ASCII).
    fn from_params(params: &[u8]) -> Words {
        if params == Words::Unicode.params() {
            Words::Unicode
        } else {
            Words::Ascii
        }
    }

    /// Calls `found` with each word of `text`, lowercased.
    fn for_each(self, text: &[u8], mut found: impl FnMut(&[u8])) {
        match self {
            Words::Ascii => {
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
            Words::Unicode => {
                let mut lower = String::with_capacity(32);
                for chunk in text.utf8_chunks() {
                    for word in chunk.valid().unicode_words() {
                        lower.clear();
                        lower.extend(word.chars().flat_map(char::to_lowercase));
                        found(lower.as_bytes());
                    }
                }
            }
        }
    }
}

/// The same count written directly with Rayon in one process, without the framework (the
/// baseline of `shoal mr run --mode rayon`): a hash map per Rayon fold, merged.
pub(super) fn direct(input: &Input, args: &Args) -> Result<Rendered, MrError> {
    let (top, words) = arguments(args)?;
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
            words.for_each(piece, |word| add(&mut counts, word, 1));
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
    fn ascii_words_cut_at_any_other_byte_and_unicode_words_follow_uax_29() {
        let words = |mode: Words, text: &str| {
            let mut found = Vec::new();
            mode.for_each(text.as_bytes(), |w| found.push(String::from_utf8(w.to_vec()).unwrap()));
            found
        };
        assert_eq!(words(Words::Ascii, "Café naïve 東京"), ["caf", "na", "ve"]);
        assert_eq!(words(Words::Unicode, "Café naïve 東京"), ["café", "naïve", "東", "京"]);
        assert_eq!(words(Words::Unicode, "ÉTÉ, can't 3.5"), ["été", "can't", "3.5"]);
        let mut found = Vec::new();
        Words::Unicode.for_each(b"ab\xffcd", |w| found.push(w.to_vec()));
        assert_eq!(found, [b"ab", b"cd"], "bytes that are not UTF-8 separate words");
        let r = run_local(&WordCount, "Café café CAFÉ naïve\n東京\n".as_bytes(), &["words=unicode"]).unwrap();
        assert_eq!(r.text, "café 3\nnaïve 1\n京 1\n東 1\n");
        let err = run_local(&WordCount, b"a", &["words=klingon"]).unwrap_err().to_string();
        assert!(err.contains("words=\"klingon\" must be ascii or unicode"), "{err}");
    }

    #[test]
    fn empty_input_has_no_words_and_bad_arguments_are_named() {
        let r = run_local(&WordCount, b"", &[]).unwrap();
        assert_eq!(r.json["distinct"], 0);
        let err = run_local(&WordCount, b"a", &["k=2"]).unwrap_err().to_string();
        assert!(err.contains("\"k\""), "{err}");
    }
}
