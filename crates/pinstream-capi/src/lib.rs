//! The C library of pinstream (`libpinstream`, header `include/pinstream.h`): CUDA's pinned
//! host-memory calls for OpenCL programs, in the caller's own `cl_context`.
//!
//! | CUDA | pinstream |
//! |---|---|
//! | `cudaHostAlloc` / `cudaMallocHost` | `psHostAlloc` |
//! | `cudaFreeHost` | `psHostFree` |
//! | `cudaHostRegister` / `cudaHostUnregister` | `psHostRegister` / `psHostUnregister` |
//! | `cudaPointerGetAttributes` (for host memory) | `psHostGetInfo` |
//! | `cudaHostAlloc(..., cudaHostAllocMapped)` | `psHostAlloc(..., PS_HOST_ALLOC_MAPPED, ...)` |
//! | `cudaHostGetDevicePointer` | `psHostGetDeviceBuffer` (a `cl_mem` and an offset) |
//! | `cudaGetErrorString` | `psGetErrorString`, plus `psGetLastErrorDetail` |
//! | `cudaRuntimeGetVersion` | `psGetVersion` |
//!
//! Vulkan programs (feature `vulkan`, on by default; declared in the header where
//! `vulkan/vulkan.h` is included first): `psVkHostAlloc` / `psVkHostFree`,
//! `psVkHostRegister` / `psVkHostUnregister` in the program's own `VkDevice`, and
//! `psVkHostGetChunks` for the `VkBuffer`s to copy with (module `vulkan`).
//!
//! After that the program uses plain OpenCL: `clEnqueueWriteBuffer` / `clEnqueueReadBuffer`
//! from the pointer run at pinned speed, or the streaming engine runs the program's kernel over
//! the memory in one call: `psStreamCreate`, `psStreamSetKernel`, `psStreamSetInPlace`,
//! `psStreamRun` / `psStreamRunAsync`, `psStreamCancel` (module `stream`, docs/c.md).
//!
//! # Safety
//! Every `extern "C"` body runs inside one panic boundary (`error::boundary`): a panic becomes
//! `PS_ERROR_INTERNAL` and never unwinds into C. Raw pointers from C are checked for null and
//! used only as the header documents. Ranges live in one process-wide registry
//! (`registry`), so every call is thread-safe and misuse (double free, foreign pointers,
//! overlaps) is answered with a code. What the caller owes (a valid context, memory that
//! outlives its registration, no transfers in flight at free) is written in the header.
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod api;
mod batch;
mod error;
mod info;
mod mapped;
mod registry;
mod strategy;
mod stream;
mod types;
mod version;
#[cfg(feature = "vulkan")]
mod vulkan;

pub use api::*;
pub use batch::*;
pub use error::*;
pub use info::{psHostInfo, psHostKind, psPinState, PS_HOST_INFO_TEXT};
pub use mapped::psHostGetDeviceBuffer;
pub use strategy::psStrategy;
pub use stream::*;
pub use types::*;
pub use version::psGetVersion;
#[cfg(feature = "vulkan")]
pub use vulkan::*;
