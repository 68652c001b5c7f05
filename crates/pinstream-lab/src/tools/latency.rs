//! `pinstream bench latency`: one small write, host to device, by every way of issuing and
//! waiting for it, side by side in one run on the same memory, through any API ([`latency`]):
//! the API's own calls ([`NativeCopies::upload_floor_over`]: on OpenCL the driver called
//! directly, `backend::opencl::raw_writes`; on Vulkan a recorded `vkCmdCopyBuffer`,
//! `vkQueueSubmit` and a fence), waited for each way a program can; pinstream's own path on
//! the same kinds of queue (module `lanes`); and CUDA's `cuMemcpyHtoDAsync`
//! (`backend::cuda::raw_copies`) on the same GPU where CUDA is there. Each row gives the
//! median and fastest wall time per transfer and the process's CPU time per transfer (a wait
//! that spins a core shows CPU ≈ wall).

mod lanes;

use crate::tools::bench::BenchError;
use crate::tools::doctor::DoctorDevice;
use crate::tools::OnCuda;
use lanes::LanesPath;
use pinstream::backend::api::Device;
use pinstream::backend::error::BackendError;
use pinstream::backend::lanes::HostMemory;
use pinstream::backend::native::{FloorWait, NativeCopies, UploadFloor};
use pinstream::backend::os::cpu_time;
use pinstream::host::{HostApi, PinRequest, Pinned};
use pinstream::units::median;
use serde::Serialize;

/// Transfers before each size's rows, not timed (the driver's first ones are slower).
const WARM_UP: usize = 200;
/// Bytes a back-to-back batch aims at (batches hold 4 to 256 transfers).
const BATCH_BYTES: usize = 64 << 20;

/// Who makes a row's transfer, and how: what the summary picks rows by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Maker {
    /// An API's own upload calls (`opencl`: the driver called directly), waited for so.
    Own {
        /// The API's id (`opencl`, `cuda`, `vulkan`).
        api: &'static str,
        /// How the calls are waited for.
        wait: FloorWait,
    },
    /// pinstream's upload, waited for as a program would (`sleep`: with `WaitMode::Sleep`).
    Pinstream {
        /// Waited for with `WaitMode::Sleep`.
        sleep: bool,
    },
}

impl Maker {
    /// The row's `api`: the API whose own calls make it (`opencl`: the driver called
    /// directly), or `pinstream`.
    pub fn api(self) -> &'static str {
        match self {
            Maker::Own { api, .. } => api,
            Maker::Pinstream { .. } => "pinstream",
        }
    }

    /// Whether the row counts toward the floor and the gaps: a whole transfer waited for
    /// the default way (not the enqueue call alone, not `WaitMode::Sleep`).
    fn waits_whole(self) -> bool {
        !matches!(
            self,
            Maker::Own {
                wait: FloorWait::EnqueueOnly,
                ..
            } | Maker::Pinstream { sleep: true }
        )
    }
}

/// One way of making the transfer, at one size.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `opencl` (the driver called directly), `pinstream` or `cuda`: [`Maker::api`].
    pub api: &'static str,
    /// Who makes the transfer, and how (not in the report: `api` and `path` say it).
    #[serde(skip)]
    pub maker: Maker,
    /// What the row does.
    pub path: String,
    /// True for transfers enqueued back to back and waited for once per batch.
    pub back_to_back: bool,
    /// The queue had event profiling on (`CL_QUEUE_PROFILING_ENABLE`, what a program that
    /// reads device times needs; it costs the NVIDIA driver 6–7 µs per waited command).
    pub profiled: bool,
    /// Transfers per timed sample (1, or the batch).
    pub per_sample: usize,
    /// Median wall time per transfer, µs.
    pub median_us: f64,
    /// Fastest sample's wall time per transfer, µs.
    pub min_us: f64,
    /// The process's CPU time (user + system) per transfer, µs.
    pub cpu_us: f64,
    /// Bytes per median wall time, GB/s; `None` where the timed span is not a whole
    /// transfer (the enqueue call alone), so bytes over it are no bandwidth.
    pub gbps: Option<f64>,
}

