//! Many small pieces in few large transfers: [`Gather::upload_gather`] packs host pieces into
//! pinned staging, moves the staging in one DMA per batch and places each piece on the device
//! with a kernel; [`Gather::download_scatter`] does the reverse (returning once the pieces
//! are in host memory), and [`Gather::download_scatter_async`] too, returning at once with
//! an event (see `unpack`). Made once per context (staging, queues and kernels are reused
//! by every call).
//!
//! [`Gather`] is OpenCL's: the pieces land on the caller's own queue (as
//! `cudaMemcpyBatchAsync` works on the caller's stream), and the staging outlives each call,
//! which the engine's generic [`crate::backend::lanes`] (queues of its own, everything waited
//! for at return) does not offer. So it sits beside the generic [`crate::engine`], not in it,
//! above the OpenCL backend whose pinned memory ([`HostRegion`], `backend::opencl::host`)
//! stages its pieces and whose queues it enqueues on. The same calls on every API are
//! [`BatchApi`] (`batch`): OpenCL's is [`Gather`], Vulkan's and CUDA's [`Staged`].
//!
//! Host stages, each a pinned [`HostRegion`] and a DMA queue of its own, are taken in turn
//! (two kept; more made while downloads not yet unpacked hold them): batch k+1 is packed
//! while batch k moves. Each batch moves into a device staging buffer of its own,
//! taken from a pool: one whose last copy kernel has ended, else a new one. So pinstream's
//! DMA never waits for the caller's queue, and packing a stage waits
//! (`HostRegion::as_mut_slice`) only for that stage's own last DMA: an upload never waits
//! for commands on the caller's queue (a kernel still running, a user event not yet set).
//!
//! Its parts: `plan` (batches and segment tables), `kernels` (the copy kernels' source),
//! `stage` (staging, launches and packing), `unpack` (downloads back into the caller's
//! pieces), `zerocopy` (in place from mapped memory), `overlap` (the pieces' overlap check),
//! `access`, `cache` ([`GatherCache`]) and `error`.
//!
//! ```
//! use pinstream::backend::opencl::{default_device, devices, Context};
//! use pinstream::gather::{Gather, GatherOptions};
//!
//! let all = devices()?;
//! let ctx = Context::new(default_device(&all).unwrap())?;
//! let mut gather = Gather::new(&ctx, &GatherOptions::default())?;
//! let queue = ctx.queue()?;
//! let dst = ctx.device_buffer(1 << 20)?;
//! let (a, b) = (vec![1u8; 4096], vec![2u8; 100]);
//! let done = gather.upload_gather(&queue, &dst, &[(&a[..], 8192), (&b[..], 3)], &[])?;
//! done.wait()?; // `a` and `b` were free again as soon as the call returned
//! let (mut x, mut y) = (vec![0u8; 100], vec![0u8; 10]);
//! gather.download_scatter(&queue, &dst, &mut [(&mut x[..], 3), (&mut y[..], 8192)], &[])?;
//! assert_eq!((x[0], y[9]), (2, 1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod access;
pub mod batch;
mod cache;
pub mod error;
mod kernels;
mod overlap;
pub mod plan;
mod stage;
mod unpack;
mod zerocopy;
pub use batch::{BatchApi, Staged};
pub use cache::{CachedGather, GatherCache};
pub use error::GatherError;
pub use unpack::Destination;

use kernels::KERNELS;
use stage::{data_cap, launch, pack, stage, stage_bytes, write_at};

use crate::backend::opencl::{ClError, Context, DeviceBuffer, Event, Kernel, Program, Queue};
use crate::host::HostRegion;
use plan::Batch;
use std::collections::VecDeque;

/// The most work items per segment (the kernel's limit may lower it).
const GROUP: usize = 256;
/// Batches of at least this many bytes are packed and unpacked on several threads.
const PARALLEL_FROM: usize = 256 << 10;

