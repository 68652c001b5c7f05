//! The `psStream*` calls: pinstream's streaming engine (`pinstream::engine::run`) in the
//! caller's own `cl_context`, with the caller's own `cl_kernel`, over host memory from
//! `psHostAlloc` / `psHostRegister`, in CUDA's style (`cudaStreamCreate`,
//! `cudaStreamSynchronize`, `cudaStreamDestroy`); for a Vulkan program, the `psVkStream*` calls
//! over `psVkHost*` memory. This module: the stream's life and its runs;
//! `describe`: the job; `handle`: the stream behind its handle and its worker thread; `host`:
//! the caller's memory as a run borrows it; `on`: the device a stream runs on; `report`:
//! types, the report and error codes; `vulkan`: the `psVkStream*` calls.

mod describe;
mod handle;
mod host;
mod on;
mod report;
#[cfg(feature = "vulkan")]
mod vulkan;

pub use describe::*;
pub use report::{psDType, psStreamReport, PS_RESIDENCY_AUTO, PS_RESIDENCY_OFF};
#[cfg(feature = "vulkan")]
pub use vulkan::*;

use crate::api::non_null;
use crate::error::{
    boundary, psError_t, Failure, PS_ERROR_INVALID_CONTEXT, PS_ERROR_INVALID_VALUE,
    PS_ERROR_NOT_SUPPORTED,
};
use crate::types::{cl_command_queue, cl_context, cl_event};
use handle::{On, Stream};
use pinstream::backend::fault::Fault;
use pinstream::backend::opencl::{Context, QueueRefusal};
use pinstream::engine::{BoundsCheck, StreamOptions, WorkSize};
use std::ffi::c_uint;

/// A stream's C type: opaque, only ever used through its handle.
#[allow(non_camel_case_types)]
pub struct psStream_st {
    _opaque: [u8; 0],
}

/// A stream (`cudaStream_t`'s counterpart): made by `psStreamCreate`, given to every
/// `psStream*` call, ended by `psStreamDestroy`.
#[allow(non_camel_case_types)]
pub type psStream_t = *mut psStream_st;

/// The stream of a handle, refused when NULL or not live.
fn stream(handle: psStream_t) -> Result<std::sync::Arc<Stream>, Failure> {
    non_null(handle, "stream")?;
    Stream::get(handle as usize)
}

/// The caller's context adopted on the device of `queue` (NULL: the context's first GPU,
/// else its first device). The queue is checked and released at once, never used.
fn adopt_on(ctx: cl_context, queue: cl_command_queue) -> Result<Context, Failure> {
    if ctx.is_null() {
        return Err(Failure::new(
            PS_ERROR_INVALID_CONTEXT,
            "the cl_context is NULL: pass the context your program created (clCreateContext)",
        ));
    }
    // SAFETY: the header requires `ctx` to be a valid context the caller holds a reference to.
    let context = unsafe { Context::from_raw(ctx.cast()) }.map_err(Failure::from)?;
    if queue.is_null() {
        return Ok(context);
    }
    // SAFETY: the header requires `queue` to be a valid queue the caller holds.
    unsafe { context.on_queue_device(queue.cast()) }.map_err(|e| {
        let code = match e {
            QueueRefusal::OutOfOrder | QueueRefusal::OnDevice => PS_ERROR_NOT_SUPPORTED,
            _ => PS_ERROR_INVALID_VALUE,
        };
        Failure::new(
            code,
            format!("{e}: pass an in-order host queue of ctx, or NULL"),
        )
    })
}

/// Opens a stream on the device `on` gives and stores its handle in `*stream` (NULL first, so
/// that a refusal leaves NULL there): the part of `psStreamCreate` and `psVkStreamCreate`
/// that is not the API's.
///
/// # Safety
/// `stream` is NULL or points at a writable `psStream_t`.
unsafe fn create(
    stream: *mut psStream_t,
    vram_budget: usize,
    block_bytes: usize,
    on: impl FnOnce() -> Result<On, Failure>,
) -> Result<(), Failure> {
    non_null(stream, "stream (where to store the handle)")?;
    // SAFETY: `stream` is non-null and points at a psStream_t the caller lets us write.
    unsafe { stream.write(std::ptr::null_mut()) };
    check_sizes(vram_budget, block_bytes)?;
    let handle = Stream::open(on()?, vram_budget as u64, block_bytes)?;
    // SAFETY: as above.
    unsafe { stream.write(handle as psStream_t) };
    Ok(())
}

