//! Memory layer: pinned host memory for any API through [`HostApi`] (`api`; CUDA's in
//! `cuda`, Vulkan's in `vulkan`), and the one registry of the address ranges the C and Python fronts hand out
//! (`ranges`).
//!
//! Each API's own pinned memory lives in its backend: OpenCL's [`HostRegion`], its strategies,
//! registration of the caller's memory and progressive pins in `backend::opencl::host`, CUDA's
//! `PinnedHost` in `backend::cuda`, Vulkan's `VulkanHost` in `backend::vulkan`; what they share
//! ([`HostError`], [`PinKind`], [`Progressive`], the size and range checks) in
//! `backend::pinning`. They are re-exported here at the paths they had.

mod api;
#[cfg(feature = "cuda")]
mod cuda;
mod opencl;
pub mod ranges;
#[cfg(feature = "vulkan")]
mod vulkan;

pub use crate::backend::opencl::host::{
    auto_order, auto_order_for, chunk_plan, up_front_with, AutoRule, Chosen, ChunkPin, FirstChoice,
    Freeing, HostRegion, PinOptions, PinState, RegisterOptions, Released, SharedRegistration,
    Strategy, StrategyChoice, StrategyReason, UnknownStrategy, VramCost, ZeroCopy,
};
pub use crate::backend::pinning::{
    check_pinnable, check_registrable, check_size, numa_placement, CallerRange, Fill, HostError,
    PinKind, Progressive,
};
pub use api::{DeviceBuffers, Heap, HostApi, PinOffer, PinRequest, Pinned, RegisterRequest};
