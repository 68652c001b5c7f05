//! `pinstream.stream`: the engine ([`pinstream::engine::run`]) over pinned NumPy arrays, with
//! the caller's PyOpenCL kernel, in the caller's context, on the caller's queue's device.
//!
//! The call's objects are adopted with the GIL held: the context of the queue
//! ([`Context::from_raw`]) on the queue's device, the queue checked and let go ([`Context::on_queue_device`]: the run makes
//! its own queues on that device, and never enqueues on, waits for or finishes the caller's),
//! and pinstream's own kernel object of the caller's function ([`Kernel::from_raw`], built
//! with the GIL released where the driver keeps no argument names), so the caller's kernel
//! arguments are never changed. The arrays are looked up among the ranges pinstream pins
//! ([`crate::lend`]).
//!
//! The run itself goes to a worker thread, which never touches Python. The calling thread
//! follows it with the GIL released, waking when a block comes back or every 50 ms: it
//! then takes the GIL, runs Python's signal handlers (`KeyboardInterrupt` on Ctrl-C) and the
//! caller's `progress(blocks_done, bytes_done)`, and gives it back. An exception in either
//! stops the run ([`StreamOptions::stop`]): the calling thread waits, with the GIL released,
//! for the blocks in flight, the run releases every device buffer, and the exception is
//! raised. So no thread waits for the GIL while the run holds anything, and Python code runs
//! on the calling thread only.

use crate::errors::host_error;
use crate::lend::{check_disjoint, Lent, Pieces};
use crate::memory::adopt_context;
use crate::stream_advice::stream_error;
use pinstream::backend::opencl::{queue_context, Context, Kernel, KernelRefusal, QueueRefusal};
use pinstream::backend::vram::VramProbe;
use pinstream::engine::pool::default_budget;
use pinstream::engine::validate::smallest_block;
use pinstream::engine::{
    run, BoundsCheck, DType, HostMemory, Job, Residency, StreamError, StreamOptions, StreamReport,
    WorkSize,
};
use pinstream::host::HostError;
use pinstream::units::parse_size;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How often the calling thread looks at Python's signals while the run has no news.
const TICK: Duration = Duration::from_millis(50);

/// The value the stop flag gets when the caller's side stops the run.
const STOPPED: usize = 1;

/// The call's arrays and options, as the Python side passes them (a dict, checked there).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub struct Spec<'py> {
    inout: Option<Bound<'py, PyAny>>,
    inputs: Vec<Bound<'py, PyAny>>,
    output: Option<Bound<'py, PyAny>>,
    /// By name, in any order: bound in the kernel's order.
    residents: Vec<(String, Bound<'py, PyAny>)>,
    /// Scalars by name, as text the kernel's types read.
    args: Vec<(String, String)>,
    dtype: String,
    out_dtype: String,
    budget: Option<String>,
    block: Option<String>,
    residency: String,
    passes: usize,
    reduce: usize,
}

/// Streams the arrays of `spec` through the caller's kernel (`kernel`, a `cl_kernel` handle)
/// on the device of the caller's queue (`queue`, a `cl_command_queue` handle); calls
/// `progress(blocks_done, bytes_done)` on this thread as blocks come back. Returns the
/// report as a dict.
#[pyfunction]
#[pyo3(signature = (queue, kernel, spec, progress=None))]
pub fn stream<'py>(
    py: Python<'py>,
    queue: usize,
    kernel: usize,
    spec: Spec<'py>,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let (ctx, mut kernel) = adopt(py, queue, kernel)?;
    let mut arrays = Arrays::lend(&spec, &kernel)?;
    let opts = options(&ctx, &spec, &arrays)?;
    let stop = opts.stop.clone().unwrap_or_default();
    let args = spec.args.clone();
    let (ctx_ref, kernel_ref, arrays_ref) = (&ctx, &mut kernel, &mut arrays);
    let done = watched(py, progress.as_ref(), &stop, move |progress| {
        arrays_ref.run(ctx_ref, kernel_ref, args, &opts, progress)
    })?;
    match done {
        Ok(report) => report_dict(py, &report, &ctx.device().name),
        Err(Failed::Host(e)) => Err(host_error(py, e)),
        Err(Failed::Stream(e)) => Err(stream_error(py, &e)),
    }
}