/// Refuses a budget or block of 0, or a block above the budget.
fn check_sizes(vram_budget: usize, block_bytes: usize) -> Result<(), Failure> {
    if vram_budget == 0 || block_bytes == 0 || block_bytes > vram_budget {
        return Err(Failure::new(
            PS_ERROR_INVALID_VALUE,
            format!("vram_budget {vram_budget} and block_bytes {block_bytes}: both above 0, and the block at most the budget (a ring needs one block at least)"),
        ));
    }
    Ok(())
}

/// Creates a stream on the caller's context `ctx` (`cudaStreamCreate`): a ring of device
/// buffers of `block_bytes` each inside `vram_budget` bytes of device memory, made when a run
/// starts and released when it ends, run by a thread of the stream's own in issue order.
///
/// `queue`: NULL to run on the context's first GPU (else its first device), or a queue of
/// `ctx` whose device the stream runs on. Only its device is read: the stream enqueues
/// nothing on it and never waits on it or finishes it; it makes queues of its own.
///
/// Then describe the job (`psStreamSetKernel`, `psStreamSetInPlace` or `psStreamAddInput` +
/// `psStreamSetOutput`, `psStreamAddResident`, `psStreamSetArg`, `psStreamSetTypes`) and run
/// it (`psStreamRun`, `psStreamRunAsync`).
///
/// The kernel convention (the CLI's `run`): the kernel takes, in order,
///  1. one `__global` pointer per input: its block (the in-place range first);
///  2. out of place, one `__global` pointer for the output block;
///  3. one `__global` or `__constant` pointer per resident argument, uploaded once;
///  4. one to three integers (`uint`, `int`, `ulong`, `long`): the block's input element
///     count, then optionally the block index, then optionally the block's element offset;
///  5. the scalars set by name with `psStreamSetArg`, typed by the kernel.
///
/// It is launched with one work item per input element of the block, and once with a count
/// of 0 before the stream starts, so guard with `if (i < n)`.
///
/// ```c
/// // in place: x = x * scale, 10 GiB through a 4 GiB budget in 256 MiB blocks
/// // __kernel void scale(__global float *x, ulong n, ulong block, ulong offset, float s)
/// psStream_t s;
/// psStreamCreate(&s, ctx, NULL, 4ull << 30, 256 << 20);
/// psStreamSetKernel(s, kernel);
/// psStreamSetInPlace(s, host, 10ull << 30);      // from psHostAlloc or psHostRegister
/// psStreamSetArg(s, "s", "2.0");
/// psStreamReport r;
/// if (psStreamRun(s, 1, PS_RESIDENCY_AUTO, &r) != PS_SUCCESS) puts(psGetLastErrorDetail());
/// printf("%.1f GB/s, overlap %.2f\n", r.combined_gbps, r.overlap);
/// psStreamDestroy(s);
/// ```
///
/// Errors: `PS_ERROR_INVALID_VALUE` (stream NULL, vram_budget or block_bytes 0, block_bytes
/// above vram_budget, a queue that is not one of ctx's), `PS_ERROR_INVALID_CONTEXT`,
/// `PS_ERROR_NOT_SUPPORTED` (an out-of-order or device-side queue), `PS_ERROR_OPENCL`,
/// `PS_ERROR_INTERNAL` (the stream's thread could not be started, or a bug in pinstream:
/// the detail says which; please report a bug with it).
///
/// # Safety
/// `stream` is NULL or points at a writable `psStream_t`; `ctx` is NULL or a valid context;
/// `queue` is NULL or a valid command queue.
#[no_mangle]
pub unsafe extern "C" fn psStreamCreate(
    stream: *mut psStream_t,
    ctx: cl_context,
    queue: cl_command_queue,
    vram_budget: usize,
    block_bytes: usize,
) -> psError_t {
    boundary("psStreamCreate", || {
        let on = || adopt_on(ctx, queue).map(On::OpenCl);
        // SAFETY: `stream` is NULL or writable (the contract).
        unsafe { create(stream, vram_budget, block_bytes, on) }
    })
}

