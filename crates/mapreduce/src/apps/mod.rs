//! The Phoenix applications, written against [`crate::App`]; for each, the same computation
//! written directly with Rayon in one process ([`direct`], the no-framework baseline the
//! benchmarks compare against) and a generator of inputs ([`generate`]).

mod histogram;
mod inputs;
mod kmeans;
mod linreg;
mod matmul;
mod pca;
mod strmatch;
mod wordcount;

use crate::app::{lines, parse_ints, App, Args, InputRef, Rendered, SplitUnit};
use crate::error::MrError;
use crate::input::Input;
use crate::job::split_input;
pub use inputs::generate;
#[cfg(test)]
pub(crate) use inputs::Rng;
use rayon::prelude::*;

/// Every app, in the order `shoal mr apps` lists them.
pub static ALL: &[&dyn App] = &[
    &wordcount::WordCount,
    &histogram::Histogram,
    &linreg::LinearRegression,
    &matmul::MatrixMultiply,
    &strmatch::StringMatch,
    &kmeans::KMeans,
    &pca::Pca,
];

/// The app called `name`, or an error listing the apps there are.
pub fn find(name: &str) -> Result<&'static dyn App, MrError> {
    crate::Registry::builtin().find(name)
}

/// Runs the app called `name` over `input` written directly with Rayon, in the current Rayon
/// pool, without the framework: no region, tasks or records. Its result equals the app's
/// through the framework (the test below checks every app), so timing both is honest. The
/// apps whose maps stream their input (word count, histogram, linear regression, string
/// match) read it here as the framework's maps do, in pieces ([`fold_pieces`]); the others
/// read it whole.
pub fn direct(name: &str, input: &Input, args: &Args) -> Result<Rendered, MrError> {
    let direct: fn(&Input, &Args) -> Result<Rendered, MrError> = match name {
        "wordcount" => wordcount::direct,
        "histogram" => histogram::direct,
        "linreg" => linreg::direct,
        "matmul" => matmul::direct,
        "strmatch" => strmatch::direct,
        "kmeans" => kmeans::direct,
        "pca" => pca::direct,
        other => {
            return Err(MrError::BadInput(format!(
                "app {other:?} has no direct Rayon version (--mode rayon runs the built-in apps only)"
            )))
        }
    };
    direct(input, args)
}

/// Records (points, rows) per piece of work in the direct versions that hold their input
/// whole: enough to make a piece's overhead negligible, few enough to balance the threads.
const DIRECT_RECORDS: usize = 1 << 16;

/// Folds `input` in parallel, a piece at a time, with `fold` from `identity`, and merges the
/// threads' results with `reduce`. A piece is whole records of `unit`, read into a buffer that
/// each Rayon job reuses: the same reads, of the same size, as a map of the framework makes of
/// its split (at least 8 pieces per thread, at most 1 MiB each).
fn fold_pieces<T: Send>(
    input: &Input,
    unit: SplitUnit,
    identity: impl Fn() -> T + Sync + Send,
    fold: impl Fn(T, &[u8]) -> T + Sync + Send,
    reduce: impl Fn(T, T) -> T + Sync + Send,
) -> Result<T, MrError> {
    let piece = (input.len() / (8 * rayon::current_num_threads() as u64)).clamp(4096, 1 << 20);
    input.with_source(|source| {
        let splits = split_input(source, InputRef { offset: 0, len: input.len(), file: 0 }, unit, |_| piece)?;
        splits
            .par_iter()
            .try_fold(
                || (identity(), Vec::new()),
                |(acc, mut buf), split| {
                    buf.clear();
                    source.read_append(split.offset, split.len, &mut buf)?;
                    Ok::<_, MrError>((fold(acc, &buf), buf))
                },
            )
            .map(|folded| folded.map(|(acc, _)| acc))
            .try_reduce(&identity, |a, b| Ok(reduce(a, b)))
    })
}

