//! `gather` / `scatter`: pieces of a mapped array (`pinstream.empty(..., mapped=True)`)
//! copied into a device buffer, or from one into the array, by one kernel that reads or
//! writes them in place across the bus (`cudaMemcpyBatchAsync` with the pieces in
//! `cudaHostAllocMapped` memory), the written ranges checked for overlap unless the caller
//! vouches that they are disjoint.
//!
//! The arguments' objects are read first, with the GIL, and the context's kept gather looked
//! up (the cache's lock is held for a table look only; a gather not made yet is built with
//! the GIL released); the rest runs with it released, one release per call (`run`): the
//! pieces read from their `bytes` (immutable, and held by the caller's frame) and checked,
//! the context's gather locked, its table written and checked, the kernel enqueued. So no
//! thread waits for the gather's lock while holding the GIL, and the GIL is never held
//! across the library's work.

use crate::errors::{host_error_in, NotRegisteredError, OpenCLError};
use crate::export::Export;
use crate::memory::adopt_context;
use crate::register::refused;
use crate::registry::{self, Held, Refusal};
use pinstream::backend::opencl::{queue_context, Context, DeviceBuffer, Event, Queue};
use pinstream::gather::{
    CachedGather, Gather, GatherCache, GatherError, GatherOptions, OverlapCheck,
};
use pinstream::host::HostRegion;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::ops::Range;
use std::sync::Arc;

/// Each context's gather (its copy kernels, built once), by context address, kept until
/// [`release_gather`].
static GATHERS: GatherCache = GatherCache::new();

/// Pieces of staging a context's gather keeps: the least it takes, since `gather` copies
/// from mapped memory in place and never stages.
const STAGING: usize = 64 << 10;

/// A call and its parameters, as its messages name them: the mapped array's and the
/// buffer's. The written side is `dst` both ways.
#[derive(Clone, Copy)]
struct Names {
    op: &'static str,
    array: &'static str,
    buffer: &'static str,
}

const GATHER: Names = Names {
    op: "gather",
    array: "src",
    buffer: "dst",
};

const SCATTER: Names = Names {
    op: "scatter",
    array: "dst",
    buffer: "src",
};

/// The gather of context `ctx`: the one kept (a look in the cache, with the GIL held, so a
/// call gives the GIL up once, in `run`), else made, building its kernels with the GIL
/// released.
fn gather_for(py: Python<'_>, ctx: &Context) -> PyResult<Arc<CachedGather>> {
    if let Some(kept) = GATHERS.get(ctx.as_raw() as usize) {
        return Ok(kept);
    }
    py.detach(|| GATHERS.get_or_make(ctx, &GatherOptions::for_capacity(STAGING)))
        .map_err(|e| gather_error(py, GATHER, e))
}

/// A gather's error as Python's, naming the call's parameters: memory and OpenCL failures
/// as their own classes, refused pieces and buffers as `ValueError`.
fn gather_error(py: Python<'_>, n: Names, e: GatherError) -> PyErr {
    let Names { op, array, buffer } = n;
    let msg = match e {
        GatherError::Host(e) => return host_error_in(py, &format!("{op}: {array}: "), e),
        GatherError::Backend(_) | GatherError::Build(_) => {
            return OpenCLError::new_err(format!("{op}: {e}"))
        }
        GatherError::NoPieces => format!("{op}: at least one piece is needed: give src_offsets, sizes and dst_offsets one entry per piece"),
        GatherError::EmptyPiece { index } => format!("{op}: sizes[{index}] is 0: give every piece at least one byte, or leave it out"),
        GatherError::OutOfBuffer { index, offset, len, size } => format!("{op}: piece {index} ({len} bytes at byte {offset} of {buffer}) ends past the {size}-byte device buffer {buffer}: give {buffer}_offsets and sizes inside it"),
        GatherError::OtherContext => format!("{op}: {array} was allocated in another context than queue's: allocate it with pinstream.empty(queue.context, shape, dtype, mapped=True)"),
        GatherError::Overlap { first, second } => format!("{op}: pieces {first} and {second} overlap in dst, so which one lands last would be undefined: give dst_offsets whose ranges are disjoint (disjoint=True skips this check and leaves the overlap's bytes unspecified)"),
        GatherError::KernelAccess { flag, write } => {
            let (verb, made) = (if write { "writes" } else { "reads" }, flag.trim_start_matches("CL_MEM_"));
            format!("{op}: {buffer} was made with {flag} (cl.mem_flags.{made}), and {op} {verb} it with a kernel: pass a buffer made with cl.mem_flags.READ_WRITE")
        }
        e => format!("{op}: {e}"),
    };
    PyValueError::new_err(msg)
}

