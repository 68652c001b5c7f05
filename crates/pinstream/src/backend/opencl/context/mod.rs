//! Owning types over a context: [`Context`], [`Queue`], [`DeviceBuffer`], [`Event`].
//!
//! Every type holds an `Arc` of its context, so the context outlives what it made.
//! `Drop` releases and never panics: a failed release is logged. The queue and its commands
//! are in `queue`, the event in `event`.

use super::error::{Call, ClError};
use super::platform::{describe_device, DeviceInfo};
use super::wait::{WaitCell, WaitMode};
use cl3::types::{cl_context, cl_event, cl_mem};
use std::ffi::{c_void, CString};
use std::ptr;
use std::sync::{Arc, OnceLock};

mod event;
mod queue;

pub use event::Event;
pub(super) use queue::queue_info;
pub(crate) use queue::WaitList;
pub use queue::{queue_context, Queue};

/// `clCreateBufferNV` (`cl_nv_create_buffer`).
pub(crate) type CreateBufferNv =
    unsafe extern "C" fn(cl_context, u64, u64, usize, *mut c_void, *mut i32) -> cl_mem;
/// `clHostMemAllocINTEL` (`cl_intel_unified_shared_memory`).
pub(crate) type HostMemAllocIntel =
    unsafe extern "C" fn(cl_context, *const u64, usize, u32, *mut i32) -> *mut c_void;
/// `clMemBlockingFreeINTEL`.
pub(crate) type MemBlockingFreeIntel = unsafe extern "C" fn(cl_context, *mut c_void) -> i32;

/// Extension functions looked up for the context's platform.
#[derive(Default, Clone, Copy)]
pub(crate) struct ExtFns {
    pub create_buffer_nv: Option<CreateBufferNv>,
    pub host_mem_alloc_intel: Option<HostMemAllocIntel>,
    pub mem_blocking_free_intel: Option<MemBlockingFreeIntel>,
}

fn lookup(platform: cl3::types::cl_platform_id, name: &str) -> Option<*mut c_void> {
    let lib = cl3::load_library().as_ref().ok()?;
    let cname = CString::new(name).ok()?;
    let f = lib.clGetExtensionFunctionAddressForPlatform(platform, cname.as_ptr())?;
    (!f.is_null()).then_some(f)
}

impl ExtFns {
    /// Looks up the functions of the extensions that every device of a context has (they
    /// share one platform): a mechanism must serve every device.
    fn load(devices: &[DeviceInfo]) -> Self {
        let p = devices[0].platform.0;
        let all = |ext: &str| devices.iter().all(|d| d.has_extension(ext));
        let mut fns = ExtFns::default();
        if all("cl_nv_create_buffer") {
            // SAFETY: the platform returned this address for this name, whose C signature
            // the extension specification fixes as `CreateBufferNv`.
            fns.create_buffer_nv = lookup(p, "clCreateBufferNV")
                .map(|f| unsafe { std::mem::transmute::<*mut c_void, CreateBufferNv>(f) });
        }
        if all("cl_intel_unified_shared_memory") {
            // SAFETY: as above, signatures from cl_intel_unified_shared_memory.
            fns.host_mem_alloc_intel = lookup(p, "clHostMemAllocINTEL")
                .map(|f| unsafe { std::mem::transmute::<*mut c_void, HostMemAllocIntel>(f) });
            // SAFETY: as above.
            fns.mem_blocking_free_intel = lookup(p, "clMemBlockingFreeINTEL")
                .map(|f| unsafe { std::mem::transmute::<*mut c_void, MemBlockingFreeIntel>(f) });
        }
        fns
    }
}

pub(crate) struct ContextInner {
    pub raw: cl_context,
    /// The device queues and programs use: the first GPU of the context, else its first device.
    pub device: DeviceInfo,
    /// Every device of the context, `device` first.
    pub devices: Vec<DeviceInfo>,
    pub ext: ExtFns,
    /// How waits for this context's commands wait ([`Context::set_wait_mode`]).
    pub wait: WaitCell,
}