/// The context of the caller's queue, and pinstream's own kernel object of the caller's.
fn adopt(py: Python<'_>, queue: usize, kernel: usize) -> PyResult<(Context, Kernel)> {
    let raw_ctx = queue_context(queue as _).map_err(|e| {
        PyValueError::new_err(format!(
            "stream: queue is not a command queue ({e}): pass a pyopencl.CommandQueue"
        ))
    })?;
    let ctx = adopt_context(py, raw_ctx as usize)?;
    // On the queue's device, whichever of the context's devices it is; the queue is only
    // checked: the run makes its own queues there and never uses the caller's.
    // SAFETY: the Python side holds the pyopencl queue for the whole call.
    let ctx = unsafe { ctx.on_queue_device(queue as _) }.map_err(queue_refused)?;
    let own = py.detach(|| {
        // SAFETY: the Python side holds the pyopencl kernel for the whole call.
        unsafe { Kernel::from_raw(kernel as _, &ctx) }
    });
    Ok((ctx, own.map_err(kernel_refused)?))
}

fn queue_refused(e: QueueRefusal) -> PyErr {
    let fix = match e {
        QueueRefusal::OutOfOrder => {
            "pass an in-order queue: pyopencl.CommandQueue(ctx) without out-of-order properties"
        }
        _ => "pass a pyopencl.CommandQueue",
    };
    PyValueError::new_err(format!("stream: {e}: {fix}"))
}

fn kernel_refused(e: KernelRefusal) -> PyErr {
    let msg = match e {
        KernelRefusal::OtherContext => {
            "the kernel belongs to another context than queue's: build its program in queue.context"
                .into()
        }
        KernelRefusal::Invalid(_) => {
            format!("{e}: pass a pyopencl.Kernel (program.NAME, or pyopencl.Kernel(program, NAME))")
        }
        e => e.to_string(),
    };
    PyValueError::new_err(format!("stream: {msg}"))
}

/// The arrays of a call, by role.
struct Arrays {
    /// The in-place array, or the streamed inputs.
    sources: Vec<Lent>,
    in_place: bool,
    output: Option<Lent>,
    /// In the kernel's order.
    residents: Vec<Lent>,
}

/// Why a run failed on the worker thread, phrased once the GIL is back.
enum Failed {
    Host(HostError),
    Stream(StreamError),
}

impl Arrays {
    fn lend(spec: &Spec<'_>, kernel: &Kernel) -> PyResult<Arrays> {
        let mut sources = Vec::new();
        if let Some(a) = &spec.inout {
            sources.push(Lent::find(a, "inout".into(), true)?);
        }
        for (i, a) in spec.inputs.iter().enumerate() {
            sources.push(Lent::find(a, format!("input[{i}]"), false)?);
        }
        let output = match &spec.output {
            Some(a) => Some(Lent::find(a, "output".into(), true)?),
            None => None,
        };
        let mut residents = Vec::new();
        for (name, a) in resident_order(&spec.residents, kernel)? {
            residents.push(Lent::find(a, format!("resident['{name}']"), false)?);
        }
        let all: Vec<&Lent> = sources.iter().chain(&output).chain(&residents).collect();
        check_disjoint(&all)?;
        Ok(Arrays {
            in_place: spec.inout.is_some(),
            sources,
            output,
            residents,
        })
    }

    /// The run, on the worker thread: the arrays lent as the engine's memory (waiting for
    /// transfers in flight on their regions first), then streamed.
    fn run(
        &mut self,
        ctx: &Context,
        kernel: &mut Kernel,
        args: Vec<(String, String)>,
        opts: &StreamOptions,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<StreamReport, Failed> {
        let (mut first, mut inputs) = (None, Vec::new());
        for (i, s) in self.sources.iter_mut().enumerate() {
            match i == 0 && self.in_place {
                true => first = Some(s.write().map_err(Failed::Host)?),
                false => inputs.push(s.read().map_err(Failed::Host)?),
            }
        }
        let mut output = match &mut self.output {
            Some(o) => Some(o.write().map_err(Failed::Host)?),
            None => None,
        };
        let residents = self
            .residents
            .iter()
            .map(Lent::read)
            .collect::<Result<Vec<Pieces<'_>>, _>>()
            .map_err(Failed::Host)?;
        let job = Job {
            in_place: first.as_mut().map(|p| p as &mut dyn HostMemory),
            inputs: inputs.iter().map(|p| p as &dyn HostMemory).collect(),
            output: output.as_mut().map(|p| p as &mut dyn HostMemory),
            residents: residents.iter().map(|p| p as &dyn HostMemory).collect(),
            args,
        };
        run(ctx, kernel, job, opts, progress).map_err(Failed::Stream)
    }
}

/// The resident arrays in the order of their names among the kernel's arguments.
fn resident_order<'a, 'py>(
    given: &'a [(String, Bound<'py, PyAny>)],
    kernel: &Kernel,
) -> PyResult<Vec<(&'a str, &'a Bound<'py, PyAny>)>> {
    if given.is_empty() {
        return Ok(Vec::new());
    }
    let params = kernel.args().map_err(|e| {
        PyValueError::new_err(format!(
            "stream: kernel `{}`: its argument names cannot be read ({e})",
            kernel.name()
        ))
    })?;
    let mut placed = Vec::with_capacity(given.len());
    for (name, a) in given {
        let Some(at) = params.iter().position(|p| &p.name == name && p.is_buffer()) else {
            let buffers: Vec<&str> = params
                .iter()
                .filter(|p| p.is_buffer())
                .map(|p| p.name.as_str())
                .collect();
            return Err(PyValueError::new_err(format!(
                "stream: kernel `{}` has no buffer argument `{name}` for resident=: its buffer arguments are {}",
                kernel.name(),
                buffers.join(", ")
            )));
        };
        placed.push((at, name.as_str(), a));
    }
    placed.sort_by_key(|p| p.0);
    Ok(placed.into_iter().map(|(_, n, a)| (n, a)).collect())
}

