//! The OpenCL backend over `cl3` with run-time loading.

mod adopt;
mod adopt_kernel;
mod api;
mod context;
mod error;
pub mod host;
mod hostbuf;
pub(crate) mod hostmem;
#[cfg(feature = "baselines")]
mod native;
pub(crate) mod pin_ceiling;
mod platform;
mod program;
#[cfg(feature = "baselines")]
pub mod raw_writes;
mod vram;
pub mod wait;
pub(crate) mod zerocopy;

pub use adopt::QueueRefusal;
pub use adopt_kernel::KernelRefusal;
pub use api::{ClInstance, OpenCl};
pub(crate) use context::MemObject;
pub use context::{queue_context, Context, DeviceBuffer, Event, MemFlags, Queue};
pub use error::{code_name, ClError};
pub use hostmem::AllocError;
pub(crate) use platform::amd_free_memory;
pub use platform::{
    default_device, devices, platform_names, platforms, unregistered_nvidia_fix, DeviceId,
    DeviceInfo, DiscoveryError, PlatformId, Vendor, RELEVANT_EXTENSIONS,
};
pub use program::{AddressSpace, ArgInfo, BuildError, Kernel, Program, WorkGroupLimits};
