//! `pinstream compare`: the same bench points and streaming workloads through OpenCL and
//! through CUDA (and, where asked for, Vulkan), in one process, interleaved, with the
//! OpenCL/CUDA ratio (and Vulkan's over CUDA's).
//!
//! Each bench point's passes are paired: an OpenCL pass next to a CUDA pass of the same block
//! size, the order alternating, so slow drift of the machine (clocks, other tenants) falls on
//! both. The streaming workloads are pinned, filled and built once per API; each repeat then
//! runs the OpenCL and the CUDA stream back to back (the order alternating, after a throw-away
//! pair) and checks both results against the CPU, so the two runs of a pair see the same
//! state of the link. Both APIs' memory is alive at once: 2 x the largest bench size of pinned
//! host memory and of device memory per API for the bench points, then one copy of each
//! streaming workload per API (`--size`, plus y for y = W·x), one workload at a time. The
//! OpenCL half uses the recommended (auto) strategy or `strategy`; the CUDA half pins as a
//! CUDA program would (`cuMemHostAlloc`, the `cudaMallocHost` path, by default) and streams
//! the same data through the same ring schedule, VRAM budget and block size, with the same
//! kernels compiled by NVRTC. Where CUDA is not there, the OpenCL half
//! runs alone and the report says why.
//!
//! Both halves are one [`ApiHalf`] made for each API (`half`); the measuring code sees them
//! as [`Half`] objects: the paired bench passes (`points`), the paired streams (`stream`),
//! and each half's figures with the ratios (`report`).

mod half;
mod points;
mod report;
mod runs;
mod stream;

pub use half::{ApiHalf, Half};
pub use points::PassRates;
pub use runs::{RunFigures, Runs};

use crate::tools::demo::{DemoConfig, DemoError};
use crate::tools::gather::compare_rows;
use pinstream::backend::api::Api;
use pinstream::backend::opencl::{Context, DeviceInfo, OpenCl};
use pinstream::host::{auto_order, Strategy};
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
    /// The OpenCL strategy; `None`: the recommended one (`auto`'s first choice).
    pub strategy: Option<Strategy>,
    /// The scattered pieces' shapes, `(pieces, bytes per piece)`, the first reported as
    /// `gather` and the others as `more_gather` (empty: [`crate::tools::gather::COMPARE_SHAPE`]).
    pub gather_shapes: Vec<(usize, usize)>,
}

/// One API's figures, each repeat (GB/s by the wall clock).
#[derive(Debug, Clone, Serialize)]
pub struct ApiFigures {
    /// Pinning used.
    pub memory: String,
    /// How the API copies, where it offers a choice (Vulkan's copy way and its queues).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copies: Option<String>,
    /// Per bench size: the medians over the passes.
    pub bench: Vec<BenchMedians>,
    /// Per bench size, every pass.
    pub bench_passes: Vec<Vec<PassRates>>,
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

/// One bench size's medians over the passes; serialized as `[size, H2D, D2H, both]`.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchMedians {
    /// Block size, bytes.
    pub size: usize,
    /// GB/s each way.
    pub rates: PassRates,
}

impl Serialize for BenchMedians {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = &self.rates;
        (self.size, r.h2d, r.d2h, r.both).serialize(s)
    }
}

/// Another API's figures beside OpenCL's, whichever API it is (CUDA's, Vulkan's): measured,
/// or why not.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum OtherFigures {
    /// Measured on the same GPU (Vulkan: or the default Vulkan device, where the device
    /// string says so).
    Measured {
        /// The API (`CUDA`, `Vulkan`).
        #[serde(skip)]
        api: &'static str,
        /// The API's device (name and PCI address).
        device: String,
        /// The figures (`half` in the JSON report: the API's half of the comparison).
        #[serde(rename = "half")]
        figures: Box<ApiFigures>,
    },
    /// Not measured; the reason says why.
    Unavailable {
        /// Why.
        reason: String,
    },
}

impl OtherFigures {
    /// `half`'s figures, the next of `figures`; or why there are none.
    fn of(half: Result<&dyn Half, String>, figures: &mut impl Iterator<Item = ApiFigures>) -> Self {
        match half {
            Ok(h) => OtherFigures::Measured {
                api: h.api(),
                device: h.device(),
                figures: Box::new(figures.next().expect("figures for every half measured")),
            },
            Err(reason) => OtherFigures::Unavailable { reason },
        }
    }

    /// The API and its figures, where measured.
    pub fn measured(&self) -> Option<(&'static str, &ApiFigures)> {
        match self {
            OtherFigures::Measured { api, figures, .. } => Some((api, figures)),
            OtherFigures::Unavailable { .. } => None,
        }
    }
}

