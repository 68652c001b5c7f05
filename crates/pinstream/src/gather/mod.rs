//! Many small pieces in few large transfers: [`Gather::upload_gather`] packs host pieces into
//! pinned staging, moves the staging in one DMA per batch and places each piece on the device
//! with a kernel; [`Gather::download_scatter`] does the reverse (returning once the pieces
//! are in host memory), and [`Gather::download_scatter_async`] too, returning at once with
//! an event (see `unpack`). Made once per context (staging, queues and kernels are reused
//! by every call).
//!
//! OpenCL only: the pieces land on the caller's own queue (as `cudaMemcpyBatchAsync` works on
//! the caller's stream), and the staging outlives each call, which the engine's generic
//! [`crate::backend::lanes`] (queues of its own, everything waited for at return) does not
//! offer; CUDA's own batch call is the CUDA side of the comparison. So it sits beside the
//! generic [`crate::engine`], not in it, and above the memory layer it pins its staging with
//! ([`HostRegion`]) and the OpenCL backend it enqueues on: not inside the backend, which
//! would then call up into the memory layer that calls it.
//!
//! Host stages, each a pinned [`HostRegion`] and a DMA queue of its own, are taken in turn
//! (two kept; more made while downloads not yet unpacked hold them): batch k+1 is packed
//! while batch k moves. Each batch moves into a device staging buffer of its own,
//! taken from a pool: one whose last copy kernel has ended, else a new one. So pinstream's
//! DMA never waits for the caller's queue, and packing a stage waits
//! (`HostRegion::as_mut_slice`) only for that stage's own last DMA: an upload never waits
//! for commands on the caller's queue (a kernel still running, a user event not yet set).
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
mod cache;
pub mod error;
mod overlap;
pub mod plan;
mod unpack;
mod zerocopy;
pub use cache::{CachedGather, GatherCache};
pub use error::GatherError;
pub use unpack::Destination;

use crate::backend::opencl::{ClError, Context, DeviceBuffer, Event, Kernel, Program, Queue};
use crate::backend::os::copy_streaming;
use crate::host::{HostRegion, PinOptions};
use plan::{Batch, ROW_BYTES};
use std::collections::VecDeque;

/// The copy kernels: one work-group per segment; 16-byte accesses in the body where the two
/// sides share their alignment (the planner makes them share it), bytes at the ends.
const KERNELS: &str = r#"
static void ps_copy(__global uchar* to, __global const uchar* from, ulong n) {
    size_t l = get_local_id(0), w = get_local_size(0);
    ulong head = (16 - ((size_t)to & 15)) & 15;
    if ((((size_t)to ^ (size_t)from) & 15) != 0) head = n;
    if (head > n) head = n;
    for (ulong i = l; i < head; i += w) to[i] = from[i];
    ulong body = (n - head) >> 4;
    __global uint4* t4 = (__global uint4*)(to + head);
    __global const uint4* f4 = (__global const uint4*)(from + head);
    for (ulong i = l; i < body; i += w) t4[i] = f4[i];
    for (ulong i = head + (body << 4) + l; i < n; i += w) to[i] = from[i];
}

__kernel void ps_scatter(__global uchar* stage, __global uchar* dst, ulong table) {
    __global const ulong* row = (__global const ulong*)(stage + table) + 3 * get_group_id(0);
    ps_copy(dst + row[1], stage + row[0], row[2]);
}

__kernel void ps_gather(__global uchar* stage, __global const uchar* src, ulong table) {
    __global const ulong* row = (__global const ulong*)(stage + table) + 3 * get_group_id(0);
    ps_copy(stage + row[0], src + row[1], row[2]);
}

/* Zero-copy rows (`table`: from offset, to offset, length), one work-group each. The bus side
   (mapped host memory, `host_len` bytes) is reached in aligned 16-byte words whatever the
   pieces' misalignment, a warp's words one contiguous run, and the device side byte by byte:
   whole words keep the link busy, and device memory takes bytes at no cost that matters.
   Words are taken apart and put together with shifts, in registers (a private byte array
   made the NVIDIA compiler's writes to host memory ten times slower). The buffers start
   page-aligned, so offsets and addresses share their alignment. */
static uchar ps_byte(ulong2 w, ulong k) {
    return (uchar)((k < 8 ? w.x : w.y) >> (8 * (k & 7)));
}

/* Row `g` of a zero-copy table: three uints when `narrow`, three ulongs otherwise. */
static ulong3 ps_row(__global const ulong* table, size_t g, uint narrow) {
    __global const uint* t = (__global const uint*)table + 3 * g;
    __global const ulong* w = table + 3 * g;
    return narrow ? (ulong3)(t[0], t[1], t[2]) : (ulong3)(w[0], w[1], w[2]);
}

