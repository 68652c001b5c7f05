//! `run`'s flags ([`Args`], as clap reads them) and the settings built from them once
//! ([`Settings`], as ripgrep's `HiArgs`): typed values, defaults resolved, the rest of `run`
//! never sees a flag's text.

use super::super::device_sets::{DeviceSet, Numa};
use super::super::dispatch::ApiName;
use super::super::flags::{BudgetFlags, DeviceFlags, OnOff, Wait, WaitFlag};
use super::super::size_arg;
use pinstream::engine::{BoundsCheck, DType, Residency, WorkSize};
use pinstream::host::StrategyChoice;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `run`.
#[derive(clap::Args)]
#[command(mut_arg("wait", |a| a.help("How OpenCL waits for commands: auto (the stream's waits spin 100 µs, then sleep), driver (clWaitForEvents, which spins a core on NVIDIA) or sleep")))]
#[command(mut_arg("vram_budget", |a| a.help("Device memory the run may use, slots and residents together, per device (default: half the free VRAM)")))]
#[command(mut_arg("block", |a| a.help("Input bytes per block (default: 256 MiB, or what four slots in the budget allow)")))]
#[command(mut_arg("device", |a| a.help("Device index from `pinstream devices` (a CUDA device ordinal with --api cuda)")))]
#[command(mut_arg("devices", |a| a.help("Several devices at once: indices (`0,1`) or `all` (every device of the default device's platform and type; every CUDA device with --api cuda). Each gets a contiguous share of the blocks, a ring of its own and --vram-budget of its own")))]
pub struct Args {
    /// The API that runs the kernel: opencl, cuda (a CUDA C kernel compiled with NVRTC,
    /// declared `extern "C"`, same argument convention; --device is then a CUDA device
    /// ordinal, and the memory is pinned with cuMemHostRegister), or vulkan (a WGSL kernel
    /// compiled by naga: buffers `var<storage>` at @group(0) @binding(0..n) in argument
    /// order, the counts and --arg values the members of one `var<immediate>` struct;
    /// --device is then a Vulkan device index; see examples/*.wgsl).
    #[arg(long, value_enum, default_value = "opencl")]
    api: ApiName,
    #[command(flatten)]
    wait: WaitFlag,
    /// Kernel source file: OpenCL C (CUDA C with --api cuda, WGSL with --api vulkan).
    #[arg(long)]
    kernel: PathBuf,
    /// Kernel function to run.
    #[arg(long)]
    entry: String,
    /// Input file (repeat for several inputs; the first is processed in place when the kernel
    /// has no output buffer).
    #[arg(long)]
    input: Vec<PathBuf>,
    /// Synthetic random input of this size (repeat for several).
    #[arg(long, value_parser = size_arg)]
    synthetic: Vec<u64>,
    /// Elements to process from each input (default: all; a file shorter than this is an
    /// error). Needed for a FIFO or device input, which has no length of its own.
    #[arg(long)]
    elements: Option<u64>,
    /// Write the result here (through a temporary file renamed into place on success; a
    /// device or FIFO is written through). It may name an --input: updated in place.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Input element type.
    #[arg(long, default_value = "f32")]
    dtype: DType,
    /// Output element type, out of place (default: the input's).
    #[arg(long)]
    out_dtype: Option<DType>,
    /// Input elements per output element, out of place (e.g. the columns of W in y = W·x).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    reduce: u64,
    /// Count work items per input element or per output element.
    #[arg(long, value_enum, default_value = "input")]
    work: Work,
    /// Work items per counted element (e.g. a work-group per output row).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    items: u64,
    /// Work-group size (default: the driver's choice).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    local: Option<u64>,
    /// A user scalar, NAME=VALUE, typed by the kernel (repeat).
    #[arg(long = "arg", value_parser = pinstream_cli::advice::user_arg)]
    args: Vec<(String, String)>,
    /// A file uploaded once and bound after the output (repeat).
    #[arg(long)]
    resident: Vec<PathBuf>,
    /// A table the kernel reads in place from host memory, NAME=FILE (repeat): FILE's bytes
    /// in mapped pinned memory, bound to the kernel's `__global` pointer argument NAME and
    /// read across the bus (no VRAM copy, not in --vram-budget), up to the device's largest
    /// buffer. OpenCL, one device.
    #[arg(long = "host-table", value_name = "NAME=FILE", value_parser = host_table_arg)]
    host_table: Vec<(String, PathBuf)>,
    #[command(flatten)]
    budget: BudgetFlags,
    /// Slots in the ring (default: as many as the budget holds, up to 4).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    slots: Option<u64>,
    /// Pinning strategy for the host regions.
    #[arg(long, default_value = "auto")]
    strategy: StrategyChoice,
    /// Pin each input as the stream goes (`on`: chunk by chunk in the background, each
    /// chunk read from its file, or drawn, as it is made resident; OpenCL `register`, one
    /// device, no NUMA placement, regular files), or up front, then read, then stream (`off`).
    #[arg(long, value_enum, default_value = "off")]
    progressive: OnOff,
    /// Stream the --input files from storage through small pinned staging rings, read
    /// past the page cache (O_DIRECT) ahead of the device and the result written to
    /// --output block by block, so host memory holds the rings, not the data (`on`); make
    /// the inputs resident first (`off`); or stream from storage when the run's regions do
    /// not fit in the host memory available, the container's limit counted (`auto`). One
    /// device, --input files only.
    #[arg(long, value_enum, default_value = "auto")]
    from_storage: FromStorage,
    #[command(flatten)]
    dev: DeviceFlags,
    /// With several devices on a host of several NUMA nodes, bind each device's share of
    /// the host memory to the device's node (OpenCL strategies `register`, `mlock`,
    /// `pageable`).
    #[arg(long, value_enum, default_value = "off")]
    numa: Numa,
    /// Extra OpenCL build options (NVRTC options with --api cuda), e.g. --build-options -DN=4
    /// (values may start with `-`).
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    build_options: String,
    /// Also run the same work on one in-order queue, as the baseline.
    #[arg(long)]
    compare_sequential: bool,
    /// Passes over the data: in place, each pass reads what the one before wrote (the result
    /// of N runs in a row); inputs and --resident files stay as they are. Streamed from
    /// storage, each pass reads the files again (but what --residency keeps in VRAM and
    /// --host-tier in host memory).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    passes: u64,
    /// With --passes above 1, the blocks kept in device memory across passes: `auto` (as
    /// many as the --vram-budget left after the slots and the --resident files holds),
    /// `off`, or a SIZE (at most that much per device). A resident block is uploaded once
    /// and, in place, downloaded once after the last pass; out of place its output is
    /// downloaded every pass. Streamed from storage, the same last blocks are neither read
    /// nor uploaded after the first pass (the VRAM tier of the plan).
    #[arg(long, value_name = "auto|off|SIZE", default_value = "auto")]
    residency: Residency,
    /// Streamed from storage with --passes above 1, the host memory that keeps whole blocks
    /// across passes, so later passes read only the rest from storage: `auto` (half the host
    /// memory available after the staging rings, the container's limit counted), `off`, or
    /// a SIZE; at most the data.
    #[arg(long, value_name = "auto|off|SIZE", default_value = "auto")]
    host_tier: Residency,
    /// Write a Chrome/Perfetto trace (JSON) here.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Abort the run when no block completes within this many seconds (a kernel that loops
    /// forever cannot be interrupted otherwise); exit code 124.
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    kernel_timeout: Option<f64>,
    /// The bounds guard: a guard zone with a canary after every buffer the kernel gets,
    /// checked after each block; a kernel that wrote past a buffer stops the run (exit 1),
    /// naming the argument and the block, and no output is written. auto: on for CPU
    /// devices (PoCL: there an overrun corrupts the process itself), off for GPUs; on: GPUs
    /// too (a small read per buffer per block). Each guarded buffer takes twice its size
    /// in --vram-budget. off: unprotected, a kernel that writes past its buffers corrupts
    /// memory unseen (on a CPU device, the process's heap: it may crash).
    #[arg(long, value_name = "on|off|auto", default_value = "auto")]
    check_bounds: BoundsCheck,
    /// Seed of synthetic data (default: fresh).
    #[arg(long)]
    seed: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// `--work`: what the work items are counted per.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Work {
    /// Per input element.
    Input,
    /// Per output element.
    Output,
}

