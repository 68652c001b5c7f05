//! Batched copies of many scattered pieces (`cudaMemcpyBatchAsync`'s habits): the pieces are
//! packed through pinned staging into few large transfers and placed with a kernel
//! (`pinstream::gather`). The staging and kernels are made once per context and kept
//! (`pinstream::gather::GatherCache`), behind one lock per context, so calls from several
//! threads are safe.

use crate::error::{
    boundary, psError_t, Failure, PS_ERROR_INVALID_CONTEXT, PS_ERROR_INVALID_OPERATION,
    PS_ERROR_INVALID_VALUE, PS_ERROR_NOT_SUPPORTED,
};
use crate::types::{cl_command_queue, cl_context, cl_event, cl_mem};
use crate::{mapped, registry};
use pinstream::backend::opencl::{
    queue_context, Context, DeviceBuffer, Event, MemFlags, Queue, QueueRefusal,
};
use pinstream::gather::{
    CachedGather, Destination, GatherCache, GatherError, GatherOptions, OverlapCheck,
};
use std::ffi::{c_uint, c_void};
use std::sync::Arc;

/// `flags` of `psMemcpyBatchHtoDAsyncWithFlags` / `psMemcpyBatchDtoHAsyncWithFlags`: the
/// caller vouches that the ranges the call writes (device ranges up, host pieces down) are
/// disjoint, as `cudaMemcpyBatchAsync` assumes, and the call does not check it. Bounds are
/// still checked; overlapping pieces then leave the overlap's bytes unspecified, never
/// memory outside the pieces written.
pub const PS_BATCH_DISJOINT: c_uint = 0x1;

/// The gathers made so far, by context address, each kept until `psMemcpyBatchRelease`.
static GATHERS: GatherCache = GatherCache::new();

impl From<GatherError> for Failure {
    fn from(e: GatherError) -> Self {
        let code = match &e {
            GatherError::Backend(_) | GatherError::Build(_) => crate::error::PS_ERROR_OPENCL,
            GatherError::Host(_) | GatherError::NotContiguous | GatherError::Unpacker(_) => {
                crate::error::PS_ERROR_MEMORY_ALLOCATION
            }
            GatherError::KernelAccess { .. } => PS_ERROR_INVALID_OPERATION,
            _ => PS_ERROR_INVALID_VALUE,
        };
        Failure::new(code, e.to_string())
    }
}

/// The gather of the context of `raw_ctx`, made on first use.
fn entry(raw_ctx: cl_context) -> Result<Arc<CachedGather>, Failure> {
    if let Some(kept) = GATHERS.get(raw_ctx as usize) {
        return Ok(kept);
    }
    // SAFETY: the context of a live queue is live while the queue is.
    let ctx = unsafe { Context::from_raw(raw_ctx.cast()) }
        .map_err(|e| Failure::new(PS_ERROR_INVALID_CONTEXT, e.to_string()))?;
    Ok(GATHERS.get_or_make(&ctx, &GatherOptions::default())?)
}

/// The caller's queue (checked: in order, on the context's device) and its context's gather.
fn adopt_queue(queue: cl_command_queue) -> Result<(Queue, Arc<CachedGather>), Failure> {
    let raw_ctx = queue_context(queue.cast()).map_err(|e| {
        Failure::new(
            PS_ERROR_INVALID_VALUE,
            format!("the queue is NULL or not a command queue ({e}): pass the cl_command_queue to copy on"),
        )
    })?;
    let entry = entry(raw_ctx.cast())?;
    // SAFETY: the header requires a valid queue; from_raw checks it against the context.
    let q = unsafe { Queue::from_raw(queue.cast(), &entry.ctx) }.map_err(queue_refused)?;
    Ok((q, entry))
}

/// The refusal of a caller's queue, naming the condition that failed and the fix.
fn queue_refused(e: QueueRefusal) -> Failure {
    let fix = match &e {
        QueueRefusal::Invalid(_) => "pass the cl_command_queue to copy on",
        QueueRefusal::OtherContext => "pass a queue of the buffer's context",
        QueueRefusal::OutOfOrder => {
            "pass an in-order queue (properties without CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)"
        }
        QueueRefusal::OnDevice => "pass a host command queue",
        QueueRefusal::OtherDevice { .. } | QueueRefusal::DeviceNotInContext => {
            "pass a queue made on that device"
        }
    };
    let code = match &e {
        QueueRefusal::Invalid(_) => PS_ERROR_INVALID_VALUE,
        _ => PS_ERROR_NOT_SUPPORTED,
    };
    Failure::new(
        code,
        format!("{e}: batched copies run on an in-order host queue of the context's first GPU (else its first device); {fix}"),
    )
}

