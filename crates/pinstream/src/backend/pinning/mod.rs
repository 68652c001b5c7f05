//! Pinned host memory, whatever the API: what every API's pinned memory shares (its error,
//! [`HostError`], and how it reaches the device, [`PinKind`]), what any pin is asked for
//! beyond an API's own ways ([`Progressive`], [`numa_placement`], [`check_size`]), and which
//! of the caller's ranges registration really pins ([`check_registrable`]). Each API's own pinned memory
//! sits in its backend (OpenCL's `HostRegion` in `opencl::host`, CUDA's `PinnedHost`, Vulkan's
//! `VulkanHost`); the memory layer (`crate::host`) is written over them through `HostApi`.

mod error;
mod options;
mod registrable;
#[cfg(test)]
mod texts;

pub use error::HostError;
pub(crate) use options::round_to_pages;
pub use options::{check_size, numa_placement, Fill, Progressive};
pub use registrable::{check_pinnable, check_registrable};

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
