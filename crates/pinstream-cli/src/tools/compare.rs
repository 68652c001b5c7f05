//! `pinstream compare`: the same bench points and streaming workloads through OpenCL and
//! through CUDA, in one process, interleaved, with the OpenCL/CUDA ratio.
//!
//! Each bench point's passes are paired: an OpenCL pass next to a CUDA pass of the same block
//! size, the order alternating, so slow drift of the machine (clocks, other tenants) falls on
//! both. The streaming workloads are pinned, filled and built once per API; each repeat then
//! runs the OpenCL and the CUDA stream back to back (the order alternating, after a throw-away
//! pair) and checks both results against the CPU, so the two runs of a pair see the same
//! state of the link. Both APIs' memory is alive at once: 2 x the largest bench size of pinned
//! host memory and of device memory per API for the bench points, then one copy of each
//! streaming workload per API (`--size`, plus y for y = W·x), one workload at a time. The OpenCL half uses the recommended (auto) strategy or `strategy`; the
//! CUDA half pins as a CUDA program would (`cuMemHostAlloc`, the `cudaMallocHost` path, by
//! default) and streams the same data through the same ring schedule, VRAM budget and block
//! size, with the same kernels compiled by NVRTC. Where CUDA is not there, the OpenCL half
//! runs alone and the report says why.

use crate::tools::bench::ClPoints;
use crate::tools::demo::{DemoConfig, DemoError, Gemv, InPlace};
use pinstream::backend::api::Api;
use pinstream::backend::opencl::{Context, DeviceInfo, OpenCl};
use pinstream::engine::HostMemory;
use pinstream::host::{auto_order, Strategy};
use pinstream::units::median;
use serde::Serialize;

/// Ratios under this are marked in the report.
pub const MARK_BELOW: f64 = 0.97;

/// What to compare.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    /// Block sizes of the bench points.
    pub sizes: Vec<usize>,
    /// Sizes, budget and seed of the streaming workloads (in place, and y = W·x).
    pub demo: DemoConfig,
    /// Repeats of the streaming workloads; each runs the OpenCL and the CUDA stream back to
    /// back, the order alternating.
    pub repeats: usize,
    /// Passes per bench point and API, paired: each OpenCL pass next to a CUDA pass of the
    /// same point (the order alternating), so drift of the machine falls on both alike.
    pub point_repeats: usize,
    /// CUDA pinning: `cuMemHostAlloc` (false) or `cuMemHostRegister` (true).
    pub cuda_register: bool,
    /// The OpenCL strategy; `None`: the recommended one (`auto`'s first choice).
    pub strategy: Option<Strategy>,
}

/// One API's figures, each repeat (GB/s by the wall clock).
#[derive(Debug, Clone, Serialize)]
pub struct ApiFigures {
    /// Pinning used.
    pub memory: String,
    /// Per bench size: (size, H2D, D2H, both), medians over the passes.
    pub bench: Vec<(usize, f64, f64, f64)>,
    /// Per bench size, every pass: [H2D, D2H, both].
    pub bench_passes: Vec<Vec<[f64; 3]>>,
    /// In-place stream, combined GB/s, each repeat.
    pub in_place: Vec<f64>,
    /// y = W·x, GB/s of weights, each repeat.
    pub gemv: Vec<f64>,
    /// Overlap of the in-place stream, each repeat.
    pub in_place_overlap: Vec<f64>,
    /// The process's CPU seconds (user + system) per GiB the in-place stream moved across
    /// the bus, each repeat.
    pub in_place_cpu_s_per_gib: Vec<f64>,
    /// The same for y = W·x, each repeat.
    pub gemv_cpu_s_per_gib: Vec<f64>,
    /// With several devices: the in-place stream's combined GB/s per device, each repeat.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub in_place_devices: Vec<Vec<f64>>,
    /// With several devices: y = W·x's weight GB/s per device, each repeat.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gemv_devices: Vec<Vec<f64>>,
}

impl ApiFigures {
    fn new(memory: String) -> Self {
        ApiFigures {
            memory,
            bench: Vec::new(),
            bench_passes: Vec::new(),
            in_place: Vec::new(),
            gemv: Vec::new(),
            in_place_overlap: Vec::new(),
            in_place_cpu_s_per_gib: Vec::new(),
            gemv_cpu_s_per_gib: Vec::new(),
            in_place_devices: Vec::new(),
            gemv_devices: Vec::new(),
        }
    }
}

/// CUDA's figures: measured, or why not.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum CudaFigures {
    /// Measured on the same GPU.
    Measured {
        /// The CUDA device (name and PCI address).
        device: String,
        /// The figures (`half` in the JSON report: CUDA's half of the comparison).
        #[serde(rename = "half")]
        figures: Box<ApiFigures>,
    },
    /// Not measured; the reason says why.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// One figure through both APIs.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    /// What was measured.
    pub figure: String,
    /// OpenCL, GB/s (median over the passes or repeats).
    pub opencl: f64,
    /// CUDA, GB/s (median over the passes or repeats).
    pub cuda: f64,
    /// OpenCL / CUDA of the medians: the figure the bars and the mark use.
    pub ratio: f64,
    /// The median of the per-pair ratios (each OpenCL pass or repeat over the CUDA one next
    /// to it), which machine drift affects less.
    pub paired: f64,
    /// `ratio` is under [`MARK_BELOW`].
    pub marked: bool,
}

