//! The way in through the ICD loader: `clGetLayerInfo` and `clInitLayer` (`CL/cl_layer.h`,
//! `cl_loader_layers`), honoured by ocl-icd (2.3.0 on) and the Khronos loader when
//! `OPENCL_LAYERS` names this library.
//!
//! `clInitLayer` copies the loader's target table and replaces the seven entries the layer
//! looks at; every other entry is the target's own pointer, so those calls go straight on.
//! One process can hold two loaders (a program's libOpenCL and, say, PyOpenCL's bundled one),
//! each calling `clInitLayer` with its own target: each gets its own slot, so each loader's
//! calls go on to that loader's target. The entry points are instantiated once per slot
//! (`const S: usize`), because a C function pointer carries no context.

use super::driver::missing;
use super::guard;
use super::hooks;
use super::next::Next;
use super::preload;
use super::sink;
use super::state::{self, WayIn};
use opencl_sys::cl_icd::cl_icd_dispatch;
use opencl_sys::cl_layer::{
    cl_layer_info, CL_LAYER_API_VERSION, CL_LAYER_API_VERSION_100, CL_LAYER_NAME,
};
use opencl_sys::{
    cl_bool, cl_buffer_create_type, cl_command_queue, cl_context, cl_event, cl_int, cl_kernel,
    cl_mem, cl_mem_flags, cl_mem_properties, cl_uint, CL_INVALID_OPERATION, CL_INVALID_VALUE,
    CL_OUT_OF_RESOURCES, CL_SUCCESS,
};
use std::ffi::c_void;
use std::mem::offset_of;
use std::sync::{Mutex, OnceLock};

/// Entries of Khronos' `cl_icd_dispatch` (OpenCL 3.0, up to `clSetContextDestructorCallback`;
/// tests/dispatch_layout.rs checks this and every offset against the system's CL/cl_icd.h).
/// opencl-sys's struct has one more field after it, which no loader passes.
pub const KHRONOS_ENTRIES: usize =
    offset_of!(cl_icd_dispatch, clSetContextDestructorCallback) / size_of::<usize>() + 1;

/// The name `clGetLayerInfo(CL_LAYER_NAME)` returns.
pub const LAYER_NAME: &str =
    "pinstream-layer: classic ALLOC_HOST_PTR buffers to pinned host memory (cl_nv_create_buffer)";

/// Loaders one process may load the layer into.
const SLOTS: usize = 4;

struct Slot {
    /// The target table's address, to recognise a repeated `clInitLayer`.
    target: usize,
    next: Next,
    table: cl_icd_dispatch,
}

static SLOT: [OnceLock<Slot>; SLOTS] = [const { OnceLock::new() }; SLOTS];
static INIT: Mutex<()> = Mutex::new(());

fn next_of<const S: usize>() -> &'static Next {
    // The table holding this entry is handed out only after its slot is set.
    &SLOT[S]
        .get()
        .expect("slot set before its table is handed out")
        .next
}

macro_rules! layer_entries {
    ($($entry:ident => $name:ident / $field:ident = $hook:path [$($h:ident),*], ($($a:ident: $t:ty),*) -> $ret:ty, else $missing:expr;)*) => {
        $(
        unsafe extern "C" fn $entry<const S: usize>($($a: $t),*) -> $ret {
            // SAFETY: the program's call, passed on unchanged.
            let pass = || match next_of::<S>().$field { Some(f) => unsafe { f($($a),*) }, None => $missing };
            let work = |fwd: &guard::Forward<'_, $ret>| {
                if preload::inside() {
                    // Entered through LD_PRELOAD first, on this thread: that entry does the work.
                    return fwd.call();
                }
                // (Some hooks are safe functions: their `unsafe` is unused.)
                #[allow(unused_unsafe)]
                // SAFETY: the loader passes the program's call.
                let made = unsafe { $hook(next_of::<S>(), fwd, $($h),*) };
                made
            };
            guard::guarded(stringify!($name), work, &pass, || $missing)
        }
        )*

        /// Points the hooked entries of `t` (those below `n`) at slot `S`'s functions.
        fn install<const S: usize>(t: &mut cl_icd_dispatch, n: usize) {
            $(
            if offset_of!(cl_icd_dispatch, $name) / size_of::<usize>() < n {
                t.$name = Some($entry::<S>);
            }
            )*
        }

        /// The names of the entries the layer replaces.
        pub const HOOKED: &[&str] = &[$(stringify!($name)),*];
    };
}

