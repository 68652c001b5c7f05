//! `pinstream bench`: bandwidth by block size, per strategy and direction, with a plot; its
//! other measurements are subcommands (`bench latency`, `bench gather`, `bench storage`,
//! `bench devices`), each with its own flags.

use super::dispatch::{self, ApiName, Front, Where};
use super::flags::{pinnings, ReportFlags, VkFlags};
use super::signals::{self, Mode};
use super::{files, table, Failure};
use pinstream::backend::api::Adapter;
use pinstream::host::{HostApi, StrategyChoice};
use pinstream::units::Bytes;
use pinstream_lab::tools::bench::{api_bench, BenchReport, StrategyBench};
use pinstream_lab::tools::doctor::DoctorDevice;
use std::path::PathBuf;

/// Arguments of `bench`: the bandwidth curves (no subcommand), or one of the other
/// measurements.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    mode: Option<BenchMode>,
    #[command(flatten)]
    curves: Curves,
}

/// `bench`'s measurements besides the bandwidth curves.
#[derive(clap::Subcommand)]
enum BenchMode {
    /// One small write at a time, by every way of issuing and waiting for it: the driver called
    /// directly beside pinstream's path and CUDA's cuMemcpyHtoDAsync, on the same memory in
    /// one run (one strategy: --strategy, or the first of auto's order).
    Latency(super::latency::Args),
    /// --pieces pieces of --piece-size bytes at random host and device offsets, moved both ways
    /// by pinstream's gather, OpenCL's per-piece loop, one transfer of the same bytes (the
    /// peak) and CUDA's per-piece loop and cuMemcpyBatchAsync; --repeat runs per row.
    Gather(super::gather::Args),
    /// A regular file's raw direct-read speed (O_DIRECT, large blocks, no device),
    /// pinstream's storage -> device chain over it and the common way (buffered reads into
    /// pageable memory, uploaded from there), in one run.
    Storage(super::storage_bench::Args),
    /// The bandwidth points on several devices at once, beside the first device alone, with a
    /// column per device and the total (one strategy: --strategy, or the first of auto's
    /// order; CUDA's cuMemHostAlloc memory with --api both).
    Devices(super::bench_devices::Args),
}

/// The flags of the bandwidth curves (`bench` without a subcommand).
#[derive(clap::Args)]
struct Curves {
    /// Device index from `pinstream devices` (with --api vulkan, in Vulkan's own list).
    #[arg(long)]
    device: Option<usize>,
    /// all (every strategy the device offers), auto, or one strategy.
    #[arg(long, default_value = "all")]
    strategy: String,
    /// opencl, cuda, or both: the same points through CUDA on the same GPU
    /// (`cuMemHostAlloc` and `cuMemHostRegister` memory), where CUDA is there; or vulkan:
    /// the points through Vulkan alone, on the Vulkan device --device names.
    #[arg(long, default_value = "both", value_parser = ApiName::parser(&[ApiName::Opencl, ApiName::Cuda, ApiName::Both, ApiName::Vulkan]))]
    api: ApiName,
    #[command(flatten)]
    vk: VkFlags,
    /// Block sizes: a power-of-two range `4KiB..256MiB` or a list `64KiB,1MiB` (default
    /// 4KiB..256MiB; with --region 64MiB,256MiB).
    #[arg(long)]
    sizes: Option<String>,
    /// Repeats per point; figures are their median.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    repeat: u64,
    /// Draw bandwidth against block size (SVG), one line per strategy and direction.
    #[arg(long)]
    plot: Option<PathBuf>,
    #[command(flatten)]
    report: ReportFlags,
    /// Instead of the bandwidth curves: the in-place demo's copies taken apart over this much
    /// memory pinned afresh per block of --sizes (default 64MiB,256MiB): the first walk over
    /// pages the device never copied, one block repeated, a walk over the region, a block
    /// across two chunks of the memory, and a walk both ways with the demo's per-block waits;
    /// GB/s by the wall clock and while busy (one API: --api vulkan, cuda or opencl).
    #[arg(long, value_parser = super::size_arg)]
    region: Option<u64>,
    /// With --region: pin it in chunks of at most this (Vulkan's imports; default the
    /// driver's limit).
    #[arg(long, value_parser = super::size_arg)]
    max_chunk: Option<u64>,
}

pub fn run(a: Args) -> Result<(), Failure> {
    match a.mode {
        None => run_curves(a.curves),
        Some(BenchMode::Latency(m)) => super::latency::run(m),
        Some(BenchMode::Gather(m)) => super::gather::run(m),
        Some(BenchMode::Storage(m)) => super::storage_bench::run(m),
        Some(BenchMode::Devices(m)) => super::bench_devices::run(m),
    }
}

/// The paths `--save` and `--plot` name.
fn named(a: &Curves) -> Vec<files::Named<'_>> {
    files::given(&[("--save", &a.report.save), ("--plot", &a.plot)])
}

