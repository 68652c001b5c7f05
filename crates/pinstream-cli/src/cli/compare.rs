//! `pinstream compare`: the same workloads through OpenCL and through CUDA, side by side.

use super::dispatch::{self, ApiName, Front};
use super::flags::{DeviceFlags, VkFlags, WaitFlag};
use super::report::spinner;
use super::signals::{self, Mode};
use super::{files, size_arg, table, Failure};
use pinstream::backend::adapter::{AdapterInfo, DeviceChoice};
use pinstream::backend::api::{Adapter, WaitMode};
use pinstream::backend::native::NativeCopies;
use pinstream::backend::opencl::DeviceInfo;
use pinstream::engine::Residency;
use pinstream::host::HostApi;
use pinstream::host::StrategyChoice;
use pinstream::units::{median, Bytes};
use pinstream::vram::VramProbe;
use pinstream_cli::advice::{self, Flags};
use pinstream_lab::kernels::Builtins;
use pinstream_lab::tools::bench::parse_sizes;
use pinstream_lab::tools::compare::{
    compare, ApiHalf, CompareConfig, CompareError, CompareReport, Half, OtherFigures, Others,
    Ratio, MARK_BELOW,
};
use pinstream_lab::tools::demo::DemoConfig;
use pinstream_lab::tools::gather::Shape;
use std::path::PathBuf;

/// Arguments of `compare`.
#[derive(clap::Args)]
#[command(mut_arg("devices", |a| a.help("Stream over several devices at once: indices (`0,1`) or `all`; the CUDA half runs over the same GPUs, and the report gives the OpenCL/CUDA ratio per device and in total (the bench points run on the first device alone)")))]
pub struct Args {
    #[command(flatten)]
    dev: DeviceFlags,
    /// Data per streaming workload (default: as `demo` sizes itself). OpenCL and CUDA each hold
    /// a pinned copy at once, which must fit in 3/4 of the host memory available.
    #[arg(long, value_parser = size_arg)]
    size: Option<u64>,
    /// VRAM budget of the streaming workloads (default: as `demo`).
    #[arg(long, value_parser = size_arg)]
    vram_budget: Option<u64>,
    /// Block sizes of the bench points.
    #[arg(long, default_value = "256MiB")]
    sizes: String,
    /// Repeats of the streaming workloads: each runs the OpenCL and the CUDA stream back to
    /// back (the order alternating), after a throw-away pair.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    repeat: u64,
    /// Passes per bench point and API, each OpenCL pass paired with a CUDA pass of the same
    /// point (the order alternating).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=1000))]
    point_repeats: u64,
    /// Passes over each streaming workload's data per repeat (as `demo --passes`). Above 1,
    /// the workloads' GB/s are of the data the passes process (per pass: x up and down in
    /// place, W for y = W·x) over the run's device time, so OpenCL/CUDA is the ratio of their
    /// passes per second.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    passes: u64,
    /// With --passes above 1, the blocks kept in device memory across passes, for every API
    /// alike: `auto` (what the --vram-budget leaves after the ring's slots), `off`, or a SIZE.
    #[arg(long, value_name = "auto|off|SIZE", default_value = "auto")]
    residency: Residency,
    /// CUDA's pinned memory: host-alloc (`cuMemHostAlloc`, what `cudaMallocHost` does) or
    /// register (`cuMemHostRegister` over huge-page memory, what `cudaHostRegister` does).
    #[arg(long, default_value = "host-alloc", value_parser = ["host-alloc", "register"])]
    cuda_memory: String,
    /// The APIs beside OpenCL: cuda (CUDA on the same GPU), or vulkan (CUDA and Vulkan on the
    /// same GPU, with Vulkan's figures over CUDA's; where OpenCL reports no PCI bus id, as on
    /// a CPU device, Vulkan runs on its default device and the report says so).
    #[arg(long, default_value = "cuda", value_parser = ApiName::parser(&[ApiName::Cuda, ApiName::Vulkan]))]
    api: ApiName,
    /// The OpenCL strategy: auto (the recommended one) or a name from `pinstream devices`.
    #[arg(long, default_value = "auto")]
    strategy: String,
    /// A shape of the scattered pieces, PIECESxSIZE (`65536x256`, `4096x4KiB`); repeat it to
    /// measure several, each with its own ratios (default: 4096x4KiB).
    #[arg(long, value_name = "PIECESxSIZE", value_parser = gather_shape)]
    gather_shape: Vec<(usize, usize)>,
    /// Also write the JSON report here.
    #[arg(long)]
    save: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    wait: WaitFlag,
    /// With --api vulkan: how Vulkan's half copies and pins.
    #[command(flatten)]
    vk: VkFlags,
}