impl ContextInner {
    pub(super) fn new(raw: cl_context, devices: Vec<DeviceInfo>) -> Self {
        Self {
            raw,
            ext: ExtFns::load(&devices),
            device: devices[0].clone(),
            devices,
            wait: WaitCell::new(WaitMode::default()),
        }
    }
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // SAFETY: this value holds one reference to `raw` (its creation by clCreateContext,
        // or the clRetainContext of `Context::from_raw`), released exactly once here.
        if let Err(code) = unsafe { cl3::context::release_context(self.raw) } {
            tracing::warn!("{}", ClError::new("clReleaseContext", code));
        }
    }
}

/// An OpenCL context: made by pinstream on one device ([`Context::new`]) or adopted from the
/// caller ([`Context::from_raw`]), on one device or several. Cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

// SAFETY: OpenCL contexts, queues, buffers and events are thread-safe objects (OpenCL 1.1+,
// "all OpenCL API calls are thread-safe" except clSetKernelArg on one kernel); the Rust
// side holds no interior state besides the immutable device description.
unsafe impl Send for ContextInner {}
// SAFETY: as above.
unsafe impl Sync for ContextInner {}

impl Context {
    /// Creates a context on `device`.
    pub fn new(device: &DeviceInfo) -> Result<Self, ClError> {
        let props = [
            cl3::context::CL_CONTEXT_PLATFORM,
            device.platform.0 as isize,
            0,
        ];
        let raw =
            cl3::context::create_context(&[device.id.0], props.as_ptr(), None, ptr::null_mut())
                .call("clCreateContext")?;
        Ok(Self {
            inner: Arc::new(ContextInner::new(raw, vec![device.clone()])),
        })
    }

    /// Adopts a context the caller made (in C, or with `opencl3`, `ocl`, PyOpenCL): retains it
    /// (`clRetainContext`) and releases that one reference when the last clone of the
    /// returned `Context` drops. The caller's own reference stays the caller's to release.
    ///
    /// Every device of the context is read (`CL_CONTEXT_DEVICES`): [`Self::devices`] lists
    /// them, and [`Self::device`] is the first GPU among them (else the first device), the one
    /// [`Self::queue`] and programs use. Host memory made in the context serves every device:
    /// a strategy is offered only when every device offers it, and `auto` says so when the
    /// devices would choose differently (see [`crate::host::auto_order_for`]).
    ///
    /// # Safety
    /// `raw` must be a valid `cl_context` that its owner does not release before this call
    /// returns. Afterwards the returned value holds its own reference.
    pub unsafe fn from_raw(raw: cl_context) -> Result<Self, ClError> {
        if raw.is_null() {
            return Err(ClError::new(
                "clRetainContext",
                cl3::error_codes::CL_INVALID_CONTEXT,
            ));
        }
        // SAFETY: the caller guarantees `raw` is a live context; the reference added here is
        // released by ContextInner's Drop, or below if the context cannot be described.
        unsafe { cl3::context::retain_context(raw) }.call("clRetainContext")?;
        match context_devices(raw) {
            Ok(devices) => Ok(Self {
                inner: Arc::new(ContextInner::new(raw, devices)),
            }),
            Err(e) => {
                // SAFETY: releases the reference retained above, once.
                let _ = unsafe { cl3::context::release_context(raw) };
                Err(e)
            }
        }
    }

    /// The raw `cl_context`, borrowed, as cudarc's `cu_ctx()`: valid while this `Context` or
    /// a clone of it lives. You must not release it; retain it (`clRetainContext`) to keep it
    /// longer.
    pub fn as_raw(&self) -> cl_context {
        self.inner.raw
    }

    /// The device queues and programs of this context use: for an adopted context, the first
    /// GPU among its devices, else its first device.
    pub fn device(&self) -> &DeviceInfo {
        &self.inner.device
    }

    /// Every device of the context, [`Self::device`] first.
    pub fn devices(&self) -> &[DeviceInfo] {
        &self.inner.devices
    }

    /// Sets how waits for this context's commands wait (every clone of it shares the mode):
    /// commands enqueued afterwards wait so. A new context starts at [`WaitMode::Auto`].
    pub fn set_wait_mode(&self, mode: WaitMode) {
        self.inner.wait.set(mode);
    }

    /// How waits for commands enqueued now on this context wait.
    pub fn wait_mode(&self) -> WaitMode {
        self.inner.wait.get()
    }