/// How large a gather's staging is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatherOptions {
    /// Piece bytes one batch holds (each of the two stages); larger calls are cut into
    /// batches and pipelined.
    pub capacity: usize,
    /// Segments one batch holds (a piece is one segment per 64 KiB).
    pub rows: usize,
    /// Event profiling on the staging queues, and the last call's commands kept for
    /// [`Gather::last_call_device`] (what `bench --gather` breaks its time down with). Off
    /// by default: profiling costs the NVIDIA driver ~6 µs per command.
    pub profile: bool,
    /// Whether a call refuses pieces whose written ranges overlap (the default) or the
    /// caller vouches that they are disjoint.
    pub overlap_check: OverlapCheck,
    /// Threads of the pool for a zero-copy call's checks and table rows: `None` (the
    /// default) splits only batches large enough that it paid where measured (see
    /// `gather/zerocopy/checks.rs`); `Some(t)` splits every batch over up to `t` threads,
    /// at least 1,024 pieces each, the overlap check too; `Some(1)` never splits. For
    /// measuring, on a new host, where splitting pays (examples/zero_copy_timeline).
    pub host_threads: Option<usize>,
}

/// Whether a gather call checks that the ranges it writes are disjoint (the device ranges
/// of an upload, the host ranges of a zero-copy download).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OverlapCheck {
    /// Pieces whose written ranges overlap are refused ([`GatherError::Overlap`]), since
    /// which one lands last would be undefined.
    #[default]
    On,
    /// The caller vouches that the written ranges are disjoint, as CUDA's
    /// `cudaMemcpyBatchAsync` assumes, and the check is skipped. When the pieces do not come
    /// in the written side's order it was a sort, on the H200's host 60–110 µs for 4,096
    /// pieces and 1.2–2.5 ms for 65,536, more than the zero-copy kernel's own 0.5 ms
    /// (bench/results/h200/zero-copy-host); the zero-copy calls' check is now linear
    /// (`gather/overlap.rs`, about 3× less on the 2-core test host), the staged upload's still
    /// a sort. Bounds are still checked, so nothing outside the
    /// buffer and the region is touched; if ranges do overlap, which piece's bytes land
    /// there is undefined.
    Vouched,
}

impl GatherOptions {
    /// Refuses a staging that holds nothing: fewer bytes than one aligned segment, or no row.
    pub fn check(&self) -> Result<(), GatherError> {
        match self.capacity < plan::ALIGN || self.rows == 0 {
            true => Err(GatherError::Capacity {
                bytes: self.capacity,
                rows: self.rows,
                min: plan::ALIGN,
                min_rows: 1,
            }),
            false => Ok(()),
        }
    }

    /// `capacity` bytes per batch, and a row for every 256 bytes of it (at least 64): a
    /// batch of 256-byte pieces fills its data and its table together.
    pub fn for_capacity(capacity: usize) -> Self {
        GatherOptions {
            capacity,
            rows: (capacity / 256).max(64),
            profile: false,
            overlap_check: OverlapCheck::On,
            host_threads: None,
        }
    }
}

impl Default for GatherOptions {
    /// 16 MiB and 65,536 segments per stage: a 16 MiB call of 4 KiB pieces moves in one
    /// batch down and four pipelined batches up (see `plan`). Measured on the H200 (bench/results/h200/gather-run3): at 4096 × 4 KiB, 16 MiB
    /// of staging took 981 µs up and 1115 down against 1461 and 1539 with 4 MiB in 5
    /// pipelined batches: each batch costs ~90 µs of driver calls and waits, more than the
    /// overlap of packing and DMA wins back (both draw on the same host memory bandwidth).
    fn default() -> Self {
        Self::for_capacity(16 << 20)
    }
}

