//! `pinstream bench`: bandwidth by block size, per strategy and direction, with a plot.

use super::dispatch::{self, ApiName, Front};
use super::flags::{DeviceFlags, VkFlags};
use super::signals::{self, Mode};
use super::{files, pick_device, table, Failure};
use pinstream::backend::opencl::Context;
use pinstream::backend::opencl::DeviceInfo;
use pinstream::host::HostApi;
use pinstream::host::{auto_order, StrategyChoice};
use pinstream::units::Bytes;
use pinstream_cli::tools::bench::{
    api_bench, bench, curves, parse_sizes, BenchReport, StrategyBench,
};
use pinstream_cli::tools::bench_devices::{
    api_devices, bench_devices, index_of, own_api_devices, rate, ApiDevices, DevicesReport,
    OnSameGpus,
};
use pinstream_cli::tools::doctor::DoctorDevice;
use std::path::PathBuf;

/// Arguments of `bench`.
#[derive(clap::Args)]
#[command(mut_arg("devices", |a| a.help("Several devices at once: indices (`0,1`) or `all` (every device of the default device's platform and type). Each point runs on every device together, beside the first device alone, with a column per device and the total (one strategy: --strategy, or the first of auto's order; CUDA's cuMemHostAlloc memory with --api both)")))]
pub struct Args {
    #[command(flatten)]
    dev: DeviceFlags,
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
    /// 4KiB..256MiB; with --latency 4KiB,64KiB,1MiB,8MiB).
    #[arg(long)]
    sizes: Option<String>,
    /// Repeats per point; figures are their median.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    repeat: u64,
    /// Draw bandwidth against block size (SVG), one line per strategy and direction.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Also write the JSON report here.
    #[arg(long)]
    save: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Instead of the bandwidth curves: one small write at a time, by every way of issuing
    /// and waiting for it, the driver called directly beside pinstream's path and CUDA's
    /// cuMemcpyHtoDAsync, on the same memory in one run (one strategy: --strategy, or the
    /// first of auto's order; the OpenCL rows are always there, --api opencl leaves CUDA's
    /// out).
    #[arg(long)]
    latency: bool,
    /// With --latency: timed samples per row (back-to-back rows: a tenth, at least 3).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    samples: u64,
    /// Instead of the bandwidth curves: --pieces pieces of --piece-size bytes at random host
    /// and device offsets, moved both ways by pinstream's gather, OpenCL's per-piece loop,
    /// one transfer of the same bytes (the peak) and CUDA's per-piece loop and
    /// cuMemcpyBatchAsync; --repeat runs per row.
    #[arg(long)]
    gather: bool,
    /// With --gather: how many pieces.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=16_777_216))]
    pieces: u64,
    /// With --gather: bytes per piece (e.g. 4KiB, 256, 64KiB).
    #[arg(long, default_value = "4KiB")]
    piece_size: String,
    /// With --gather: piece bytes per batch of pinstream's gather (two stages of it are
    /// pinned; larger moves are cut into pipelined batches).
    #[arg(long, default_value = "16MiB")]
    staging: String,
    /// With --gather: the seed of the offsets and the data.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Instead of the bandwidth curves: this regular file's raw direct-read speed (O_DIRECT,
    /// large blocks, no device), pinstream's storage -> device chain over it (streamed from
    /// storage through the staging rings and uploaded) and the common way (buffered reads
    /// into pageable memory, uploaded from there: in file order, and a page at a time with
    /// readahead off), in one run.
    #[arg(long, value_name = "FILE")]
    storage: Option<std::path::PathBuf>,
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
    let named = files::given(&[("--save", &a.save), ("--plot", &a.plot)]);
    let outputs = files::prepare(&named, &[], None)?;
    let default_sizes = match (a.latency, a.region.is_some()) {
        (true, _) => "4KiB,64KiB,1MiB,8MiB",
        (_, true) => "64MiB,256MiB",
        _ => "4KiB..256MiB",
    };
    let sizes = parse_sizes(a.sizes.as_deref().unwrap_or(default_sizes))
        .map_err(|e| Failure::usage(format!("invalid --sizes {e}")))?;
    if let Some(region) = a.region {
        let ask = super::bench_walk::Ask {
            api: a.api,
            options: a.vk.options(),
            device: a.dev.device,
            region,
            max_chunk: a.max_chunk,
            sizes: &sizes,
            repeats: a.repeat as usize,
        };
        let report = super::bench_walk::run(ask, a.json)?;
        let json = serde_json::to_string_pretty(&report).map_err(Failure::run)?;
        let saves = files::contents(&named, &outputs, &json, &[]);
        let text = || super::bench_walk::render(&report);
        return files::report_and_save(a.json, &json, text, &saves);
    }
    if a.api == ApiName::Vulkan {
        return own_api(&a, ApiName::Vulkan, &sizes, &named, &outputs);
    }
    dispatch::refuse_vulkan_flags(a.api, &a.vk.options())?;
    if a.dev.devices.is_some() {
        return several(&a, &sizes, &named, &outputs);
    }
    if let Some(file) = &a.storage {
        super::storage_bench::check(file)?;
    }
    let device = pick_device(a.dev.device)?;
    signals::phase("while measuring", Mode::Exit)?;
    let ctx = Context::new(&device).map_err(Failure::run)?;
    let strategies = match a.strategy.as_str() {
        _ if !a.api.opencl() => Some(vec![]),
        "all" => None,
        s => match s.parse::<StrategyChoice>().map_err(Failure::usage)? {
            StrategyChoice::Forced(s) => Some(vec![s]),
            StrategyChoice::Auto => Some(auto_order(&device).0.into_iter().take(1).collect()),
        },
    };
    if a.latency {
        return latency(&a, &ctx, &sizes, strategies, &named, &outputs);
    }
    if a.gather {
        return gather(&a, &ctx, &named, &outputs);
    }
    if let Some(file) = &a.storage {
        let bar = super::report::spinner(a.json);
        bar.set_message(format!("measuring {}", file.display()));
        let report = super::storage_bench::storage_bench(&ctx, file)?;
        bar.finish_and_clear();
        let json = serde_json::to_string_pretty(&report).map_err(Failure::run)?;
        let saves = files::contents(&named, &outputs, &json, &[]);
        let text = || super::storage_bench::render(&report);
        return files::report_and_save(a.json, &json, text, &saves);
    }
    let bar = super::report::spinner(a.json);
    let progress = |s: &str| bar.set_message(format!("measuring {s}"));
    let repeats = a.repeat as usize;
    let mut report = bench(&ctx, &sizes, repeats, strategies, &progress).map_err(Failure::from)?;
    if a.api.cuda() {
        let cuda = SameGpuCurves {
            api: ApiName::Cuda,
            opencl: &device,
            sizes: &sizes,
            repeats,
            progress: &progress,
        };
        match dispatch::with_api(cuda.api, cuda) {
            Ok(curves) => report.strategies.extend(curves),
            Err(why) => report.cuda_unavailable = Some(why.message),
        }
    }
    bar.finish_and_clear();
    if let (true, Some(why)) = (!a.api.opencl(), &report.cuda_unavailable) {
        return Err(Failure::run(format!(
            "--api cuda: CUDA cannot measure this device: {why}"
        )));
    }
    let json = serde_json::to_string_pretty(&report).map_err(Failure::run)?;
    let svg = match &a.plot {
        Some(_) => plot(&report).map_err(Failure::run)?,
        None => String::new(),
    };
    let saves = files::contents(&named, &outputs, &json, &[("--plot", svg.as_bytes())]);
    files::report_and_save(a.json, &json, || render(&report), &saves)
}

