//! The stream: blocks of host data through a ring of device slots on three OpenCL queues.
//!
//! The schedule (which command waits for which) is `engine::ring`'s, shared with the CUDA
//! engine. Everything is enqueued ahead and chained by events, so the three queues overlap;
//! `sequential` puts all of it on one in-order queue for the baseline.
//!
//! The run is synchronous and borrows its regions for its whole length (`&mut` for the
//! output or the in-place region, `&` for inputs and residents), so the caller cannot touch
//! them while the device may; the regions also wait for their own transfers before handing
//! out any slice (see [`HostRegion`]).

use super::bind::{bind, BindError, Binding, Shape};
use super::dtype::DType;
use super::fault;
use super::pool::{DevicePool, PoolError};
use super::profile::{totals, Record, Totals};
use super::ring::{run_ring, spread_bytes, stage_error, CommandError, Schedule, Stages};
use crate::backend::opencl::{ClError, Context, DeviceBuffer, Event, Kernel, Profile, Queue};
use crate::host::HostRegion;
use crate::units::Bytes;
use serde::Serialize;
use std::ops::Range;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Instant;

/// How many work items a block's kernel launch gets.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct WorkSize {
    /// Count output elements (true) or input elements (false).
    pub per_output: bool,
    /// Work items per counted element.
    pub items_per: usize,
    /// Work-group size; the global size is rounded up to a multiple of it.
    pub local: Option<usize>,
}

impl Default for WorkSize {
    fn default() -> Self {
        WorkSize {
            per_output: false,
            items_per: 1,
            local: None,
        }
    }
}

/// How to stream.
#[derive(Debug, Clone)]
pub struct StreamOptions {
    /// Input element type.
    pub dtype: DType,
    /// Output element type (ignored in place).
    pub out_dtype: DType,
    /// Input bytes per block (a multiple of the element size and of `in_per_out` elements).
    pub block_bytes: usize,
    /// Input elements per output element (1: as many outputs as inputs; a block's output is
    /// `ceil(n / in_per_out)` elements).
    pub in_per_out: usize,
    /// Slots in the ring; `None`: as many as the budget holds, up to 4.
    pub slots: Option<usize>,
    /// Device memory the pool may use, slots and residents together.
    pub vram_budget: u64,
    /// Kernel launch size.
    pub work: WorkSize,
    /// One in-order queue for everything (the baseline).
    pub sequential: bool,
    /// When this becomes non-zero (a signal handler sets it, say), the stream stops after the
    /// blocks in flight and returns [`StreamError::Stopped`] with the value.
    pub stop: Option<Arc<AtomicUsize>>,
}

/// The data of a run.
pub struct Job<'a> {
    /// The kernel, with the name used in messages.
    pub kernel: &'a mut Kernel,
    /// Kernel name.
    pub kernel_name: &'a str,
    /// The region processed in place (its blocks are uploaded and the results written back).
    pub in_place: Option<&'a mut HostRegion>,
    /// Streamed inputs (after the in-place region, if any).
    pub inputs: Vec<&'a HostRegion>,
    /// Output region for out-of-place runs.
    pub output: Option<&'a mut HostRegion>,
    /// Uploaded once, bound after the output.
    pub residents: Vec<&'a HostRegion>,
    /// User scalars, `NAME=VALUE`.
    pub args: Vec<(String, String)>,
}

