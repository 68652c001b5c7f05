//! Pinned host memory, whatever the API: what every API's pinned memory shares (its error,
//! [`HostError`], and how it reaches the device, [`PinKind`]). Each API's own pinned memory
//! sits in its backend (OpenCL's `HostRegion` in `opencl::host`, CUDA's `PinnedHost`, Vulkan's
//! `VulkanHost`); the memory layer (`crate::host`) is written over them through `HostApi`.

mod error;
#[cfg(test)]
mod texts;

pub use error::HostError;

/// How pinned memory reaches the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinKind {
    /// Pinned through the driver: the device copies it by DMA.
    Driver,
    /// Kept resident (`mlock`) but unknown to the driver: copied through a staging buffer.
    Resident,
    /// Plain pageable memory, the baseline.
    Pageable,
}