/// `bench`: the curves (or, with --region, the walk): one front, run through the API asked
/// for, and again through CUDA on the same GPU with `--api both`.
fn run_curves(a: Curves) -> Result<(), Failure> {
    let outputs = files::prepare(&named(&a), &[], None)?;
    let default_sizes = match a.region {
        Some(_) => "64MiB,256MiB",
        None => "4KiB..256MiB",
    };
    let sizes = super::flags::sizes(a.sizes.as_deref(), default_sizes)?;
    if let Some(region) = a.region {
        return walk(&a, region, &sizes, &outputs);
    }
    let strategy = match a.strategy.as_str() {
        "all" => None,
        s => Some(s.parse::<StrategyChoice>().map_err(Failure::usage)?),
    };
    let bar = super::report::spinner(a.report.json);
    let progress = |s: &str| bar.set_message(format!("measuring {s}"));
    let asked = Where::Asked {
        one: a.device,
        set: None,
    };
    let front = CurvesFront {
        api: a.api,
        at: asked,
        strategy,
        sizes: &sizes,
        repeats: a.repeat as usize,
        progress: &progress,
    };
    let mut report = if a.api == ApiName::Cuda {
        cuda_alone(&a, &front)?
    } else {
        let first = front.on(a.api.first(), asked, strategy);
        dispatch::with_api_as(a.api.first(), &a.vk.options(), first)?
    };
    if let Some(api) = a.api.beside() {
        let dev = report.device.adapter.clone();
        let cuda = front.on(api, Where::SameGpus(std::slice::from_ref(&dev)), None);
        match dispatch::with_api(api, cuda) {
            Ok(cuda) => report.strategies.extend(cuda.strategies),
            Err(why) => report.cuda_unavailable = Some(why.message),
        }
    }
    bar.finish_and_clear();
    show_curves(&a, &outputs, &report)
}

/// `bench --api cuda`: CUDA alone, on the GPU that is the OpenCL device --device names,
/// reported as that device (`a.api` is CUDA); why CUDA cannot measure it, where it cannot.
fn cuda_alone(a: &Curves, front: &CurvesFront<'_>) -> Result<BenchReport, Failure> {
    dispatch::refuse_vulkan_flags(a.api, &a.vk.options())?;
    let device = super::device_sets::chosen(a.device, None)?.remove(0);
    let adapter = Adapter::info(&device);
    let cuda = front.on(a.api, Where::SameGpus(std::slice::from_ref(&adapter)), None);
    let why = |f: Failure| format!("--api cuda: CUDA cannot measure this device: {}", f.message);
    let mut report = dispatch::with_api(a.api, cuda).map_err(|f| Failure::run(why(f)))?;
    report.device = DoctorDevice::from(device);
    Ok(report)
}

/// The curves' report printed and saved, with the plot where --plot asks for it.
fn show_curves(
    a: &Curves,
    outputs: &[pinstream::engine::io::Output],
    report: &BenchReport,
) -> Result<(), Failure> {
    let json = serde_json::to_string_pretty(report).map_err(Failure::run)?;
    let svg = match &a.plot {
        Some(_) => plot(report).map_err(Failure::run)?,
        None => String::new(),
    };
    let named = named(a);
    let saves = files::contents(&named, outputs, &json, &[("--plot", svg.as_bytes())]);
    files::report_and_save(a.report.json, &json, || render(report), &saves)
}

/// `bench --region`: the walk through one API.
fn walk(
    a: &Curves,
    region: u64,
    sizes: &[usize],
    outputs: &[pinstream::engine::io::Output],
) -> Result<(), Failure> {
    let ask = super::bench_walk::Ask {
        api: a.api,
        options: a.vk.options(),
        device: a.device,
        region,
        max_chunk: a.max_chunk,
        sizes,
        repeats: a.repeat as usize,
    };
    let report = super::bench_walk::run(ask, a.report.json)?;
    a.report.show(outputs, &report, super::bench_walk::render)
}

/// The bench curves of one API: every pinning it offers, or the one `--strategy` names
/// (OpenCL's strategies), at every size, on the device `at` names.
struct CurvesFront<'a> {
    api: ApiName,
    at: Where<'a>,
    strategy: Option<StrategyChoice>,
    sizes: &'a [usize],
    repeats: usize,
    progress: &'a dyn Fn(&str),
}

impl<'a> CurvesFront<'a> {
    /// The same curves through `api`, on the device `at` names, of `strategy`.
    fn on<'b>(
        &self,
        api: ApiName,
        at: Where<'b>,
        strategy: Option<StrategyChoice>,
    ) -> CurvesFront<'b>
    where
        'a: 'b,
    {
        CurvesFront {
            api,
            at,
            strategy,
            sizes: self.sizes,
            repeats: self.repeats,
            progress: self.progress,
        }
    }
}