/// `bench --api vulkan`: the curves of every pinning of `api` alone, on its device
/// `--device` names (its own list's index). (`applies` refuses the OpenCL-only modes.)
fn own_api(
    a: &Args,
    api: ApiName,
    sizes: &[usize],
    named: &[files::Named],
    outputs: &[pinstream::engine::io::Output],
) -> Result<(), Failure> {
    signals::phase("while measuring", Mode::Exit)?;
    if a.latency || a.gather {
        return own_small(a, api, sizes, named, outputs);
    }
    let bar = super::report::spinner(a.json);
    let progress = |s: &str| bar.set_message(format!("measuring {s}"));
    if let Some(set) = &a.dev.devices {
        let front = OwnDevices {
            api,
            set,
            sizes,
            repeats: a.repeat as usize,
            progress: &progress,
        };
        let report = dispatch::with_api_as(api, &a.vk.options(), front)?;
        bar.finish_and_clear();
        let json = serde_json::to_string_pretty(&report).map_err(Failure::run)?;
        let saves = files::contents(named, outputs, &json, &[]);
        return files::report_and_save(a.json, &json, || render_devices(&report), &saves);
    }
    let front = OwnCurves {
        api,
        device: a.dev.device,
        sizes,
        repeats: a.repeat as usize,
        progress: &progress,
    };
    let report = dispatch::with_api_as(api, &a.vk.options(), front)?;
    bar.finish_and_clear();
    let json = serde_json::to_string_pretty(&report).map_err(Failure::run)?;
    let svg = match &a.plot {
        Some(_) => plot(&report).map_err(Failure::run)?,
        None => String::new(),
    };
    let saves = files::contents(named, outputs, &json, &[("--plot", svg.as_bytes())]);
    files::report_and_save(a.json, &json, || render(&report), &saves)
}

