//! A command's files, checked together before any work: every output can be written (its
//! folder exists and takes a new file; devices and FIFOs are written through, never
//! replaced), and no two of the paths name the same file, except `run --output` naming one
//! of the run's `--input` files: every input is read whole into pinned memory before the
//! result replaces it, so updating a file in place is safe.

use super::signals::{self, Mode};
use super::{out, Failure};
use pinstream::engine::io::{self, FileIdentity, IoError, Output, Target};
use std::path::{Path, PathBuf};

/// A path of the command line and the flag that gave it.
pub type Named<'a> = (&'static str, &'a Path);

/// The optional paths that were given, with their flags.
pub fn given<'a>(flags: &[(&'static str, &'a Option<PathBuf>)]) -> Vec<Named<'a>> {
    flags
        .iter()
        .filter_map(|(flag, p)| p.as_deref().map(|p| (*flag, p)))
        .collect()
}

/// Checks `outputs` and `inputs` together (see the module documentation) and prepares each
/// output; returns them in order. `update` = (output flag, input flag): that output may name
/// a file given with that input flag (the file is updated in place).
pub fn prepare(
    outputs: &[Named],
    inputs: &[Named],
    update: Option<(&str, &str)>,
) -> Result<Vec<Output>, Failure> {
    distinct(outputs, inputs, update)?;
    let mut prepared = Vec::new();
    for (_, path) in outputs {
        let o = io::prepare_output(path).map_err(Failure::usage)?;
        for r in &o.removed {
            out::note(format!(
                "removed {}, the temporary file of an earlier run that was killed before it finished",
                r.display()
            ));
        }
        if o.target == Target::Stdout {
            out::report_to_stderr();
        }
        prepared.push(o);
    }
    Ok(prepared)
}

/// No output shares its file with another output or an input (except the in-place case).
fn distinct(
    outputs: &[Named],
    inputs: &[Named],
    update: Option<(&str, &str)>,
) -> Result<(), Failure> {
    let ids: Vec<(Named, FileIdentity)> = outputs
        .iter()
        .chain(inputs)
        .map(|n| (*n, FileIdentity::of(n.1)))
        .collect();
    for (i, ((flag, path), id)) in ids.iter().enumerate().take(outputs.len()) {
        for (k, ((other_flag, other), other_id)) in ids.iter().enumerate().skip(i + 1) {
            let is_input = k >= outputs.len();
            let in_place = is_input && update == Some((*flag, *other_flag));
            if id != other_id || id.is_char_device() || in_place {
                continue;
            }
            let why = if is_input {
                format!("writing {flag} would replace the input given with {other_flag}")
            } else {
                "each output needs a file of its own".to_string()
            };
            return Err(Failure::usage(format!(
                "{flag} {} and {other_flag} {} are the same file: {why}; pass another path for {flag}",
                path.display(),
                other.display()
            )));
        }
    }
    Ok(())
}

/// Writes `bytes` to a prepared output, whole or not at all; a stop while writing removes the
/// temporary file. A FIFO blocks until it has a reader, so there the first signal exits.
pub fn save(o: &Output, bytes: &[u8]) -> Result<(), Failure> {
    writing(o)?;
    io::write_bytes(o, bytes, &|| signals::stopped() != 0).map_err(|e| write_failure(o, e))
}

/// `o` is a FIFO: written in place, its open waiting for a reader.
pub fn is_fifo(o: &Output) -> bool {
    matches!(o.target, Target::Through { kind: "a FIFO", .. })
}

/// Enters the phase of writing `o`.
pub fn writing(o: &Output) -> Result<(), Failure> {
    let during = format!("while writing {}", o.given.display());
    if is_fifo(o) {
        signals::phase(during, Mode::Exit)
    } else {
        signals::phase(
            format!("removing the temporary file of {}", o.given.display()),
            Mode::Orderly,
        )
        .map_err(|_| signals::interrupted(signals::stopped(), &during))
    }
}

/// A failed write: a stop becomes the interrupted message, a closed pipe on standard output
/// ends quietly, the rest names the file.
pub fn write_failure(o: &Output, e: IoError) -> Failure {
    match e {
        IoError::Stopped => signals::interrupted(
            signals::stopped(),
            &format!("while writing {}", o.given.display()),
        ),
        IoError::Rw { source, .. } if o.target == Target::Stdout => out::stdout_failure(source),
        e => Failure::run(e),
    }
}

/// What each prepared output (given as `named`) receives: the bytes `other` lists for its
/// flag (a trace, a plot), else the JSON report.
pub fn contents<'a>(
    named: &[Named],
    outputs: &'a [Output],
    json: &'a str,
    other: &[(&str, &'a [u8])],
) -> Vec<(&'a Output, &'a [u8])> {
    named
        .iter()
        .zip(outputs)
        .map(|((flag, _), o)| {
            let bytes = other.iter().find(|(f, _)| f == flag).map(|(_, b)| *b);
            (o, bytes.unwrap_or(json.as_bytes()))
        })
        .collect()
}

/// Prints the report, `json` with `--json` or else `text()`, then saves (see
/// [`print_then_save`]).
pub fn report_and_save(
    as_json: bool,
    json: &str,
    text: impl FnOnce() -> String,
    saves: &[(&Output, &[u8])],
) -> Result<(), Failure> {
    let print = || {
        if as_json {
            out::line(json)
        } else {
            out::emit(&text())
        }
    };
    print_then_save(print, saves)
}

/// Prints the report (`print`), then writes every `(output, bytes)`: the report is shown even
/// when a save fails (a full disk), and the first failure is returned after all were tried.
pub fn print_then_save(
    print: impl FnOnce() -> Result<(), Failure>,
    saves: &[(&Output, &[u8])],
) -> Result<(), Failure> {
    signals::phase("while printing the report", Mode::Exit)?;
    let printed = print();
    let mut first = None;
    for (o, bytes) in saves {
        if let Err(e) = save(o, bytes) {
            first.get_or_insert(e);
        }
    }
    match first {
        Some(e) => Err(e),
        None => printed,
    }
}
