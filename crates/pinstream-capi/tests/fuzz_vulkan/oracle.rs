//! What each call's arguments call for: the device a call is given, the handles made NULL
//! and the function hidden from it ([`Target`]), and the check of a code against that.

use ash::vk;
use pinstream_capi::*;
use std::ffi::CStr;

use crate::vk_common::{detail, Handles};

/// The function psVkHostRegister needs of an importing device, its absence a device that
/// does not import.
pub const HOST_POINTER: &CStr = c"vkGetMemoryHostPointerPropertiesEXT";
/// Functions hidden from some calls.
pub const HIDDEN: [&CStr; 8] = [
    c"vkCreateBuffer",
    c"vkAllocateMemory",
    c"vkFreeMemory",
    c"vkMapMemory",
    c"vkGetDeviceProcAddr",
    c"vkGetPhysicalDeviceProperties2",
    c"vkEnumerateDeviceExtensionProperties",
    HOST_POINTER,
];

/// Which device a call is given.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Dev {
    /// A Vulkan 1.2 instance's device with VK_EXT_external_memory_host.
    Import,
    /// Without it.
    Plain,
    /// A Vulkan 1.0 instance's device.
    Old,
}

/// The objects every thread's calls use: raw handles and addresses only.
#[derive(Clone, Copy)]
pub struct World {
    pub devices: [(Dev, Handles); 3],
    /// A page whose next page nothing maps.
    pub hole: usize,
    /// Three pages, the middle one with no access.
    pub no_access: usize,
    /// A read-only page.
    pub read_only: usize,
}

/// The handles of one call and what the fake hides from it.
#[derive(Clone, Copy)]
pub struct Target {
    pub h: Handles,
    pub dev: Dev,
    pub hidden: Option<&'static CStr>,
}

impl Target {
    /// Whether a handle or `vkGetInstanceProcAddr` is NULL.
    fn any_null(&self) -> bool {
        let h = &self.h;
        h.instance == vk::Instance::null()
            || h.physical == vk::PhysicalDevice::null()
            || h.device == vk::Device::null()
            || h.gipa.is_none()
    }

    /// The code the handles call for once the other arguments passed: a NULL handle, an
    /// instance below 1.1, a function the calls need missing.
    pub fn refused(&self) -> Option<psError_t> {
        let lacks = self.hidden.is_some_and(|n| n != HOST_POINTER);
        (self.any_null() || lacks || self.dev == Dev::Old).then_some(PS_ERROR_INVALID_VALUE)
    }

    /// What the detail of [`Self::refused`]'s refusal names: the hidden function, or the
    /// version needed (where no handle is NULL).
    pub fn named(&self) -> Option<String> {
        match (self.hidden, self.dev) {
            _ if self.any_null() => None,
            (None, Dev::Old) => Some("VK_API_VERSION_1_1".into()),
            (Some(n), dev) if n != HOST_POINTER && dev != Dev::Old => {
                Some(n.to_string_lossy().into_owned())
            }
            _ => None,
        }
    }

    /// Whether the device imports host memory.
    pub fn imports(&self) -> bool {
        self.dev == Dev::Import && self.hidden != Some(HOST_POINTER)
    }
}

/// `code`, checked to be `want`'s, with a detail naming `call` when it is not success.
pub fn expect(call: &str, code: psError_t, want: &[psError_t]) -> psError_t {
    let d = detail();
    assert!(
        want.contains(&code),
        "{call} returned {code}, want one of {want:?}: {d}"
    );
    if code != PS_SUCCESS {
        assert!(
            d.starts_with(&format!("{call}: ")) && d.len() > call.len() + 12,
            "{call}: `{d}`"
        );
    }
    code
}
