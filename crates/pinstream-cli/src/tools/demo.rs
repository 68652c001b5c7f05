//! `pinstream demo`: a self-checking run sized to the machine. A built-in kernel in place over
//! data larger than the VRAM budget, and y = W·x over f16 weights, each block checked against
//! a CPU reference.

use super::doctor::DoctorDevice;
use pinstream::backend::adapter::DeviceKind;
use pinstream::backend::api::WaitMode;
use pinstream::backend::api::{Api, Device, Program};
use pinstream::engine::kernels::{gemv_row_ref, mix_u32_ref, value, Builtins, GEMV_GROUP};
use pinstream::engine::pool::default_budget;
use pinstream::engine::{
    run_on, DType, HostMemory, Job, Residency, StreamError, StreamOptions, StreamReport, Target,
    WorkSize,
};
use pinstream::host::{HostApi, HostError, PinRequest, Pinned, StrategyChoice};
use pinstream::par;
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
    /// Pinning failed (with the flag that fixes it, where one does).
    #[error("{}", crate::advice::host_error(.0))]
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

/// Pins `bytes` by `pinning` on the first device, shared with the others (each
/// registration's VRAM cost measured where the API registers per device); with
/// `progressive` (one device only: a second device's registration needs every chunk), chunk
/// by chunk in the background, each written by `fill` as it is made resident.
fn pin<A: HostApi>(
    devices: &[A::Device],
    cfg: &DemoConfig,
    pinning: Option<A::Pinning>,
    bytes: usize,
    progressive: Option<pinstream::host::Fill>,
) -> Result<A::HostMemory, HostError> {
    let progressive =
        progressive
            .filter(|_| devices.len() == 1)
            .map(|fill| pinstream::host::Progressive {
                block_bytes: cfg.block_bytes,
                fill: Some(fill),
            });
    let others: Vec<&A::Device> = devices[1..].iter().collect();
    let request = PinRequest {
        pinning,
        shared_with: &others,
        progressive,
        measure_shared: true,
        ..PinRequest::default()
    };
    A::pin(&devices[0], bytes, request)
}

/// Kernel `name` from `src`, built on every device.
fn build_all<A: Api>(
    devices: &[A::Device],
    src: &str,
    name: &str,
) -> Result<Vec<A::Kernel>, DemoError> {
    devices.iter().map(|d| build::<A>(d, src, name)).collect()
}

/// Streams `job` over `devices`, each with its kernel.
fn stream_over<D: pinstream::backend::api::Device>(
    devices: &[D],
    kernels: &mut [<D::A as Api>::Kernel],
    job: Job,
    opts: &StreamOptions,
    progress: StreamProgress,
) -> Result<StreamReport, StreamError> {
    let mut targets: Vec<Target<'_, D>> = devices
        .iter()
        .zip(kernels.iter_mut())
        .map(|(d, k)| Target::new(d, k))
        .collect();
    run_on(&mut targets, job, opts, progress)
}

fn build<A: Api>(device: &A::Device, src: &str, name: &str) -> Result<A::Kernel, DemoError> {
    let p = device
        .build(src, "")
        .map_err(|e| DemoError::Build(e.to_string()))?;
    p.kernel(name).map_err(|e| DemoError::Build(e.to_string()))
}

/// Stream progress: (blocks done, bytes done).
pub(crate) type StreamProgress<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// The in-place workload on one API, pinned and built once, streamed as often as asked
/// (`compare` pairs its runs with the other API's; the demo streams it once).
pub(crate) struct InPlace<'a, A: Api, M: HostMemory> {
    devices: &'a [A::Device],
    cfg: &'a DemoConfig,
    kernels: Vec<A::Kernel>,
    x: M,
    /// VRAM rise from pinning `x`, where a counter exists.
    pub(crate) vram_pin_cost: Option<i64>,
    /// When pinning began (the call the first block is timed from; the kernel is built
    /// before).
    pub(crate) pinned_at: std::time::Instant,
}

