//! Loading Vulkan (the loader at run time, an instance of API 1.2 or later) and what each
//! physical device offers: the instance → adapter half of the backend.

use super::adopt::{host_limits, HostLimits};
use super::functions::instance_fns;
use super::plan::{VkCopy, VkOptions};
use super::Result;
use super::VulkanError;
use crate::backend::adapter::{AdapterInfo, DeviceKind, Vendor};
use crate::backend::api::Unavailable;
use ash::vk;
use std::ffi::CStr;
use std::sync::Arc;

/// The API version pinstream needs: timeline semaphores are core from Vulkan 1.2.
pub(super) const NEEDED: u32 = vk::API_VERSION_1_2;

/// The loader and an instance, destroyed last (devices hold an `Arc` of it).
pub(super) struct Loaded {
    pub(super) instance: ash::Instance,
    // Kept loaded while the instance lives: dropped after `instance` is destroyed.
    _entry: ash::Entry,
}

impl Drop for Loaded {
    fn drop(&mut self) {
        // SAFETY: every device, and so every child object, holds an Arc of `self`: none is left.
        unsafe { self.instance.destroy_instance(None) };
    }
}

/// Why the loader or a driver is missing, with what to install.
fn no_loader() -> String {
    if cfg!(windows) {
        "no Vulkan loader: vulkan-1.dll was not found (it comes with the GPU driver: install or repair it)".into()
    } else {
        "no Vulkan loader: libvulkan.so.1 was not found by the dynamic loader (install libvulkan1 and a driver: the GPU vendor's, or mesa-vulkan-drivers for lavapipe on the CPU)".into()
    }
}

impl Loaded {
    /// The loader loaded and an instance made, or why not.
    fn new() -> std::result::Result<Self, String> {
        // SAFETY: loading the Vulkan loader runs its initialisers, which any process may run.
        let entry = unsafe { ash::Entry::load() }.map_err(|_| no_loader())?;
        // SAFETY: `entry` is a loaded loader.
        let version = unsafe { entry.try_enumerate_instance_version() }
            .ok()
            .flatten()
            .unwrap_or(vk::API_VERSION_1_0);
        if version < NEEDED {
            return Err(format!("the Vulkan loader offers API {}, pinstream needs 1.2 (timeline semaphores): update the loader (libvulkan1)", version_text(version)));
        }
        let app = vk::ApplicationInfo::default()
            .application_name(c"pinstream")
            .api_version(vk::API_VERSION_1_3.min(version));
        let info = vk::InstanceCreateInfo::default().application_info(&app);
        // SAFETY: `info` and what it points to live through the call.
        let instance = unsafe { entry.create_instance(&info, None) }.map_err(|e| match e {
            vk::Result::ERROR_INCOMPATIBLE_DRIVER => "the Vulkan loader found no driver (ICD): install the GPU vendor's Vulkan driver, or mesa-vulkan-drivers for lavapipe on the CPU (VK_DRIVER_FILES may name the ICD file)".to_string(),
            e => format!("vkCreateInstance failed: VK_{e:?}"),
        })?;
        let instance = checked(&entry, instance)?;
        Ok(Loaded {
            instance,
            _entry: entry,
        })
    }
}

/// `instance` (made by `entry`) with every core function of Vulkan 1.1 found, else destroyed
/// (where its destroy function was found) and refused naming the first missing.
fn checked(
    entry: &ash::Entry,
    instance: ash::Instance,
) -> std::result::Result<ash::Instance, String> {
    let (gipa, handle) = (entry.static_fn().get_instance_proc_addr, instance.handle());
    // SAFETY: a live instance of this loader; the names are NUL-terminated.
    let lookup = |name: &CStr| unsafe { gipa(handle, name.as_ptr()) };
    let fix = "update the Vulkan loader (libvulkan1) and the driver";
    instance_fns(handle, lookup, vk::API_VERSION_1_1, fix).map_err(|e| {
        if lookup(c"vkDestroyInstance").is_some() {
            // SAFETY: the instance is new: nothing was made from it.
            unsafe { instance.destroy_instance(None) };
        }
        e.to_string()
    })
}

/// `major.minor.patch` of a Vulkan version.
pub(super) fn version_text(v: u32) -> String {
    format!(
        "{}.{}.{}",
        vk::api_version_major(v),
        vk::api_version_minor(v),
        vk::api_version_patch(v)
    )
}

/// Vulkan loaded in this process.
#[derive(Clone)]
pub struct VulkanInstance {
    pub(super) loaded: Arc<Loaded>,
    /// How the devices it opens copy and pin.
    options: VkOptions,
}