/// The bench of one API's own device.
struct OwnCurves<'a> {
    api: ApiName,
    device: Option<usize>,
    sizes: &'a [usize],
    repeats: usize,
    progress: &'a dyn Fn(&str),
}

impl Front for OwnCurves<'_> {
    type Output = BenchReport;

    fn run<A: HostApi>(self, instance: A::Instance) -> Result<BenchReport, Failure> {
        let mut opened =
            dispatch::open_asked::<A>(&instance, self.api, self.device, None, Default::default())?;
        let described = DoctorDevice::Adapter(opened.adapters.remove(0));
        api_bench::<A>(
            &opened.devices[0],
            described,
            self.sizes,
            self.repeats,
            self.progress,
        )
        .map_err(Failure::from)
    }
}

/// `bench --devices` of one API's own devices (`--devices` indices in its own list).
struct OwnDevices<'a> {
    api: ApiName,
    set: &'a super::device_sets::DeviceSet,
    sizes: &'a [usize],
    repeats: usize,
    progress: &'a dyn Fn(&str),
}

impl Front for OwnDevices<'_> {
    type Output = DevicesReport;

    fn run<A: HostApi>(self, instance: A::Instance) -> Result<DevicesReport, Failure> {
        let wait = Default::default();
        let opened = dispatch::open_asked::<A>(&instance, self.api, None, Some(self.set), wait)?;
        let described = opened
            .adapters
            .into_iter()
            .map(DoctorDevice::Adapter)
            .collect();
        let (sizes, repeats) = (self.sizes, self.repeats);
        own_api_devices::<A>(&opened.devices, described, sizes, repeats, self.progress)
            .map_err(Failure::from)
    }
}

/// The bench curves of every pinning of another API, on the GPU that is `opencl`.
struct SameGpuCurves<'a> {
    api: ApiName,
    opencl: &'a DeviceInfo,
    sizes: &'a [usize],
    repeats: usize,
    progress: &'a dyn Fn(&str),
}

impl Front for SameGpuCurves<'_> {
    type Output = Vec<StrategyBench>;

    fn check(&self) -> Result<(), Failure> {
        dispatch::same_gpu(self.opencl, self.api).map(drop)
    }

    fn run<A: HostApi>(self, instance: A::Instance) -> Result<Self::Output, Failure> {
        let choice = dispatch::same_gpu(self.opencl, self.api)?;
        let opened = dispatch::open::<A>(&instance, &[choice], Default::default())?;
        let gpu = &opened.devices[0];
        curves::<A>(
            gpu,
            &A::pinnings(gpu),
            self.sizes,
            self.repeats,
            self.progress,
        )
        .map_err(|e| Failure::run(e.to_string()))
    }
}