/// One figure through two APIs (OpenCL over CUDA; Vulkan over CUDA, or over OpenCL where
/// CUDA was not measured): one shape whichever two they are.
///
/// In JSON, beside `api`, `value`, `against` and `other`, the two figures are also keyed by
/// their APIs' lower-case names (`opencl` and `cuda`; `vulkan`), the keys the reports had
/// before: those go in the next release.
#[derive(Debug, Clone)]
pub struct Ratio {
    /// What was measured.
    pub figure: String,
    /// The API measured: `OpenCL`, `Vulkan`.
    pub api: &'static str,
    /// Its figure, GB/s (median over the passes or repeats).
    pub value: f64,
    /// The API it is compared with: `CUDA`, or `OpenCL`.
    pub against: &'static str,
    /// That API's figure, GB/s (median over the passes or repeats).
    pub other: f64,
    /// `value` / `other` of the medians: the figure the bars and the mark use.
    pub ratio: f64,
    /// The median of the per-pair ratios (each pass or repeat of `api` over the one of
    /// `against` next to it), which machine drift affects less.
    pub paired: f64,
    /// `ratio` is under [`MARK_BELOW`].
    pub marked: bool,
}

impl Serialize for Ratio {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(10))?;
        m.serialize_entry("figure", &self.figure)?;
        m.serialize_entry("api", self.api)?;
        m.serialize_entry("value", &self.value)?;
        m.serialize_entry("against", self.against)?;
        m.serialize_entry("other", &self.other)?;
        m.serialize_entry("ratio", &self.ratio)?;
        m.serialize_entry("paired", &self.paired)?;
        m.serialize_entry("marked", &self.marked)?;
        // The keys of the reports before one shape (deprecated; see the type's doc).
        m.serialize_entry(&self.api.to_lowercase(), &self.value)?;
        m.serialize_entry(&self.against.to_lowercase(), &self.other)?;
        m.end()
    }
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
    pub cuda: OtherFigures,
    /// Every figure with its OpenCL/CUDA ratio (empty without the CUDA half).
    pub ratios: Vec<Ratio>,
    /// Vulkan, where asked for (`compare --api vulkan`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vulkan: Option<OtherFigures>,
    /// Every figure of Vulkan over CUDA's (over OpenCL's where CUDA was not measured).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub vulkan_ratios: Vec<Ratio>,
    /// Scattered pieces both ways, the first shape (4,096 pieces of 4 KiB unless
    /// `--gather-shape` asks for others): pinstream's gather against OpenCL's and CUDA's
    /// per-piece loops and `cuMemcpyBatchAsync`, and its zero-copy gather against CUDA's
    /// zero-copy kernel (`bench gather`'s rows).
    pub gather: crate::tools::gather::GatherReport,
    /// The same rows at each further shape asked for, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub more_gather: Vec<crate::tools::gather::GatherReport>,
}

