//! The seven calls the layer looks at, the same whichever way it was entered. Each does its
//! bookkeeping and then makes the program's call (or, for a rewritten buffer, the NV call)
//! through [`Next`]. Nothing here changes an argument the driver sees, except the rewrite.

use super::driver::{self, Nv};
use super::guard::Forward;
use super::next::Next;
use super::sink;
use super::state;
use crate::decide::{self, flag_names, Decision, Request, Skip};
use crate::ledger::{Kind, Use};
use crate::settings::{human, LogLevel, Settings};
use opencl_sys::{
    cl_buffer_create_type, cl_context, cl_int, cl_kernel, cl_mem, cl_mem_flags, cl_mem_properties,
    CL_BUFFER_CREATE_TYPE_REGION, CL_INVALID_OPERATION, CL_SUCCESS,
};
use std::ffi::c_void;

/// `clCreateBuffer`.
///
/// # Safety
/// The arguments are those of a `clCreateBuffer` call.
pub(crate) unsafe fn create_buffer(
    next: &Next,
    fwd: &Forward<'_, cl_mem>,
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
    // SAFETY: as this function's contract.
    unsafe { create(next, fwd, ctx, &req, host_ptr, err) }
}

/// `clCreateBufferWithProperties` (OpenCL 3.0): rewritten only with no properties.
///
/// # Safety
/// The arguments are those of a `clCreateBufferWithProperties` call.
#[allow(clippy::too_many_arguments)] // the OpenCL signature, and where it goes
pub(crate) unsafe fn create_buffer_with_properties(
    next: &Next,
    fwd: &Forward<'_, cl_mem>,
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
    // SAFETY: as this function's contract.
    unsafe { create(next, fwd, ctx, &req, host_ptr, err) }
}

/// # Safety
/// `ctx`, `host_ptr` and `err` are those of the program's buffer creation; `fwd` makes it.
unsafe fn create(
    next: &Next,
    fwd: &Forward<'_, cl_mem>,
    ctx: cl_context,
    req: &Request,
    host_ptr: *mut c_void,
    err: *mut cl_int,
) -> cl_mem {
    let s = Settings::current();
    if let Err(skip) = decide::screen(req, s) {
        return keep(&skip, req, fwd);
    }
    // SAFETY: `ctx` is the program's context.
    let found = unsafe { driver::gather(next, ctx, s) };
    match (decide::decide(req, s, &found.facts), found.nv) {
        (Decision::Rewrite { flags, nv_flags }, Some(nv)) => {
            // SAFETY: as this function's contract.
            unsafe { rewrite(next, fwd, ctx, req, (flags, nv_flags), host_ptr, err, nv) }
                .unwrap_or_else(|code| keep(&Skip::NvFailed(code), req, fwd))
        }
        (Decision::WouldRewrite, _) => {
            let mem = fwd.call();
            // SAFETY: `mem` is the buffer just made, if any.
            unsafe { track(next, mem, req, Kind::WouldRewrite) };
            mem
        }
        (Decision::Keep(skip), _) => keep(&skip, req, fwd),
        (Decision::Rewrite { .. }, None) => {
            keep(&Skip::Unsupported(decide::Support::NoFunction), req, fwd)
        }
    }
}

/// Leaves a buffer as asked: says why where it was a candidate, makes the call, counts what
/// the driver made (a refusal apart, with no bytes).
fn keep(skip: &Skip, req: &Request, fwd: &Forward<'_, cl_mem>) -> cl_mem {
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
    let mem = fwd.call();
    state::ledger().kept(skip, req.size, mem as usize);
    mem
}

/// Makes the rewritten buffer; `Err(code)` when the NV call failed (nothing was made).
///
/// # Safety
/// As [`create`].
#[allow(clippy::too_many_arguments)] // the program's call and where it goes
unsafe fn rewrite(
    next: &Next,
    fwd: &Forward<'_, cl_mem>,
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
    // The program's buffer is made: a panic from here on returns it, never makes another.
    fwd.made(mem);
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
    fwd: &Forward<'_, cl_mem>,
    buffer: cl_mem,
    kind: cl_buffer_create_type,
    info: *const c_void,
) -> cl_mem {
    let sub = fwd.call();
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
    _next: &Next,
    fwd: &Forward<'_, cl_int>,
    kernel: cl_kernel,
    size: usize,
    value: *const c_void,
) -> cl_int {
    if size == size_of::<cl_mem>() && !value.is_null() && state::tracking() {
        // SAFETY: `value` points to `size` bytes, the size of a handle.
        let handle = unsafe { std::ptr::read_unaligned(value as *const usize) };
        noticed(handle, Use::KernelArg(kernel as usize));
    }
    fwd.call()
}

fn used(mem: cl_mem, what: Use) {
    if state::tracking() {
        noticed(mem as usize, what);
    }
}

/// Books a use of the buffer `handle` and logs what it calls for, after the ledger's lock is
/// released (a log line may be slow; no other thread waits for it).
fn noticed(handle: usize, what: Use) {
    let notice = state::ledger().used(handle, what);
    state::notice(notice);
}

/// `clEnqueueReadBuffer`: a use of a tracked buffer is noticed, then the call passes on.
pub(crate) fn enqueue_read_buffer(_next: &Next, fwd: &Forward<'_, cl_int>, mem: cl_mem) -> cl_int {
    used(mem, Use::Read);
    fwd.call()
}

/// `clEnqueueWriteBuffer`: a use of a tracked buffer is noticed, then the call passes on.
pub(crate) fn enqueue_write_buffer(_next: &Next, fwd: &Forward<'_, cl_int>, mem: cl_mem) -> cl_int {
    used(mem, Use::Write);
    fwd.call()
}

/// `clEnqueueCopyBuffer`: a use of a tracked buffer is noticed, then the call passes on.
pub(crate) fn enqueue_copy_buffer(
    _next: &Next,
    fwd: &Forward<'_, cl_int>,
    src: cl_mem,
    dst: cl_mem,
) -> cl_int {
    used(src, Use::Copy);
    used(dst, Use::Copy);
    fwd.call()
}
