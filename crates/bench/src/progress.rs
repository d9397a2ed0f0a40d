//! Progress bars on stderr while a run goes on; indicatif hides them when stderr is not a
//! terminal, so scripts and `--json` output stay clean.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar of `length` steps, or a counter without an end when `length` is `None`, labelled
/// `label`; its message carries the live figures.
pub fn progress_bar(label: &str, length: Option<u64>) -> ProgressBar {
    let template = match length {
        Some(_) => "{prefix:>8} [{bar:40}] {percent:>3}%  {msg}",
        None => "{prefix:>8} {spinner} {msg}",
    };
    let style = ProgressStyle::with_template(template).expect("a valid template").progress_chars("=> ");
    let bar = ProgressBar::with_draw_target(length, ProgressDrawTarget::stderr()).with_style(style);
    bar.set_prefix(label.to_owned());
    bar
}
