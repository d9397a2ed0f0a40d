//! The Phoenix applications, written against [`crate::App`].

mod histogram;
mod kmeans;
mod linreg;
mod matmul;
mod pca;
mod strmatch;
mod wordcount;

use crate::app::App;
use crate::error::MrError;

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
    ALL.iter().copied().find(|a| a.name() == name).ok_or_else(|| MrError::UnknownApp {
        name: name.to_string(),
        known: ALL.iter().map(|a| a.name()).collect(),
    })
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
    fn names_fit_the_job_entry_and_unknown_names_list_the_apps() {
        for app in ALL {
            assert!(app.name().len() <= APP_NAME_BYTES && app.name().is_ascii(), "{}", app.name());
            assert_eq!(find(app.name()).unwrap().name(), app.name());
        }
        let err = find("nope").err().unwrap().to_string();
        assert!(err.contains("\"nope\"") && err.contains("wordcount, histogram"), "{err}");
    }
}
