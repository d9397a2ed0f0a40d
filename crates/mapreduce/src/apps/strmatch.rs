//! String match: for each pattern given (`--arg pattern=…`, repeatable), how many lines of the
//! input contain it (as `grep -c -F` counts).

use crate::app::{add_u64, le_u64, App, Args, Jobs, Rendered, SplitUnit};
use crate::error::MrError;
use crate::input::Input;
use crate::records::Emit;

/// The string match app.
pub struct StringMatch;

impl App for StringMatch {
    fn name(&self) -> &'static str {
        "strmatch"
    }

    fn about(&self) -> &'static str {
        "lines containing each pattern; args: pattern=TEXT (one or more)"
    }

    fn map(&self, _stage: u32, params: &[u8], split: &[u8], out: &mut Emit) -> Result<(), String> {
        let patterns: Vec<&[u8]> = params.split(|&b| b == 0).filter(|p| !p.is_empty()).collect();
        for (pattern, count) in patterns.iter().zip(count_lines(split, &patterns)) {
            out.emit(pattern, &count.to_le_bytes());
        }
        Ok(())
    }

    fn combine(&self, _stage: u32, acc: &mut Vec<u8>, value: &[u8]) {
        add_u64(acc, value);
    }

    fn drive(&self, input: &Input, args: &Args, jobs: &mut dyn Jobs) -> Result<Rendered, MrError> {
        let patterns = patterns(args)?;
        let input = jobs.put_input(input)?;
        let records = jobs.run(self, 0, input, patterns.join("\0").as_bytes())?;
        let count = |p: &str| records.iter().find(|(k, _)| k == p.as_bytes()).map_or(0, |(_, v)| le_u64(v));
        Ok(render(&patterns.iter().map(|p| (p.to_string(), count(p))).collect::<Vec<_>>()))
    }
}

/// The patterns given, after refusing other arguments and unusable patterns.
fn patterns(args: &Args) -> Result<Vec<&str>, MrError> {
    args.only(StringMatch.name(), &["pattern"])?;
    let patterns = args.values("pattern");
    if patterns.is_empty() || patterns.iter().any(|p| p.is_empty() || p.contains(['\0', '\n'])) {
        return Err(MrError::BadInput(format!(
            "strmatch needs one or more --arg pattern=TEXT (non-empty, no newline or NUL), got {patterns:?}"
        )));
    }
    Ok(patterns)
}

/// How many lines of `text` contain each of `patterns` (none may be empty).
// Never inlined: the map and the direct Rayon version run one compiled kernel, so the
// benchmarks time what is around it (inlined, the two copies compiled differently: linear
// regression's ran half as fast inside Rayon's fold).
#[inline(never)]
fn count_lines(text: &[u8], patterns: &[&[u8]]) -> Vec<u64> {
    let mut counts = vec![0u64; patterns.len()];
    for line in text.split(|&b| b == b'\n') {
        for (count, pattern) in counts.iter_mut().zip(patterns) {
            if line.windows(pattern.len()).any(|w| w == *pattern) {
                *count += 1;
            }
        }
    }
    counts
}

/// The same counts written directly with Rayon in one process, without the framework (the
/// baseline of `shoal mr run --mode rayon`).
pub(super) fn direct(input: &Input, args: &Args) -> Result<Rendered, MrError> {
    let patterns = patterns(args)?;
    let bytes: Vec<&[u8]> = patterns.iter().map(|p| p.as_bytes()).collect();
    let add = |mut a: Vec<u64>, b: Vec<u64>| {
        a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
        a
    };
    let counts = super::fold_pieces(
        input,
        SplitUnit::Lines,
        || vec![0; bytes.len()],
        |a, piece| add(a, count_lines(piece, &bytes)),
        add,
    )?;
    Ok(render(&patterns.iter().map(|p| p.to_string()).zip(counts).collect::<Vec<_>>()))
}

fn render(counts: &[(String, u64)]) -> Rendered {
    let text = counts.iter().map(|(p, c)| format!("{p} {c}\n")).collect();
    let json = serde_json::Value::Object(counts.iter().map(|(p, c)| (p.clone(), (*c).into())).collect());
    Rendered { text, json }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{run_local, Rng};

    #[test]
    fn counts_equal_a_single_threaded_grep() {
        let mut rng = Rng(13);
        let syllables = ["ka", "ro", "mi", "shoal", "tu", "ne"];
        let text: String = (0..5000)
            .map(|_| {
                (0..1 + rng.below(6)).map(|_| syllables[rng.below(6) as usize]).collect::<Vec<_>>().join(" ")
                    + "\n"
            })
            .collect();
        let patterns = ["shoal", "ka ro", "mimi", "absent"];
        let expected: Vec<_> = patterns
            .iter()
            .map(|p| (p.to_string(), text.lines().filter(|l| l.contains(p)).count() as u64))
            .collect();
        let args: Vec<String> = patterns.iter().map(|p| format!("pattern={p}")).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(run_local(&StringMatch, text.as_bytes(), &args).unwrap(), render(&expected));
    }

    #[test]
    fn patterns_are_required() {
        assert!(run_local(&StringMatch, b"x", &[]).unwrap_err().to_string().contains("pattern=TEXT"));
    }
}
