//! Mapped memory for C callers: `psHostAlloc(..., PS_HOST_ALLOC_MAPPED, ...)` and
//! `psHostGetDeviceBuffer` (`cudaHostAlloc(..., cudaHostAllocMapped)` and
//! `cudaHostGetDevicePointer`).

use crate::error::{boundary, psError_t, Failure, PS_ERROR_INVALID_VALUE};
use crate::registry::{self, Block};
use crate::types::{cl_mem, PS_HOST_ALLOC_STRATEGY_MASK};
use pinstream::backend::opencl::{Context, OpenCl};
use pinstream::host::{HostApi, HostRegion};
use std::ffi::{c_uint, c_void};

/// Mapped memory of `bytes` in `context`, for `psHostAlloc` with `flags` (which hold
/// [`PS_HOST_ALLOC_MAPPED`](crate::types::PS_HOST_ALLOC_MAPPED)), and why it is made so.
pub(crate) fn alloc(
    context: &Context,
    bytes: usize,
    flags: c_uint,
) -> Result<(HostRegion, String), Failure> {
    if flags & PS_HOST_ALLOC_STRATEGY_MASK != 0 {
        return Err(Failure::new(
            PS_ERROR_INVALID_VALUE,
            format!("flags {flags:#x}: PS_HOST_ALLOC_MAPPED chooses its mechanism per driver, so it takes no PS_STRATEGY_* value: pass PS_HOST_ALLOC_MAPPED alone"),
        ));
    }
    let region = <OpenCl as HostApi>::mapped(context, bytes, true)?;
    let reason = region.reason();
    Ok((region, reason))
}

/// The `cl_mem` over the mapped memory that contains `ptr`, which kernels read and write in
/// place, and the offset of `ptr` in it (`cudaHostGetDevicePointer`): any address inside a
/// block from `psHostAlloc(..., PS_HOST_ALLOC_MAPPED, ...)`, its start (offset 0) or an
/// interior pointer, gives the same buffer. Pass the buffer to a kernel and the offset
/// beside it (`clSetKernelArg`), or make a sub-buffer at the offset where it is aligned to
/// `CL_DEVICE_MEM_BASE_ADDR_ALIGN`.
///
/// The buffer is retained for you: release it with `clReleaseMemObject` when done. The
/// memory the kernels see stays alive while you hold it, after `psHostFree` too (the
/// driver's buffer owns the memory; pages pinstream maps for `CL_MEM_USE_HOST_PTR` are freed
/// by the buffer's destructor callback); the host pointer is invalid after `psHostFree`, as
/// in CUDA. On failure `*buffer` is NULL and `*offset` 0.
///
/// The host's writes are seen by kernels enqueued after them; a kernel's writes are seen by
/// the host once its event is complete (`clWaitForEvents`, `clFinish`).
///
/// Errors: `PS_ERROR_INVALID_VALUE` (a NULL argument), `PS_ERROR_HOST_MEMORY_NOT_REGISTERED`
/// (`ptr` lies in no block pinstream pinned), `PS_ERROR_NOT_MAPPED` (a block not allocated
/// with `PS_HOST_ALLOC_MAPPED`, or a `psHostRegister` range: their buffers given to a kernel
/// are copied into VRAM on discrete GPUs), `PS_ERROR_OPENCL`.
///
/// # Safety
/// `buffer` and `offset` are NULL or point at a writable `cl_mem` and `size_t`.
#[no_mangle]
pub unsafe extern "C" fn psHostGetDeviceBuffer(
    ptr: *const c_void,
    buffer: *mut cl_mem,
    offset: *mut usize,
) -> psError_t {
    boundary("psHostGetDeviceBuffer", || {
        for (p, what) in [(buffer.cast::<u8>(), "buffer"), (offset.cast(), "offset")] {
            if p.is_null() {
                return Err(Failure::new(
                    PS_ERROR_INVALID_VALUE,
                    format!("{what} (where to store the answer) is NULL"),
                ));
            }
        }
        // SAFETY: both are non-null and point at values the caller lets us write.
        unsafe {
            buffer.write(std::ptr::null_mut());
            offset.write(0);
        }
        if ptr.is_null() {
            return Err(Failure::new(PS_ERROR_INVALID_VALUE, "ptr is NULL"));
        }
        let addr = ptr as usize;
        let (buf, at) = registry::with_block(addr, |b: &Block<HostRegion>| {
            let start = b.host.as_ptr().map_or(addr, |p| p as usize);
            b.host.device_buffer().map(|buf| (buf, addr - start))
        })??;
        // SAFETY: as above; the buffer's reference is handed to the caller.
        unsafe {
            buffer.write(buf.into_raw().cast());
            offset.write(at);
        }
        Ok(())
    })
}

/// Runs `f` with the mapped region of `ctx` that holds every piece `(host pointer, length,
/// device offset)`, and the pieces as `(offset in the region, length, device offset)`, under
/// OpenCL's lock in the registry (a `psHostFree` on another thread waits for it); `None`
/// where the pieces do not all lie in one mapped block of `ctx` (they take the staged path
/// then).
pub(crate) fn in_one_mapped_block<R>(
    ctx: &Context,
    pieces: &[(*mut u8, usize, usize)],
    f: impl FnOnce(&mut HostRegion, &[(usize, usize, usize)]) -> R,
) -> Option<R> {
    let first = pieces.first()?.0 as usize;
    let found = registry::with_block_mut(first, |b: &mut Block<HostRegion>| {
        let r = &mut b.host;
        let start = r.as_ptr()? as usize;
        let ours = r.device_buffer().ok()?.in_context(ctx).ok()?;
        let inside = |&(p, n, d): &(*mut u8, usize, usize)| {
            let off = (p as usize).checked_sub(start)?;
            (off.checked_add(n)? <= r.len()).then_some((off, n, d))
        };
        let offsets: Option<Vec<_>> = pieces.iter().map(inside).collect();
        let offsets = offsets.filter(|_| ours)?;
        Some(f(r, &offsets))
    });
    found.ok().flatten()
}
