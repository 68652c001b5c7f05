//! What the layer asks the driver: the context's devices and their extensions, the platform's
//! `clCreateBufferNV`, and the destructor callbacks that keep the ledger true. It makes no
//! buffer or queue of its own: the once-per-platform check that `clCreateBufferNV` honours
//! `CL_MEM_COPY_HOST_PTR` (a buffer made through it, then read back) crashed the process under
//! NVIDIA's driver on the H200, so such buffers are never rewritten
//! ([`crate::decide::Skip::CopyHostPtr`]).

use super::next::Next;
use super::sink;
use super::state;
use crate::decide::{self, Facts, Support, NV_EXTENSION};
use crate::settings::Settings;
use opencl_sys::{
    cl_context, cl_device_id, cl_int, cl_mem, cl_mem_flags, cl_platform_id, CL_CONTEXT_DEVICES,
    CL_DEVICE_EXTENSIONS, CL_DEVICE_NAME, CL_DEVICE_PLATFORM, CL_INVALID_OPERATION, CL_SUCCESS,
};
use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr;
use std::sync::Mutex;

/// `clCreateBufferNV`'s signature (`cl_nv_create_buffer`).
type CreateBufferNv =
    unsafe extern "C" fn(cl_context, cl_mem_flags, u64, usize, *mut c_void, *mut cl_int) -> cl_mem;

/// The function that makes a rewritten buffer.
#[derive(Clone, Copy)]
pub(crate) enum Nv {
    /// The platform's `clCreateBufferNV`.
    Real(CreateBufferNv),
    /// TEST HOOK (`PINSTREAM_LAYER_TEST_FAKE_NV=1`): the next `clCreateBuffer`, same flags.
    Fake,
}

impl Nv {
    /// Creates the buffer.
    ///
    /// # Safety
    /// `ctx` is a live context; `host_ptr` is as `clCreateBuffer` requires for `flags`.
    #[allow(clippy::too_many_arguments)] // clCreateBufferNV's six, and the next layer
    pub(crate) unsafe fn create(
        self,
        next: &Next,
        ctx: cl_context,
        flags: cl_mem_flags,
        nv_flags: u64,
        size: usize,
        host_ptr: *mut c_void,
        err: *mut cl_int,
    ) -> cl_mem {
        match self {
            // SAFETY: the platform's clCreateBufferNV, called with the program's own arguments.
            Nv::Real(f) => unsafe { f(ctx, flags, nv_flags, size, host_ptr, err) },
            // SAFETY: the next clCreateBuffer, called with the program's own arguments.
            Nv::Fake => match unsafe { next.create_buffer(ctx) } {
                // SAFETY: the next clCreateBuffer, called with the program's own arguments.
                Some(f) => unsafe { f(ctx, flags, size, host_ptr, err) },
                None => missing(err),
            },
        }
    }
}

/// Answers a call whose next function does not exist.
pub(crate) fn missing<T>(err: *mut cl_int) -> *mut T {
    if !err.is_null() {
        // SAFETY: the program's errcode_ret, non-null, points to a cl_int.
        unsafe { *err = CL_INVALID_OPERATION };
    }
    ptr::null_mut()
}

/// What [`gather`] found: the facts for the decision and the function to call.
pub(crate) struct Found {
    pub(crate) facts: Facts,
    pub(crate) nv: Option<Nv>,
}

/// Per platform: the NV function (or none).
#[derive(Default)]
struct PlatformCache {
    nv: HashMap<usize, Option<Nv>>,
}

static CACHE: Mutex<Option<PlatformCache>> = Mutex::new(None);

fn with_cache<R>(f: impl FnOnce(&mut PlatformCache) -> R) -> R {
    let mut guard = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(PlatformCache::default))
}

/// Asks the driver what the decision needs for a candidate in `ctx`.
///
/// # Safety
/// `ctx` is a live context.
pub(crate) unsafe fn gather(next: &Next, ctx: cl_context, s: &Settings) -> Found {
    // SAFETY: `ctx` is live (this function's contract).
    match unsafe { find_nv(next, ctx, s) } {
        Ok(nv) => Found {
            facts: Facts {
                support: Support::AllDevices,
            },
            nv: Some(nv),
        },
        Err(support) => Found {
            facts: Facts { support },
            nv: None,
        },
    }
}

/// The platform's NV function, when every device of `ctx` has the extension and the function
/// exists; else why not.
///
/// # Safety
/// `ctx` is a live context.
unsafe fn find_nv(next: &Next, ctx: cl_context, s: &Settings) -> Result<Nv, Support> {
    let failed = |call| move |code| Support::QueryFailed { call, code };
    // SAFETY: `ctx` is live; the devices come from it.
    let devices = unsafe { context_devices(next, ctx) }
        .map_err(failed("clGetContextInfo(CL_CONTEXT_DEVICES)"))?;
    let mut described = Vec::with_capacity(devices.len());
    for &d in &devices {
        // SAFETY: `d` is a device of the live context.
        let name = unsafe { device_string(next, d, CL_DEVICE_NAME) }.unwrap_or_default();
        // SAFETY: `d` is a device of the live context.
        let ext = unsafe { device_string(next, d, CL_DEVICE_EXTENSIONS) }
            .map_err(failed("clGetDeviceInfo(CL_DEVICE_EXTENSIONS)"))?;
        described.push((
            name,
            if s.fake_nv {
                format!("{ext} {NV_EXTENSION}")
            } else {
                ext
            },
        ));
    }
    let support = decide::support_of(described.iter().map(|(n, e)| (n.as_str(), e.as_str())));
    if support != Support::AllDevices {
        return Err(support);
    }
    // SAFETY: a device of the live context.
    let platform = unsafe { device_platform(next, devices[0]) }
        .map_err(failed("clGetDeviceInfo(CL_DEVICE_PLATFORM)"))?;
    let nv = with_cache(|c| {
        *c.nv
            .entry(platform as usize)
            // SAFETY: the platform of a device of the live context.
            .or_insert_with(|| unsafe { lookup_nv(next, platform, s) })
    });
    nv.ok_or(Support::NoFunction)
}