/// The comparison.
#[derive(Debug, Clone, Serialize)]
pub struct CompareReport {
    /// The OpenCL device (the first, with several).
    pub device: DeviceInfo,
    /// Every OpenCL device the streams ran over, with several (the bench points run on the
    /// first alone).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceInfo>,
    /// The streaming workloads' sizes, block, budget and seed (both APIs use them).
    pub config: DemoConfig,
    /// Repeats of the streaming workloads (the throw-away pair before them not counted).
    pub repeats: usize,
    /// Paired passes per bench point and API.
    pub point_repeats: usize,
    /// How OpenCL waited for commands (`driver` or `sleep`, `--wait`).
    pub wait: pinstream::backend::opencl::wait::WaitMode,
    /// OpenCL.
    pub opencl: ApiFigures,
    /// CUDA.
    pub cuda: CudaFigures,
    /// Every figure with its OpenCL/CUDA ratio (empty without the CUDA half).
    pub ratios: Vec<Ratio>,
    /// 4,096 scattered pieces of 4 KiB both ways: pinstream's gather against OpenCL's and
    /// CUDA's per-piece loops and `cuMemcpyBatchAsync` (`bench --gather`'s rows).
    pub gather: crate::tools::gather::GatherReport,
}

/// Why the comparison could not run.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// A streaming workload could not be set up.
    #[error(transparent)]
    Demo(#[from] DemoError),
    /// A streaming workload's run failed.
    #[error("the {api} stream failed: {}", crate::advice::stream_error(.source, crate::advice::Flags::COMPARE))]
    Stream {
        /// OpenCL or CUDA.
        api: &'static str,
        /// The failure.
        source: pinstream::engine::StreamError,
    },
    /// A streaming workload's result did not match the CPU reference.
    #[error(
        "the {api} run of the {workload} workload did not match the CPU reference in {bad} {unit}"
    )]
    Mismatch {
        /// OpenCL or CUDA.
        api: &'static str,
        /// The workload.
        workload: &'static str,
        /// Elements or rows that differ.
        bad: u64,
        /// "elements" or "rows".
        unit: &'static str,
    },
    /// Both APIs' copies of a streaming workload do not fit the host memory available.
    #[error("the streaming workloads would pin {need} at once ({copies} x --size {data} plus y: one copy per API measured), more than {share} of the {avail} of host memory available: pass --size {max} or less", share = format!("{}/{}", HOST_SHARE.0, HOST_SHARE.1))]
    HostMemory {
        /// Copies (one per API measured).
        copies: u64,
        /// `--size`.
        data: pinstream::units::Bytes,
        /// What `copies` copies of the larger workload pin.
        need: pinstream::units::Bytes,
        /// Host memory available.
        avail: pinstream::units::Bytes,
        /// The largest `--size` that fits (whole MiB).
        max: pinstream::units::Bytes,
    },
    /// CUDA's side failed after it started.
    #[error("the CUDA half failed: {0}")]
    Cuda(String),
    /// The device offers no pinning strategy.
    #[error("the device offers no host-memory strategy to compare with: run `pinstream devices`")]
    NoStrategy,
    /// The OpenCL bench points failed.
    #[error("the OpenCL bench with strategy `{0}` failed: {1}")]
    OpenclBench(String, String),
    /// The scattered-pieces rows failed.
    #[error("the scattered pieces (bench --gather's rows) failed: {0}")]
    Gather(String),
    /// Stopped on request (the stop flag of [`DemoConfig::stop`] held this value).
    #[error("stopped on request")]
    Stopped(usize),
}

/// Share of the host memory available that the streaming workloads may pin (3/4): the rest
/// is left to the process, to the device's buffers where the device is the CPU, and to the
/// system.
const HOST_SHARE: (u64, u64) = (3, 4);

/// Fails unless `copies` copies of the larger streaming workload (y = W·x: W, x and y) fit in
/// [`HOST_SHARE`] of `avail` bytes; the error names the largest `--size` that does.
fn host_memory_fits(copies: u64, d: &DemoConfig, avail: u64) -> Result<(), CompareError> {
    let (rows, cols, _) = d.gemv_shape();
    let (data, rows, cols) = (d.data_bytes as u64, rows as u64, cols as u64);
    let per_copy = data.saturating_add(rows * 4).saturating_add(cols * 4);
    let need = per_copy.saturating_mul(copies);
    let allowed = avail / HOST_SHARE.1 * HOST_SHARE.0;
    if need <= allowed {
        return Ok(());
    }
    // data * (1 + 2 / cols) per copy, x aside.
    let max = u128::from(allowed / copies) * u128::from(cols) / u128::from(cols + 2);
    Err(CompareError::HostMemory {
        copies,
        data: pinstream::units::Bytes(data),
        need: pinstream::units::Bytes(need),
        avail: pinstream::units::Bytes(avail),
        max: pinstream::units::Bytes(max as u64 >> 20 << 20),
    })
}

