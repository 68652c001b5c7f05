//! A program's own Vulkan device, adopted for the C library's `psVkHost*` calls
//! ([`super::VulkanDevice::from_program`]): its functions from the `vkGetInstanceProcAddr` the program
//! passes, each one the calls need checked before any is called (`functions`), and its
//! limits for host memory ([`host_limits`], shared with the backend's adapters), which refuse
//! an instance below Vulkan 1.1.

use super::error::{Result, VulkanError};
use super::functions::{device_fns, host_pointer_fn, instance_fns};
use super::raw::RawDevice;
use ash::vk;
use std::ffi::CStr;

/// The version the calls need of a program's instance: `vkGetPhysicalDeviceProperties2` and
/// the limits read through it are Vulkan 1.1.
const NEEDED: u32 = vk::API_VERSION_1_1;

/// The fix for an instance function the program's `vkGetInstanceProcAddr` does not give.
const INSTANCE_FIX: &str = "pass the vkGetInstanceProcAddr of the loader that created the VkInstance (vkGetInstanceProcAddr from libvulkan, or the one volk or your loader gives), for an instance created with VkApplicationInfo.apiVersion VK_API_VERSION_1_1 or later";

/// The fix for a device function it does not give.
const DEVICE_FIX: &str = "pass a VkDevice created from the VkPhysicalDevice passed, of the VkInstance passed, and that instance's loader's vkGetInstanceProcAddr";

/// What a physical device offers for host memory.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostLimits {
    /// `minImportedHostPointerAlignment`, where the device offers the import extension and
    /// reports a power of two.
    pub import_alignment: Option<usize>,
    /// `maxMemoryAllocationSize` (never 0: refused).
    pub max_alloc: u64,
    /// `maxBufferSize` (Vulkan 1.3), else 0.
    pub max_buffer: u64,
}

impl HostLimits {
    /// The largest buffer: `maxMemoryAllocationSize`, and `maxBufferSize` where known.
    pub fn max_chunk(&self) -> u64 {
        match self.max_buffer {
            0 => self.max_alloc,
            b => b.min(self.max_alloc),
        }
    }
}

/// What `physical` offers for host memory, read through `instance`'s functions (the import
/// structure asked for only where `offers_import`). Refused where the device offers Vulkan
/// 1.0 only, or where the 1.1 structure came back unfilled: the loader emulates
/// `vkGetPhysicalDeviceProperties2` with Vulkan 1.0's call for an instance created below 1.1.
pub fn host_limits(
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
    offers_import: bool,
) -> Result<HostLimits> {
    let mut m3 = vk::PhysicalDeviceMaintenance3Properties::default();
    let mut m4 = vk::PhysicalDeviceMaintenance4Properties::default();
    let mut imp = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
    let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut m3);
    // SAFETY: `physical` is a device of this live instance; the chain holds only structures
    // its version knows (maintenance4 from 1.3), the import one only where offered.
    let version = unsafe { instance.get_physical_device_properties(physical) }.api_version;
    if version >= vk::API_VERSION_1_3 {
        props = props.push_next(&mut m4);
    }
    if offers_import {
        props = props.push_next(&mut imp);
    }
    // SAFETY: as above.
    unsafe { instance.get_physical_device_properties2(physical, &mut props) };
    if version < NEEDED || m3.max_memory_allocation_size == 0 {
        return Err(below_1_1(version));
    }
    let align = usize::try_from(imp.min_imported_host_pointer_alignment).ok();
    Ok(HostLimits {
        import_alignment: align.filter(|a| offers_import && a.is_power_of_two()),
        max_alloc: m3.max_memory_allocation_size,
        max_buffer: m4.max_buffer_size,
    })
}

/// The refusal of an instance or a device (offering Vulkan `device`) below Vulkan 1.1.
fn below_1_1(device: u32) -> VulkanError {
    let v = |v| format!("{}.{}", vk::api_version_major(v), vk::api_version_minor(v));
    let why = match device < NEEDED {
        true => format!("the VkPhysicalDevice offers Vulkan {} only", v(device)),
        false => "the VkInstance was created with VkApplicationInfo.apiVersion below VK_API_VERSION_1_1 (vkGetPhysicalDeviceProperties2 filled no Vulkan 1.1 structure)".into(),
    };
    VulkanError::Lacking(format!("{why}: the calls need Vulkan 1.1 or later; create the VkInstance with VkApplicationInfo.apiVersion VK_API_VERSION_1_1 or later, on a device and driver of Vulkan 1.1 or later"))
}