impl<'a, A: HostApi + Builtins> InPlace<'a, A, A::HostMemory> {
    /// Builds the kernel and pins the data by `pinning` (not yet filled: see
    /// [`InPlace::fill`]); `probe` measures what pinning costs in VRAM. With `progressive`,
    /// the data is pinned chunk by chunk in the background and each chunk written as it is
    /// made resident (then [`Self::fill`] is not needed: see [`Self::is_filled`]).
    pub(crate) fn pinned(
        devices: &'a [A::Device],
        cfg: &'a DemoConfig,
        probe: Option<&VramProbe>,
        pinning: Option<A::Pinning>,
        progressive: bool,
    ) -> Result<Self, DemoError> {
        let kernels = build_all::<A>(devices, A::MIX_U32, "mix_u32")?;
        let before = probe.and_then(VramProbe::used);
        let pinned_at = std::time::Instant::now();
        let seed = cfg.seed;
        let fill: pinstream::host::Fill = std::sync::Arc::new(move |off, bytes| {
            fill_in_place_at(seed, off, bytes);
            Ok(())
        });
        let bytes = cfg.data_bytes / 4 * 4;
        let x = pin::<A>(devices, cfg, pinning, bytes, progressive.then_some(fill))?;
        let mut w = InPlace::with(devices, cfg, kernels, x);
        w.vram_pin_cost = delta(before, probe.and_then(VramProbe::used));
        w.pinned_at = pinned_at;
        Ok(w)
    }

    /// True when the data was written as it was pinned (a progressive pin).
    pub(crate) fn is_filled(&self) -> bool {
        self.x.is_progressive()
    }
}

impl<'a, A: Api, M: HostMemory> InPlace<'a, A, M> {
    /// The workload over `x` (`cfg.data_bytes / 4` u32 values) with `kernels` (the built-in
    /// `mix_u32` of the devices' API, one per device).
    pub(crate) fn with(
        devices: &'a [A::Device],
        cfg: &'a DemoConfig,
        kernels: Vec<A::Kernel>,
        x: M,
    ) -> Self {
        InPlace {
            devices,
            cfg,
            kernels,
            x,
            vram_pin_cost: None,
            pinned_at: std::time::Instant::now(),
        }
    }

    /// Writes the input: element `i` is `value(seed, i)`.
    pub(crate) fn fill(&mut self) -> Result<(), HostError> {
        let x = &mut self.x;
        fill_in_place(self.cfg.seed, x.slices_mut(0..x.len())?);
        Ok(())
    }

    /// Bytes of x, which every pass reads and writes.
    pub(crate) fn data_bytes(&self) -> u64 {
        self.x.len() as u64
    }

    /// Streams x = mix(x) once, on three queues or (`sequential`) one.
    pub(crate) fn stream(
        &mut self,
        sequential: bool,
        progress: StreamProgress,
    ) -> Result<StreamReport, StreamError> {
        let job = Job {
            in_place: Some(&mut self.x),
            ..Job::default()
        };
        let opts = self.cfg.stream_options(DType::U32, sequential);
        stream_over(self.devices, &mut self.kernels, job, &opts, progress)
    }

    /// Elements that differ from the CPU reference over the filled input, applied once per
    /// pass.
    pub(crate) fn mismatches(&self) -> Result<u64, HostError> {
        Ok(in_place_mismatches(
            (self.cfg.seed, self.cfg.passes),
            self.x.slices(0..self.x.len())?,
        ))
    }
}

/// The y = W·x workload on one API, pinned, filled and built once, streamed as often as asked.
pub(crate) struct Gemv<'a, A: Api, M: HostMemory> {
    devices: &'a [A::Device],
    cfg: &'a DemoConfig,
    kernels: Vec<A::Kernel>,
    w: M,
    x: M,
    y: M,
    rows: usize,
    /// VRAM rise from pinning W, x and y, where a counter exists.
    pub(crate) vram_pin_cost: Option<i64>,
}

impl<'a, A: HostApi + Builtins> Gemv<'a, A, A::HostMemory> {
    /// Builds the kernel, pins W, x and y by `pinning`, and fills W and x (y: see
    /// [`Gemv::reset`]).
    pub(crate) fn new(
        devices: &'a [A::Device],
        cfg: &'a DemoConfig,
        probe: Option<&VramProbe>,
        pinning: Option<A::Pinning>,
    ) -> Result<Self, DemoError> {
        let kernels = build_all::<A>(devices, A::GEMV_F16, "gemv_f16")?;
        let (rows, cols, _) = cfg.gemv_shape();
        let before = probe.and_then(VramProbe::used);
        let w = pin::<A>(devices, cfg, pinning, rows * cols * 2, None)?;
        let x = pin::<A>(devices, cfg, pinning, cols * 4, None)?;
        let y = pin::<A>(devices, cfg, pinning, rows * 4, None)?;
        let vram_pin_cost = delta(before, probe.and_then(VramProbe::used));
        let mut g = Gemv::with(devices, cfg, kernels, [w, x, y])?;
        g.vram_pin_cost = vram_pin_cost;
        Ok(g)
    }
}

