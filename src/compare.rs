//! `pinstream compare`: the same bench points and streaming workloads through OpenCL and
//! through CUDA, in one process, interleaved over repeats, with the OpenCL/CUDA ratio.
//!
//! pinstream has no CUDA backend yet: the CUDA half is reported as unavailable, with the
//! reason, and no ratio is computed. The OpenCL half is measured for real.

use crate::backend::opencl::{Context, DeviceInfo};
use crate::bench::{bench, BenchError};
use crate::demo::{demo, DemoConfig, DemoError};
use crate::host::{auto_order, Strategy};
use crate::vram::VramProbe;
use serde::Serialize;

/// What to compare.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    /// Block sizes of the bench points.
    pub sizes: Vec<usize>,
    /// Sizes, budget and seed of the streaming workloads (in place, and y = W·x).
    pub demo: DemoConfig,
    /// Repeats; each runs the OpenCL and the CUDA half in turn.
    pub repeats: usize,
}

/// One API's figures, medians over repeats (GB/s by the wall clock).
#[derive(Debug, Clone, Serialize)]
pub struct Half {
    /// Pinning used.
    pub memory: String,
    /// Per bench size: (size, H2D, D2H, both).
    pub bench: Vec<(usize, f64, f64, f64)>,
    /// In-place stream, combined GB/s, each repeat.
    pub in_place: Vec<f64>,
    /// y = W·x, GB/s of weights, each repeat.
    pub gemv: Vec<f64>,
}

/// The CUDA half: measured, or why not.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum CudaHalf {
    /// Not measured; the reason says why.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// The comparison.
#[derive(Debug, Clone, Serialize)]
pub struct CompareReport {
    /// The OpenCL device.
    pub device: DeviceInfo,
    /// Repeats.
    pub repeats: usize,
    /// OpenCL.
    pub opencl: Half,
    /// CUDA.
    pub cuda: CudaHalf,
}

/// Why the comparison could not run.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// The bench half.
    #[error(transparent)]
    Bench(#[from] BenchError),
    /// The streaming half.
    #[error(transparent)]
    Demo(#[from] DemoError),
    /// A streaming workload's result did not match the CPU reference.
    #[error("the {0} workload's results did not match the CPU reference")]
    Mismatch(&'static str),
}

/// The reason the CUDA half is missing in this build.
pub fn cuda_unavailable_reason() -> String {
    "pinstream has no CUDA backend yet (planned: cudarc, behind a `cuda` feature), so nothing was measured through CUDA and no OpenCL/CUDA ratio is given".into()
}

/// Runs the comparison on `ctx`'s device with the recommended (auto) strategy.
pub fn compare(
    ctx: &Context,
    probe: &VramProbe,
    cfg: &CompareConfig,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<CompareReport, CompareError> {
    let strategy: Option<Strategy> = auto_order(ctx.device()).0.first().copied();
    let mut half = Half {
        memory: strategy.map_or("none".into(), |s| s.to_string()),
        bench: Vec::new(),
        in_place: Vec::new(),
        gemv: Vec::new(),
    };
    let mut points: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); cfg.sizes.len()];
    for r in 0..cfg.repeats.max(1) {
        progress(&format!("repeat {}: OpenCL bench", r + 1));
        let b = bench(ctx, &cfg.sizes, 1, strategy.map(|s| vec![s]), &|_| {})?;
        for (k, p) in b.strategies[0].points.iter().enumerate() {
            points[k].push((p.h2d.wall_gbps, p.d2h.wall_gbps, p.both.wall_gbps));
        }
        progress(&format!("repeat {}: OpenCL streams", r + 1));
        let d = demo(ctx, probe, &cfg.demo, &|_, _, _| {})?;
        for w in &d.workloads {
            if w.mismatches > 0 {
                return Err(CompareError::Mismatch(w.name));
            }
        }
        half.in_place
            .push(d.workloads[0].stream.totals.combined_gbps);
        half.gemv.push(d.workloads[1].stream.totals.upload.gbps);
        // The CUDA half of the repeat would run here.
    }
    half.bench = cfg
        .sizes
        .iter()
        .zip(&points)
        .map(|(&size, v)| {
            let med = |f: fn(&(f64, f64, f64)) -> f64| {
                crate::units::median(&v.iter().map(f).collect::<Vec<_>>())
            };
            (size, med(|p| p.0), med(|p| p.1), med(|p| p.2))
        })
        .collect();
    Ok(CompareReport {
        device: ctx.device().clone(),
        repeats: cfg.repeats.max(1),
        opencl: half,
        cuda: CudaHalf::Unavailable {
            reason: cuda_unavailable_reason(),
        },
    })
}