/// `bench --devices`: one strategy (the one asked for, or auto's first), every size, on
/// every device together.
fn several(
    a: &Args,
    sizes: &[usize],
    named: &[files::Named],
    outputs: &[pinstream::engine::io::Output],
) -> Result<(), Failure> {
    let (devices, ctxs) =
        super::device_sets::open_contexts(None, a.dev.devices.as_ref(), Default::default())?;
    signals::phase("while measuring", Mode::Exit)?;
    let strategy = match a.strategy.as_str() {
        "all" | "auto" => auto_order(&devices[0]).0.first().copied(),
        s => match s.parse::<StrategyChoice>().map_err(Failure::usage)? {
            StrategyChoice::Forced(s) => Some(s),
            StrategyChoice::Auto => auto_order(&devices[0]).0.first().copied(),
        },
    }
    .ok_or_else(|| Failure::run("no host-memory strategy is offered by this device"))?;
    let bar = super::report::spinner(a.json);
    let progress = |s: &str| bar.set_message(format!("measuring {s} on {} devices", ctxs.len()));
    let repeats = a.repeat as usize;
    let on_cuda = |devices: &[DeviceInfo]| {
        let front = SameGpuDevices {
            api: ApiName::Cuda,
            opencl: devices,
            sizes,
            repeats,
            progress: &progress,
        };
        dispatch::with_api(front.api, front).map_err(|f| f.message)
    };
    let cuda = a.api.cuda().then_some(&on_cuda as OnSameGpus);
    let report =
        bench_devices(&ctxs, strategy, sizes, repeats, cuda, &progress).map_err(Failure::from)?;
    bar.finish_and_clear();
    let json = serde_json::to_string_pretty(&report).map_err(Failure::run)?;
    let saves = files::contents(named, outputs, &json, &[]);
    files::report_and_save(a.json, &json, || render_devices(&report), &saves)
}

/// The `bench --devices` points of another API, on the GPUs that are the OpenCL devices
/// `opencl`, with the first pinning it offers.
struct SameGpuDevices<'a> {
    api: ApiName,
    opencl: &'a [DeviceInfo],
    sizes: &'a [usize],
    repeats: usize,
    progress: &'a dyn Fn(&str),
}

impl Front for SameGpuDevices<'_> {
    type Output = ApiDevices;

    fn check(&self) -> Result<(), Failure> {
        dispatch::same_gpus(self.opencl, self.api).map(drop)
    }

    fn run<A: HostApi>(self, instance: A::Instance) -> Result<Self::Output, Failure> {
        let choices = dispatch::same_gpus(self.opencl, self.api)?;
        let opened = dispatch::open::<A>(&instance, &choices, Default::default())?;
        let pinning = *A::pinnings(&opened.devices[0])
            .first()
            .ok_or_else(|| Failure::run(format!("{} offers no pinned host memory", A::NAME)))?;
        api_devices::<A>(
            &opened.devices,
            pinning,
            self.sizes,
            self.repeats,
            self.progress,
        )
        .map_err(|e| Failure::run(e.to_string()))
    }
}