/// A size the caller gave (bytes as an integer, or `'4GiB'`), for the parameter `name`.
fn size(text: &str, name: &str) -> PyResult<u64> {
    parse_size(text).map_err(|e| {
        PyValueError::new_err(format!(
            "stream: {name}={text:?}: {e}: pass bytes as an int, or a size such as '256MiB'"
        ))
    })
}

/// The run's options: the element types of the arrays, the budget (half the device's free
/// memory unless given, as the command line's `run`), the block (as `run` picks it unless
/// given), the residency, the passes, and a stop flag of its own.
fn options(ctx: &Context, spec: &Spec<'_>, arrays: &Arrays) -> PyResult<StreamOptions> {
    let dtype = |name: &str| {
        DType::from_str(name).map_err(|e| PyValueError::new_err(format!("stream: {e}")))
    };
    let (dtype, out_dtype) = (dtype(&spec.dtype)?, dtype(&spec.out_dtype)?);
    let device = ctx.device();
    let vram_budget = match &spec.budget {
        Some(b) => size(b, "budget")?,
        None => default_budget(device.global_mem, &VramProbe::new(device)).0,
    };
    let residency = Residency::from_str(&spec.residency).map_err(|e| {
        PyValueError::new_err(format!(
            "stream: residency={:?}: {e}: pass 'auto', 'off' or bytes",
            spec.residency
        ))
    })?;
    let unit = dtype.size() * spec.reduce.max(1);
    let block_bytes = match &spec.block {
        Some(b) => usize::try_from(size(b, "block")?).unwrap_or(usize::MAX),
        None => default_block(arrays, unit, out_dtype.size(), vram_budget),
    };
    Ok(StreamOptions {
        dtype,
        out_dtype,
        block_bytes,
        in_per_out: spec.reduce,
        slots: None,
        vram_budget,
        work: WorkSize::default(),
        sequential: false,
        stop: Some(Arc::new(AtomicUsize::new(0))),
        check_bounds: BoundsCheck::Auto,
        passes: spec.passes,
        residency,
    })
}

/// The block the command line's `run` picks: a quarter of the budget the residents leave
/// for the slots' buffers, at most 256 MiB, in whole units, and never below the smallest
/// block the input allows (a budget too small for it is then refused with the one needed).
fn default_block(arrays: &Arrays, unit: usize, out_size: usize, budget: u64) -> usize {
    let len = arrays.sources.first().map_or(0, Lent::len);
    let resident: u64 = arrays.residents.iter().map(|r| r.len() as u64).sum();
    let room = budget.saturating_sub(resident);
    let out_per_in = match arrays.output {
        Some(_) => out_size as f64 / unit as f64,
        None => 0.0,
    };
    let per_block_byte = arrays.sources.len() as f64 + out_per_in;
    let by_budget = (room as f64 / (4.0 * per_block_byte)) as usize;
    (by_budget.min(256 << 20) / unit * unit).max(smallest_block(len, unit))
}

/// Where the run stands, as the calling thread last saw it.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Seen {
    blocks: u64,
    bytes: u64,
    done: bool,
}

