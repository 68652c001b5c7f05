//! The seven calls the layer looks at, the same whichever way it was entered. Each does its
//! bookkeeping and then makes the program's call (or, for a rewritten buffer, the NV call)
//! through [`Next`]. Nothing here changes an argument the driver sees, except the rewrite.

use super::driver::{self, missing, Nv};
use super::next::Next;
use super::sink;
use super::state;
use crate::decide::{self, flag_names, Decision, Request, Skip};
use crate::ledger::{Kind, Use};
use crate::settings::{human, LogLevel, Settings};
use opencl_sys::{
    cl_bool, cl_buffer_create_type, cl_command_queue, cl_context, cl_event, cl_int, cl_kernel,
    cl_mem, cl_mem_flags, cl_mem_properties, cl_uint, CL_BUFFER_CREATE_TYPE_REGION,
    CL_INVALID_OPERATION, CL_SUCCESS,
};
use std::ffi::c_void;

/// `clCreateBuffer`.
///
/// # Safety
/// The arguments are those of a `clCreateBuffer` call.
pub(crate) unsafe fn create_buffer(
    next: &Next,
    ctx: cl_context,
    flags: cl_mem_flags,
    size: usize,
    host_ptr: *mut c_void,
    err: *mut cl_int,
) -> cl_mem {
    let req = Request {
        flags,
        size: size as u64,
        host_ptr: !host_ptr.is_null(),
        properties: false,
    };
    // SAFETY: the program's own call, passed on.
    let forward = || match unsafe { next.create_buffer(ctx) } {
        // SAFETY: the next layer's function for this call, with the program's arguments unchanged.
        Some(f) => unsafe { f(ctx, flags, size, host_ptr, err) },
        None => missing(err),
    };
    // SAFETY: as this function's contract.
    unsafe { create(next, ctx, &req, host_ptr, err, forward) }
}

/// `clCreateBufferWithProperties` (OpenCL 3.0): rewritten only with no properties.
///
/// # Safety
/// The arguments are those of a `clCreateBufferWithProperties` call.
pub(crate) unsafe fn create_buffer_with_properties(
    next: &Next,
    ctx: cl_context,
    props: *const cl_mem_properties,
    flags: cl_mem_flags,
    size: usize,
    host_ptr: *mut c_void,
    err: *mut cl_int,
) -> cl_mem {
    // SAFETY: a non-null property list has at least its terminating 0.
    let listed = !props.is_null() && unsafe { *props } != 0;
    let req = Request {
        flags,
        size: size as u64,
        host_ptr: !host_ptr.is_null(),
        properties: listed,
    };
    // SAFETY: the program's own call, passed on.
    let forward = || match unsafe { next.create_buffer_with_properties(ctx) } {
        // SAFETY: the next layer's function for this call, with the program's arguments unchanged.
        Some(f) => unsafe { f(ctx, props, flags, size, host_ptr, err) },
        None => missing(err),
    };
    // SAFETY: as this function's contract.
    unsafe { create(next, ctx, &req, host_ptr, err, forward) }
}

/// # Safety
/// `ctx`, `host_ptr` and `err` are those of the program's buffer creation; `forward` makes it.
unsafe fn create(
    next: &Next,
    ctx: cl_context,
    req: &Request,
    host_ptr: *mut c_void,
    err: *mut cl_int,
    forward: impl FnOnce() -> cl_mem,
) -> cl_mem {
    let s = Settings::current();
    if let Err(skip) = decide::screen(req, s) {
        return keep(&skip, req, forward);
    }
    // SAFETY: `ctx` is the program's context.
    let found = unsafe { driver::gather(next, ctx, s) };
    match (decide::decide(req, s, &found.facts), found.nv) {
        (Decision::Rewrite { flags, nv_flags }, Some(nv)) => {
            // SAFETY: as this function's contract.
            unsafe { rewrite(next, ctx, req, (flags, nv_flags), host_ptr, err, nv) }
                .unwrap_or_else(|code| keep(&Skip::NvFailed(code), req, forward))
        }
        (Decision::WouldRewrite, _) => {
            let mem = forward();
            // SAFETY: `mem` is the buffer just made, if any.
            unsafe { track(next, mem, req, Kind::WouldRewrite) };
            mem
        }
        (Decision::Keep(skip), _) => keep(&skip, req, forward),
        (Decision::Rewrite { .. }, None) => keep(
            &Skip::Unsupported(decide::Support::NoFunction),
            req,
            forward,
        ),
    }
}

