//! `pinstream demo`: a self-checking run sized to the machine. A built-in kernel in place over
//! data larger than the VRAM budget, and y = W·x over f16 weights, each block checked against
//! a CPU reference.

mod data;
mod streams;

use streams::{gemv, in_place};
pub(crate) use streams::{Gemv, InPlace};

use super::doctor::DoctorDevice;
use crate::kernels::Builtins;
use pinstream::backend::adapter::DeviceKind;
use pinstream::backend::api::{Device, WaitMode};
use pinstream::engine::pool::default_budget;
use pinstream::engine::{DType, Residency, StreamError, StreamOptions, StreamReport, WorkSize};
use pinstream::host::{HostApi, HostError, StrategyChoice};
use pinstream::units::Bytes;
use pinstream::vram::VramProbe;
use serde::Serialize;

/// Sizes of a demo run.
#[derive(Debug, Clone, Serialize)]
pub struct DemoConfig {
    /// Bytes of data per workload.
    pub data_bytes: usize,
    /// Device memory the stream may use.
    pub vram_budget: u64,
    /// Input bytes per block.
    pub block_bytes: usize,
    /// Columns of W.
    pub cols: usize,
    /// Pinning strategy (OpenCL's; see [`Self::pinning`]).
    #[serde(skip)]
    pub strategy: StrategyChoice,
    /// Also run each workload on one in-order queue.
    pub compare_sequential: bool,
    /// Passes over each workload's data (in place, each reads what the one before wrote).
    pub passes: usize,
    /// Blocks kept in device memory across passes.
    pub residency: Residency,
    /// Seed of the data.
    pub seed: u64,
    /// How the sizes were chosen.
    pub sizing: String,
    /// Stop request, passed to the streams (see [`StreamOptions::stop`]).
    #[serde(skip)]
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>,
}

impl DemoConfig {
    /// Sizes the demo to the machine: 10 GiB per workload where the GPU and RAM allow it
    /// (with a 4 GiB VRAM budget), 1 GiB on a CPU device; never more than a third of the
    /// host memory available.
    pub fn for_machine(device: &impl Device, probe: &VramProbe) -> Self {
        let dev = device.info();
        let avail = pinstream::backend::os::host_room()
            .map(|r| r.bytes)
            .unwrap_or(dev.memory);
        let gpu = dev.kind == DeviceKind::Gpu;
        let (want, block): (u64, usize) = if gpu {
            (10 << 30, 64 << 20)
        } else {
            (1 << 30, 32 << 20)
        };
        let data = want.min(avail / 3) / block as u64 * block as u64;
        let (free_half, how) = default_budget(dev.memory, probe);
        let budget = if gpu {
            (4u64 << 30).min(free_half)
        } else {
            (data / 4).min(free_half)
        };
        DemoConfig {
            data_bytes: data as usize,
            vram_budget: budget,
            block_bytes: block,
            cols: if gpu { 8192 } else { 4096 },
            strategy: StrategyChoice::Auto,
            compare_sequential: false,
            passes: 1,
            residency: Residency::Auto,
            seed: 0x5eed,
            stop: None,
            sizing: format!(
                "{} device, {} host memory available: {} per workload, VRAM budget {} (the default would be {how})",
                kind_name(dev.kind),
                Bytes(avail),
                Bytes(data),
                Bytes(budget)
            ),
        }
    }
}

/// A device kind as OpenCL's `CL_DEVICE_TYPE` names it.
fn kind_name(kind: DeviceKind) -> &'static str {
    match kind {
        DeviceKind::Gpu => "GPU",
        DeviceKind::Cpu => "CPU",
        DeviceKind::Other => "OTHER",
    }
}

impl DemoConfig {
    /// [`Self::strategy`] as `A`'s way to pin: `None` for `auto` (the API's own choice); a
    /// forced strategy where `A` pins by OpenCL's strategies, else why not.
    pub fn pinning<A: HostApi>(&self) -> Result<Option<A::Pinning>, DemoError> {
        let StrategyChoice::Forced(s) = self.strategy else {
            return Ok(None);
        };
        let any: &dyn std::any::Any = &s;
        any.downcast_ref::<A::Pinning>()
            .map(|p| Some(*p))
            .ok_or_else(|| {
                DemoError::Pinning(format!(
                    "--strategy {s} is an OpenCL strategy, and {} pins its own way: leave --strategy at auto",
                    A::NAME
                ))
            })
    }