/// Where an input's bytes come from.
pub(super) enum Source {
    /// An `--input` file.
    File(PathBuf),
    /// `--synthetic` data of this many bytes.
    Synthetic(u64),
}

impl Source {
    /// The input as messages name it.
    pub(super) fn name(&self) -> String {
        match self {
            Source::File(p) => p.display().to_string(),
            Source::Synthetic(_) => "the synthetic input".into(),
        }
    }
}

/// The devices a run asks for.
pub(super) struct DeviceAsk {
    /// `--device`.
    pub one: Option<usize>,
    /// `--devices`.
    pub set: Option<DeviceSet>,
    /// `--numa`.
    pub numa: Numa,
}

/// What `run` does, from its flags: built once, before anything is opened.
pub(super) struct Settings {
    /// The API that runs the kernel.
    pub api: ApiName,
    /// How OpenCL waits for commands.
    pub wait: Wait,
    /// The kernel file.
    pub kernel: PathBuf,
    /// The kernel's name in it.
    pub entry: String,
    /// Options for the kernel's compiler.
    pub build_options: String,
    /// The inputs: the files, then the synthetic ones.
    pub sources: Vec<Source>,
    /// The `--input` files alone (for the outputs' checks).
    pub input_files: Vec<PathBuf>,
    /// Elements to read from each input (`None`: all).
    pub elements: Option<u64>,
    /// Files uploaded once.
    pub residents: Vec<PathBuf>,
    /// Tables read in place from mapped pinned memory: argument name, file.
    pub host_tables: Vec<(String, PathBuf)>,
    /// Where the result goes.
    pub output: Option<PathBuf>,
    /// Where the trace goes.
    pub trace: Option<PathBuf>,
    /// Input element type.
    pub dtype: DType,
    /// Output element type (the input's unless `--out-dtype`).
    pub out_dtype: DType,
    /// Input elements per output element.
    pub reduce: usize,
    /// How many work items a block launches.
    pub work: WorkSize,
    /// The user's scalars, NAME=VALUE.
    pub args: Vec<(String, String)>,
    /// Device memory the run may use, per device (`None`: the default).
    pub vram_budget: Option<u64>,
    /// Input bytes per block (`None`: the default).
    pub block: Option<usize>,
    /// Slots in the ring (`None`: the default).
    pub slots: Option<usize>,
    /// How the host memory is pinned (OpenCL strategies).
    pub strategy: StrategyChoice,
    /// Pin the inputs as the stream goes.
    pub progressive: bool,
    /// Stream the inputs from storage.
    pub from_storage: FromStorage,
    /// The devices.
    pub devices: DeviceAsk,
    /// Also run the baseline on one queue.
    pub compare_sequential: bool,
    /// Passes over the data.
    pub passes: usize,
    /// Blocks kept in device memory across passes.
    pub residency: Residency,
    /// Host memory keeping blocks across passes from storage.
    pub host_tier: Residency,
    /// A block that takes longer than this stops the run.
    pub kernel_timeout: Option<Duration>,
    /// The bounds guard.
    pub check_bounds: BoundsCheck,
    /// Seed of the synthetic data.
    pub seed: u64,
    /// The report as JSON.
    pub json: bool,
}

