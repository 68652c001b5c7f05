//! OpenCL's pinned host memory: [`HostRegion`] (`region`, with the progressive pin as its
//! child), made by a [`Strategy`] as [`PinOptions`] say (`options`), or over the caller's
//! memory ([`HostRegion::register`], `register`); its strategies and `auto`'s rule
//! ([`auto_order`], with why one was chosen, [`StrategyReason`]), whether and at what VRAM cost
//! the driver pins ([`PinState`], [`VramCost`]), its zero-copy mechanisms ([`ZeroCopy`]), and
//! how its failures become the neutral [`HostError`](crate::backend::pinning::HostError).
//!
//! A region is one contiguous range for `register`, `mlock` and `pageable` (one `mmap`),
//! exposed as one slice by [`HostRegion::as_slice`]; for the driver-allocated strategies
//! (`nv-host`, `alloc-host-ptr`, `svm`, `intel-usm`) it is a list of chunks no larger than
//! the device's `CL_DEVICE_MAX_MEM_ALLOC_SIZE`, exposed by [`HostRegion::chunk`] and
//! [`HostRegion::chunks`] (and as one slice only when it has a single chunk).
//!
//! A region can also cover memory the caller owns ([`HostRegion::register`], as
//! `cudaHostRegister`), and [`PinOptions::contiguous`] asks for one pointer of any size (as
//! `cudaMallocHost`). Each region says whether the driver really pinned it
//! ([`HostRegion::pin_state`]) and, when asked, what it cost in VRAM ([`HostRegion::vram_cost`]).
//!
//! Memory made in a context with several devices serves every device: a strategy is used only
//! when every device offers it, chunks fit the smallest maximum allocation, and `auto` follows
//! [`auto_order_for`].
//!
//! Transfers borrow the region: [`HostRegion::upload`] takes `&self` (the device reads the
//! memory), [`HostRegion::download`] takes `&mut self` (the device writes it). The events of
//! transfers in flight are kept inside the region; every accessor and `Drop` wait for them
//! first, so no slice is ever handed out while a transfer may touch it.
//! [`HostRegion::release_when_idle`] frees a region without that wait (pinstream's one freeing
//! thread frees it once its work has ended), for fronts whose frees come from a garbage
//! collector.

mod error;
mod options;
pub(crate) mod pin;
mod reason;
pub(crate) mod region;
mod register;
pub(crate) mod strategy;
mod zero_copy;

pub(crate) use error::{alloc_error, alloc_failed};
pub(crate) use options::smallest_max_alloc;
pub use options::PinOptions;
pub use pin::{PinState, VramCost};
pub use reason::{Chosen, StrategyReason};
pub use region::progressive::{chunk_plan, up_front_with, ChunkPin};
pub use region::{Freeing, HostRegion, Released, SharedRegistration};
pub use register::RegisterOptions;
pub use strategy::{
    auto_order, auto_order_for, AutoRule, FirstChoice, Strategy, StrategyChoice, UnknownStrategy,
};
pub use zero_copy::ZeroCopy;