/// `bench --devices` as text: per API a table of size × direction with the first device
/// alone, each device together, the total and the scaling; then OpenCL/CUDA per device.
fn render_devices(r: &DevicesReport) -> String {
    let names: Vec<String> = r
        .devices
        .iter()
        .map(|d| format!("{}: {}", index_of(d), d.name()))
        .collect();
    let mut out = format!(
        "{} devices ({}); median of {} repeats, GB/s by the wall clock; `alone`: device {} by itself in the same run; total: every device's bytes over the slowest one's time\n",
        r.devices.len(),
        names.join(", "),
        r.repeats,
        index_of(&r.devices[0])
    );
    if let Some(why) = &r.cuda_unavailable {
        out += &format!("CUDA: not measured: {why}\n");
    }
    let dev_cols: Vec<String> = r
        .devices
        .iter()
        .map(|d| format!("dev {}", index_of(d)))
        .collect();
    for api in &r.apis {
        out += &format!("\n{} ({})\n", api.api, api.memory);
        if let Some(e) = &api.error {
            out += &format!("  not measured: {e}\n");
            continue;
        }
        let mut head = vec!["size".to_string(), "dir".into(), "alone".into()];
        head.extend(dev_cols.iter().cloned());
        head.extend(["total".into(), "scaling".into()]);
        let rows = api
            .points
            .iter()
            .flat_map(|p| {
                DIRS.iter().map(move |&dir| {
                    let mut row = vec![Bytes(p.size as u64).to_string(), dir.into()];
                    row.push(format!("{:.1}", rate(&p.alone, dir)));
                    row.extend(p.per_device.iter().map(|d| format!("{:.1}", rate(d, dir))));
                    row.push(format!("{:.1}", rate(&p.total, dir)));
                    row.push(format!("{:.2}x", rate(&p.scaling, dir)));
                    row
                })
            })
            .collect::<Vec<_>>();
        let head: Vec<&str> = head.iter().map(String::as_str).collect();
        out += &table::render(&head, &rows);
    }
    if let [cl, cu] = r.apis.as_slice() {
        if cl.error.is_none() && cu.error.is_none() {
            out += "\nOpenCL / CUDA\n";
            let mut head = vec!["size".to_string(), "dir".into()];
            head.extend(dev_cols.iter().cloned());
            head.push("total".into());
            let rows = cl
                .points
                .iter()
                .zip(&cu.points)
                .flat_map(|(a, b)| {
                    DIRS.iter().map(move |&dir| {
                        let mut row = vec![Bytes(a.size as u64).to_string(), dir.into()];
                        row.extend(
                            a.per_device
                                .iter()
                                .zip(&b.per_device)
                                .map(|(x, y)| format!("{:.3}", rate(&x.ratio(y), dir))),
                        );
                        row.push(format!("{:.3}", rate(&a.total.ratio(&b.total), dir)));
                        row
                    })
                })
                .collect::<Vec<_>>();
            let head: Vec<&str> = head.iter().map(String::as_str).collect();
            out += &table::render(&head, &rows);
        }
    }
    out
}

/// The directions' names in the tables.
const DIRS: [&str; 3] = ["H2D", "D2H", "both"];

/// `bench --latency`: one strategy (the one asked for, or auto's first), every size.
fn latency(
    a: &Args,
    ctx: &Context,
    sizes: &[usize],
    strategies: Option<Vec<pinstream::host::Strategy>>,
    named: &[files::Named],
    outputs: &[pinstream::engine::io::Output],
) -> Result<(), Failure> {
    let strategy = match strategies {
        Some(s) if a.api.opencl() => s.first().copied(),
        _ => auto_order(ctx.device()).0.first().copied(),
    }
    .ok_or_else(|| Failure::run("no host-memory strategy is offered by this device"))?;
    let bar = super::report::spinner(a.json);
    bar.set_message("measuring single transfers");
    let report = pinstream_cli::tools::latency::latency(
        ctx,
        strategy,
        sizes,
        a.samples as usize,
        a.api
            .cuda()
            .then_some(&super::native::on_cuda as pinstream_cli::tools::OnTwin),
    )
    .map_err(Failure::run)?;
    bar.finish_and_clear();
    let json = serde_json::to_string_pretty(&report).map_err(Failure::run)?;
    let saves = files::contents(named, outputs, &json, &[]);
    files::report_and_save(a.json, &json, || super::latency::render(&report), &saves)
}

/// `bench --gather`: the pieces both ways, every path, one table.
fn gather(
    a: &Args,
    ctx: &Context,
    named: &[files::Named],
    outputs: &[pinstream::engine::io::Output],
) -> Result<(), Failure> {
    use pinstream::gather::GatherError;
    use pinstream_cli::advice::{self, Flags};
    use pinstream_cli::tools::gather::{gather_bench, GatherBenchError};
    let (shape, staging) = gather_shape(a)?;
    let bar = super::report::spinner(a.json);
    bar.set_message("moving scattered pieces");
    let cuda = a
        .api
        .cuda()
        .then_some(&super::native::on_cuda as pinstream_cli::tools::OnTwin);
    let report = gather_bench(ctx, &shape, staging, cuda).map_err(|e| match e {
        GatherBenchError::Usage(_) => Failure::usage(e),
        GatherBenchError::Gather(g @ GatherError::Capacity { .. }) => {
            Failure::usage(advice::gather(&g, Flags::BENCH))
        }
        e => Failure::run(e),
    })?;
    bar.finish_and_clear();
    let json = serde_json::to_string_pretty(&report).map_err(Failure::run)?;
    let saves = files::contents(named, outputs, &json, &[]);
    files::report_and_save(a.json, &json, || super::gather::render(&report), &saves)
}