pub fn run(a: Args) -> Result<(), Failure> {
    dispatch::refuse_vulkan_flags(a.api, &a.vk.options())?;
    let wait = a.wait.wait.into();
    let named = files::given(&[("--save", &a.save)]);
    let outputs = files::prepare(&named, &[], None)?;
    let sizes =
        parse_sizes(&a.sizes).map_err(|e| Failure::usage(format!("invalid --sizes {e}")))?;
    let gather_shapes = checked_shapes(&a.gather_shape, a.point_repeats as usize)?;
    let (devices, ctxs) =
        super::device_sets::open_contexts(a.dev.device, a.dev.devices.as_ref(), wait)?;
    let device = &devices[0];
    signals::phase("while starting the comparison", Mode::Exit)?;
    let mut cfg = config(&a, &ctxs[0], device, sizes)?;
    cfg.gather_shapes = gather_shapes;
    cfg.demo.stop = Some(super::stop_flag());
    let bar = spinner(a.json);
    signals::phase(
        "after the current step (a stream finishes its blocks in flight)",
        Mode::Orderly,
    )?;
    let adapters: Vec<AdapterInfo> = devices.iter().map(Adapter::info).collect();
    let half = |api, pinning| SameGpuHalf {
        api,
        opencl: &adapters,
        pinning,
        wait,
    };
    let cuda_pinning = format!("cuda-{}", a.cuda_memory);
    let cuda = dispatch::with_api(ApiName::Cuda, half(ApiName::Cuda, Some(&cuda_pinning)));
    // `--api vulkan`: Vulkan's half too, pinning as it does by default, copying as `--vk-copy`
    // says.
    let options = a.vk.options();
    let vulkan = (a.api == ApiName::Vulkan)
        .then(|| dispatch::with_api_as(a.api, &options, half(a.api, None)));
    let others = Others {
        cuda: cuda.as_deref().map_err(|f| f.message.clone()),
        vulkan: vulkan
            .as_ref()
            .map(|v| v.as_deref().map_err(|f| f.message.clone())),
    };
    let progress = |m: &str| bar.set_message(m.to_string());
    let on_cuda = |m: &mut dyn FnMut(&dyn NativeCopies) -> Result<(), String>| {
        super::native::on_cuda(&adapters[0], m)
    };
    let report = compare(&ctxs, others, &cfg, &on_cuda, &progress).map_err(|e| match e {
        CompareError::Stopped(sig) => super::interrupted(sig, "during the comparison"),
        CompareError::Demo(e) => super::demo_failure(e),
        CompareError::Stream { api, source } => stream_failed(api, &source),
        e => Failure::run(e),
    })?;
    bar.finish_and_clear();
    let json = serde_json::to_string_pretty(&report).map_err(Failure::run)?;
    let saves = files::contents(&named, &outputs, &json, &[]);
    files::report_and_save(a.json, &json, || render(&report), &saves)
}

/// A streaming workload's failure in `compare`: the library's error (data, as the lab returns
/// it) phrased with the flag that fixes it.
pub(super) fn stream_failed(api: &str, e: &pinstream::engine::StreamError) -> Failure {
    let advice = advice::stream_error(e, Flags::COMPARE);
    Failure::run(format!("the {api} stream failed: {advice}"))
}

