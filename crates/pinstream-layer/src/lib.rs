#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
//! pinstream-layer: an OpenCL layer that makes classic pinned-memory programs cost no VRAM.
//!
//! The classic recipe for pinned memory in OpenCL, a `CL_MEM_ALLOC_HOST_PTR` buffer that is
//! then mapped, charges VRAM equal to what it pins on NVIDIA (+10 GiB for 10 GiB on the H200).
//! `libpinstream_layer.so` sits between a program and the driver and, on devices whose driver
//! has `cl_nv_create_buffer`, creates such buffers with `clCreateBufferNV(…,
//! CL_MEM_LOCATION_HOST_NV | CL_MEM_PINNED_NV, …)`: the same flags, size and host pointer, the
//! storage in pinned host memory. Every other call passes through untouched.
//!
//! Two ways in, one library:
//! - `OPENCL_LAYERS=/path/libpinstream_layer.so`, for loaders with layer support (ocl-icd
//!   2.3.0 on, the Khronos loader): [`ffi::layer`].
//! - `LD_PRELOAD=/path/libpinstream_layer.so`, for any loader (the CUDA toolkit's has no layer
//!   support): [`ffi::preload`]. Both at once do the work once.
//!
//! | part | modules | raw handles / `unsafe` |
//! |---|---|---|
//! | decision | [`decide`] (which calls are rewritten, with which flags, why not), [`settings`], [`ledger`] | no |
//! | environment | [`probe`] (is the layer active here, which way in works) | `dlopen` of the loader, `dladdr` |
//! | entry points | [`ffi`]: `layer`, `preload`, `hooks`, `driver`, `next`, `state` | yes, and only here |
//!
//! # Safety
//! The entry points are called by a loader or a program with the arguments of the OpenCL call
//! of the same name; they pass those arguments on unchanged (the rewrite changes only which
//! creation function is called). Handles are compared by address and never dereferenced,
//! except that a handle's first word is its driver's dispatch table (`cl_khr_icd`), read only
//! where `LD_PRELOAD` finds no loader to call. The process-wide state (settings, ledger) sits
//! behind a `OnceLock` and a `Mutex`; driver callbacks take the same lock.
//!
//! The layer never harms the program it is loaded into: no panic crosses into C (a
//! `catch_unwind` at every entry point passes the call straight on, `ffi::guard`), its log
//! never raises SIGPIPE nor writes into a file that took a closed stderr's place
//! (`ffi::sink`), and the summary at exit never waits on another thread or changes the exit
//! code.

//!
//! # Platforms
//! Unix only in effect: `OPENCL_LAYERS` layers and `LD_PRELOAD` are features of the Linux ICD
//! loaders and the ELF dynamic linker. On other targets (Windows) the crate builds with only
//! its pure parts ([`decide`], [`settings`], [`ledger`]), so that the workspace builds there;
//! the library it makes exports nothing and does nothing.

pub mod decide;
#[cfg(unix)]
pub mod ffi;
pub mod ledger;
#[cfg(unix)]
pub mod probe;
pub mod settings;
