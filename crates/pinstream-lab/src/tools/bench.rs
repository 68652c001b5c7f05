//! `pinstream bench`: bandwidth by block size and direction, and small-transfer latency, per
//! strategy, reported as `bandwidthTest` and clpeak do: the median of repeats with the
//! slowest and fastest beside it, by event profiling and by the wall clock.

mod points;
pub mod walk;

pub(crate) use points::Points;

use super::doctor::DoctorDevice;
use crate::tools::passes::{Bandwidth, Pass};
use pinstream::backend::api::Device;
use pinstream::backend::error::BackendError;
use pinstream::backend::lanes::OutOfRange;
use pinstream::backend::opencl::ClError;
use pinstream::host::{HostApi, HostError};
use pinstream::units::{median, parse_size, Bytes};
use serde::Serialize;

/// Bytes a measurement aims to move per repeat, so small blocks are timed over many transfers
/// and large ones over several (both ways at once needs several per direction: with one
/// 256 MiB transfer each way, the skew between the two queues' starts cost ~10% on the H200).
const PER_REPEAT: usize = 2 << 30;
/// At most this many transfers per repeat.
const MAX_TRANSFERS: usize = 64;

/// Parses `4KiB..1GiB` (every power of two from the first to the last) or a comma list.
pub fn parse_sizes(s: &str) -> Result<Vec<usize>, String> {
    let err = |e: pinstream::units::SizeError| e.to_string();
    let sizes: Vec<usize> = if let Some((lo, hi)) = s.split_once("..") {
        let (lo, hi) = (
            parse_size(lo).map_err(err)? as usize,
            parse_size(hi).map_err(err)? as usize,
        );
        if lo == 0 || lo > hi {
            return Err(format!(
                "`{s}`: the range must go from a positive size up to a larger one, e.g. 4KiB..1GiB"
            ));
        }
        std::iter::successors(Some(lo), |&x| x.checked_mul(2).filter(|&y| y <= hi)).collect()
    } else {
        s.split(',')
            .map(|x| parse_size(x).map(|v| v as usize).map_err(err))
            .collect::<Result<_, _>>()?
    };
    let mut sizes = sizes;
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.is_empty() || sizes.contains(&0) {
        return Err(format!(
            "`{s}`: sizes must be positive, e.g. 4KiB..1GiB or 64KiB,1MiB"
        ));
    }
    Ok(sizes)
}

/// Per-transfer latency of one size, microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// Median over repeats of the commands' busy time per transfer, by event profiling.
    pub events_us: f64,
    /// Wall time per transfer (enqueue to completion of the batch, divided by its length).
    pub wall_us: f64,
}

/// One block size.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// Block size in bytes.
    pub size: usize,
    /// Transfers per repeat.
    pub transfers: usize,
    /// Host to device.
    pub h2d: Bandwidth,
    /// Device to host.
    pub d2h: Bandwidth,
    /// Both at once on two queues (bytes of both directions added).
    pub both: Bandwidth,
    /// H2D latency per transfer.
    pub h2d_latency: Latency,
}

/// The smallest block size reaching 95% of the peak, per direction.
#[derive(Debug, Clone, Serialize)]
pub struct Knee {
    /// Peak GB/s (wall clock, median of repeats).
    pub peak_gbps: f64,
    /// Smallest block size at 95% of it.
    pub size_at_95: usize,
}

/// One strategy's curve.
#[derive(Debug, Clone, Serialize)]
pub struct StrategyBench {
    /// The API, lowercase: `opencl` or `cuda`.
    pub api: &'static str,
    /// The strategy (OpenCL) or pinning (CUDA: `cuda-host-alloc`, `cuda-register`).
    pub strategy: String,
    /// Why it could not be measured.
    pub error: Option<String>,
    /// By block size.
    pub points: Vec<Point>,
    /// H2D knee.
    pub h2d: Option<Knee>,
    /// D2H knee.
    pub d2h: Option<Knee>,
    /// Both-ways knee.
    pub both: Option<Knee>,
}

/// The whole bench.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// The device: OpenCL's description, or the API's.
    pub device: DoctorDevice,
    /// Block sizes.
    pub sizes: Vec<usize>,
    /// Repeats per point.
    pub repeats: usize,
    /// One entry per strategy: OpenCL's, then CUDA's where asked for and available.
    pub strategies: Vec<StrategyBench>,
    /// Why CUDA was not measured, when it was asked for.
    pub cuda_unavailable: Option<String>,
    /// How the device copied, where its API offers a choice (Vulkan's `--vk-copy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copies: Option<String>,
}

