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
    fn names_fit_the_job_entry_and_unknown_names_list_the_apps() {
        for app in ALL {
            assert!(app.name().len() <= APP_NAME_BYTES && app.name().is_ascii(), "{}", app.name());
            assert_eq!(find(app.name()).unwrap().name(), app.name());
        }
        let err = find("nope").err().unwrap().to_string();
        assert!(err.contains("\"nope\"") && err.contains("wordcount, histogram"), "{err}");
    }
}