/// The `deviceUUID` and name of a program's `physical` device, read through its own instance's
/// functions: refused below Vulkan 1.1, where the structure would come back unfilled.
///
/// # Safety
/// `gipa` is a valid `vkGetInstanceProcAddr`; `instance` and `physical` are live handles of
/// it, `physical` of `instance`.
pub(super) unsafe fn program_device_id(
    gipa: vk::PFN_vkGetInstanceProcAddr,
    instance: vk::Instance,
    physical: vk::PhysicalDevice,
) -> Result<([u8; vk::UUID_SIZE], String)> {
    // SAFETY: the caller's contract; `name` is NUL-terminated.
    let lookup = |name: &CStr| unsafe { gipa(instance, name.as_ptr()) };
    let inst = instance_fns(instance, lookup, NEEDED, INSTANCE_FIX)?;
    // SAFETY: `physical` is a device of this live instance.
    let p = unsafe { inst.get_physical_device_properties(physical) };
    if p.api_version < NEEDED {
        return Err(below_1_1(p.api_version));
    }
    let mut id = vk::PhysicalDeviceIDProperties::default();
    let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut id);
    // SAFETY: as above; the device offers Vulkan 1.1, whose structure the chain holds.
    unsafe { inst.get_physical_device_properties2(physical, &mut props) };
    if id.device_uuid == [0; vk::UUID_SIZE] {
        // The loader emulates the 1.1 call for an instance created below 1.1, and fills
        // nothing.
        return Err(below_1_1(p.api_version));
    }
    let name = p.device_name_as_c_str().map_or_else(
        |_| "unnamed".to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    Ok((id.device_uuid, name))
}

/// Whether `physical` offers `VK_EXT_external_memory_host`.
fn offers_import(instance: &ash::Instance, physical: vk::PhysicalDevice) -> Result<bool> {
    let name = ash::ext::external_memory_host::NAME;
    // SAFETY: `physical` is a live device of `instance` (the caller's contract).
    let exts = unsafe { instance.enumerate_device_extension_properties(physical) }
        .map_err(VulkanError::call("vkEnumerateDeviceExtensionProperties"))?;
    Ok(exts.iter().any(|e| e.extension_name_as_c_str() == Ok(name)))
}

/// Why a device that `offers` the extension, whose import function is `found`, with
/// `limits`, cannot import, if it cannot; else the import alignment.
fn import_alignment(
    offers: bool,
    found: bool,
    limits: &HostLimits,
) -> std::result::Result<usize, String> {
    if !offers {
        return Err(super::NO_IMPORT.into());
    }
    if !found {
        return Err("the driver offers VK_EXT_external_memory_host but the VkDevice was created without it: add VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME to VkDeviceCreateInfo.ppEnabledExtensionNames (vkGetDeviceProcAddr gives no vkGetMemoryHostPointerPropertiesEXT)".into());
    }
    limits.import_alignment.ok_or_else(|| {
        "the driver offers VK_EXT_external_memory_host with no usable minImportedHostPointerAlignment (not a power of two)".into()
    })
}

/// A program's own device, adopted: its instance's and device's functions, the raw calls
/// over it, and its limits for host memory.
pub(super) struct Adopted {
    pub(super) instance: ash::Instance,
    pub(super) device: ash::Device,
    pub(super) raw: RawDevice,
    pub(super) limits: HostLimits,
}

/// Over a program's own device, with the functions its `vkGetInstanceProcAddr` gives:
/// refused ([`VulkanError::Lacking`]) where it does not give a core function the calls
/// need, or the instance or device is below Vulkan 1.1. Import is offered where the
/// physical device has `VK_EXT_external_memory_host` and the program enabled it on
/// `device`; else the raw device's `import` says which is missing.
///
/// # Safety
/// `gipa` is a valid `vkGetInstanceProcAddr`; `instance`, `physical` and `device` are live
/// handles of it, `physical` of `instance` and `device` made from `physical`.
pub(super) unsafe fn adopt(
    gipa: vk::PFN_vkGetInstanceProcAddr,
    instance: vk::Instance,
    physical: vk::PhysicalDevice,
    device: vk::Device,
) -> Result<Adopted> {
    // SAFETY: the caller's contract; `name` is NUL-terminated.
    let lookup = |name: &CStr| unsafe { gipa(instance, name.as_ptr()) };
    let inst = instance_fns(instance, lookup, NEEDED, INSTANCE_FIX)?;
    let offers = offers_import(&inst, physical)?;
    let limits = host_limits(&inst, physical, offers)?;
    // SAFETY: the caller's contract.
    let dev = unsafe { device_fns(&inst, device, vk::API_VERSION_1_0, DEVICE_FIX) }?;
    // SAFETY: as above.
    let host_pointer = offers.then(|| unsafe { host_pointer_fn(&inst, device) });
    let host_pointer = host_pointer.flatten();
    let import = import_alignment(offers, host_pointer.is_some(), &limits);
    let max = usize::try_from(limits.max_chunk()).unwrap_or(usize::MAX);
    // SAFETY: as above.
    let memory = unsafe { inst.get_physical_device_memory_properties(physical) };
    let raw = RawDevice::new(dev.clone(), host_pointer, memory, import, max);
    Ok(Adopted {
        instance: inst,
        device: dev,
        raw,
        limits,
    })
}