/// Pieces as the library takes them: (host offset in the mapped region, length, offset in
/// the device buffer).
type Pieces = Vec<(usize, usize, usize)>;

/// The pieces in `raw`: native-endian `u64` triples (offset in the array, length, offset in
/// the device buffer), each taken exactly and checked to lie inside the array's `len` bytes,
/// and returned with host offsets from `base`, the array's first byte in its mapped region.
fn pieces(n: Names, raw: &[u8], len: usize, base: usize) -> PyResult<Pieces> {
    let Names { op, array, buffer } = n;
    if !raw.len().is_multiple_of(24) {
        return Err(PyValueError::new_err(format!("{op}: the pieces are {} bytes, not whole triples of 8-byte words (pinstream's Python side makes them: please report it)", raw.len())));
    }
    let past = |index, (at, n): (u64, u64)| {
        PyValueError::new_err(format!(
            "{op}: piece {index} ({n} bytes at byte {at} of {array}) ends past {array}'s {len} bytes: give {array}_offsets and sizes inside the array"
        ))
    };
    let word = |t: &[u8], i: usize| {
        t[i * 8..i * 8 + 8]
            .try_into()
            .map_or(u64::MAX, u64::from_ne_bytes)
    };
    let mut out = Vec::with_capacity(raw.len() / 24);
    for (index, t) in raw.chunks_exact(24).enumerate() {
        let (at, n, dev) = (word(t, 0), word(t, 1), word(t, 2));
        let fits = |x: u64| usize::try_from(x).ok();
        let host = fits(at)
            .zip(fits(n))
            .filter(|&(a, b)| a.checked_add(b).is_some_and(|end| end <= len))
            .and_then(|(a, b)| Some((base.checked_add(a)?, b)));
        let Some((host, n)) = host else {
            return Err(past(index, (at, n)));
        };
        // Only where addresses have fewer than 64 bits; the library checks it against the buffer.
        let dev = fits(dev).ok_or_else(|| PyValueError::new_err(format!("{op}: {buffer}_offsets[{index}] is {dev}, past this machine's addresses: give offsets inside {buffer}")))?;
        out.push((host, n, dev));
    }
    Ok(out)
}

/// A call's OpenCL objects: the caller's queue (`cl_command_queue` handle) and buffer
/// (`cl_mem` handle), adopted, and their context's gather.
struct Call {
    queue: Queue,
    buffer: DeviceBuffer,
    gather: Arc<CachedGather>,
}

impl Call {
    fn adopt(py: Python<'_>, n: Names, (queue, buffer): (usize, usize)) -> PyResult<Call> {
        let Names {
            op, buffer: name, ..
        } = n;
        let raw_ctx = queue_context(queue as _).map_err(|e| {
            PyValueError::new_err(format!(
                "{op}: queue is not a command queue ({e}): pass a pyopencl.CommandQueue"
            ))
        })?;
        let ctx = adopt_context(py, raw_ctx as usize)?;
        // SAFETY: the Python side holds the pyopencl queue for the whole call.
        let queue = unsafe { Queue::from_raw(queue as _, &ctx) }.map_err(|e| {
            PyValueError::new_err(format!(
                "{op}: {e}: pass an in-order host queue of the array's context"
            ))
        })?;
        // SAFETY: the Python side holds the pyopencl buffer for the whole call.
        let buffer = unsafe { DeviceBuffer::from_raw(buffer as _, &ctx) }.map_err(|e| {
            PyValueError::new_err(format!(
                "{op}: {name} is not a buffer of queue's context ({e}): pass a pyopencl.Buffer made in queue.context"
            ))
        })?;
        let gather = gather_for(py, &ctx)?;
        Ok(Call {
            queue,
            buffer,
            gather,
        })
    }
}

/// The overlap check `disjoint` asks for.
fn check(disjoint: bool) -> OverlapCheck {
    match disjoint {
        true => OverlapCheck::Vouched,
        false => OverlapCheck::On,
    }
}

/// The mapped memory holding a call's array, and where the array lies in it.
struct Mapped {
    held: Held,
    /// The array's bytes.
    len: usize,
    /// The array's first byte in the region.
    base: usize,
}

/// The mapped memory holding `array` (C-contiguous, and writable where `writes`).
fn mapped(n: Names, array: &Bound<'_, PyAny>, writes: bool) -> PyResult<Mapped> {
    let Names {
        op, array: name, ..
    } = n;
    let export = Export::get(array)?;
    if !export.is_c_contiguous() {
        return Err(PyValueError::new_err(format!("{op}: {name} is not C-contiguous: its pieces are byte offsets into one range, so pass a contiguous mapped array (or a contiguous slice of one)")));
    }
    if writes && export.readonly() {
        return Err(PyValueError::new_err(format!(
            "{op}: {name} is read-only: pass a writable mapped array"
        )));
    }
    let span = export.span(&format!("{op}: {name}"))?;
    let (held, range) = find(n, &span)?;
    Ok(Mapped {
        held,
        len: span.len(),
        base: span.start - range.start,
    })
}