/// Runs the comparison with `cfg.strategy` (by default the recommended one): the bench points
/// on the first context's device, the streaming workloads over every context's device (the
/// CUDA half over the same GPUs, found by PCI address; `twin`: the CLI's way to CUDA's own
/// copy calls, for the scattered pieces).
pub fn compare(
    ctxs: &[Context],
    cfg: &CompareConfig,
    twin: crate::tools::OnTwin,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<CompareReport, CompareError> {
    let ctx = &ctxs[0];
    let Some(strategy) = cfg
        .strategy
        .or_else(|| auto_order(ctx.device()).0.first().copied())
    else {
        return Err(CompareError::NoStrategy);
    };
    let mut cfg = cfg.clone();
    cfg.demo.strategy = pinstream::host::StrategyChoice::Forced(strategy);
    let cfg = &cfg;
    let cuda = cuda_side::open(ctxs, cfg);
    if let Some(avail) = pinstream::backend::os::host_room().map(|r| r.bytes) {
        host_memory_fits(if cuda.is_ok() { 2 } else { 1 }, &cfg.demo, avail)?;
    }
    let stop = StopCheck(cfg.demo.stop.as_deref());
    let points = bench_points(ctx, cfg, strategy, cuda.as_ref().ok(), &stop, progress)?;
    let streams = stream_workloads(ctxs, cfg, cuda.as_ref().ok(), &stop, progress)?;
    stop.here()?;
    progress("scattered pieces");
    let gather =
        crate::tools::gather::default_shape(ctx, cfg.point_repeats, cuda.is_ok().then_some(twin))
            .map_err(|e| CompareError::Gather(e.to_string()))?;
    let mut cl = ApiFigures::new(strategy.to_string());
    fill(&mut cl, &streams[0], &points[0], &cfg.sizes);
    let (cuda, ratios) = match cuda {
        Ok(c) => {
            let mut figures = ApiFigures::new(c.memory());
            fill(&mut figures, &streams[1], &points[1], &cfg.sizes);
            let mut ratios = ratios(&cl, &figures);
            ratios.extend(gather_ratios(&gather));
            let device = c.device();
            (
                CudaFigures::Measured {
                    device,
                    figures: Box::new(figures),
                },
                ratios,
            )
        }
        Err(reason) => (CudaFigures::Unavailable { reason }, Vec::new()),
    };
    Ok(CompareReport {
        device: ctx.device().clone(),
        devices: match ctxs {
            [_] => Vec::new(),
            all => all.iter().map(|c| c.device().clone()).collect(),
        },
        config: cfg.demo.clone(),
        repeats: cfg.repeats.max(1),
        point_repeats: cfg.point_repeats.max(1),
        wait: pinstream::backend::opencl::wait::wait_mode(),
        opencl: cl,
        cuda,
        ratios,
        gather,
    })
}

/// The gather's GB/s against CUDA's per-piece loop and batch call, each direction.
fn gather_ratios(g: &crate::tools::gather::GatherReport) -> Vec<Ratio> {
    let find = |dir: &str, api: &str, what: &str| {
        g.rows
            .iter()
            .find(|r| r.direction == dir && r.api == api && r.path.contains(what))
    };
    let mut out = Vec::new();
    for (dir, name) in [("h2d", "H2D"), ("d2h", "D2H")] {
        let Some(ours) = find(dir, "pinstream", "Gather") else {
            continue;
        };
        for (what, label) in [
            ("per piece", "per-piece loop"),
            ("BatchAsync", "cuMemcpyBatchAsync"),
        ] {
            if let Some(c) = find(dir, "cuda", what) {
                let ratio = ours.gbps / c.gbps;
                out.push(Ratio {
                    figure: format!("4096 x 4 KiB scattered {name}: gather / CUDA {label}"),
                    opencl: ours.gbps,
                    cuda: c.gbps,
                    ratio,
                    paired: ratio,
                    marked: ratio < MARK_BELOW,
                });
            }
        }
    }
    out
}

/// A stop request ends the comparison between steps, or inside a stream (which then fails
/// with its own stop error): either way the caller gets [`CompareError::Stopped`].
struct StopCheck<'a>(Option<&'a std::sync::atomic::AtomicUsize>);

