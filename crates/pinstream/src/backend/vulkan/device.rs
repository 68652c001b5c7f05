//! An opened device: the `VkDevice` with its compute queues, the memory it allocates
//! ([`VulkanBuffer`]), and the host memory registered with it ([`Registry`]), which copies
//! from and into a `HostSpan` find their `VkBuffer` in.

use super::instance::{Caps, Loaded, VulkanAdapter};
use super::{Result, VulkanError};
use crate::backend::adapter::AdapterInfo;
use ash::vk;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// How many queues of the compute family pinstream asks for (its rings use three lanes).
const QUEUES: u32 = 4;

/// What every object of one device shares; the `VkDevice` is destroyed when the last
/// object of it is dropped.
pub(super) struct Shared {
    pub(super) device: ash::Device,
    pub(super) info: AdapterInfo,
    pub(super) caps: Caps,
    pub(super) memory: vk::PhysicalDeviceMemoryProperties,
    pub(super) family: u32,
    /// `timestampValidBits` of the family (0: no timestamps).
    pub(super) timestamp_bits: u32,
    /// The family's queues: submitting to one is externally synchronized.
    pub(super) queues: Vec<Mutex<vk::Queue>>,
    next_queue: AtomicUsize,
    pub(super) host_ext: Option<ash::ext::external_memory_host::Device>,
    pub(super) registry: Registry,
    physical: vk::PhysicalDevice,
    // Dropped after the device is destroyed.
    loaded: Arc<Loaded>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: every object of the device holds an Arc of `self`, so none is left; waiting
        // first lets commands the driver still runs finish.
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device.destroy_device(None);
        }
    }
}

/// Locks `m`, whatever a panicking holder left (the data is plain handles).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// The next of the family's queues, in turn.
    pub(super) fn pick_queue(&self) -> usize {
        self.next_queue.fetch_add(1, Ordering::Relaxed) % self.queues.len()
    }

    /// A memory type among `bits` with every flag of `need`, the one with most of `prefer`
    /// and fewest of `avoid`.
    pub(super) fn memory_type(
        &self,
        bits: u32,
        need: vk::MemoryPropertyFlags,
        prefer: vk::MemoryPropertyFlags,
        avoid: vk::MemoryPropertyFlags,
    ) -> Option<u32> {
        let types = &self.memory.memory_types[..self.memory.memory_type_count as usize];
        let score = |f: vk::MemoryPropertyFlags| {
            (f & prefer).as_raw().count_ones() as i32 - (f & avoid).as_raw().count_ones() as i32
        };
        (0..types.len() as u32)
            .filter(|i| bits & (1 << i) != 0)
            .filter(|&i| types[i as usize].property_flags.contains(need))
            .max_by_key(|&i| (score(types[i as usize].property_flags), -(i as i32)))
    }
}

impl Shared {
    /// This process's use of the device-local heaps (`VK_EXT_memory_budget`), where offered.
    pub(super) fn budget_used(&self) -> Option<u64> {
        if !self.caps.memory_budget {
            return None;
        }
        let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
        let mut props = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
        // SAFETY: the physical device is live (the instance outlives `self`) and offers the
        // extension; the chain holds valid out-structures.
        unsafe {
            self.loaded
                .instance
                .get_physical_device_memory_properties2(self.physical, &mut props)
        };
        let mem = props.memory_properties;
        let heaps = &mem.memory_heaps[..mem.memory_heap_count as usize];
        let local = heaps.iter().enumerate();
        let local = local.filter(|(_, h)| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL));
        Some(local.map(|(i, _)| budget.heap_usage[i]).sum())
    }
}

