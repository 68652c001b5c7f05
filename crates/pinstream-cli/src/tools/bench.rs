//! `pinstream bench`: bandwidth by block size and direction, and small-transfer latency, per
//! strategy, reported as `bandwidthTest` and clpeak do: the median of repeats with the
//! slowest and fastest beside it, by event profiling and by the wall clock.

use crate::tools::doctor::{Bandwidth, Pass};
use pinstream::backend::api::Profile;
use pinstream::backend::opencl::{ClError, Context, DeviceBuffer, DeviceInfo, Event, Queue};
use pinstream::host::{HostError, HostRegion, PinOptions, Strategy, StrategyChoice};
use pinstream::units::{median, parse_size, Bytes};
use serde::Serialize;
use std::time::Instant;

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
    /// `opencl` or `cuda`.
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
    /// The device.
    pub device: DeviceInfo,
    /// Block sizes.
    pub sizes: Vec<usize>,
    /// Repeats per point.
    pub repeats: usize,
    /// One entry per strategy: OpenCL's, then CUDA's where asked for and available.
    pub strategies: Vec<StrategyBench>,
    /// Why CUDA was not measured, when it was asked for.
    pub cuda_unavailable: Option<String>,
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
    /// A forced strategy the device lacks.
    #[error("strategy `{0}` is not available on this device: {1}; run `pinstream devices`")]
    Unsupported(Strategy, String),
    /// Region size problems.
    #[error(transparent)]
    Host(#[from] HostError),
    /// Setup failure.
    #[error(transparent)]
    Cl(#[from] ClError),
}

/// Measures `strategies` (all offered when `None`) at every size and, with `cuda`, the same
/// points through CUDA on the same GPU (`cuMemHostAlloc` and `cuMemHostRegister` memory).
pub fn bench(
    ctx: &Context,
    sizes: &[usize],
    repeats: usize,
    strategies: Option<Vec<Strategy>>,
    cuda: bool,
    progress: &dyn Fn(&str),
) -> Result<BenchReport, BenchError> {
    let dev = ctx.device().clone();
    let top = *sizes.iter().max().expect("parse_sizes gives at least one");
    check_top(&dev, top)?;
    let list = match strategies {
        Some(l) => {
            for &s in &l {
                s.offered_by(&dev)
                    .map_err(|why| BenchError::Unsupported(s, why))?;
            }
            l
        }
        None => Strategy::offered(&dev),
    };
    let repeats = repeats.max(1);
    let mut strategies: Vec<StrategyBench> = Vec::new();
    if !list.is_empty() {
        let transfers = ClTransfers::new(ctx, top)?;
        strategies.extend(list.into_iter().map(|s| {
            progress(s.name());
            curve(
                "opencl",
                s.name(),
                transfers.curve(ctx, s, sizes, top, repeats),
            )
        }));
    }
    let cuda_unavailable = if cuda {
        match cuda_curves(&dev, sizes, top, repeats, progress) {
            Ok(c) => {
                strategies.extend(c);
                None
            }
            Err(why) => Some(why),
        }
    } else {
        None
    };
    Ok(BenchReport {
        device: dev,
        sizes: sizes.to_vec(),
        repeats,
        strategies,
        cuda_unavailable,
    })
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

/// The CUDA curves, or why there are none.
#[cfg(feature = "cuda")]
fn cuda_curves(
    dev: &DeviceInfo,
    sizes: &[usize],
    top: usize,
    repeats: usize,
    progress: &dyn Fn(&str),
) -> Result<Vec<StrategyBench>, String> {
    use pinstream::backend::cuda::CudaPinning;
    let gpu = crate::tools::twin::open(dev)?;
    let transfers = cuda_transfers::CudaTransfers::new(&gpu, top).map_err(|e| e.to_string())?;
    Ok([CudaPinning::HostAlloc, CudaPinning::Register]
        .into_iter()
        .map(|p| {
            progress(p.name());
            curve("cuda", p.name(), transfers.curve(p, sizes, top, repeats))
        })
        .collect())
}

#[cfg(not(feature = "cuda"))]
fn cuda_curves(
    dev: &DeviceInfo,
    _: &[usize],
    _: usize,
    _: usize,
    _: &dyn Fn(&str),
) -> Result<Vec<StrategyBench>, String> {
    Err(crate::tools::twin::unavailable(dev).unwrap_or_default())
}

/// The same points through CUDA: `k` copies per repeat on one stream (both ways: uploads
/// on one stream, downloads on another), timed by the wall clock and by events.
#[cfg(feature = "cuda")]
pub(crate) mod cuda_transfers {
    use super::{measure_point, Dir, Point};
    use crate::tools::doctor::Pass;
    use pinstream::backend::api::Profile;
    use pinstream::backend::cuda::{
        CudaError, CudaPinning, DeviceMem, Gpu, PinnedHost, Stream, Timed,
    };
    use std::time::Instant;

    /// What CUDA's bench points go through: two streams and two device buffers of the top
    /// size.
    pub(crate) struct CudaTransfers {
        gpu: Gpu,
        // Streams first: they synchronise on drop, before the buffers below are freed.
        s1: Stream,
        s2: Stream,
        a: DeviceMem,
        b: DeviceMem,
    }

    /// The transfers and their host memory kept across points (see `ClPoints`).
    pub(crate) struct Points {
        // The transfers first: their streams synchronise on drop, before `host` is freed.
        transfers: CudaTransfers,
        host: PinnedHost,
    }

    impl Points {
        pub(crate) fn new(gpu: &Gpu, p: CudaPinning, top: usize) -> Result<Self, CudaError> {
            let transfers = CudaTransfers::new(gpu, top)?;
            let mut host = gpu.pinned(2 * top, p)?;
            crate::tools::random::fill_random(vec![host.as_mut_slice()], 17);
            Ok(Points { transfers, host })
        }

        /// One pass of each direction at `size`.
        pub(crate) fn point(&mut self, size: usize) -> Result<Point, CudaError> {
            self.transfers.point(&mut self.host, size, 1)
        }

        /// One pass of `k` blocks of `size` in `dir`.
        pub(crate) fn pass(&mut self, dir: Dir, size: usize, k: usize) -> Result<Pass, CudaError> {
            Ok(self.transfers.pass(&mut self.host, dir, size, k)?.0)
        }
    }

    impl CudaTransfers {
        pub(crate) fn new(gpu: &Gpu, top: usize) -> Result<CudaTransfers, CudaError> {
            Ok(CudaTransfers {
                s1: gpu.stream()?,
                s2: gpu.stream()?,
                a: gpu.alloc(top)?,
                b: gpu.alloc(top)?,
                gpu: gpu.clone(),
            })
        }

        pub(crate) fn curve(
            &self,
            p: CudaPinning,
            sizes: &[usize],
            top: usize,
            repeats: usize,
        ) -> Result<Vec<Point>, CudaError> {
            let mut host = self.gpu.pinned(2 * top, p)?;
            crate::tools::random::fill_random(vec![host.as_mut_slice()], 17);
            let r = sizes
                .iter()
                .map(|&size| self.point(&mut host, size, repeats))
                .collect();
            // No copy may outlive `host`: both streams, whatever happened.
            let (a, b) = (self.s1.synchronize(), self.s2.synchronize());
            a?;
            b?;
            r
        }

        fn point(
            &self,
            host: &mut PinnedHost,
            size: usize,
            repeats: usize,
        ) -> Result<Point, CudaError> {
            measure_point(size, repeats, |dir, k| self.pass(host, dir, size, k))
        }

        /// As `ClTransfers::pass`, through CUDA.
        pub(crate) fn pass(
            &self,
            host: &mut PinnedHost,
            dir: Dir,
            size: usize,
            k: usize,
        ) -> Result<(Pass, u64), CudaError> {
            let top = host.len() / 2;
            let (pass, profiles) = self.timed(|ev| {
                for _ in 0..k {
                    if dir != Dir::Down {
                        ev.push(host.upload(&self.s1, 0..size, &self.a, 0, &[])?);
                    }
                    if dir != Dir::Up {
                        let (s, buf) = if dir == Dir::Both {
                            (&self.s2, &self.b)
                        } else {
                            (&self.s1, &self.a)
                        };
                        ev.push(host.download(s, buf, 0, top..top + size, &[])?);
                    }
                }
                Ok(())
            })?;
            Ok((pass, profiles.iter().map(|p| p.duration_ns()).sum()))
        }

        /// Runs `enqueue`, waits for its copies; the pass and each copy's device times.
        fn timed(
            &self,
            enqueue: impl FnOnce(&mut Vec<Timed>) -> Result<(), CudaError>,
        ) -> Result<(Pass, Vec<Profile>), CudaError> {
            let base = self.s1.mark()?;
            base.wait()?;
            let mut events = Vec::new();
            let start = Instant::now();
            let r = enqueue(&mut events);
            for e in &events {
                e.wait()?;
            }
            r?;
            let wall_s = start.elapsed().as_secs_f64();
            let profiles = events
                .iter()
                .map(|e| e.profile(&base))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((Pass::from_profiles(wall_s, &profiles), profiles))
        }
    }
}

/// A direction of a bench pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    /// Host to device.
    Up,
    /// Device to host.
    Down,
    /// Both at once, on two queues.
    Both,
}

/// One block size, whatever the API: `pass(dir, k)` moves `k` blocks of `size` in `dir` and
/// returns its pass and the commands' summed busy time (ns); H2D, D2H and both ways in turn,
/// `repeats` times.
fn measure_point<E>(
    size: usize,
    repeats: usize,
    mut pass: impl FnMut(Dir, usize) -> Result<(crate::tools::doctor::Pass, u64), E>,
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

/// What OpenCL's bench points go through: two queues and two device buffers of the top size.
struct ClTransfers {
    q1: Queue,
    q2: Queue,
    a: DeviceBuffer,
    b: DeviceBuffer,
}

/// One OpenCL strategy's transfers and region kept across points, so `compare` can measure a
/// point of each API in turn (paired passes) instead of a whole curve of one and then the
/// other.
pub(crate) struct ClPoints {
    transfers: ClTransfers,
    region: HostRegion,
}

impl ClPoints {
    /// Device buffers of `top` bytes and a `2 * top` region pinned with `s`.
    pub(crate) fn new(ctx: &Context, s: Strategy, top: usize) -> Result<Self, BenchError> {
        check_top(ctx.device(), top)?;
        let transfers = ClTransfers::new(ctx, top)?;
        let region = transfers.region(ctx, s, top)?;
        Ok(ClPoints { transfers, region })
    }

    /// One pass of each direction at `size`.
    pub(crate) fn point(&mut self, size: usize) -> Result<Point, HostError> {
        self.transfers.point(&mut self.region, size, 1)
    }

    /// One pass of `k` blocks of `size` in `dir`.
    pub(crate) fn pass(&mut self, dir: Dir, size: usize, k: usize) -> Result<Pass, HostError> {
        Ok(self.transfers.pass(&mut self.region, dir, size, k)?.0)
    }
}

/// Blocks per pass at `size`: about `PER_REPEAT` bytes, at most `MAX_TRANSFERS`.
pub(crate) fn transfers_per_pass(size: usize) -> usize {
    (PER_REPEAT / size.max(1)).clamp(1, MAX_TRANSFERS)
}

/// The block sizes' top must fit one device allocation, and twice it the host.
fn check_top(dev: &DeviceInfo, top: usize) -> Result<(), BenchError> {
    if top as u64 > dev.max_alloc {
        return Err(BenchError::Size {
            size: top,
            max_alloc: dev.max_alloc,
        });
    }
    pinstream::host::check_size(2 * top)?;
    Ok(())
}

impl ClTransfers {
    /// Two queues and two device buffers of `top` bytes, committed now (drivers may allocate
    /// on first use).
    fn new(ctx: &Context, top: usize) -> Result<ClTransfers, ClError> {
        let t = ClTransfers {
            q1: ctx.queue()?,
            q2: ctx.queue()?,
            a: ctx.device_buffer(top)?,
            b: ctx.device_buffer(top)?,
        };
        t.q1.fill(&t.a, 0, top, 1)?.wait()?;
        t.q1.fill(&t.b, 0, top, 2)?.wait()?;
        Ok(t)
    }

    /// A `2 * top` region pinned with `s`, filled with random bytes.
    fn region(&self, ctx: &Context, s: Strategy, top: usize) -> Result<HostRegion, HostError> {
        let opts = PinOptions {
            strategy: StrategyChoice::Forced(s),
            ..Default::default()
        };
        let mut region = HostRegion::new(ctx, 2 * top, &opts)?;
        crate::tools::random::fill_random(region.slices_mut(0..2 * top)?, 17);
        Ok(region)
    }

    fn curve(
        &self,
        ctx: &Context,
        s: Strategy,
        sizes: &[usize],
        top: usize,
        repeats: usize,
    ) -> Result<Vec<Point>, HostError> {
        let mut region = self.region(ctx, s, top)?;
        sizes
            .iter()
            .map(|&size| self.point(&mut region, size, repeats))
            .collect()
    }

    fn point(
        &self,
        region: &mut HostRegion,
        size: usize,
        repeats: usize,
    ) -> Result<Point, HostError> {
        measure_point(size, repeats, |dir, k| self.pass(region, dir, size, k))
    }

    /// Moves `k` blocks of `size` in `dir` (uploads from the region's lower half, downloads
    /// into its upper half); the pass and the commands' summed busy time (ns).
    fn pass(
        &self,
        region: &mut HostRegion,
        dir: Dir,
        size: usize,
        k: usize,
    ) -> Result<(Pass, u64), HostError> {
        let top = region.len() / 2;
        let (pass, profiles) = self.timed(|ev| {
            for _ in 0..k {
                if dir != Dir::Down {
                    ev.extend(region.upload(&self.q1, 0..size, &self.a, 0, &[])?);
                }
                if dir != Dir::Up {
                    let (q, buf) = if dir == Dir::Both {
                        (&self.q2, &self.b)
                    } else {
                        (&self.q1, &self.a)
                    };
                    ev.extend(region.download(q, buf, 0, top..top + size, &[])?);
                }
            }
            Ok(())
        })?;
        // A transfer may be several commands (one per chunk it crosses): their sum.
        Ok((pass, profiles.iter().map(Profile::duration_ns).sum()))
    }

    fn timed(
        &self,
        enqueue: impl FnOnce(&mut Vec<Event>) -> Result<(), HostError>,
    ) -> Result<(Pass, Vec<Profile>), HostError> {
        let mut events = Vec::new();
        let start = Instant::now();
        enqueue(&mut events)?;
        // One wait per queue, not one `clWaitForEvents` per command: waiting on each event
        // in turn is a cost of the measuring loop, not of the transfers (issue 13; `bench
        // --latency` shows both ways side by side).
        self.q1.finish()?;
        self.q2.finish()?;
        let wall_s = start.elapsed().as_secs_f64();
        let profiles = events
            .iter()
            .map(|e| e.profile().map(Profile::from))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((Pass::from_profiles(wall_s, &profiles), profiles))
    }
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
