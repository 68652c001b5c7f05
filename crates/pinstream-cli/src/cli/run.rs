//! `pinstream run`: a user's kernel (OpenCL C, or CUDA C with `--api cuda`) over files or
//! synthetic data larger than VRAM.
//!
//! Everything that can be checked is checked before any memory is pinned ([`Plan`]): the
//! inputs and outputs, the kernel's arguments, the sizes and the launch against the kernel's
//! limits on its device, and all regions against the host memory. Signals are honoured in
//! every phase (`super::signals`); outputs are written whole or not at all.

use super::progressive::Reader;
use super::report::{blocks_bar, render, VramDuring};
use super::run_api::{OpenClRun, RunApi};
use super::several::{byte_shares, parse_devices, DeviceSet, Numa, Waiting};
use super::signals::{self, Mode};
use super::{files, out, size_arg, stream_failure, Failure};
use pinstream::backend::api::{Api, Device, Kernel};
use pinstream::backend::os;
use pinstream::engine::bind::{bind, Shape};
use pinstream::engine::io::{self, read_into, IoError, Output};
use pinstream::engine::profile::chrome_trace_runs;
use pinstream::engine::validate::{self, RunShape};
use pinstream::engine::{
    run_on_each, BoundsCheck, DType, HostMemory, Job, Progress, StreamOptions, StreamReport,
    Target, WorkSize,
};
use pinstream::host::StrategyChoice;
use pinstream::units::Bytes;
use pinstream_cli::advice::{self, Flags};
use serde::Serialize;
use std::path::PathBuf;