/// The compute queue family: the first family with compute (on NVIDIA the universal one,
/// which copied fastest: docs/gpu-facts.md).
fn compute_family(
    loaded: &Loaded,
    physical: vk::PhysicalDevice,
) -> Option<(u32, vk::QueueFamilyProperties)> {
    // SAFETY: `physical` is a device of this live instance.
    let families = unsafe {
        loaded
            .instance
            .get_physical_device_queue_family_properties(physical)
    };
    families
        .into_iter()
        .enumerate()
        .find(|(_, f)| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
        .map(|(i, f)| (i as u32, f))
}

/// Opens `adapter`: a device with timeline semaphores, its compute queues, and host memory
/// import where the driver offers it.
pub(super) fn open(adapter: &VulkanAdapter) -> Result<Shared> {
    let loaded = &adapter.loaded;
    if adapter.caps.api_version < super::instance::NEEDED {
        return Err(VulkanError::Unavailable(format!(
            "device {} offers Vulkan {}, pinstream needs 1.2 (timeline semaphores): update its driver",
            adapter.info.label(),
            super::instance::version_text(adapter.caps.api_version)
        )));
    }
    let (family, props) = compute_family(loaded, adapter.physical).ok_or_else(|| {
        VulkanError::Unavailable(format!(
            "device {} has no compute queue",
            adapter.info.label()
        ))
    })?;
    let count = props.queue_count.min(QUEUES);
    let priorities = vec![1.0f32; count as usize];
    let queue_info = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(family)
        .queue_priorities(&priorities)];
    let mut names = Vec::new();
    if adapter.caps.import_alignment.is_some() {
        names.push(ash::ext::external_memory_host::NAME.as_ptr());
    }
    if adapter.caps.memory_budget {
        names.push(ash::ext::memory_budget::NAME.as_ptr());
    }
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
    let info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queue_info)
        .enabled_extension_names(&names)
        .push_next(&mut v12);
    let instance = &loaded.instance;
    // SAFETY: `info` and what it points to live through the call; `physical` is live.
    let device = unsafe { instance.create_device(adapter.physical, &info, None) }
        .map_err(VulkanError::call("vkCreateDevice"))?;
    let queues = (0..count)
        // SAFETY: the family and index were asked for at creation.
        .map(|i| Mutex::new(unsafe { device.get_device_queue(family, i) }))
        .collect();
    let host_ext = adapter
        .caps
        .import_alignment
        .map(|_| ash::ext::external_memory_host::Device::new(instance, &device));
    // SAFETY: as above.
    let memory = unsafe { instance.get_physical_device_memory_properties(adapter.physical) };
    Ok(Shared {
        device,
        info: adapter.info.clone(),
        caps: adapter.caps,
        memory,
        family,
        timestamp_bits: props.timestamp_valid_bits,
        queues,
        next_queue: AtomicUsize::new(0),
        host_ext,
        registry: Registry::default(),
        physical: adapter.physical,
        loaded: loaded.clone(),
    })
}

/// A `VkBuffer` bound to memory of its own, which it frees on drop; mapped where the
/// memory is host-visible and was mapped.
pub struct VulkanBuffer {
    pub(super) shared: Arc<Shared>,
    pub(super) buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    /// Bytes the caller asked for.
    pub(super) size: u64,
    /// The host address of the mapped memory, or null.
    pub(super) mapped: *mut u8,
}

// SAFETY: the handles are plain values the driver lets any thread use; `mapped` is only
// written through by commands the owner orders, never through a Rust reference here.
unsafe impl Send for VulkanBuffer {}
// SAFETY: as above.
unsafe impl Sync for VulkanBuffer {}

impl Drop for VulkanBuffer {
    fn drop(&mut self) {
        // SAFETY: the owner keeps the buffer alive until every command using it completed
        // (the Queue contract); freeing the memory unmaps it.
        unsafe {
            self.shared.device.destroy_buffer(self.buffer, None);
            self.shared.device.free_memory(self.memory, None);
        }
    }
}

/// Where a buffer's memory comes from.
pub(super) enum Backing {
    /// Device-local memory.
    Device,
    /// The driver's host-visible memory, mapped.
    HostVisible,
    /// Host pages imported at this address (`VK_EXT_external_memory_host`).
    Import(*mut u8),
}

/// Buffer usage for every pinstream buffer: copies both ways and kernel storage.
fn usage() -> vk::BufferUsageFlags {
    vk::BufferUsageFlags::TRANSFER_SRC
        | vk::BufferUsageFlags::TRANSFER_DST
        | vk::BufferUsageFlags::STORAGE_BUFFER
}