    /// The stream options of a workload over `dtype` (in place, one output per input).
    pub(crate) fn stream_options(&self, dtype: DType, sequential: bool) -> StreamOptions {
        StreamOptions {
            dtype,
            out_dtype: dtype,
            block_bytes: self.block_bytes,
            in_per_out: 1,
            slots: None,
            vram_budget: self.vram_budget,
            work: WorkSize::default(),
            sequential,
            stop: self.stop.clone(),
            // The demo's kernels are pinstream's own, each result checked against its CPU
            // reference: no bounds guard, so its budget sizing holds as on a GPU.
            check_bounds: pinstream::engine::BoundsCheck::Off,
            passes: self.passes,
            residency: self.residency,
        }
    }

    /// The y = W·x workload's shape and seed: (rows, cols, seed of W and x).
    pub(crate) fn gemv_shape(&self) -> (usize, usize, u64) {
        (
            self.data_bytes / (self.cols * 2),
            self.cols,
            self.seed ^ 0xA5A5,
        )
    }

    /// The y = W·x block: whole rows of W, about `block_bytes`.
    pub(crate) fn gemv_block_bytes(&self) -> usize {
        (self.block_bytes / (self.cols * 2)).max(1) * self.cols * 2
    }
}

/// Why the demo failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Pinning failed (a front adds the flag that fixes it, where one does).
    #[error(transparent)]
    Host(#[from] HostError),
    /// The stream failed.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// The strategy asked for is not one of this API's ways to pin.
    #[error("{0}")]
    Pinning(String),
    /// A built-in kernel did not build (a driver problem).
    #[error("a built-in kernel did not build on this driver: {0}")]
    Build(String),
}

/// One workload's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Workload {
    /// Short name.
    pub name: &'static str,
    /// What it computes.
    pub description: String,
    /// Strategy of the regions.
    pub strategy: String,
    /// Why.
    pub strategy_reason: String,
    /// Bytes pinned (data, output, residents).
    pub pinned_bytes: u64,
    /// Seconds to pin them.
    pub pin_s: f64,
    /// VRAM rise from pinning, where a counter exists.
    pub vram_pin_cost: Option<i64>,
    /// With several devices: the streamed region's registration with each other device's
    /// context, and its VRAM cost measured on that device.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub registrations: Vec<pinstream::host::SharedRegistration>,
    /// VRAM peak during the stream over the reading just before it.
    pub vram_peak_over_before: Option<i64>,
    /// Pinned progressively (`register` chunk by chunk in the background while the stream
    /// runs, the data written into each chunk as it is made resident; see
    /// `pinstream::host::Progressive`).
    pub progressive: bool,
    /// Milliseconds from the start of pinning (the call; the kernel is built before) until
    /// the host saw the first block's upload complete: pinning, filling and the stream's
    /// start, as a program sees them.
    pub first_block_ms: Option<f64>,
    /// Seconds from the start of pinning until the last chunk was pinned (all of it, for
    /// memory pinned up front).
    pub pin_done_s: f64,
    /// Seconds from the start of pinning until the stream (the last one, with the
    /// sequential baseline) returned: pinning, filling and streaming as a program sees them.
    pub done_s: Option<f64>,
    /// A progressive pin's chunks, each as the driver pinned it (bytes, start after the call,
    /// duration), and the failure that stopped the others (empty: pinned up front).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub chunk_pins: Vec<pinstream::host::ChunkPin>,
    /// The stream.
    pub stream: StreamReport,
    /// The process's CPU seconds (user + system, all threads) during the stream.
    pub cpu_s: f64,
    /// Those per GiB the stream moved across the bus (uploads and downloads).
    pub cpu_s_per_gib: f64,
    /// The same on one in-order queue.
    pub sequential: Option<StreamReport>,
    /// Elements (or rows) checked against the CPU reference.
    pub checked: u64,
    /// Those that differ.
    pub mismatches: u64,
}