    /// An event of this context's (a command's or a user event), waited as the context says.
    fn event(&self, raw: cl_event) -> Event {
        Event(raw, self.wait_mode())
    }

    /// True when `clCreateBufferNV` was found for this platform.
    pub fn has_create_buffer_nv(&self) -> bool {
        self.inner.ext.create_buffer_nv.is_some()
    }

    /// True when `clHostMemAllocINTEL` and `clMemBlockingFreeINTEL` were found.
    pub fn has_intel_usm(&self) -> bool {
        self.inner.ext.host_mem_alloc_intel.is_some()
            && self.inner.ext.mem_blocking_free_intel.is_some()
    }

    /// An in-order queue with event profiling enabled.
    pub fn queue(&self) -> Result<Queue, ClError> {
        self.queue_with(cl3::command_queue::CL_QUEUE_PROFILING_ENABLE)
    }

    /// An in-order queue without event profiling (what a program that never reads command
    /// times uses; `bench --latency` measures both).
    pub fn plain_queue(&self) -> Result<Queue, ClError> {
        self.queue_with(0)
    }

    fn queue_with(&self, properties: u64) -> Result<Queue, ClError> {
        let props = [
            cl3::command_queue::CL_QUEUE_PROPERTIES as u64,
            properties,
            0,
        ];
        // SAFETY: context and device are live; the property list is zero-terminated.
        let raw = unsafe {
            cl3::command_queue::create_command_queue_with_properties(
                self.inner.raw,
                self.inner.device.id.0,
                props.as_ptr(),
            )
        }
        .or_else(|_| {
            // OpenCL 1.x drivers: the deprecated call.
            #[allow(deprecated)]
            // SAFETY: as above.
            unsafe {
                cl3::command_queue::create_command_queue(
                    self.inner.raw,
                    self.inner.device.id.0,
                    properties,
                )
            }
        })
        .call("clCreateCommandQueueWithProperties")?;
        Ok(Queue {
            raw,
            _ctx: self.inner.clone(),
            adopted: false,
        })
    }

    /// A device-resident read-write buffer of `size` bytes.
    pub fn device_buffer(&self, size: usize) -> Result<DeviceBuffer, ClError> {
        let mem = self.create_mem(cl3::memory::CL_MEM_READ_WRITE, size, ptr::null_mut())?;
        Ok(DeviceBuffer { mem })
    }

    pub(crate) fn create_mem(
        &self,
        flags: u64,
        size: usize,
        host: *mut c_void,
    ) -> Result<MemObject, ClError> {
        // SAFETY: the context is live; `host` is null or points at `size` bytes the caller
        // keeps alive at least as long as the returned object (USE_HOST_PTR contract).
        let raw = unsafe { cl3::memory::create_buffer(self.inner.raw, flags, size, host) }
            .call("clCreateBuffer")?;
        Ok(MemObject {
            raw,
            size,
            flags: OnceLock::from(MemFlags(flags)),
            _ctx: self.inner.clone(),
        })
    }
}

/// The devices of `raw`, the first GPU moved to the front.
fn context_devices(raw: cl_context) -> Result<Vec<DeviceInfo>, ClError> {
    let ids = match cl3::context::get_context_info(raw, cl3::context::CL_CONTEXT_DEVICES)
        .call("clGetContextInfo")?
    {
        cl3::info_type::InfoType::VecIntPtr(ids) => ids,
        _ => Vec::new(),
    };
    let mut devices = ids
        .into_iter()
        .map(|id| describe_device(id as cl3::types::cl_device_id))
        .collect::<Result<Vec<_>, _>>()?;
    if devices.is_empty() {
        return Err(ClError::new(
            "clGetContextInfo",
            cl3::error_codes::CL_INVALID_CONTEXT,
        ));
    }
    if let Some(gpu) = devices.iter().position(DeviceInfo::is_gpu) {
        devices[..=gpu].rotate_right(1);
    }
    Ok(devices)
}