impl Settings {
    /// The settings `a` asks for.
    pub fn new(a: Args) -> Self {
        let sources = a.input.iter().cloned().map(Source::File);
        let sources = sources.chain(a.synthetic.iter().map(|&n| Source::Synthetic(n)));
        Settings {
            api: a.api,
            wait: a.wait.wait,
            sources: sources.collect(),
            input_files: a.input,
            elements: a.elements,
            residents: a.resident,
            host_tables: a.host_table,
            output: a.output,
            trace: a.trace,
            out_dtype: a.out_dtype.unwrap_or(a.dtype),
            dtype: a.dtype,
            reduce: a.reduce as usize,
            work: work_size(a.work, a.items, a.local),
            args: a.args,
            vram_budget: a.budget.vram_budget,
            block: a.budget.block.map(|b| b as usize),
            slots: a.slots.map(|s| s as usize),
            strategy: a.strategy,
            progressive: a.progressive.on(),
            from_storage: a.from_storage,
            devices: DeviceAsk {
                one: a.dev.device,
                set: a.dev.devices,
                numa: a.numa,
            },
            compare_sequential: a.compare_sequential,
            passes: a.passes as usize,
            residency: a.residency,
            host_tier: a.host_tier,
            kernel_timeout: a.kernel_timeout.map(Duration::from_secs_f64),
            check_bounds: a.check_bounds,
            seed: a.seed.unwrap_or_else(fresh_seed),
            json: a.json,
            kernel: a.kernel,
            entry: a.entry,
            build_options: a.build_options,
        }
    }
}

/// The launch size `--work`, `--items` and `--local` ask for.
fn work_size(work: Work, items: u64, local: Option<u64>) -> WorkSize {
    WorkSize {
        per_output: work == Work::Output,
        items_per: items as usize,
        local: local.map(|l| l as usize),
    }
}

/// `--host-table NAME=FILE`.
fn host_table_arg(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, file)) if !name.trim().is_empty() && !file.is_empty() => {
            Ok((name.trim().to_string(), PathBuf::from(file)))
        }
        _ => Err(format!(
            "`{s}` is not NAME=FILE: write e.g. --host-table table=rows.bin, NAME being the kernel's pointer argument"
        )),
    }
}

/// `--kernel-timeout`: positive, finite seconds.
fn seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v < 1e9 => Ok(v),
        _ => Err(format!(
            "`{s}` is not a number of seconds between 0 and 10^9 (e.g. 30 or 0.5)"
        )),
    }
}

fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(7, |d| d.as_nanos() as u64)
}

/// `--from-storage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FromStorage {
    /// Always stream the inputs from their files.
    On,
    /// Never: make the inputs resident in pinned memory first.
    Off,
    /// From storage when the run's regions do not fit in the host memory available.
    Auto,
}