/// Leaves a buffer as asked: says why where it was a candidate, makes the call, counts what
/// the driver made (a refusal apart, with no bytes).
fn keep(skip: &Skip, req: &Request, forward: impl FnOnce() -> cl_mem) -> cl_mem {
    if !skip.is_routine() {
        let level = if matches!(skip, Skip::NvFailed(_)) {
            LogLevel::Warnings
        } else {
            LogLevel::Verbose
        };
        sink::log(
            level,
            &format!(
                "left as asked: clCreateBuffer({}, {}): {skip}",
                flag_names(req.flags),
                human(req.size)
            ),
        );
    }
    let mem = forward();
    state::ledger().kept(skip, req.size, mem as usize);
    mem
}

/// Makes the rewritten buffer; `Err(code)` when the NV call failed (nothing was made).
///
/// # Safety
/// As [`create`].
unsafe fn rewrite(
    next: &Next,
    ctx: cl_context,
    req: &Request,
    (flags, nv_flags): (cl_mem_flags, u64),
    host_ptr: *mut c_void,
    err: *mut cl_int,
    nv: Nv,
) -> Result<cl_mem, cl_int> {
    let mut code = CL_SUCCESS;
    // SAFETY: the program's context, flags, size and host pointer, with the NV location flags.
    let mem = unsafe {
        nv.create(
            next,
            ctx,
            flags,
            nv_flags,
            req.size as usize,
            host_ptr,
            &mut code,
        )
    };
    if mem.is_null() {
        return Err(if code == CL_SUCCESS {
            CL_INVALID_OPERATION
        } else {
            code
        });
    }
    if !err.is_null() {
        // SAFETY: the program's errcode_ret, non-null.
        unsafe { *err = CL_SUCCESS };
    }
    // SAFETY: `mem` was just made.
    let no = unsafe { track(next, mem, req, Kind::Rewritten) };
    let call = match nv {
        Nv::Real(_) => {
            "clCreateBufferNV(same flags, LOCATION_HOST_NV|PINNED_NV): pinned host memory, no VRAM"
        }
        Nv::Fake => "TEST HOOK fake clCreateBufferNV (clCreateBuffer, same flags)",
    };
    sink::log(
        LogLevel::Verbose,
        &format!(
            "rewrote buffer #{no}: clCreateBuffer({}, {}) -> {call}",
            flag_names(flags),
            human(req.size)
        ),
    );
    Ok(mem)
}

/// Puts a new buffer in the ledger and watches for its release; returns its number.
///
/// # Safety
/// `mem` is null or a buffer just made.
unsafe fn track(next: &Next, mem: cl_mem, req: &Request, kind: Kind) -> u64 {
    if mem.is_null() {
        return 0;
    }
    let (id, no) = {
        let mut ledger = state::ledger();
        let ids = ledger.track(mem as usize, req.size, kind);
        state::sync_tracking(&ledger);
        ids
    };
    if kind == Kind::WouldRewrite {
        sink::log(LogLevel::Warnings, &format!("audit: buffer #{no}, clCreateBuffer({}, {}), would be rewritten to pinned host memory", flag_names(req.flags), human(req.size)));
    }
    // SAFETY: `mem` is live.
    unsafe { driver::watch_release(next, mem, id) };
    no
}

/// `clCreateSubBuffer`: passed on; a sub-buffer of a tracked buffer is tracked too.
///
/// # Safety
/// The arguments are those of a `clCreateSubBuffer` call.
pub(crate) unsafe fn create_sub_buffer(
    next: &Next,
    buffer: cl_mem,
    flags: cl_mem_flags,
    kind: cl_buffer_create_type,
    info: *const c_void,
    err: *mut cl_int,
) -> cl_mem {
    // SAFETY: the program's own call, passed on.
    let sub = match unsafe { next.create_sub_buffer(buffer) } {
        // SAFETY: the next layer's function for this call, with the program's arguments unchanged.
        Some(f) => unsafe { f(buffer, flags, kind, info, err) },
        None => missing(err),
    };
    if !sub.is_null() && kind == CL_BUFFER_CREATE_TYPE_REGION && state::tracking() {
        // SAFETY: for CL_BUFFER_CREATE_TYPE_REGION (the only type), `info` is a
        // cl_buffer_region {origin, size}, which the driver just accepted.
        let size = unsafe { *(info as *const usize).add(1) } as u64;
        let id = {
            let mut ledger = state::ledger();
            let id = ledger.track_sub(sub as usize, buffer as usize, size);
            state::sync_tracking(&ledger);
            id
        };
        if let Some(id) = id {
            // SAFETY: `sub` is live.
            unsafe { driver::watch_release(next, sub, id) };
        }
    }
    sub
}

