//! `pinstream compare`: the same bench points and streaming workloads through OpenCL and
//! through CUDA, in one process, interleaved, with the OpenCL/CUDA ratio.
//!
//! Each bench point's passes are paired: an OpenCL pass next to a CUDA pass of the same block
//! size, the order alternating, so slow drift of the machine (clocks, other tenants) falls on
//! both. The streaming workloads run a repeat of each API in turn, again alternating. Both
//! bench rigs are alive at once: 2 x the largest size of pinned host memory and of device
//! memory per API. The OpenCL half uses the recommended (auto) strategy or `strategy`; the
//! CUDA half pins as a CUDA program would (`cuMemHostAlloc`, the `cudaMallocHost` path, by
//! default) and streams the same data through the same ring schedule, VRAM budget and block
//! size, with the same kernels compiled by NVRTC. Where CUDA is not there, the OpenCL half
//! runs alone and the report says why.

use crate::backend::opencl::{Context, DeviceInfo};
use crate::bench::ClPoints;
use crate::demo::{demo, DemoConfig, DemoError};
use crate::host::{auto_order, Strategy};
use crate::units::median;
use crate::vram::VramProbe;
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
    /// Repeats of the streaming workloads; each runs the OpenCL and the CUDA half in turn.
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
pub struct Half {
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
}

impl Half {
    fn new(memory: String) -> Self {
        Half {
            memory,
            bench: Vec::new(),
            bench_passes: Vec::new(),
            in_place: Vec::new(),
            gemv: Vec::new(),
            in_place_overlap: Vec::new(),
        }
    }
}

/// The CUDA half: measured, or why not.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum CudaHalf {
    /// Measured on the same GPU.
    Measured {
        /// The CUDA device (name and PCI address).
        device: String,
        /// The figures.
        half: Half,
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
    /// The OpenCL device.
    pub device: DeviceInfo,
    /// The streaming workloads' sizes, block, budget and seed (both APIs use them).
    pub config: DemoConfig,
    /// Repeats of the streaming workloads.
    pub repeats: usize,
    /// Paired passes per bench point and API.
    pub point_repeats: usize,
    /// OpenCL.
    pub opencl: Half,
    /// CUDA.
    pub cuda: CudaHalf,
    /// Every figure with its OpenCL/CUDA ratio (empty without the CUDA half).
    pub ratios: Vec<Ratio>,
}