layer_entries! {
    create_buffer => clCreateBuffer / create_buffer = hooks::create_buffer[ctx, flags, size, host_ptr, err],
        (ctx: cl_context, flags: cl_mem_flags, size: usize, host_ptr: *mut c_void, err: *mut cl_int) -> cl_mem, else missing(err);
    create_buffer_with_properties => clCreateBufferWithProperties / create_buffer_with_properties = hooks::create_buffer_with_properties[ctx, props, flags, size, host_ptr, err],
        (ctx: cl_context, props: *const cl_mem_properties, flags: cl_mem_flags, size: usize, host_ptr: *mut c_void, err: *mut cl_int) -> cl_mem, else missing(err);
    create_sub_buffer => clCreateSubBuffer / create_sub_buffer = hooks::create_sub_buffer[buffer, kind, info],
        (buffer: cl_mem, flags: cl_mem_flags, kind: cl_buffer_create_type, info: *const c_void, err: *mut cl_int) -> cl_mem, else missing(err);
    set_kernel_arg => clSetKernelArg / set_kernel_arg = hooks::set_kernel_arg[kernel, size, value],
        (kernel: cl_kernel, index: cl_uint, size: usize, value: *const c_void) -> cl_int, else CL_INVALID_OPERATION;
    enqueue_read_buffer => clEnqueueReadBuffer / enqueue_read_buffer = hooks::enqueue_read_buffer[mem],
        (q: cl_command_queue, mem: cl_mem, blocking: cl_bool, offset: usize, size: usize, ptr: *mut c_void, n: cl_uint, wait: *const cl_event, event: *mut cl_event) -> cl_int, else CL_INVALID_OPERATION;
    enqueue_write_buffer => clEnqueueWriteBuffer / enqueue_write_buffer = hooks::enqueue_write_buffer[mem],
        (q: cl_command_queue, mem: cl_mem, blocking: cl_bool, offset: usize, size: usize, ptr: *const c_void, n: cl_uint, wait: *const cl_event, event: *mut cl_event) -> cl_int, else CL_INVALID_OPERATION;
    enqueue_copy_buffer => clEnqueueCopyBuffer / enqueue_copy_buffer = hooks::enqueue_copy_buffer[src, dst],
        (q: cl_command_queue, src: cl_mem, dst: cl_mem, src_offset: usize, dst_offset: usize, size: usize, n: cl_uint, wait: *const cl_event, event: *mut cl_event) -> cl_int, else CL_INVALID_OPERATION;
}