/// Where the host time of the last call went: what `bench --gather` shows beside the wall
/// time, to tell packing from waiting.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct CallStats {
    /// Batches the call was cut into.
    pub batches: usize,
    /// Seconds spent copying pieces into staging (uploads) or out of it (downloads),
    /// waits for staging in use not.
    pub copy_s: f64,
    /// Seconds spent checking the pieces and cutting them into batches.
    pub plan_s: f64,
    /// Seconds from the call to its return (an upload's device work may go on after).
    pub call_s: f64,
    /// Zero-copy calls: seconds of `plan_s` spent taking a segment table and reaching its
    /// bytes (the rest is the checks and the rows); 0 elsewhere.
    pub table_s: f64,
    /// Zero-copy calls: seconds of `call_s` after `plan_s` spent setting the kernel's
    /// arguments, enqueuing it and noting its event on the mapped region (the rest is the
    /// flush and the call's bookkeeping); 0 elsewhere.
    pub launch_s: f64,
}

/// Device times of the last call's commands, by event profiling (the gather made with
/// [`GatherOptions::profile`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct DeviceTimes {
    /// DMA commands (staging to device and back) and their summed seconds.
    pub dma: (usize, f64),
    /// Copy kernels and their summed seconds; `None` where the caller's queue has no
    /// profiling.
    pub kernels: Option<(usize, f64)>,
    /// From the first command's start to the last one's end, seconds.
    pub span_s: f64,
}

/// The most free host stages kept: two, so one batch packs while the other moves.
const KEPT_STAGES: usize = 2;

/// A host staging set.
struct Stage {
    host: HostRegion,
    dma: Queue,
}

/// Device staging buffers, each with the last copy kernel that read or wrote it: a batch
/// takes one whose kernel has ended (or a new one), so no DMA waits for a caller's queue.
/// A buffer dropped while its kernel is queued stays alive in the driver until the kernel
/// ends (OpenCL keeps a memory object for the commands that use it).
struct DevicePool {
    ctx: Context,
    bytes: usize,
    idle: Vec<(DeviceBuffer, Option<Event>)>,
}

/// The most device staging buffers kept between batches; more are made while the caller's
/// queue holds kernels back, and released (by the driver, once those run) past this many.
const KEPT: usize = 4;

impl DevicePool {
    /// A buffer no queued command uses any more, made when none is free.
    fn take(&mut self) -> Result<DeviceBuffer, GatherError> {
        let free = |(_, e): &(DeviceBuffer, Option<Event>)| e.as_ref().is_none_or(Event::is_done);
        match self.idle.iter().position(free) {
            Some(i) => Ok(self.idle.swap_remove(i).0),
            None => self.ctx.device_buffer(self.bytes).map_err(cl),
        }
    }

    /// Gives `buf` back, in use until `last` ends.
    fn give(&mut self, buf: DeviceBuffer, last: Event) {
        self.idle.push((buf, Some(last)));
        if self.idle.len() > KEPT {
            self.idle.remove(0);
        }
    }
}

/// Gathered uploads and scattered downloads on one context; see the module documentation.
pub struct Gather {
    /// Host stages free for the next batch, least recently used first (an upload's stage
    /// comes back at once, its DMA still running; a download's once it is unpacked).
    stages: VecDeque<Stage>,
    devices: DevicePool,
    /// Unpacks asynchronous downloads, made by the first.
    unpacker: Option<unpack::Unpacker>,
    scatter: Kernel,
    gather: Kernel,
    /// The zero-copy kernels (`ps_rows_from_host`, `ps_rows_to_host`) and their tables in
    /// mapped memory (see `zerocopy`).
    zero_copy: [Kernel; 2],
    tables: zerocopy::Tables,
    group: usize,
    options: GatherOptions,
    last: CallStats,
    /// With `options.profile`: the last call's DMA commands and kernels.
    kept: (Vec<Event>, Vec<Event>),
    _program: Program,
}

/// The gather's unit tests' random numbers: a xorshift64 stream from `seed`, each number taken
/// below the bound it is called with.
#[cfg(test)]
fn below(seed: u64) -> impl FnMut(usize) -> usize {
    let mut x = seed;
    move |m: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % m as u64) as usize
    }
}