/// `text` cut after newlines into pieces for the direct versions (about 64 KiB each, at least
/// 8 per thread), each a whole number of lines.
fn line_pieces(text: &[u8]) -> Vec<&[u8]> {
    let size = (text.len() / (8 * rayon::current_num_threads())).clamp(4096, 64 << 10);
    let mut pieces = Vec::with_capacity(text.len() / size + 1);
    let mut rest = text;
    while !rest.is_empty() {
        let cut = rest[size.min(rest.len())..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(rest.len(), |i| size + i + 1);
        let (piece, tail) = rest.split_at(cut);
        pieces.push(piece);
        rest = tail;
    }
    pieces
}

/// The non-blank lines of `text` as rows of integers, parsed in parallel.
fn parse_rows(text: &[u8]) -> Result<Vec<Vec<i64>>, MrError> {
    let pieces: Vec<Vec<Vec<i64>>> = line_pieces(text)
        .into_par_iter()
        .map(|piece| lines(piece).map(parse_ints).collect::<Result<_, _>>())
        .collect::<Result<_, _>>()
        .map_err(MrError::BadInput)?;
    Ok(pieces.concat())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::APP_NAME_BYTES;

    #[test]
    fn maps_and_combiners_never_panic_on_damaged_params_splits_or_values() {
        let mut rng = crate::testing::Rng(23);
        let add = |_: &mut Vec<u8>, _: &[u8]| {};
        for round in 0..3000 {
            let mut bytes = |n: u64| -> Vec<u8> {
                let len = rng.below(n);
                (0..len).map(|_| [b'1', b' ', b'\n', b'-', 0, 255][rng.below(6) as usize]).collect()
            };
            let (params, split, value) = (bytes(80), bytes(300), bytes(40));
            for app in ALL {
                let mut emit = crate::records::Emit::new(3, &add);
                let _ = app.map(round % 2, &params, &split, &mut emit);
                let mut acc = value.clone();
                app.combine(round % 2, &mut acc, &params);
            }
        }
    }

    #[test]
    fn every_app_written_directly_with_rayon_or_run_by_fixed_workers_equals_the_elastic_run() {
        use crate::testing::{run_local_args, run_local_in_place};
        use crate::worker::WorkerOptions;
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for app in ALL {
            let (input, args) = generate(app.name(), 40_000, 5).unwrap();
            let args = Args::parse(&args).unwrap();
            let elastic = run_local_args(*app, &input, &args, WorkerOptions::threads(2)).unwrap();
            let in_place = run_local_in_place(*app, &input, &args, WorkerOptions::threads(2)).unwrap();
            assert_eq!(in_place, elastic, "{} with its input file read in place", app.name());
            let fixed = WorkerOptions { fixed: true, ..WorkerOptions::threads(2) };
            assert_eq!(run_local_args(*app, &input, &args, fixed).unwrap(), elastic, "{}", app.name());
            assert_eq!(
                pool.install(|| direct(app.name(), &Input::from_bytes(input.clone()), &args)).unwrap(),
                elastic,
                "{}",
                app.name()
            );
        }
        let err =
            direct("wordcount", &Input::from_bytes(b"x".to_vec()), &Args::parse(&["k=1".into()]).unwrap())
                .unwrap_err();
        assert!(err.to_string().contains("\"k\""), "{err}");
        assert!(direct("nope", &Input::from_bytes(Vec::new()), &Args::default()).is_err());
    }

    #[test]
    fn pieces_of_text_are_whole_lines_that_cover_it() {
        let text: Vec<u8> = (0..50_000u32).flat_map(|i| format!("line {i}\n").into_bytes()).collect();
        let pieces = line_pieces(&text);
        assert!(pieces.len() > 4 && pieces.iter().all(|p| p.ends_with(b"\n")));
        assert_eq!(pieces.concat(), text);
        assert_eq!(line_pieces(b"no newline").concat(), b"no newline");
    }

    #[test]
    fn names_fit_the_job_entry_and_unknown_names_list_the_apps() {
        for app in ALL {
            assert!(app.name().len() <= APP_NAME_BYTES && app.name().is_ascii(), "{}", app.name());
            assert_eq!(find(app.name()).unwrap().name(), app.name());
        }
        let err = find("nope").err().unwrap().to_string();
        assert!(err.contains("\"nope\"") && err.contains("wordcount, histogram"), "{err}");
    }
}