/// Every row of one size.
#[derive(Debug, Clone, Serialize)]
pub struct SizeRows {
    /// Bytes per transfer.
    pub size: usize,
    /// The rows.
    pub rows: Vec<Row>,
    /// pinstream's waited median minus the fastest of the driver's waited medians on the
    /// same kind of queue (without profiling: the floor), µs.
    pub waited_gap_us: Option<f64>,
    /// The same on queues with profiling, µs.
    pub profiled_gap_us: Option<f64>,
    /// What event profiling costs one waited transfer: the driver's `clWaitForEvents` row on
    /// a queue with profiling minus the same without, µs.
    pub profiling_cost_us: Option<f64>,
    /// pinstream's fastest back-to-back GB/s over CUDA's, where CUDA was measured.
    pub back_to_back_vs_cuda: Option<f64>,
    /// The driver's own fastest back-to-back GB/s over CUDA's: the ceiling of the row above.
    pub driver_back_to_back_vs_cuda: Option<f64>,
}

/// The report of `bench latency`, through any API.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyReport {
    /// The API pinstream's rows went through (`opencl`, `vulkan`).
    pub api: &'static str,
    /// The device.
    pub device: DoctorDevice,
    /// The API whose own calls the gaps are to (its id: on OpenCL, the driver called
    /// directly).
    pub floor: &'static str,
    /// How pinstream's memory was pinned (OpenCL: the strategy asked for).
    pub pinning: String,
    /// How the device copies, where its API offers a choice.
    pub copies: Option<String>,
    /// Timed samples per row.
    pub samples: usize,
    /// Per size.
    pub sizes: Vec<SizeRows>,
    /// Why there are no CUDA rows, if there are none.
    pub cuda_unavailable: Option<String>,
}

/// Back-to-back transfers per batch at `size`.
pub fn batch_len(size: usize) -> usize {
    (BATCH_BYTES / size.max(1)).clamp(4, 256)
}

/// Measures every row at every size on `device` (described as `described`), pinstream's
/// memory pinned by `pinning` (`None`: the API's own choice); `cuda` adds CUDA's rows on the
/// same GPU where CUDA can measure it (the floor is released first), or says why not.
pub fn latency<A: HostApi>(
    device: &A::Device,
    described: DoctorDevice,
    pinning: Option<A::Pinning>,
    (sizes, samples): (&[usize], usize),
    cuda: Option<OnCuda<'_>>,
) -> Result<LatencyReport, BenchError> {
    let top = *sizes.iter().max().unwrap_or(&4096);
    let native = A::native_copies(device).ok_or(BenchError::NoPinning(A::NAME))?;
    let request = PinRequest {
        pinning,
        ..Default::default()
    };
    let mut host = A::pin(device, top, request)?;
    crate::tools::random::fill_random(host.slices_mut(0..top)?, 17);
    let buf = device.allocate(top).map_err(Into::into)?;
    let floor = match host.slices(0..top)?.as_slice() {
        [one] => native.upload_floor_over(one)?,
        _ => {
            let fill = &mut |b: &mut [u8]| crate::tools::random::fill_random(vec![b], 17);
            native.upload_floor(top, fill)?
        }
    };
    let ours = LanesPath::<A> {
        device,
        buf: &buf,
        host: &host,
    };
    let mut out = Vec::new();
    for &size in sizes {
        let mut rows = Vec::new();
        for profiled in [true, false] {
            rows.extend(floor_rows(A::ID, &*floor, (size, samples), profiled)?);
            rows.extend(ours.rows(size, samples, profiled)?);
        }
        out.push(SizeRows::of(size, rows));
    }
    drop(floor);
    let cuda_unavailable =
        cuda.and_then(|on| on(&mut |n| cuda_rows(n, top, samples, &mut out)).err());
    out.iter_mut().for_each(|s| s.summarise_against(A::ID));
    Ok(LatencyReport {
        api: A::ID,
        device: described,
        floor: A::ID,
        pinning: host.pinning_name(),
        copies: device.copy_way(),
        samples,
        sizes: out,
        cuda_unavailable,
    })
}

