//! A Vulkan program's own objects, made with plain Vulkan calls (through ash, the loader
//! loaded at run time) as a C program makes them: an instance of a chosen API version, its
//! first physical device (lavapipe in CI), and devices with or without
//! `VK_EXT_external_memory_host`. [`fake`] is a `vkGetInstanceProcAddr` over the loader's
//! that hides functions or counts the objects made.
#![allow(dead_code)]

pub mod fake;

use ash::vk;
use pinstream_capi::PFN_vkGetInstanceProcAddr;

/// An instance and its first physical device, destroyed on drop.
pub struct Vk {
    pub instance: ash::Instance,
    pub physical: vk::PhysicalDevice,
    /// The loader's `vkGetInstanceProcAddr`.
    pub gipa: vk::PFN_vkGetInstanceProcAddr,
    // Kept loaded while the instance lives.
    _entry: ash::Entry,
}

/// A device of [`Vk`]'s physical device, destroyed on drop.
pub struct Device {
    pub device: ash::Device,
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: nothing of the device is left (the tests free every range first).
        unsafe { self.device.destroy_device(None) };
    }
}

impl Drop for Vk {
    fn drop(&mut self) {
        // SAFETY: the devices made from it are dropped first (they borrow it).
        unsafe { self.instance.destroy_instance(None) };
    }
}

impl Vk {
    /// An instance of `api_version` (`vk::API_VERSION_1_0`, ...).
    pub fn new(api_version: u32) -> Vk {
        // SAFETY: loading the loader runs its initialisers, which any process may run.
        let entry = unsafe { ash::Entry::load() }
            .expect("the Vulkan loader: apt-get install libvulkan1 mesa-vulkan-drivers");
        let app = vk::ApplicationInfo::default()
            .application_name(c"pinstream-capi tests")
            .api_version(api_version);
        let info = vk::InstanceCreateInfo::default().application_info(&app);
        // SAFETY: `info` lives through the call.
        let instance = unsafe { entry.create_instance(&info, None) }.expect("vkCreateInstance");
        // SAFETY: a live instance.
        let physical = unsafe { instance.enumerate_physical_devices() }
            .expect("vkEnumeratePhysicalDevices")
            .first()
            .copied()
            .expect("a Vulkan device: apt-get install mesa-vulkan-drivers");
        Vk {
            gipa: entry.static_fn().get_instance_proc_addr,
            instance,
            physical,
            _entry: entry,
        }
    }

    /// A device with one queue of family 0, with `VK_EXT_external_memory_host` enabled
    /// where `import`.
    pub fn device(&self, import: bool) -> Device {
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(0)
            .queue_priorities(&priorities)];
        let ext = [ash::ext::external_memory_host::NAME.as_ptr()];
        let names: &[_] = if import { &ext } else { &[] };
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(names);
        // SAFETY: `info` lives through the call; the physical device is live.
        let device = unsafe { self.instance.create_device(self.physical, &info, None) }
            .expect("vkCreateDevice");
        Device { device }
    }

    /// `maxMemoryAllocationSize` (an instance of 1.1 or later).
    pub fn max_alloc(&self) -> u64 {
        let mut m3 = vk::PhysicalDeviceMaintenance3Properties::default();
        let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut m3);
        // SAFETY: a live physical device; the chain is a 1.1 structure.
        unsafe {
            self.instance
                .get_physical_device_properties2(self.physical, &mut props)
        };
        m3.max_memory_allocation_size
    }

    /// The handles a `psVkHost*` call takes for `device`, with `gipa`.
    pub fn args(&self, device: &Device, gipa: vk::PFN_vkGetInstanceProcAddr) -> Handles {
        Handles {
            instance: self.instance.handle(),
            physical: self.physical,
            device: device.device.handle(),
            gipa: Some(gipa),
        }
    }
}

/// The first four arguments of `psVkHostAlloc` and `psVkHostRegister`.
#[derive(Clone, Copy)]
pub struct Handles {
    pub instance: vk::Instance,
    pub physical: vk::PhysicalDevice,
    pub device: vk::Device,
    pub gipa: PFN_vkGetInstanceProcAddr,
}

/// This thread's `psGetLastErrorDetail`.
pub fn detail() -> String {
    // SAFETY: this thread's NUL-terminated detail, read before another call.
    unsafe { std::ffi::CStr::from_ptr(pinstream_capi::psGetLastErrorDetail()) }
        .to_string_lossy()
        .into_owned()
}

/// Addresses that `psHostRegister` refuses as not pinnable, mapped for the process's life.
pub struct HostilePages {
    /// A page whose next page is unmapped, and stays so: it lies far below where the kernel
    /// places mappings (top-down from the stack), so no other thread's mapping fills the hole.
    pub hole: usize,
    /// The start of three pages whose middle one has no access (`PROT_NONE`): stays so.
    pub no_access: usize,
    /// A read-only page.
    pub read_only: usize,
}

/// A fresh private anonymous mapping of `len` bytes with `prot` at `at` (where nothing is
/// mapped yet), or where the kernel picks; `None` where `at` is taken. Kept for the process.
fn map_at(at: usize, len: usize, prot: libc::c_int) -> Option<usize> {
    let fixed = if at == 0 {
        0
    } else {
        libc::MAP_FIXED_NOREPLACE
    };
    // SAFETY: a new mapping; MAP_FIXED_NOREPLACE never replaces one.
    let m = unsafe {
        libc::mmap(
            at as *mut libc::c_void,
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | fixed,
            -1,
            0,
        )
    };
    (m != libc::MAP_FAILED).then_some(m as usize)
}

/// As [`map_at`], where the kernel picks.
fn map(len: usize, prot: libc::c_int) -> usize {
    map_at(0, len, prot).expect("mmap")
}

/// A fresh [`HostilePages`].
pub fn hostile_pages() -> HostilePages {
    let page = 4096;
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let no_access = map(3 * page, rw);
    // SAFETY: the middle page of the mapping made above.
    let none = unsafe { libc::mprotect((no_access + page) as *mut libc::c_void, page, 0) };
    assert_eq!(none, 0);
    let read_only = map(page, libc::PROT_READ);
    // Two free pages at a low address (64 GiB steps), the second one unmapped again.
    let hole = (1..64)
        .find_map(|n: usize| map_at(n << 36, 2 * page, rw))
        .expect("two free pages at a low address");
    // SAFETY: the second page of the mapping made above.
    let gone = unsafe { libc::munmap((hole + page) as *mut libc::c_void, page) };
    assert_eq!(gone, 0);
    HostilePages {
        hole,
        no_access,
        read_only,
    }
}