/// Destroys a stream (`cudaStreamDestroy`): returns once the runs issued on it have ended
/// (call `psStreamCancel` first to stop them early), with every device buffer, queue and
/// kernel object of the stream released and its references to the context dropped (a stream
/// of `psVkStreamCreate`: its own `VkDevice` destroyed, and its imports of the program's
/// blocks released). The caller's context, queue and kernel stay the caller's. A call on the stream that another
/// thread makes meanwhile either completes or is refused with `PS_ERROR_INVALID_VALUE` (the
/// stream was destroyed), as every call on it afterwards is.
///
/// Must not be called from a callback of one of the stream's own events (`clSetEventCallback`
/// on `psStreamRunAsync`'s event): the driver may run it on the stream's thread, which this
/// call waits for (PoCL does; NVIDIA runs callbacks on a thread of its own, where nothing is
/// refused and a wait inside the driver's callback is the caller's risk). Refused on the
/// stream's own thread with `PS_ERROR_INVALID_VALUE`; destroy it from another thread.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (NULL, not a stream, destroyed already, called from the
/// stream's own thread).
#[no_mangle]
pub extern "C" fn psStreamDestroy(stream: psStream_t) -> psError_t {
    boundary("psStreamDestroy", || {
        non_null(stream, "stream")?;
        Stream::close(stream as usize)
    })
}

/// The options of a run of `s`'s job over `passes` passes with `residency`.
fn options(s: &Stream, passes: c_uint, residency: u64) -> Result<StreamOptions, Failure> {
    if passes == 0 {
        return Err(Failure::new(
            PS_ERROR_INVALID_VALUE,
            "passes is 0: pass 1 for one pass over the job",
        ));
    }
    Ok(StreamOptions {
        dtype: pinstream::engine::DType::F32,
        out_dtype: pinstream::engine::DType::F32,
        block_bytes: s.block,
        in_per_out: 1,
        slots: None,
        vram_budget: s.budget,
        work: WorkSize::default(),
        sequential: false,
        stop: None,
        check_bounds: BoundsCheck::Auto,
        passes: passes as usize,
        residency: report::residency(residency),
    })
}

