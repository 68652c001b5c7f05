//! `pinstream doctor`.

use super::signals::{self, Mode};
use super::{pick_device, size_arg, table, Failure};
use indicatif::{ProgressBar, ProgressStyle};
use pinstream::backend::opencl::Context;
use pinstream::backend::os::page_size;
use pinstream::engine::validate;
use pinstream::host::{Strategy, StrategyChoice};
use pinstream::units::Bytes;
use pinstream_cli::tools::doctor::{self, Bandwidth, DoctorConfig, DoctorReport};

/// Arguments of `doctor`.
#[derive(clap::Args)]
pub struct Args {
    /// Device index from `pinstream devices` (default: the first GPU, else the first device).
    #[arg(long)]
    device: Option<usize>,
    /// Bytes to pin per strategy (e.g. 10GiB). Default: 10GiB, or a third of the available
    /// host memory where that is less.
    #[arg(long, value_parser = size_arg)]
    size: Option<u64>,
    /// Transfer block size, the size of each device buffer.
    #[arg(long, value_parser = size_arg, default_value = "256MiB")]
    block: u64,
    /// Strategy to measure: all (every one the device offers), auto, or one name.
    #[arg(long, default_value = "all")]
    strategy: String,
    /// Largest chunk a region is made of (default and cap: the device's max allocation).
    #[arg(long, value_parser = size_arg)]
    max_chunk: Option<u64>,
    /// Timed passes per direction; the table shows their median.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1000))]
    repeat: u64,
    /// Seed of the random test data (default: fresh each run).
    #[arg(long)]
    seed: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report to FILE (written whole or not at all).
    #[arg(long, value_name = "FILE")]
    save: Option<std::path::PathBuf>,
}

fn default_size() -> u64 {
    let ten = 10u64 << 30;
    match pinstream::backend::os::host_room().map(|r| r.bytes) {
        Some(avail) if avail / 3 < ten => (avail / 3) >> 20 << 20,
        _ => ten,
    }
}

fn strategies(arg: &str, ctx: &Context) -> Result<Option<Vec<Strategy>>, Failure> {
    if arg.eq_ignore_ascii_case("all") {
        return Ok(None);
    }
    match arg.parse::<StrategyChoice>().map_err(Failure::usage)? {
        StrategyChoice::Forced(s) => Ok(Some(vec![s])),
        StrategyChoice::Auto => {
            let (order, _) = pinstream::host::auto_order(ctx.device());
            Ok(Some(order.into_iter().take(1).collect()))
        }
    }
}

/// Refuses sizes that cannot work before anything is measured.
fn check_sizes(args: &Args, size: u64) -> Result<(), Failure> {
    if size == 0 {
        return Err(Failure::usage(
            "--size must be greater than 0 bytes: pass e.g. --size 1GiB",
        ));
    }
    pinstream::host::check_size(size as usize).map_err(Failure::usage)?;
    let refused = |e| Failure::usage(pinstream_cli::advice::validate_error(&e));
    validate::block_size(size as usize, args.block as usize, 1).map_err(refused)?;
    if let Some(chunk) = args.max_chunk {
        validate::chunk_size(size as usize, chunk as usize, page_size()).map_err(refused)?;
    }
    Ok(())
}

pub fn run(args: Args) -> Result<(), Failure> {
    let named = super::files::given(&[("--save", &args.save)]);
    let outputs = super::files::prepare(&named, &[], None)?;
    let size = args.size.unwrap_or_else(default_size);
    check_sizes(&args, size)?;
    let device = pick_device(args.device)?;
    signals::phase("while measuring", Mode::Exit)?;
    let ctx = Context::new(&device).map_err(Failure::run)?;
    let cfg = DoctorConfig {
        size: size as usize,
        block: args.block as usize,
        strategies: strategies(&args.strategy, &ctx)?,
        max_chunk: args.max_chunk.map(|c| c as usize),
        seed: args.seed,
        repeats: args.repeat as usize,
    };
    let n = cfg
        .strategies
        .as_ref()
        .map_or_else(|| Strategy::offered(&device).len(), Vec::len);
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(doctor::total_units(&cfg, n))
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} blocks  {msg}",
        )
        .expect("static template"),
    );
    let progress = |done: u64, msg: &str| {
        bar.set_position(done);
        bar.set_message(msg.to_string());
    };
    let report = doctor::run(&ctx, &cfg, &progress).map_err(|e| match e {
        doctor::DoctorError::Cl(_) => Failure::run(e),
        _ => Failure::usage(e),
    })?;
    bar.finish_and_clear();
    let json = serde_json::to_string_pretty(&report).map_err(Failure::run)?;
    let saves = super::files::contents(&named, &outputs, &json, &[]);
    super::files::report_and_save(args.json, &json, || render(&report), &saves)
}

