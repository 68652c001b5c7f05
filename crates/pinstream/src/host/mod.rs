//! Memory layer: [`HostRegion`], pinned host memory of any size, made by a [`Strategy`].
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
//!
//! | module | what |
//! |---|---|
//! | `region` | [`HostRegion`]: making, sharing, accessing and transferring a region |
//! | `options` | [`PinOptions`], [`numa_placement`], the size checks ([`check_size`]) |
//! | `error` | [`HostError`], with the fields each front phrases its fix from |
//! | `strategy`, `register`, `pin`, `progressive` | the strategies and `auto`'s order, registering the caller's memory, whether and at what VRAM cost the driver pins, pinning as the stream goes |

mod api;
mod options;
pub mod ranges;
mod region;
mod register;
#[cfg(feature = "vulkan")]
mod vulkan;

pub use crate::backend::opencl::host::{
    auto_order, auto_order_for, AutoRule, Chosen, FirstChoice, PinState, Strategy, StrategyChoice,
    StrategyReason, UnknownStrategy, VramCost, ZeroCopy,
};
pub use crate::backend::pinning::{HostError, PinKind};
pub use api::{DeviceBuffers, Heap, HostApi, PinRequest, Pinned};
pub use options::{check_size, numa_placement, PinOptions};
pub use options::{Fill, Progressive};
pub use region::progressive::{chunk_plan, up_front_with, ChunkPin};
pub use region::{Freeing, HostRegion, Released, SharedRegistration};
pub use register::{check_pinnable, check_registrable, RegisterOptions};

pub(crate) use crate::backend::opencl::host::pin;
use crate::backend::opencl::host::{alloc_error, alloc_failed};
use options::round_to_pages;
pub(crate) use options::smallest_max_alloc;
pub(crate) use region::PinRecord;
