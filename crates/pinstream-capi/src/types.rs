//! The C API's plain types and flag values, which every call's module names: OpenCL's handles
//! as `CL/cl.h` declares them, and the flags of `psHostAlloc` and `psHostRegister`.

use std::ffi::{c_uint, c_void};

/// An OpenCL context, as `CL/cl.h` declares it.
#[allow(non_camel_case_types)]
pub type cl_context = *mut c_void;

/// An OpenCL command queue, as `CL/cl.h` declares it.
#[allow(non_camel_case_types)]
pub type cl_command_queue = *mut c_void;
/// An OpenCL memory object, as `CL/cl.h` declares it.
#[allow(non_camel_case_types)]
pub type cl_mem = *mut c_void;
/// An OpenCL kernel, as `CL/cl.h` declares it.
#[allow(non_camel_case_types)]
pub type cl_kernel = *mut c_void;
/// An OpenCL event, as `CL/cl.h` declares it.
#[allow(non_camel_case_types)]
pub type cl_event = *mut c_void;

/// `psHostAlloc` flags: the strategy `auto` chooses, unless `PINSTREAM_STRATEGY` names one.
pub const PS_HOST_ALLOC_DEFAULT: c_uint = 0;
/// `psHostAlloc` flags: the bits that hold a `PS_STRATEGY_*` value; every other bit must be 0.
pub const PS_HOST_ALLOC_STRATEGY_MASK: c_uint = 0xff;
/// `psHostRegister` flags: the only value it takes (USE_HOST_PTR registration).
pub const PS_HOST_REGISTER_DEFAULT: c_uint = 0;

/// `psHostAlloc` flags: mapped memory, which kernels read and write in place across the bus
/// (`cudaHostAllocMapped`); `psHostGetDeviceBuffer` gives the `cl_mem` over it. The mechanism
/// is chosen per driver (NVIDIA: `clCreateBufferNV` host memory; CPU devices and AMD:
/// `CL_MEM_ALLOC_HOST_PTR`; Intel integrated GPUs: `CL_MEM_USE_HOST_PTR`), so it takes no
/// `PS_STRATEGY_*` value, and `PINSTREAM_STRATEGY` does not apply to it.
pub const PS_HOST_ALLOC_MAPPED: c_uint = 0x100;