/// Why a stream could not run or stopped.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// Sizes that do not fit together.
    #[error("{0}")]
    Layout(String),
    /// The kernel's arguments do not match the run.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// The VRAM budget cannot hold what the run needs.
    #[error("{0}")]
    Budget(String),
    /// Slot or resident allocation failed.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// A command failed: which block, which stage.
    #[error("block {block} ({stage}): {source}")]
    Stage {
        /// Block index.
        block: usize,
        /// Stage name.
        stage: &'static str,
        /// The failure.
        source: CommandError,
    },
    /// Setup failure (queues, resident upload).
    #[error(transparent)]
    Cl(#[from] ClError),
    /// Setup failure through CUDA (streams, events).
    #[cfg(feature = "cuda")]
    #[error(transparent)]
    Cuda(#[from] crate::backend::cuda::CudaError),
    /// Stopped on request after the blocks in flight completed.
    #[error("stopped on request after {done} of {blocks} blocks")]
    Stopped {
        /// The value the stop flag was set to (the signal number in the CLI).
        code: usize,
        /// Blocks completed.
        done: usize,
        /// Blocks in the run.
        blocks: usize,
    },
}

/// The outcome of a run.
#[derive(Debug, Clone, Serialize)]
pub struct StreamReport {
    /// `three queues` or `one in-order queue`.
    pub mode: &'static str,
    /// Blocks streamed.
    pub blocks: usize,
    /// Slots in the ring.
    pub slots: usize,
    /// Input bytes per block (per input).
    pub block_bytes: usize,
    /// Output bytes per full block.
    pub out_block_bytes: usize,
    /// Resident bytes uploaded once.
    pub resident_bytes: u64,
    /// Device memory the pool allocated.
    pub pool_bytes: u64,
    /// The budget.
    pub vram_budget: u64,
    /// Wall time on the host, enqueue to last completion.
    pub host_wall_s: f64,
    /// Stage totals, bandwidth, overlap.
    pub totals: Totals,
    /// Every command, for traces.
    #[serde(skip)]
    pub records: Vec<Record>,
}

/// Where each block's input and output lie.
pub(crate) struct Layout {
    pub(crate) isz: usize,
    pub(crate) osz: usize,
    elems: usize,
    pub(crate) block_elems: usize,
    in_per_out: usize,
    pub(crate) blocks: usize,
}

impl Layout {
    /// Input elements of block `i`.
    pub(crate) fn input(&self, i: usize) -> Range<usize> {
        i * self.block_elems..((i + 1) * self.block_elems).min(self.elems)
    }
    /// Output elements of block `i`.
    pub(crate) fn output(&self, i: usize) -> Range<usize> {
        let r = self.input(i);
        r.start / self.in_per_out..r.end.div_ceil(self.in_per_out)
    }
    /// Output bytes of a full block.
    pub(crate) fn out_block_bytes(&self) -> usize {
        self.block_elems / self.in_per_out * self.osz
    }
}

fn layout(job: &Job, o: &StreamOptions) -> Result<Layout, StreamError> {
    let bad = |s: String| Err(StreamError::Layout(s));
    let first = job.in_place.as_deref().or(job.inputs.first().copied());
    let Some(first) = first else {
        return bad("the run has no input: give an input region".into());
    };
    if job.in_place.is_some() == job.output.is_some() {
        return bad("a run is either in place or has an output region, not both or neither".into());
    }
    let len = first.len();
    for r in job.inputs.iter() {
        if r.len() != len {
            return bad(format!(
                "inputs differ in size ({} and {}): every input must have the same length",
                Bytes(len as u64),
                Bytes(r.len() as u64)
            ));
        }
    }
    let out_len = job.output.as_deref().map(HostRegion::len);
    shape_layout(len, job.in_place.is_some(), out_len, o)
}

/// The blocks of a run over `len` input bytes per input, in place or into an output of
/// `out_len` bytes, checked against the options.
pub(crate) fn shape_layout(
    len: usize,
    in_place: bool,
    out_len: Option<usize>,
    o: &StreamOptions,
) -> Result<Layout, StreamError> {
    let bad = |s: String| Err(StreamError::Layout(s));
    let isz = o.dtype.size();
    if len % isz != 0 {
        return bad(format!(
            "the input is {len} bytes, not a multiple of the {} element size ({isz} bytes)",
            o.dtype
        ));
    }
    let in_per_out = o.in_per_out.max(1);
    if in_place && in_per_out != 1 {
        return bad("in place, each block's result replaces the block, so one output element per input element: use a kernel with an output buffer for another output size (--reduce)".into());
    }
    if o.work.local == Some(0) {
        return bad("a work-group size of 0 is not valid: pass --local 1 or more, or leave it to the driver".into());
    }
    if o.block_bytes == 0 || o.block_bytes % isz != 0 || (o.block_bytes / isz) % in_per_out != 0 {
        return bad(format!("block of {} bytes must be a positive multiple of {} bytes ({} {} elements per output element)", o.block_bytes, isz * in_per_out, in_per_out, o.dtype));
    }
    let osz = if in_place { isz } else { o.out_dtype.size() };
    let elems = len / isz;
    let block_elems = (o.block_bytes / isz).min(elems.div_ceil(in_per_out) * in_per_out);
    let l = Layout {
        isz,
        osz,
        elems,
        block_elems,
        in_per_out,
        blocks: elems.div_ceil(block_elems),
    };
    if let Some(out_len) = out_len {
        let need = elems.div_ceil(in_per_out) * osz;
        if out_len < need {
            return bad(format!(
                "the output region holds {} but the run writes {}",
                Bytes(out_len as u64),
                Bytes(need as u64)
            ));
        }
    }
    Ok(l)
}

struct Slot {
    ins: Vec<DeviceBuffer>,
    out: Option<DeviceBuffer>,
}

/// How many slots the budget holds (at most `o.slots`, else 4), or why too few.
pub(crate) fn slots_for(
    o: &StreamOptions,
    l: &Layout,
    n_in: usize,
    out: bool,
    resident: u64,
    max_alloc: u64,
) -> Result<usize, StreamError> {
    if o.block_bytes as u64 > max_alloc {
        return Err(StreamError::Budget(format!(
            "a block of {} is above the device's max allocation {}: pass --block {} or less",
            Bytes(o.block_bytes as u64),
            Bytes(max_alloc),
            Bytes(max_alloc)
        )));
    }
    let in_block = (l.block_elems * l.isz) as u64;
    if out && l.out_block_bytes() as u64 > max_alloc {
        return Err(StreamError::Budget(format!(
            "an output block of {} is above the device's max allocation {}: lower --block",
            Bytes(l.out_block_bytes() as u64),
            Bytes(max_alloc)
        )));
    }
    let slot = n_in as u64 * in_block + if out { l.out_block_bytes() as u64 } else { 0 };
    let room = o.vram_budget.saturating_sub(resident);
    let fit = (room / slot.max(1)) as usize;
    let wanted = o.slots.unwrap_or(4).min(l.blocks).max(1);
    let need = if o.slots.is_some() {
        wanted
    } else {
        2.min(l.blocks)
    };
    if fit < need {
        return Err(StreamError::Budget(format!(
            "the VRAM budget of {} holds {} of resident buffers and {fit} slot(s) of {} ({n_in} input block(s){}), but the run needs {need}: raise --vram-budget to at least {}, lower --block, or pass --slots 1",
            Bytes(o.vram_budget),
            Bytes(resident),
            Bytes(slot),
            if out { " and an output block" } else { "" },
            Bytes(resident + need as u64 * slot)
        )));
    }
    Ok(wanted.min(fit))
}

/// Streams `job` through the kernel; `progress(blocks_done, bytes_done)` is called as blocks
/// come back.
pub fn run(
    ctx: &Context,
    mut job: Job,
    o: &StreamOptions,
    progress: &dyn Fn(u64, u64),
) -> Result<StreamReport, StreamError> {
    let result = run_job(ctx, &mut job, o, progress);
    // The slots and residents go with this run: the kernel must not keep them alive (VRAM)
    // nor point at them afterwards.
    job.kernel.unbind_buffers();
    result
}

fn run_job(
    ctx: &Context,
    job: &mut Job,
    o: &StreamOptions,
    progress: &dyn Fn(u64, u64),
) -> Result<StreamReport, StreamError> {
    let l = layout(job, o)?;
    let n_in = usize::from(job.in_place.is_some()) + job.inputs.len();
    let out = job.output.is_some();
    let shape = Shape {
        inputs: n_in,
        output: out,
        residents: job.residents.len(),
    };
    let args = job.kernel.args()?;
    let binding = bind(job.kernel_name, &args, &shape, &job.args)?;
    let limits = job.kernel.work_group_limits()?;
    super::validate::check_job(job, &args, &binding, o, limits)?;
    let resident_bytes: u64 = job.residents.iter().map(|r| r.len() as u64).sum();
    let n_slots = slots_for(o, &l, n_in, out, resident_bytes, ctx.device().max_alloc)?;
    let mut pool = DevicePool::new(ctx, o.vram_budget);
    let residents = upload_residents(ctx, &mut pool, &job.residents)?;
    let mut slots = Vec::new();
    for s in 0..n_slots {
        fault::check("alloc", s, "clCreateBuffer").map_err(|source| PoolError::Device {
            what: format!("slot {s}"),
            bytes: l.block_elems * l.isz,
            source: source.into(),
        })?;
        let ins = (0..n_in)
            .map(|j| pool.alloc(l.block_elems * l.isz, &format!("slot {s} input {j}")))
            .collect::<Result<_, _>>()?;
        let out = if out {
            Some(pool.alloc(l.out_block_bytes(), &format!("slot {s} output"))?)
        } else {
            None
        };
        slots.push(Slot { ins, out });
    }
    bind_fixed(job.kernel, &binding, &residents)?;
    let queues = Queues::new(ctx, o.sequential)?;
    let ring = Ring {
        l: &l,
        o,
        binding: &binding,
        slots: &slots,
        q: &queues,
    };
    ring.warm_up(job.kernel)?;
    let in_place = job.in_place.is_some();
    let sizes = RunSizes {
        slots: n_slots,
        in_place,
        resident_bytes,
        pool_bytes: pool.used(),
    };
    stream_and_report(&mut ClStages { ring: &ring, job }, &l, o, &sizes, progress)
}

/// What a run allocated, for its report.
pub(crate) struct RunSizes {
    pub(crate) slots: usize,
    pub(crate) in_place: bool,
    pub(crate) resident_bytes: u64,
    pub(crate) pool_bytes: u64,
}

/// Runs the ring through `stages` (any API) and reports it.
pub(crate) fn stream_and_report<S: Stages>(
    stages: &mut S,
    l: &Layout,
    o: &StreamOptions,
    z: &RunSizes,
    progress: &dyn Fn(u64, u64),
) -> Result<StreamReport, StreamError> {
    let sched = Schedule {
        blocks: l.blocks,
        slots: z.slots,
        in_place: z.in_place,
        stop: o.stop.as_deref(),
    };
    let start = Instant::now();
    let records = run_ring(stages, &sched, progress)?;
    let host_wall_s = start.elapsed().as_secs_f64();
    Ok(StreamReport {
        mode: if o.sequential {
            "one in-order queue"
        } else {
            "three queues"
        },
        blocks: l.blocks,
        slots: z.slots,
        block_bytes: l.block_elems * l.isz,
        out_block_bytes: if z.in_place {
            l.block_elems * l.isz
        } else {
            l.out_block_bytes()
        },
        resident_bytes: z.resident_bytes,
        pool_bytes: z.pool_bytes,
        vram_budget: o.vram_budget,
        host_wall_s,
        totals: totals(&records),
        records,
    })
}

fn upload_residents(
    ctx: &Context,
    pool: &mut DevicePool,
    regions: &[&HostRegion],
) -> Result<Vec<DeviceBuffer>, StreamError> {
    let q = ctx.queue()?;
    let mut out = Vec::new();
    for (j, r) in regions.iter().enumerate() {
        let buf = pool.alloc(r.len(), &format!("resident buffer {j}"))?;
        r.upload(&q, 0..r.len(), &buf, 0, &[])
            .map_err(|e| stage_error(0, "resident upload", e))?;
        r.wait()?;
        out.push(buf);
    }
    Ok(out)
}

fn bind_fixed(kernel: &mut Kernel, b: &Binding, residents: &[DeviceBuffer]) -> Result<(), ClError> {
    for (i, r) in b.residents.iter().zip(residents) {
        kernel.set_buffer(*i, r)?;
    }
    for (i, v) in &b.scalars {
        kernel.set_bytes(*i, v)?;
    }
    Ok(())
}

struct Queues {
    up: Queue,
    k: Option<Queue>,
    down: Option<Queue>,
}

impl Queues {
    fn new(ctx: &Context, sequential: bool) -> Result<Self, ClError> {
        Ok(if sequential {
            Queues {
                up: ctx.queue()?,
                k: None,
                down: None,
            }
        } else {
            Queues {
                up: ctx.queue()?,
                k: Some(ctx.queue()?),
                down: Some(ctx.queue()?),
            }
        })
    }
    fn kernel(&self) -> &Queue {
        self.k.as_ref().unwrap_or(&self.up)
    }
    fn download(&self) -> &Queue {
        self.down.as_ref().unwrap_or(&self.up)
    }
    fn flush(&self) -> Result<(), ClError> {
        self.up.flush()?;
        self.k.as_ref().map_or(Ok(()), Queue::flush)?;
        self.down.as_ref().map_or(Ok(()), Queue::flush)
    }
}

struct Ring<'r> {
    l: &'r Layout,
    o: &'r StreamOptions,
    binding: &'r Binding,
    slots: &'r [Slot],
    q: &'r Queues,
}