/// Arguments of `run`.
#[derive(clap::Args)]
pub struct Args {
    /// The API that runs the kernel: opencl, or cuda (a CUDA C kernel compiled with NVRTC,
    /// declared `extern "C"`, same argument convention; --device is then a CUDA device
    /// ordinal, and the memory is pinned with cuMemHostRegister).
    #[arg(long, default_value = "opencl", value_parser = ["opencl", "cuda"])]
    pub(super) api: String,
    /// How OpenCL waits for commands: auto (the stream's waits spin 100 µs, then sleep),
    /// driver (clWaitForEvents, which spins a core on NVIDIA) or sleep.
    #[arg(long, default_value = "auto", value_parser = ["auto", "driver", "sleep"])]
    pub(super) wait: String,
    /// Kernel source file: OpenCL C (CUDA C with --api cuda).
    #[arg(long)]
    pub(super) kernel: PathBuf,
    /// Kernel function to run.
    #[arg(long)]
    pub(super) entry: String,
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
    #[arg(long, default_value = "input", value_parser = ["input", "output"])]
    work: String,
    /// Work items per counted element (e.g. a work-group per output row).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    items: u64,
    /// Work-group size (default: the driver's choice).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    local: Option<u64>,
    /// A user scalar, NAME=VALUE, typed by the kernel (repeat).
    #[arg(long = "arg", value_parser = advice::user_arg)]
    args: Vec<(String, String)>,
    /// A file uploaded once and bound after the output (repeat).
    #[arg(long)]
    resident: Vec<PathBuf>,
    /// Device memory the run may use, slots and residents together, per device (default:
    /// half the free VRAM).
    #[arg(long, value_parser = size_arg)]
    vram_budget: Option<u64>,
    /// Input bytes per block (default: 256 MiB, or what four slots in the budget allow).
    #[arg(long, value_parser = size_arg)]
    block: Option<u64>,
    /// Slots in the ring (default: as many as the budget holds, up to 4).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    slots: Option<u64>,
    /// Pinning strategy for the host regions.
    #[arg(long, default_value = "auto")]
    pub(super) strategy: StrategyChoice,
    /// Pin each input as the stream goes (`on`: chunk by chunk in the background, each
    /// chunk read from its file, or drawn, as it is made resident; OpenCL `register`, one
    /// device, no NUMA placement, regular files), or up front, then read, then stream (`off`).
    #[arg(long, default_value = "off", value_parser = ["on", "off"])]
    pub(super) progressive: String,
    /// Device index from `pinstream devices` (a CUDA device ordinal with --api cuda).
    #[arg(long)]
    pub(super) device: Option<usize>,
    /// Several devices at once: indices (`0,1`) or `all` (every device of the default
    /// device's platform and type; every CUDA device with --api cuda). Each gets a
    /// contiguous share of the blocks, a ring of its own and --vram-budget of its own.
    #[arg(long, value_parser = parse_devices)]
    pub(super) devices: Option<DeviceSet>,
    /// With several devices on a host of several NUMA nodes, bind each device's share of
    /// the host memory to the device's node (OpenCL strategies `register`, `mlock`,
    /// `pageable`).
    #[arg(long, value_enum, default_value = "off")]
    pub(super) numa: Numa,
    /// Extra OpenCL build options (NVRTC options with --api cuda), e.g. --build-options -DN=4
    /// (values may start with `-`).
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    pub(super) build_options: String,
    /// Also run the same work on one in-order queue, as the baseline.
    #[arg(long)]
    compare_sequential: bool,
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

#[derive(Serialize)]
struct RunReport {
    device: String,
    numa: String,
    kernel: String,
    in_place: bool,
    strategy: String,
    strategy_reason: String,
    pinned_bytes: u64,
    pin_s: f64,
    read_s: f64,
    /// The inputs were pinned as the stream went (`--progressive on`).
    progressive: bool,
    /// Milliseconds from the start of pinning the inputs until the host saw the first
    /// block's upload complete.
    first_block_ms: Option<f64>,
    vram: VramDuring,
    stream: StreamReport,
    sequential: Option<StreamReport>,
    output: Option<String>,
}

enum Source {
    File(PathBuf),
    Synthetic(u64),
}

impl Source {
    fn name(&self) -> String {
        match self {
            Source::File(p) => p.display().to_string(),
            Source::Synthetic(_) => "the synthetic input".into(),
        }
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

/// The `--kernel` file's text, read with a size limit.
fn read_kernel(a: &Args) -> Result<String, Failure> {
    io::read_source(&a.kernel).map_err(|e| match e {
        IoError::Open { source, .. } => Failure::usage(format!(
            "cannot read kernel file {}: {source}",
            a.kernel.display()
        )),
        e => Failure::usage(e),
    })
}

/// Bytes per input: the file's length, or what `--elements` states (needed for a FIFO or a
/// device, which has no length of its own).
fn input_len(a: &Args, sources: &[Source]) -> Result<usize, Failure> {
    let dsize = a.dtype.size() as u64;
    let mut len = None;
    for s in sources {
        let have = match s {
            Source::File(p) => io::input_len(p).map_err(Failure::usage)?,
            Source::Synthetic(n) => Some(*n),
        };
        let want = match (a.elements, have) {
            (Some(e), have) => {
                let want = e
                    .checked_mul(dsize)
                    .ok_or_else(|| Failure::usage("--elements is too large"))?;
                if let Some(have) = have.filter(|&h| h < want) {
                    return Err(Failure::usage(format!(
                        "{} holds {have} bytes, shorter than the {e} {} elements stated with --elements ({want} bytes)",
                        s.name(),
                        a.dtype
                    )));
                }
                want
            }
            (None, Some(have)) => have,
            (None, None) => {
                return Err(Failure::usage(format!(
                    "{} is a FIFO or a device: it has no length of its own; pass --elements N to read N {} elements from it, or save it to a file",
                    s.name(),
                    a.dtype
                )))
            }
        };
        if want == 0 || want % dsize != 0 {
            return Err(Failure::usage(format!(
                "an input of {want} bytes is not a positive multiple of the {} element size ({dsize} bytes): check --dtype, or pass --elements",
                a.dtype
            )));
        }
        if *len.get_or_insert(want) != want {
            return Err(Failure::usage("inputs differ in size: every input must hold the same number of elements (or pass --elements)"));
        }
    }
    len.map(|l| l as usize)
        .ok_or_else(|| Failure::usage("no input: pass --input FILE or --synthetic SIZE"))
}

/// Bytes of each resident file (regular files only: a resident is read whole).
fn resident_lens(a: &Args) -> Result<Vec<usize>, Failure> {
    a.resident
        .iter()
        .map(|p| match io::input_len(p).map_err(Failure::usage)? {
            Some(0) => Err(Failure::usage(format!(
                "resident file {} is empty",
                p.display()
            ))),
            Some(n) => Ok(n as usize),
            None => Err(Failure::usage(format!(
                "resident file {} is a FIFO or a device: a resident is read whole, so it needs a length; save it to a file",
                p.display()
            ))),
        })
        .collect()
}

/// What the run does, settled before anything is pinned.
struct Plan {
    sources: Vec<Source>,
    /// Bytes per input.
    len: usize,
    residents: Vec<usize>,
    in_place: bool,
    /// Bytes of the result.
    result_len: usize,
    opts: StreamOptions,
    seed: u64,
}

impl Plan {
    /// The run's shape, checked against the kernel, the device and the host memory.
    fn new<R: RunApi>(a: &Args, api: &R, kernel: &<R::A as Api>::Kernel) -> Result<Self, Failure> {
        let sources: Vec<Source> = a
            .input
            .iter()
            .cloned()
            .map(Source::File)
            .chain(a.synthetic.iter().map(|&n| Source::Synthetic(n)))
            .collect();
        let len = input_len(a, &sources)?;
        let residents = resident_lens(a)?;
        let in_place = runs_in_place::<R::A>(a, kernel, sources.len())?;
        let out_dtype = a.out_dtype.unwrap_or(a.dtype);
        let reduce = a.reduce as usize;
        let result_len = if in_place {
            len
        } else {
            (len / a.dtype.size()).div_ceil(reduce) * out_dtype.size()
        };
        let budget = a.vram_budget.unwrap_or_else(|| api.default_budget());
        let resident_bytes: u64 = residents.iter().map(|&n| n as u64).sum();
        let block = a.block.map_or_else(
            || {
                default_block(
                    a,
                    len,
                    budget.saturating_sub(resident_bytes),
                    sources.len(),
                    in_place,
                )
            },
            |b| b as usize,
        );
        let plan = Plan {
            sources,
            len,
            residents,
            in_place,
            result_len,
            opts: stream_options(a, budget, block),
            seed: a.seed.unwrap_or_else(fresh_seed),
        };
        plan.check(a, kernel)?;
        Ok(plan)
    }

    /// The kernel's arguments, sizes and launch against the run, and all regions against
    /// the host memory, before any pinning.
    fn check<K: Kernel>(&self, a: &Args, kernel: &K) -> Result<(), Failure> {
        if self.in_place && a.compare_sequential {
            if let Some(Source::File(p)) = self.sources.first() {
                if io::input_len(p).ok().flatten().is_none() {
                    return Err(Failure::usage(format!(
                        "--compare-sequential reads the in-place input {} twice, which a FIFO or device cannot give: save it to a file",
                        p.display()
                    )));
                }
            }
        }
        let args = kernel.params().map_err(Failure::run)?;
        let shape = Shape {
            inputs: self.sources.len(),
            output: !self.in_place,
            residents: self.residents.len(),
        };
        let binding = bind(&a.entry, &args, &shape, &a.args)
            .map_err(|e| Failure::usage(advice::bind_error(&e)))?;
        let limits = kernel.work_group_limits().map_err(Failure::run)?;
        let run = RunShape {
            len: self.len,
            in_place: self.in_place,
        };
        let notes = validate::check_run(&a.entry, &args, &binding, &self.opts, run, limits)
            .map_err(|e| Failure::usage(advice::validate_error(&e)))?;
        notes
            .iter()
            .for_each(|n| out::warn(advice::element_note(n)));
        validate::host_memory(&self.regions(), os::host_room()).map_err(Failure::usage)
    }

    /// Each of `devices` devices' byte range of an input (or, with `output`, of the output
    /// out of place), as the engine shares the blocks; none with one device.
    fn shares(&self, devices: usize, output: bool) -> Vec<std::ops::Range<usize>> {
        if devices < 2 {
            return Vec::new();
        }
        let o = &self.opts;
        let block = o.block_bytes;
        if !output {
            return byte_shares(self.len, block, devices);
        }
        let out_block = (block / o.dtype.size()).div_ceil(o.in_per_out) * o.out_dtype.size();
        byte_shares(self.result_len, out_block, devices)
    }

    /// Every region the run pins, described.
    fn regions(&self) -> Vec<(String, u64)> {
        let n = self.sources.len();
        let mut parts = vec![(
            format!("{n} input(s) of {}:", Bytes(self.len as u64)),
            (n * self.len) as u64,
        )];
        if !self.residents.is_empty() {
            let r: usize = self.residents.iter().sum();
            parts.push((format!("{} resident(s):", self.residents.len()), r as u64));
        }
        if !self.in_place {
            parts.push(("an output of".into(), self.result_len as u64));
        }
        parts
    }
}

/// In place when the kernel takes no buffer for an output; then --reduce and --out-dtype
/// cannot apply.
fn runs_in_place<A: Api>(a: &Args, kernel: &A::Kernel, inputs: usize) -> Result<bool, Failure> {
    let params = kernel.params().map_err(Failure::run)?;
    let buffers = params.iter().filter(|x| x.is_buffer()).count();
    let in_place = buffers == inputs + a.resident.len();
    if in_place && (a.reduce != 1 || a.out_dtype.is_some_and(|t| t != a.dtype)) {
        return Err(Failure::usage(format!(
            "kernel `{}` has no output buffer, so it runs in place and its result replaces the input: --reduce and --out-dtype need a kernel with one more buffer argument for the output",
            a.entry
        )));
    }
    Ok(in_place)
}

/// The pinned data of a run.
struct Data<M> {
    regions: Vec<M>,
    /// Each input's reader (the in-place one is read again after the baseline).
    readers: Vec<Reader>,
    residents: Vec<M>,
    output: Option<M>,
    pin_s: f64,
    read_s: f64,
    /// When pinning the inputs began.
    call: std::time::Instant,
}

impl<M: HostMemory> Data<M> {
    /// Pins and fills the inputs, reads the residents, pins the output (out of place).
    fn load<R: RunApi<Memory = M>>(api: &R, a: &Args, plan: &Plan) -> Result<Self, Failure> {
        let stated = a.elements.is_some().then_some("--elements");
        let mut d = Data {
            regions: Vec::new(),
            readers: Vec::new(),
            residents: Vec::new(),
            output: None,
            pin_s: 0.0,
            read_s: 0.0,
            call: std::time::Instant::now(),
        };
        for (i, s) in plan.sources.iter().enumerate() {
            let reader = match s {
                Source::File(p) => Reader::open(p)?,
                Source::Synthetic(_) => Reader::Drawn(plan.seed.wrapping_add(i as u64)),
            };
            let shares = plan.shares(api.devices().len(), false);
            let as_pinned = reader.as_pinned().filter(|_| a.progressive == "on");
            let (mut r, took) =
                api.pin_progressive(a, plan.len, &shares, plan.opts.block_bytes, as_pinned)?;
            d.pin_s += took;
            if !r.is_pending() {
                let t = std::time::Instant::now();
                reader.fill(&mut r, stated)?;
                d.read_s += t.elapsed().as_secs_f64();
            }
            d.regions.push(r);
            d.readers.push(reader);
        }
        for (p, &n) in a.resident.iter().zip(&plan.residents) {
            let mut r = d.pin(api, a, n, &[])?;
            read_into(p, &mut r).map_err(Failure::usage)?;
            d.residents.push(r);
        }
        if !plan.in_place {
            let shares = plan.shares(api.devices().len(), true);
            d.output = Some(d.pin(api, a, plan.result_len.max(1), &shares)?);
        }
        Ok(d)
    }

    fn pin<R: RunApi<Memory = M>>(
        &mut self,
        api: &R,
        a: &Args,
        n: usize,
        shares: &[std::ops::Range<usize>],
    ) -> Result<M, Failure> {
        let (m, took) = api.pin(a, n, shares)?;
        self.pin_s += took;
        Ok(m)
    }

    fn pinned_bytes(&self) -> u64 {
        self.regions
            .iter()
            .chain(&self.residents)
            .chain(&self.output)
            .map(|r| r.len() as u64)
            .sum()
    }

    /// The run's job: the first input in place (or all as inputs), residents, the output.
    fn job<'a>(&'a mut self, in_place: bool, args: &[(String, String)]) -> Job<'a> {
        let (first, rest) = self.regions.split_first_mut().expect("at least one input");
        let rest = rest.iter().map(|r| r as &dyn HostMemory);
        let (in_place, inputs): (Option<&mut dyn HostMemory>, Vec<&dyn HostMemory>) = if in_place {
            (Some(first), rest.collect())
        } else {
            (
                None,
                std::iter::once(&*first as &dyn HostMemory)
                    .chain(rest)
                    .collect(),
            )
        };
        Job {
            in_place,
            inputs,
            output: self.output.as_mut().map(|o| o as &mut dyn HostMemory),
            residents: self
                .residents
                .iter()
                .map(|r| r as &dyn HostMemory)
                .collect(),
            args: args.to_vec(),
        }
    }