/// The comparison's settings from the flags, for OpenCL device `device` (`ctx`).
fn config(
    a: &Args,
    ctx: &pinstream::backend::opencl::Context,
    device: &DeviceInfo,
    sizes: Vec<usize>,
) -> Result<CompareConfig, Failure> {
    let probe = VramProbe::new(device);
    let mut demo = DemoConfig::for_machine(ctx, &probe);
    if let Some(s) = a.size {
        if s == 0 {
            return Err(Failure::usage(
                "--size must be greater than 0 bytes: pass e.g. --size 1GiB",
            ));
        }
        demo.data_bytes = s as usize;
        super::demo::check_size(&demo)?;
    }
    demo.vram_budget = a.vram_budget.unwrap_or(demo.vram_budget);
    demo.passes = a.passes as usize;
    demo.residency = a.residency;
    // Four slots of the block must fit the budget (in place, one buffer per slot).
    let fit = (demo.vram_budget / 4) as usize >> 20 << 20;
    demo.block_bytes = demo.block_bytes.min(fit.max(1 << 20));
    let strategy = match a
        .strategy
        .parse::<StrategyChoice>()
        .map_err(Failure::usage)?
    {
        StrategyChoice::Auto => None,
        StrategyChoice::Forced(s) => {
            s.offered_by(device).map_err(|why| {
                Failure::usage(format!(
                    "strategy `{s}` is not available on device {}: {why}; run `pinstream devices`",
                    device.index
                ))
            })?;
            Some(s)
        }
    };
    Ok(CompareConfig {
        sizes,
        demo,
        repeats: a.repeat as usize,
        point_repeats: a.point_repeats as usize,
        strategy,
        gather_shapes: Vec::new(),
    })
}

/// The `--gather-shape`s, each refused before any device is opened where it is given twice,
/// its span overflows or the host memory cannot hold the bench's copies of it.
fn checked_shapes(
    shapes: &[(usize, usize)],
    repeat: usize,
) -> Result<Vec<(usize, usize)>, Failure> {
    for (i, &(pieces, piece_size)) in shapes.iter().enumerate() {
        if shapes[..i].contains(&(pieces, piece_size)) {
            return Err(Failure::usage(format!(
                "--gather-shape {pieces}x{piece_size} is given twice: give each shape once"
            )));
        }
        let shape = Shape {
            pieces,
            piece_size,
            seed: 1,
            repeat,
        };
        pinstream_lab::tools::gather::check_shape(&shape)
            .map_err(|e| Failure::usage(format!("--gather-shape {pieces}x{piece_size}: {e}")))?;
    }
    Ok(shapes.to_vec())
}

/// `--gather-shape`'s PIECESxSIZE: at least one piece of at least one byte.
fn gather_shape(text: &str) -> Result<(usize, usize), String> {
    let fix = "write PIECESxSIZE, e.g. 65536x256 or 4096x4KiB";
    let (pieces, size) = text
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("`{text}` has no `x`: {fix}"))?;
    let pieces: usize = pieces
        .trim()
        .parse()
        .map_err(|_| format!("`{pieces}` is not a count of pieces: {fix}"))?;
    let size = size_arg(size.trim())? as usize;
    match pieces > 0 && size > 0 {
        true => Ok((pieces, size)),
        false => Err(format!(
            "`{text}`: pieces and size must be at least 1: {fix}"
        )),
    }
}

/// The comparison's half through another API, on the GPUs that are the OpenCL devices
/// `opencl`, pinning as `pinning` names (`None`: the first pinning the API offers).
struct SameGpuHalf<'a> {
    api: ApiName,
    opencl: &'a [AdapterInfo],
    pinning: Option<&'a str>,
    /// `--wait`, for the second API's devices too.
    wait: WaitMode,
}