/// `--gather`'s shape and staging, from its flags.
fn gather_shape(
    a: &Args,
) -> Result<
    (
        pinstream_cli::tools::gather::Shape,
        pinstream::gather::GatherOptions,
    ),
    Failure,
> {
    let one = |flag: &str, s: &str| match parse_sizes(s).as_deref() {
        Ok([one]) => Ok(*one),
        _ => Err(Failure::usage(format!(
            "invalid {flag} {s}: give one size such as 4KiB or 256"
        ))),
    };
    let piece_size = one("--piece-size", &a.piece_size)?;
    let staging = pinstream::gather::GatherOptions::for_capacity(one("--staging", &a.staging)?);
    let shape = pinstream_cli::tools::gather::Shape {
        pieces: a.pieces as usize,
        piece_size,
        seed: a.seed,
        repeat: a.repeat as usize,
    };
    Ok((shape, staging))
}

/// `bench --latency` or `--gather` through `api` (not OpenCL): its report, saved and shown.
fn own_small(
    a: &Args,
    api: ApiName,
    sizes: &[usize],
    named: &[files::Named],
    outputs: &[pinstream::engine::io::Output],
) -> Result<(), Failure> {
    use super::bench_own::{Ask, Report};
    let ask = match a.latency {
        true => Ask::Latency(sizes, a.samples as usize),
        false => Ask::Gather(gather_shape(a)?.0),
    };
    let bar = super::report::spinner(a.json);
    bar.set_message("measuring");
    let report = super::bench_own::run(api, &a.vk.options(), a.dev.device, ask)?;
    bar.finish_and_clear();
    let (json, text) = match &report {
        Report::Latency(r) => (
            serde_json::to_string_pretty(r),
            super::latency::render_api(r),
        ),
        Report::Gather(r) => (
            serde_json::to_string_pretty(r),
            super::gather::render_api(r),
        ),
    };
    let json = json.map_err(Failure::run)?;
    let saves = files::contents(named, outputs, &json, &[]);
    files::report_and_save(a.json, &json, || text.clone(), &saves)
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
            let top = curves
                .iter()
                .flat_map(|s| {
                    s.points
                        .iter()
                        .map(|p| [&p.h2d, &p.d2h, &p.both][get].wall_gbps)
                })
                .fold(1.0, f64::max)
                * 1.1;
            let mut chart = ChartBuilder::on(panel)
                .caption(dir, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(55)
                .build_cartesian_2d(lo..hi, 0.0..top)
                .map_err(|e| err(&e))?;
            chart
                .configure_mesh()
                .x_desc("block size")
                .y_desc("GB/s (median, wall clock)")
                .x_label_formatter(&|x| Bytes(2f64.powf(*x).round() as u64).to_string())
                .draw()
                .map_err(|e| err(&e))?;
            for (k, s) in curves.iter().enumerate() {
                let c = Palette99::pick(k).to_rgba();
                let style = c.stroke_width(2);
                let pts: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .map(|p| {
                        (
                            (p.size as f64).log2(),
                            [&p.h2d, &p.d2h, &p.both][get].wall_gbps,
                        )
                    })
                    .collect();
                let label = format!("{} ({})", s.strategy, s.api);
                let drawn = if s.api == "cuda" {
                    chart.draw_series(DashedLineSeries::new(pts, 8, 5, style))
                } else {
                    chart.draw_series(LineSeries::new(pts, style))
                };
                drawn
                    .map_err(|e| err(&e))?
                    .label(label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            }
            chart
                .configure_series_labels()
                .border_style(BLACK)
                .background_style(WHITE.mix(0.8))
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(|e| err(&e))?;
        }
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}