    /// The result: the in-place region or the output.
    fn result(&self) -> &M {
        self.output.as_ref().unwrap_or(&self.regions[0])
    }
}

fn stream_options(a: &Args, budget: u64, block: usize) -> StreamOptions {
    StreamOptions {
        dtype: a.dtype,
        out_dtype: a.out_dtype.unwrap_or(a.dtype),
        block_bytes: block,
        in_per_out: a.reduce as usize,
        slots: a.slots.map(|s| s as usize),
        vram_budget: budget,
        work: WorkSize {
            per_output: a.work == "output",
            items_per: a.items as usize,
            local: a.local.map(|l| l as usize),
        },
        sequential: false,
        stop: Some(super::stop_flag()),
        check_bounds: a.check_bounds,
    }
}

fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(7, |d| d.as_nanos() as u64)
}

/// The outputs the run writes, checked with its inputs before any work.
fn prepare_outputs(a: &Args) -> Result<Vec<Output>, Failure> {
    let outputs = files::given(&[("--output", &a.output), ("--trace", &a.trace)]);
    let inputs: Vec<files::Named> = std::iter::once(("--kernel", a.kernel.as_path()))
        .chain(a.input.iter().map(|p| ("--input", p.as_path())))
        .chain(a.resident.iter().map(|p| ("--resident", p.as_path())))
        .collect();
    files::prepare(&outputs, &inputs, Some(("--output", "--input")))
}