fn pin_cell(s: &pinstream_cli::tools::doctor::StrategyReport) -> String {
    match (s.pin_s, s.resident_s) {
        (Some(t), Some(r)) if s.strategy == Strategy::Register => {
            format!("{t:.2} s ({r:.2} + {:.2})", t - r)
        }
        (Some(t), _) => format!("{t:.2} s"),
        _ => "-".into(),
    }
}

fn gbps(b: &Option<Bandwidth>) -> String {
    b.as_ref()
        .map_or("-".into(), |b| format!("{:.1}", b.wall_gbps))
}

fn signed_gib(bytes: i64) -> String {
    format!(
        "{}{:.2} GiB",
        if bytes < 0 { "-" } else { "+" },
        bytes.unsigned_abs() as f64 / (1u64 << 30) as f64
    )
}

/// The human-readable report, as BENCHMARKS.md quotes it.
pub fn render(r: &DoctorReport) -> String {
    let d = &r.device;
    let mut out = format!(
        "device {}: {} ({}, {})\nregion {} per strategy, blocks of {}, data seed {}\nVRAM counter: {}{}\n\n",
        d.index,
        d.name,
        d.platform_name,
        d.driver_version,
        Bytes(r.size as u64),
        Bytes(r.block as u64),
        r.seed,
        r.vram_source.describe(),
        r.vram_note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()
    );
    let rows: Vec<Vec<String>> = r
        .strategies
        .iter()
        .map(|s| {
            vec![
                s.strategy.to_string(),
                pin_cell(s),
                if s.chunks == 0 {
                    "-".into()
                } else {
                    format!("{}{}", s.chunks, if s.contiguous { "" } else { "*" })
                },
                s.vram_cost.map_or("unknown".into(), signed_gib),
                gbps(&s.h2d),
                gbps(&s.d2h),
                gbps(&s.both),
                if s.verified_bytes == 0 {
                    "-".into()
                } else if s.mismatched_bytes == 0 {
                    format!("{} ok", Bytes(s.verified_bytes))
                } else {
                    format!("{} BAD", s.mismatched_bytes)
                },
                match &s.error {
                    Some(_) => "failed: see below".into(),
                    None => s.verdict.clone(),
                },
            ]
        })
        .collect();
    out += &table::render(
        &[
            "strategy",
            "pin",
            "chunks",
            "VRAM cost",
            "H2D GB/s",
            "D2H GB/s",
            "both GB/s",
            "round trip",
            "verdict",
        ],
        &rows,
    );
    if r.strategies.iter().any(|s| s.error.is_some()) {
        out += "\n";
    }
    for s in r.strategies.iter().filter(|s| s.error.is_some()) {
        out += &format!("\n{}: {}", s.strategy, s.verdict);
    }
    out += &format!("\n\n(* = separate chunks, not one contiguous range; register's pin = make resident + register;\n GB/s = 10^9 bytes/s by the wall clock, median of {} passes; event-profiled figures, min and max in --json)\n", r.repeats);
    out += &format!(
        "auto would choose: {} ({})\n",
        r.auto_strategy.map_or("nothing".into(), |s| s.to_string()),
        r.auto_reason
    );
    out += &match r.recommendation {
        Some(s) => format!(
            "recommendation: --strategy {s}: {}\n",
            r.recommendation_reason
        ),
        None => format!("recommendation: none: {}\n", r.recommendation_reason),
    };
    let classic = r
        .strategies
        .iter()
        .find(|s| s.strategy == Strategy::AllocHostPtr);
    out += &layer_note(r, classic.and_then(|s| s.vram_cost));
    out
}

/// The OpenCL layer's advice (unix only: the layer is an `LD_PRELOAD`/ICD-loader layer).
#[cfg(unix)]
fn layer_note(r: &DoctorReport, classic_vram: Option<i64>) -> String {
    let has_nv = r
        .device
        .has_extension(pinstream_layer::decide::NV_EXTENSION);
    pinstream_layer::probe::doctor_note(classic_vram, r.size as u64, has_nv)
        .map_or_else(String::new, |note| format!("{note}\n"))
}

/// Windows: driver pinning needs no `VirtualLock` (as on Linux it needs no
/// `RLIMIT_MEMLOCK`), and WDDM bounds what drivers pin.
#[cfg(windows)]
fn layer_note(_r: &DoctorReport, _classic_vram: Option<i64>) -> String {
    "windows: driver pinning (register, nv-host, alloc-host-ptr) needs no VirtualLock and no working-set quota; `mlock` uses VirtualLock after raising the minimum working set. WDDM limits what a driver pins, reported as about half of RAM (ComfyUI caps pinned memory at 40% of RAM on Windows): if a large pin fails, pin less (--size) or stream through a ring.\n".into()
}