impl Front for CurvesFront<'_> {
    type Output = BenchReport;

    fn check(&self) -> Result<(), Failure> {
        self.at.check(self.api)
    }

    fn run<A: HostApi>(self, instance: A::Instance) -> Result<BenchReport, Failure> {
        let wait = Default::default();
        let mut opened = dispatch::open_at::<A>(&instance, self.api, self.at, wait)?;
        signals::phase("while measuring", Mode::Exit)?;
        let gpu = &opened.devices[0];
        let pinnings = pinnings::<A>(gpu, self.strategy)?;
        let described = opened.described.remove(0);
        api_bench::<A>(
            gpu,
            described,
            &pinnings,
            self.sizes,
            self.repeats,
            self.progress,
        )
        .map_err(Failure::from)
    }
}

fn render(r: &BenchReport) -> String {
    let mut out = format!(
        "device {}; median of {} repeats, GB/s by the wall clock (event-profiled, min and max in --json)\n",
        r.device.short_label(), r.repeats
    );
    if let Some(why) = &r.cuda_unavailable {
        out += &format!("CUDA: not measured: {why}\n");
    }
    if let Some(how) = &r.copies {
        out += &format!("copies: {how}\n");
    }
    for s in &r.strategies {
        out += &format!("\n{} ({})\n", s.strategy, s.api);
        if let Some(e) = &s.error {
            out += &format!("  failed: {e}\n");
            continue;
        }
        let rows: Vec<Vec<String>> = s
            .points
            .iter()
            .map(|p| {
                vec![
                    Bytes(p.size as u64).to_string(),
                    format!("{:.2}", p.h2d.wall_gbps),
                    format!("{:.2}", p.d2h.wall_gbps),
                    format!("{:.2}", p.both.wall_gbps),
                    format!("{:.1}", p.h2d_latency.events_us),
                    format!("{:.1}", p.h2d_latency.wall_us),
                ]
            })
            .collect();
        out += &table::render(
            &[
                "block",
                "H2D GB/s",
                "D2H GB/s",
                "both GB/s",
                "H2D µs (events)",
                "H2D µs (wall)",
            ],
            &rows,
        );
        out += "\n";
        for (name, k) in [("H2D", &s.h2d), ("D2H", &s.d2h), ("both", &s.both)] {
            if let Some(k) = k {
                out += &format!(
                    "  {name}: peak {:.1} GB/s; 95% of it from {} blocks\n",
                    k.peak_gbps,
                    Bytes(k.size_at_95 as u64)
                );
            }
        }
    }
    out
}

/// Bandwidth against block size: one panel per direction (H2D, D2H, both ways), log2 x
/// axis, one line per strategy, the same colour for a strategy in every panel; CUDA's lines
/// dashed, so the two APIs read apart at a glance.
fn plot(r: &BenchReport) -> Result<String, String> {
    use plotters::prelude::*;
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 1500)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let root = root
            .titled(
                &format!("{}: bandwidth by block size", r.device.name()),
                ("sans-serif", 24),
            )
            .map_err(|e| err(&e))?;
        let lo = (*r.sizes.iter().min().unwrap_or(&1) as f64).log2();
        let hi = (*r.sizes.iter().max().unwrap_or(&2) as f64)
            .log2()
            .max(lo + 1.0);
        let curves: Vec<_> = r.strategies.iter().filter(|s| s.error.is_none()).collect();
        let panels = root.split_evenly((3, 1));
        for (panel, (dir, get)) in panels.iter().zip([
            ("host to device", 0),
            ("device to host", 1),
            ("both ways at once", 2),
        ]) {
            draw_panel(panel, dir, get, &curves, lo..hi)?;
        }
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

/// One direction's panel of [`plot`]: `get` picks the direction of each point (0: H2D,
/// 1: D2H, 2: both), over `x` (log2 of the block sizes).
fn draw_panel(
    panel: &plotters::drawing::DrawingArea<
        plotters::prelude::SVGBackend<'_>,
        plotters::coord::Shift,
    >,
    dir: &str,
    get: usize,
    curves: &[&StrategyBench],
    x: std::ops::Range<f64>,
) -> Result<(), String> {
    use plotters::prelude::*;
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let rate = |p: &pinstream_lab::tools::bench::Point| [&p.h2d, &p.d2h, &p.both][get].wall_gbps;
    let top = curves
        .iter()
        .flat_map(|s| s.points.iter().map(rate))
        .fold(1.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(panel)
        .caption(dir, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(x, 0.0..top)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("block size")
        .y_desc("GB/s (median, wall clock)")
        .x_label_formatter(&|x| Bytes(2f64.powf(*x).round() as u64).to_string())
        .draw()
        .map_err(|e| err(&e))?;
    for (k, s) in curves.iter().enumerate() {
        let style = Palette99::pick(k).to_rgba().stroke_width(2);
        let pts: Vec<(f64, f64)> = (s.points.iter())
            .map(|p| ((p.size as f64).log2(), rate(p)))
            .collect();
        let drawn = if s.api == "cuda" {
            chart.draw_series(DashedLineSeries::new(pts, 8, 5, style))
        } else {
            chart.draw_series(LineSeries::new(pts, style))
        };
        drawn
            .map_err(|e| err(&e))?
            .label(format!("{} ({})", s.strategy, s.api))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| err(&e))
}