impl VulkanInstance {
    /// Loads the loader and makes an instance, or says why Vulkan is not usable.
    pub fn load() -> std::result::Result<Self, Unavailable> {
        let loaded = Loaded::new().map_err(|reason| Unavailable {
            api: super::error::API_NAME,
            reason,
        })?;
        Ok(VulkanInstance {
            loaded: Arc::new(loaded),
            options: VkOptions::default(),
        })
    }

    /// The same instance, its devices (opened from now on) copying and pinning as `options`
    /// say.
    pub fn with_options(mut self, options: VkOptions) -> Self {
        self.options = options;
        self
    }

    /// The same instance, its devices (opened from now on) copying `way` (the other options
    /// kept).
    pub fn with_copy(self, way: VkCopy) -> Self {
        let options = VkOptions {
            copy: way,
            ..self.options
        };
        self.with_options(options)
    }

    /// The device of this instance that is a program's `physical` device (of the program's
    /// own `instance`, whose functions `gipa` gives), matched by `deviceUUID`: a device of
    /// pinstream's own on the program's GPU (the C library's `psVkStreamCreate`). Refused
    /// where the program's instance is below Vulkan 1.1 or no device here has that UUID.
    ///
    /// # Safety
    /// `gipa` is a valid `vkGetInstanceProcAddr`; `instance` and `physical` are live handles
    /// of it, `physical` of `instance`.
    pub unsafe fn adapter_of_program(
        &self,
        gipa: vk::PFN_vkGetInstanceProcAddr,
        instance: vk::Instance,
        physical: vk::PhysicalDevice,
    ) -> Result<VulkanAdapter> {
        // SAFETY: the caller's contract.
        let (uuid, name) = unsafe { super::adopt::program_device_id(gipa, instance, physical) }?;
        let list = self.list()?;
        let names: Vec<String> = list.iter().map(|a| a.info.name.clone()).collect();
        list.into_iter().find(|a| a.uuid == uuid).ok_or_else(|| {
            VulkanError::Lacking(format!(
                "no device of pinstream's own Vulkan instance has the deviceUUID of the VkPhysicalDevice passed ({name}); it lists {}: pass a physical device of a driver this process's Vulkan loader finds (VK_ICD_FILENAMES and VK_DRIVER_FILES limit them)",
                match names.is_empty() {
                    true => "none".to_string(),
                    false => names.join(", "),
                }
            ))
        })
    }

    /// Every physical device, in the loader's order.
    pub fn list(&self) -> Result<Vec<VulkanAdapter>> {
        let instance = &self.loaded.instance;
        // SAFETY: the instance is live.
        let physicals = unsafe { instance.enumerate_physical_devices() }
            .map_err(VulkanError::call("vkEnumeratePhysicalDevices"))?;
        physicals
            .into_iter()
            .enumerate()
            .map(|(index, physical)| {
                VulkanAdapter::new(&self.loaded, physical, index, self.options)
            })
            .collect()
    }
}

/// What a physical device offers beyond [`AdapterInfo`], for opening it.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// Its Vulkan version.
    pub api_version: u32,
    /// `VK_EXT_external_memory_host`'s `minImportedHostPointerAlignment`, where offered.
    pub import_alignment: Option<u64>,
    /// `VK_EXT_memory_budget` offered.
    pub memory_budget: bool,
    /// `maxStorageBufferRange`: the most bytes one kernel buffer may bind.
    pub max_storage_range: u64,
    /// `minStorageBufferOffsetAlignment`.
    pub min_storage_offset: u64,
    /// `maxBufferSize` (Vulkan 1.3; `maxMemoryAllocationSize` before).
    pub max_buffer: u64,
    /// `maxComputeWorkGroupCount[0..2]`.
    pub max_groups: [u32; 2],
    /// `maxComputeWorkGroupSize[0]`.
    pub max_group_size: u32,
    /// Nanoseconds per timestamp tick.
    pub timestamp_period: f32,
    /// PCI vendor id.
    pub vendor: u32,
}

/// One physical device, found but not opened.
#[derive(Clone)]
pub struct VulkanAdapter {
    pub(super) loaded: Arc<Loaded>,
    pub(super) physical: vk::PhysicalDevice,
    pub(super) info: AdapterInfo,
    pub(super) caps: Caps,
    /// How the device copies and pins once opened.
    pub(super) options: VkOptions,
    /// `deviceUUID` (`VkPhysicalDeviceIDProperties`): the same in every instance of the
    /// process, so it names the device a program's instance lists.
    pub(super) uuid: [u8; vk::UUID_SIZE],
}