/// Runs the stream's job and returns when it has ended (the synchronous form of
/// `psStreamRunAsync`): blocks uploaded, run through the kernel and downloaded, overlapped
/// on three queues of the stream's own, inside its budget. After the runs issued before it.
///
/// `passes` (at least 1): runs over the job in a row; in place, pass k+1 reads what pass k
/// wrote. `residency`: `PS_RESIDENCY_AUTO` keeps as many blocks in device memory across the
/// passes as the budget leaves room for (uploaded once, in place downloaded once),
/// `PS_RESIDENCY_OFF` none, another value at most that many bytes of them.
/// `report`: NULL, or filled with what the run did.
///
/// The caller owes: the job's host memory stays allocated and pinned (no `psHostFree` or
/// `psHostUnregister`, `psVkHostFree` or `psVkHostUnregister`), and is neither written (inputs, residents) nor read or written
/// (in-place range, output) until the call returns; no `psMemcpyBatch*Async` writing the
/// job's ranges, or reading the ones the run writes, is still in flight (wait for its event:
/// the run does not). A range the run writes (the in-place range, the output) may share no
/// byte with another range of the job: such a job is refused before anything runs. A failed or cancelled run leaves the in-place range or output part
/// done.
///
/// Must not be called from a callback of one of the stream's own events (`clSetEventCallback`
/// on `psStreamRunAsync`'s event): the driver may run it on the stream's thread, which this
/// call waits for (PoCL does; NVIDIA runs callbacks on a thread of its own, where nothing is
/// refused and a wait inside the driver's callback is the caller's risk). Refused on the
/// stream's own thread with `PS_ERROR_INVALID_VALUE`; `psStreamRunAsync` may be
/// called there instead.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, passes 0, no kernel or no data set,
/// a range the run writes that overlaps another, sizes that do not fit the budget or the
/// kernel's launch, an argument the kernel lacks, called from the stream's own thread; the
/// detail names it), `PS_ERROR_HOST_MEMORY_NOT_REGISTERED` (a range no `psHostAlloc` or
/// `psHostRegister` pinned: pin it with `psHostRegister`), `PS_ERROR_INVALID_KERNEL` (the
/// kernel's arguments do not fit the job, or it wrote past a buffer), `PS_ERROR_CANCELLED`,
/// `PS_ERROR_MEMORY_ALLOCATION`, `PS_ERROR_OPENCL` (a command failed: the detail names the
/// block and the stage), `PS_ERROR_INTERNAL` (a bug in pinstream: please report the detail).
/// On a stream of `psVkStreamCreate`: ranges from `psVkHostAlloc` or `psVkHostRegister`
/// instead (`PS_ERROR_HOST_MEMORY_NOT_REGISTERED` names them), `PS_ERROR_VULKAN` for a failed
/// command, and, on the first run over a block, importing it into the stream's device:
/// `PS_ERROR_NOT_PINNABLE` (the driver refused it), `PS_ERROR_STRATEGY_UNAVAILABLE`,
/// `PS_ERROR_MEMORY_ALLOCATION`.
///
/// # Safety
/// `report` is NULL or points at a writable `psStreamReport`; the job's ranges are as the
/// caller owes above.
#[no_mangle]
pub unsafe extern "C" fn psStreamRun(
    stream: psStream_t,
    passes: c_uint,
    residency: u64,
    report: *mut psStreamReport,
) -> psError_t {
    boundary("psStreamRun", || {
        let s = self::stream(stream)?;
        let opts = options(&s, passes, residency)?;
        let done = s.run_sync(opts)?;
        if !report.is_null() {
            // SAFETY: a non-null report points at a psStreamReport the caller lets us write.
            unsafe { report.write(psStreamReport::from(&done)) };
        }
        Ok(())
    })
}

/// Issues a run of the stream's job and returns at once (`cudaLaunchKernel` on a stream,
/// with `cudaEventRecord`): `*event` is a user event of the stream's context that becomes
/// `CL_COMPLETE` when the run ended well, or a negative status (minus the `psError_t` code)
/// when it failed or was cancelled; `psStreamSynchronize` then returns that code and
/// `psGetLastErrorDetail` says why. Wait with `clWaitForEvents`, make your own commands wait
/// for it (`clEnqueue...(..., 1, event, ...)`), and release it with `clReleaseEvent`.
/// Runs issued on one stream run one after another, in issue order. `passes` and
/// `residency` are `psStreamRun`'s. On failure `*event` is NULL and nothing was issued.
///
/// The caller owes, as `cudaMemcpyAsync` asks: the job's host memory stays allocated and
/// pinned, and is neither written (inputs, residents) nor read or written (in-place range,
/// output) until the event completes, and no `psMemcpyBatch*Async` writing the job's ranges,
/// or reading the ones the run writes, is still in flight when it is issued (wait for its
/// event: the run does not). Changes to the stream's job after this call concern later runs
/// only. Before exiting the program or unloading the library, wait for the
/// event (or call `psStreamSynchronize` or `psStreamDestroy`).
///
/// It may be called from a callback of one of the stream's own events (it waits for nothing),
/// unlike `psStreamRun`, `psStreamSynchronize` and `psStreamDestroy`.
///
/// Errors (of the issue; the run's own errors come through the event): those of
/// `psStreamRun` found before the run starts (not a live stream, passes 0, no kernel, a
/// range not pinned, a range the run writes that overlaps another),
/// `PS_ERROR_INVALID_VALUE` for a stream of `psVkStreamCreate` (use `psVkStreamRunAsync`),
/// `PS_ERROR_OPENCL` (the event could not be made), `PS_ERROR_INTERNAL` (a bug in pinstream: please report the
/// detail).
///
/// # Safety
/// `event` is NULL or points at a writable `cl_event`.
#[no_mangle]
pub unsafe extern "C" fn psStreamRunAsync(
    stream: psStream_t,
    passes: c_uint,
    residency: u64,
    event: *mut cl_event,
) -> psError_t {
    boundary("psStreamRunAsync", || {
        non_null(event, "event (where to store the run's event)")?;
        // SAFETY: `event` is non-null and points at a cl_event the caller lets us write.
        unsafe { event.write(std::ptr::null_mut()) };
        let s = self::stream(stream)?;
        let ctx = s.cl_context(
            "psStreamRunAsync gives a cl_event, and a stream of psVkStreamCreate has no cl_context: issue its runs with psVkStreamRunAsync and wait with psStreamSynchronize",
        )?;
        let opts = options(&s, passes, residency)?;
        let user = ctx.user_event().map_err(Failure::from)?;
        let theirs = user.clone();
        if let Err(f) = s.run_async(opts, user) {
            // Nothing was issued and no one will see this event: it is completed before its
            // last reference goes, so no driver keeps a user event that never ends (a
            // context whose user event never completes may wait for it when destroyed).
            let _ = theirs.set_user_status(0);
            return Err(f);
        }
        // SAFETY: as above; the caller now owns this reference.
        unsafe { event.write(theirs.into_raw().cast()) };
        Ok(())
    })
}

