//! Buffers over host memory: the OpenCL calls that both the pinning mechanisms
//! ([`super::hostmem`]) and the zero-copy allocations ([`super::zerocopy`]) make, and the
//! error of a raw allocation.

use super::context::{Context, MemObject, Queue};
use super::error::{Call, ClError};
use std::io;
use std::ptr;

/// `CL_MEM_LOCATION_HOST_NV`.
const CL_MEM_LOCATION_HOST_NV: u64 = 1 << 0;
/// `CL_MEM_PINNED_NV`.
const CL_MEM_PINNED_NV: u64 = 1 << 1;

/// Why a raw allocation failed.
#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    /// `mmap` (unix) or `VirtualAlloc` (Windows) failed; the message names the fix where
    /// the OS error has a known one.
    #[error("{}", crate::backend::os::map_failure(*.bytes, .source))]
    Map {
        /// Requested bytes.
        bytes: usize,
        /// OS error.
        source: io::Error,
    },
    /// `mlock` failed.
    #[error("mlock of {bytes} bytes failed: {source}")]
    Lock {
        /// Requested bytes.
        bytes: usize,
        /// OS error.
        source: io::Error,
    },
    /// The caller's pages could not be made resident and writable before registration.
    #[error("making {bytes} bytes resident before registration failed: {source}")]
    Populate {
        /// Bytes of the piece.
        bytes: usize,
        /// OS error.
        source: io::Error,
    },
    /// An OpenCL call failed.
    #[error(transparent)]
    Cl(#[from] ClError),
    /// The caller's data could not be written into a chunk as it was made resident (a
    /// progressive pin's fill).
    #[error("writing its data: {0}")]
    Fill(String),
    /// The platform lacks the function this mechanism needs.
    #[error("the platform does not provide {0}")]
    Missing(&'static str),
}

/// A `clCreateBufferNV` buffer of `n` bytes in host memory, pinned
/// (`CL_MEM_LOCATION_HOST_NV | CL_MEM_PINNED_NV`), with the OpenCL `flags`.
pub(super) fn create_nv_host(ctx: &Context, flags: u64, n: usize) -> Result<MemObject, AllocError> {
    let f = ctx
        .inner
        .ext
        .create_buffer_nv
        .ok_or(AllocError::Missing("clCreateBufferNV"))?;
    let mut err = 0;
    // SAFETY: `f` is this platform's clCreateBufferNV; no host pointer is passed.
    let raw = unsafe {
        f(
            ctx.as_raw(),
            flags,
            CL_MEM_LOCATION_HOST_NV | CL_MEM_PINNED_NV,
            n,
            ptr::null_mut(),
            &mut err,
        )
    };
    if raw.is_null() || err != 0 {
        return Err(ClError::new("clCreateBufferNV", if err != 0 { err } else { -4 }).into());
    }
    // SAFETY: a fresh buffer of `n` bytes in `ctx`, owned by nobody else.
    Ok(unsafe { MemObject::from_raw(raw, n, ctx) })
}

/// Maps the whole of `mem` for reading and writing on `queue`, blocking; its host pointer.
pub(super) fn map_whole(queue: &Queue, mem: &MemObject) -> Result<*mut u8, ClError> {
    let mut out: cl3::types::cl_mem = ptr::null_mut();
    let flags = cl3::memory::CL_MAP_READ | cl3::memory::CL_MAP_WRITE;
    // SAFETY: blocking map of the whole live buffer; the pointer is written into `out`.
    let ev = unsafe {
        cl3::command_queue::enqueue_map_buffer(
            queue.raw,
            mem.raw,
            1,
            flags,
            0,
            mem.size,
            &mut out,
            0,
            ptr::null(),
        )
    }
    .call("clEnqueueMapBuffer")?;
    drop(super::context::Event(ev, Default::default()));
    Ok(out.cast())
}

/// Unmaps the whole-buffer map of `mem` at `p` on `queue` (a failure is logged: the buffer
/// is released after it anyway).
pub(super) fn unmap_whole(queue: &Queue, mem: &MemObject, p: *mut u8) {
    // SAFETY: `p` is the pointer the map of `mem` returned; the caller unmaps it once.
    let r = unsafe {
        cl3::command_queue::enqueue_unmap_mem_object(queue.raw, mem.raw, p.cast(), 0, ptr::null())
    };
    match r {
        Ok(ev) => drop(super::context::Event(ev, Default::default())),
        Err(c) => tracing::warn!("{}", ClError::new("clEnqueueUnmapMemObject", c)),
    }
}
