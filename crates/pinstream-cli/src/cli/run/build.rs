//! The user's kernel: the `--kernel` file read and built on each device, `--entry` taken
//! from it, with messages that name the fix.

use super::settings::Settings;
use crate::cli::Failure;
use pinstream::backend::api::{Api, BuildError, Device, KernelError, KernelOf, Program};
use pinstream::engine::io::{self, IoError};

/// `--entry` of the `--kernel` file, built on each of `devices`.
pub(super) fn kernels<D: Device>(
    devices: &[D],
    s: &Settings,
) -> Result<Vec<KernelOf<D::A>>, Failure> {
    let source = read_kernel(s)?;
    devices.iter().map(|d| build_on(d, s, &source)).collect()
}

/// The `--kernel` file's text, read with a size limit.
fn read_kernel(s: &Settings) -> Result<String, Failure> {
    io::read_source(&s.kernel).map_err(|e| match e {
        IoError::Open { source, .. } => Failure::usage(format!(
            "cannot read kernel file {}: {source}",
            s.kernel.display()
        )),
        e => Failure::usage(e),
    })
}

/// `--entry` of `source` built on `device`.
fn build_on<D: Device>(device: &D, s: &Settings, source: &str) -> Result<KernelOf<D::A>, Failure> {
    let file = s.kernel.display();
    let program = device
        .build(source, &s.build_options)
        .map_err(|e| match e {
            BuildError::Options(_) => Failure::usage(format!("bad --build-options: {e}")),
            e => Failure::usage(format!("{file} does not build: {e}")),
        })?;
    program.kernel(&s.entry).map_err(|e| match e {
        KernelError::NotDefined { .. } => no_kernel(s, &program.kernel_names(), D::A::KERNEL_FORM),
        e @ KernelError::Signature(_) => Failure::usage(format!("{file}: {e}")),
        e => Failure::run(e),
    })
}

/// `--entry` names no kernel of the file: say which it has, or that it has none (`form`:
/// how a kernel is declared in its language).
fn no_kernel(s: &Settings, defined: &[String], form: &str) -> Failure {
    Failure::usage(if defined.is_empty() {
        format!(
            "{} defines no kernel: it has no `{form}` function to pass with --entry",
            s.kernel.display()
        )
    } else {
        format!(
            "{} has no kernel `{}`: it defines {}; pass one of them with --entry",
            s.kernel.display(),
            s.entry,
            defined.join(", ")
        )
    })
}
