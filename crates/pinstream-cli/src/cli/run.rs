//! `pinstream run`: a user's kernel (OpenCL C, or CUDA C with `--api cuda`) over files or
//! synthetic data larger than VRAM.

use super::report::{blocks_bar, render, VramDuring};
use super::run_api::{OpenClRun, RunApi};
use super::{check_stop, check_writable, size_arg, stream_failure, write_atomically, Failure};
use pinstream::backend::api::{Api, Kernel};
use pinstream::engine::bind::parse_arg;
use pinstream::engine::io::{file_len, read_into, write_from};
use pinstream::engine::profile::chrome_trace_runs;
use pinstream::engine::{
    run as stream, DType, HostMemory, Job, StreamOptions, StreamReport, WorkSize,
};
use pinstream::host::StrategyChoice;
use pinstream::units::Bytes;
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
    /// Elements to process from each input (default: all; a file shorter than this is an error).
    #[arg(long)]
    elements: Option<u64>,
    /// Write the result here (through a temporary file renamed into place on success).
    #[arg(long)]
    output: Option<PathBuf>,
    /// Input element type.
    #[arg(long, default_value = "f32")]
    dtype: DType,
    /// Output element type, out of place (default: the input's).
    #[arg(long)]
    out_dtype: Option<DType>,
    /// Input elements per output element, out of place (e.g. the columns of W in y = W·x).
    #[arg(long, default_value_t = 1)]
    reduce: usize,
    /// Count work items per input element or per output element.
    #[arg(long, default_value = "input", value_parser = ["input", "output"])]
    work: String,
    /// Work items per counted element (e.g. a work-group per output row).
    #[arg(long, default_value_t = 1)]
    items: usize,
    /// Work-group size (default: the driver's choice).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    local: Option<u64>,
    /// A user scalar, NAME=VALUE, typed by the kernel (repeat).
    #[arg(long = "arg", value_parser = parse_arg)]
    args: Vec<(String, String)>,
    /// A file uploaded once and bound after the output (repeat).
    #[arg(long)]
    resident: Vec<PathBuf>,
    /// Device memory the run may use, slots and residents together (default: half the free VRAM).
    #[arg(long, value_parser = size_arg)]
    vram_budget: Option<u64>,
    /// Input bytes per block (default: 256 MiB, or what four slots in the budget allow).
    #[arg(long, value_parser = size_arg)]
    block: Option<u64>,
    /// Slots in the ring (default: as many as the budget holds, up to 4).
    #[arg(long)]
    slots: Option<usize>,
    /// Pinning strategy for the host regions.
    #[arg(long, default_value = "auto")]
    pub(super) strategy: StrategyChoice,
    /// Device index from `pinstream devices` (a CUDA device ordinal with --api cuda).
    #[arg(long)]
    pub(super) device: Option<usize>,
    /// Extra OpenCL build options (NVRTC options with --api cuda).
    #[arg(long, default_value = "")]
    pub(super) build_options: String,
    /// Also run the same work on one in-order queue, as the baseline.
    #[arg(long)]
    compare_sequential: bool,
    /// Write a Chrome/Perfetto trace (JSON) here.
    #[arg(long)]
    trace: Option<PathBuf>,
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
    kernel: String,
    in_place: bool,
    strategy: String,
    strategy_reason: String,
    pinned_bytes: u64,
    pin_s: f64,
    read_s: f64,
    vram: VramDuring,
    stream: StreamReport,
    sequential: Option<StreamReport>,
    output: Option<String>,
}

enum Source {
    File(PathBuf),
    Synthetic(u64),
}

/// The `--kernel` file's text.
fn read_kernel(a: &Args) -> Result<String, Failure> {
    std::fs::read_to_string(&a.kernel).map_err(|e| {
        Failure::usage(format!(
            "cannot read kernel file {}: {e}",
            a.kernel.display()
        ))
    })
}