impl SizeRows {
    /// `rows` of `size`, not summed up yet.
    fn of(size: usize, rows: Vec<Row>) -> Self {
        SizeRows {
            size,
            rows,
            waited_gap_us: None,
            profiled_gap_us: None,
            profiling_cost_us: None,
            back_to_back_vs_cuda: None,
            driver_back_to_back_vs_cuda: None,
        }
    }

    /// The gaps to `floor`'s own calls (on queues of each kind where they have both: the
    /// OpenCL driver's; otherwise whatever its queues time) and the ratios to CUDA.
    fn summarise_against(&mut self, floor: &'static str) {
        let rows = &self.rows;
        let pick = |api: &'static str, b2b: bool, profiled: Option<bool>| {
            rows.iter().filter(move |r| {
                r.api == api
                    && r.back_to_back == b2b
                    && profiled.is_none_or(|p| r.profiled == p)
                    && r.maker.waits_whole()
            })
        };
        let fastest = |it: &mut dyn Iterator<Item = &Row>| it.map(|r| r.median_us).reduce(f64::min);
        let gap = |profiled: Option<bool>| {
            let floor = fastest(&mut pick(floor, false, profiled));
            let ours = fastest(&mut pick("pinstream", false, profiled));
            ours.zip(floor).map(|(o, f)| o - f)
        };
        let kinds = rows.iter().any(|r| r.api == floor && r.profiled);
        self.waited_gap_us = gap(kinds.then_some(false));
        self.profiled_gap_us = kinds.then(|| gap(Some(true))).flatten();
        let wait_event = |profiled: bool| {
            pick(floor, false, Some(profiled))
                .find(|r| {
                    matches!(
                        r.maker,
                        Maker::Own {
                            wait: FloorWait::Event,
                            ..
                        }
                    )
                })
                .map(|r| r.median_us)
        };
        self.profiling_cost_us = wait_event(true).zip(wait_event(false)).map(|(a, b)| a - b);
        let best_gbps = |api: &'static str| {
            rows.iter()
                .filter(|r| r.api == api && r.back_to_back)
                .filter_map(|r| r.gbps)
                .reduce(f64::max)
        };
        let cuda = best_gbps("cuda");
        self.back_to_back_vs_cuda = best_gbps("pinstream").zip(cuda).map(|(o, c)| o / c);
        self.driver_back_to_back_vs_cuda = best_gbps(floor).zip(cuda).map(|(o, c)| o / c);
    }
}

/// Times `count` samples of `per_sample` transfers of `size` bytes with `f` (which returns
/// each sample's wall time per transfer, µs) and makes the row.
fn row<E>(
    maker: Maker,
    (path, profiled): (&str, bool),
    size: usize,
    per_sample: usize,
    f: impl FnOnce() -> Result<Vec<f64>, E>,
) -> Result<Row, E> {
    let cpu = cpu_time();
    let times = f()?;
    let cpu_s = (cpu_time() - cpu).as_secs_f64();
    let median_us = median(&times);
    let transfers = (times.len() * per_sample).max(1) as f64;
    Ok(Row {
        api: maker.api(),
        maker,
        path: path.into(),
        back_to_back: per_sample > 1,
        profiled,
        per_sample,
        median_us,
        min_us: times.iter().copied().fold(f64::INFINITY, f64::min),
        cpu_us: cpu_s * 1e6 / transfers,
        gbps: Some(size as f64 / median_us / 1e3),
    })
}