/// Waits until every run issued on the stream has ended (`cudaStreamSynchronize`), and
/// returns the first failure of an asynchronous run since the last call (its code, and its
/// detail in `psGetLastErrorDetail`), or `PS_SUCCESS`. Waits on the stream's own work only.
///
/// Must not be called from a callback of one of the stream's own events (`clSetEventCallback`
/// on `psStreamRunAsync`'s event): the driver may run it on the stream's thread, which this
/// call waits for (PoCL does; NVIDIA runs callbacks on a thread of its own, where nothing is
/// refused and a wait inside the driver's callback is the caller's risk). Refused on the
/// stream's own thread with `PS_ERROR_INVALID_VALUE`; wait from another thread.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, called from the stream's own
/// thread), or a run's code.
#[no_mangle]
pub extern "C" fn psStreamSynchronize(stream: psStream_t) -> psError_t {
    boundary("psStreamSynchronize", || {
        self::stream(stream)?.synchronize()
    })
}

/// Stops every run issued on the stream and not ended: a running one after the blocks it
/// has in flight, the others before they start; each ends with `PS_ERROR_CANCELLED` (its
/// event's status `-PS_ERROR_CANCELLED`). Returns at once; `psStreamSynchronize` waits for
/// them. Every device buffer of a cancelled run is released; the stream and the context stay
/// usable. In-place data and outputs are then part done.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream).
#[no_mangle]
pub extern "C" fn psStreamCancel(stream: psStream_t) -> psError_t {
    boundary("psStreamCancel", || {
        self::stream(stream)?.cancel();
        Ok(())
    })
}

/// The report of the stream's last run that ended well (after `psStreamRunAsync`, once its
/// event completed; after `psVkStreamRunAsync`, once `psStreamSynchronize` returned).
///
/// Errors: `PS_ERROR_INVALID_VALUE` (a NULL argument, not a live stream, no run has ended
/// well yet).
///
/// # Safety
/// `report` is NULL or points at a writable `psStreamReport`.
#[no_mangle]
pub unsafe extern "C" fn psStreamGetReport(
    stream: psStream_t,
    report: *mut psStreamReport,
) -> psError_t {
    boundary("psStreamGetReport", || {
        non_null(report, "report")?;
        let got = self::stream(stream)?.report().ok_or_else(|| {
            Failure::new(
                PS_ERROR_INVALID_VALUE,
                "no run of this stream has ended well yet: run it first (psStreamRun)",
            )
        })?;
        // SAFETY: `report` is non-null and points at a psStreamReport the caller lets us write.
        unsafe { report.write(got) };
        Ok(())
    })
}

/// Test hook, not part of the C API: the stream's later runs fail the command `fault` names
/// (as `PINSTREAM_INJECT_FAULT=STAGE:N` does, counted per run), or none. Its code.
#[doc(hidden)]
pub fn stream_inject_fault(stream: psStream_t, fault: Option<Fault>) -> psError_t {
    boundary("stream_inject_fault", || {
        let s = self::stream(stream)?;
        *s.fault.lock().unwrap_or_else(|p| p.into_inner()) = fault;
        Ok(())
    })
}