fn input_len(a: &Args, sources: &[Source]) -> Result<usize, Failure> {
    let dsize = a.dtype.size() as u64;
    let mut len = None;
    for s in sources {
        let have = match s {
            Source::File(p) => file_len(p).map_err(Failure::usage)?,
            Source::Synthetic(n) => *n,
        };
        let want = match a.elements {
            Some(e) => {
                let want = e
                    .checked_mul(dsize)
                    .ok_or_else(|| Failure::usage("--elements is too large"))?;
                if have < want {
                    let name = match s {
                        Source::File(p) => p.display().to_string(),
                        Source::Synthetic(_) => "the synthetic input".into(),
                    };
                    return Err(Failure::usage(format!(
                        "{name} holds {have} bytes, shorter than the {e} {} elements stated with --elements ({want} bytes)",
                        a.dtype
                    )));
                }
                want
            }
            None => have,
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

fn fill(region: &mut dyn HostMemory, s: &Source, seed: u64) -> Result<(), Failure> {
    match s {
        Source::File(p) => read_into(p, region, " with --elements").map_err(Failure::usage),
        Source::Synthetic(_) => {
            pinstream_cli::tools::random::fill_random(
                region.slices_mut(0..region.len()).map_err(Failure::run)?,
                seed,
            );
            Ok(())
        }
    }
}

/// The pinned data of a run.
struct Data<M> {
    regions: Vec<M>,
    residents: Vec<M>,
    output: Option<M>,
    pin_s: f64,
    read_s: f64,
}

impl<M: HostMemory> Data<M> {
    /// Pins and fills the inputs, reads the residents, pins the output (out of place).
    fn load<R: RunApi<Memory = M>>(
        api: &R,
        a: &Args,
        sources: &[Source],
        len: usize,
        out_len: Option<usize>,
        seed: u64,
    ) -> Result<Self, Failure> {
        let mut d = Data {
            regions: Vec::new(),
            residents: Vec::new(),
            output: None,
            pin_s: 0.0,
            read_s: 0.0,
        };
        for (i, s) in sources.iter().enumerate() {
            let mut r = d.pin(api, a, len)?;
            let t = std::time::Instant::now();
            fill(&mut r, s, seed.wrapping_add(i as u64))?;
            d.read_s += t.elapsed().as_secs_f64();
            d.regions.push(r);
        }
        for p in &a.resident {
            let n = file_len(p).map_err(Failure::usage)? as usize;
            if n == 0 {
                return Err(Failure::usage(format!(
                    "resident file {} is empty",
                    p.display()
                )));
            }
            let mut r = d.pin(api, a, n)?;
            read_into(p, &mut r, "").map_err(Failure::usage)?;
            d.residents.push(r);
        }
        if let Some(n) = out_len {
            d.output = Some(d.pin(api, a, n.max(1))?);
        }
        check_stop("while pinning and reading the inputs")?;
        Ok(d)
    }

    fn pin<R: RunApi<Memory = M>>(&mut self, api: &R, a: &Args, n: usize) -> Result<M, Failure> {
        let (m, took) = api.pin(a, n)?;
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

    /// Where the result is.
    fn result(&self, in_place: bool) -> &M {
        match (in_place, &self.output) {
            (false, Some(o)) => o,
            _ => &self.regions[0],
        }
    }
}

fn stream_options(a: &Args, budget: u64, block: usize) -> StreamOptions {
    StreamOptions {
        dtype: a.dtype,
        out_dtype: a.out_dtype.unwrap_or(a.dtype),
        block_bytes: block,
        in_per_out: a.reduce.max(1),
        slots: a.slots,
        vram_budget: budget,
        work: WorkSize {
            per_output: a.work == "output",
            items_per: a.items.max(1),
            local: a.local.map(|l| l as usize),
        },
        sequential: false,
        stop: Some(super::stop_flag()),
    }
}

fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(7, |d| d.as_nanos() as u64)
}

pub fn run(a: Args) -> Result<(), Failure> {
    super::stop_on_signals()?;
    for p in [&a.output, &a.trace].into_iter().flatten() {
        check_writable(p)?;
    }
    let sources: Vec<Source> = a
        .input
        .iter()
        .cloned()
        .map(Source::File)
        .chain(a.synthetic.iter().map(|&n| Source::Synthetic(n)))
        .collect();
    let len = input_len(&a, &sources)?;
    if a.api == "cuda" {
        return run_cuda(&a, &sources, len);
    }
    run_with(&OpenClRun::open(&a)?, &a, &sources, len)
}

#[cfg(feature = "cuda")]
fn run_cuda(a: &Args, sources: &[Source], len: usize) -> Result<(), Failure> {
    run_with(&super::run_api::cuda::CudaRun::open(a)?, a, sources, len)
}

#[cfg(not(feature = "cuda"))]
fn run_cuda(_: &Args, _: &[Source], _: usize) -> Result<(), Failure> {
    Err(Failure::run(
        "--api cuda: this pinstream was built without the `cuda` cargo feature: build it with default features (or `--features cuda`)",
    ))
}

/// The run through `api`: build, pin and fill, stream (after the baseline where asked),
/// write, report.
fn run_with<R: RunApi>(api: &R, a: &Args, sources: &[Source], len: usize) -> Result<(), Failure> {
    let mut kernel = api.build(a, &read_kernel(a)?)?;
    let in_place = runs_in_place::<R::A>(a, &kernel, sources.len())?;
    let result_len = if in_place {
        len
    } else {
        let out_dtype = a.out_dtype.unwrap_or(a.dtype);
        (len / a.dtype.size()).div_ceil(a.reduce.max(1)) * out_dtype.size()
    };
    let seed = a.seed.unwrap_or_else(fresh_seed);
    let out_len = (!in_place).then_some(result_len);
    let mut data = Data::load(api, a, sources, len, out_len, seed)?;
    let vram_before = api.probe().used();
    let mut runner = Runner::new(api, a, &mut kernel, &data, len, in_place);
    let sequential = if a.compare_sequential {
        let (rep, _) = runner.stream(true, &mut data)?;
        if in_place {
            // The baseline changed the in-place input: read or draw it again.
            let t = std::time::Instant::now();
            fill(&mut data.regions[0], &sources[0], seed)?;
            data.read_s += t.elapsed().as_secs_f64();
        }
        Some(rep)
    } else {
        None
    };
    let (rep, peak) = runner.stream(false, &mut data)?;
    if let Some(p) = &a.output {
        write_output(p, data.result(in_place), result_len)?;
    }
    if let Some(p) = &a.trace {
        write_trace(p, &rep, sequential.as_ref())?;
    }
    let vram = VramDuring {
        source: api.probe().source().describe(),
        before: vram_before,
        peak,
        peak_over_before: vram_before.zip(peak).map(|(b, p)| p as i64 - b as i64),
        budget: runner.opts.vram_budget,
    };
    print_report(
        a,
        &report(api, a, &data, in_place, vram, [Some(rep), sequential]),
    )
}

/// The report of a run: its data, VRAM readings, and streams (the run, the baseline).
fn report<R: RunApi>(
    api: &R,
    a: &Args,
    data: &Data<R::Memory>,
    in_place: bool,
    vram: VramDuring,
    [stream, sequential]: [Option<StreamReport>; 2],
) -> RunReport {
    let (strategy, strategy_reason) = api.pinning(&data.regions[0]);
    RunReport {
        device: api.device_name(),
        kernel: format!("{} in {}", a.entry, a.kernel.display()),
        in_place,
        strategy,
        strategy_reason,
        pinned_bytes: data.pinned_bytes(),
        pin_s: data.pin_s,
        read_s: data.read_s,
        vram,
        stream: stream.expect("the run streamed"),
        sequential,
        output: a.output.as_ref().map(|p| p.display().to_string()),
    }
}

/// True when the kernel has no buffer beyond the inputs and residents; then `--reduce` and
/// `--out-dtype` cannot apply.
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

/// Streams a run's data through its kernel on one device, with a progress bar.
struct Runner<'r, R: RunApi> {
    api: &'r R,
    a: &'r Args,
    kernel: &'r mut <R::A as Api>::Kernel,
    opts: StreamOptions,
    blocks: u64,
    in_place: bool,
}

impl<'r, R: RunApi> Runner<'r, R> {
    /// The run's budget (default: `api`'s), block (default: see [`default_block`]) and
    /// options, for `data`'s inputs of `len` bytes.
    fn new(
        api: &'r R,
        a: &'r Args,
        kernel: &'r mut <R::A as Api>::Kernel,
        data: &Data<R::Memory>,
        len: usize,
        in_place: bool,
    ) -> Self {
        let budget = a.vram_budget.unwrap_or_else(|| api.default_budget());
        let resident_bytes: u64 = data.residents.iter().map(|r| r.len() as u64).sum();
        let room = budget.saturating_sub(resident_bytes);
        let block = a.block.map_or_else(
            || default_block(a, room, data.regions.len(), in_place),
            |b| b as usize,
        );
        Runner {
            api,
            a,
            kernel,
            opts: stream_options(a, budget, block),
            blocks: (len as u64).div_ceil(block.max(1) as u64),
            in_place,
        }
    }

    /// One stream (`sequential`: the baseline on one queue); its report and the VRAM peak.
    fn stream(
        &mut self,
        sequential: bool,
        data: &mut Data<R::Memory>,
    ) -> Result<(StreamReport, Option<u64>), Failure> {
        let o = StreamOptions {
            sequential,
            ..self.opts.clone()
        };
        let what = if sequential { "sequential" } else { "stream" };
        let bar = blocks_bar(self.blocks, self.a.json, what);
        let job = data.job(self.in_place, &self.a.args);
        let (device, kernel) = (self.api.device(), &mut *self.kernel);
        let (r, peak) = self.api.probe().peak_during(|| {
            stream(device, kernel, job, &o, &|done, bytes| {
                bar.set_position(done);
                bar.set_message(Bytes(bytes).to_string());
            })
        });
        bar.finish_and_clear();
        r.map(|rep| (rep, peak)).map_err(stream_failure)
    }
}

fn print_report(a: &Args, report: &RunReport) -> Result<(), Failure> {
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(report).map_err(Failure::run)?
        );
    } else {
        print_text(report);
    }
    Ok(())
}