impl VulkanBuffer {
    /// `bytes` (rounded up to 4, at least 4) of memory from `backing` on `shared`'s device.
    pub(super) fn new(shared: &Arc<Shared>, bytes: usize, backing: Backing) -> Result<Self> {
        let size = (bytes.max(4) as u64).div_ceil(4) * 4;
        let import = matches!(backing, Backing::Import(_));
        let mut ext = vk::ExternalMemoryBufferCreateInfo::default()
            .handle_types(vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT);
        let mut info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(usage())
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        if import {
            info = info.push_next(&mut ext);
        }
        let d = &shared.device;
        // SAFETY: `info` lives through the call; the device is live.
        let buffer =
            unsafe { d.create_buffer(&info, None) }.map_err(VulkanError::call("vkCreateBuffer"))?;
        let mut b = VulkanBuffer {
            shared: shared.clone(),
            buffer,
            memory: vk::DeviceMemory::null(),
            size: bytes as u64,
            mapped: std::ptr::null_mut(),
        };
        b.bind(backing, size)?;
        Ok(b)
    }

    /// Allocates (or imports) memory for the buffer and binds it; dropping `self` on failure
    /// frees what was made.
    fn bind(&mut self, backing: Backing, size: u64) -> Result<()> {
        let shared = self.shared.clone();
        let d = &shared.device;
        // SAFETY: the buffer is live.
        let req = unsafe { d.get_buffer_memory_requirements(self.buffer) };
        use vk::MemoryPropertyFlags as F;
        let none = F::empty();
        let (bits, need, prefer, avoid) = match backing {
            Backing::Device => (req.memory_type_bits, F::DEVICE_LOCAL, none, F::HOST_VISIBLE),
            // Not DEVICE_LOCAL where there is a choice: that is the BAR, VRAM.
            Backing::HostVisible => (
                req.memory_type_bits,
                F::HOST_VISIBLE | F::HOST_COHERENT,
                F::HOST_CACHED,
                F::DEVICE_LOCAL,
            ),
            Backing::Import(ptr) => (
                req.memory_type_bits & host_pointer_types(&shared, ptr, size)?,
                none,
                F::HOST_COHERENT,
                none,
            ),
        };
        let index = shared
            .memory_type(bits, need, prefer, avoid)
            .or_else(|| shared.memory_type(bits, none, none, none))
            .ok_or_else(|| {
                VulkanError::misuse(
                    "vkAllocateMemory",
                    "the device has no memory type for this buffer",
                )
            })?;
        let mut host = vk::ImportMemoryHostPointerInfoEXT::default()
            .handle_type(vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT);
        let mut info = vk::MemoryAllocateInfo::default()
            .allocation_size(if matches!(backing, Backing::Import(_)) {
                size
            } else {
                req.size
            })
            .memory_type_index(index);
        if let Backing::Import(ptr) = backing {
            host = host.host_pointer(ptr.cast());
            info = info.push_next(&mut host);
        }
        // SAFETY: `info` lives through the call; an imported pointer is page memory the
        // caller keeps mapped for the buffer's life (`Backing::Import`'s contract).
        self.memory =
            unsafe { d.allocate_memory(&info, None) }.map_err(|result| match backing {
                Backing::Import(ptr) => VulkanError::Import {
                    call: "vkAllocateMemory",
                    result,
                    bytes: size as usize,
                    address: ptr as usize,
                },
                _ => VulkanError::Call {
                    call: "vkAllocateMemory",
                    result,
                },
            })?;
        // SAFETY: buffer and memory are live and unbound; offset 0 satisfies any alignment.
        unsafe { d.bind_buffer_memory(self.buffer, self.memory, 0) }
            .map_err(VulkanError::call("vkBindBufferMemory"))?;
        if matches!(backing, Backing::HostVisible) {
            // SAFETY: the memory is host-visible, unmapped, and lives as long as `self`.
            let p = unsafe {
                d.map_memory(self.memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
            }
            .map_err(VulkanError::call("vkMapMemory"))?;
            self.mapped = p.cast();
        }
        Ok(())
    }
}

/// The memory types the driver can import host pages at `ptr` as.
fn host_pointer_types(shared: &Shared, ptr: *mut u8, size: u64) -> Result<u32> {
    let ext = shared.host_ext.as_ref().ok_or_else(|| {
        VulkanError::misuse(
            "import",
            "the driver does not offer VK_EXT_external_memory_host: pin with `host-visible`",
        )
    })?;
    let mut props = vk::MemoryHostPointerPropertiesEXT::default();
    // SAFETY: the function was loaded for this device; `props` is a valid out-structure.
    let r = unsafe {
        (ext.fp().get_memory_host_pointer_properties_ext)(
            shared.device.handle(),
            vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT,
            ptr.cast(),
            &mut props,
        )
    };
    match r {
        vk::Result::SUCCESS => Ok(props.memory_type_bits),
        result => Err(VulkanError::Import {
            call: "vkGetMemoryHostPointerPropertiesEXT",
            result,
            bytes: size as usize,
            address: ptr as usize,
        }),
    }
}

/// One registered range of host memory and the buffer over it.
#[derive(Debug, Clone, Copy)]
struct Registered {
    start: usize,
    len: usize,
    buffer: vk::Buffer,
}

/// The host memory pinned with a device, by address: a copy from or into a `HostSpan`
/// finds the buffer(s) over it here.
#[derive(Debug, Default)]
pub(super) struct Registry(Mutex<Vec<Registered>>);

/// A piece of a host span inside one registered buffer: the buffer, the offset in it, the
/// length, and the offset in the span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Piece {
    pub(super) buffer: vk::Buffer,
    pub(super) offset: u64,
    pub(super) len: u64,
    pub(super) at: u64,
}