/// `clSetKernelArg`: a tracked buffer bound to a kernel is noticed, then the call passes on.
///
/// # Safety
/// The arguments are those of a `clSetKernelArg` call.
pub(crate) unsafe fn set_kernel_arg(
    next: &Next,
    kernel: cl_kernel,
    index: cl_uint,
    size: usize,
    value: *const c_void,
) -> cl_int {
    if size == size_of::<cl_mem>() && !value.is_null() && state::tracking() {
        // SAFETY: `value` points to `size` bytes, the size of a handle.
        let handle = unsafe { std::ptr::read_unaligned(value as *const usize) };
        state::notice(state::ledger().used(handle, Use::KernelArg(kernel as usize)));
    }
    // SAFETY: the program's own call, passed on.
    match unsafe { next.set_kernel_arg(kernel) } {
        // SAFETY: the next layer's function for this call, with the program's arguments unchanged.
        Some(f) => unsafe { f(kernel, index, size, value) },
        None => CL_INVALID_OPERATION,
    }
}

fn used(mem: cl_mem, what: Use) {
    if state::tracking() {
        state::notice(state::ledger().used(mem as usize, what));
    }
}

/// `clEnqueueReadBuffer`.
///
/// # Safety
/// The arguments are those of a `clEnqueueReadBuffer` call.
#[allow(clippy::too_many_arguments)] // the OpenCL signature
pub(crate) unsafe fn enqueue_read_buffer(
    next: &Next,
    q: cl_command_queue,
    mem: cl_mem,
    blocking: cl_bool,
    offset: usize,
    size: usize,
    ptr: *mut c_void,
    n: cl_uint,
    wait: *const cl_event,
    event: *mut cl_event,
) -> cl_int {
    used(mem, Use::Read);
    // SAFETY: the program's own call, passed on.
    match unsafe { next.enqueue_read_buffer(q) } {
        // SAFETY: the next layer's function for this call, with the program's arguments unchanged.
        Some(f) => unsafe { f(q, mem, blocking, offset, size, ptr, n, wait, event) },
        None => CL_INVALID_OPERATION,
    }
}

/// `clEnqueueWriteBuffer`.
///
/// # Safety
/// The arguments are those of a `clEnqueueWriteBuffer` call.
#[allow(clippy::too_many_arguments)] // the OpenCL signature
pub(crate) unsafe fn enqueue_write_buffer(
    next: &Next,
    q: cl_command_queue,
    mem: cl_mem,
    blocking: cl_bool,
    offset: usize,
    size: usize,
    ptr: *const c_void,
    n: cl_uint,
    wait: *const cl_event,
    event: *mut cl_event,
) -> cl_int {
    used(mem, Use::Write);
    // SAFETY: the program's own call, passed on.
    match unsafe { next.enqueue_write_buffer(q) } {
        // SAFETY: the next layer's function for this call, with the program's arguments unchanged.
        Some(f) => unsafe { f(q, mem, blocking, offset, size, ptr, n, wait, event) },
        None => CL_INVALID_OPERATION,
    }
}

/// `clEnqueueCopyBuffer`.
///
/// # Safety
/// The arguments are those of a `clEnqueueCopyBuffer` call.
#[allow(clippy::too_many_arguments)] // the OpenCL signature
pub(crate) unsafe fn enqueue_copy_buffer(
    next: &Next,
    q: cl_command_queue,
    src: cl_mem,
    dst: cl_mem,
    src_offset: usize,
    dst_offset: usize,
    size: usize,
    n: cl_uint,
    wait: *const cl_event,
    event: *mut cl_event,
) -> cl_int {
    used(src, Use::Copy);
    used(dst, Use::Copy);
    // SAFETY: the program's own call, passed on.
    match unsafe { next.enqueue_copy_buffer(q) } {
        // SAFETY: the next layer's function for this call, with the program's arguments unchanged.
        Some(f) => unsafe { f(q, src, dst, src_offset, dst_offset, size, n, wait, event) },
        None => CL_INVALID_OPERATION,
    }
}