/// The demo's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct DemoReport {
    /// The device (the first, with several): OpenCL's description, or the API's.
    pub device: DoctorDevice,
    /// Every device of the run, with several (each streams a contiguous share of the blocks
    /// through a ring and a VRAM budget of its own).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DoctorDevice>,
    /// The VRAM counter.
    pub vram_source: &'static str,
    /// Sizes.
    pub config: DemoConfig,
    /// How OpenCL waited for commands (`driver` or `sleep`, `--wait`).
    pub wait: pinstream::backend::opencl::wait::WaitMode,
    /// In place, then y = W·x.
    pub workloads: Vec<Workload>,
    /// How the device copied, where its API offers a choice (Vulkan's `--vk-copy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copies: Option<String>,
}

impl DemoReport {
    /// True when every check passed.
    pub fn ok(&self) -> bool {
        self.workloads
            .iter()
            .all(|w| w.mismatches == 0 && w.checked > 0)
    }
}

/// Progress: (workload, blocks done, bytes done).
pub type DemoProgress<'a> = &'a (dyn Fn(&str, u64, u64) + Sync);

/// Runs both workloads over `devices` (the first device's `probe`), pinned by `pinning`
/// (`None`: the API's own choice). With `progressive`, the in-place workload's data is pinned
/// as the stream goes (one device only; see [`Workload::progressive`]); y = W·x pins up
/// front (its weights are filled whole, and its resident x and output y are needed whole
/// before the first block).
pub fn workloads<A: HostApi + Builtins>(
    devices: &[A::Device],
    probe: &VramProbe,
    cfg: &DemoConfig,
    pinning: Option<A::Pinning>,
    progressive: bool,
    progress: DemoProgress,
) -> Result<Vec<Workload>, DemoError> {
    Ok(vec![
        in_place::<A>(devices, probe, cfg, pinning, progressive, progress)?,
        gemv::<A>(devices, probe, cfg, pinning, progress)?,
    ])
}

impl DemoReport {
    /// The report of `workloads` run over `devices` (as their driver or API describes them)
    /// with `cfg`, waiting for commands as `wait` says.
    pub fn new(
        devices: &[DoctorDevice],
        probe: &VramProbe,
        cfg: &DemoConfig,
        wait: WaitMode,
        workloads: Vec<Workload>,
    ) -> Self {
        DemoReport {
            device: devices[0].clone(),
            devices: match devices {
                [_] => Vec::new(),
                all => all.to_vec(),
            },
            vram_source: probe.source().describe(),
            config: cfg.clone(),
            wait,
            workloads,
            copies: None,
        }
    }
}

fn delta(before: Option<u64>, after: Option<u64>) -> Option<i64> {
    Some(after? as i64 - before? as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinstream::backend::opencl::OpenCl;
    use pinstream::host::Strategy;

    #[test]
    fn the_strategy_is_opencls_pinning_and_auto_every_apis_own() {
        let mut cfg = DemoConfig {
            data_bytes: 1 << 20,
            vram_budget: 1 << 20,
            block_bytes: 1 << 16,
            cols: 64,
            strategy: StrategyChoice::Auto,
            compare_sequential: false,
            passes: 1,
            residency: Residency::Auto,
            seed: 1,
            sizing: String::new(),
            stop: None,
        };
        assert_eq!(cfg.pinning::<OpenCl>().unwrap(), None);
        cfg.strategy = StrategyChoice::Forced(Strategy::Register);
        assert_eq!(cfg.pinning::<OpenCl>().unwrap(), Some(Strategy::Register));
        // Any other API pins its own way: an OpenCL strategy is refused, naming the fix.
        let e = cfg
            .pinning::<pinstream::backend::empty::Empty>()
            .unwrap_err();
        assert!(e.to_string().contains("leave --strategy at auto"), "{e}");
    }
}