impl StopCheck<'_> {
    fn code(&self) -> usize {
        self.0
            .map_or(0, |s| s.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// `e`, or the stop that caused it.
    fn or_stopped(&self, e: CompareError) -> CompareError {
        match self.code() {
            0 => e,
            code => CompareError::Stopped(code),
        }
    }

    /// Fails once a stop was requested.
    fn here(&self) -> Result<(), CompareError> {
        match self.code() {
            0 => Ok(()),
            code => Err(CompareError::Stopped(code)),
        }
    }
}

/// Per API (OpenCL, CUDA), per bench size, every pass: [H2D, D2H, both]. Each OpenCL pass
/// is paired with a CUDA pass of the same size, the order alternating.
type PointPasses = [Vec<Vec<[f64; 3]>>; 2];

/// The bench points, paired pass by pass, after one throw-away pass per API at the largest
/// size (first-use costs, lazy allocation and first DMA mappings, land on no measured pass).
fn bench_points(
    ctx: &Context,
    cfg: &CompareConfig,
    strategy: Strategy,
    cuda: Option<&cuda_side::Cuda>,
    stop: &StopCheck,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<PointPasses, CompareError> {
    let top = *cfg.sizes.iter().max().unwrap_or(&1);
    let n = cfg.sizes.len();
    let mut out = [vec![Vec::new(); n], vec![Vec::new(); n]];
    let cl_failed = |e: &dyn std::fmt::Display| {
        stop.or_stopped(CompareError::OpenclBench(
            strategy.to_string(),
            e.to_string(),
        ))
    };
    let cuda_failed = |e: String| stop.or_stopped(CompareError::Cuda(e));
    let mut cl = ClPoints::new(ctx, strategy, top).map_err(|e| cl_failed(&e))?;
    let mut cu = cuda
        .map(|c| c.points(top))
        .transpose()
        .map_err(cuda_failed)?;
    cl.point(top).map_err(|e| cl_failed(&e))?;
    if let Some(c) = &mut cu {
        c.point(top).map_err(cuda_failed)?;
    }
    let passes = cfg.point_repeats.max(1);
    for r in 0..passes {
        progress(&format!("bench points, pass {}/{passes}", r + 1));
        for (k, &size) in cfg.sizes.iter().enumerate() {
            for api in if (r + k) % 2 == 0 { [0, 1] } else { [1, 0] } {
                stop.here()?;
                let point = match (api, &mut cu) {
                    (0, _) => cl.point(size).map_err(|e| cl_failed(&e))?,
                    (_, Some(c)) => c.point(size).map_err(cuda_failed)?,
                    (_, None) => continue,
                };
                out[api][k].push(triple(&point));
            }
        }
    }
    Ok(out)
}

/// One streaming run: GB/s, overlap, CPU seconds per GiB moved, and with several devices
/// GB/s per device.
type RunFigures = (f64, f64, f64, Vec<f64>);

/// Per API, the streaming workloads' figures per repeat: in place, then y = W·x.
type StreamRuns = [[Vec<RunFigures>; 2]; 2];

/// The streaming workloads, one at a time, both APIs' runs paired.
fn stream_workloads(
    ctxs: &[Context],
    cfg: &CompareConfig,
    cuda: Option<&cuda_side::Cuda>,
    stop: &StopCheck,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<StreamRuns, CompareError> {
    let repeats = cfg.repeats.max(1);
    let cuda_failed = |e: String| stop.or_stopped(CompareError::Cuda(e));
    let stop_here = || stop.here();
    stop.here()?;
    let [cl_in_place, cu_in_place] = {
        let pinning = cfg.demo.pinning::<OpenCl>()?;
        let mut a = InPlace::<OpenCl, _>::new(ctxs, &cfg.demo, None, pinning)
            .map_err(|e| stop.or_stopped(e.into()))?;
        let mut b = cuda
            .map(|c| c.in_place(&cfg.demo))
            .transpose()
            .map_err(cuda_failed)?;
        let sides = [Some(&mut a as &mut dyn Runs), b.as_deref_mut()];
        paired_runs("in-place stream", sides, repeats, &stop_here, progress)
            .map_err(|e| stop.or_stopped(e))?
    };
    stop.here()?;
    let [cl_gemv, cu_gemv] = {
        let pinning = cfg.demo.pinning::<OpenCl>()?;
        let mut a = Gemv::<OpenCl, _>::new(ctxs, &cfg.demo, None, pinning)
            .map_err(|e| stop.or_stopped(e.into()))?;
        let mut b = cuda
            .map(|c| c.gemv(&cfg.demo))
            .transpose()
            .map_err(cuda_failed)?;
        let sides = [Some(&mut a as &mut dyn Runs), b.as_deref_mut()];
        paired_runs("y = W·x stream", sides, repeats, &stop_here, progress)
            .map_err(|e| stop.or_stopped(e))?
    };
    Ok([[cl_in_place, cl_gemv], [cu_in_place, cu_gemv]])
}

fn triple(p: &crate::tools::bench::Point) -> [f64; 3] {
    [p.h2d.wall_gbps, p.d2h.wall_gbps, p.both.wall_gbps]
}

/// A streaming workload of one API, pinned, filled and built once, run as often as asked.
trait Runs {
    /// Restores what a run starts from (the in-place input; y's NaNs).
    fn reset(&mut self) -> Result<(), CompareError>;
    /// One run: (GB/s, overlap, CPU seconds per GiB moved, GB/s per device with several).
    fn run(&mut self) -> Result<RunFigures, CompareError>;
    /// Fails unless the last run's results match the CPU reference.
    fn check(&self) -> Result<(), CompareError>;
}

/// `Ok` when nothing differed, else the mismatch.
fn verdict(api: &'static str, workload: &'static str, bad: u64) -> Result<(), CompareError> {
    match bad {
        0 => Ok(()),
        bad => Err(CompareError::Mismatch {
            api,
            workload,
            bad,
            unit: if workload == "gemv" {
                "rows"
            } else {
                "elements"
            },
        }),
    }
}

impl<A: Api, M: HostMemory> Runs for InPlace<'_, A, M> {
    fn reset(&mut self) -> Result<(), CompareError> {
        Ok(self.fill().map_err(DemoError::from)?)
    }
    fn run(&mut self) -> Result<RunFigures, CompareError> {
        let (s, cpu) = crate::tools::cpu::measured(|| self.stream(false, &|_, _| {}));
        let s = s.map_err(stream_failed::<A>)?;
        let cpu = crate::tools::cpu::per_gib(cpu, crate::tools::cpu::moved(&s));
        let each = s.devices.iter().map(|d| d.totals.combined_gbps).collect();
        Ok((s.totals.combined_gbps, s.totals.overlap, cpu, each))
    }
    fn check(&self) -> Result<(), CompareError> {
        let bad = self.mismatches().map_err(DemoError::from)?;
        verdict(A::NAME, "in-place", bad)
    }
}

impl<A: Api, M: HostMemory + Sync> Runs for Gemv<'_, A, M> {
    fn reset(&mut self) -> Result<(), CompareError> {
        Ok(Gemv::reset(self).map_err(DemoError::from)?)
    }
    fn run(&mut self) -> Result<RunFigures, CompareError> {
        let (s, cpu) = crate::tools::cpu::measured(|| self.stream(false, &|_, _| {}));
        let s = s.map_err(stream_failed::<A>)?;
        let cpu = crate::tools::cpu::per_gib(cpu, crate::tools::cpu::moved(&s));
        let each = s.devices.iter().map(|d| d.totals.upload.gbps).collect();
        Ok((s.totals.upload.gbps, s.totals.overlap, cpu, each))
    }
    fn check(&self) -> Result<(), CompareError> {
        let bad = self.mismatches().map_err(DemoError::from)?;
        verdict(A::NAME, "gemv", bad)
    }
}

fn stream_failed<A: Api>(source: pinstream::engine::StreamError) -> CompareError {
    CompareError::Stream {
        api: A::NAME,
        source,
    }
}

/// Runs each API's workload (`sides`: OpenCL, CUDA where measured) `repeats` times after a
/// throw-away pair; the two runs of a repeat go back to back, the order alternating, and
/// every run's results are checked; `stop_here` fails once a stop is asked for. Each API's
/// figures per repeat.
fn paired_runs<'a>(
    what: &str,
    mut sides: [Option<&mut (dyn Runs + 'a)>; 2],
    repeats: usize,
    stop_here: &dyn Fn() -> Result<(), CompareError>,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<[Vec<RunFigures>; 2], CompareError> {
    let mut out = [Vec::new(), Vec::new()];
    for r in 0..=repeats {
        progress(&match r {
            0 => format!("{what}: warm-up pair"),
            r => format!("{what}, repeat {r}/{repeats}"),
        });
        let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
        stop_here()?;
        for api in order {
            if let Some(s) = sides[api].as_deref_mut() {
                s.reset()?;
            }
        }
        for api in order {
            stop_here()?;
            if let Some(s) = sides[api].as_deref_mut() {
                let got = s.run()?;
                if r > 0 {
                    out[api].push(got);
                }
            }
        }
        for s in sides.iter().flatten() {
            s.check()?;
        }
    }
    Ok(out)
}

fn fill(
    h: &mut ApiFigures,
    [in_place, gemv]: &[Vec<RunFigures>; 2],
    points: &[Vec<[f64; 3]>],
    sizes: &[usize],
) {
    h.bench = sizes
        .iter()
        .zip(points)
        .map(|(&size, passes)| {
            let med = |d: usize| median(&passes.iter().map(|p| p[d]).collect::<Vec<_>>());
            (size, med(0), med(1), med(2))
        })
        .collect();
    h.bench_passes = points.to_vec();
    h.in_place = in_place.iter().map(|s| s.0).collect();
    h.in_place_overlap = in_place.iter().map(|s| s.1).collect();
    h.gemv = gemv.iter().map(|s| s.0).collect();
    h.in_place_cpu_s_per_gib = in_place.iter().map(|s| s.2).collect();
    h.gemv_cpu_s_per_gib = gemv.iter().map(|s| s.2).collect();
    h.in_place_devices = in_place.iter().map(|s| s.3.clone()).collect();
    h.gemv_devices = gemv.iter().map(|s| s.3.clone()).collect();
    if h.in_place_devices.iter().all(Vec::is_empty) {
        h.in_place_devices.clear();
    }
    if h.gemv_devices.iter().all(Vec::is_empty) {
        h.gemv_devices.clear();
    }
}

/// Device `d`'s figure of each repeat.
fn of_device(repeats: &[Vec<f64>], d: usize) -> Vec<f64> {
    repeats.iter().filter_map(|r| r.get(d).copied()).collect()
}

fn ratios(cl: &ApiFigures, cu: &ApiFigures) -> Vec<Ratio> {
    let mut out = Vec::new();
    let mut push = |figure: String, a: &[f64], b: &[f64]| {
        let (ma, mb) = (median(a), median(b));
        let ratio = if mb > 0.0 { ma / mb } else { 0.0 };
        let pairs: Vec<f64> = a
            .iter()
            .zip(b)
            .filter(|(_, &y)| y > 0.0)
            .map(|(x, y)| x / y)
            .collect();
        out.push(Ratio {
            figure,
            opencl: ma,
            cuda: mb,
            ratio,
            paired: median(&pairs),
            marked: ratio < MARK_BELOW,
        });
    };
    for ((size, a), b) in cl.bench.iter().zip(&cl.bench_passes).zip(&cu.bench_passes) {
        let size = pinstream::units::Bytes(size.0 as u64);
        for (d, what) in ["H2D", "D2H", "both ways"].iter().enumerate() {
            let col = |v: &[[f64; 3]]| v.iter().map(|p| p[d]).collect::<Vec<_>>();
            push(format!("{what}, {size} blocks"), &col(a), &col(b));
        }
    }
    push(
        "in-place stream, up + down".into(),
        &cl.in_place,
        &cu.in_place,
    );
    push("y = W·x, weights".into(), &cl.gemv, &cu.gemv);
    let devices = cl.in_place_devices.first().map_or(0, Vec::len);
    for d in 0..devices {
        let (a, b) = (&cl.in_place_devices, &cu.in_place_devices);
        let figure = format!("in-place stream, up + down, device {d}");
        push(figure, &of_device(a, d), &of_device(b, d));
        let (a, b) = (&cl.gemv_devices, &cu.gemv_devices);
        push(
            format!("y = W·x, weights, device {d}"),
            &of_device(a, d),
            &of_device(b, d),
        );
    }
    out
}

/// The CUDA side where the feature is built: the same workloads ([`InPlace`], [`Gemv`]) through
/// the same engine, with the built-in kernels in CUDA C and CUDA's pinned memory.
#[cfg(feature = "cuda")]
mod cuda_side {
    use super::{CompareConfig, Runs};
    use crate::tools::demo::{DemoConfig, Gemv, InPlace};
    use pinstream::backend::cuda::{Cuda as CudaApi, CudaKernel, CudaPinning, Gpu, PinnedHost};
    use pinstream::backend::opencl::Context;
    use pinstream::engine::kernels::{GEMV_F16_CUDA, MIX_U32_CUDA};

    /// CUDA's bench transfers, kept across paired passes.
    pub(super) struct Points(crate::tools::bench::cuda_transfers::Points);

    impl Points {
        pub(super) fn point(&mut self, size: usize) -> Result<crate::tools::bench::Point, String> {
            self.0.point(size).map_err(|e| e.to_string())
        }
    }

    pub(super) struct Cuda {
        gpu: Gpu,
        /// Every GPU of the streams (the first is `gpu`), matched to the OpenCL devices.
        gpus: Vec<Gpu>,
        pinning: CudaPinning,
    }

    pub(super) fn open(ctxs: &[Context], cfg: &CompareConfig) -> Result<Cuda, String> {
        let gpus = ctxs
            .iter()
            .map(|c| crate::tools::twin::open(c.device()))
            .collect::<Result<Vec<_>, _>>()?;
        // Compiled once here, so a driver that cannot build them says so before any work.
        kernel(&gpus[0], MIX_U32_CUDA, "mix_u32")?;
        kernel(&gpus[0], GEMV_F16_CUDA, "gemv_f16")?;
        Ok(Cuda {
            gpu: gpus[0].clone(),
            gpus,
            pinning: if cfg.cuda_register {
                CudaPinning::Register
            } else {
                CudaPinning::HostAlloc
            },
        })
    }

    /// The built-in kernel `name` from its CUDA C `source`.
    fn kernel(gpu: &Gpu, source: &str, name: &str) -> Result<CudaKernel, String> {
        let program = gpu.build(source, "").map_err(|e| e.to_string())?;
        program.kernel(name).map_err(|e| e.to_string())
    }

    impl Cuda {
        pub(super) fn memory(&self) -> String {
            self.pinning.to_string()
        }

        /// The built-in kernel `name`, built for every GPU.
        fn kernels(&self, source: &str, name: &str) -> Result<Vec<CudaKernel>, String> {
            self.gpus.iter().map(|g| kernel(g, source, name)).collect()
        }

        pub(super) fn device(&self) -> String {
            let i = self.gpu.info();
            format!(
                "{} ({}), CUDA driver {}",
                i.name, i.pci_address, i.driver_version
            )
        }

        /// The bench transfers with `2 * top` bytes of pinned memory.
        pub(super) fn points(&self, top: usize) -> Result<Points, String> {
            Ok(Points(
                crate::tools::bench::cuda_transfers::Points::new(&self.gpu, self.pinning, top)
                    .map_err(|e| e.to_string())?,
            ))
        }

        fn pin(&self, bytes: usize) -> Result<PinnedHost, String> {
            // Several GPUs: pinned for every context, or the others read it as pageable.
            let portable = self.gpus.len() > 1;
            self.gpu.pinned_for(bytes, self.pinning, portable).map_err(|e| {
                format!("{e} (compare holds OpenCL's and CUDA's copy of --size at once: pass a smaller --size)")
            })
        }

        /// The in-place workload's data, pinned as CUDA pins (filled by `reset`).
        pub(super) fn in_place<'a>(
            &'a self,
            d: &'a DemoConfig,
        ) -> Result<Box<dyn Runs + 'a>, String> {
            let x = self.pin(d.data_bytes / 4 * 4)?;
            let k = self.kernels(MIX_U32_CUDA, "mix_u32")?;
            Ok(Box::new(InPlace::<CudaApi, _>::with(&self.gpus, d, k, x)))
        }

        /// The y = W·x workload: the same W and x as the OpenCL demo, pinned as CUDA pins.
        pub(super) fn gemv<'a>(&'a self, d: &'a DemoConfig) -> Result<Box<dyn Runs + 'a>, String> {
            let (rows, cols, _) = d.gemv_shape();
            let memory = [
                self.pin(rows * cols * 2)?,
                self.pin(cols * 4)?,
                self.pin(rows * 4)?,
            ];
            let k = self.kernels(GEMV_F16_CUDA, "gemv_f16")?;
            let g =
                Gemv::<CudaApi, _>::with(&self.gpus, d, k, memory).map_err(|e| e.to_string())?;
            Ok(Box::new(g))
        }
    }
}

/// Without the feature: the reason only.
#[cfg(not(feature = "cuda"))]
mod cuda_side {
    use super::{CompareConfig, Runs};
    use crate::tools::demo::DemoConfig;
    use pinstream::backend::opencl::Context;

    pub(super) enum Cuda {}

    pub(super) fn open(ctxs: &[Context], _: &CompareConfig) -> Result<Cuda, String> {
        Err(crate::tools::twin::unavailable(ctxs[0].device()).unwrap_or_default())
    }

    impl Cuda {
        pub(super) fn memory(&self) -> String {
            match *self {}
        }
        pub(super) fn device(&self) -> String {
            match *self {}
        }
        pub(super) fn points(&self, _: usize) -> Result<Points, String> {
            match *self {}
        }
        pub(super) fn in_place(&self, _: &DemoConfig) -> Result<Box<dyn Runs + '_>, String> {
            match *self {}
        }
        pub(super) fn gemv(&self, _: &DemoConfig) -> Result<Box<dyn Runs + '_>, String> {
            match *self {}
        }
    }

    pub(super) enum Points {}

    impl Points {
        pub(super) fn point(&mut self, _: usize) -> Result<crate::tools::bench::Point, String> {
            match *self {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A workload that logs what it is asked to do; its n-th run (from 1) reads `bad_run`; a
    /// run that no reset came before panics.
    struct Mock<'a> {
        api: usize,
        log: &'a RefCell<Vec<String>>,
        runs: usize,
        bad_run: Option<usize>,
        fresh: bool,
    }

    impl Runs for Mock<'_> {
        fn reset(&mut self) -> Result<(), CompareError> {
            self.log.borrow_mut().push(format!("reset{}", self.api));
            self.fresh = true;
            Ok(())
        }
        fn run(&mut self) -> Result<super::RunFigures, CompareError> {
            assert!(self.fresh, "run {} without a reset", self.runs + 1);
            self.fresh = false;
            self.runs += 1;
            self.log.borrow_mut().push(format!("run{}", self.api));
            Ok((self.runs as f64, 0.5, 0.25, Vec::new()))
        }
        fn check(&self) -> Result<(), CompareError> {
            self.log.borrow_mut().push(format!("check{}", self.api));
            verdict(
                "Mock",
                "gemv",
                u64::from(self.bad_run == Some(self.runs)) * 3,
            )
        }
    }

    fn mock(api: usize, log: &RefCell<Vec<String>>) -> Mock<'_> {
        Mock {
            api,
            log,
            runs: 0,
            bad_run: None,
            fresh: false,
        }
    }

    #[test]
    fn paired_runs_go_back_to_back_alternating_after_a_warm_up_pair() {
        let log = RefCell::new(Vec::new());
        let (mut a, mut b) = (mock(0, &log), mock(1, &log));
        let out = paired_runs("w", [Some(&mut a), Some(&mut b)], 2, &|| Ok(()), &|_| {}).unwrap();
        // The warm-up pair (run 1 of each) is not reported.
        assert_eq!(
            out[0],
            vec![(2.0, 0.5, 0.25, vec![]), (3.0, 0.5, 0.25, vec![])]
        );
        assert_eq!(
            out[1],
            vec![(2.0, 0.5, 0.25, vec![]), (3.0, 0.5, 0.25, vec![])]
        );
        let runs: Vec<String> = log
            .borrow()
            .iter()
            .filter(|s| s.starts_with("run"))
            .cloned()
            .collect();
        assert_eq!(runs, ["run0", "run1", "run1", "run0", "run0", "run1"]);
        // Every repeat resets both (in run order) before either runs, and checks both after.
        let want = [
            ["reset0", "reset1", "run0", "run1", "check0", "check1"],
            ["reset1", "reset0", "run1", "run0", "check0", "check1"],
            ["reset0", "reset1", "run0", "run1", "check0", "check1"],
        ]
        .concat();
        assert_eq!(*log.borrow(), want);
    }

    #[test]
    fn paired_runs_without_cuda_run_the_opencl_side_alone() {
        let log = RefCell::new(Vec::new());
        let mut a = mock(0, &log);
        let out = paired_runs("w", [Some(&mut a), None], 3, &|| Ok(()), &|_| {}).unwrap();
        assert_eq!(out[0].len(), 3);
        assert!(out[1].is_empty());
    }

    #[test]
    fn a_wrong_result_or_a_stop_ends_the_runs() {
        let log = RefCell::new(Vec::new());
        let (mut a, mut b) = (mock(0, &log), mock(1, &log));
        b.bad_run = Some(2);
        match paired_runs("w", [Some(&mut a), Some(&mut b)], 5, &|| Ok(()), &|_| {}) {
            Err(e @ CompareError::Mismatch { bad: 3, .. }) => {
                assert!(e.to_string().contains("in 3 rows"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(b.runs, 2, "no run after the wrong one");
        // The throw-away pair is checked too.
        let (mut a, mut b) = (mock(0, &log), mock(1, &log));
        a.bad_run = Some(1);
        assert!(matches!(
            paired_runs("w", [Some(&mut a), Some(&mut b)], 5, &|| Ok(()), &|_| {}),
            Err(CompareError::Mismatch { .. })
        ));
        assert_eq!((a.runs, b.runs), (1, 1));
        let mut a = mock(0, &log);
        match paired_runs(
            "w",
            [Some(&mut a), None],
            5,
            &|| Err(CompareError::Stopped(15)),
            &|_| {},
        ) {
            Err(CompareError::Stopped(15)) => assert_eq!(a.runs, 0),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn host_memory_is_checked_for_every_copy_with_headroom() {
        let d = |data: usize| DemoConfig {
            data_bytes: data,
            vram_budget: 1 << 30,
            block_bytes: 1 << 20,
            cols: 8192,
            strategy: pinstream::host::StrategyChoice::Auto,
            compare_sequential: false,
            seed: 1,
            sizing: String::new(),
            stop: None,
        };
        let gib = 1u64 << 30;
        // 10 GiB (+ y) per copy: one copy fits 16 GiB (3/4 is 12), two do not.
        assert!(host_memory_fits(1, &d(10 << 30), 16 * gib).is_ok());
        match host_memory_fits(2, &d(10 << 30), 16 * gib) {
            Err(e @ CompareError::HostMemory { .. }) => {
                let m = e.to_string();
                assert!(m.contains("2 x --size 10 GiB plus y"), "{m}");
                // The size offered fits.
                let CompareError::HostMemory { max, .. } = e else {
                    unreachable!()
                };
                assert!(max.0 > 5 * gib && max.0 < 6 * gib, "{m}");
                assert!(host_memory_fits(2, &d(max.0 as usize), 16 * gib).is_ok());
                assert!(host_memory_fits(2, &d(max.0 as usize + (64 << 20)), 16 * gib).is_err());
            }
            other => panic!("{other:?}"),
        }
        // Sizes near the integer limit saturate instead of wrapping into a pass.
        assert!(host_memory_fits(2, &d(usize::MAX), 16 * gib).is_err());
    }

    #[test]
    fn several_devices_get_a_ratio_each_and_in_total() {
        let figures = |scale: f64| {
            let mut f = ApiFigures::new("m".into());
            let runs = [(10.0 * scale, 0.9, 0.1, vec![4.0 * scale, 6.0 * scale])];
            let gemv = [(5.0 * scale, 0.9, 0.1, vec![2.0 * scale, 3.0])];
            fill(&mut f, &[runs.to_vec(), gemv.to_vec()], &[], &[]);
            f
        };
        let (cl, cu) = (figures(0.5), figures(1.0));
        let r = ratios(&cl, &cu);
        let get = |name: &str| r.iter().find(|x| x.figure == name).unwrap().ratio;
        assert_eq!(get("in-place stream, up + down"), 0.5);
        assert_eq!(get("in-place stream, up + down, device 0"), 0.5);
        assert_eq!(get("in-place stream, up + down, device 1"), 0.5);
        assert_eq!(get("y = W·x, weights, device 0"), 0.5);
        assert_eq!(get("y = W·x, weights, device 1"), 1.0);
        // One device: no per-device figures.
        let mut one = ApiFigures::new("m".into());
        fill(
            &mut one,
            &[vec![(1.0, 0.5, 0.1, vec![])], vec![(1.0, 0.5, 0.1, vec![])]],
            &[],
            &[],
        );
        assert!(one.in_place_devices.is_empty() && one.gemv_devices.is_empty());
        assert_eq!(ratios(&one, &one).len(), 2);
    }
}