impl<'a, A: Api, M: HostMemory> Gemv<'a, A, M> {
    /// The workload over `[W, x, y]` (sized by [`DemoConfig::gemv_shape`]) with `kernels`
    /// (the built-in `gemv_f16` of the devices' API, one per device); fills W and x.
    pub(crate) fn with(
        devices: &'a [A::Device],
        cfg: &'a DemoConfig,
        kernels: Vec<A::Kernel>,
        [mut w, mut x, y]: [M; 3],
    ) -> Result<Self, HostError> {
        let (rows, _, seed) = cfg.gemv_shape();
        fill_gemv(seed, w.slices_mut(0..w.len())?, x.slices_mut(0..x.len())?);
        Ok(Gemv {
            devices,
            cfg,
            kernels,
            w,
            x,
            y,
            rows,
            vram_pin_cost: None,
        })
    }

    /// Sets every y to NaN, which no row's check passes, so a row never written is caught.
    pub(crate) fn reset(&mut self) -> Result<(), HostError> {
        let y = &mut self.y;
        fill_nan(y.slices_mut(0..y.len())?);
        Ok(())
    }

    /// Bytes of W, which every pass reads.
    pub(crate) fn weight_bytes(&self) -> u64 {
        self.w.len() as u64
    }

    /// Streams W through y = W·x once, on three queues or (`sequential`) one.
    pub(crate) fn stream(
        &mut self,
        sequential: bool,
        progress: StreamProgress,
    ) -> Result<StreamReport, StreamError> {
        let cols = self.cfg.cols;
        let opts = StreamOptions {
            out_dtype: DType::F32,
            in_per_out: cols,
            block_bytes: self.cfg.gemv_block_bytes(),
            work: WorkSize {
                per_output: true,
                items_per: GEMV_GROUP,
                local: Some(GEMV_GROUP),
            },
            ..self.cfg.stream_options(DType::F16, sequential)
        };
        let job = Job {
            inputs: vec![&self.w],
            output: Some(&mut self.y),
            residents: vec![&self.x],
            args: vec![("cols".into(), cols.to_string())],
            ..Job::default()
        };
        stream_over(self.devices, &mut self.kernels, job, &opts, progress)
    }

    /// Rows of y off their CPU reference (NaN never passes).
    pub(crate) fn mismatches(&self) -> Result<u64, HostError>
    where
        M: Sync,
    {
        check_gemv(&self.w, &self.x, &self.y, self.rows, self.cfg.cols)
    }
}

fn in_place<A: HostApi + Builtins>(
    devices: &[A::Device],
    probe: &VramProbe,
    cfg: &DemoConfig,
    pinning: Option<A::Pinning>,
    progressive: bool,
    progress: DemoProgress,
) -> Result<Workload, DemoError> {
    let mut w = InPlace::<A, _>::pinned(devices, cfg, Some(probe), pinning, progressive)?;
    // The call: pinning (and filling) started there; the kernel was built before.
    let call = w.pinned_at;
    if !w.is_filled() {
        w.fill()?;
    }
    let mut first_at = None;
    let sequential = if cfg.compare_sequential {
        let s = w.stream(true, &|b, bytes| progress("in place, one queue", b, bytes))?;
        first_at = s.first_upload_at;
        w.fill()?;
        Some(s)
    } else {
        None
    };
    let before_run = probe.used();
    let ((stream, peak), cpu_s) = crate::tools::cpu::measured(|| {
        probe.peak_during(|| w.stream(false, &|b, bytes| progress("in place", b, bytes)))
    });
    let stream = stream?;
    let done_s = Some(call.elapsed().as_secs_f64());
    let first_at = first_at.or(stream.first_upload_at);
    let mismatches = w.mismatches()?;
    let x = &w.x;
    let (chunk_pins, _) = x.chunk_pins();
    let pin_done_s = chunk_pins
        .last()
        .map_or(x.pin_time().as_secs_f64(), |p| p.start_s + p.took_s);
    Ok(Workload {
        name: "in-place",
        description: format!(
            "x = mix(x) over {} u32 values ({}), in place",
            x.len() / 4,
            Bytes(x.len() as u64)
        ),
        strategy: x.pinning_name(),
        strategy_reason: x.reason(),
        pinned_bytes: x.len() as u64,
        pin_s: x.pin_time().as_secs_f64(),
        vram_pin_cost: w.vram_pin_cost,
        registrations: x.shared_with(),
        progressive: x.is_progressive(),
        first_block_ms: first_at.map(|t| t.saturating_duration_since(call).as_secs_f64() * 1e3),
        pin_done_s,
        done_s,
        chunk_pins,
        vram_peak_over_before: delta(before_run, peak),
        cpu_s,
        cpu_s_per_gib: crate::tools::cpu::per_gib(cpu_s, crate::tools::cpu::moved(&stream)),
        stream,
        sequential,
        checked: (x.len() / 4) as u64,
        mismatches,
    })
}