/// Why the bench could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A block above the max allocation.
    #[error("block size {} is above the device's max allocation {}: lower the top of --sizes", Bytes(*.size as u64), Bytes(*.max_alloc))]
    Size {
        /// The block.
        size: usize,
        /// The limit.
        max_alloc: u64,
    },
    /// The API offers no way to pin on the device.
    #[error("{0} offers no pinned host memory on this device: run `pinstream devices`")]
    NoPinning(&'static str),
    /// Region size problems.
    #[error(transparent)]
    Host(#[from] HostError),
    /// Setup failure.
    #[error(transparent)]
    Cl(#[from] ClError),
    /// A transfer or allocation failed (any API).
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// Host memory that did not lend all its bytes (a bug of its API's `HostMemory`).
    #[error(transparent)]
    Range(#[from] OutOfRange),
    /// Sizes that do not fit together, with the fix.
    #[error("{0}")]
    Usage(String),
}

/// `pinnings` of `A` on `device` (described as `described`), each measured at every size. The
/// same points through another API on the same GPU are this run there (the CLI adds its
/// curves, or the reason they are missing, as [`BenchReport::cuda_unavailable`]).
pub fn api_bench<A: HostApi>(
    device: &A::Device,
    described: DoctorDevice,
    pinnings: &[A::Pinning],
    sizes: &[usize],
    repeats: usize,
    progress: &dyn Fn(&str),
) -> Result<BenchReport, BenchError> {
    let repeats = repeats.max(1);
    Ok(BenchReport {
        strategies: curves::<A>(device, pinnings, sizes, repeats, progress)?,
        device: described,
        sizes: sizes.to_vec(),
        repeats,
        cuda_unavailable: None,
        copies: device.copy_way(),
    })
}

/// Every one of `pinnings` measured at every size on `device` through `A`: one curve each
/// (a pinning that fails says why in its curve).
pub fn curves<A: HostApi>(
    device: &A::Device,
    pinnings: &[A::Pinning],
    sizes: &[usize],
    repeats: usize,
    progress: &dyn Fn(&str),
) -> Result<Vec<StrategyBench>, BenchError> {
    let top = *sizes.iter().max().expect("parse_sizes gives at least one");
    check_top(device, top)?;
    Ok(pinnings
        .iter()
        .map(|&p| {
            let name = p.to_string();
            progress(&name);
            let points =
                Points::<A>::new(device, p, top).and_then(|mut t| t.curve(sizes, repeats.max(1)));
            curve(A::ID, &name, points)
        })
        .collect())
}

fn curve(
    api: &'static str,
    name: &str,
    points: Result<Vec<Point>, impl std::fmt::Display>,
) -> StrategyBench {
    match points {
        Ok(points) => StrategyBench {
            api,
            strategy: name.into(),
            error: None,
            h2d: knee(&points, |p| &p.h2d),
            d2h: knee(&points, |p| &p.d2h),
            both: knee(&points, |p| &p.both),
            points,
        },
        Err(e) => StrategyBench {
            api,
            strategy: name.into(),
            error: Some(e.to_string()),
            points: vec![],
            h2d: None,
            d2h: None,
            both: None,
        },
    }
}

/// A direction of a bench pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Host to device.
    Up,
    /// Device to host.
    Down,
    /// Both at once, on two queues.
    Both,
}

/// One block size: `pass(dir, k)` moves `k` blocks of `size` in `dir` and
/// returns its pass and the commands' summed busy time (ns); H2D, D2H and both ways in turn,
/// `repeats` times.
fn measure_point<E>(
    size: usize,
    repeats: usize,
    mut pass: impl FnMut(Dir, usize) -> Result<(Pass, u64), E>,
) -> Result<Point, E> {
    let k = transfers_per_pass(size);
    let bytes = (k * size) as u64;
    let (mut up, mut down, mut both) = (Vec::new(), Vec::new(), Vec::new());
    let (mut lat_events, mut lat_wall) = (Vec::new(), Vec::new());
    for _ in 0..repeats {
        let (p, busy_ns) = pass(Dir::Up, k)?;
        lat_wall.push(p.wall_s / k as f64 * 1e6);
        lat_events.push(busy_ns as f64 / k as f64 / 1e3);
        up.push(p);
        down.push(pass(Dir::Down, k)?.0);
        both.push(pass(Dir::Both, k)?.0);
    }
    Ok(Point {
        size,
        transfers: k,
        h2d: Bandwidth::from_passes(bytes, up),
        d2h: Bandwidth::from_passes(bytes, down),
        both: Bandwidth::from_passes(2 * bytes, both),
        h2d_latency: Latency {
            events_us: median(&lat_events),
            wall_us: median(&lat_wall),
        },
    })
}

fn knee(points: &[Point], f: impl Fn(&Point) -> &Bandwidth) -> Option<Knee> {
    let peak = points.iter().map(|p| f(p).wall_gbps).fold(0.0, f64::max);
    let first = points.iter().find(|p| f(p).wall_gbps >= 0.95 * peak)?;
    Some(Knee {
        peak_gbps: peak,
        size_at_95: first.size,
    })
}

/// Blocks per pass at `size`: about `PER_REPEAT` bytes, at most `MAX_TRANSFERS`.
pub(crate) fn transfers_per_pass(size: usize) -> usize {
    (PER_REPEAT / size.max(1)).clamp(1, MAX_TRANSFERS)
}

/// The block sizes' top must fit one device allocation, and twice it the host.
fn check_top<D: Device>(device: &D, top: usize) -> Result<(), BenchError> {
    if top as u64 > device.max_alloc() {
        return Err(BenchError::Size {
            size: top,
            max_alloc: device.max_alloc(),
        });
    }
    pinstream::host::check_size(2 * top)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn size_ranges() {
        assert_eq!(
            parse_sizes("4KiB..32KiB").unwrap(),
            vec![4096, 8192, 16384, 32768]
        );
        assert_eq!(parse_sizes("4KiB..40KiB").unwrap().len(), 4);
        assert_eq!(parse_sizes("1MiB,4096,4KiB").unwrap(), vec![4096, 1 << 20]);
        assert!(parse_sizes("1MiB..4KiB").unwrap_err().contains("larger"));
        assert!(parse_sizes("0..4KiB").is_err());
        assert!(parse_sizes("x..4KiB").unwrap_err().contains("invalid size"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn size_specs_never_panic(s in "\\PC{0,20}") {
            let _ = parse_sizes(&s);
        }
    }
}
