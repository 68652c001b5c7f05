//! The device a stream runs on, which its other modules dispatch on.

use pinstream::backend::opencl::Context;
#[cfg(feature = "vulkan")]
use pinstream::backend::vulkan::VulkanDevice;

/// The device a stream runs on.
#[derive(Clone)]
pub(crate) enum On {
    /// The caller's own context (`psStreamCreate`).
    OpenCl(Context),
    /// A device of the stream's own on the caller's GPU (`psVkStreamCreate`): the caller's
    /// host memory is imported into it once per block, on the stream's first run over it
    /// (`super::host::Guest`).
    #[cfg(feature = "vulkan")]
    Vulkan(VulkanDevice),
}