impl SameGpuHalf<'_> {
    /// The devices of the API to open, and a note where they are not the same GPUs: Vulkan
    /// on one OpenCL device without a PCI bus id (a CPU device) runs on its default device.
    fn choices(&self) -> Result<(Vec<DeviceChoice>, Option<String>), Failure> {
        let same = dispatch::same_gpus(self.opencl, self.api);
        match (same, self.opencl) {
            (Err(why), [one]) if self.api == ApiName::Vulkan && one.pci_address.is_none() => {
                let note = format!(
                    "not the same device: {}; the default Vulkan device instead",
                    why.message
                );
                Ok((vec![DeviceChoice::Default], Some(note)))
            }
            (same, _) => Ok((same?, None)),
        }
    }
}

impl Front for SameGpuHalf<'_> {
    type Output = Box<dyn Half>;

    fn check(&self) -> Result<(), Failure> {
        self.choices().map(drop)
    }

    fn run<A: HostApi + Builtins>(self, instance: A::Instance) -> Result<Self::Output, Failure> {
        let (choices, note) = self.choices()?;
        let opened = dispatch::open::<A>(&instance, &choices, self.wait)?;
        let devices = opened.devices;
        let pinnings = A::pinnings(&devices[0]);
        let chosen = match self.pinning {
            Some(name) => pinnings.iter().find(|p| p.to_string() == name),
            None => pinnings.first(),
        };
        let Some(&pinning) = chosen else {
            let offered: Vec<String> = pinnings.iter().map(ToString::to_string).collect();
            // `--cuda-memory host-alloc` is the pinning named `cuda-host-alloc`.
            let asked = self.pinning.unwrap_or_default().trim_start_matches("cuda-");
            return Err(Failure::usage(format!(
                "--cuda-memory {asked}: {} pins as {} only",
                A::NAME,
                offered.join(", ")
            )));
        };
        let half = ApiHalf::<A>::new(devices, pinning).map_err(Failure::run)?;
        Ok(Box::new(half.noting(note)))
    }
}

/// The figures' rows: OpenCL's alone where there is nothing to compare them with, else each
/// figure with CUDA's beside it and their ratios.
fn rows(r: &CompareReport) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    if r.ratios.is_empty() {
        for m in &r.opencl.bench {
            for (what, v) in m.rates.each() {
                rows.push(vec![
                    format!("{what}, {} blocks", Bytes(m.size as u64)),
                    format!("{v:.1}"),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ]);
            }
        }
        rows.push(vec![
            "in-place stream, up + down".into(),
            format!("{:.1}", median(&r.opencl.in_place)),
            "-".into(),
            "-".into(),
            "-".into(),
        ]);
        rows.push(vec![
            "y = W·x, weights".into(),
            format!("{:.1}", median(&r.opencl.gemv)),
            "-".into(),
            "-".into(),
            "-".into(),
        ]);
        rows.extend(per_device_rows(&r.opencl));
    } else {
        rows.extend(r.ratios.iter().map(ratio_cells));
    }
    rows
}

/// With several passes, what the streams' GB/s are (none with one).
fn passes_line(r: &CompareReport) -> String {
    match r.config.passes {
        0 | 1 => String::new(),
        n => format!(
            "streams: {n} passes per repeat, residency {}; their GB/s are of the data the passes process over the run's device time, so OpenCL/CUDA is the ratio of passes per second\n",
            r.config.residency
        ),
    }
}

/// A ratio's row: the figure, each API's, their ratio (marked under [`MARK_BELOW`]) and the
/// paired one.
fn ratio_cells(x: &Ratio) -> Vec<String> {
    let mark = match x.marked {
        true => format!("  < {MARK_BELOW}"),
        false => String::new(),
    };
    vec![
        x.figure.clone(),
        format!("{:.1}", x.value),
        format!("{:.1}", x.other),
        format!("{:.3}{mark}", x.ratio),
        format!("{:.3}", x.paired),
    ]
}

/// The table of ratio `rows` ([`ratio_cells`]), of `api` over `against`.
fn ratio_table(api: &str, against: &str, rows: &[Vec<String>]) -> String {
    let ratio = format!("{api}/{against}");
    table::render(&["figure", api, against, &ratio, "paired"], rows)
}

