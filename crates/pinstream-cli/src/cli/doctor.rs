//! `pinstream doctor`.

use super::dispatch::{open_asked, with_api, ApiName, Front};
use super::signals::{self, Mode};
use super::{size_arg, table, Failure};
use indicatif::{ProgressBar, ProgressStyle};
use pinstream::backend::api::Device;
use pinstream::backend::opencl::DeviceInfo;
use pinstream::backend::os::page_size;
use pinstream::engine::validate;
use pinstream::host::{HostApi, Strategy};
use pinstream::units::Bytes;
use pinstream_cli::advice::{validate_error, Flags};
use pinstream_lab::kernels::Builtins;
use pinstream_lab::tools::doctor::{
    self, DoctorConfig, DoctorDevice, DoctorError, DoctorReport, Selection,
};
use pinstream_lab::tools::mapped::{self, MappedReport};
use pinstream_lab::tools::passes::Bandwidth;

/// Arguments of `doctor`.
#[derive(clap::Args)]
pub struct Args {
    /// The API to measure through: OpenCL's strategies, or CUDA's `cuMemHostAlloc` and
    /// `cuMemHostRegister`.
    #[arg(long, default_value = "opencl", value_parser = ApiName::parser(ApiName::ONE))]
    api: ApiName,
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
    /// Strategy to measure: all (every one the device offers), auto, or one name (with
    /// `--api cuda`: cuda-host-alloc or cuda-register).
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

/// Bytes of mapped memory the doctor streams kernels over (less where --size is less).
const MAPPED_BYTES: usize = 256 << 20;

fn default_size() -> u64 {
    let ten = 10u64 << 30;
    match pinstream::backend::os::host_room().map(|r| r.bytes) {
        Some(avail) if avail / 3 < ten => (avail / 3) >> 20 << 20,
        _ => ten,
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
    let refused = |e| Failure::usage(validate_error(&e, Flags::DOCTOR));
    validate::block_size(size as usize, args.block as usize, 1).map_err(refused)?;
    if let Some(chunk) = args.max_chunk {
        validate::chunk_size(size as usize, chunk as usize, page_size()).map_err(refused)?;
    }
    Ok(())
}

pub fn run(args: Args) -> Result<(), Failure> {
    let save = args.save.clone();
    let named = super::files::given(&[("--save", &save)]);
    let outputs = super::files::prepare(&named, &[], None)?;
    let size = args.size.unwrap_or_else(default_size);
    check_sizes(&args, size)?;
    let (json_only, api) = (args.json, args.api);
    let report = with_api(api, Measure { args, size })?;
    let json = serde_json::to_string_pretty(&report).map_err(Failure::run)?;
    let saves = super::files::contents(&named, &outputs, &json, &[]);
    super::files::report_and_save(json_only, &json, || render(&report), &saves)
}

/// The doctor's measurement, through whichever API `--api` names.
struct Measure {
    args: Args,
    size: u64,
}

impl Front for Measure {
    type Output = DoctorReport;

    fn run<A: HostApi + Builtins>(self, instance: A::Instance) -> Result<DoctorReport, Failure> {
        let (device, details) = open_one::<A>(&instance, self.args.api, self.args.device)?;
        signals::phase("while measuring", Mode::Exit)?;
        let selection = Selection::from(self.args.strategy.as_str());
        let pinnings = doctor::chosen::<A>(&device, &selection).map_err(failure)?;
        let cfg = DoctorConfig {
            size: self.size as usize,
            block: self.args.block as usize,
            max_chunk: self.args.max_chunk.map(|c| c as usize),
            seed: self.args.seed,
            repeats: self.args.repeat as usize,
        };
        let bar = progress_bar(self.args.json, doctor::total_units(&cfg, pinnings.len()));
        let progress = |done: u64, msg: &str| {
            bar.set_position(done);
            bar.set_message(msg.to_string());
        };
        let report = doctor::run::<A>(&device, details, &pinnings, &cfg, &progress);
        bar.finish_and_clear();
        let mut report = report.map_err(failure)?;
        let bytes = cfg.size.min(MAPPED_BYTES).min(device.max_alloc() as usize);
        report.mapped = Some(mapped::measure::<A>(&device, bytes, cfg.repeats));
        Ok(report)
    }
}

/// The device `--device` names (default: the first GPU, else the first device), opened, and
/// how the report names it.
fn open_one<A: HostApi>(
    instance: &A::Instance,
    api: ApiName,
    device: Option<usize>,
) -> Result<(A::Device, DoctorDevice), Failure> {
    let mut opened = open_asked::<A>(instance, api, device, None, Default::default())?;
    Ok((opened.devices.remove(0), opened.described.remove(0)))
}

/// A refusal of the doctor's as the CLI's failure: a device call's is the run's, the others
/// are the arguments'.
fn failure(e: DoctorError) -> Failure {
    match e {
        DoctorError::Backend(_) => Failure::run(e),
        _ => Failure::usage(e),
    }
}

/// The progress bar over `units` (hidden with `--json`).
fn progress_bar(json: bool, units: u64) -> ProgressBar {
    let bar = match json {
        true => ProgressBar::hidden(),
        false => ProgressBar::new(units),
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} blocks  {msg}",
        )
        .expect("static template"),
    );
    bar
}