fn gemv<A: HostApi + Builtins>(
    devices: &[A::Device],
    probe: &VramProbe,
    cfg: &DemoConfig,
    pinning: Option<A::Pinning>,
    progress: DemoProgress,
) -> Result<Workload, DemoError> {
    let mut g = Gemv::<A, _>::new(devices, cfg, Some(probe), pinning)?;
    let sequential = if cfg.compare_sequential {
        Some(g.stream(true, &|b, bytes| progress("y = W·x, one queue", b, bytes))?)
    } else {
        None
    };
    g.reset()?;
    let before_run = probe.used();
    let ((stream, peak), cpu_s) = crate::tools::cpu::measured(|| {
        probe.peak_during(|| g.stream(false, &|b, bytes| progress("y = W·x", b, bytes)))
    });
    let stream = stream?;
    let mismatches = g.mismatches()?;
    let (w, x, y) = (&g.w, &g.x, &g.y);
    Ok(Workload {
        name: "gemv",
        description: format!(
            "y = W·x, W {} x {} f16 ({}) streamed, x resident, y f32",
            g.rows,
            cfg.cols,
            Bytes(w.len() as u64)
        ),
        strategy: w.pinning_name(),
        strategy_reason: w.reason(),
        pinned_bytes: (w.len() + x.len() + y.len()) as u64,
        pin_s: [w, x, y].iter().map(|r| r.pin_time().as_secs_f64()).sum(),
        vram_pin_cost: g.vram_pin_cost,
        registrations: w.shared_with(),
        progressive: false,
        first_block_ms: None,
        done_s: None,
        chunk_pins: Vec::new(),
        pin_done_s: [w, x, y].iter().map(|r| r.pin_time().as_secs_f64()).sum(),
        vram_peak_over_before: delta(before_run, peak),
        cpu_s,
        cpu_s_per_gib: crate::tools::cpu::per_gib(cpu_s, crate::tools::cpu::moved(&stream)),
        stream,
        sequential,
        checked: g.rows as u64,
        mismatches,
    })
}

// The demo's data, written and checked over either API's pinned memory (`parts`: one region's
// bytes, piece by piece in order), so that OpenCL and CUDA stream the same values.

/// Writes the in-place input: element `i` is `value(seed, i)`.
pub(crate) fn fill_in_place(seed: u64, parts: Vec<&mut [u8]>) {
    par::fill_with::<u32>(parts, |i| value(seed, i) as u32);
}

/// Writes bytes `off..` of the in-place input (`off` a multiple of 4), on all cores.
pub(crate) fn fill_in_place_at(seed: u64, off: usize, bytes: &mut [u8]) {
    let first = (off / 4) as u64;
    par::fill_with::<u32>(vec![bytes], |i| value(seed, first + i) as u32);
}

/// Elements of the in-place data that differ from the CPU reference applied `passes` times
/// to the data drawn from `seed`.
pub(crate) fn in_place_mismatches((seed, passes): (u64, usize), parts: Vec<&[u8]>) -> u64 {
    par::count_bad::<u32>(parts, |i, v| {
        v != (0..passes).fold(value(seed, i) as u32, |x, _| mix_u32_ref(x, i))
    })
}

/// Writes W (f16) and x (f32) of y = W·x, drawn with `seed` (see [`DemoConfig::gemv_shape`]).
pub(crate) fn fill_gemv(seed: u64, w: Vec<&mut [u8]>, x: Vec<&mut [u8]>) {
    par::fill_with::<half::f16>(w, |i| gemv_w(seed, i));
    par::fill_with::<f32>(x, |i| gemv_x(seed, i));
}