/// Why the comparison could not run.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// The streaming half.
    #[error(transparent)]
    Demo(#[from] DemoError),
    /// A streaming workload's result did not match the CPU reference.
    #[error("the {0} workload's results did not match the CPU reference")]
    Mismatch(&'static str),
    /// The CUDA half failed after it started.
    #[error("the CUDA half failed: {0}")]
    Cuda(String),
    /// The device offers no pinning strategy.
    #[error("the device offers no host-memory strategy to compare with: run `pinstream devices`")]
    NoStrategy,
    /// The OpenCL bench points failed.
    #[error("the OpenCL bench with strategy `{0}` failed: {1}")]
    OpenclBench(String, String),
    /// Stopped on request (the stop flag of [`DemoConfig::stop`] held this value).
    #[error("stopped on request")]
    Stopped(usize),
}

/// One repeat's streaming figures from one API.
struct Sample {
    in_place: f64,
    overlap: f64,
    gemv: f64,
}

/// Runs the comparison on `ctx`'s device with `cfg.strategy` (by default the recommended one),
/// for the bench points and the streaming workloads alike.
pub fn compare(
    ctx: &Context,
    probe: &VramProbe,
    cfg: &CompareConfig,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<CompareReport, CompareError> {
    let strategy: Option<Strategy> = cfg
        .strategy
        .or_else(|| auto_order(ctx.device()).0.first().copied());
    let mut cfg = cfg.clone();
    if let Some(s) = strategy {
        cfg.demo.strategy = crate::host::StrategyChoice::Forced(s);
    }
    let cfg = &cfg;
    let mut cl = Half::new(strategy.map_or("none".into(), |s| s.to_string()));
    let mut cuda = cuda_side::open(ctx.device(), cfg);
    let repeats = cfg.repeats.max(1);
    let (mut cl_s, mut cu_s) = (Vec::new(), Vec::new());
    // A stop request ends the comparison between steps, or inside a stream (which then
    // fails with its own stop error): either way the caller gets `Stopped`.
    let stopped = || {
        cfg.demo
            .stop
            .as_ref()
            .map_or(0, |s| s.load(std::sync::atomic::Ordering::Relaxed))
    };
    let or_stopped = |e: CompareError| match stopped() {
        0 => e,
        code => CompareError::Stopped(code),
    };
    // The bench points, paired pass by pass.
    let Some(strategy) = strategy else {
        return Err(CompareError::NoStrategy);
    };
    let top = *cfg.sizes.iter().max().unwrap_or(&1);
    let n = cfg.sizes.len();
    let (mut cl_p, mut cu_p) = (vec![Vec::new(); n], vec![Vec::new(); n]);
    {
        let bench_failed = |e: &dyn std::fmt::Display| {
            or_stopped(CompareError::OpenclBench(
                strategy.to_string(),
                e.to_string(),
            ))
        };
        let mut clr = ClPoints::new(ctx, strategy, top).map_err(|e| bench_failed(&e))?;
        let mut cur = match &cuda {
            Ok(c) => Some(
                c.points(top)
                    .map_err(|e| or_stopped(CompareError::Cuda(e)))?,
            ),
            Err(_) => None,
        };
        // One throw-away pass per API at the largest size: first-use costs (lazy allocation,
        // first DMA mappings) land on no measured pass.
        clr.point(top).map_err(|e| bench_failed(&e))?;
        if let Some(c) = &mut cur {
            c.point(top)
                .map_err(|e| or_stopped(CompareError::Cuda(e)))?;
        }
        let passes = cfg.point_repeats.max(1);
        for r in 0..passes {
            progress(&format!("bench points, pass {}/{passes}", r + 1));
            for (k, &size) in cfg.sizes.iter().enumerate() {
                for api in if (r + k) % 2 == 0 { [0, 1] } else { [1, 0] } {
                    if stopped() != 0 {
                        return Err(CompareError::Stopped(stopped()));
                    }
                    if api == 0 {
                        let p = clr.point(size).map_err(|e| bench_failed(&e))?;
                        cl_p[k].push(triple(&p));
                    } else if let Some(c) = &mut cur {
                        let p = c
                            .point(size)
                            .map_err(|e| or_stopped(CompareError::Cuda(e)))?;
                        cu_p[k].push(triple(&p));
                    }
                }
            }
        }
    }
    // The streaming workloads, a repeat of each API in turn.
    for r in 0..repeats {
        // Alternate the order so drift falls on both halves.
        for api in if r % 2 == 0 { [0, 1] } else { [1, 0] } {
            if stopped() != 0 {
                return Err(CompareError::Stopped(stopped()));
            }
            if api == 0 {
                progress(&format!("streams, repeat {}/{repeats}: OpenCL", r + 1));
                cl_s.push(opencl_streams(ctx, probe, cfg).map_err(or_stopped)?);
            } else if let Ok(c) = &mut cuda {
                progress(&format!("streams, repeat {}/{repeats}: CUDA", r + 1));
                cu_s.push(
                    c.streams(cfg)
                        .map_err(|e| or_stopped(CompareError::Cuda(e)))?,
                );
            }
        }
    }
    if stopped() != 0 {
        return Err(CompareError::Stopped(stopped()));
    }
    fill(&mut cl, &cl_s, &cl_p, &cfg.sizes);
    let (cuda, ratios) = match cuda {
        Ok(c) => {
            let mut half = Half::new(c.memory());
            fill(&mut half, &cu_s, &cu_p, &cfg.sizes);
            let ratios = ratios(&cl, &half);
            (
                CudaHalf::Measured {
                    device: c.device(),
                    half,
                },
                ratios,
            )
        }
        Err(reason) => (CudaHalf::Unavailable { reason }, Vec::new()),
    };
    Ok(CompareReport {
        device: ctx.device().clone(),
        config: cfg.demo.clone(),
        repeats,
        point_repeats: cfg.point_repeats.max(1),
        opencl: cl,
        cuda,
        ratios,
    })
}

fn triple(p: &crate::bench::Point) -> [f64; 3] {
    [p.h2d.wall_gbps, p.d2h.wall_gbps, p.both.wall_gbps]
}

fn opencl_streams(
    ctx: &Context,
    probe: &VramProbe,
    cfg: &CompareConfig,
) -> Result<Sample, CompareError> {
    let d = demo(ctx, probe, &cfg.demo, &|_, _, _| {})?;
    for w in &d.workloads {
        if w.mismatches > 0 {
            return Err(CompareError::Mismatch(w.name));
        }
    }
    Ok(Sample {
        in_place: d.workloads[0].stream.totals.combined_gbps,
        overlap: d.workloads[0].stream.totals.overlap,
        gemv: d.workloads[1].stream.totals.upload.gbps,
    })
}

fn fill(h: &mut Half, samples: &[Sample], points: &[Vec<[f64; 3]>], sizes: &[usize]) {
    h.bench = sizes
        .iter()
        .zip(points)
        .map(|(&size, passes)| {
            let med = |d: usize| median(&passes.iter().map(|p| p[d]).collect::<Vec<_>>());
            (size, med(0), med(1), med(2))
        })
        .collect();
    h.bench_passes = points.to_vec();
    h.in_place = samples.iter().map(|s| s.in_place).collect();
    h.in_place_overlap = samples.iter().map(|s| s.overlap).collect();
    h.gemv = samples.iter().map(|s| s.gemv).collect();
}

fn ratios(cl: &Half, cu: &Half) -> Vec<Ratio> {
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
        let size = crate::units::Bytes(size.0 as u64);
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
    out
}

/// The CUDA half where the feature is built.
#[cfg(feature = "cuda")]
mod cuda_side {
    use super::{CompareConfig, Sample};
    use crate::backend::cuda::{CudaPinning, Gpu};
    use crate::backend::opencl::DeviceInfo;
    use crate::demo::{gemv_mismatches, gemv_w, gemv_x};
    use crate::engine::cuda::{run_cuda, CudaKernels, CudaWork};
    use crate::engine::kernels::{mix_u32_ref, value};
    use crate::engine::{DType, StreamOptions};
    use crate::par;

    /// CUDA's bench rig, kept across paired passes.
    pub(super) struct Points(crate::bench::cuda_rig::Points);

    impl Points {
        pub(super) fn point(&mut self, size: usize) -> Result<crate::bench::Point, String> {
            self.0.point(size).map_err(|e| e.to_string())
        }
    }

    pub(super) struct Cuda {
        gpu: Gpu,
        kernels: CudaKernels,
        pinning: CudaPinning,
    }

    pub(super) fn open(dev: &DeviceInfo, cfg: &CompareConfig) -> Result<Cuda, String> {
        let gpu = crate::twin::open(dev)?;
        let kernels = CudaKernels::build(&gpu).map_err(|e| e.to_string())?;
        Ok(Cuda {
            gpu,
            kernels,
            pinning: if cfg.cuda_register {
                CudaPinning::Register
            } else {
                CudaPinning::HostAlloc
            },
        })
    }

    impl Cuda {
        pub(super) fn memory(&self) -> String {
            self.pinning.to_string()
        }

        pub(super) fn device(&self) -> String {
            let i = self.gpu.info();
            format!(
                "{} ({}), CUDA driver {}",
                i.name, i.pci_address, i.driver_version
            )
        }

        /// The bench rig with `2 * top` bytes of pinned memory.
        pub(super) fn points(&self, top: usize) -> Result<Points, String> {
            Ok(Points(
                crate::bench::cuda_rig::Points::new(&self.gpu, self.pinning, top)
                    .map_err(|e| e.to_string())?,
            ))
        }

        /// One repeat of both streaming workloads, each checked against the CPU.
        pub(super) fn streams(&mut self, cfg: &CompareConfig) -> Result<Sample, String> {
            let e = |e: &dyn std::fmt::Display| e.to_string();
            let d = &cfg.demo;
            let opts = d.stream_options(DType::U32, false);
            // In place, the same data as the OpenCL demo.
            let n = d.data_bytes / 4;
            let seed = d.seed;
            let mut x = self.gpu.pinned(n * 4, self.pinning).map_err(|x| e(&x))?;
            par::fill_with::<u32>(vec![x.as_mut_slice()], |i| value(seed, i) as u32);
            let s = run_cuda(
                &self.gpu,
                &self.kernels,
                CudaWork::InPlace { data: &mut x },
                &opts,
                &|_, _| {},
            )
            .map_err(|x| e(&x))?;
            let bad = par::count_bad::<u32>(vec![x.as_slice()], |i, v| {
                v != mix_u32_ref(value(seed, i) as u32, i)
            });
            if bad > 0 {
                return Err(format!("the in-place workload's results did not match the CPU reference in {bad} elements"));
            }
            drop(x);
            // y = W·x, the same W and x as the OpenCL demo.
            let (cols, seed) = (d.cols, d.seed ^ 0xA5A5);
            let rows = d.data_bytes / (cols * 2);
            let mut w = self
                .gpu
                .pinned(rows * cols * 2, self.pinning)
                .map_err(|x| e(&x))?;
            let mut xv = self.gpu.pinned(cols * 4, self.pinning).map_err(|x| e(&x))?;
            let mut y = self.gpu.pinned(rows * 4, self.pinning).map_err(|x| e(&x))?;
            par::fill_with::<half::f16>(vec![w.as_mut_slice()], |i| gemv_w(seed, i));
            par::fill_with::<f32>(vec![xv.as_mut_slice()], |i| gemv_x(seed, i));
            par::fill_with::<f32>(vec![y.as_mut_slice()], |_| f32::NAN);
            let g = run_cuda(
                &self.gpu,
                &self.kernels,
                CudaWork::Gemv {
                    w: &w,
                    x: &xv,
                    y: &mut y,
                    cols,
                },
                &StreamOptions {
                    block_bytes: d.gemv_block_bytes(),
                    ..opts
                },
                &|_, _| {},
            )
            .map_err(|x| e(&x))?;
            let bad = gemv_mismatches(
                bytemuck::cast_slice(w.as_slice()),
                bytemuck::cast_slice(xv.as_slice()),
                bytemuck::cast_slice(y.as_slice()),
                cols,
            );
            if bad > 0 {
                return Err(format!(
                    "the y = W·x workload's results did not match the CPU reference in {bad} rows"
                ));
            }
            Ok(Sample {
                in_place: s.totals.combined_gbps,
                overlap: s.totals.overlap,
                gemv: g.totals.upload.gbps,
            })
        }
    }
}

/// Without the feature: the reason only.
#[cfg(not(feature = "cuda"))]
mod cuda_side {
    use super::{CompareConfig, Sample};
    use crate::backend::opencl::DeviceInfo;

    pub(super) enum Cuda {}

    pub(super) fn open(dev: &DeviceInfo, _: &CompareConfig) -> Result<Cuda, String> {
        Err(crate::twin::unavailable(dev).unwrap_or_default())
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
        pub(super) fn streams(&mut self, _: &CompareConfig) -> Result<Sample, String> {
            match *self {}
        }
    }

    pub(super) enum Points {}

    impl Points {
        pub(super) fn point(&mut self, _: usize) -> Result<crate::bench::Point, String> {
            match *self {}
        }
    }
}