/// The device extensions `physical` offers.
fn extensions(instance: &ash::Instance, physical: vk::PhysicalDevice) -> Result<Vec<String>> {
    // SAFETY: `physical` is a device of this live instance.
    let props = unsafe { instance.enumerate_device_extension_properties(physical) }
        .map_err(VulkanError::call("vkEnumerateDeviceExtensionProperties"))?;
    Ok(props
        .iter()
        .filter_map(|p| p.extension_name_as_c_str().ok())
        .map(|n| n.to_string_lossy().into_owned())
        .collect())
}

/// True when `list` holds extension `name`.
pub(super) fn offers(list: &[String], name: &CStr) -> bool {
    list.iter().any(|e| e.as_bytes() == name.to_bytes())
}

impl VulkanAdapter {
    /// What the device offers beyond its [`AdapterInfo`].
    pub fn caps(&self) -> Caps {
        self.caps
    }

    fn new(
        loaded: &Arc<Loaded>,
        physical: vk::PhysicalDevice,
        index: usize,
        options: VkOptions,
    ) -> Result<Self> {
        let instance = &loaded.instance;
        let exts = extensions(instance, physical)?;
        let host = offers(&exts, ash::ext::external_memory_host::NAME);
        let pci = offers(&exts, ash::ext::pci_bus_info::NAME);
        let mut drv = vk::PhysicalDeviceDriverProperties::default();
        let mut id = vk::PhysicalDeviceIDProperties::default();
        let mut bus = vk::PhysicalDevicePCIBusInfoPropertiesEXT::default();
        let mut props = vk::PhysicalDeviceProperties2::default()
            .push_next(&mut drv)
            .push_next(&mut id);
        if pci {
            props = props.push_next(&mut bus);
        }
        // SAFETY: `physical` is a device of this live instance; the chain holds the driver
        // properties (core 1.2), the IDs (core 1.1) and the PCI ones only where offered.
        unsafe { instance.get_physical_device_properties2(physical, &mut props) };
        let p = props.properties;
        // SAFETY: as above.
        let mem = unsafe { instance.get_physical_device_memory_properties(physical) };
        // A device of Vulkan 1.0 is listed with no limits: `device::open` refuses it.
        let host_mem = host_limits(instance, physical, host).unwrap_or_default();
        let (max_alloc, caps) = (host_mem.max_alloc, caps_of(&p, &host_mem, &exts));
        let info = AdapterInfo {
            api: super::error::API_NAME,
            index,
            name: c_text(p.device_name_as_c_str()),
            driver: c_text(drv.driver_name_as_c_str()),
            pci_address: pci.then(|| {
                format!(
                    "{:04x}:{:02x}:{:02x}.{:x}",
                    bus.pci_domain, bus.pci_bus, bus.pci_device, bus.pci_function
                )
            }),
            memory: device_memory(&mem),
            max_alloc,
            kind: kind_of(p.device_type),
            vendor: vendor_of(p.vendor_id, drv.driver_id),
        };
        Ok(VulkanAdapter {
            loaded: loaded.clone(),
            physical,
            info,
            caps,
            options,
            uuid: id.device_uuid,
        })
    }
}

/// What a device of type `t` is.
fn kind_of(t: vk::PhysicalDeviceType) -> DeviceKind {
    match t {
        vk::PhysicalDeviceType::CPU => DeviceKind::Cpu,
        vk::PhysicalDeviceType::OTHER => DeviceKind::Other,
        _ => DeviceKind::Gpu,
    }
}

/// What a program's `physical` device (of `instance`, whose limits are `host_mem`) is and
/// offers, as far as Vulkan 1.0's queries tell (the program's instance may be 1.1: its driver
/// is not asked, nor its extensions beyond the import, which `import` gives where the program
/// enabled it on its device).
pub(super) fn adopted_info(
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
    host_mem: &HostLimits,
    import: Option<usize>,
) -> (AdapterInfo, Caps) {
    // SAFETY: `physical` is a live device of this instance (the adopter's contract).
    let p = unsafe { instance.get_physical_device_properties(physical) };
    // SAFETY: as above.
    let mem = unsafe { instance.get_physical_device_memory_properties(physical) };
    let mut caps = caps_of(&p, host_mem, &[]);
    caps.import_alignment = import.map(|a| a as u64);
    let info = AdapterInfo {
        api: super::error::API_NAME,
        index: 0,
        name: c_text(p.device_name_as_c_str()),
        driver: String::new(),
        pci_address: None,
        memory: device_memory(&mem),
        max_alloc: host_mem.max_alloc,
        kind: kind_of(p.device_type),
        vendor: vendor_of(p.vendor_id, vk::DriverId::default()),
    };
    (info, caps)
}