/// Sets every f32 to NaN, which no row's check passes, so a row never written is caught.
pub(crate) fn fill_nan(parts: Vec<&mut [u8]>) {
    par::fill_with::<f32>(parts, |_| f32::NAN);
}

/// Element `i` of the demo's W (drawn with `seed`), in [-1, 1].
fn gemv_w(seed: u64, i: u64) -> half::f16 {
    half::f16::from_f32((value(seed, i) % 2001) as f32 / 1000.0 - 1.0)
}

/// Element `i` of the demo's x (drawn with `seed`), in [-1, 1].
fn gemv_x(seed: u64, i: u64) -> f32 {
    (value(seed + 1, i) % 2001) as f32 / 1000.0 - 1.0
}

/// True when `got` is off row `w`·`x` by more than float32 summation can explain (NaN is).
pub(crate) fn gemv_row_bad(w: &[half::f16], x: &[f32], got: f32) -> bool {
    let (want, scale) = gemv_row_ref(w, x);
    let within = (f64::from(got) - want).abs() <= 1e-5 * scale + 1e-6;
    !within // NaN compares false, so it never passes
}

/// [`check_gemv`] over contiguous slices: W's rows, x, y.
#[cfg(test)]
fn gemv_mismatches(w: &[half::f16], x: &[f32], y: &[f32], cols: usize) -> u64 {
    let bad = std::sync::atomic::AtomicU64::new(0);
    par::for_ranges(y.len(), |r| {
        let n = r
            .filter(|&row| gemv_row_bad(&w[row * cols..(row + 1) * cols], x, y[row]))
            .count() as u64;
        bad.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    });
    bad.into_inner()
}

/// Rows whose result is off by more than float32 summation can explain (NaN never passes).
fn check_gemv(
    w: &(impl HostMemory + Sync),
    x: &impl HostMemory,
    y: &impl HostMemory,
    rows: usize,
    cols: usize,
) -> Result<u64, HostError> {
    let xs: Vec<f32> = with_typed(x, 0..x.len(), <[f32]>::to_vec)?;
    let ys: Vec<f32> = with_typed(y, 0..rows * 4, <[f32]>::to_vec)?;
    let bad = std::sync::atomic::AtomicU64::new(0);
    let err = std::sync::Mutex::new(None);
    par::for_ranges(rows, |r| {
        let count = |ws: &[half::f16]| {
            r.clone()
                .filter(|&row| {
                    let k = row - r.start;
                    gemv_row_bad(&ws[k * cols..(k + 1) * cols], &xs, ys[row])
                })
                .count() as u64
        };
        match with_typed(w, r.start * cols * 2..r.end * cols * 2, count) {
            Ok(n) => bad.fetch_add(n, std::sync::atomic::Ordering::Relaxed),
            Err(e) => {
                *err.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                0
            }
        };
    });
    match err.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(bad.into_inner()),
    }
}

/// Calls `f` with the bytes of `range` as `T`: in place where they are one aligned piece,
/// else from a copy (a range that crosses chunks).
fn with_typed<T: bytemuck::Pod, R>(
    r: &impl HostMemory,
    range: std::ops::Range<usize>,
    f: impl FnOnce(&[T]) -> R,
) -> Result<R, HostError> {
    let parts = r.slices(range.clone())?;
    if let [one] = parts.as_slice() {
        if let Ok(t) = bytemuck::try_cast_slice::<u8, T>(one) {
            return Ok(f(t));
        }
    }
    let mut v: Vec<T> = vec![T::zeroed(); range.len() / std::mem::size_of::<T>()];
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut v);
    let mut off = 0;
    for p in parts {
        bytes[off..off + p.len()].copy_from_slice(p);
        off += p.len();
    }
    Ok(f(&v))
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

    #[test]
    fn gemv_check_catches_a_wrong_row_and_nan() {
        let (rows, cols) = (5, 300);
        let w: Vec<half::f16> = (0..rows * cols).map(|i| gemv_w(7, i as u64)).collect();
        let x: Vec<f32> = (0..cols).map(|i| gemv_x(7, i as u64)).collect();
        let mut y: Vec<f32> = (0..rows)
            .map(|r| gemv_row_ref(&w[r * cols..(r + 1) * cols], &x).0 as f32)
            .collect();
        assert_eq!(gemv_mismatches(&w, &x, &y, cols), 0);
        y[1] += 0.01;
        y[3] = f32::NAN;
        assert_eq!(gemv_mismatches(&w, &x, &y, cols), 2);
    }
}
