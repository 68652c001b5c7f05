//! The way in that needs no loader support: `LD_PRELOAD=libpinstream_layer.so` puts these
//! definitions of the seven entry points ahead of the loader's in the global scope, so a
//! program linked against `libOpenCL.so.1` calls them; each passes the call on to the real
//! one (`dlsym(RTLD_NEXT, …)`). The CUDA toolkit's `libOpenCL.so.1`, the default on many
//! NVIDIA machines, ignores `OPENCL_LAYERS`; this works with it.
//!
//! It does not reach programs that `dlopen` the loader and look functions up on that handle
//! (the `cl3`/`opencl3` crates with `dynamic`, pinstream itself, Python's ctypes): those are
//! reached only through `OPENCL_LAYERS`.
//!
//! Loaded both ways into one process (`LD_PRELOAD` and `OPENCL_LAYERS` naming this file), a
//! call arrives here first and then, through the loader, at the layer's entry: a thread-local
//! mark set here makes the layer entry pass it straight on, so nothing is done twice.

use super::driver::missing;
use super::guard;
use super::hooks;
use super::next::Next;
use super::sink;
use super::state::{self, WayIn};
use crate::settings::LogLevel;
use opencl_sys::{
    cl_bool, cl_buffer_create_type, cl_command_queue, cl_context, cl_event, cl_int, cl_kernel,
    cl_mem, cl_mem_flags, cl_mem_properties, cl_uint, CL_INVALID_OPERATION,
};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::OnceLock;

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

static NEXT: OnceLock<Next> = OnceLock::new();

/// True while this thread is inside one of these entry points.
pub(crate) fn inside() -> bool {
    INSIDE.try_with(Cell::get).unwrap_or(false)
}

/// Restores the mark even if the call unwinds.
struct Mark(bool);

impl Drop for Mark {
    fn drop(&mut self) {
        INSIDE.with(|c| c.set(self.0));
    }
}

fn next() -> &'static Next {
    NEXT.get_or_init(|| {
        let next = Next::from_rtld_next();
        if next.create_buffer.is_none() {
            sink::log(LogLevel::Verbose, "no OpenCL loader after the layer in the global scope (the program's libOpenCL was opened RTLD_LOCAL): calls go on through each object's dispatch table");
        }
        next
    })
}

macro_rules! preload_entries {
    ($($name:ident / $field:ident = $hook:path [$($h:ident),*], ($($a:ident: $t:ty),*) -> $ret:ty, else $missing:expr;)*) => {
        $(
        /// Interposed through `LD_PRELOAD`; see the module docs.
        ///
        /// # Safety
        /// The arguments are those of the OpenCL call of this name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $ret {
            // SAFETY: the program's call, passed on unchanged.
            let pass = || match unsafe { next().$field(first_handle!($($a),*)) } { Some(f) => unsafe { f($($a),*) }, None => $missing };
            let work = |fwd: &guard::Forward<'_, $ret>| {
                if inside() {
                    // A call the driver or the layer itself makes while inside an entry point.
                    return fwd.call();
                }
                state::entered(WayIn::Preload);
                let _mark = Mark(INSIDE.with(|c| c.replace(true)));
                // (Some hooks are safe functions: their `unsafe` is unused.)
                #[allow(unused_unsafe)]
                // SAFETY: the program's call.
                let made = unsafe { $hook(next(), fwd, $($h),*) };
                made
            };
            guard::guarded(stringify!($name), work, &pass, || $missing)
        }
        )*
    };
}

/// The call's first argument, the handle whose dispatch table serves as the fallback.
macro_rules! first_handle {
    ($first:ident $(, $rest:ident)*) => {
        $first as *mut c_void
    };
}

preload_entries! {
    clCreateBuffer / create_buffer = hooks::create_buffer[ctx, flags, size, host_ptr, err],
        (ctx: cl_context, flags: cl_mem_flags, size: usize, host_ptr: *mut c_void, err: *mut cl_int) -> cl_mem, else missing(err);
    clCreateBufferWithProperties / create_buffer_with_properties = hooks::create_buffer_with_properties[ctx, props, flags, size, host_ptr, err],
        (ctx: cl_context, props: *const cl_mem_properties, flags: cl_mem_flags, size: usize, host_ptr: *mut c_void, err: *mut cl_int) -> cl_mem, else missing(err);
    clCreateSubBuffer / create_sub_buffer = hooks::create_sub_buffer[buffer, kind, info],
        (buffer: cl_mem, flags: cl_mem_flags, kind: cl_buffer_create_type, info: *const c_void, err: *mut cl_int) -> cl_mem, else missing(err);
    clSetKernelArg / set_kernel_arg = hooks::set_kernel_arg[kernel, size, value],
        (kernel: cl_kernel, index: cl_uint, size: usize, value: *const c_void) -> cl_int, else CL_INVALID_OPERATION;
    clEnqueueReadBuffer / enqueue_read_buffer = hooks::enqueue_read_buffer[mem],
        (q: cl_command_queue, mem: cl_mem, blocking: cl_bool, offset: usize, size: usize, ptr: *mut c_void, n: cl_uint, wait: *const cl_event, event: *mut cl_event) -> cl_int, else CL_INVALID_OPERATION;
    clEnqueueWriteBuffer / enqueue_write_buffer = hooks::enqueue_write_buffer[mem],
        (q: cl_command_queue, mem: cl_mem, blocking: cl_bool, offset: usize, size: usize, ptr: *const c_void, n: cl_uint, wait: *const cl_event, event: *mut cl_event) -> cl_int, else CL_INVALID_OPERATION;
    clEnqueueCopyBuffer / enqueue_copy_buffer = hooks::enqueue_copy_buffer[src, dst],
        (q: cl_command_queue, src: cl_mem, dst: cl_mem, src_offset: usize, dst_offset: usize, size: usize, n: cl_uint, wait: *const cl_event, event: *mut cl_event) -> cl_int, else CL_INVALID_OPERATION;
}
