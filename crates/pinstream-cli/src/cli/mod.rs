//! Argument parsing, device selection, exit codes.

mod bench;
mod compare;
mod demo;
mod devices;
mod doctor;
mod report;
mod run;
mod run_api;
mod soak;
mod table;

use clap::{Parser, Subcommand};
use pinstream::backend::opencl::{self as cl, DeviceInfo};
use pinstream::units::parse_size;

/// Pinned host memory for OpenCL with no VRAM cost, streamed and measured.
#[derive(Parser)]
#[command(name = "pinstream", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List OpenCL platforms and devices and the pinning strategies each offers.
    Devices(devices::Args),
    /// Measure every pinning strategy on one device and recommend one.
    Doctor(doctor::Args),
    /// Bandwidth by block size and direction, and small-transfer latency, per strategy.
    Bench(bench::Args),
    /// The same bench points and streams through OpenCL and CUDA, side by side.
    Compare(compare::Args),
    /// Stream files or synthetic data through a kernel (OpenCL, or CUDA with --api cuda),
    /// block by block.
    Run(Box<run::Args>),
    /// A self-checking run sized to this machine: in place, and y = W·x, against the CPU.
    Demo(demo::Args),
    /// Pin, stream and release again and again; resident and device memory must stay flat.
    Soak(soak::Args),
}

/// Exit code for a run that failed (bad input gets 2 from clap or from us).
pub const EXIT_FAILURE: i32 = 1;
/// Exit code for bad input found after parsing.
pub const EXIT_USAGE: i32 = 2;

/// A failure with the exit code it maps to.
pub struct Failure {
    code: i32,
    message: String,
}

impl Failure {
    fn usage(message: impl ToString) -> Self {
        Failure {
            code: EXIT_USAGE,
            message: message.to_string(),
        }
    }
    fn run(message: impl ToString) -> Self {
        Failure {
            code: EXIT_FAILURE,
            message: message.to_string(),
        }
    }
}

/// Parses `--size`-style arguments for clap.
pub fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

/// Runs the tool; returns the process exit code.
pub fn main() -> i32 {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PINSTREAM_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Devices(a) => devices::run(a),
        Command::Doctor(a) => doctor::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Compare(a) => compare::run(a),
        Command::Run(a) => run::run(*a),
        Command::Demo(a) => demo::run(a),
        Command::Soak(a) => soak::run(a),
    };
    match result {
        Ok(()) => 0,
        Err(f) => {
            eprintln!("error: {}", f.message);
            f.code
        }
    }
}

/// Lists devices, mapping discovery failures to a message that says what to install.
fn list_devices() -> Result<Vec<DeviceInfo>, Failure> {
    let devices = cl::devices().map_err(Failure::run)?;
    if devices.is_empty() {
        return Err(Failure::run(
            "the OpenCL platforms list no device: install a driver, e.g. `apt-get install pocl-opencl-icd` for the CPU",
        ));
    }
    Ok(devices)
}

/// The device `--device` names, or the default (first GPU, else first device).
fn pick_device(index: Option<usize>) -> Result<DeviceInfo, Failure> {
    let devices = list_devices()?;
    match index {
        None => Ok(cl::default_device(&devices).expect("list is not empty").clone()),
        Some(i) => devices.get(i).cloned().ok_or_else(|| {
            let names: Vec<String> = devices.iter().map(|d| format!("{}: {}", d.index, d.name)).collect();
            Failure::usage(format!(
                "device index {i} is out of range: this machine has {} device(s) ({}); pass --device 0..{} or run `pinstream devices`",
                devices.len(),
                names.join(", "),
                devices.len() - 1
            ))
        }),
    }
}

/// Writes `bytes` to a temporary file beside `path`, then renames it into place: the file is
/// written whole or not at all.
pub fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> Result<(), Failure> {
    let name = path
        .file_name()
        .ok_or_else(|| Failure::usage(format!("{} is not a file name", path.display())))?;
    let tmp = path.with_file_name(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Failure::run(format!(
            "cannot write {}: {e}; check that the folder exists and is writable",
            path.display()
        ))
    })
}

/// Fails early, before long work, when `path`'s folder does not exist.
pub fn check_writable(path: &std::path::Path) -> Result<(), Failure> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    if dir.is_dir() {
        Ok(())
    } else {
        Err(Failure::usage(format!(
            "cannot write {}: folder {} does not exist",
            path.display(),
            dir.display()
        )))
    }
}

/// Set to the signal number when SIGINT or SIGTERM arrives during `run` or `demo`.
pub fn stop_flag() -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    static FLAG: std::sync::OnceLock<std::sync::Arc<std::sync::atomic::AtomicUsize>> =
        std::sync::OnceLock::new();
    FLAG.get_or_init(Default::default).clone()
}

/// Makes SIGINT and SIGTERM request a clean stop (streams finish the blocks in flight, memory
/// is released, no output is written, exit code 128 + signal); a second signal exits at once.
pub fn stop_on_signals() -> Result<(), Failure> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM] {
        let install = || -> std::io::Result<()> {
            signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, seen.clone())?;
            signal_hook::flag::register(sig, seen.clone())?;
            signal_hook::flag::register_usize(sig, stop_flag(), sig as usize)?;
            Ok(())
        };
        install().map_err(|e| Failure::run(format!("cannot install the signal handler: {e}")))?;
    }
    Ok(())
}

/// The signal's name, for messages.
fn signal_name(sig: usize) -> &'static str {
    match sig as i32 {
        signal_hook::consts::SIGINT => "SIGINT",
        signal_hook::consts::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

/// A failure for a stop request, with the conventional exit code 128 + signal.
pub fn interrupted(sig: usize, during: &str) -> Failure {
    Failure {
        code: 128 + sig as i32,
        message: format!(
            "interrupted by {} {during}: pinned and device memory released, no output written",
            signal_name(sig)
        ),
    }
}

/// Fails with [`interrupted`] once a stop was requested.
pub fn check_stop(during: &str) -> Result<(), Failure> {
    match stop_flag().load(std::sync::atomic::Ordering::Relaxed) {
        0 => Ok(()),
        sig => Err(interrupted(sig, during)),
    }
}

/// Maps a stream error to a failure: stops to 128 + signal, the rest to 1, with the flags
/// that fix it where some do.
pub fn stream_failure(e: pinstream::engine::StreamError) -> Failure {
    match e {
        pinstream::engine::StreamError::Stopped { code, done, blocks } => {
            interrupted(code, &format!("after {done} of {blocks} blocks"))
        }
        e => Failure::run(pinstream_cli::advice::stream_error(&e)),
    }
}