pub fn run(a: Args) -> Result<(), Failure> {
    pinstream::backend::opencl::wait::set_wait_mode(a.wait.parse().map_err(Failure::usage)?);
    let outputs = prepare_outputs(&a)?;
    if a.api == "cuda" {
        return run_cuda(&a, &outputs);
    }
    run_with(&OpenClRun::open(&a)?, &a, &outputs)
}

#[cfg(feature = "cuda")]
fn run_cuda(a: &Args, outputs: &[Output]) -> Result<(), Failure> {
    signals::phase("while opening the CUDA device", Mode::Exit)?;
    run_with(&super::run_api::cuda::CudaRun::open(a)?, a, outputs)
}

#[cfg(not(feature = "cuda"))]
fn run_cuda(_: &Args, _: &[Output]) -> Result<(), Failure> {
    Err(Failure::run(
        "--api cuda: this pinstream was built without the `cuda` cargo feature: build it with default features (or `--features cuda`)",
    ))
}

/// The run through `api`: build, plan and check, pin and fill, stream (after the baseline
/// where asked), write, report.
fn run_with<R: RunApi>(api: &R, a: &Args, outputs: &[Output]) -> Result<(), Failure> {
    signals::phase(
        format!("while reading and building {}", a.kernel.display()),
        Mode::Exit,
    )?;
    let mut kernels = api.build(a, &read_kernel(a)?)?;
    let plan = Plan::new(a, api, &kernels[0])?;
    signals::phase("while pinning and reading the inputs", Mode::Exit)?;
    let mut data = Data::load(api, a, &plan)?;
    let vram_before = api.probe().used();
    let streams = Streams {
        a,
        api,
        plan: &plan,
    };
    let sequential = if a.compare_sequential {
        Some(streams.baseline(&mut kernels, &mut data)?)
    } else {
        None
    };
    let (rep, peak) = streams.once(&mut kernels, &mut data, false)?;
    let trace = trace_json(&rep, sequential.as_ref())?;
    let written = write_results(a, outputs, data.result(), plan.result_len, &trace);
    let vram = VramDuring {
        source: api.probe().source().describe(),
        before: vram_before,
        peak,
        peak_over_before: vram_before.zip(peak).map(|(b, p)| p as i64 - b as i64),
        budget: plan.opts.vram_budget,
    };
    let report = streams.report(&data, vram, rep, sequential, written.is_ok());
    signals::phase("while printing the report", Mode::Exit)?;
    let printed = if a.json {
        out::line(serde_json::to_string_pretty(&report).map_err(Failure::run)?)
    } else {
        out::emit(&render_text(&report))
    };
    written.and(printed)
}

