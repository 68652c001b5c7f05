//! `gather` / `scatter`: pieces of a mapped array (`pinstream.empty(..., mapped=True)`)
//! copied into a device buffer, or from one into the array, by one kernel that reads or
//! writes them in place across the bus (`cudaMemcpyBatchAsync` with the pieces in
//! `cudaHostAllocMapped` memory), the written ranges checked for overlap unless the caller
//! vouches that they are disjoint.

use crate::errors::{cl_error, host_error};
use crate::export::Export;
use crate::memory::adopt_context;
use crate::register::refused;
use crate::registry;
use pinstream::backend::opencl::{queue_context, Context, DeviceBuffer, Queue};
use pinstream::gather::{CachedGather, GatherCache, GatherError, GatherOptions, OverlapCheck};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::Arc;

/// Each context's gather (its copy kernels, built once), by context address, kept until
/// [`release_gather`].
static GATHERS: GatherCache = GatherCache::new();

/// Pieces of staging a context's gather keeps: the least it takes, since `gather` copies
/// from mapped memory in place and never stages.
const STAGING: usize = 64 << 10;

/// The gather of context `ctx`, made on first use.
fn gather_for(py: Python<'_>, ctx: &Context) -> PyResult<Arc<CachedGather>> {
    GATHERS
        .get_or_make(ctx, &GatherOptions::for_capacity(STAGING))
        .map_err(|e| gather_error(py, "gather", e))
}

/// A gather's error as Python's: memory and OpenCL failures as their own classes, refused
/// pieces as `ValueError`.
fn gather_error(py: Python<'_>, op: &str, e: GatherError) -> PyErr {
    match e {
        GatherError::Host(e) => host_error(py, e),
        GatherError::Backend(e) => crate::errors::OpenCLError::new_err(format!("{op}: {e}")),
        e => PyValueError::new_err(format!("{op}: {e}")),
    }
}

/// The pieces in `raw`: native-endian `u64` triples (offset in the array, length, offset in
/// the device buffer), checked to lie inside the array's `len` bytes and returned with host
/// offsets from `base`, the array's first byte in its mapped region.
fn pieces(
    (op, name): (&str, &str),
    raw: &[u8],
    len: usize,
    base: usize,
) -> PyResult<Vec<(usize, usize, usize)>> {
    let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().unwrap_or_default()) as usize;
    let mut out = Vec::with_capacity(raw.len() / 24);
    for (index, t) in raw.chunks_exact(24).enumerate() {
        let (at, n, dev) = (word(&t[..8]), word(&t[8..16]), word(&t[16..]));
        if at.checked_add(n).is_none_or(|end| end > len) {
            return Err(PyValueError::new_err(format!(
                "{op}: piece {index} ({n} bytes at byte {at} of {name}) ends past {name}'s {len} bytes: give offsets and sizes inside the array"
            )));
        }
        out.push((base + at, n, dev));
    }
    Ok(out)
}

/// A call's OpenCL objects: the caller's queue (`cl_command_queue` handle) and buffer
/// (`cl_mem` handle), adopted, and their context's gather with the overlap check `disjoint`
/// asks for.
struct Call {
    queue: Queue,
    buffer: DeviceBuffer,
    gather: Arc<CachedGather>,
}

impl Call {
    fn adopt(py: Python<'_>, op: &str, (queue, buffer): (usize, usize)) -> PyResult<Call> {
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
        let buffer =
            unsafe { DeviceBuffer::from_raw(buffer as _, &ctx) }.map_err(|e| cl_error(py, &e))?;
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
    let call = Call::adopt(py, "gather", (queue, dst))?;
    let export = Export::get(src)?;
    contiguous("gather", "src", &export)?;
    let span = export.span();
    let (held, range) = registry::find(span.clone()).map_err(|e| refused("gather", &span, e))?;
    let pieces = pieces(("gather", "src"), raw, span.len(), span.start - range.start)?;
    let mut g = call.gather.lock();
    // Set on every call: the context's gather is shared by all its callers.
    g.set_overlap_check(check(disjoint));
    let done = g
        .upload_gather_mapped(&call.queue, &call.buffer, held.region(), &pieces, &[])
        .map_err(|e| gather_error(py, "gather", e))?;
    Ok(done.into_raw() as usize)
}

/// Refuses an array that is not one C-contiguous range: offsets are bytes of the array, and
/// a strided view (`a[::2]`, a column, a reversed view) spans bytes that are not its own.
fn contiguous(op: &str, name: &str, export: &Export) -> PyResult<()> {
    match export.is_c_contiguous() {
        true => Ok(()),
        false => Err(PyValueError::new_err(format!("{op}: {name} is not C-contiguous: its pieces are byte offsets into one range, so pass a contiguous mapped array (or a contiguous slice of one)"))),
    }
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
    let call = Call::adopt(py, "scatter", (queue, src))?;
    let export = Export::get(dst)?;
    contiguous("scatter", "dst", &export)?;
    if export.readonly() {
        return Err(PyValueError::new_err(
            "scatter: dst is read-only: pass a writable mapped array",
        ));
    }
    let span = export.span();
    let (held, range) = registry::find(span.clone()).map_err(|e| refused("scatter", &span, e))?;
    let base = span.start - range.start;
    let pieces = pieces(("scatter", "dst"), raw, span.len(), base)?;
    let host = held
        .region()
        .device_buffer()
        .map_err(|e| host_error(py, e))?;
    let mut g = call.gather.lock();
    g.set_overlap_check(check(disjoint));
    let done = g
        .download_scatter_mapped_buffer(&call.queue, &call.buffer, &host, &pieces, &[])
        .map_err(|e| gather_error(py, "scatter", e))?;
    Ok(done.into_raw() as usize)
}

/// Drops the gather kept for the context `ctx` (a `cl_context` handle) and its reference
/// to the context; the next `gather` or `scatter` there makes it again. Nothing when there is none.
#[pyfunction]
pub fn release_gather(ctx: usize) {
    drop(GATHERS.take(ctx));
}
