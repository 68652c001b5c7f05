//! Vulkan's functions, loaded and checked before anything calls one. ash stands a stub in for
//! each function a lookup did not give, and the stub panics inside an `extern "system"`
//! function, which aborts the process ("panic in a function that cannot unwind"). So every
//! core function of the versions a caller needs is looked up here first, and a missing one is
//! an error naming it ([`VulkanError::Lacking`]); functions of later versions are loaded where
//! found, and never called.

use super::error::{Result, VulkanError};
use ash::vk;
use std::ffi::{c_void, CStr, CString};

/// Names looked up through one lookup (`vkGetInstanceProcAddr` or `vkGetDeviceProcAddr`
/// bound to one object), keeping those it did not give.
struct Lookups<F> {
    lookup: F,
    missing: Vec<CString>,
    /// How many names were missing after each table: Vulkan 1.0's, 1.1's, ...
    ends: Vec<usize>,
}

impl<F: FnMut(&CStr) -> vk::PFN_vkVoidFunction> Lookups<F> {
    fn new(lookup: F) -> Self {
        Lookups {
            lookup,
            missing: Vec::new(),
            ends: Vec::new(),
        }
    }

    /// `name`'s function, or null (kept as missing).
    fn get(&mut self, name: &CStr) -> *const c_void {
        match (self.lookup)(name) {
            Some(f) => f as *const c_void,
            None => {
                self.missing.push(name.to_owned());
                std::ptr::null()
            }
        }
    }

    /// Marks the end of a version's table.
    fn table_done(&mut self) {
        self.ends.push(self.missing.len());
    }

    /// The first function missing of the tables up to Vulkan `version`'s, refused as
    /// `refusal` phrases it.
    fn need(&self, version: u32, refusal: impl FnOnce(&str) -> String) -> Result<()> {
        let minor = vk::api_version_minor(version) as usize;
        let end = self.ends[minor.min(self.ends.len() - 1)];
        match self.missing[..end].first() {
            Some(name) => Err(VulkanError::Lacking(refusal(&name.to_string_lossy()))),
            None => Ok(()),
        }
    }
}

/// An instance's functions through `lookup` (its `vkGetInstanceProcAddr`), every core one
/// up to Vulkan `version` found, else refused naming the first missing with `fix`.
pub(super) fn instance_fns(
    handle: vk::Instance,
    lookup: impl FnMut(&CStr) -> vk::PFN_vkVoidFunction,
    version: u32,
    fix: &str,
) -> Result<ash::Instance> {
    let mut l = Lookups::new(lookup);
    let v10 = ash::InstanceFnV1_0::load(|n| l.get(n));
    l.table_done();
    let v11 = ash::InstanceFnV1_1::load(|n| l.get(n));
    l.table_done();
    // Vulkan 1.2 added no instance function.
    l.table_done();
    let v13 = ash::InstanceFnV1_3::load(|n| l.get(n));
    l.table_done();
    l.need(version, |name| {
        format!("vkGetInstanceProcAddr gives no {name} for the VkInstance: {fix}")
    })?;
    Ok(ash::Instance::from_parts_1_3(handle, v10, v11, v13))
}

/// A device's functions through `instance`'s `vkGetDeviceProcAddr`, every core one up to
/// Vulkan `version` found, else refused naming the first missing with `fix`.
///
/// # Safety
/// `device` is a live device made from a physical device of `instance`.
pub(super) unsafe fn device_fns(
    instance: &ash::Instance,
    device: vk::Device,
    version: u32,
    fix: &str,
) -> Result<ash::Device> {
    let gdpa = instance.fp_v1_0().get_device_proc_addr;
    // SAFETY: `gdpa` was found (checked by `instance_fns`); `device` is live (the contract).
    let mut l = Lookups::new(|n: &CStr| unsafe { gdpa(device, n.as_ptr()) });
    let v10 = ash::DeviceFnV1_0::load(|n| l.get(n));
    l.table_done();
    let v11 = ash::DeviceFnV1_1::load(|n| l.get(n));
    l.table_done();
    let v12 = ash::DeviceFnV1_2::load(|n| l.get(n));
    l.table_done();
    let v13 = ash::DeviceFnV1_3::load(|n| l.get(n));
    l.table_done();
    l.need(version, |name| {
        format!("vkGetDeviceProcAddr gives no {name} for the VkDevice: {fix}")
    })?;
    Ok(ash::Device::from_parts_1_3(device, v10, v11, v12, v13))
}

/// `vkGetMemoryHostPointerPropertiesEXT` of `device`, where it was created with
/// `VK_EXT_external_memory_host` (the driver gives it only then).
///
/// # Safety
/// As [`device_fns`].
pub(super) unsafe fn host_pointer_fn(
    instance: &ash::Instance,
    device: vk::Device,
) -> Option<vk::PFN_vkGetMemoryHostPointerPropertiesEXT> {
    let gdpa = instance.fp_v1_0().get_device_proc_addr;
    // SAFETY: the contract; the name is NUL-terminated.
    let f = unsafe { gdpa(device, c"vkGetMemoryHostPointerPropertiesEXT".as_ptr()) }?;
    // SAFETY: the driver's function of that name, so of that type.
    Some(unsafe {
        std::mem::transmute::<
            unsafe extern "system" fn(),
            vk::PFN_vkGetMemoryHostPointerPropertiesEXT,
        >(f)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "system" fn never_called() {}

    /// A lookup that finds every name but `hidden`.
    fn all_but(hidden: &'static CStr) -> impl FnMut(&CStr) -> vk::PFN_vkVoidFunction {
        move |n| (n != hidden).then_some(never_called as unsafe extern "system" fn())
    }

    #[test]
    fn a_missing_core_function_is_refused_by_name_and_later_ones_are_not_needed() {
        let h = vk::Instance::null();
        let v11 = vk::API_VERSION_1_1;
        let e = instance_fns(h, all_but(c"vkGetPhysicalDeviceProperties2"), v11, "fix")
            .err()
            .expect("refused");
        assert_eq!(
            e.to_string(),
            "vkGetInstanceProcAddr gives no vkGetPhysicalDeviceProperties2 for the VkInstance: fix"
        );
        assert!(matches!(e, VulkanError::Lacking(_)));
        let e = instance_fns(h, all_but(c"vkDestroyInstance"), v11, "fix").err();
        assert!(e.is_some_and(|e| e.to_string().contains("vkDestroyInstance")));
        // A 1.1 function is not needed of 1.0, nor a 1.3 one of 1.1.
        let hidden = c"vkGetPhysicalDeviceProperties2";
        assert!(instance_fns(h, all_but(hidden), vk::API_VERSION_1_0, "").is_ok());
        let tools = c"vkGetPhysicalDeviceToolProperties";
        assert!(instance_fns(h, all_but(tools), v11, "").is_ok());
        assert!(instance_fns(h, all_but(tools), vk::API_VERSION_1_3, "").is_err());
    }
}
