//! The Vulkan backend (cargo feature `vulkan`): `ash` with the loader (`libvulkan.so.1`,
//! `vulkan-1.dll`) loaded at run time, so a build with the feature runs where no Vulkan is
//! installed and says what to install.
//!
//! One compute queue family (the first with compute: on NVIDIA the universal one, which
//! copied fastest in docs/gpu-facts.md, where the dedicated transfer family was slower), up
//! to four of its queues handed out in turn; every command is one command buffer, submitted
//! when enqueued, ordered by timeline semaphores (Vulkan 1.2), timed by a timestamp pair
//! ([`queue`]). Host memory pinned with a device is registered by address
//! ([`device::Registry`]), so a copy from or into a `HostSpan` finds the `VkBuffer`s over it
//! (two chunks: two copy commands); other host bytes go through a staging buffer. Kernels
//! are WGSL compiled by naga ([`program`], which documents the binding convention).

mod api;
mod device;
mod error;
mod host;
mod instance;
mod program;
mod queue;

pub use api::{Vulkan, VulkanDevice};
pub use device::VulkanBuffer;
use error::Result;
pub use error::{VulkanError, IMPORT_HINT};
pub use host::{VkPinning, VulkanHost};
pub use instance::{Caps, VulkanAdapter, VulkanInstance};
pub use program::{VulkanKernel, VulkanProgram};
pub use queue::{VulkanEvent, VulkanQueue};
