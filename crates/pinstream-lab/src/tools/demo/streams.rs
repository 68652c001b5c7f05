//! The demo's two workloads over any API: pinned, filled, streamed and checked (in place, and
//! y = W·x), each measured into its [`Workload`].

use super::data::{
    check_gemv, fill_gemv, fill_in_place, fill_in_place_at, fill_nan, in_place_mismatches,
};
use super::{delta, DemoConfig, DemoError, DemoProgress, Workload};
use crate::kernels::{Builtins, GEMV_GROUP};
use pinstream::backend::api::{Api, Device, Program};
use pinstream::engine::{
    run_on, DType, HostMemory, Job, StreamError, StreamOptions, StreamReport, Target, WorkSize,
};
use pinstream::host::{HostApi, HostError, PinRequest, Pinned};
use pinstream::units::Bytes;
use pinstream::vram::VramProbe;

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

    /// `--compare-sequential`'s run: the stream on one queue, then the data filled again for
    /// the run on three.
    fn sequential(&mut self, progress: DemoProgress) -> Result<StreamReport, DemoError> {
        let s = self.stream(true, &|b, bytes| progress("in place, one queue", b, bytes))?;
        self.fill()?;
        Ok(s)
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

pub(super) fn in_place<A: HostApi + Builtins>(
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
    let sequential = match cfg.compare_sequential {
        true => Some(w.sequential(progress)?),
        false => None,
    };
    let before_run = probe.used();
    let ((stream, peak), cpu_s) = crate::tools::cpu::measured(|| {
        probe.peak_during(|| w.stream(false, &|b, bytes| progress("in place", b, bytes)))
    });
    let stream = stream?;
    let done_s = Some(call.elapsed().as_secs_f64());
    let first_at = (sequential.as_ref())
        .and_then(|s| s.first_upload_at)
        .or(stream.first_upload_at);
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

pub(super) fn gemv<A: HostApi + Builtins>(
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
