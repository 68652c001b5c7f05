//! `pinstream bench devices --devices 0,1|all`: the bandwidth points of `bench` on several GPUs at
//! once, every PCIe link busy, beside the first device alone in the same run. Each device
//! has its own context, queues, device buffers and pinned region; a pass starts on every
//! device together (a barrier) and its aggregate is the bytes of all devices over the
//! slowest device's wall time. The same through CUDA (its first pinning, `cuMemHostAlloc`) where
//! CUDA is there, so the OpenCL/CUDA ratio is given per device and in total.

use crate::tools::bench::{transfers_per_pass, BenchError, Dir, Points};
use crate::tools::doctor::DoctorDevice;
use crate::tools::passes::Pass;
use pinstream::host::HostApi;
use pinstream::units::{gb_per_s, median};
use serde::Serialize;
use std::sync::Barrier;

/// GB/s by the wall clock for each direction: the median over the repeats.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct DirRates {
    /// Host to device.
    pub h2d: f64,
    /// Device to host.
    pub d2h: f64,
    /// Both at once on two queues per device (bytes of both directions added).
    pub both: f64,
}

impl DirRates {
    /// The figure of `dir`.
    fn get(&self, dir: Dir) -> f64 {
        match dir {
            Dir::Up => self.h2d,
            Dir::Down => self.d2h,
            Dir::Both => self.both,
        }
    }

    fn set(&mut self, dir: Dir, v: f64) {
        match dir {
            Dir::Up => self.h2d = v,
            Dir::Down => self.d2h = v,
            Dir::Both => self.both = v,
        }
    }

    /// `self / other`, direction by direction (0 where `other` is 0).
    pub fn ratio(&self, other: &DirRates) -> DirRates {
        let r = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        DirRates {
            h2d: r(self.h2d, other.h2d),
            d2h: r(self.d2h, other.d2h),
            both: r(self.both, other.both),
        }
    }
}

/// One block size on every device.
#[derive(Debug, Clone, Serialize)]
pub struct DevicesPoint {
    /// Block size in bytes.
    pub size: usize,
    /// Blocks per pass per device and direction.
    pub transfers: usize,
    /// The first device alone, in the same run (the one-GPU figure).
    pub alone: DirRates,
    /// Each device while every device runs.
    pub per_device: Vec<DirRates>,
    /// Every device's bytes over the slowest device's wall time.
    pub total: DirRates,
    /// `total / alone`: what the extra devices add (the device count is the ideal).
    pub scaling: DirRates,
}

/// One API's points, or why it could not be measured.
#[derive(Debug, Clone, Serialize)]
pub struct ApiDevices {
    /// `opencl` or `cuda`.
    pub api: &'static str,
    /// The host memory: the OpenCL strategy, or CUDA's pinning.
    pub memory: String,
    /// Why it could not be measured.
    pub error: Option<String>,
    /// By block size.
    pub points: Vec<DevicesPoint>,
}

/// The report of `bench devices`.
#[derive(Debug, Clone, Serialize)]
pub struct DevicesReport {
    /// The devices, in the order of the columns (OpenCL's description, or the API's).
    pub devices: Vec<DoctorDevice>,
    /// Block sizes.
    pub sizes: Vec<usize>,
    /// Repeats per point.
    pub repeats: usize,
    /// OpenCL's points, then CUDA's where asked for and available.
    pub apis: Vec<ApiDevices>,
    /// Why CUDA was not measured, when it was asked for.
    pub cuda_unavailable: Option<String>,
}

/// Every size on every device of `devices` through `A`, host memory pinned with `pinning`:
/// the first device alone and all together. A failure to set up (pin, allocate) is the
/// error; a failure while measuring is the report's `error`.
pub fn api_devices<A: HostApi>(
    devices: &[A::Device],
    pinning: A::Pinning,
    sizes: &[usize],
    repeats: usize,
    progress: &dyn Fn(&str),
) -> Result<ApiDevices, BenchError> {
    let top = *sizes.iter().max().expect("parse_sizes gives at least one");
    progress(&format!("{}, {pinning}", A::NAME));
    let mut lanes = devices
        .iter()
        .map(|d| Points::<A>::new(d, pinning, top))
        .collect::<Result<Vec<_>, _>>()?;
    let points = sizes
        .iter()
        .map(|&size| point(&mut lanes, size, repeats.max(1)))
        .collect::<Result<Vec<_>, _>>();
    let (points, error) = match points {
        Ok(p) => (p, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    Ok(ApiDevices {
        api: A::ID,
        memory: pinning.to_string(),
        error,
        points,
    })
}

/// One size: per repeat and direction, the first device alone, then every device together.
fn point<A: HostApi>(
    lanes: &mut [Points<'_, A>],
    size: usize,
    repeats: usize,
) -> Result<DevicesPoint, String> {
    let k = transfers_per_pass(size);
    let n = lanes.len();
    let mut alone = DirRates::default();
    let mut per_device = vec![DirRates::default(); n];
    let mut total = DirRates::default();
    for dir in [Dir::Up, Dir::Down, Dir::Both] {
        let bytes = (k * size * if dir == Dir::Both { 2 } else { 1 }) as u64;
        let (mut one, mut each, mut all) = (Vec::new(), vec![Vec::new(); n], Vec::new());
        for _ in 0..repeats {
            one.push(gb_per_s(
                bytes,
                lanes[0]
                    .pass(dir, size, k)
                    .map_err(|e| e.to_string())?
                    .wall_s,
            ));
            let passes = together(lanes, dir, size, k)?;
            let slowest = passes.iter().map(|p| p.wall_s).fold(0.0, f64::max);
            all.push(gb_per_s(bytes * n as u64, slowest));
            for (d, p) in passes.iter().enumerate() {
                each[d].push(gb_per_s(bytes, p.wall_s));
            }
        }
        alone.set(dir, median(&one));
        total.set(dir, median(&all));
        for (d, v) in each.iter().enumerate() {
            per_device[d].set(dir, median(v));
        }
    }
    Ok(DevicesPoint {
        size,
        transfers: k,
        scaling: total.ratio(&alone),
        alone,
        per_device,
        total,
    })
}

/// One pass on every lane at once, each on its own thread, started together.
fn together<A: HostApi>(
    lanes: &mut [Points<'_, A>],
    dir: Dir,
    size: usize,
    k: usize,
) -> Result<Vec<Pass>, String> {
    let start = Barrier::new(lanes.len());
    std::thread::scope(|s| {
        let threads: Vec<_> = lanes
            .iter_mut()
            .map(|lane| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    lane.pass(dir, size, k).map_err(|e| e.to_string())
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err("a measuring thread panicked".into()))
            })
            .collect()
    })
}

/// The figure of `dir` in `rates`, for the text table.
pub fn rate(rates: &DirRates, dir: &str) -> f64 {
    match dir {
        "H2D" => rates.get(Dir::Up),
        "D2H" => rates.get(Dir::Down),
        _ => rates.get(Dir::Both),
    }
}
