//! `pinstream run`: a user's OpenCL kernel over files or synthetic data larger than VRAM.

use super::report::{blocks_bar, render, VramDuring};
use super::{
    check_stop, check_writable, pick_device, size_arg, stream_failure, write_atomically, Failure,
};
use pinstream::backend::opencl::{Context, Kernel};
use pinstream::engine::bind::parse_arg;
use pinstream::engine::io::{file_len, read_into, write_from};
use pinstream::engine::pool::default_budget;
use pinstream::engine::profile::chrome_trace_runs;
use pinstream::engine::{run as stream, DType, Job, StreamOptions, StreamReport, WorkSize};
use pinstream::host::{HostRegion, PinOptions, StrategyChoice};
use pinstream::units::Bytes;
use pinstream::vram::VramProbe;
use serde::Serialize;
use std::path::PathBuf;

/// Arguments of `run`.
#[derive(clap::Args)]
pub struct Args {
    /// OpenCL C source file.
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
    strategy: StrategyChoice,
    /// Device index from `pinstream devices`.
    #[arg(long)]
    device: Option<usize>,
    /// Extra OpenCL build options.
    #[arg(long, default_value = "")]
    build_options: String,
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

fn build(ctx: &Context, a: &Args) -> Result<Kernel, Failure> {
    let src = std::fs::read_to_string(&a.kernel).map_err(|e| {
        Failure::usage(format!(
            "cannot read kernel file {}: {e}",
            a.kernel.display()
        ))
    })?;
    let program = ctx
        .build_program(&src, &a.build_options)
        .map_err(|e| Failure::usage(format!("{} does not build: {e}", a.kernel.display())))?;
    program.kernel(&a.entry).map_err(|_| {
        Failure::usage(format!(
            "{} has no kernel `{}`: it defines {}; pass one of them with --entry",
            a.kernel.display(),
            a.entry,
            program.kernel_names().join(", ")
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

fn fill(region: &mut HostRegion, s: &Source, seed: u64) -> Result<(), Failure> {
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
struct Data {
    regions: Vec<HostRegion>,
    residents: Vec<HostRegion>,
    output: Option<HostRegion>,
    pin_s: f64,
    read_s: f64,
}

impl Data {
    /// Pins and fills the inputs, reads the residents, pins the output (out of place).
    fn load(
        a: &Args,
        ctx: &Context,
        sources: &[Source],
        len: usize,
        out_len: Option<usize>,
        seed: u64,
    ) -> Result<Self, Failure> {
        let pin = PinOptions {
            strategy: a.strategy,
            ..Default::default()
        };
        let mut d = Data {
            regions: Vec::new(),
            residents: Vec::new(),
            output: None,
            pin_s: 0.0,
            read_s: 0.0,
        };
        for (i, s) in sources.iter().enumerate() {
            let mut r = HostRegion::new(ctx, len, &pin).map_err(Failure::usage)?;
            d.pin_s += r.pin_time().as_secs_f64();
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
            let mut r = HostRegion::new(ctx, n, &pin).map_err(Failure::usage)?;
            d.pin_s += r.pin_time().as_secs_f64();
            read_into(p, &mut r, "").map_err(Failure::usage)?;
            d.residents.push(r);
        }
        if let Some(n) = out_len {
            let r = HostRegion::new(ctx, n.max(1), &pin).map_err(Failure::usage)?;
            d.pin_s += r.pin_time().as_secs_f64();
            d.output = Some(r);
        }
        check_stop("while pinning and reading the inputs")?;
        Ok(d)
    }

    fn pinned_bytes(&self) -> u64 {
        self.regions
            .iter()
            .chain(&self.residents)
            .chain(&self.output)
            .map(|r| r.len() as u64)
            .sum()
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
    let device = pick_device(a.device)?;
    let ctx = Context::new(&device).map_err(Failure::run)?;
    let mut kernel = build(&ctx, &a)?;
    let buffers = kernel
        .args()
        .map_err(Failure::run)?
        .iter()
        .filter(|x| x.is_buffer())
        .count();
    let in_place = buffers == sources.len() + a.resident.len();
    if in_place && (a.reduce != 1 || a.out_dtype.is_some_and(|t| t != a.dtype)) {
        return Err(Failure::usage(format!(
            "kernel `{}` has no output buffer, so it runs in place and its result replaces the input: --reduce and --out-dtype need a kernel with one more buffer argument for the output",
            a.entry
        )));
    }
    let out_dtype = a.out_dtype.unwrap_or(a.dtype);
    let result_len = if in_place {
        len
    } else {
        (len / a.dtype.size()).div_ceil(a.reduce.max(1)) * out_dtype.size()
    };
    let seed = a.seed.unwrap_or_else(fresh_seed);
    let probe = VramProbe::new(&device);
    let mut data = Data::load(
        &a,
        &ctx,
        &sources,
        len,
        (!in_place).then_some(result_len),
        seed,
    )?;
    let vram_before = probe.used();
    let budget = a
        .vram_budget
        .unwrap_or_else(|| default_budget(&ctx, &probe).0);
    let resident_bytes: u64 = data.residents.iter().map(|r| r.len() as u64).sum();
    let block = a.block.map_or_else(
        || {
            default_block(
                &a,
                budget.saturating_sub(resident_bytes),
                sources.len(),
                in_place,
            )
        },
        |b| b as usize,
    );
    let opts = stream_options(&a, budget, block);
    let blocks = (len as u64).div_ceil(block.max(1) as u64);
    let mut go = |sequential: bool, data: &mut Data| {
        let o = StreamOptions {
            sequential,
            ..opts.clone()
        };
        let bar = blocks_bar(
            blocks,
            a.json,
            if sequential { "sequential" } else { "stream" },
        );
        let (first, rest) = data.regions.split_first_mut().expect("at least one input");
        let (in_place_region, inputs): (Option<&mut HostRegion>, Vec<&HostRegion>) = if in_place {
            (Some(first), rest.iter().collect())
        } else {
            (None, std::iter::once(&*first).chain(rest.iter()).collect())
        };
        let job = Job {
            kernel: &mut kernel,
            kernel_name: &a.entry,
            in_place: in_place_region,
            inputs,
            output: data.output.as_mut(),
            residents: data.residents.iter().collect(),
            args: a.args.clone(),
        };
        let (r, peak) = probe.peak_during(|| {
            stream(&ctx, job, &o, &|done, bytes| {
                bar.set_position(done);
                bar.set_message(Bytes(bytes).to_string());
            })
        });
        bar.finish_and_clear();
        r.map(|rep| (rep, peak)).map_err(stream_failure)
    };
    let sequential = if a.compare_sequential {
        let (rep, _) = go(true, &mut data)?;
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
    let (rep, peak) = go(false, &mut data)?;
    let result = if in_place {
        &data.regions[0]
    } else {
        data.output.as_ref().expect("out of place")
    };
    if let Some(p) = &a.output {
        write_output(p, result, result_len)?;
    }
    if let Some(p) = &a.trace {
        write_trace(p, &rep, sequential.as_ref())?;
    }
    let report = RunReport {
        device: format!("{}: {}", device.index, device.name),
        kernel: format!("{} in {}", a.entry, a.kernel.display()),
        in_place,
        strategy: data.regions[0].strategy().to_string(),
        strategy_reason: data.regions[0].reason().to_string(),
        pinned_bytes: data.pinned_bytes(),
        pin_s: data.pin_s,
        read_s: data.read_s,
        vram: VramDuring {
            source: probe.source().describe(),
            before: vram_before,
            peak,
            peak_over_before: vram_before.zip(peak).map(|(b, p)| p as i64 - b as i64),
            budget,
        },
        stream: rep,
        sequential,
        output: a.output.as_ref().map(|p| p.display().to_string()),
    };
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(Failure::run)?
        );
    } else {
        print_text(&report);
    }
    Ok(())
}

/// Writes the result whole or not at all; a stop request while writing removes the
/// temporary file.
fn write_output(path: &std::path::Path, result: &HostRegion, len: usize) -> Result<(), Failure> {
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