/// The run's news, from the worker thread to the calling thread.
#[derive(Default)]
struct Watch {
    seen: Mutex<Seen>,
    changed: Condvar,
}

impl Watch {
    fn update(&self, f: impl FnOnce(&mut Seen)) {
        let mut s = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut s);
        self.changed.notify_all();
    }

    /// Where the run stands once it differs from `last`, or after `wait`.
    fn next(&self, last: Seen, wait: Duration) -> Seen {
        let s = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let (s, _) = self
            .changed
            .wait_timeout_while(s, wait, |s| *s == last)
            .unwrap_or_else(|p| p.into_inner());
        *s
    }
}

/// Marks the run done when the worker ends, however it ends.
struct Finish<'a>(&'a Watch);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        self.0.update(|s| s.done = true);
    }
}

/// Runs `work` on a worker thread, following it from this one (see the module's text);
/// the exception of a signal handler or of `progress` stops it through `stop`, and is
/// returned once it has stopped.
fn watched<R: Send>(
    py: Python<'_>,
    progress: Option<&Bound<'_, PyAny>>,
    stop: &AtomicUsize,
    work: impl FnOnce(&(dyn Fn(u64, u64) + Sync)) -> R + Send,
) -> PyResult<R> {
    let watch = &Watch::default();
    std::thread::scope(|s| {
        let worker = s.spawn(move || {
            let _done = Finish(watch);
            work(&|blocks, bytes| {
                watch.update(|s| (s.blocks, s.bytes) = (blocks, bytes));
            })
        });
        let raised = follow(py, watch, progress, stop);
        let result = py.detach(|| worker.join());
        let result = result.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        match raised {
            Some(e) => Err(e),
            None => Ok(result),
        }
    })
}

/// Follows the run until it is done; the first exception of the signal handlers or of
/// `progress`, after which the run is stopped and only waited for.
fn follow(
    py: Python<'_>,
    watch: &Watch,
    progress: Option<&Bound<'_, PyAny>>,
    stop: &AtomicUsize,
) -> Option<PyErr> {
    let (mut last, mut raised) = (Seen::default(), None);
    loop {
        let now = py.detach(|| watch.next(last, TICK));
        if raised.is_none() {
            raised = heed(py, progress, last, now).err();
            if raised.is_some() {
                stop.store(STOPPED, Ordering::Relaxed);
            }
        }
        last = now;
        if now.done {
            return raised;
        }
    }
}

/// Python's signal handlers, then `progress` where the run moved since `last`.
fn heed(
    py: Python<'_>,
    progress: Option<&Bound<'_, PyAny>>,
    last: Seen,
    now: Seen,
) -> PyResult<()> {
    py.check_signals()?;
    match progress {
        Some(f) if (now.blocks, now.bytes) != (last.blocks, last.bytes) => {
            f.call1((now.blocks, now.bytes)).map(drop)
        }
        _ => Ok(()),
    }
}

/// The report as the Python side's `StreamReport` takes it.
fn report_dict<'py>(
    py: Python<'py>,
    r: &StreamReport,
    device: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let t = &r.totals;
    let d = PyDict::new(py);
    d.set_item("device", device)?;
    d.set_item("mode", r.mode)?;
    d.set_item("bytes", t.upload.bytes + t.download.bytes)?;
    d.set_item("bytes_up", t.upload.bytes)?;
    d.set_item("bytes_down", t.download.bytes)?;
    d.set_item("wall_s", r.host_wall_s)?;
    d.set_item("device_wall_s", t.device_wall_s)?;
    d.set_item("upload_s", t.upload.busy_s)?;
    d.set_item("kernel_s", t.kernel.busy_s)?;
    d.set_item("download_s", t.download.busy_s)?;
    d.set_item("gbps", t.combined_gbps)?;
    d.set_item("upload_gbps", t.upload.gbps)?;
    d.set_item("download_gbps", t.download.gbps)?;
    d.set_item("overlap", t.overlap)?;
    d.set_item("blocks", r.blocks)?;
    d.set_item("block_bytes", r.block_bytes)?;
    d.set_item("slots", r.slots)?;
    d.set_item("passes", r.passes)?;
    d.set_item("resident_bytes", r.resident_bytes)?;
    d.set_item("resident_blocks", r.residency.blocks)?;
    d.set_item("residency", r.residency.to_string())?;
    d.set_item("pool_bytes", r.pool_bytes)?;
    d.set_item("vram_budget", r.vram_budget)?;
    d.set_item("bounds_guard", r.bounds_guard)?;
    Ok(d)
}