/// The OpenCL side of the ring: a run's regions and kernel, the ring's slots and queues.
struct ClStages<'r, 'a, 'j> {
    ring: &'r Ring<'r>,
    job: &'a mut Job<'j>,
}

impl Stages for ClStages<'_, '_, '_> {
    type Event = Event;

    fn upload(
        &mut self,
        i: usize,
        slot: usize,
        wait: &[&Event],
    ) -> Result<Vec<(Event, u64)>, StreamError> {
        let (l, slot) = (self.ring.l, &self.ring.slots[slot]);
        let in_bytes = mul(l.input(i), l.isz);
        let sources: Vec<&HostRegion> = self
            .job
            .in_place
            .as_deref()
            .into_iter()
            .chain(self.job.inputs.iter().copied())
            .collect();
        fault::check("upload", i, "clEnqueueWriteBuffer")
            .map_err(|e| stage_error(i, "upload", e))?;
        let mut up = Vec::new();
        for (r, buf) in sources.iter().zip(&slot.ins) {
            let ev = r
                .upload(&self.ring.q.up, in_bytes.clone(), buf, 0, wait)
                .map_err(|e| stage_error(i, "upload", e))?;
            up.extend(ev.into_iter().map(|e| (e, 0)));
        }
        spread_bytes(&mut up, in_bytes.len() as u64 * sources.len() as u64);
        Ok(up)
    }

    fn kernel(&mut self, i: usize, slot: usize, wait: &[&Event]) -> Result<Event, StreamError> {
        fault::check("kernel", i, "clEnqueueNDRangeKernel")
            .and_then(|()| {
                self.ring
                    .launch(self.job.kernel, &self.ring.slots[slot], i, wait)
            })
            .map_err(|e| stage_error(i, "kernel", e))
    }

    fn download(
        &mut self,
        i: usize,
        slot: usize,
        wait: &[&Event],
    ) -> Result<Vec<(Event, u64)>, StreamError> {
        let (l, slot) = (self.ring.l, &self.ring.slots[slot]);
        let out_bytes = mul(l.output(i), l.osz);
        let src = slot.out.as_ref().unwrap_or(&slot.ins[0]);
        let target: &mut HostRegion = match (
            self.job.in_place.as_deref_mut(),
            self.job.output.as_deref_mut(),
        ) {
            (Some(r), _) | (None, Some(r)) => r,
            (None, None) => unreachable!("layout() checked that one exists"),
        };
        fault::check("download", i, "clEnqueueReadBuffer")
            .map_err(|e| stage_error(i, "download", e))?;
        let ev = target
            .download(self.ring.q.download(), src, 0, out_bytes.clone(), wait)
            .map_err(|e| stage_error(i, "download", e))?;
        let mut down: Vec<(Event, u64)> = ev.into_iter().map(|e| (e, 0)).collect();
        spread_bytes(&mut down, out_bytes.len() as u64);
        Ok(down)
    }

    fn flush(&self) -> Result<(), StreamError> {
        Ok(self.ring.q.flush()?)
    }

    fn finish(&self) {
        let q = self.ring.q;
        let _ = q.up.finish();
        let _ = q.kernel().finish();
        let _ = q.download().finish();
    }

    fn wait(&self, e: &Event) -> Result<(), CommandError> {
        Ok(e.wait()?)
    }

    fn profile(&self, e: &Event) -> Result<Profile, StreamError> {
        Ok(e.profile()?)
    }
}