/// The rows of `floor`'s ways (the own calls of API `api`) on queues with event profiling
/// or without (`profiled`), at `size`, after warming that kind of queue up.
fn floor_rows(
    api: &'static str,
    floor: &dyn UploadFloor,
    (size, samples): (usize, usize),
    profiled: bool,
) -> Result<Vec<Row>, BackendError> {
    let ways = floor.ways();
    let mut kind = ways
        .iter()
        .enumerate()
        .filter(|(_, w)| w.profiled == profiled)
        .peekable();
    if let Some((first, _)) = kind.peek() {
        floor.time(*first, size, WARM_UP, 1)?;
    }
    let (batch, batches) = (batch_len(size), (samples / 10).max(3));
    kind.map(|(i, w)| {
        let (n, per) = if w.batched {
            (batches, batch)
        } else {
            (samples, 1)
        };
        let maker = Maker::Own { api, wait: w.wait };
        let r = row(maker, (w.path, profiled), size, per, || {
            floor.time(i, size, n, per)
        })?;
        // The enqueue call alone times no transfer: bytes over it are no bandwidth.
        let gbps = r.gbps.filter(|_| w.wait != FloorWait::EnqueueOnly);
        Ok(Row { gbps, ..r })
    })
    .collect()
}

/// CUDA's rows (the floor of its own upload call, `native`), added to each size's.
fn cuda_rows(
    native: &dyn NativeCopies,
    top: usize,
    samples: usize,
    out: &mut [SizeRows],
) -> Result<(), String> {
    let fill = &mut |bytes: &mut [u8]| crate::tools::random::fill_random(vec![bytes], 17);
    let floor = native.upload_floor(top, fill).map_err(|e| e.to_string())?;
    for s in out.iter_mut() {
        let rows = floor_rows("cuda", &*floor, (s.size, samples), false);
        s.rows.extend(rows.map_err(|e| e.to_string())?);
    }
    Ok(())
}

/// A row's cells for the text table: api, queue, path, N, median, fastest, CPU, GB/s.
pub fn cells(r: &Row) -> Vec<String> {
    vec![
        r.api.into(),
        match (r.api, r.profiled) {
            ("cuda", _) => "stream",
            (_, true) => "profiled",
            (_, false) => "plain",
        }
        .into(),
        r.path.clone(),
        r.per_sample.to_string(),
        format!("{:.2}", r.median_us),
        format!("{:.2}", r.min_us),
        format!("{:.2}", r.cpu_us),
        r.gbps.map_or("-".into(), |g| format!("{g:.2}")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A waited row of `maker` with a median of `us`, on a plain queue, whatever its path
    /// says (the summary picks rows by their maker, not by their text).
    fn waited(maker: Maker, us: f64) -> Row {
        let r = row(maker, ("a row", false), 4096, 1, || Ok::<_, ()>(vec![us]));
        r.unwrap()
    }

    /// The OpenCL driver's own calls, waited for so.
    fn own(wait: FloorWait) -> Maker {
        Maker::Own {
            api: "opencl",
            wait,
        }
    }

    /// The enqueue call alone and pinstream under `WaitMode::Sleep` are left out of the
    /// floor and the gap, even when they are the fastest rows.
    #[test]
    fn the_gap_is_between_whole_transfers_waited_the_default_way() {
        let mut s = SizeRows {
            size: 4096,
            rows: vec![
                waited(own(FloorWait::Event), 10.0),
                waited(own(FloorWait::EnqueueOnly), 1.0),
                waited(Maker::Pinstream { sleep: false }, 14.0),
                waited(Maker::Pinstream { sleep: true }, 2.0),
            ],
            waited_gap_us: None,
            profiled_gap_us: None,
            profiling_cost_us: None,
            back_to_back_vs_cuda: None,
            driver_back_to_back_vs_cuda: None,
        };
        s.summarise_against("opencl");
        assert_eq!(s.waited_gap_us, Some(4.0));
        assert_eq!(s.rows[2].api, "pinstream");
    }
}