/// What every stream of a run shares.
struct Streams<'r, R: RunApi> {
    a: &'r Args,
    api: &'r R,
    plan: &'r Plan,
}

impl<R: RunApi> Streams<'_, R> {
    /// The same work on one in-order queue; the in-place input is read (or drawn) again
    /// after.
    fn baseline(
        &self,
        kernels: &mut [<R::A as Api>::Kernel],
        data: &mut Data<R::Memory>,
    ) -> Result<StreamReport, Failure> {
        let (rep, _) = self.once(kernels, data, true)?;
        let plan = self.plan;
        if plan.in_place {
            signals::phase("while reading the in-place input again", Mode::Exit)?;
            let t = std::time::Instant::now();
            data.readers[0].fill(&mut data.regions[0], None)?;
            data.read_s += t.elapsed().as_secs_f64();
        }
        Ok(rep)
    }

    /// One stream over the data: the baseline on one queue (`sequential`) or the
    /// three-queue run, with progress, the stop message and the kernel watchdog; its report
    /// and the VRAM peak.
    fn once(
        &self,
        kernels: &mut [<R::A as Api>::Kernel],
        data: &mut Data<R::Memory>,
        sequential: bool,
    ) -> Result<(StreamReport, Option<u64>), Failure> {
        let (a, plan) = (self.a, self.plan);
        let o = StreamOptions {
            sequential,
            ..plan.opts.clone()
        };
        let blocks = (plan.len as u64).div_ceil(o.block_bytes.max(1) as u64);
        let bar = blocks_bar(
            blocks,
            a.json,
            if sequential { "sequential" } else { "stream" },
        );
        let names = self.api.devices().iter().map(|d| d.describe()).collect();
        let waiting = Waiting::new(names, blocks as usize);
        signals::phase(waiting.after(None), Mode::Orderly)?;
        if let Some(t) = a.kernel_timeout {
            signals::watchdog(std::time::Duration::from_secs_f64(t));
        }
        let job = data.job(plan.in_place, &a.args);
        let mut targets: Vec<Target<'_, <R::A as Api>::Device>> = self
            .api
            .devices()
            .iter()
            .zip(kernels.iter_mut())
            .map(|(d, k)| Target::new(d, k))
            .collect();
        let (r, peak) = self.api.probe().peak_during(|| {
            run_on_each(&mut targets, job, &o, &|p: Progress| {
                bar.set_position(p.blocks);
                bar.set_message(Bytes(p.bytes).to_string());
                signals::waiting_for(waiting.after(Some(&p)));
            })
        });
        bar.finish_and_clear();
        let rep = r.map_err(|e| stream_failure(e, Flags::RUN))?;
        signals::phase("after the stream", Mode::Exit)?;
        Ok((rep, peak))
    }

    /// The report of the run: its data, the VRAM readings, the stream and the baseline, and
    /// the output where it was `written`.
    fn report(
        &self,
        data: &Data<R::Memory>,
        vram: VramDuring,
        stream: StreamReport,
        sequential: Option<StreamReport>,
        written: bool,
    ) -> RunReport {
        let (a, api) = (self.a, self.api);
        let (strategy, strategy_reason) = api.pinning(&data.regions[0]);
        RunReport {
            device: api.device_name(),
            numa: api.numa(),
            kernel: format!("{} in {}", a.entry, a.kernel.display()),
            in_place: self.plan.in_place,
            strategy,
            strategy_reason,
            pinned_bytes: data.pinned_bytes(),
            pin_s: data.pin_s,
            read_s: data.read_s,
            progressive: data.regions.iter().any(|r| r.is_pending()),
            first_block_ms: sequential
                .as_ref()
                .and_then(|s| s.first_upload_at)
                .or(stream.first_upload_at)
                .map(|t| t.saturating_duration_since(data.call).as_secs_f64() * 1e3),
            vram,
            stream,
            sequential,
            output: a
                .output
                .as_ref()
                .filter(|_| written)
                .map(|p| p.display().to_string()),
        }
    }
}

