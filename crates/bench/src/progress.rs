//! What a long operation is doing, on a terminal: a spinner with a line of
//! text and the time spent (indicatif). It shows only when stderr is a
//! terminal, the output is not JSON, and the operation has taken longer
//! than [`DELAY`], so a fast one (a cached module, a hand-over) draws
//! nothing; on a pipe nothing is ever drawn.
//!
//! A terminal has one spinner at a time, so the one running is kept here:
//! [`say`] and [`note`] reach it from deep in a benchmark without passing
//! it down.

use std::borrow::Cow;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressFinish, ProgressStyle};

/// How long an operation runs before its spinner shows.
const DELAY: Duration = Duration::from_millis(300);

/// The spinner on the terminal, if any.
static CURRENT: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// A spinner for one operation; it goes away at [`done`](Self::done) or
/// when dropped.
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A spinner saying `what`; none with `json` or when stderr is not a
    /// terminal.
    pub fn start(what: impl Into<Cow<'static, str>>, json: bool) -> Progress {
        if json || !std::io::stderr().is_terminal() {
            return Progress { bar: None };
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden())
            .with_finish(ProgressFinish::AndClear);
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("a valid template"),
        );
        bar.set_message(what);
        let shown = bar.downgrade();
        std::thread::spawn(move || {
            std::thread::sleep(DELAY);
            if let Some(bar) = shown.upgrade().filter(|b| !b.is_finished()) {
                bar.set_draw_target(ProgressDrawTarget::stderr());
                bar.enable_steady_tick(Duration::from_millis(100));
            }
        });
        *CURRENT.lock().expect("progress") = Some(bar.clone());
        Progress { bar: Some(bar) }
    }

    /// Takes the spinner off the terminal (before output, or at the end).
    pub fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
            CURRENT.lock().expect("progress").take();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.done();
    }
}

/// Says what the running operation does now.
pub fn say(what: impl Into<Cow<'static, str>>) {
    if let Some(bar) = &*CURRENT.lock().expect("progress") {
        bar.set_message(what);
    }
}

/// Writes a line on stderr, above the spinner if one runs.
pub fn note(line: &str) {
    match &*CURRENT.lock().expect("progress") {
        Some(bar) => bar.suspend(|| eprintln!("{line}")),
        None => eprintln!("{line}"),
    }
}

/// Takes the spinner off the terminal, if one runs: before a job's output.
pub fn clear() {
    if let Some(bar) = CURRENT.lock().expect("progress").take() {
        bar.finish_and_clear();
    }
}
