//! The Vulkan calls' part of the registry (`psVkHost*`, feature `vulkan`): how their ranges
//! came, the block each holds, and their reservations, insertions, removals and lookups under
//! Vulkan's key, over the one registry of the module above.

use super::{claim, other_api, refused, take, Api, Came, Held, RangeKind, RANGES};
use crate::error::{
    psError_t, Failure, PS_ERROR_HOST_MEMORY_NOT_REGISTERED, PS_ERROR_INVALID_HOST_POINTER,
};
use pinstream::backend::vulkan::VulkanHost;
use pinstream::host::ranges::Claim;
use std::ops::Range;

/// How a `psVkHost*` range came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VkKind {
    Allocated,
    Registered,
}

impl RangeKind for VkKind {
    fn describe(self) -> &'static str {
        match self {
            VkKind::Allocated => "allocated by psVkHostAlloc",
            VkKind::Registered => "registered by psVkHostRegister",
        }
    }

    fn made_by(self) -> &'static str {
        match self {
            VkKind::Allocated => "psVkHostAlloc",
            VkKind::Registered => "psVkHostRegister",
        }
    }

    fn release_call(self) -> &'static str {
        match self {
            VkKind::Allocated => "psVkHostFree",
            VkKind::Registered => "psVkHostUnregister",
        }
    }

    fn fix(self) -> &'static str {
        match self {
            VkKind::Allocated => "psVkHostFree takes a pointer psVkHostAlloc returned, once",
            VkKind::Registered => {
                "psVkHostUnregister takes the pointer given to psVkHostRegister, once"
            }
        }
    }

    fn refused_code(self) -> psError_t {
        match self {
            VkKind::Allocated => PS_ERROR_INVALID_HOST_POINTER,
            VkKind::Registered => PS_ERROR_HOST_MEMORY_NOT_REGISTERED,
        }
    }
}

/// A `psVkHost*` range: the memory pinned with the program's adopted device (through
/// `HostApi`, as every API's), whose chunks are released on drop, then its pages (for
/// `psVkHostAlloc`'s imported memory) unmapped.
pub(crate) struct VkBlock {
    /// The pinned memory; for a registration, over the whole pages the range touches.
    pub host: VulkanHost,
    pub kind: VkKind,
    /// The caller's bytes.
    pub range: Range<usize>,
    /// How it was pinned, and for host-visible memory why not imported.
    pub note: String,
}

/// A `psVkHostRegister` range reserved while it is imported, as [`Reservation`].
pub(crate) struct VkReservation(Claim<'static, Came, Held>);

impl VkReservation {
    /// Stores the `psVkHostRegister` block.
    pub(crate) fn complete(self, block: VkBlock) {
        self.0.complete(Held::Vk(Box::new(block)));
    }
}

/// A value kept under another API's key: a bug in this library, never the caller's doing.
pub(super) fn misfiled(addr: usize) -> Failure {
    Failure::new(
        crate::error::PS_ERROR_INTERNAL,
        format!("{addr:#x}: the registry holds another API's block there"),
    )
}

/// Reserves `range` for a `psVkHostRegister` in progress.
pub(crate) fn reserve_vk(range: Range<usize>) -> Result<VkReservation, Failure> {
    claim(range, Came::Vk(VkKind::Registered)).map(VkReservation)
}

/// Inserts a `psVkHostAlloc` block over `range`; an overlap with another `psVkHost*` range is
/// refused and the block dropped.
pub(crate) fn insert_vk(range: Range<usize>, block: VkBlock) -> Result<(), Failure> {
    RANGES
        .insert(
            range.clone(),
            Came::Vk(VkKind::Allocated),
            Held::Vk(Box::new(block)),
        )
        .map_err(|r| refused(&range, r))
}

/// Removes the `psVkHost*` block that starts at `addr` and was made as `kind`, as
/// [`remove`] does.
pub(crate) fn remove_vk(addr: usize, kind: VkKind) -> Result<VkBlock, Failure> {
    match take(addr, Came::Vk(kind))? {
        Held::Vk(block) => Ok(*block),
        Held::Cl(_) => Err(misfiled(addr)),
    }
}

/// `f` of the `psVkHost*` block holding `addr`, under Vulkan's lock in the registry, as
/// [`with_block`].
pub(crate) fn with_vk_block<R>(addr: usize, f: impl FnOnce(&VkBlock) -> R) -> Result<R, Failure> {
    let byte = addr..addr.saturating_add(1);
    let found = RANGES.find(Api::Vulkan, byte, |found| match found.value {
        Held::Vk(block) => Ok(f(block)),
        Held::Cl(_) => Err(misfiled(addr)),
    });
    found.map_err(|_| {
        Failure::new(
            PS_ERROR_HOST_MEMORY_NOT_REGISTERED,
            format!(
                "{addr:#x} lies in no range psVkHostAlloc or psVkHostRegister pinned (or one still being registered){}",
                other_api(addr, Came::Vk(VkKind::Allocated))
            ),
        )
    })?
}