impl Registry {
    /// Registers `len` bytes at `start` as `buffer`'s memory.
    pub(super) fn add(&self, start: *mut u8, len: usize, buffer: vk::Buffer) {
        lock(&self.0).push(Registered {
            start: start as usize,
            len,
            buffer,
        });
    }

    /// Forgets `buffer`.
    pub(super) fn remove(&self, buffer: vk::Buffer) {
        lock(&self.0).retain(|r| r.buffer != buffer);
    }

    /// The registered buffers covering `len` bytes at `start`, in order, or `None` where a
    /// byte of it is not registered.
    pub(super) fn find(&self, start: *const u8, len: usize) -> Option<Vec<Piece>> {
        let list = lock(&self.0);
        let (mut at, end, mut pieces) = (start as usize, start as usize + len, Vec::new());
        while at < end {
            let r = list
                .iter()
                .find(|r| r.start <= at && at < r.start + r.len)?;
            let take = (r.start + r.len).min(end) - at;
            pieces.push(Piece {
                buffer: r.buffer,
                offset: (at - r.start) as u64,
                len: take as u64,
                at: (at - start as usize) as u64,
            });
            at += take;
        }
        Some(pieces)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ash::vk::Handle;

    #[test]
    fn a_span_across_two_registrations_is_two_pieces() {
        let r = Registry::default();
        let (a, b) = (vk::Buffer::from_raw(1), vk::Buffer::from_raw(2));
        r.add(0x1000 as *mut u8, 0x1000, a);
        r.add(0x2000 as *mut u8, 0x1000, b);
        let p = r.find(0x1800 as *const u8, 0x1000).unwrap();
        assert_eq!(
            p,
            vec![
                Piece {
                    buffer: a,
                    offset: 0x800,
                    len: 0x800,
                    at: 0
                },
                Piece {
                    buffer: b,
                    offset: 0,
                    len: 0x800,
                    at: 0x800
                },
            ]
        );
        assert!(
            r.find(0x2800 as *const u8, 0x1000).is_none(),
            "past the end"
        );
        r.remove(a);
        assert!(r.find(0x1800 as *const u8, 1).is_none());
    }
}
