//! Pinned host memory, whatever the API: what every API's pinned memory shares (its error,
//! [`HostError`], and how it reaches the device, [`PinKind`]), what any pin is asked for
//! beyond an API's own ways, ([`Progressive`], [`numa_placement`], [`check_size`]), and which
//! of the caller's ranges registration really pins ([`check_registrable`]). Each API's own pinned memory
//! sits in its backend (OpenCL's `HostRegion` in `opencl::host`, CUDA's `PinnedHost`, Vulkan's
//! `VulkanHost`); the memory layer (`crate::host`) is written over them through `HostApi`.

mod caller;
mod error;
mod options;
mod registrable;
#[cfg(test)]
mod texts;

pub use caller::CallerRange;
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

/// Whether the driver pinned memory for DMA, never assumed: each API's memory says which
/// (`Pinned::pin_state`), with its basis where the API has several (OpenCL's `pin_note`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PinState {
    /// Pinned for DMA by every non-CPU device it serves, by a mechanism measured or documented
    /// to pin on that driver (OpenCL's `HostRegion::pin_note` says which).
    Pinned,
    /// Not pinned: a baseline (OpenCL's `mlock`, `pageable`), or a pin that failed.
    NotPinned,
    /// The driver accepted the mechanism, but pinstream has neither a measurement nor a driver
    /// source showing that this driver pins it: not claimed.
    Unknown,
    /// CPU devices only: host memory is their memory, nothing needs pinning.
    NotNeeded,
}

impl PinState {
    /// True only for [`PinState::Pinned`].
    pub fn is_pinned(self) -> bool {
        self == PinState::Pinned
    }
}
