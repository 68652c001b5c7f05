//! The CUDA backend (cargo feature `cuda`): the driver API and NVRTC through `cudarc`, both
//! loaded at run time, so a build with the feature still runs where no CUDA driver exists.
//!
//! As in the OpenCL backend, cudarc's thin `result`/`sys` calls are wrapped by owning types
//! here whose `Drop` never panics. cudarc's own safe types were not used for streams, events
//! and memory because pinstream needs what they hide: a start and an end event around every
//! command (per-command device times, as OpenCL event profiling gives), cross-stream waits on
//! those events, `cuMemHostRegister` over memory pinstream maps itself, and raw device
//! pointers in a ring shared by three streams.
//!
//! Every call binds the context to the calling thread first (`cuCtxSetCurrent`, cheap), so
//! the types may be used from any thread.

mod api;
mod available;
mod batch;
mod device;
mod error;
#[cfg(feature = "baselines")]
mod native;
mod pinned;
mod program;
#[cfg(feature = "baselines")]
pub mod raw_copies;
#[cfg(feature = "baselines")]
pub mod scattered;
mod signature;
mod stream;
#[cfg(feature = "baselines")]
pub mod zero_copy;

pub use api::{Cuda, CudaInstance};
pub use available::unavailable_reason;
use available::version;
pub use batch::CudaStaged;
pub use device::{devices, CudaDeviceInfo, DeviceMem, Gpu};
pub use error::CudaError;
use error::Result;
pub use pinned::{CudaPinning, PinnedHost};
pub use program::{CudaKernel, CudaProgram};
pub use stream::{EventPair, Stream, Timed};

pub use super::api::HostSpan;