/// # Safety
/// `platform` is a platform of the next layer.
unsafe fn lookup_nv(next: &Next, platform: cl_platform_id, s: &Settings) -> Option<Nv> {
    if s.fake_nv {
        return Some(Nv::Fake);
    }
    // SAFETY: the platform is live (platforms live as long as the driver); the name is NUL-terminated.
    let f = unsafe { next.get_extension_function_address_for_platform(platform) }?;
    // SAFETY: the driver's clGetExtensionFunctionAddressForPlatform, with a live platform and a NUL-terminated name.
    let addr = unsafe { f(platform, c"clCreateBufferNV".as_ptr()) };
    // SAFETY: the driver returned its clCreateBufferNV, whose signature is CreateBufferNv.
    (!addr.is_null())
        .then(|| Nv::Real(unsafe { std::mem::transmute::<*mut c_void, CreateBufferNv>(addr) }))
}

/// The devices of `ctx`.
///
/// # Safety
/// `ctx` is a live context.
unsafe fn context_devices(next: &Next, ctx: cl_context) -> Result<Vec<cl_device_id>, cl_int> {
    // SAFETY: `ctx` is live (this function's contract).
    let f = unsafe { next.get_context_info(ctx) }.ok_or(CL_INVALID_OPERATION)?;
    let mut size = 0usize;
    // SAFETY: a size query, then a query into a buffer of that size.
    let rc = unsafe { f(ctx, CL_CONTEXT_DEVICES, 0, ptr::null_mut(), &mut size) };
    if rc != CL_SUCCESS {
        return Err(rc);
    }
    let mut devices: Vec<cl_device_id> = vec![ptr::null_mut(); size / size_of::<cl_device_id>()];
    // SAFETY: `devices` holds the size the driver just reported.
    let rc = unsafe {
        f(
            ctx,
            CL_CONTEXT_DEVICES,
            devices.len() * size_of::<cl_device_id>(),
            devices.as_mut_ptr().cast(),
            ptr::null_mut(),
        )
    };
    if rc != CL_SUCCESS {
        return Err(rc);
    }
    Ok(devices)
}

/// A string property of `device`.
///
/// # Safety
/// `device` is a live device.
unsafe fn device_string(next: &Next, device: cl_device_id, param: u32) -> Result<String, cl_int> {
    // SAFETY: `device` is live (this function's contract).
    let f = unsafe { next.get_device_info(device) }.ok_or(CL_INVALID_OPERATION)?;
    let mut size = 0usize;
    // SAFETY: a size query, then a query into a buffer of that size.
    let rc = unsafe { f(device, param, 0, ptr::null_mut(), &mut size) };
    if rc != CL_SUCCESS {
        return Err(rc);
    }
    let mut bytes = vec![0u8; size];
    // SAFETY: `bytes` holds the size the driver just reported.
    let rc = unsafe {
        f(
            device,
            param,
            size,
            bytes.as_mut_ptr().cast(),
            ptr::null_mut(),
        )
    };
    if rc != CL_SUCCESS {
        return Err(rc);
    }
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
}

/// The platform of `device`.
///
/// # Safety
/// `device` is a live device.
unsafe fn device_platform(next: &Next, device: cl_device_id) -> Result<cl_platform_id, cl_int> {
    // SAFETY: `device` is live (this function's contract).
    let f = unsafe { next.get_device_info(device) }.ok_or(CL_INVALID_OPERATION)?;
    let mut platform: cl_platform_id = ptr::null_mut();
    // SAFETY: CL_DEVICE_PLATFORM is one cl_platform_id, written into `platform`.
    let rc = unsafe {
        f(
            device,
            CL_DEVICE_PLATFORM,
            size_of::<cl_platform_id>(),
            (&raw mut platform).cast(),
            ptr::null_mut(),
        )
    };
    if rc == CL_SUCCESS {
        Ok(platform)
    } else {
        Err(rc)
    }
}

/// Asks the driver to tell the ledger when `mem` (tracked with `id`) is destroyed.
///
/// # Safety
/// `mem` is a live memory object.
pub(crate) unsafe fn watch_release(next: &Next, mem: cl_mem, id: u64) {
    // SAFETY: `on_destroyed` only touches the ledger; the id travels as the user-data word.
    let rc = match unsafe { next.set_mem_object_destructor_callback(mem) } {
        // SAFETY: the driver's clSetMemObjectDestructorCallback on the live `mem`; `on_destroyed` has the callback's signature.
        Some(f) => unsafe { f(mem, Some(on_destroyed), id as usize as *mut c_void) },
        None => CL_INVALID_OPERATION,
    };
    if rc != CL_SUCCESS {
        sink::log(crate::settings::LogLevel::Verbose, &format!("clSetMemObjectDestructorCallback failed ({rc}); the summary cannot see this buffer's release"));
    }
}

unsafe extern "C" fn on_destroyed(mem: cl_mem, user_data: *mut c_void) {
    let work = || {
        let mut ledger = state::ledger();
        ledger.release(mem as usize, user_data as usize as u64);
        state::sync_tracking(&ledger);
    };
    super::guard::guarded("the release callback", |_| work(), &|| (), || ());
}
