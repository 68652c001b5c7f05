//! An opened device: the `VkDevice` with its compute and side queues, the memory it allocates
//! ([`VulkanBuffer`]), and the host memory registered with it ([`Registry`]), which copies
//! from and into a `HostSpan` find their `VkBuffer` in.

use super::functions::{device_fns, host_pointer_fn};
use super::instance::{Caps, Loaded, VulkanAdapter};
use super::plan::{self, Family, Hw, Role, VkCopy};
pub(super) use super::raw::Backing;
use super::raw::{RawBuffer, RawDevice};
use super::{Result, VulkanError};
use crate::backend::adapter::AdapterInfo;
use crate::sync::lock;
use ash::vk;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub(super) use super::registry::{Piece, Registry};

/// How many queues of the compute family pinstream asks for (its rings use three lanes).
const QUEUES: u32 = 4;
/// How many of the side family (the transfer-only one: one for uploads, one for downloads).
const SIDE_QUEUES: u32 = 2;

/// What every object of one device shares; a device pinstream made is destroyed when the
/// last object of it is dropped, a program's adopted one never ([`Owner`]).
pub(super) struct Shared {
    pub(super) device: ash::Device,
    pub(super) info: AdapterInfo,
    pub(super) caps: Caps,
    /// The device's buffers and host imports.
    pub(super) raw: RawDevice,
    /// The compute family (kernels; copies unless `copy` routes them elsewhere).
    pub(super) compute: Family,
    /// The side family, where the device has one: the transfer-only family, or, copying
    /// [`VkCopy::Crossed`], the compute-only one ([`plan::pick_families`]).
    pub(super) side: Option<Family>,
    /// How uploads and downloads are done.
    pub(super) copy: VkCopy,
    /// The last copy of each direction, for [`VkCopy::Auto`]'s routing.
    pub(super) traffic: plan::Traffic,
    /// Imported host memory asks for 2 MiB pages ([`super::plan::VkOptions::huge_pages`]).
    pub(super) huge_pages: bool,
    /// Commands are timed by the host's clock: a family in use writes no timestamps.
    pub(super) host_clock: bool,
    /// The origin of host times.
    pub(super) epoch: std::time::Instant,
    next_queue: AtomicUsize,
    /// Timeline semaphores no queue or event holds, destroyed after the device is idle
    /// ([`Self::retire`]).
    retired: Mutex<Vec<vk::Semaphore>>,
    pub(super) registry: Registry,
    pub(super) physical: vk::PhysicalDevice,
    /// Who made the device, and the instance's functions. Dropped after the device is
    /// destroyed.
    pub(super) owner: Owner,
}

/// Who made a device.
pub(super) enum Owner {
    /// pinstream, through its own loader and instance ([`super::instance::VulkanInstance`]):
    /// it destroys the device.
    Pinstream(Arc<Loaded>),
    /// A program, whose `VkInstance` and `VkDevice` pinstream adopted for host memory
    /// ([`super::VulkanDevice::from_program`]): never waited on nor destroyed here.
    Program(ash::Instance),
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Owner::Program(_) = self.owner {
            // The program's device: it waits and destroys it; an adopted device has no
            // queues of pinstream's, so no semaphore was made.
            return;
        }
        // SAFETY: every object of the device holds an Arc of `self`, so none is left; waiting
        // first lets commands the driver still runs finish, and the retired semaphores go
        // once nothing can use them.
        unsafe {
            let _ = self.device.device_wait_idle();
            for s in std::mem::take(&mut *lock(&self.retired)) {
                self.device.destroy_semaphore(s, None);
            }
            self.device.destroy_device(None);
        }
    }
}

impl Shared {
    /// True for a program's device adopted for host memory ([`Owner::Program`]).
    pub(super) fn adopted(&self) -> bool {
        matches!(self.owner, Owner::Program(_))
    }

    /// Refuses `call` on a program's adopted device, which has no queues of pinstream's to
    /// run it on.
    pub(super) fn has_queues(&self, call: &'static str) -> Result<()> {
        match self.adopted() {
            true => Err(VulkanError::misuse(call, "a program's VkDevice adopted for host memory has no queues of pinstream's: open a device through pinstream's own instance to stream or copy")),
            false => Ok(()),
        }
    }

