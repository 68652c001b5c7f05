//! The calls the layer makes downward: to the next layer or the driver.
//!
//! Loaded through `OPENCL_LAYERS`, they come from the target dispatch table the loader hands to
//! `clInitLayer`. Loaded through `LD_PRELOAD`, they come from `dlsym(RTLD_NEXT, name)`: the
//! loader that would have been called without the layer. Where that finds nothing (the program
//! reached the layer's entry points but its loader is not in the global scope, as with a
//! Python extension that links a bundled `libOpenCL` and is opened `RTLD_LOCAL`, PyOpenCL's
//! wheel for one) a call goes through the dispatch table at the start of the object it is
//! about, which is what every ICD loader does (`cl_khr_icd`: each object begins with a
//! pointer to its driver's dispatch table).

use opencl_sys::cl_function_types::*;
use opencl_sys::cl_icd::cl_icd_dispatch;
use std::ffi::{c_void, CStr};

macro_rules! next_table {
    ($($field:ident: $name:ident as $ty:ty;)*) => {
        /// Function pointers to the next layer or driver, `None` where it has none.
        #[derive(Clone, Copy)]
        pub(crate) struct Next {
            $(pub(crate) $field: $ty,)*
            /// Fall back to the object's own dispatch table where a pointer is `None`.
            pub(crate) object_fallback: bool,
        }

        impl Next {
            /// From a loader's target dispatch table.
            pub(crate) fn from_dispatch(d: &cl_icd_dispatch) -> Next {
                Next { $($field: d.$name,)* object_fallback: false }
            }

            /// From `dlsym(RTLD_NEXT, …)`, with the object-dispatch fallback.
            pub(crate) fn from_rtld_next() -> Next {
                // SAFETY: each symbol, where found, is the OpenCL entry point of that name in an
                // object loaded after this library, so it has the OpenCL signature of `$ty`.
                Next { $($field: unsafe { std::mem::transmute::<*mut c_void, $ty>(rtld_next(concat!(stringify!($name), "\0"))) },)* object_fallback: true }
            }

            $(
            /// The function to call for `obj` (the call's first handle), if any.
            ///
            /// # Safety
            /// `obj` is null or a live OpenCL object handle.
            pub(crate) unsafe fn $field(&self, obj: *mut c_void) -> $ty {
                // SAFETY: as this function's contract.
                self.$field.or_else(|| unsafe { object_dispatch(self.object_fallback, obj) }.and_then(|d| d.$name))
            }
            )*
        }
    };
}

next_table! {
    create_buffer: clCreateBuffer as clCreateBuffer_t;
    create_buffer_with_properties: clCreateBufferWithProperties as clCreateBufferWithProperties_t;
    create_sub_buffer: clCreateSubBuffer as clCreateSubBuffer_t;
    set_kernel_arg: clSetKernelArg as clSetKernelArg_t;
    enqueue_read_buffer: clEnqueueReadBuffer as clEnqueueReadBuffer_t;
    enqueue_write_buffer: clEnqueueWriteBuffer as clEnqueueWriteBuffer_t;
    enqueue_copy_buffer: clEnqueueCopyBuffer as clEnqueueCopyBuffer_t;
    get_context_info: clGetContextInfo as clGetContextInfo_t;
    get_device_info: clGetDeviceInfo as clGetDeviceInfo_t;
    get_extension_function_address_for_platform: clGetExtensionFunctionAddressForPlatform as clGetExtensionFunctionAddressForPlatform_t;
    set_mem_object_destructor_callback: clSetMemObjectDestructorCallback as clSetMemObjectDestructorCallback_t;
}

/// `dlsym(RTLD_NEXT, name)`; `name` ends in a NUL.
fn rtld_next(name: &str) -> *mut c_void {
    let name = CStr::from_bytes_with_nul(name.as_bytes()).expect("names end in NUL");
    // SAFETY: `name` is a NUL-terminated string; RTLD_NEXT asks for the next definition after
    // this library in the global search order, and returns null when there is none.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) }
}

/// The dispatch table at the start of the ICD object `obj`, when `allowed`.
///
/// # Safety
/// `obj` is null or a live OpenCL object of an ICD driver.
unsafe fn object_dispatch(allowed: bool, obj: *mut c_void) -> Option<&'static cl_icd_dispatch> {
    if !allowed || obj.is_null() {
        return None;
    }
    // SAFETY: an ICD object starts with a pointer to its driver's dispatch table, which lives
    // as long as the driver is loaded (cl_khr_icd).
    unsafe { (*(obj as *const *const cl_icd_dispatch)).as_ref() }
}
