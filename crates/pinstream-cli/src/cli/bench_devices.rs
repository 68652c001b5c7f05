//! `pinstream bench devices`: the bandwidth points on several devices at once, beside the
//! first device alone (`tools::bench_devices`), and their tables.

use super::device_sets::{parse_devices, DeviceSet};
use super::dispatch::{self, ApiName, Front, Where};
use super::flags::{one_strategy, pinnings, ReportFlags, VkFlags};
use super::signals::{self, Mode};
use super::{table, Failure};
use pinstream::host::{HostApi, StrategyChoice};
use pinstream::units::Bytes;
use pinstream_lab::tools::bench_devices::{api_devices, rate, ApiDevices, DevicesReport};
use pinstream_lab::tools::doctor::DoctorDevice;

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

/// `bench devices`: one pinning (OpenCL: the strategy asked for, or auto's first), every
/// size, on every device together: one front, run through the API asked for, and again
/// through CUDA on the same GPUs with `--api both`.
pub fn run(a: Args) -> Result<(), Failure> {
    let outputs = a.report.prepare()?;
    let sizes = super::flags::sizes(Some(&a.sizes), "")?;
    let strategy = match &a.strategy {
        Some(s) => s.parse::<StrategyChoice>().map_err(Failure::usage)?,
        None => StrategyChoice::Auto,
    };
    let bar = super::report::spinner(a.report.json);
    let progress = |s: &str| bar.set_message(format!("measuring {s}"));
    let front = |api, at, strategy| DevicesFront {
        api,
        at,
        strategy,
        sizes: &sizes,
        repeats: a.repeat as usize,
        progress: &progress,
    };
    let at = Where::Asked {
        one: None,
        set: Some(&a.devices),
    };
    // OpenCL's --strategy (auto's first by default); another API's first pinning.
    let api = a.api.first();
    let strategy = (api == ApiName::Opencl).then_some(strategy);
    let (devices, first) = dispatch::with_api_as(api, &a.vk.options(), front(api, at, strategy))?;
    let mut report = DevicesReport {
        sizes: sizes.clone(),
        repeats: (a.repeat as usize).max(1),
        apis: vec![first],
        cuda_unavailable: None,
        devices,
    };
    if let Some(beside) = a.api.beside() {
        let gpus: Vec<_> = report.devices.iter().map(|d| d.adapter.clone()).collect();
        let cuda = front(beside, Where::SameGpus(&gpus), None);
        match dispatch::with_api(beside, cuda) {
            Ok((_, cuda)) => report.apis.push(cuda),
            Err(why) => report.cuda_unavailable = Some(why.message),
        }
    }
    bar.finish_and_clear();
    a.report.show(&outputs, &report, render)
}

/// The `bench devices` points of one API on the devices `at` names, with one pinning: the
/// one `strategy` names (OpenCL's strategies), or the first the API offers (`None`).
struct DevicesFront<'a> {
    api: ApiName,
    at: Where<'a>,
    strategy: Option<StrategyChoice>,
    sizes: &'a [usize],
    repeats: usize,
    progress: &'a dyn Fn(&str),
}

impl Front for DevicesFront<'_> {
    type Output = (Vec<DoctorDevice>, ApiDevices);

    fn check(&self) -> Result<(), Failure> {
        self.at.check(self.api)
    }

    fn run<A: HostApi>(self, instance: A::Instance) -> Result<Self::Output, Failure> {
        let opened = dispatch::open_at::<A>(&instance, self.api, self.at, Default::default())?;
        signals::phase("while measuring", Mode::Exit)?;
        let mut pinning = None;
        for device in &opened.devices {
            pinning = match self.strategy {
                Some(s) => pinnings::<A>(device, Some(s))?.first().copied(),
                None => A::pinnings(device).first().copied(),
            };
        }
        let pinning = pinning.ok_or_else(|| match self.strategy {
            Some(_) => Failure::run("no host-memory strategy is offered by this device"),
            None => Failure::run(format!("{} offers no pinned host memory", A::NAME)),
        })?;
        let (sizes, repeats) = (self.sizes, self.repeats.max(1));
        let points = api_devices::<A>(&opened.devices, pinning, sizes, repeats, self.progress)
            .map_err(Failure::from)?;
        Ok((opened.described, points))
    }
}

/// `bench devices` as text: per API a table of size × direction with the first device
/// alone, each device together, the total and the scaling; then OpenCL/CUDA per device.
fn render(r: &DevicesReport) -> String {
    let names: Vec<String> = r
        .devices
        .iter()
        .map(|d| format!("{}: {}", d.index(), d.name()))
        .collect();
    let mut out = format!(
        "{} devices ({}); median of {} repeats, GB/s by the wall clock; `alone`: device {} by itself in the same run; total: every device's bytes over the slowest one's time\n",
        r.devices.len(),
        names.join(", "),
        r.repeats,
        r.devices[0].index()
    );
    if let Some(why) = &r.cuda_unavailable {
        out += &format!("CUDA: not measured: {why}\n");
    }
    let dev_cols: Vec<String> = r
        .devices
        .iter()
        .map(|d| format!("dev {}", d.index()))
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