    /// The instance's functions.
    pub(super) fn instance(&self) -> &ash::Instance {
        match &self.owner {
            Owner::Pinstream(loaded) => &loaded.instance,
            Owner::Program(instance) => instance,
        }
    }

    /// Keeps `semaphore`, which no queue or event holds any more, for the next queue to take
    /// ([`Self::reuse`]) and destroys it only with the device, after it is idle. Seeing a
    /// batch's signal on the host is not enough to destroy the semaphores it waited on or
    /// signalled: lavapipe (Mesa 22.3, Debian 12) still releases their timeline points after
    /// the signal, and a semaphore destroyed then left its queue thread blocked on the freed
    /// lock, so that vkDeviceWaitIdle and vkDestroyDevice hung (5 of about 75 runs of
    /// tests/vulkan_copy.rs's in-place test). Reused, the kept semaphores number two per queue
    /// alive at once, however many queues come and go.
    pub(super) fn retire(&self, semaphore: vk::Semaphore) {
        lock(&self.retired).push(semaphore);
    }

    /// A semaphore a dropped queue gave back, if any: its queue waited for its commands, so
    /// its value is final, and a new queue signals on from there.
    pub(super) fn reuse(&self) -> Option<vk::Semaphore> {
        lock(&self.retired).pop()
    }

    /// The next of the compute family's queues for a lane, in turn ([`plan::lane_queue`]).
    pub(super) fn pick_queue(&self) -> usize {
        let n = self.next_queue.fetch_add(1, Ordering::Relaxed);
        plan::lane_queue(self.copy, n, self.compute.queues.len())
    }

    /// The family of hardware queue `hw`.
    pub(super) fn family(&self, hw: Hw) -> &Family {
        match (&self.side, hw.side) {
            (Some(t), true) => t,
            _ => &self.compute,
        }
    }

    /// Blocks until every hardware queue of the device is idle: `vkQueueWaitIdle` on each,
    /// in a fixed order (the compute family's, then the side family's), each under its
    /// own lock. Not `vkDeviceWaitIdle`: it needs every queue of the device externally
    /// synchronized, while other threads submit holding only their queue's lock (the spec
    /// makes it the same as `vkQueueWaitIdle` on every queue). What was submitted to any
    /// queue before the call has completed when it returns. The first failure (a lost
    /// device), after waiting on every queue.
    pub(super) fn wait_idle(&self) -> Result<()> {
        let families = std::iter::once(&self.compute).chain(&self.side);
        let mut first = Ok(());
        for queue in families.flat_map(|f| &f.queues) {
            let queue = lock(queue);
            // SAFETY: the queue is locked (external synchronization).
            let waited = unsafe { self.device.queue_wait_idle(*queue) };
            if let (Err(result), Ok(())) = (waited, &first) {
                first = Err(VulkanError::Call {
                    call: "vkQueueWaitIdle",
                    result,
                });
            }
        }
        first
    }

    /// The hardware queue(s) a command of `role` from a lane on compute queue `slot` runs on,
    /// now ([`VkCopy::Auto`] reads what is in flight).
    pub(super) fn route(&self, role: Role, slot: usize) -> Vec<Hw> {
        self.route_as(role, slot, self.copy == VkCopy::Auto && self.crossing(role))
    }

    /// [`Self::route`] as for a copy with nothing of the other direction in flight: where a
    /// queue is chosen once for many copies (a `Submitter`'s, whose copies go one direction at
    /// a time), and for the copy way's description.
    pub(super) fn route_alone(&self, role: Role, slot: usize) -> Vec<Hw> {
        self.route_as(role, slot, false)
    }

    /// [`plan::route`] on this device, `crossing` as given.
    fn route_as(&self, role: Role, slot: usize, crossing: bool) -> Vec<Hw> {
        let side = self.side.as_ref().map_or(0, |t| t.queues.len());
        let compute = self.compute.queues.len();
        plan::route(self.copy, (role, slot), side, compute, crossing)
    }

    /// Notes a command of `role` submitted to signal `semaphore` at `value`, where the copy
    /// way reads what is in flight ([`VkCopy::Auto`]; no other way pays for the note).
    pub(super) fn copied(&self, role: Role, semaphore: vk::Semaphore, value: u64) {
        if self.copy == VkCopy::Auto {
            self.traffic.sent(role, semaphore, value);
        }
    }