/// The caller's buffer, checked as the driver checks a buffer transfer (a buffer, of the
/// queue's context) and for the host's access (`write`: an upload); what the copy kernel does
/// to it the gather checks (`GatherError::KernelAccess`), from the same flags: the buffer
/// reads them from the driver once, for both checks.
fn buffer(mem: cl_mem, ctx: &Context, write: bool) -> Result<DeviceBuffer, Failure> {
    // SAFETY: the header requires a valid memory object.
    let buf = unsafe { DeviceBuffer::from_raw(mem.cast(), ctx) }.map_err(|e| {
        Failure::new(
            PS_ERROR_INVALID_VALUE,
            format!(
                "the cl_mem is NULL, not a buffer (an image or a pipe) or of another context ({e}): pass a buffer of the queue's context"
            ),
        )
    })?;
    check_access(buf.flags().map_err(Failure::from)?, write)?;
    Ok(buf)
}

/// Refuses a buffer whose flags forbid the batch's host access, as `clEnqueueWriteBuffer` /
/// `clEnqueueReadBuffer` refuse it (`CL_INVALID_OPERATION`). Kernels that may not write a
/// read-only buffer or read a write-only one are refused by the gather, for every front.
fn check_access(flags: MemFlags, write: bool) -> Result<(), Failure> {
    let (verb, call) = match write {
        true => ("write", "clEnqueueWriteBuffer"),
        false => ("read", "clEnqueueReadBuffer"),
    };
    match flags.host_forbids(write) {
        Some(flag) => Err(Failure::new(PS_ERROR_INVALID_OPERATION, format!("the buffer was made with {flag}, so the host may not {verb} it ({call} returns CL_INVALID_OPERATION too): make it without that flag"))),
        None => Ok(()),
    }
}

/// The caller's arrays as (host pointer, size, device offset) per piece, every array and
/// every host pointer checked for NULL; `names`: the offsets', the pointers' and the sizes'.
///
/// # Safety
/// Each array is NULL or holds `count` entries.
unsafe fn triples(
    count: usize,
    offsets: *const usize,
    ptrs: *const *mut c_void,
    sizes: *const usize,
    names: [&str; 3],
) -> Result<Vec<(*mut u8, usize, usize)>, Failure> {
    if count == 0 {
        return Err(Failure::new(
            PS_ERROR_INVALID_VALUE,
            "count is 0: pass at least one piece",
        ));
    }
    let arrays: [*const c_void; 3] = [offsets.cast(), ptrs.cast(), sizes.cast()];
    if let Some(i) = arrays.iter().position(|p| p.is_null()) {
        return Err(Failure::new(
            PS_ERROR_INVALID_VALUE,
            format!("{} is NULL", names[i]),
        ));
    }
    // SAFETY: non-null arrays of `count` entries (the caller's promise).
    let (offs, ptrs, lens) = unsafe {
        (
            std::slice::from_raw_parts(offsets, count),
            std::slice::from_raw_parts(ptrs, count),
            std::slice::from_raw_parts(sizes, count),
        )
    };
    (0..count)
        .map(|i| piece(i, (ptrs[i], lens[i], offs[i]), names))
        .collect()
}

/// Piece `i` (host pointer, size, device offset), checked as `psHostRegister` checks its
/// range: not NULL, a size some memory can hold, and no wrap around the address space.
fn piece(
    i: usize,
    (ptr, len, off): (*mut c_void, usize, usize),
    names: [&str; 3],
) -> Result<(*mut u8, usize, usize), Failure> {
    if ptr.is_null() {
        return Err(Failure::new(
            PS_ERROR_INVALID_VALUE,
            format!(
                "{}[{i}] is NULL: pass host memory of sizes[{i}] bytes for every piece",
                names[1]
            ),
        ));
    }
    // No memory is that large: refused before a slice of it is made.
    if len > isize::MAX as usize {
        return Err(Failure::new(
            PS_ERROR_INVALID_VALUE,
            format!(
                "{}[{i}] is {len} bytes, more than any memory can hold: pass each piece's real size",
                names[2]
            ),
        ));
    }
    crate::api::range_of(ptr, len).map_err(|f| {
        let at = format!("{}[{i}] ({ptr:p}) and {}[{i}] ({len})", names[1], names[2]);
        Failure::new(
            f.code,
            format!(
                "{at}: {}: pass each piece's real address and size",
                f.detail
            ),
        )
    })?;
    Ok((ptr.cast::<u8>(), len, off))
}

