//! Argument parsing, device selection, exit codes.

mod applies;
mod bench;
mod bench_devices;
mod bench_own;
mod bench_walk;
mod compare;
mod demo;
mod deprecated;
mod device_sets;
mod devices;
mod dispatch;
mod doctor;
mod embedding;
mod files;
mod flags;
mod gather;
mod latency;
#[cfg(test)]
mod messages_sweep;
mod native;
mod out;
mod progressive;
mod report;
mod run;
mod signals;
mod soak;
mod storage_bench;
mod table;
mod version;

pub use signals::{check_stop, interrupted, stop_flag, stream_failure};

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
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
    /// Bandwidth by block size and direction, per strategy; `bench latency`, `gather`,
    /// `storage` and `devices` measure the rest.
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
    /// Empty for a quiet end (a closed pipe on standard output).
    message: String,
}

impl Failure {
    /// The reader of standard output went away: end quietly with 0, as well-behaved Unix
    /// tools do.
    fn quiet() -> Self {
        Failure {
            code: 0,
            message: String::new(),
        }
    }
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

/// A demo's failure: the library's pinning error (data, as the lab returns it) phrased with
/// the flag that fixes it.
fn demo_failure(e: pinstream_lab::tools::demo::DemoError) -> Failure {
    match e {
        pinstream_lab::tools::demo::DemoError::Host(e) => {
            Failure::run(pinstream_cli::advice::host_error(&e))
        }
        e => Failure::run(e),
    }
}

/// A bench's setup failure of the driver is a run failure; the rest (sizes, strategies) are
/// usage.
impl From<pinstream_lab::tools::bench::BenchError> for Failure {
    fn from(e: pinstream_lab::tools::bench::BenchError) -> Self {
        use pinstream_lab::tools::bench::BenchError;
        match e {
            BenchError::Cl(_) | BenchError::Backend(_) | BenchError::Range(_) => Failure::run(e),
            e => Failure::usage(e),
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
        .with_ansi(colour(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .init();
    let (args, note) = deprecated::rewrite(std::env::args_os().collect());
    if let Some(note) = note {
        out::note(note);
    }
    let matches = Cli::command()
        .long_version(version::long())
        .get_matches_from(args);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = applies::check(&matches)
        .map_err(Failure::usage)
        .and_then(|()| signals::install())
        .and_then(|()| match cli.command {
            Command::Devices(a) => devices::run(a),
            Command::Doctor(a) => doctor::run(a),
            Command::Bench(a) => bench::run(a),
            Command::Compare(a) => compare::run(a),
            Command::Run(a) => run::run(*a),
            Command::Demo(a) => demo::run(a),
            Command::Soak(a) => soak::run(a),
        });
    match result {
        Ok(()) => 0,
        Err(f) => {
            if !f.message.is_empty() {
                use std::io::Write;
                let _ = writeln!(std::io::stderr().lock(), "error: {}", f.message);
            }
            f.code
        }
    }
}

/// Colour (ANSI escapes) on standard error: only where it is a terminal, and never with
/// `NO_COLOR` set to anything but empty (no-color.org).
fn colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Lists devices, mapping discovery failures to a message that says what to install.
fn list_devices() -> Result<Vec<DeviceInfo>, Failure> {
    signals::phase("while listing the OpenCL devices", signals::Mode::Exit)?;
    refuse_empty_pocl_cache()?;
    let devices = cl::devices().map_err(Failure::run)?;
    if devices.is_empty() {
        return Err(dispatch::none_listed(dispatch::ApiName::Opencl));
    }
    Ok(devices)
}

/// Refuses an empty `POCL_CACHE_DIR` before OpenCL is loaded: PoCL 3.1 asserts (and aborts
/// the process) on an empty cache path.
fn refuse_empty_pocl_cache() -> Result<(), Failure> {
    if std::env::var_os("POCL_CACHE_DIR").is_some_and(|v| v.is_empty()) {
        return Err(Failure::usage(
            "POCL_CACHE_DIR is set but empty, which makes PoCL abort: unset it (`unset POCL_CACHE_DIR`) or point it at a writable folder",
        ));
    }
    Ok(())
}

/// The variables with which OpenCL drivers hide devices.
const DEVICE_FILTERS: [&str; 6] = [
    "POCL_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "HIP_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK",
];

/// Why no device is listed, and the fix: a driver to install where no platform is there;
/// where one is, the device-filter variables that are set (a wrong `POCL_DEVICES` leaves
/// PoCL with none), or that the driver found no hardware.
pub(crate) fn no_device() -> String {
    let platforms = cl::platform_names().unwrap_or_default();
    if platforms.is_empty() {
        return "no OpenCL driver is installed (the ICD loader lists no platform): install one, e.g. `apt-get install pocl-opencl-icd` for the CPU".into();
    }
    let what = format!(
        "the OpenCL driver is installed (platform(s) {}) but reported no device",
        platforms.join(", ")
    );
    let set: Vec<String> = DEVICE_FILTERS
        .iter()
        .filter_map(|k| Some(format!("{k}={}", std::env::var_os(k)?.to_string_lossy())))
        .collect();
    match set.as_slice() {
        [] => format!("{what}: check that the driver sees its hardware (its kernel module, `ls /dev`, permissions)"),
        set => format!(
            "{what}; check {}: these variables choose the devices a driver shows (e.g. POCL_DEVICES=pthread for PoCL's CPU device), or unset them",
            set.join(", ")
        ),
    }
}

/// Where PoCL is installed but lists no device, the usual cause is its kernel cache: PoCL
/// refuses to start without one (`$POCL_CACHE_DIR`, else `$XDG_CACHE_HOME/pocl/kcache`, else
/// `$HOME/.cache/pocl/kcache`), e.g. for a user whose HOME does not exist or is read-only.
pub(crate) fn pocl_cache_problem() -> Option<String> {
    let names = cl::platform_names().unwrap_or_default();
    if !names
        .iter()
        .any(|n| n.contains("Portable Computing Language"))
    {
        return None;
    }
    let env = |k| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
    };
    let dir = env("POCL_CACHE_DIR").or_else(|| {
        env("XDG_CACHE_HOME")
            .or_else(|| env("HOME").map(|h| h.join(".cache")))
            .map(|c| c.join("pocl").join("kcache"))
    })?;
    let err = std::fs::create_dir_all(&dir)
        .and_then(|()| tempfile::tempfile_in(&dir).map(drop))
        .err()?;
    Some(format!(
        "PoCL is installed but lists no device: it cannot create its kernel cache {} ({err}). Point it at a writable folder, e.g. `export POCL_CACHE_DIR=/tmp/pocl-cache-$USER`, or make HOME writable",
        dir.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::colour;
    use pinstream::engine::{BudgetError, StreamError};
    use pinstream::host::HostError;
    use pinstream_lab::tools::demo::DemoError;
    use std::ffi::OsStr;

    /// The lab returns the library's errors as data; the CLI adds the flags that fix them.
    #[test]
    fn the_labs_pinning_and_stream_failures_get_their_flags() {
        let one = DemoError::Host(HostError::OneDevice { api: "Vulkan" });
        let said = super::demo_failure(one).message;
        assert!(
            said.ends_with("pass one device to --device with --api vulkan"),
            "{said}"
        );
        let small = StreamError::Budget(BudgetError::TooSmall {
            budget: 1 << 20,
            resident: 0,
            slot: 1 << 20,
            inputs: 1,
            output: false,
            fit: 1,
            need: 2,
            need_bytes: 2 << 20,
            largest_block: 0,
            guarded: false,
        });
        let said = super::compare::stream_failed("CUDA", &small).message;
        assert!(said.starts_with("the CUDA stream failed: "), "{said}");
        assert!(
            said.ends_with("raise --vram-budget to at least 2 MiB"),
            "{said}"
        );
    }

    #[test]
    fn colour_only_on_a_terminal_and_never_with_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some(OsStr::new(""))));
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None));
    }
}