/// Writes the result whole or not at all; a stop request while writing removes the
/// temporary file.
fn write_output(
    path: &std::path::Path,
    result: &dyn HostMemory,
    len: usize,
) -> Result<(), Failure> {
    check_stop("before writing the output")?;
    let stop = super::stop_flag();
    let stopped = || stop.load(std::sync::atomic::Ordering::Relaxed);
    write_from(path, result, len, &|| stopped() != 0).map_err(|e| match e {
        pinstream::engine::io::IoError::Stopped => {
            super::interrupted(stopped(), "while writing the output")
        }
        e => Failure::run(e),
    })
}

/// The stream, and the baseline beside it, as one Chrome/Perfetto trace.
fn write_trace(
    path: &std::path::Path,
    rep: &StreamReport,
    sequential: Option<&StreamReport>,
) -> Result<(), Failure> {
    let mut runs = vec![("stream, three queues", rep.records.as_slice(), false)];
    if let Some(s) = sequential {
        runs.push(("baseline, one in-order queue", s.records.as_slice(), true));
    }
    let text = serde_json::to_vec(&chrome_trace_runs(&runs)).map_err(Failure::run)?;
    write_atomically(path, &text)
}

/// 256 MiB, or the largest block of which four slots (each the input blocks plus, out of
/// place, the output block) fit in `room`; a whole number of `--reduce` groups.
fn default_block(a: &Args, room: u64, inputs: usize, in_place: bool) -> usize {
    let unit = a.dtype.size() * a.reduce.max(1); // input bytes per output element
    let out_per_in = if in_place {
        0.0
    } else {
        a.out_dtype.unwrap_or(a.dtype).size() as f64 / unit as f64
    };
    let slot_bytes_per_block_byte = inputs as f64 + out_per_in;
    let by_budget = (room as f64 / (4.0 * slot_bytes_per_block_byte)) as usize;
    by_budget.min(256 << 20).max(unit) / unit * unit
}

fn print_text(r: &RunReport) {
    println!(
        "device {}; kernel {} ({})",
        r.device,
        r.kernel,
        if r.in_place {
            "in place"
        } else {
            "out of place"
        }
    );
    println!(
        "pinned {} with {} in {:.2} s ({}); inputs filled in {:.2} s",
        Bytes(r.pinned_bytes),
        r.strategy,
        r.pin_s,
        r.strategy_reason,
        r.read_s
    );
    print!("{}", render(&r.stream));
    if let Some(s) = &r.sequential {
        println!("\nbaseline, same work on one in-order queue:");
        print!("{}", render(s));
        println!(
            "three queues / one queue: {:.2}x the combined bandwidth",
            r.stream.totals.combined_gbps / s.totals.combined_gbps.max(1e-9)
        );
    }
    println!("{}", r.vram.line());
    match &r.output {
        Some(p) => println!("result written to {p}"),
        None => println!("result not written (no --output)"),
    }
}
