//! What the tests of the C library, the CLI and the layer share: a skip that is reported,
//! never passed off as a pass. Not published; each crate takes it as a path dev-dependency,
//! which `cargo package` leaves out of the published manifest: their tests build from the
//! repository (as the C suite's C sources and other test files already required).

use std::io::Write;

/// The file `PINSTREAM_TEST_SKIPS` names (scripts/gpu-tests.sh sets one per executable): every
/// skip is appended there, so a run's summary counts and names them.
pub const SKIPS_VAR: &str = "PINSTREAM_TEST_SKIPS";

/// Skips the calling test visibly, for a precondition this machine lacks (a test inherently
/// about PoCL, a loader feature, ...): prints `skipped: TEST: REASON` to standard error and,
/// where [`SKIPS_VAR`] names a file, appends that line to it. The caller returns right after.
///
/// # Panics
/// When the file cannot be written: a skip that cannot be counted would read as a pass.
pub fn skip(reason: &str) {
    let line = skip_line(std::thread::current().name(), reason);
    eprintln!("{line}");
    if let Some(path) = std::env::var_os(SKIPS_VAR) {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path);
        let written = file.and_then(|mut f| writeln!(f, "{line}"));
        written.unwrap_or_else(|e| panic!("cannot record a skip in {path:?}: {e}"));
    }
}

/// The line [`skip`] prints for the test `test` (the thread's name; `?` where it has none).
fn skip_line(test: Option<&str>, reason: &str) -> String {
    format!("skipped: {}: {reason}", test.unwrap_or("?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_the_test_and_the_reason() {
        assert_eq!(skip_line(Some("a::b"), "no PoCL"), "skipped: a::b: no PoCL");
        assert_eq!(skip_line(None, "why"), "skipped: ?: why");
    }

    #[test]
    fn a_skip_is_appended_to_the_named_file() {
        let path = std::env::temp_dir().join(format!("pinstream-testkit-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        // The only test of this crate that sets the variable, and it runs in its own process
        // per crate; the other test does not read it.
        std::env::set_var(SKIPS_VAR, &path);
        skip("first");
        skip("second");
        std::env::remove_var(SKIPS_VAR);
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].ends_with(": first") && lines[1].ends_with(": second"),
            "{text}"
        );
        assert!(
            lines[0].contains("a_skip_is_appended_to_the_named_file"),
            "{text}"
        );
    }
}