/// Why the comparison could not run.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// A streaming workload could not be set up.
    #[error(transparent)]
    Demo(#[from] DemoError),
    /// A streaming workload's run failed.
    #[error("the {api} stream failed: {source}")]
    Stream {
        /// OpenCL or CUDA.
        api: &'static str,
        /// The failure (boxed: the error stays small on every other path).
        source: Box<pinstream::engine::StreamError>,
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
    /// A half could not set up a workload, or failed after it started.
    #[error("the {api} half failed: {why}")]
    Half {
        /// The half's API.
        api: &'static str,
        /// Why.
        why: String,
    },
    /// The device offers no pinning strategy.
    #[error("the device offers no host-memory strategy to compare with: run `pinstream devices`")]
    NoStrategy,
    /// A half's bench points failed.
    #[error("the {api} bench with strategy `{memory}` failed: {why}")]
    Bench {
        /// The half's API.
        api: &'static str,
        /// How it pinned.
        memory: String,
        /// Why.
        why: String,
    },
    /// The scattered-pieces rows failed.
    #[error("the scattered pieces (`bench gather`'s rows) failed: {0}")]
    Gather(String),
    /// Stopped on request (the stop flag of [`DemoConfig::stop`] held this value).
    #[error("stopped on request")]
    Stopped(usize),
}

impl CompareError {
    /// `half`'s failure to set up or run a workload.
    fn half(half: &dyn Half, why: String) -> Self {
        CompareError::Half {
            api: half.api(),
            why,
        }
    }

    /// `half`'s bench points' failure.
    fn bench(half: &dyn Half, why: String) -> Self {
        CompareError::Bench {
            api: half.api(),
            memory: half.memory(),
            why,
        }
    }
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

/// The halves beside OpenCL's: CUDA's, or why it is missing, and Vulkan's where asked for.
pub struct Others<'a> {
    /// CUDA on the same GPUs, or why not.
    pub cuda: Result<&'a dyn Half, String>,
    /// Vulkan (`None`: not asked for), or why not.
    pub vulkan: Option<Result<&'a dyn Half, String>>,
}

/// Runs the comparison: the bench points on the first device, the streaming workloads over
/// every device, through OpenCL (`ctxs`, with `cfg.strategy` or by default the recommended
/// one) and through the `others` (opened by the caller): CUDA on the same GPUs, or OpenCL
/// alone with the reason CUDA is missing, and Vulkan where asked for. `on_cuda`: the CLI's way
/// to CUDA's own copy calls on the first device's GPU, for the scattered pieces.
pub fn compare(
    ctxs: &[Context],
    others: Others<'_>,
    cfg: &CompareConfig,
    on_cuda: crate::tools::OnCuda<'_>,
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
    let opencl =
        ApiHalf::<OpenCl>::new(ctxs.to_vec(), strategy).map_err(|why| CompareError::Half {
            api: OpenCl::NAME,
            why,
        })?;
    let Others { cuda, vulkan } = others;
    let mut halves: Vec<&dyn Half> = vec![&opencl];
    halves.extend(cuda.as_ref().ok());
    halves.extend(vulkan.as_ref().and_then(|v| v.as_ref().ok()));
    let on_cuda = cuda.is_ok().then_some(on_cuda);
    let (figures, mut gathers) = measure(ctxs, &halves, &cfg, on_cuda, progress)?;
    let mut figures = figures.into_iter();
    let cl = figures.next().expect("the OpenCL half is always measured");
    let cuda = OtherFigures::of(cuda, &mut figures);
    let vulkan = vulkan.map(|v| OtherFigures::of(v, &mut figures));
    // OpenCL over CUDA; Vulkan over CUDA, else over OpenCL.
    let opencl = (OpenCl::NAME, &cl);
    let mut ratios = Vec::new();
    if let Some(cu) = cuda.measured() {
        ratios = report::ratios(opencl, cu);
        ratios.extend(gathers.iter().flat_map(report::gather_ratios));
    }
    let vulkan_ratios = match vulkan.as_ref().and_then(OtherFigures::measured) {
        Some(vk) => report::ratios(vk, cuda.measured().unwrap_or(opencl)),
        None => Vec::new(),
    };
    Ok(CompareReport {
        device: ctx.device().clone(),
        devices: every_device(ctxs),
        config: cfg.demo.clone(),
        repeats: cfg.repeats.max(1),
        point_repeats: cfg.point_repeats.max(1),
        wait: ctx.wait_mode(),
        opencl: cl,
        cuda,
        ratios,
        vulkan,
        vulkan_ratios,
        gather: gathers.remove(0),
        more_gather: gathers,
    })
}

/// Every device the streams ran over, where there are several (one: none, as the report's
/// `device` names it).
fn every_device(ctxs: &[Context]) -> Vec<DeviceInfo> {
    match ctxs {
        [_] => Vec::new(),
        all => all.iter().map(|c| c.device().clone()).collect(),
    }
}

/// Every half's figures (in order) and the scattered pieces' rows at each shape, at least
/// one (beside CUDA's own calls through `cuda` where CUDA is measured).
fn measure(
    ctxs: &[Context],
    halves: &[&dyn Half],
    cfg: &CompareConfig,
    cuda: Option<crate::tools::OnCuda<'_>>,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<(Vec<ApiFigures>, Vec<crate::tools::gather::GatherReport>), CompareError> {
    if let Some(avail) = pinstream::backend::os::host_room().map(|r| r.bytes) {
        host_memory_fits(halves.len() as u64, &cfg.demo, avail)?;
    }
    let stop = StopCheck(cfg.demo.stop.as_deref());
    let points = points::bench_points(halves, cfg, &stop, progress)?;
    let streams = stream::stream_workloads(halves, cfg, &stop, progress)?;
    stop.here()?;
    progress("scattered pieces");
    let described = crate::tools::doctor::DoctorDevice::of::<OpenCl>(ctxs[0].device());
    let shapes = match cfg.gather_shapes.as_slice() {
        [] => &[crate::tools::gather::COMPARE_SHAPE][..],
        asked => asked,
    };
    let gather = shapes
        .iter()
        .map(|&shape| {
            let at = (shape, cfg.point_repeats);
            compare_rows::<OpenCl>(&ctxs[0], described.clone(), at, cuda)
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CompareError::Gather(e.to_string()))?;
    let figures = halves
        .iter()
        .zip(points)
        .zip(&streams)
        .map(|((h, p), s)| ApiFigures {
            copies: h.copies(),
            ..ApiFigures::new(h.memory(), p, s, &cfg.sizes)
        })
        .collect();
    Ok((figures, gather))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_memory_is_checked_for_every_copy_with_headroom() {
        let d = |data: usize| DemoConfig {
            data_bytes: data,
            vram_budget: 1 << 30,
            block_bytes: 1 << 20,
            cols: 8192,
            strategy: pinstream::host::StrategyChoice::Auto,
            compare_sequential: false,
            passes: 1,
            residency: pinstream::engine::Residency::Auto,
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
}