fn pin_cell(s: &pinstream_lab::tools::doctor::StrategyReport) -> String {
    match (s.pin_s, s.resident_s) {
        (Some(t), Some(r)) if s.resident_then_pinned() => {
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

/// One strategy's row of the report's table.
fn strategy_row(s: &doctor::StrategyReport) -> Vec<String> {
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
}

/// What auto would choose, the recommendation, and the device's mapped memory and layer
/// notes, as the report ends.
fn choice_lines(r: &DoctorReport) -> String {
    let mut out = format!(
        "auto would choose: {} ({})\n",
        r.auto_strategy.as_deref().unwrap_or("nothing"),
        r.auto_reason
    );
    out += &match &r.recommendation {
        Some(s) => format!(
            "recommendation: --strategy {s}: {}\n",
            r.recommendation_reason
        ),
        None => format!("recommendation: none: {}\n", r.recommendation_reason),
    };
    if let Some(device) = r.device.driver_as::<DeviceInfo>() {
        let (m, note) = pinstream::host::ZeroCopy::report(device);
        out += super::devices::zero_copy_line(m, &note).trim_start();
        out += &r.mapped.as_ref().map_or_else(String::new, mapped_line);
        let classic = r
            .strategies
            .iter()
            .find(|s| s.strategy == Strategy::AllocHostPtr.name());
        out += &layer_note(r, device, classic.and_then(|s| s.vram_cost));
    } else {
        out += &r.mapped.as_ref().map_or_else(String::new, mapped_line);
    }
    out
}

/// The human-readable report, as BENCHMARKS.md quotes it.
pub fn render(r: &DoctorReport) -> String {
    let mut out = format!(
        "device {}\nregion {} per strategy, blocks of {}, data seed {}\nVRAM counter: {}{}\n\n",
        r.device.label(),
        Bytes(r.size as u64),
        Bytes(r.block as u64),
        r.seed,
        r.vram_source.describe(),
        r.vram_note
            .as_ref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default()
    );
    let rows: Vec<Vec<String>> = r.strategies.iter().map(strategy_row).collect();
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
    out += &format!(
        "\n\n(* = separate chunks, not one contiguous range;{}\n GB/s = 10^9 bytes/s by the wall clock, median of {} passes; event-profiled figures, min and max in --json)\n",
        split_note(r),
        r.repeats
    );
    out + &choice_lines(r)
}

/// The mapped-memory measurement's line: kernel read and write GB/s and the VRAM cost, or
/// why there is none.
fn mapped_line(m: &MappedReport) -> String {
    if let Some(why) = &m.unavailable {
        return format!("mapped memory: not measured: {why}\n");
    }
    let vram = m
        .vram_cost
        .map_or("unknown (no VRAM counter)".into(), signed_gib);
    format!(
        "mapped memory ({}, {}): a kernel reads it across the bus at {:.1} GB/s, writes at {:.1} GB/s (median of passes, checked against the CPU); VRAM cost {vram}\n",
        m.mechanism.as_deref().unwrap_or("-"),
        Bytes(m.bytes),
        m.read_gbps.unwrap_or(0.0),
        m.write_gbps.unwrap_or(0.0),
    )
}

/// What the pin column's `(a + b)` means, for the ways to pin that show it.
fn split_note(r: &DoctorReport) -> String {
    let split = r.strategies.iter().filter(|s| s.resident_then_pinned());
    let notes: Vec<String> = split
        .map(|s| format!(" {0}'s pin = make resident + {0};", s.strategy))
        .collect();
    notes.concat()
}

/// The OpenCL layer's advice (unix only: the layer is an `LD_PRELOAD`/ICD-loader layer).
#[cfg(unix)]
fn layer_note(r: &DoctorReport, device: &DeviceInfo, classic_vram: Option<i64>) -> String {
    let has_nv = device.has_extension(pinstream_layer::decide::NV_EXTENSION);
    pinstream_layer::probe::doctor_note(classic_vram, r.size as u64, has_nv)
        .map_or_else(String::new, |note| format!("{note}\n"))
}

/// Windows: driver pinning needs no `VirtualLock` (as on Linux it needs no
/// `RLIMIT_MEMLOCK`), and WDDM bounds what drivers pin.
#[cfg(windows)]
fn layer_note(_r: &DoctorReport, _device: &DeviceInfo, _classic_vram: Option<i64>) -> String {
    "windows: driver pinning (register, nv-host, alloc-host-ptr) needs no VirtualLock and no working-set quota; `mlock` uses VirtualLock after raising the minimum working set. WDDM limits what a driver pins, reported as about half of RAM (ComfyUI caps pinned memory at 40% of RAM on Windows): if a large pin fails, pin less (--size) or stream through a ring.\n".into()
}