/// What a device with properties `p`, host-memory limits `host_mem` and extensions `exts`
/// offers beyond its [`AdapterInfo`].
fn caps_of(p: &vk::PhysicalDeviceProperties, host_mem: &HostLimits, exts: &[String]) -> Caps {
    let limits = p.limits;
    Caps {
        api_version: p.api_version,
        import_alignment: host_mem.import_alignment.map(|a| a as u64),
        memory_budget: offers(exts, ash::ext::memory_budget::NAME),
        max_storage_range: u64::from(limits.max_storage_buffer_range),
        min_storage_offset: limits.min_storage_buffer_offset_alignment,
        max_buffer: if host_mem.max_buffer > 0 {
            host_mem.max_buffer
        } else {
            host_mem.max_alloc
        },
        max_groups: [
            limits.max_compute_work_group_count[0],
            limits.max_compute_work_group_count[1],
        ],
        max_group_size: limits.max_compute_work_group_size[0],
        timestamp_period: limits.timestamp_period,
        vendor: p.vendor_id,
    }
}

/// A C string field as text (empty where it is malformed).
fn c_text(s: std::result::Result<&CStr, std::ffi::FromBytesUntilNulError>) -> String {
    s.map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The size of the device-local heaps (all heaps where none is device-local).
fn device_memory(mem: &vk::PhysicalDeviceMemoryProperties) -> u64 {
    let heaps = heaps(mem);
    let sum = |local: bool| {
        let of =
            |h: &&vk::MemoryHeap| !local || h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL);
        heaps
            .iter()
            .filter(of)
            .fold(0u64, |n, h| n.saturating_add(h.size))
    };
    match sum(true) {
        0 => sum(false),
        local => local,
    }
}

/// The heaps `mem` lists (at most `VK_MAX_MEMORY_HEAPS`, whatever count the driver says).
pub(super) fn heaps(mem: &vk::PhysicalDeviceMemoryProperties) -> &[vk::MemoryHeap] {
    let count = usize::try_from(mem.memory_heap_count).unwrap_or(usize::MAX);
    &mem.memory_heaps[..count.min(vk::MAX_MEMORY_HEAPS)]
}

/// Who makes a Vulkan device's driver, by the device's PCI vendor id
/// (`VkPhysicalDeviceProperties::vendorID`: NVIDIA 0x10de, AMD 0x1002, Intel 0x8086) and the
/// driver's id: an NVIDIA GPU is `Nvidia` only under NVIDIA's own driver (Mesa's NVK drives
/// the same GPU, and CUDA cannot sit beside it); Mesa's software devices, lavapipe among
/// them, say 0x10005, and are `Other`.
fn vendor_of(id: u32, driver: vk::DriverId) -> Vendor {
    match id {
        0x10de if driver == vk::DriverId::NVIDIA_PROPRIETARY => Vendor::Nvidia,
        0x1002 => Vendor::Amd,
        0x8086 => Vendor::Intel,
        _ => Vendor::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_memory_reads_at_most_the_heaps_there_are_and_never_overflows() {
        let mut mem = vk::PhysicalDeviceMemoryProperties {
            memory_heap_count: 99,
            ..Default::default()
        };
        mem.memory_heaps[0].size = u64::MAX;
        mem.memory_heaps[1].size = 5;
        assert_eq!(device_memory(&mem), u64::MAX);
        mem.memory_heaps[1].flags = vk::MemoryHeapFlags::DEVICE_LOCAL;
        assert_eq!(device_memory(&mem), 5);
        assert_eq!(heaps(&mem).len(), vk::MAX_MEMORY_HEAPS);
    }

    /// NVIDIA's GPUs are NVIDIA's only under NVIDIA's driver; lavapipe (Mesa's vendor id) is
    /// no vendor's GPU.
    #[test]
    fn a_vendor_is_its_pci_id_and_nvidias_needs_nvidias_driver() {
        use vk::DriverId as D;
        assert_eq!(vendor_of(0x10de, D::NVIDIA_PROPRIETARY), Vendor::Nvidia);
        assert_eq!(vendor_of(0x10de, D::MESA_NVK), Vendor::Other);
        assert_eq!(vendor_of(0x1002, D::AMD_PROPRIETARY), Vendor::Amd);
        assert_eq!(vendor_of(0x8086, D::INTEL_OPEN_SOURCE_MESA), Vendor::Intel);
        assert_eq!(vendor_of(0x10005, D::MESA_LLVMPIPE), Vendor::Other);
    }
}