fn cl(e: ClError) -> GatherError {
    GatherError::from(e)
}

impl Gather {
    /// Staging for `options` in `ctx` (two pinned host regions and two device buffers, each
    /// `capacity + 24 × rows` bytes) and the copy kernels, built once.
    pub fn new(ctx: &Context, options: &GatherOptions) -> Result<Self, GatherError> {
        options.check()?;
        let program = ctx
            .build_program(KERNELS, "")
            .map_err(|e| GatherError::Build(e.to_string()))?;
        let scatter = program.kernel("ps_scatter").map_err(cl)?;
        let gather = program.kernel("ps_gather").map_err(cl)?;
        let zero_copy = [
            program.kernel("ps_rows_from_host").map_err(cl)?,
            program.kernel("ps_rows_to_host").map_err(cl)?,
        ];
        let limit = |k: &Kernel| k.work_group_limits().map(|l| l.max()).map_err(cl);
        let group = limit(&scatter)?
            .min(limit(&gather)?)
            .min(limit(&zero_copy[0])?)
            .min(limit(&zero_copy[1])?)
            .min(GROUP);
        let stages = VecDeque::from([stage(ctx, options)?, stage(ctx, options)?]);
        let bytes = stage_bytes(options);
        let idle = (0..2)
            .map(|_| Ok((ctx.device_buffer(bytes).map_err(cl)?, None)))
            .collect::<Result<_, GatherError>>()?;
        let devices = DevicePool {
            ctx: ctx.clone(),
            bytes,
            idle,
        };
        Ok(Gather {
            stages,
            devices,
            unpacker: None,
            scatter,
            gather,
            zero_copy,
            tables: zerocopy::Tables::default(),
            group,
            options: *options,
            last: CallStats::default(),
            kept: (Vec::new(), Vec::new()),
            _program: program,
        })
    }

    /// Where the host time of the last call went.
    pub fn last_call(&self) -> CallStats {
        self.last
    }

    /// Device times of the last call's commands (waiting for them first); `None` unless
    /// made with [`GatherOptions::profile`].
    pub fn last_call_device(&self) -> Result<Option<DeviceTimes>, GatherError> {
        if !self.options.profile {
            return Ok(None);
        }
        let profiles = |events: &[Event]| -> Result<Vec<_>, ClError> {
            events
                .iter()
                .map(|e| e.wait().and_then(|()| e.profile()))
                .collect()
        };
        let dma = profiles(&self.kept.0).map_err(cl)?;
        let kernels = profiles(&self.kept.1).ok();
        let all = dma.iter().chain(kernels.iter().flatten());
        let start = all.clone().map(|p| p.start).min().unwrap_or(0);
        let end = all.map(|p| p.end).max().unwrap_or(0);
        let sum = |v: &[crate::backend::api::Profile]| {
            (
                v.len(),
                v.iter().map(|p| p.duration_ns()).sum::<u64>() as f64 / 1e9,
            )
        };
        Ok(Some(DeviceTimes {
            dma: sum(&dma),
            kernels: kernels.as_deref().map(sum),
            span_s: end.saturating_sub(start) as f64 / 1e9,
        }))
    }

    /// Starts a call's record.
    fn begin(&mut self, batches: usize, plan_s: f64) {
        self.last = CallStats {
            batches,
            copy_s: 0.0,
            plan_s,
            ..CallStats::default()
        };
        self.kept.0.clear();
        self.kept.1.clear();
    }

    /// Keeps a DMA command (`dma`) or a kernel for [`Self::last_call_device`].
    fn keep(&mut self, dma: bool, events: &[Event]) {
        if self.options.profile {
            let to = if dma {
                &mut self.kept.0
            } else {
                &mut self.kept.1
            };
            to.extend(events.iter().cloned());
        }
    }

    /// The options it was made with.
    pub fn options(&self) -> GatherOptions {
        self.options
    }