    /// Whether a copy of the direction other than `role`'s is in flight ([`plan::Traffic`]).
    fn crossing(&self, role: Role) -> bool {
        self.traffic.crossing(role, |semaphore| {
            // SAFETY: the semaphores kept in `traffic` are destroyed only with the device
            // (`retire`), so this one is live.
            unsafe { self.device.get_semaphore_counter_value(semaphore) }
        })
    }

    /// The effective copy way in words: the way, and the queues it runs on (none on a
    /// program's adopted device).
    pub(super) fn copy_text(&self) -> String {
        if self.adopted() {
            return "none: a program's VkDevice adopted for host memory has no queues of pinstream's".into();
        }
        let on = |role| {
            let hw = self.route_alone(role, 0);
            let fam = self.family(hw[0]).index;
            format!("{} queue(s) of family {fam}", hw.len())
        };
        if let (VkCopy::Auto, Some(t)) = (self.copy, &self.side) {
            return format!(
                "auto (vkCmdCopyBuffer; each direction on its lane's queue of family {c} while \
                 the other has no copy in flight, else on a queue of family {t}; kernels on \
                 family {c})",
                c = self.compute.index,
                t = t.index
            );
        }
        let how = match self.copy {
            VkCopy::Shader => "a compute-shader copy",
            VkCopy::Mixed => "vkCmdCopyBuffer up, a compute-shader copy down",
            VkCopy::Crossed => "a compute-shader copy up, vkCmdCopyBuffer down",
            _ => "vkCmdCopyBuffer",
        };
        format!(
            "{} ({how}; uploads on {}, downloads on {}, kernels on {})",
            self.copy,
            on(Role::Upload),
            on(Role::Download),
            on(Role::Compute)
        )
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
            self.instance()
                .get_physical_device_memory_properties2(self.physical, &mut props)
        };
        let heaps = super::instance::heaps(&props.memory_properties);
        let local = heaps.iter().enumerate();
        let local = local.filter(|(_, h)| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL));
        Some(local.fold(0u64, |n, (i, _)| n.saturating_add(budget.heap_usage[i])))
    }
}

/// The compute family and the side family (where offered) of `physical` for copy way `way`
/// ([`plan::pick_families`]), with their properties.
fn families(
    loaded: &Loaded,
    physical: vk::PhysicalDevice,
    way: VkCopy,
) -> Option<[Option<(u32, vk::QueueFamilyProperties)>; 2]> {
    // SAFETY: `physical` is a device of this live instance.
    let families = unsafe {
        loaded
            .instance
            .get_physical_device_queue_family_properties(physical)
    };
    let (compute, side) = plan::pick_families(&families, way)?;
    let with = |i: u32| (i, families[i as usize]);
    Some([Some(with(compute)), side.map(with)])
}

/// True where the device offers `hostQueryReset` (timestamp queries reset on the host: a
/// transfer queue cannot reset them in a command buffer).
fn host_query_reset(loaded: &Loaded, physical: vk::PhysicalDevice) -> bool {
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut v12);
    // SAFETY: `physical` is a device of this live instance; the chain holds a 1.2 structure
    // (the device offers 1.2: checked by the caller).
    unsafe {
        loaded
            .instance
            .get_physical_device_features2(physical, &mut features)
    };
    v12.host_query_reset == vk::TRUE
}

/// Opens the families' queues of `device`, asked for at creation as `asked`.
fn open_families(
    device: &ash::Device,
    asked: &[(u32, vk::QueueFamilyProperties, u32)],
) -> Vec<Family> {
    asked
        .iter()
        .map(|&(index, props, count)| Family {
            index,
            // SAFETY: the family and indices were asked for at creation.
            queues: (0..count)
                .map(|i| Mutex::new(unsafe { device.get_device_queue(index, i) }))
                .collect(),
            timestamp_bits: props.timestamp_valid_bits,
        })
        .collect()
}