/// Writes the result and the trace, each whole or not at all; the first failure.
fn write_results(
    a: &Args,
    outputs: &[Output],
    result: &dyn HostMemory,
    len: usize,
    trace: &[u8],
) -> Result<(), Failure> {
    let mut first = Ok(());
    let named = files::given(&[("--output", &a.output), ("--trace", &a.trace)]);
    for ((flag, _), o) in named.iter().zip(outputs) {
        let written = if *flag == "--output" {
            files::writing(o).and_then(|()| {
                io::write_from(o, result, len, &|| signals::stopped() != 0)
                    .map_err(|e| files::write_failure(o, e))
            })
        } else {
            files::save(o, trace)
        };
        if first.is_ok() {
            first = written;
        }
    }
    first
}

/// The stream, and the baseline beside it, as one Chrome/Perfetto trace.
fn trace_json(rep: &StreamReport, sequential: Option<&StreamReport>) -> Result<Vec<u8>, Failure> {
    let mut runs = vec![("stream, three queues", rep.records.as_slice(), false)];
    if let Some(s) = sequential {
        runs.push(("baseline, one in-order queue", s.records.as_slice(), true));
    }
    serde_json::to_vec(&chrome_trace_runs(&runs)).map_err(Failure::run)
}

/// 256 MiB, or the largest block of which four slots (each the input blocks plus, out of
/// place, the output block) fit in `room`; a whole number of `--reduce` groups.
fn default_block(a: &Args, len: usize, room: u64, inputs: usize, in_place: bool) -> usize {
    let unit = a.dtype.size() * a.reduce as usize; // input bytes per output element
    let out_per_in = if in_place {
        0.0
    } else {
        a.out_dtype.unwrap_or(a.dtype).size() as f64 / unit as f64
    };
    let slot_bytes_per_block_byte = inputs as f64 + out_per_in;
    let by_budget = (room as f64 / (4.0 * slot_bytes_per_block_byte)) as usize;
    // Never below the smallest block the run may use: a budget too small for it is then
    // reported as such, with the budget that works.
    let floor = validate::smallest_block(len, unit);
    (by_budget.min(256 << 20) / unit * unit).max(floor)
}