    /// Sets whether later calls check that their written ranges are disjoint.
    pub fn set_overlap_check(&mut self, check: OverlapCheck) {
        self.options.overlap_check = check;
    }

    /// Copies each host piece to its offset in `dst`, on `queue` after `wait`, and returns
    /// the event of the last command (the queue is in order: when it completes, every piece
    /// is in place). The pieces are packed before the call returns, so the caller may reuse
    /// them at once. Refused: no pieces, empty pieces, ranges past `dst`, overlapping ranges.
    ///
    /// The call never waits for `queue` (see the module documentation): it may wait only
    /// for pinstream's own DMA of a previous batch out of the host staging it reuses, which
    /// depends on nothing the caller enqueued.
    pub fn upload_gather(
        &mut self,
        queue: &Queue,
        dst: &DeviceBuffer,
        pieces: &[(&[u8], usize)],
        wait: &[&Event],
    ) -> Result<Event, GatherError> {
        access::kernel_may(dst, true)?;
        let start = std::time::Instant::now();
        let shape: Vec<(usize, usize)> = pieces.iter().map(|(h, o)| (h.len(), *o)).collect();
        let writes = self.options.overlap_check == OverlapCheck::On;
        plan::check(&shape, dst.size(), writes)?;
        let batches = self.plan(&shape, true);
        self.begin(batches.len(), start.elapsed().as_secs_f64());
        let mut last = None;
        for (k, batch) in batches.iter().enumerate() {
            let first_wait = if k == 0 { wait } else { &[] };
            last = Some(self.upload_batch(queue, dst, pieces, batch, first_wait)?);
        }
        queue.flush().map_err(cl)?;
        self.last.call_s = start.elapsed().as_secs_f64();
        Ok(last.expect("checked: at least one piece, so one batch"))
    }

    /// Copies `src` at each piece's offset into the piece's host bytes, on `queue` after
    /// `wait`, and returns when every piece is in host memory (the call waits). Refused: no
    /// pieces, empty pieces, ranges past `src`. Device ranges may overlap.
    pub fn download_scatter(
        &mut self,
        queue: &Queue,
        src: &DeviceBuffer,
        pieces: &mut [(&mut [u8], usize)],
        wait: &[&Event],
    ) -> Result<(), GatherError> {
        access::kernel_may(src, false)?;
        let start = std::time::Instant::now();
        let shape: Vec<(usize, usize)> = pieces.iter().map(|(h, o)| (h.len(), *o)).collect();
        plan::check(&shape, src.size(), false)?;
        let batches = self.plan(&shape, false);
        self.begin(batches.len(), start.elapsed().as_secs_f64());
        let mut pending: Option<(Stage, &Batch)> = None;
        for (k, batch) in batches.iter().enumerate() {
            let first_wait = if k == 0 { wait } else { &[] };
            let (stage, _) = self.download_batch(queue, src, batch, first_wait)?;
            if let Some((p, b)) = pending.replace((stage, batch)) {
                self.unpack(p, b, pieces)?;
            }
        }
        let (p, b) = pending.expect("checked: at least one piece, so one batch");
        self.unpack(p, b, pieces)?;
        self.last.call_s = start.elapsed().as_secs_f64();
        Ok(())
    }

    /// Uploads in batches of a quarter stage, so packing batch k+1 may overlap batch k's DMA;
    /// downloads in whole stages, whose round trip per batch (table, kernel, DMA, wait)
    /// costs more than the overlap wins back. H200, 4096 × 4 KiB, each pair in one run:
    /// bench/results/h200/gather-run5 (whole-stage batches), uploads 862 µs in 4 batches
    /// (4 MiB staging) against 1002 in one (16 MiB), downloads 1693 µs in 4 against 958 in
    /// one; gather-final (quarter-stage uploads) 1073 µs in 4 against 1052 in one (64 MiB):
    /// a gain in one run, level in the other.
    fn plan(&self, shape: &[(usize, usize)], upload: bool) -> Vec<Batch> {
        let cap = data_cap(&self.options);
        let cap = match upload {
            true => (cap / 4).max(plan::ALIGN),
            false => cap,
        };
        plan::batches(shape, cap, self.options.rows)
    }