/// `device` (just made from a physical device of `instance`) with every core function of
/// Vulkan 1.2 found, else destroyed (where its destroy function was found) and refused naming
/// the first missing.
///
/// # Safety
/// `device` is live, made from a physical device of `instance`, and nothing was made from it.
unsafe fn checked(instance: &ash::Instance, device: ash::Device) -> Result<ash::Device> {
    let fix = "update the GPU's Vulkan driver";
    // SAFETY: the caller's contract.
    unsafe { device_fns(instance, device.handle(), super::instance::NEEDED, fix) }.inspect_err(
        |_| {
            let gdpa = instance.fp_v1_0().get_device_proc_addr;
            // SAFETY: as above; the name is NUL-terminated.
            if unsafe { gdpa(device.handle(), c"vkDestroyDevice".as_ptr()) }.is_some() {
                // SAFETY: nothing was made from the device.
                unsafe { device.destroy_device(None) };
            }
        },
    )
}

/// The queue families `open` asks for: (family, its properties, queues asked), compute first.
type Asked = Vec<(u32, vk::QueueFamilyProperties, u32)>;

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
    let found = families(loaded, adapter.physical, adapter.options.copy).ok_or_else(|| {
        VulkanError::Unavailable(format!(
            "device {} has no compute queue",
            adapter.info.label()
        ))
    })?;
    // For `crossed`, the compute-only family: downloads on the first, every lane's kernels on
    // the second (measured on an H100, bench/results/h100/session-2026-12-07e). Asking for
    // `QUEUES` of it would give each lane's kernels their own ([`plan::route`]); that has
    // not run on a GPU yet.
    let want = [QUEUES, SIDE_QUEUES];
    let asked: Asked = found
        .iter()
        .zip(want)
        .filter_map(|(f, n)| f.map(|(i, p)| (i, p, p.queue_count.min(n))))
        .collect();
    let host_reset = host_query_reset(loaded, adapter.physical);
    let device = create_device(adapter, &asked, host_reset)?;
    let mut opened = open_families(&device, &asked).into_iter();
    let compute = opened
        .next()
        .expect("the compute family is asked for first");
    let side = opened.next();
    let raw = raw_device(adapter, &device, &asked);
    let host_clock = !host_reset
        || std::iter::once(&compute)
            .chain(&side)
            .any(|f| f.timestamp_bits == 0);
    Ok(Shared {
        device,
        info: adapter.info.clone(),
        caps: adapter.caps,
        raw,
        compute,
        side,
        copy: adapter.options.copy,
        traffic: plan::Traffic::default(),
        huge_pages: adapter.options.huge_pages,
        host_clock,
        epoch: std::time::Instant::now(),
        next_queue: AtomicUsize::new(0),
        retired: Mutex::default(),
        registry: Registry::default(),
        physical: adapter.physical,
        owner: Owner::Pinstream(loaded.clone()),
    })
}

/// A program's device, adopted ([`super::adopt::adopt`]), as a device with no queues of
/// pinstream's: it pins host memory and makes buffers, never waits on nor destroys the
/// device. Imports ask for 2 MiB pages as the C library's always have.
pub(super) fn adopted(
    a: super::adopt::Adopted,
    physical: vk::PhysicalDevice,
    info: AdapterInfo,
    caps: Caps,
) -> Shared {
    let no_queues = Family {
        index: 0,
        queues: Vec::new(),
        timestamp_bits: 0,
    };
    Shared {
        device: a.device,
        info,
        caps,
        raw: a.raw,
        compute: no_queues,
        side: None,
        copy: VkCopy::Transfer,
        traffic: plan::Traffic::default(),
        huge_pages: true,
        host_clock: true,
        epoch: std::time::Instant::now(),
        next_queue: AtomicUsize::new(0),
        retired: Mutex::default(),
        registry: Registry::default(),
        physical,
        owner: Owner::Program(a.instance),
    }
}