/// Sets `*event` (when `event` is not NULL) to NULL, as a call that fails leaves it.
///
/// # Safety
/// `event` is NULL or points at a writable `cl_event`.
unsafe fn clear(event: *mut cl_event) {
    if !event.is_null() {
        // SAFETY: the caller's promise.
        unsafe { event.write(std::ptr::null_mut()) };
    }
}

/// Gives `e` to the caller through `event` (when not NULL), or releases it.
///
/// # Safety
/// `event` is NULL or points at a writable `cl_event`.
unsafe fn hand_out(e: Event, event: *mut cl_event) {
    if !event.is_null() {
        // SAFETY: the caller's promise; the reference is theirs to release.
        unsafe { event.write(e.into_raw().cast()) };
    }
}

/// Copies `count` pieces of host memory to `dst` in few large transfers
/// (`cudaMemcpyBatchAsync`, host to device): piece `i` is `sizes[i]` bytes from `srcs[i]` to
/// byte `dst_offsets[i]` of `dst`, on `queue` after the commands already on it.
///
/// The pieces are copied into pinstream's pinned staging before the call returns, so the
/// caller may reuse or free `srcs` at once (pageable or pinned memory alike). Except when
/// every piece lies in one block of mapped memory (`PS_HOST_ALLOC_MAPPED`) of the queue's
/// context: then one kernel reads the pieces in place across the bus (no packing, no staging),
/// and the caller leaves them unchanged until `*event` completes, and waits for it before
/// `psHostFree` of the block, as for any transfer. The device
/// copies run asynchronously on `queue` (which must be in order, on the context's first GPU):
/// later commands on the queue see the data; `*event` (when `event` is not NULL) completes
/// when every piece is in place, and the caller releases it (`clReleaseEvent`).
///
/// The staging (two pinned buffers and two device buffers of about 18.4 MiB each, and the
/// copy kernels) is made on the first call in a context and kept until
/// `psMemcpyBatchRelease(ctx)`; it holds a reference to the context meanwhile.
///
/// The call never waits for `queue` or anything on it: it returns while a kernel before it
/// runs, or while `queue` waits on a user event, and `*event` completes after them. It
/// blocks only to pack: the pieces go through two pinned host stages in turn (4 MiB of
/// pieces per batch), and packing a stage waits for pinstream's own DMA of the stage's
/// previous batch to a device staging buffer, a copy that waits for nothing on `queue`
/// (each batch takes a device staging buffer whose copy kernel has ended, or a new one).
/// While `queue` holds the copy kernels back, each further batch makes a device staging
/// buffer of about 18.4 MiB, freed once its kernel has run.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (NULL arrays or pieces, count 0, a size of 0 or above
/// any memory's, a piece whose addresses wrap around the address space, a piece that starts
/// inside a block from `psHostAlloc` and runs past its end or runs into one from before it,
/// a range past `dst`, two pieces overlapping in `dst`: the order would be undefined; `dst`
/// not a buffer of `queue`'s context, such as an image),
/// `PS_ERROR_INVALID_OPERATION` (`dst` made with `CL_MEM_HOST_NO_ACCESS`,
/// `CL_MEM_HOST_READ_ONLY` or `CL_MEM_READ_ONLY`), `PS_ERROR_NOT_SUPPORTED` (an out-of-order
/// or device-side queue, or one on another device of the context: the detail says which),
/// `PS_ERROR_MEMORY_ALLOCATION`, `PS_ERROR_OPENCL`. On any error `*event` (when `event` is
/// not NULL) is NULL: there is nothing to wait for or release.
///
/// # Safety
/// `queue` and `dst` are NULL or valid objects of one context; the arrays are NULL or hold
/// `count` entries; each `srcs[i]` is NULL or readable for `sizes[i]` bytes; `event` is NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn psMemcpyBatchHtoDAsync(
    queue: cl_command_queue,
    dst: cl_mem,
    dst_offsets: *const usize,
    srcs: *const *const c_void,
    sizes: *const usize,
    count: usize,
    event: *mut cl_event,
) -> psError_t {
    // SAFETY: the caller's promises, passed on unchanged.
    unsafe {
        htod(
            ("psMemcpyBatchHtoDAsync", 0),
            queue,
            dst,
            (dst_offsets, srcs, sizes, count),
            event,
        )
    }
}

