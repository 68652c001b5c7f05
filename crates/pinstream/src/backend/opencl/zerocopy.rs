//! One buffer over a whole host allocation, which kernels read and write in place (mapped
//! pinned memory, [`crate::host::ZeroCopy`]), and the host pointer to the same bytes.
//!
//! Driver-allocated buffers (`clCreateBufferNV` host memory, `CL_MEM_ALLOC_HOST_PTR`) are
//! mapped once for the allocation's life: on these drivers the map returns the buffer's own
//! host memory, so the host and the kernels touch the same bytes. The driver keeps the memory
//! while any reference to the buffer lives, so a buffer handed out (retained) outlives the
//! allocation's host side. A `CL_MEM_USE_HOST_PTR` buffer covers pages pinstream maps; those
//! pages are given to a destructor callback (`clSetMemObjectDestructorCallback`), which
//! unmaps them when the driver releases the buffer's last reference, so they too outlive
//! every handed-out reference.

use super::context::{Context, MemObject, Queue};
use super::error::ClError;
use super::hostbuf::{create_nv_host, map_whole, unmap_whole, AllocError};
use crate::backend::os::{PageMap, Residency};
use cl3::types::cl_mem;
use std::ffi::c_void;
use std::ptr;

/// How the buffer is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backing {
    /// `clCreateBufferNV` host memory, pinned.
    NvHost,
    /// `CL_MEM_ALLOC_HOST_PTR`.
    AllocHostPtr,
    /// `CL_MEM_USE_HOST_PTR` over page-aligned memory pinstream maps.
    UseHostPtr,
}

/// One buffer over the whole allocation, and the host pointer to its bytes.
pub(crate) struct ZeroCopyAlloc {
    mem: MemObject,
    ptr: *mut u8,
    len: usize,
    /// The queue a driver-allocated buffer was mapped on, to unmap it at drop; `None` for
    /// `USE_HOST_PTR`, never mapped.
    mapped_on: Option<Queue>,
}

impl ZeroCopyAlloc {
    /// Makes `len` bytes as `backing` says (`len` must fit one buffer of the device).
    pub fn new(ctx: &Context, len: usize, backing: Backing) -> Result<Self, AllocError> {
        super::pin_ceiling::check_driver(len, "clCreateBuffer")?;
        let flags = cl3::memory::CL_MEM_READ_WRITE | cl3::memory::CL_MEM_ALLOC_HOST_PTR;
        let mem = match backing {
            Backing::NvHost => create_nv_host(ctx, flags, len)?,
            Backing::AllocHostPtr => ctx.create_mem(flags, len, ptr::null_mut())?,
            Backing::UseHostPtr => return Self::use_host_ptr(ctx, len),
        };
        let queue = ctx.queue()?;
        let ptr = map_whole(&queue, &mem)?;
        Ok(Self {
            mem,
            ptr,
            len,
            mapped_on: Some(queue),
        })
    }

    fn use_host_ptr(ctx: &Context, len: usize) -> Result<Self, AllocError> {
        let how = Residency {
            huge_pages: false,
            touch_threads: crate::backend::os::cores(),
        };
        let map =
            PageMap::new(len, how).map_err(|source| AllocError::Map { bytes: len, source })?;
        let flags = cl3::memory::CL_MEM_READ_WRITE | cl3::memory::CL_MEM_USE_HOST_PTR;
        // Intel's zero-copy rule: page-aligned memory, a size that is a multiple of 64 bytes
        // (the pages, whole, hold the rounded size).
        let size = len.next_multiple_of(64);
        let mem = ctx.create_mem(flags, size, map.as_ptr().cast())?;
        let ptr = map.as_ptr();
        let pages = Box::into_raw(Box::new(map));
        // SAFETY: `mem` is live; the callback takes back the box made just above, once, when
        // the driver releases the buffer's last reference.
        let set = unsafe {
            cl3::memory::set_mem_object_destructor_callback(mem.raw, free_pages, pages.cast())
        };
        if let Err(code) = set {
            drop(mem); // never used: released before its pages
                       // SAFETY: the callback was not registered, so the box is still ours alone.
            drop(unsafe { Box::from_raw(pages) });
            return Err(ClError::new("clSetMemObjectDestructorCallback", code).into());
        }
        Ok(Self {
            mem,
            ptr,
            len,
            mapped_on: None,
        })
    }

    /// The host pointer to the allocation's first byte.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The buffer over the whole allocation.
    pub fn mem(&self) -> &MemObject {
        &self.mem
    }
}

/// The destructor callback of a `USE_HOST_PTR` buffer: unmaps the pages it covered.
extern "C" fn free_pages(_mem: cl_mem, pages: *mut c_void) {
    // Never unwinds into the driver: a panic in the unmap is caught and dropped.
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: `pages` is the box `use_host_ptr` gave this callback, which the driver calls
        // once.
        drop(unsafe { Box::from_raw(pages.cast::<PageMap>()) });
    });
}

impl Drop for ZeroCopyAlloc {
    fn drop(&mut self) {
        if let Some(queue) = &self.mapped_on {
            unmap_whole(queue, &self.mem, self.ptr);
            if let Err(e) = queue.finish() {
                tracing::warn!("{e}");
            }
        }
        // `mem` drops after this: its memory lives on while a handed-out reference does.
    }
}

// SAFETY: the allocation is owned by this value (or by the driver's buffer); the pointer is
// only handed out through `HostRegion`, which mediates access.
unsafe impl Send for ZeroCopyAlloc {}
// SAFETY: as above.
unsafe impl Sync for ZeroCopyAlloc {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages behind a `USE_HOST_PTR` buffer outlive the allocation while a reference to the
    /// buffer lives: a kernel-free check through the driver's own read of the buffer.
    #[test]
    fn use_host_ptr_pages_outlive_the_allocation_while_the_buffer_is_held() {
        let Ok(all) = super::super::devices() else {
            return; // no OpenCL here; the PoCL CI has one
        };
        let dev = super::super::default_device(&all).unwrap().clone();
        let ctx = Context::new(&dev).unwrap();
        let odd = ZeroCopyAlloc::new(&ctx, 100, Backing::UseHostPtr).unwrap();
        assert_eq!(
            (odd.len(), odd.mem().size),
            (100, 128),
            "Intel's multiple of 64"
        );
        let alloc = ZeroCopyAlloc::new(&ctx, 8192, Backing::UseHostPtr).unwrap();
        // SAFETY: the allocation is ours and idle.
        unsafe { std::slice::from_raw_parts_mut(alloc.ptr(), 8192) }.fill(7);
        let held = alloc.mem().retained().unwrap();
        drop(alloc);
        let buf = super::super::DeviceBuffer { mem: held };
        let mut out = vec![0u8; 8192];
        let q = ctx.queue().unwrap();
        // SAFETY: `out` outlives the blocking read.
        unsafe { q.read_raw(&buf, 0, out.as_mut_ptr(), 8192, &[]) }
            .unwrap()
            .wait()
            .unwrap();
        assert!(out.iter().all(|&b| b == 7));
    }
}