    /// The least recently used free host stage (the unpacker's returns taken back
    /// first, past [`KEPT_STAGES`] dropped as [`Self::put_stage`] does: they are settled,
    /// and without it downloads that never pass through `put_stage` kept every stage they
    /// made), or a new one when every stage holds a download not yet unpacked.
    fn take_stage(&mut self) -> Result<Stage, GatherError> {
        let returned: Vec<Stage> = self.unpacker.iter().flat_map(|u| u.returned()).collect();
        for stage in returned {
            self.put_stage(stage);
        }
        match self.stages.pop_front() {
            Some(s) => Ok(s),
            None => stage(&self.devices.ctx, &self.options),
        }
    }

    /// Frees `stage` for a later batch; past [`KEPT_STAGES`] the oldest is dropped (which
    /// waits for its own DMA only).
    fn put_stage(&mut self, stage: Stage) {
        self.stages.push_back(stage);
        while self.stages.len() > KEPT_STAGES {
            self.stages.pop_front();
        }
    }

    fn upload_batch(
        &mut self,
        queue: &Queue,
        dst: &DeviceBuffer,
        pieces: &[(&[u8], usize)],
        batch: &Batch,
        wait: &[&Event],
    ) -> Result<Event, GatherError> {
        let mut stage = self.take_stage()?;
        self.last.copy_s += pack(&mut stage.host, pieces, batch)?;
        let device = self.devices.take()?;
        let dma = stage
            .host
            .upload(&stage.dma, 0..batch.table_end(), &device, 0, &[])?;
        stage.dma.flush().map_err(cl)?;
        let mut deps: Vec<&Event> = dma.iter().collect();
        deps.extend_from_slice(wait);
        let k = &mut self.scatter;
        let done = launch(k, queue, &device, dst, batch, self.group, &deps)?;
        queue.flush().map_err(cl)?;
        self.devices.give(device, done.clone());
        self.put_stage(stage);
        self.keep(true, &dma);
        self.keep(false, std::slice::from_ref(&done));
        Ok(done)
    }

    /// Enqueues one batch's table upload, pack kernel and DMA down; returns its stage (the
    /// caller's until unpacked) and the DMA's events.
    fn download_batch(
        &mut self,
        queue: &Queue,
        src: &DeviceBuffer,
        batch: &Batch,
        wait: &[&Event],
    ) -> Result<(Stage, Vec<Event>), GatherError> {
        let mut stage = self.take_stage()?;
        let table = batch.table();
        let at = batch.table_offset();
        write_at(&mut stage.host, at, &table)?;
        let device = self.devices.take()?;
        let up = stage
            .host
            .upload(&stage.dma, at..at + table.len(), &device, at, &[])?;
        let mut deps: Vec<&Event> = up.iter().collect();
        deps.extend_from_slice(wait);
        let k = &mut self.gather;
        let done = launch(k, queue, &device, src, batch, self.group, &deps)?;
        queue.flush().map_err(cl)?;
        let down = stage
            .host
            .download(&stage.dma, &device, 0, 0..batch.data_end, &[&done])?;
        stage.dma.flush().map_err(cl)?;
        self.devices
            .give(device, down.last().unwrap_or(&done).clone());
        self.keep(true, &up);
        self.keep(true, &down);
        self.keep(false, &[done]);
        Ok((stage, down))
    }

    /// Copies a downloaded batch from `stage` into the caller's pieces (waiting for its
    /// DMA), then frees the stage.
    fn unpack(
        &mut self,
        mut stage: Stage,
        batch: &Batch,
        pieces: &mut [(&mut [u8], usize)],
    ) -> Result<(), GatherError> {
        self.last.copy_s += unpack::unpack(&mut stage.host, batch, pieces)?;
        self.put_stage(stage);
        Ok(())
    }
}