/// The pinned memory holding every byte of `span`, with its whole range.
fn find(n: Names, span: &Range<usize>) -> PyResult<(Held, Range<usize>)> {
    registry::find(span.clone()).map_err(|e| match e {
        Refusal::NotFound(None) => NotRegisteredError::new_err(format!(
            "{}: {} {:#x}..{:#x} is not memory pinstream pins: allocate it with pinstream.empty(ctx, shape, dtype, mapped=True)",
            n.op, n.array, span.start, span.end
        )),
        e => refused((n.op, n.array), span, e),
    })
}

/// Why a call failed with the GIL released: a refused piece, or the library's refusal,
/// phrased once the GIL is back.
enum Failed {
    Pieces(PyErr),
    Gather(GatherError),
}

/// Runs `copy` with the context's gather, the array's region and the pieces in `raw`, all
/// with the GIL released: reading and checking the pieces, the gather's lock, the library's
/// call, and dropping what the call held. Returns the event's handle.
fn run<F>(
    py: Python<'_>,
    n: Names,
    (call, at): (Call, Mapped),
    raw: &[u8],
    disjoint: bool,
    copy: F,
) -> PyResult<usize>
where
    F: FnOnce(&mut Gather, &Call, &HostRegion, &Pieces) -> Result<Event, GatherError> + Send,
{
    let done = py.detach(move || {
        let pieces = pieces(n, raw, at.len, at.base).map_err(Failed::Pieces)?;
        let mut g = call.gather.lock();
        // Set on every call: the context's gather is shared by all its callers.
        g.set_overlap_check(check(disjoint));
        copy(&mut g, &call, at.held.region(), &pieces).map_err(Failed::Gather)
    });
    match done {
        Ok(done) => Ok(done.into_raw() as usize),
        Err(Failed::Pieces(e)) => Err(e),
        Err(Failed::Gather(e)) => Err(gather_error(py, n, e)),
    }
}

/// Copies pieces of the mapped array `src` into the buffer `dst` (a `cl_mem` handle) on
/// `queue` (a `cl_command_queue` handle), with one kernel that reads them in place; `raw`
/// holds the pieces (see `pieces`). Returns the kernel's `cl_event`, whose one reference
/// goes to the caller. `disjoint`: the caller vouches that no two pieces overlap in `dst`,
/// and that check is skipped (bounds are still checked).
#[pyfunction]
pub fn gather(
    py: Python<'_>,
    queue: usize,
    dst: usize,
    src: &Bound<'_, PyAny>,
    raw: &[u8],
    disjoint: bool,
) -> PyResult<usize> {
    let call = Call::adopt(py, GATHER, (queue, dst))?;
    let at = mapped(GATHER, src, false)?;
    run(
        py,
        GATHER,
        (call, at),
        raw,
        disjoint,
        |g, call, region, pieces| {
            g.upload_gather_mapped(&call.queue, &call.buffer, region, pieces, &[])
        },
    )
}

/// Copies pieces of the buffer `src` (a `cl_mem` handle) into the mapped array `dst` on
/// `queue`, with one kernel that writes them in place; `raw` holds the pieces (see
/// `pieces`: offsets in `dst`, lengths, offsets in `src`). Returns the kernel's
/// `cl_event`, whose one reference goes to the caller, who reads the pieces once it
/// completes. `disjoint`: the caller vouches that no two pieces overlap in `dst`.
#[pyfunction]
pub fn scatter(
    py: Python<'_>,
    queue: usize,
    src: usize,
    dst: &Bound<'_, PyAny>,
    raw: &[u8],
    disjoint: bool,
) -> PyResult<usize> {
    let call = Call::adopt(py, SCATTER, (queue, src))?;
    let at = mapped(SCATTER, dst, true)?;
    run(
        py,
        SCATTER,
        (call, at),
        raw,
        disjoint,
        |g, call, region, pieces| {
            // In flight on the region: its free waits for the kernel (on pinstream's thread).
            g.download_scatter_mapped_shared(&call.queue, &call.buffer, region, pieces, &[])
        },
    )
}

/// Drops the gather kept for the context `ctx` (a `cl_context` handle) and its reference
/// to the context, with the GIL released (dropping it waits for its own DMA); the next
/// `gather` or `scatter` there makes it again. Nothing when there is none.
#[pyfunction]
pub fn release_gather(py: Python<'_>, ctx: usize) {
    py.detach(|| drop(GATHERS.take(ctx)));
}
