//! The Vulkan backend (cargo feature `vulkan`): `ash` with the loader (`libvulkan.so.1`,
//! `vulkan-1.dll`) loaded at run time, so a build with the feature runs where no Vulkan is
//! installed and says what to install.
//!
//! Kernels run on the compute queue family (the first with compute: on NVIDIA the universal
//! one), up to four of its queues handed out to lanes in turn; with [`VkCopy::Crossed`], on
//! the compute-only family's second queue instead, every lane's. Copies go where the device's
//! [`VkCopy`] says (`plan`): by default ([`VkCopy::Auto`]) each to its lane's compute queue
//! while the other direction has no copy in flight, else to the transfer-only family where the
//! device has one (NVIDIA's copy engines: uploads on one queue, downloads on another, beside
//! kernels), with buffers made `VK_SHARING_MODE_CONCURRENT` over the families used (no ownership transfers:
//! buffers only, where concurrent sharing costs nothing). Every command is one command
//! buffer (two for the halves of a split copy), submitted when enqueued, ordered by timeline
//! semaphores (Vulkan 1.2), timed by a timestamp pair (by the host's clock where a family in
//! use has no timestamps) (`queue`). Host memory pinned with a device is registered by address
//! (`device::Registry`), so a copy from or into a `HostSpan` finds the `VkBuffer`s over it
//! (two chunks: two copy commands); other host bytes go through a staging buffer. Kernels
//! are WGSL compiled to SPIR-V by naga at run time, one compute pipeline per entry point
//! ([`VulkanProgram`]), their parameters read from naga's reflection.
//!
//! **Why WGSL.** naga (pure Rust: no C++ toolchain, no glslang or shaderc in the build)
//! parses WGSL best of its front ends, and WGSL is checked (parsed and validated) before the
//! driver sees it, so a user's mistake comes back with a line and column. f16 data is read
//! as packed `u32` words with `unpack2x16float` (WGSL's `f16` needs `enable f16;` and the
//! device's `shaderFloat16`, which not every device offers).
//!
//! **Binding convention.** A kernel's buffers are `var<storage>` arrays at
//! `@group(0) @binding(0..n)`, in parameter order; its values (counts, then user scalars)
//! are the members of one `var<immediate>` struct (Vulkan push constants), in order. Its
//! `@workgroup_size(X)` is the one work-group size it runs with. Groups are dispatched as a
//! 2-D grid when there are more than `maxComputeWorkGroupCount[0]`: the kernel computes its
//! linear group index as `wg.y * num_workgroups.x + wg.x`, and groups past the work return.
//! A buffer whose length the kernel reads (`arrayLength`) is bound as the bytes the engine
//! gives it ([`crate::backend::api::KernelArg::Within`]: not the bounds guard's zone), the
//! others whole.
//!
//! **A program's own device.** [`VulkanDevice::from_program`] adopts a `VkDevice` a program
//! made (the C library's `psVkHost*` calls): its functions from the program's
//! `vkGetInstanceProcAddr`, every one the calls need found before any is called
//! (`functions`), no loader of pinstream's own, no queues; it pins host memory through
//! [`crate::host::HostApi`] as an opened device does, and is never waited on nor destroyed.

mod adopt;
mod api;
mod batch;
mod copy;
mod device;
mod error;
mod functions;
mod host;
mod instance;
#[cfg(feature = "baselines")]
mod native;
mod plan;
mod program;
mod queue;
mod raw;
mod registry;
mod submit;

/// The Vulkan types (ash's), for callers that pass a program's own handles
/// ([`VulkanDevice::from_program`]).
pub use ash::vk;

pub use api::{Vulkan, VulkanDevice};
pub use batch::VulkanStaged;
pub use device::VulkanBuffer;
use error::Result;
pub use error::{VulkanError, IMPORT_HINT};
pub(crate) use host::host_error;

/// Why a device cannot import host memory when its driver lacks the extension: one sentence
/// for the adoption, the device's refusal and the listing.
pub(crate) const NO_IMPORT: &str = "the driver does not offer VK_EXT_external_memory_host";
pub use host::{mapped_binding, ChunkBuffers, HostChunk, VkPinning, VulkanHost};
pub use instance::{Caps, VulkanAdapter, VulkanInstance};
pub use plan::{VkCopy, VkOptions};
pub use program::{VulkanKernel, VulkanProgram};
pub use queue::{VulkanEvent, VulkanQueue};