/// `clGetLayerInfo`: the layer API version (100) and the layer's name.
///
/// # Safety
/// The loader's pointers are valid for the sizes it passes.
#[no_mangle]
pub unsafe extern "C" fn clGetLayerInfo(
    param_name: cl_layer_info,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> cl_int {
    // SAFETY: as this function's contract.
    let work = || unsafe { layer_info(param_name, size, value, size_ret) };
    let refuse = || CL_INVALID_VALUE;
    guard::guarded("clGetLayerInfo", |_| work(), &refuse, refuse)
}

/// [`clGetLayerInfo`]'s work.
///
/// # Safety
/// As [`clGetLayerInfo`].
unsafe fn layer_info(
    param_name: cl_layer_info,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> cl_int {
    let version = CL_LAYER_API_VERSION_100.to_ne_bytes();
    let name = format!("{LAYER_NAME}\0");
    let bytes: &[u8] = match param_name {
        CL_LAYER_API_VERSION => &version,
        CL_LAYER_NAME => name.as_bytes(),
        _ => return CL_INVALID_VALUE,
    };
    if !value.is_null() {
        if size < bytes.len() {
            return CL_INVALID_VALUE;
        }
        // SAFETY: `value` holds `size` >= bytes.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), value.cast::<u8>(), bytes.len()) };
    }
    if !size_ret.is_null() {
        // SAFETY: a non-null size_t pointer from the loader.
        unsafe { *size_ret = bytes.len() };
    }
    CL_SUCCESS
}

/// `clInitLayer`: returns this layer's table for the loader's `target_dispatch`.
///
/// # Safety
/// `target_dispatch` points to `num_entries` function pointers that stay valid; the two out
/// pointers are writable.
#[no_mangle]
pub unsafe extern "C" fn clInitLayer(
    num_entries: cl_uint,
    target_dispatch: *const cl_icd_dispatch,
    num_entries_ret: *mut cl_uint,
    layer_dispatch_ret: *mut *const cl_icd_dispatch,
) -> cl_int {
    if target_dispatch.is_null()
        || num_entries_ret.is_null()
        || layer_dispatch_ret.is_null()
        || num_entries == 0
    {
        return CL_INVALID_VALUE;
    }
    // SAFETY: as this function's contract, the pointers checked non-null.
    let work = || unsafe {
        init_layer(
            num_entries,
            target_dispatch,
            num_entries_ret,
            layer_dispatch_ret,
        )
    };
    // The loader's own table handed back: every call goes straight on, as without the layer.
    // SAFETY: both out pointers are writable (checked non-null).
    let pass = || unsafe {
        *layer_dispatch_ret = target_dispatch;
        *num_entries_ret = num_entries;
        CL_SUCCESS
    };
    guard::guarded("clInitLayer", |_| work(), &pass, || CL_INVALID_VALUE)
}

/// [`clInitLayer`]'s work, its pointers checked non-null.
///
/// # Safety
/// As [`clInitLayer`].
unsafe fn init_layer(
    num_entries: cl_uint,
    target_dispatch: *const cl_icd_dispatch,
    num_entries_ret: *mut cl_uint,
    layer_dispatch_ret: *mut *const cl_icd_dispatch,
) -> cl_int {
    let n = (num_entries as usize).min(KHRONOS_ENTRIES);
    let _init = INIT.lock().unwrap_or_else(|e| e.into_inner());
    let found = SLOT
        .iter()
        .position(|s| s.get().is_none_or(|s| s.target == target_dispatch as usize));
    let Some(index) = found else {
        sink::log(
            crate::settings::LogLevel::Warnings,
            &format!("more than {SLOTS} loaders in one process: this one runs without the layer"),
        );
        return CL_OUT_OF_RESOURCES;
    };
    if SLOT[index].get().is_none() {
        // SAFETY: the loader's table holds `num_entries` >= n entries.
        let target = unsafe { copy_prefix(target_dispatch, n) };
        let mut table = target;
        [install::<0>, install::<1>, install::<2>, install::<3>][index](&mut table, n);
        let _ = SLOT[index].set(Slot {
            target: target_dispatch as usize,
            next: Next::from_dispatch(&target),
            table,
        });
    }
    let slot = SLOT[index].get().expect("set above");
    // SAFETY: both out pointers are writable (checked non-null).
    unsafe {
        *layer_dispatch_ret = &slot.table;
        *num_entries_ret = n as cl_uint;
    }
    state::entered(WayIn::Layers);
    CL_SUCCESS
}

/// The first `n` entries of `target`, the rest empty.
///
/// # Safety
/// `target` points to at least `n` pointer-sized entries, `n <= KHRONOS_ENTRIES`.
unsafe fn copy_prefix(target: *const cl_icd_dispatch, n: usize) -> cl_icd_dispatch {
    // SAFETY: every field is an `Option` of a function pointer or an integer: all-zero is
    // `None`/0 for each.
    let mut table: cl_icd_dispatch = unsafe { std::mem::zeroed() };
    // SAFETY: n pointer-sized entries from `target` into `table`, which has more than n.
    unsafe {
        std::ptr::copy_nonoverlapping(target.cast::<usize>(), (&raw mut table).cast::<usize>(), n)
    };
    table
}