fn render_text(r: &RunReport) -> String {
    let mut out = format!(
        "device {}; kernel {} ({})\n",
        r.device,
        r.kernel,
        if r.in_place {
            "in place"
        } else {
            "out of place"
        }
    );
    out += &format!(
        "pinned {} with {} in {:.2} s ({}); inputs filled in {:.2} s\n",
        Bytes(r.pinned_bytes),
        r.strategy,
        r.pin_s,
        r.strategy_reason,
        r.read_s
    );
    out += &format!("NUMA: {}\n", r.numa);
    let pin_wait = r.stream.pin_wait_s;
    out += &super::report::first_block_line(r.progressive, r.first_block_ms, r.pin_s, pin_wait);
    out += &render(&r.stream);
    if let Some(s) = &r.sequential {
        out += "\nbaseline, same work on one in-order queue:\n";
        out += &render(s);
        out += &format!(
            "three queues / one queue: {:.2}x the combined bandwidth\n",
            r.stream.totals.combined_gbps / s.totals.combined_gbps.max(1e-9)
        );
    }
    out += &format!("{}\n", r.vram.line());
    out += &match &r.output {
        Some(p) => format!("result written to {p}\n"),
        None => "result not written (no --output, or writing it failed)\n".to_string(),
    };
    out
}