/// `psMemcpyBatchHtoDAsync` with `flags`: 0, or `PS_BATCH_DISJOINT`, with which the
/// caller vouches that no two pieces overlap in `dst` (as `cudaMemcpyBatchAsync` assumes)
/// and the call skips checking it: a pass over the pieces' offsets, and buckets of them
/// when they are not in order (on the project's 2-core test host ~30 µs for 4,096 pieces and
/// ~1 ms for 65,536, against 0.5 ms for the H200's kernel to copy the latter). Every range is still checked against `dst` and the sources' memory, so nothing
/// outside them is read or written; if vouched pieces do overlap, which piece's bytes the
/// overlap holds afterwards is unspecified. Other bits are refused
/// (`PS_ERROR_INVALID_VALUE`). Otherwise as `psMemcpyBatchHtoDAsync`, errors and safety
/// included.
///
/// # Safety
/// As `psMemcpyBatchHtoDAsync`.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // psMemcpyBatchHtoDAsync's seven, and the flags
pub unsafe extern "C" fn psMemcpyBatchHtoDAsyncWithFlags(
    queue: cl_command_queue,
    dst: cl_mem,
    dst_offsets: *const usize,
    srcs: *const *const c_void,
    sizes: *const usize,
    count: usize,
    flags: c_uint,
    event: *mut cl_event,
) -> psError_t {
    let call = ("psMemcpyBatchHtoDAsyncWithFlags", flags);
    // SAFETY: the caller's promises, passed on unchanged.
    unsafe { htod(call, queue, dst, (dst_offsets, srcs, sizes, count), event) }
}

/// The arrays of a batched copy: offsets in the device buffer, host pointers, sizes, and
/// their length.
type Arrays<P> = (*const usize, *const P, *const usize, usize);

/// The overlap check `flags` of a `*WithFlags` call ask for, refused where they set bits
/// other than `PS_BATCH_DISJOINT`.
fn overlap_check(flags: c_uint) -> Result<OverlapCheck, Failure> {
    match flags {
        0 => Ok(OverlapCheck::On),
        PS_BATCH_DISJOINT => Ok(OverlapCheck::Vouched),
        _ => Err(Failure::new(
            PS_ERROR_INVALID_VALUE,
            format!("flags {flags:#x} set bits the batched copies do not take: pass 0 (overlapping written ranges refused) or PS_BATCH_DISJOINT (the caller vouches they are disjoint)"),
        )),
    }
}