impl Ring<'_> {
    /// One launch with an element count of 0 before the stream, so that drivers that compile
    /// at the first launch (PoCL) do it outside the measured stream. Kernels that follow the
    /// convention write nothing when `n` is 0.
    fn warm_up(&self, kernel: &mut Kernel) -> Result<(), ClError> {
        self.set_args(kernel, &self.slots[0], [0, 0, 0])?;
        let global = self.o.work.local.unwrap_or(1);
        self.q
            .kernel()
            .launch(kernel, global, self.o.work.local, &[])?
            .wait()
    }

    fn set_args(
        &self,
        kernel: &mut Kernel,
        slot: &Slot,
        counts: [usize; 3],
    ) -> Result<(), ClError> {
        let b = self.binding;
        for (idx, buf) in b.inputs.iter().zip(&slot.ins) {
            kernel.set_buffer(*idx, buf)?;
        }
        if let (Some(idx), Some(buf)) = (b.output, &slot.out) {
            kernel.set_buffer(idx, buf)?;
        }
        for ((idx, t), v) in b.counts.iter().zip(counts) {
            let bytes = t.encode_count(v as u64).ok_or_else(|| {
                ClError::new("clSetKernelArg", cl3::error_codes::CL_INVALID_ARG_VALUE)
            })?;
            kernel.set_bytes(*idx, &bytes)?;
        }
        Ok(())
    }

    fn launch(
        &self,
        kernel: &mut Kernel,
        slot: &Slot,
        i: usize,
        wait: &[&Event],
    ) -> Result<Event, ClError> {
        let l = self.l;
        let r = l.input(i);
        self.set_args(kernel, slot, [r.len(), i, r.start])?;
        let w = self.o.work;
        let count = if w.per_output {
            l.output(i).len()
        } else {
            r.len()
        };
        let mut global = count * w.items_per.max(1);
        if let Some(loc) = w.local {
            global = global.div_ceil(loc) * loc;
        }
        self.q.kernel().launch(kernel, global, w.local, wait)
    }
}

pub(crate) fn mul(r: Range<usize>, k: usize) -> Range<usize> {
    r.start * k..r.end * k
}