__kernel void ps_rows_from_host(__global const uchar* from, __global uchar* to,
                                __global const ulong* table, ulong host_len, uint narrow) {
    ulong3 row = ps_row(table, get_group_id(0), narrow);
    ulong s = row.x, end = s + row.z;
    ulong d = row.y - s; /* wraps: d + x is the device offset of host byte x */
    for (ulong a = (s & ~(ulong)15) + 16 * get_local_id(0); a < end; a += 16 * get_local_size(0)) {
        ulong2 w = (ulong2)(0, 0);
        if (a + 16 <= host_len) {
            w = *(__global const ulong2*)(from + a);
        } else {
            for (uint k = 0; a + k < host_len; k++) {
                ulong b = (ulong)from[a + k] << (8 * (k & 7));
                if (k < 8) w.x |= b; else w.y |= b;
            }
        }
        ulong lo = a < s ? s : a, hi = a + 16 < end ? a + 16 : end;
        for (ulong x = lo; x < hi; x++) to[d + x] = ps_byte(w, x - a);
    }
}

/* Host bytes [x, e) from from[src + x], in the fewest naturally aligned writes (8, 4, 2 or 1
   bytes): each is one transaction on the bus, and none may pass the piece (a neighbour may
   share the word). */
static void ps_edge(__global uchar* to, ulong x, ulong e, __global const uchar* from, ulong src) {
    while (x < e) {
        uint n = ((x & 7) == 0 && x + 8 <= e) ? 8 : ((x & 3) == 0 && x + 4 <= e) ? 4
               : ((x & 1) == 0 && x + 2 <= e) ? 2 : 1;
        ulong v = 0;
        for (uint k = 0; k < n; k++) v |= (ulong)from[src + x + k] << (8 * k);
        if (n == 8) *(__global ulong*)(to + x) = v;
        else if (n == 4) *(__global uint*)(to + x) = (uint)v;
        else if (n == 2) *(__global ushort*)(to + x) = (ushort)v;
        else to[x] = (uchar)v;
        x += n;
    }
}

/* The 8 device bytes at from[at], little-endian, as one word. */
static ulong ps_word(__global const uchar* from, ulong at) {
    ulong v = 0;
    for (uint k = 0; k < 8; k++) v |= (ulong)from[at + k] << (8 * k);
    return v;
}

__kernel void ps_rows_to_host(__global const uchar* from, __global uchar* to,
                              __global const ulong* table, ulong host_len, uint narrow) {
    ulong3 row = ps_row(table, get_group_id(0), narrow);
    ulong s = row.y, end = s + row.z;
    ulong src = row.x - s; /* wraps, as in ps_rows_from_host */
    for (ulong a = (s & ~(ulong)15) + 16 * get_local_id(0); a < end; a += 16 * get_local_size(0)) {
        if (a >= s && a + 16 <= end) {
            *(__global ulong2*)(to + a) =
                (ulong2)(ps_word(from, src + a), ps_word(from, src + a + 8));
        } else {
            ps_edge(to, a > s ? a : s, a + 16 < end ? a + 16 : end, from, src);
        }
    }
}
"#;

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
        if options.capacity < plan::ALIGN || options.rows == 0 {
            return Err(GatherError::Capacity {
                bytes: options.capacity,
                rows: options.rows,
                min: plan::ALIGN,
                min_rows: 1,
            });
        }
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
            call_s: 0.0,
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

/// Bytes of one stage: piece data, its padding, and the segment table; `usize::MAX`, which
/// no allocation gets (refused as above the host memory), where the sum would not fit.
fn stage_bytes(options: &GatherOptions) -> usize {
    let table = options.rows.saturating_mul(ROW_BYTES);
    data_cap(options).saturating_add(8).saturating_add(table)
}

fn stage(ctx: &Context, options: &GatherOptions) -> Result<Stage, GatherError> {
    let pin = PinOptions {
        contiguous: true,
        ..PinOptions::default()
    };
    let host = HostRegion::new(ctx, stage_bytes(options), &pin)?;
    Ok(Stage {
        host,
        dma: match options.profile {
            true => ctx.queue(),
            false => ctx.plain_queue(),
        }
        .map_err(cl)?,
    })
}

/// Staging bytes for piece data: the capacity, plus the alignment padding its rows may need
/// (each segment sits at its device offset's alignment mod 16), so that `capacity` bytes of
/// pieces fit one batch whatever their offsets.
fn data_cap(options: &GatherOptions) -> usize {
    let padding = (plan::ALIGN - 1).saturating_mul(options.rows);
    options.capacity.saturating_add(padding)
}

fn not_contiguous() -> GatherError {
    GatherError::NotContiguous
}

/// Launches `kernel` over `batch`'s segments: one work-group each.
fn launch(
    kernel: &mut Kernel,
    queue: &Queue,
    staging: &DeviceBuffer,
    buffer: &DeviceBuffer,
    batch: &Batch,
    group: usize,
    wait: &[&Event],
) -> Result<Event, GatherError> {
    kernel.set_buffer(0, staging).map_err(cl)?;
    kernel.set_buffer(1, buffer).map_err(cl)?;
    kernel
        .set_bytes(2, &(batch.table_offset() as u64).to_ne_bytes())
        .map_err(cl)?;
    let local = local_size(batch, group);
    let global = batch.segments.len() * local;
    let done = queue.launch(kernel, global, Some(local), wait).map_err(cl);
    // The command holds its own references; the kernel lets go of the caller's buffer, so a
    // kept gather never keeps it alive.
    kernel.unbind_buffers();
    done
}