/// `psMemcpyBatchHtoDAsync[WithFlags]`, as the call `name`d with `flags`.
///
/// # Safety
/// As `psMemcpyBatchHtoDAsync`.
unsafe fn htod(
    (name, flags): (&'static str, c_uint),
    queue: cl_command_queue,
    dst: cl_mem,
    (dst_offsets, srcs, sizes, count): Arrays<*const c_void>,
    event: *mut cl_event,
) -> psError_t {
    // SAFETY: `event` is NULL or writable (the caller's promise).
    unsafe { clear(event) };
    boundary(name, || {
        let check = overlap_check(flags)?;
        let names = ["dst_offsets", "srcs", "sizes"];
        // SAFETY: the arrays are NULL or hold `count` entries (the caller's promise).
        let raw = unsafe { triples(count, dst_offsets, srcs.cast(), sizes, names) }?;
        let (q, entry) = adopt_queue(queue)?;
        let dst = buffer(dst, &entry.ctx, true)?;
        let mut gather = entry.lock();
        // Set on every call: the context's gather is shared by all its callers.
        gather.set_overlap_check(check);
        let zero_copy = mapped::in_one_mapped_block(&entry.ctx, &raw, |region, pieces| {
            gather.upload_gather_mapped(&q, &dst, region, pieces, &[])
        });
        let done = match zero_copy {
            Some(done) => done?,
            None => {
                // Not all in one mapped block: each piece is read where it lies.
                registry::check_pieces(&raw, names[1])?;
                let pieces: Vec<(&[u8], usize)> = raw
                    .into_iter()
                    // SAFETY: readable for its size (the caller's promise), read before return.
                    .map(|(p, n, off)| (unsafe { std::slice::from_raw_parts(p, n) }, off))
                    .collect();
                gather.upload_gather(&q, &dst, &pieces, &[])?
            }
        };
        // SAFETY: `event` is NULL or writable (the caller's promise).
        unsafe { hand_out(done, event) };
        Ok(())
    })
}

/// A piece of the caller's memory that an asynchronous download writes into.
struct CallerBytes {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain memory the caller gave for the call; only the unpacking thread touches it,
// and only until the call's event completes (the header's rule).
unsafe impl Send for CallerBytes {}

impl AsMut<[u8]> for CallerBytes {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: writable for `len` bytes, disjoint from the call's other pieces, and left
        // untouched by the caller until the call's event completes (the header's rule).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// Copies `count` pieces of `src` to host memory in few large transfers
/// (`cudaMemcpyBatchAsync`, device to host): piece `i` is `sizes[i]` bytes from byte
/// `src_offsets[i]` of `src` to `dsts[i]`, on `queue` after the commands already on it.
///
/// Asynchronous, as CUDA's: the call enqueues the copies and returns; `*event` (when
/// `event` is not NULL; the caller releases it) is a marker on `queue` that completes when
/// every piece is in the caller's memory, and fails (a negative status) when a copy did.
/// Later commands on `queue` wait for it, so `clFinish(queue)` waits for it too. Until
/// then `dsts` must stay valid and be neither read nor written: a thread of pinstream's
/// copies each batch out of pinned staging into them once its transfer is done.
///
/// The call never waits for `queue` or anything on it (a kernel still running, a user
/// event not yet set). It blocks only where `psMemcpyBatchHtoDAsync` does, to write a
/// batch's segment table into a free host stage; while every stage holds a batch not yet
/// copied out, it makes another (about 18.4 MiB pinned), freed once two are free again.
///
/// When the call fails, nothing of it writes `dsts` after it returns (earlier batches of
/// a call that failed midway may have been written: their bytes are undefined), and
/// `*event` (when `event` is not NULL) is NULL.
///
/// Before exiting the program or unloading the library (`dlclose`, `FreeLibrary`) with a
/// download in flight, wait for the returned event (`clWaitForEvents`, or `clFinish(queue)`):
/// until it completes, pinstream's thread waits on the driver and writes `dsts`, and must not
/// outlive the library or the driver's teardown.
///
/// When every piece lies in one block of mapped memory (`PS_HOST_ALLOC_MAPPED`) of the
/// queue's context, one kernel writes them in place across the bus (no staging, no thread),
/// and `*event` is that kernel's.
///
/// Device ranges may overlap; host pieces must not. Errors as `psMemcpyBatchHtoDAsync`,
/// with `PS_ERROR_INVALID_OPERATION` for a `src` made with `CL_MEM_HOST_NO_ACCESS`,
/// `CL_MEM_HOST_WRITE_ONLY` or `CL_MEM_WRITE_ONLY`.
///
/// # Safety
/// `queue` and `src` are NULL or valid objects of one context; the arrays are NULL or hold
/// `count` entries; each `dsts[i]` is NULL or writable for `sizes[i]` bytes until `*event`
/// completes, and no two overlap; `event` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn psMemcpyBatchDtoHAsync(
    queue: cl_command_queue,
    dsts: *const *mut c_void,
    src: cl_mem,
    src_offsets: *const usize,
    sizes: *const usize,
    count: usize,
    event: *mut cl_event,
) -> psError_t {
    // SAFETY: the caller's promises, passed on unchanged.
    unsafe {
        dtoh(
            ("psMemcpyBatchDtoHAsync", 0),
            queue,
            src,
            (src_offsets, dsts, sizes, count),
            event,
        )
    }
}

/// `psMemcpyBatchDtoHAsync` with `flags`: 0, or `PS_BATCH_DISJOINT`, with which the
/// caller vouches that no two host pieces overlap, and the call skips checking it where it
/// checks: pieces in one block of mapped memory (`PS_HOST_ALLOC_MAPPED`), written in place
/// by one kernel. Every range is still checked against `src` and the block, so nothing
/// outside them is read or written; if vouched pieces do overlap, which piece's bytes the
/// overlap holds afterwards is unspecified. Pieces elsewhere are the caller's promise
/// either way (see `psMemcpyBatchDtoHAsync`'s safety). Other bits are refused
/// (`PS_ERROR_INVALID_VALUE`). Otherwise as `psMemcpyBatchDtoHAsync`, errors and safety
/// included.
///
/// # Safety
/// As `psMemcpyBatchDtoHAsync`.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // psMemcpyBatchDtoHAsync's seven, and the flags
pub unsafe extern "C" fn psMemcpyBatchDtoHAsyncWithFlags(
    queue: cl_command_queue,
    dsts: *const *mut c_void,
    src: cl_mem,
    src_offsets: *const usize,
    sizes: *const usize,
    count: usize,
    flags: c_uint,
    event: *mut cl_event,
) -> psError_t {
    let call = ("psMemcpyBatchDtoHAsyncWithFlags", flags);
    // SAFETY: the caller's promises, passed on unchanged.
    unsafe { dtoh(call, queue, src, (src_offsets, dsts, sizes, count), event) }
}

/// `psMemcpyBatchDtoHAsync[WithFlags]`, as the call `name`d with `flags`.
///
/// # Safety
/// As `psMemcpyBatchDtoHAsync`.
unsafe fn dtoh(
    (name, flags): (&'static str, c_uint),
    queue: cl_command_queue,
    src: cl_mem,
    (src_offsets, dsts, sizes, count): Arrays<*mut c_void>,
    event: *mut cl_event,
) -> psError_t {
    // SAFETY: `event` is NULL or writable (the caller's promise).
    unsafe { clear(event) };
    boundary(name, || {
        let check = overlap_check(flags)?;
        let names = ["src_offsets", "dsts", "sizes"];
        // SAFETY: the arrays are NULL or hold `count` entries (the caller's promise).
        let raw = unsafe { triples(count, src_offsets, dsts, sizes, names) }?;
        let (q, entry) = adopt_queue(queue)?;
        let src = buffer(src, &entry.ctx, false)?;
        let mut gather = entry.lock();
        // Set on every call: the context's gather is shared by all its callers.
        gather.set_overlap_check(check);
        let zero_copy = mapped::in_one_mapped_block(&entry.ctx, &raw, |region, pieces| {
            gather.download_scatter_mapped(&q, &src, region, pieces, &[])
        });
        let done = match zero_copy {
            Some(done) => done?,
            None => {
                // Not all in one mapped block: each piece is written where it lies.
                registry::check_pieces(&raw, names[1])?;
                let pieces: Vec<(Destination, usize)> = raw
                    .into_iter()
                    .map(|(ptr, len, off)| (Box::new(CallerBytes { ptr, len }) as Destination, off))
                    .collect();
                gather.download_scatter_async(&q, &src, pieces, &[])?
            }
        };
        // SAFETY: `event` is NULL or writable (the caller's promise).
        unsafe { hand_out(done, event) };
        Ok(())
    })
}

/// Frees the staging `psMemcpyBatch*Async` made for `ctx` and its reference to the
/// context. It waits for pinstream's own DMA out of its host staging, never for the
/// caller's queues: copy kernels still queued there keep their device staging alive
/// themselves, and downloads not yet copied out keep their host stages (and the context)
/// until they are, freed then by pinstream's thread. The next batched copy in `ctx` makes it again.
/// `PS_SUCCESS` also when there was none.
///
/// Errors: `PS_ERROR_INVALID_CONTEXT` (NULL).
#[no_mangle]
pub extern "C" fn psMemcpyBatchRelease(ctx: cl_context) -> psError_t {
    boundary("psMemcpyBatchRelease", || {
        if ctx.is_null() {
            return Err(Failure::new(
                PS_ERROR_INVALID_CONTEXT,
                "the cl_context is NULL: pass the context the batched copies ran in",
            ));
        }
        let gone = GATHERS.take(ctx as usize);
        // Dropped outside the map's lock: that waits for pinstream's own DMA out of its free
        // host stages; downloads not yet copied out stay with pinstream's thread until they are.
        drop(gone);
        Ok(())
    })
}