/// An owned `cl_mem`.
pub(crate) struct MemObject {
    pub raw: cl_mem,
    pub size: usize,
    /// Its `CL_MEM_FLAGS`, which never change: known when pinstream made it, else read from
    /// the driver on first use ([`DeviceBuffer::flags`]), so that every check of a call
    /// shares one query.
    pub flags: OnceLock<MemFlags>,
    _ctx: Arc<ContextInner>,
}

impl MemObject {
    /// Another owning reference to the same object (`clRetainMemObject`).
    pub fn retained(&self) -> Result<MemObject, ClError> {
        // SAFETY: the object is live (we own a reference); the new reference is released by
        // the returned value's Drop.
        unsafe { cl3::memory::retain_mem_object(self.raw) }.call("clRetainMemObject")?;
        Ok(MemObject {
            raw: self.raw,
            size: self.size,
            flags: self.flags.clone(),
            _ctx: self._ctx.clone(),
        })
    }

    /// True when the object belongs to `ctx`: the context it was made or adopted in (every
    /// constructor takes its own context), with no driver call.
    pub fn of_context(&self, ctx: &Context) -> bool {
        self._ctx.raw == ctx.inner.raw
    }

    /// The raw object, with this value's reference handed to the caller.
    pub fn into_raw(self) -> cl_mem {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never dropped, so its context reference is taken out once, here,
        // and released; the object's reference goes to the caller.
        drop(unsafe { std::ptr::read(&me._ctx) });
        me.raw
    }

    /// Takes ownership of `raw`.
    ///
    /// # Safety
    /// `raw` must be a valid memory object of `size` bytes created in `ctx`, owned by nobody else.
    pub unsafe fn from_raw(raw: cl_mem, size: usize, ctx: &Context) -> Self {
        Self {
            raw,
            size,
            flags: OnceLock::new(),
            _ctx: ctx.inner.clone(),
        }
    }
}

// SAFETY: see the note on ContextInner: memory objects are thread-safe OpenCL objects.
unsafe impl Send for MemObject {}
// SAFETY: as above.
unsafe impl Sync for MemObject {}

impl Drop for MemObject {
    fn drop(&mut self) {
        // SAFETY: we own this reference to the object.
        if let Err(code) = unsafe { cl3::memory::release_mem_object(self.raw) } {
            tracing::warn!("{}", ClError::new("clReleaseMemObject", code));
        }
    }
}

/// A buffer in device memory.
pub struct DeviceBuffer {
    pub(crate) mem: MemObject,
}

impl DeviceBuffer {
    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.mem.size
    }

    /// The raw `cl_mem`, with this value's reference handed to the caller, who releases it
    /// (`clReleaseMemObject`).
    pub fn into_raw(self) -> cl_mem {
        self.mem.into_raw()
    }
}

/// A buffer's `CL_MEM_FLAGS`, as the driver checks them before a transfer or a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemFlags(pub u64);

impl MemFlags {
    /// The host-access flag that forbids `clEnqueueWriteBuffer` (`write`) or
    /// `clEnqueueReadBuffer` into host memory, by name; `None` where the host may.
    pub fn host_forbids(self, write: bool) -> Option<&'static str> {
        use cl3::memory::{CL_MEM_HOST_NO_ACCESS, CL_MEM_HOST_READ_ONLY, CL_MEM_HOST_WRITE_ONLY};
        let other = match write {
            true => (CL_MEM_HOST_READ_ONLY, "CL_MEM_HOST_READ_ONLY"),
            false => (CL_MEM_HOST_WRITE_ONLY, "CL_MEM_HOST_WRITE_ONLY"),
        };
        [(CL_MEM_HOST_NO_ACCESS, "CL_MEM_HOST_NO_ACCESS"), other]
            .into_iter()
            .find(|(bit, _)| self.0 & bit != 0)
            .map(|(_, name)| name)
    }

    /// The kernel-access flag that forbids kernels to write (`write`) or read the buffer,
    /// by name; `None` where kernels may.
    pub fn kernel_forbids(self, write: bool) -> Option<&'static str> {
        let (bit, name) = match write {
            true => (cl3::memory::CL_MEM_READ_ONLY, "CL_MEM_READ_ONLY"),
            false => (cl3::memory::CL_MEM_WRITE_ONLY, "CL_MEM_WRITE_ONLY"),
        };
        (self.0 & bit != 0).then_some(name)
    }
}