/// Launches the zero-copy `kernel` over `rows` segments of at most `longest` bytes (one
/// work-group each, sized as [`local_for`] says), copying from `bufs.0` to `bufs.1` as
/// `table` says.
fn launch_rows(
    kernel: &mut Kernel,
    queue: &Queue,
    (bufs, host_len): ((&DeviceBuffer, &DeviceBuffer), usize),
    (table, narrow): (&DeviceBuffer, bool),
    (rows, longest): (usize, usize),
    group: usize,
    wait: &[&Event],
) -> Result<Event, GatherError> {
    kernel.set_buffer(0, bufs.0).map_err(cl)?;
    kernel.set_buffer(1, bufs.1).map_err(cl)?;
    kernel.set_buffer(2, table).map_err(cl)?;
    kernel
        .set_bytes(3, &(host_len as u64).to_ne_bytes())
        .map_err(cl)?;
    kernel
        .set_bytes(4, &u32::from(narrow).to_ne_bytes())
        .map_err(cl)?;
    let local = local_for(longest, group);
    let done = queue
        .launch(kernel, rows * local, Some(local), wait)
        .map_err(cl);
    kernel.unbind_buffers();
    done
}

/// Work items per segment: one 16-byte access each for the batch's longest segment (so
/// 256-byte pieces take a warp, not eight), at least 32 and at most `group`.
fn local_size(batch: &Batch, group: usize) -> usize {
    let longest = batch.segments.iter().map(|s| s.len).max().unwrap_or(0);
    local_for(longest, group)
}

/// Work items for segments of at most `longest` bytes: one 16-byte access each, at least 32
/// and at most `group`.
fn local_for(longest: usize, group: usize) -> usize {
    longest
        .div_ceil(plan::ALIGN)
        .next_power_of_two()
        .clamp(32.min(group), group)
}

/// Writes `bytes` at `at` in the (settled) staging region.
fn write_at(host: &mut HostRegion, at: usize, bytes: &[u8]) -> Result<(), GatherError> {
    let staged = host.as_mut_slice().ok_or_else(not_contiguous)?;
    staged[at..at + bytes.len()].copy_from_slice(bytes);
    Ok(())
}

/// Packs a batch's segments and table into the staging region (waiting for its last DMA);
/// the seconds the copy took.
fn pack(
    host: &mut HostRegion,
    pieces: &[(&[u8], usize)],
    batch: &Batch,
) -> Result<f64, GatherError> {
    let staged = host.as_mut_slice().ok_or_else(not_contiguous)?;
    let (data, rest) = staged.split_at_mut(batch.data_end);
    let at = batch.table_offset() - batch.data_end;
    let table = batch.table();
    rest[at..at + table.len()].copy_from_slice(&table);
    let mut outs = Vec::with_capacity(batch.segments.len());
    let mut free = data;
    let mut cursor = 0;
    for seg in &batch.segments {
        let (_, tail) = std::mem::take(&mut free).split_at_mut(seg.stage - cursor);
        let (mine, after) = tail.split_at_mut(seg.len);
        free = after;
        cursor = seg.stage + seg.len;
        let src = pieces[seg.piece].0;
        outs.push((mine, &src[seg.piece_offset..seg.piece_offset + seg.len]));
    }
    Ok(copy_all(outs, batch.data_end, true))
}

/// Copies every `(to, from)` pair, on rayon's persistent pool for large batches (tasks of at
/// least [`TASK_BYTES`]); the seconds it took. A pool, not threads spawned per batch: on the
/// H200's VM spawning cost more than copying a batch of 4 KiB pieces. `for_dma`: the
/// destination is staging a DMA reads next, written with stores that bypass the caches
/// ([`copy_streaming`]).
fn copy_all(pairs: Vec<(&mut [u8], &[u8])>, bytes: usize, for_dma: bool) -> f64 {
    use rayon::prelude::*;
    // Short segments are copied through the caches: streaming stores of a few lines with
    // unaligned ends cost more than the snoops they save (65536 × 256 B packed 5× slower).
    let copy = |(d, s): (&mut [u8], &[u8])| match for_dma && d.len() >= STREAM_FROM {
        true => copy_streaming(d, s),
        false => d.copy_from_slice(s),
    };
    let start = std::time::Instant::now();
    if bytes < PARALLEL_FROM {
        pairs.into_iter().for_each(copy);
    } else {
        let per_task = (TASK_BYTES * pairs.len()).div_ceil(bytes.max(1)).max(1);
        pairs.into_par_iter().with_min_len(per_task).for_each(copy);
    }
    start.elapsed().as_secs_f64()
}

/// Segments of at least this many bytes are packed with streaming stores.
const STREAM_FROM: usize = 2048;

/// The least a pool task of [`copy_all`] copies.
const TASK_BYTES: usize = 64 << 10;
