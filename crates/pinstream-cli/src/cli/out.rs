//! Reports on standard output, never with `println!` (which panics when the write fails).
//!
//! A closed pipe (`pinstream devices | head -1`) ends the command quietly with exit code 0,
//! as ripgrep and other well-behaved Unix tools do: the reader has what it wanted. Any other
//! write error (a full disk behind `> file`, `/dev/full`) is an error naming standard output.
//! When an output file of the run is standard output itself (`--output /dev/stdout`), the
//! report goes to standard error instead, so the two never mix.

use super::Failure;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static REPORT_TO_STDERR: AtomicBool = AtomicBool::new(false);

/// From now on, reports go to standard error (an output of the run is standard output).
pub fn report_to_stderr() {
    REPORT_TO_STDERR.store(true, Ordering::Relaxed);
}

/// Writes `text` (as is: end it with a newline) where reports go, and flushes it.
pub fn emit(text: &str) -> Result<(), Failure> {
    let result = if REPORT_TO_STDERR.load(Ordering::Relaxed) {
        let mut e = std::io::stderr().lock();
        e.write_all(text.as_bytes()).and_then(|()| e.flush())
    } else {
        let mut o = std::io::stdout().lock();
        o.write_all(text.as_bytes()).and_then(|()| o.flush())
    };
    result.map_err(stdout_failure)
}

/// A failed write to standard output: quiet for a closed pipe, an error otherwise.
pub fn stdout_failure(e: std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Failure::quiet()
    } else {
        Failure::run(format!("cannot write the report to standard output: {e}"))
    }
}

/// `emit` of one line.
pub fn line(text: impl std::fmt::Display) -> Result<(), Failure> {
    emit(&format!("{text}\n"))
}

/// A warning on standard error (never fails).
pub fn warn(text: impl std::fmt::Display) {
    let _ = writeln!(std::io::stderr().lock(), "warning: {text}");
}

/// A note on standard error (never fails).
pub fn note(text: impl std::fmt::Display) {
    let _ = writeln!(std::io::stderr().lock(), "note: {text}");
}