fn render(r: &CompareReport) -> String {
    let (cuda_line, cuda_memory) = match &r.cuda {
        OtherFigures::Measured {
            api,
            device,
            figures,
        } => (format!("{api}: {device}"), figures.memory.clone()),
        OtherFigures::Unavailable { reason } => {
            (format!("CUDA: not measured: {reason}"), "-".into())
        }
    };
    let rows = rows(r);
    format!(
        "device {}: {}{}; OpenCL memory: {}; CUDA memory: {}; GB/s, medians: bench points over {} passes of each API (paired, the order alternating), streams over {} repeats (paired, back to back, the order alternating); paired = median of the per-pair ratios\n{}\n{cuda_line}\n",
        r.device.index,
        r.device.name,
        r.devices
            .iter()
            .skip(1)
            .map(|d| format!(" and device {}: {}", d.index, d.name))
            .collect::<String>(),
        r.opencl.memory,
        cuda_memory,
        r.point_repeats,
        r.repeats,
        ratio_table("OpenCL", "CUDA", &rows)
    ) + &passes_line(r)
        + &vulkan_lines(r)
        + &cpu_lines(r)
        + &std::iter::once(&r.gather)
            .chain(&r.more_gather)
            .map(super::gather::summary)
            .collect::<String>()
}

/// Vulkan's figures over CUDA's (or OpenCL's), where asked for.
fn vulkan_lines(r: &CompareReport) -> String {
    let device = match &r.vulkan {
        None => return String::new(),
        Some(OtherFigures::Unavailable { reason }) => {
            return format!("Vulkan: not measured: {reason}\n")
        }
        Some(OtherFigures::Measured {
            api,
            device,
            figures,
        }) => {
            let copies =
                (figures.copies.as_ref()).map_or(String::new(), |c| format!("; copies: {c}"));
            format!("{api}: {device}; memory: {}{copies}\n", figures.memory)
        }
    };
    let against = r.vulkan_ratios.first().map_or("CUDA", |x| x.against);
    let rows: Vec<Vec<String>> = r.vulkan_ratios.iter().map(ratio_cells).collect();
    device + &ratio_table("Vulkan", against, &rows) + "\n"
}

/// The CPU cost of each stream, per API: medians over the repeats.
fn cpu_lines(r: &CompareReport) -> String {
    let cuda = r.cuda.measured().map(|(_, figures)| figures);
    let mut out =
        String::from("CPU s per GiB moved (process user + system, median of the repeats):\n");
    for (what, cl, cu) in [
        (
            "in-place stream",
            &r.opencl.in_place_cpu_s_per_gib,
            cuda.map(|c| &c.in_place_cpu_s_per_gib),
        ),
        (
            "y = W·x",
            &r.opencl.gemv_cpu_s_per_gib,
            cuda.map(|c| &c.gemv_cpu_s_per_gib),
        ),
    ] {
        let cu = cu.map_or("-".into(), |v| format!("{:.4}", median(v)));
        out += &format!("  {what}: OpenCL {:.4}, CUDA {cu}\n", median(cl));
    }
    out
}

/// OpenCL's streams per device (several devices, no CUDA half): medians over the repeats.
fn per_device_rows(cl: &pinstream_lab::tools::compare::ApiFigures) -> Vec<Vec<String>> {
    let devices = cl.in_place_devices.first().map_or(0, Vec::len);
    let of = |repeats: &[Vec<f64>], d: usize| {
        median(
            &repeats
                .iter()
                .filter_map(|r| r.get(d).copied())
                .collect::<Vec<_>>(),
        )
    };
    let mut rows = Vec::new();
    for d in 0..devices {
        for (what, all) in [
            ("in-place stream, up + down", &cl.in_place_devices),
            ("y = W·x, weights", &cl.gemv_devices),
        ] {
            let v = format!("{:.1}", of(all, d));
            let dash = || "-".to_string();
            rows.push(vec![
                format!("{what}, device {d}"),
                v,
                dash(),
                dash(),
                dash(),
            ]);
        }
    }
    rows
}
