//! `pinstream bench devices`: the bandwidth points on several devices at once, beside the
//! first device alone (`tools::bench_devices`), and their tables.

use super::device_sets::{parse_devices, DeviceSet};
use super::dispatch::{self, ApiName, Front};
use super::flags::{one_strategy, one_strategy_of, ReportFlags, VkFlags};
use super::signals::{self, Mode};
use super::{table, Failure};
use pinstream::backend::opencl::DeviceInfo;
use pinstream::host::HostApi;
use pinstream::units::Bytes;
use pinstream_cli::tools::bench_devices::{
    api_devices, bench_devices, index_of, own_api_devices, rate, ApiDevices, DevicesReport,
    OnSameGpus,
};
use pinstream_cli::tools::doctor::DoctorDevice;

/// Arguments of `bench devices`.
#[derive(clap::Args)]
pub struct Args {
    /// The devices: indices (`0,1`) or `all` (every device of the default device's platform
    /// and type; with --api vulkan, in Vulkan's own list). Each point runs on every device
    /// together, beside the first device alone, with a column per device and the total.
    #[arg(long, default_value = "all", value_parser = parse_devices)]
    devices: DeviceSet,
    /// auto (the first of auto's order, the default) or one strategy.
    #[arg(long, value_parser = one_strategy)]
    strategy: Option<String>,
    /// both (the default): OpenCL, with CUDA's cuMemHostAlloc memory on the same GPUs beside
    /// it and the ratio per device; opencl: OpenCL alone; vulkan: Vulkan alone, on its own
    /// devices.
    #[arg(long, default_value = "both", value_parser = ApiName::parser(&[ApiName::Both, ApiName::Opencl, ApiName::Vulkan]))]
    api: ApiName,
    #[command(flatten)]
    vk: VkFlags,
    /// Block sizes: a power-of-two range `4KiB..256MiB` or a list `64KiB,1MiB`.
    #[arg(long, default_value = "4KiB..256MiB")]
    sizes: String,
    /// Repeats per point; figures are their median.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    repeat: u64,
    #[command(flatten)]
    report: ReportFlags,
}

/// `bench devices`: one strategy (the one asked for, or auto's first), every size, on every
/// device together.
pub fn run(a: Args) -> Result<(), Failure> {
    let outputs = a.report.prepare()?;
    let sizes = super::flags::sizes(Some(&a.sizes), "")?;
    if a.api == ApiName::Vulkan {
        return own_api(&a, &sizes, &outputs);
    }
    dispatch::refuse_vulkan_flags(a.api, &a.vk.options())?;
    let (devices, ctxs) =
        super::device_sets::open_contexts(None, Some(&a.devices), Default::default())?;
    signals::phase("while measuring", Mode::Exit)?;
    let strategy = one_strategy_of(a.strategy.as_deref(), &devices[0])?;
    let bar = super::report::spinner(a.report.json);
    let progress = |s: &str| bar.set_message(format!("measuring {s} on {} devices", ctxs.len()));
    let repeats = a.repeat as usize;
    let on_cuda = |devices: &[DeviceInfo]| {
        let front = SameGpuDevices {
            api: ApiName::Cuda,
            opencl: devices,
            sizes: &sizes,
            repeats,
            progress: &progress,
        };
        dispatch::with_api(front.api, front).map_err(|f| f.message)
    };
    let cuda = a.api.cuda().then_some(&on_cuda as OnSameGpus);
    let report =
        bench_devices(&ctxs, strategy, &sizes, repeats, cuda, &progress).map_err(Failure::from)?;
    bar.finish_and_clear();
    a.report.show(&outputs, &report, render)
}

/// `bench devices --api vulkan`: Vulkan's own devices, every pinning it offers.
fn own_api(
    a: &Args,
    sizes: &[usize],
    outputs: &[pinstream::engine::io::Output],
) -> Result<(), Failure> {
    signals::phase("while measuring", Mode::Exit)?;
    let bar = super::report::spinner(a.report.json);
    let progress = |s: &str| bar.set_message(format!("measuring {s}"));
    let front = OwnDevices {
        api: a.api,
        set: &a.devices,
        sizes,
        repeats: a.repeat as usize,
        progress: &progress,
    };
    let report = dispatch::with_api_as(a.api, &a.vk.options(), front)?;
    bar.finish_and_clear();
    a.report.show(outputs, &report, render)
}

/// `bench devices` of one API's own devices (`--devices` indices in its own list).
struct OwnDevices<'a> {
    api: ApiName,
    set: &'a DeviceSet,
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

/// The `bench devices` points of another API, on the GPUs that are the OpenCL devices
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

/// `bench devices` as text: per API a table of size × direction with the first device
/// alone, each device together, the total and the scaling; then OpenCL/CUDA per device.
fn render(r: &DevicesReport) -> String {
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
            out += &ratios(cl, cu, &dev_cols);
        }
    }
    out
}

/// The OpenCL / CUDA table: per size and direction, the ratio on each device and in total.
fn ratios(cl: &ApiDevices, cu: &ApiDevices, dev_cols: &[String]) -> String {
    let mut head = vec!["size".to_string(), "dir".into()];
    head.extend(dev_cols.iter().cloned());
    head.push("total".into());
    let rows = (cl.points.iter().zip(&cu.points))
        .flat_map(|(a, b)| {
            DIRS.iter().map(move |&dir| {
                let mut row = vec![Bytes(a.size as u64).to_string(), dir.into()];
                row.extend(
                    (a.per_device.iter().zip(&b.per_device))
                        .map(|(x, y)| format!("{:.3}", rate(&x.ratio(y), dir))),
                );
                row.push(format!("{:.3}", rate(&a.total.ratio(&b.total), dir)));
                row
            })
        })
        .collect::<Vec<_>>();
    let head: Vec<&str> = head.iter().map(String::as_str).collect();
    "\nOpenCL / CUDA\n".to_string() + &table::render(&head, &rows)
}

/// The directions' names in the tables.
const DIRS: [&str; 3] = ["H2D", "D2H", "both"];