/// `vkCreateDevice` with `asked`'s queues, timeline semaphores (and host query reset where
/// offered), and the host-memory import and memory-budget extensions where offered.
fn create_device(adapter: &VulkanAdapter, asked: &Asked, host_reset: bool) -> Result<ash::Device> {
    // One priority per queue of the family that asks for most.
    let most = asked.iter().map(|&(_, _, n)| n).max().unwrap_or(0);
    let priorities = vec![1.0f32; most as usize];
    let queue_info: Vec<_> = asked
        .iter()
        .map(|&(i, _, n)| {
            vk::DeviceQueueCreateInfo::default()
                .queue_family_index(i)
                .queue_priorities(&priorities[..n as usize])
        })
        .collect();
    let mut names = Vec::new();
    if adapter.caps.import_alignment.is_some() {
        names.push(ash::ext::external_memory_host::NAME.as_ptr());
    }
    if adapter.caps.memory_budget {
        names.push(ash::ext::memory_budget::NAME.as_ptr());
    }
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default()
        .timeline_semaphore(true)
        .host_query_reset(host_reset);
    let info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queue_info)
        .enabled_extension_names(&names)
        .push_next(&mut v12);
    let instance = &adapter.loaded.instance;
    // SAFETY: `info` and what it points to live through the call; `physical` is live.
    let device = unsafe { instance.create_device(adapter.physical, &info, None) }
        .map_err(VulkanError::call("vkCreateDevice"))?;
    // SAFETY: a device of this instance, just made.
    unsafe { checked(instance, device) }
}

/// The raw calls over `device`: host-memory import where the driver offers it, the memory
/// types, and the largest chunk a buffer may span, shared by `asked`'s families.
fn raw_device(adapter: &VulkanAdapter, device: &ash::Device, asked: &Asked) -> RawDevice {
    let instance = &adapter.loaded.instance;
    let host_pointer = adapter
        .caps
        .import_alignment
        // SAFETY: a live device of this instance; the extension is enabled (create_device).
        .and_then(|_| unsafe { host_pointer_fn(instance, device.handle()) });
    // SAFETY: `physical` is a live device of this instance.
    let memory = unsafe { instance.get_physical_device_memory_properties(adapter.physical) };
    let import = adapter
        .caps
        .import_alignment
        .map(|a| a as usize)
        .ok_or_else(|| super::NO_IMPORT.to_string());
    let max_chunk = adapter.caps.max_buffer.min(adapter.info.max_alloc);
    let max_chunk = usize::try_from(max_chunk).unwrap_or(usize::MAX);
    let used: Vec<u32> = asked.iter().map(|a| a.0).collect();
    RawDevice::new(device.clone(), host_pointer, memory, import, max_chunk).shared_by(used)
}

/// A `VkBuffer` bound to memory of its own, which it frees on drop; mapped where the
/// memory is host-visible and was mapped.
pub struct VulkanBuffer {
    pub(super) shared: Arc<Shared>,
    pub(super) buffer: vk::Buffer,
    pub(super) memory: vk::DeviceMemory,
    /// Bytes the caller asked for.
    pub(super) size: u64,
    /// The host address of the mapped memory, or null.
    pub(super) mapped: *mut u8,
    /// What owns the memory of a buffer that does not (an alias over mapped host memory,
    /// `host::VulkanHost::device_buffers`), kept alive as long as the buffer is.
    pub(super) keep: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

// SAFETY: the handles are plain values the driver lets any thread use; `mapped` is only
// written through by commands the owner orders, never through a Rust reference here.
unsafe impl Send for VulkanBuffer {}
// SAFETY: as above.
unsafe impl Sync for VulkanBuffer {}

impl Drop for VulkanBuffer {
    fn drop(&mut self) {
        // The owner keeps the buffer alive until every command using it completed (the Queue
        // contract); freeing the memory unmaps it.
        self.shared.raw.release(&RawBuffer {
            buffer: self.buffer,
            memory: self.memory,
            mapped: self.mapped,
        });
    }
}

impl VulkanBuffer {
    /// `bytes` (rounded up to 4, at least 4) of memory from `backing` on `shared`'s device.
    pub(super) fn new(shared: &Arc<Shared>, bytes: usize, backing: Backing) -> Result<Self> {
        let raw = shared.raw.buffer(bytes, backing)?;
        Ok(Self::adopt(shared, raw, bytes))
    }

    /// Owns `raw`, a buffer made on `shared`'s device over `bytes` bytes.
    pub(super) fn adopt(shared: &Arc<Shared>, raw: RawBuffer, bytes: usize) -> Self {
        VulkanBuffer {
            shared: shared.clone(),
            buffer: raw.buffer,
            memory: raw.memory,
            size: bytes as u64,
            mapped: raw.mapped,
            keep: None,
        }
    }
}
