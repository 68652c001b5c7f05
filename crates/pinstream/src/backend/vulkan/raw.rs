//! Buffers and host-memory imports over a device's raw handles: the one implementation behind
//! the backend's buffers and pinned host memory, on pinstream's own devices and on a
//! program's adopted one (`adopt`).

use super::error::{Result, VulkanError};
use crate::backend::os::{self, PageMap, Residency};
use ash::vk;

/// Where a buffer's memory comes from.
#[derive(Debug, Clone, Copy)]
pub enum Backing {
    /// Device-local memory.
    Device,
    /// The driver's host-visible memory, mapped.
    HostVisible,
    /// Host pages imported at this address (`VK_EXT_external_memory_host`); the caller keeps
    /// them mapped for the buffer's life.
    Import(*mut u8),
}

/// A buffer bound to memory of its own; [`RawDevice::release`] destroys both.
#[derive(Debug, Clone, Copy)]
pub struct RawBuffer {
    /// The buffer, over the whole memory.
    pub buffer: vk::Buffer,
    /// Its memory.
    pub memory: vk::DeviceMemory,
    /// The host address of the memory where it is mapped (`Backing::HostVisible`), else null.
    pub mapped: *mut u8,
}

/// One imported chunk of a host range: its buffer, and the host bytes it covers.
#[derive(Debug, Clone, Copy)]
pub struct ImportedChunk {
    /// The buffer over the chunk.
    pub raw: RawBuffer,
    /// The first host byte it covers.
    pub ptr: *mut u8,
    /// How many bytes it covers.
    pub len: usize,
}

/// A device's functions and what making buffers needs of it: pinstream's own device (the
/// backend) or a program's (the C library). Destroys nothing of the device when dropped.
#[derive(Clone)]
pub struct RawDevice {
    device: ash::Device,
    /// `vkGetMemoryHostPointerPropertiesEXT`, where the device was created with the import
    /// extension.
    host_pointer: Option<vk::PFN_vkGetMemoryHostPointerPropertiesEXT>,
    memory: vk::PhysicalDeviceMemoryProperties,
    /// `minImportedHostPointerAlignment` where host memory can be imported, else why not.
    pub import: std::result::Result<usize, String>,
    /// The largest buffer: `maxMemoryAllocationSize`, and `maxBufferSize` where known.
    pub max_chunk: usize,
    /// The queue families that use every buffer, where more than one ([`Self::shared_by`]).
    families: Vec<u32>,
}

/// Usage of every buffer: copies both ways and kernel storage.
fn usage() -> vk::BufferUsageFlags {
    vk::BufferUsageFlags::TRANSFER_SRC
        | vk::BufferUsageFlags::TRANSFER_DST
        | vk::BufferUsageFlags::STORAGE_BUFFER
}

/// A memory type among `bits` with every flag of `need`, the one with most of `prefer` and
/// fewest of `avoid`.
fn memory_type(
    memory: &vk::PhysicalDeviceMemoryProperties,
    bits: u32,
    [need, prefer, avoid]: [vk::MemoryPropertyFlags; 3],
) -> Option<u32> {
    let count = usize::try_from(memory.memory_type_count).unwrap_or(usize::MAX);
    let types = &memory.memory_types[..count.min(vk::MAX_MEMORY_TYPES)];
    let score = |f: vk::MemoryPropertyFlags| {
        (f & prefer).as_raw().count_ones() as i32 - (f & avoid).as_raw().count_ones() as i32
    };
    (0..types.len() as u32)
        .filter(|i| bits & (1 << i) != 0)
        .filter(|&i| types[i as usize].property_flags.contains(need))
        .max_by_key(|&i| (score(types[i as usize].property_flags), -(i as i32)))
}

impl RawDevice {
    /// Over an opened device: its functions (every one called here found: `functions`), the
    /// host-import extension's where enabled, its memory types, the import alignment (or why
    /// there is none) and the largest buffer.
    pub fn new(
        device: ash::Device,
        host_pointer: Option<vk::PFN_vkGetMemoryHostPointerPropertiesEXT>,
        memory: vk::PhysicalDeviceMemoryProperties,
        import: std::result::Result<usize, String>,
        max_chunk: usize,
    ) -> Self {
        RawDevice {
            device,
            host_pointer,
            memory,
            import,
            max_chunk,
            families: Vec::new(),
        }
    }

    /// Buffers made from now on are used by queues of `families`: with two or more they are
    /// made `VK_SHARING_MODE_CONCURRENT` over them (no ownership transfers between a copy
    /// on the transfer family and a kernel on the compute family).
    pub fn shared_by(mut self, families: Vec<u32>) -> Self {
        self.families = families;
        self
    }

    /// A buffer of `bytes` (rounded up to 4, at least 4) bound to memory from `backing`.
    pub fn buffer(&self, bytes: usize, backing: Backing) -> Result<RawBuffer> {
        let buffer = self.unbound(bytes, backing)?;
        let mut raw = RawBuffer {
            buffer,
            memory: vk::DeviceMemory::null(),
            mapped: std::ptr::null_mut(),
        };
        match Self::size(bytes).and_then(|size| self.bind(&mut raw, backing, size)) {
            Ok(()) => Ok(raw),
            Err(e) => {
                self.release(&raw);
                Err(e)
            }
        }
    }

    /// A second buffer over `memory`, the memory of a buffer made by [`Self::buffer`] with
    /// the same `bytes` and `backing` (which kernels bind while that buffer is registered for
    /// copies); its `memory` is null, so [`Self::release`] destroys only the buffer. The
    /// caller keeps `memory` alive for the alias's life.
    pub fn alias(
        &self,
        memory: vk::DeviceMemory,
        bytes: usize,
        backing: Backing,
    ) -> Result<RawBuffer> {
        let buffer = self.unbound(bytes, backing)?;
        // SAFETY: the buffer is live and unbound; `memory` is live (the caller's contract) and
        // fits a buffer of these parameters at offset 0, as it did the one it was made for.
        if let Err(r) = unsafe { self.device.bind_buffer_memory(buffer, memory, 0) } {
            // SAFETY: the buffer is unused.
            unsafe { self.device.destroy_buffer(buffer, None) };
            return Err(VulkanError::Call {
                call: "vkBindBufferMemory",
                result: r,
            });
        }
        Ok(RawBuffer {
            buffer,
            memory: vk::DeviceMemory::null(),
            mapped: std::ptr::null_mut(),
        })
    }

    /// The size of a buffer of `bytes`: rounded up to 4, at least 4; refused where that
    /// does not fit a `VkDeviceSize`.
    fn size(bytes: usize) -> Result<u64> {
        u64::try_from(bytes.max(4))
            .ok()
            .and_then(|b| b.checked_next_multiple_of(4))
            .ok_or_else(|| {
                VulkanError::misuse(
                    "vkCreateBuffer",
                    format!(
                        "a buffer of {bytes} bytes rounded up to 4 does not fit a VkDeviceSize"
                    ),
                )
            })
    }

    /// A buffer of `bytes` for memory from `backing`, not bound yet.
    fn unbound(&self, bytes: usize, backing: Backing) -> Result<vk::Buffer> {
        let size = Self::size(bytes)?;
        let mut ext = vk::ExternalMemoryBufferCreateInfo::default()
            .handle_types(vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT);
        let mut info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(usage())
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        if self.families.len() > 1 {
            info = info
                .sharing_mode(vk::SharingMode::CONCURRENT)
                .queue_family_indices(&self.families);
        }
        if matches!(backing, Backing::Import(_)) {
            info = info.push_next(&mut ext);
        }
        // SAFETY: `info` lives through the call; the device is live.
        unsafe { self.device.create_buffer(&info, None) }
            .map_err(VulkanError::call("vkCreateBuffer"))
    }

    /// Destroys `raw`'s buffer and frees its memory (unmapping it). The caller owes: no
    /// command using it is pending.
    pub fn release(&self, raw: &RawBuffer) {
        // SAFETY: the handles were made on this device and are used by nothing pending (the
        // caller's contract); null handles are ignored by both calls.
        unsafe {
            self.device.destroy_buffer(raw.buffer, None);
            self.device.free_memory(raw.memory, None);
        }
    }

    /// The memory type flags (need, prefer, avoid) for `backing`.
    fn flags(backing: Backing) -> [vk::MemoryPropertyFlags; 3] {
        use vk::MemoryPropertyFlags as F;
        match backing {
            Backing::Device => [F::DEVICE_LOCAL, F::empty(), F::HOST_VISIBLE],
            // Not DEVICE_LOCAL where there is a choice: that is the BAR, VRAM.
            Backing::HostVisible => [
                F::HOST_VISIBLE | F::HOST_COHERENT,
                F::HOST_CACHED,
                F::DEVICE_LOCAL,
            ],
            Backing::Import(_) => [F::empty(), F::HOST_COHERENT, F::empty()],
        }
    }

    /// Allocates (or imports) memory for `raw`'s buffer, binds it, and maps host-visible memory.
    fn bind(&self, raw: &mut RawBuffer, backing: Backing, size: u64) -> Result<()> {
        let d = &self.device;
        // SAFETY: the buffer is live.
        let req = unsafe { d.get_buffer_memory_requirements(raw.buffer) };
        let (bits, alloc_size) = match backing {
            Backing::Import(ptr) => (req.memory_type_bits & self.host_types(ptr, size)?, size),
            _ => (req.memory_type_bits, req.size),
        };
        let none = vk::MemoryPropertyFlags::empty();
        let index = memory_type(&self.memory, bits, Self::flags(backing))
            .or_else(|| memory_type(&self.memory, bits, [none; 3]))
            .ok_or_else(|| {
                VulkanError::misuse(
                    "vkAllocateMemory",
                    "the device has no memory type for this buffer",
                )
            })?;
        raw.memory = self.allocate(backing, alloc_size, index)?;
        // SAFETY: buffer and memory are live and unbound; offset 0 satisfies any alignment.
        unsafe { d.bind_buffer_memory(raw.buffer, raw.memory, 0) }
            .map_err(VulkanError::call("vkBindBufferMemory"))?;
        if matches!(backing, Backing::HostVisible) {
            // SAFETY: the memory is host-visible, unmapped, and lives until released.
            let p =
                unsafe { d.map_memory(raw.memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
                    .map_err(VulkanError::call("vkMapMemory"))?;
            raw.mapped = p.cast();
        }
        Ok(())
    }

    /// `size` bytes of memory of type `index`, imported where `backing` says so.
    fn allocate(&self, backing: Backing, size: u64, index: u32) -> Result<vk::DeviceMemory> {
        let mut host = vk::ImportMemoryHostPointerInfoEXT::default()
            .handle_type(vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT);
        let mut info = vk::MemoryAllocateInfo::default()
            .allocation_size(size)
            .memory_type_index(index);
        if let Backing::Import(ptr) = backing {
            host = host.host_pointer(ptr.cast());
            info = info.push_next(&mut host);
        }
        // SAFETY: `info` lives through the call; an imported pointer is page memory the
        // caller keeps mapped for the buffer's life (`Backing::Import`'s contract).
        unsafe { self.device.allocate_memory(&info, None) }.map_err(|result| match backing {
            Backing::Import(ptr) => VulkanError::Import {
                call: "vkAllocateMemory",
                result,
                bytes: usize::try_from(size).unwrap_or(usize::MAX),
                address: ptr as usize,
            },
            _ => VulkanError::Call {
                call: "vkAllocateMemory",
                result,
            },
        })
    }

    /// The memory types the driver can import host pages at `ptr` as.
    fn host_types(&self, ptr: *mut u8, size: u64) -> Result<u32> {
        let get = self.host_pointer.ok_or_else(|| self.no_import())?;
        let mut props = vk::MemoryHostPointerPropertiesEXT::default();
        // SAFETY: the function was found for this device; `props` is a valid out-structure.
        let r = unsafe {
            get(
                self.device.handle(),
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
                bytes: usize::try_from(size).unwrap_or(usize::MAX),
                address: ptr as usize,
            }),
        }
    }

    /// The refusal of an import on a device that cannot import.
    fn no_import(&self) -> VulkanError {
        let why = self.import.as_ref().err().map_or("", String::as_str);
        VulkanError::misuse("import", why)
    }

    /// Imports `total` bytes at `base` (both aligned to the import alignment) in chunks of at
    /// most `chunk` bytes (a multiple of it); on a failure, releases the chunks made.
    ///
    /// # Safety
    /// `base..base + total` is host memory that stays mapped until every chunk is released.
    pub unsafe fn import_range(
        &self,
        base: *mut u8,
        total: usize,
        chunk: usize,
    ) -> Result<Vec<ImportedChunk>> {
        let align = *self.import.as_ref().map_err(|_| self.no_import())?;
        if !(base as usize).is_multiple_of(align)
            || !total.is_multiple_of(align)
            || !chunk.is_multiple_of(align)
        {
            return Err(VulkanError::misuse(
                "import",
                format!("{base:p} + {total} bytes (chunks of {chunk}) is not aligned to the driver's {align} bytes"),
            ));
        }
        let mut out = Vec::new();
        for at in (0..total).step_by(chunk.max(align)) {
            let len = chunk.min(total - at);
            // SAFETY: `at` lies inside the caller's `total` bytes at `base` (the contract).
            let ptr = unsafe { base.add(at) };
            match self.buffer(len, Backing::Import(ptr)) {
                Ok(raw) => out.push(ImportedChunk { raw, ptr, len }),
                Err(e) => {
                    out.iter().for_each(|c| self.release(&c.raw));
                    return Err(e);
                }
            }
        }
        Ok(out)
    }
}

impl RawDevice {
    /// The import alignment, or the refusal naming why this device cannot import.
    pub fn import_alignment(&self) -> Result<usize> {
        self.import
            .clone()
            .map_err(|why| VulkanError::misuse("import", why))
    }

    /// The largest chunk: the device's limit and `max_chunk` (where given), rounded down to
    /// `align`.
    pub fn chunk_size(&self, max_chunk: Option<usize>, align: usize) -> usize {
        let limit = self.max_chunk.min(max_chunk.unwrap_or(usize::MAX));
        (limit / align * align).max(align)
    }

    /// `bytes` (at least 1) of pinstream's own page-aligned memory, rounded up to the import
    /// alignment, imported in chunks of at most `max_chunk`, the pages asking for 2 MiB pages
    /// (`madvise`) only where `huge_pages`. The caller releases the chunks before dropping the
    /// pages.
    pub fn import_pages(
        &self,
        bytes: usize,
        max_chunk: Option<usize>,
        huge_pages: bool,
    ) -> Result<(PageMap, Vec<ImportedChunk>)> {
        let align = self.import_alignment()?;
        let total = bytes.max(1).checked_next_multiple_of(align).ok_or_else(|| {
            VulkanError::HostMemory(format!("{bytes} bytes rounded up to the driver's import alignment ({align} bytes) exceed the address space: ask for less"))
        })?;
        let threads = os::cores().min(8);
        let how = Residency {
            huge_pages,
            touch_threads: if huge_pages { threads } else { 0 },
        };
        let pages = PageMap::new(total, how).map_err(|e| {
            VulkanError::HostMemory(format!("mapping {total} bytes of host memory failed: {e}"))
        })?;
        if !huge_pages {
            base_pages(&pages);
            pages.touch_on(threads);
        }
        let chunk = self.chunk_size(max_chunk, align);
        // SAFETY: the pages stay mapped in the caller's hands until the chunks are released
        // (this function's contract); a misaligned start is refused by `import_range`.
        let chunks = unsafe { self.import_range(pages.as_ptr(), total, chunk) }?;
        Ok((pages, chunks))
    }
}

/// Keeps `pages` (not touched yet) on the system's base pages, even where transparent huge
/// pages are `always` on.
fn base_pages(pages: &PageMap) {
    #[cfg(target_os = "linux")]
    // SAFETY: the range is the mapping `pages` owns; advice only: a refusal loses nothing.
    unsafe {
        libc::madvise(pages.as_ptr().cast(), pages.len(), libc::MADV_NOHUGEPAGE);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = pages;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_type_needs_every_flag_and_prefers_then_avoids() {
        use vk::MemoryPropertyFlags as F;
        let mut m = vk::PhysicalDeviceMemoryProperties {
            memory_type_count: 3,
            ..Default::default()
        };
        m.memory_types[0].property_flags = F::DEVICE_LOCAL;
        m.memory_types[1].property_flags = F::HOST_VISIBLE | F::HOST_COHERENT | F::DEVICE_LOCAL;
        m.memory_types[2].property_flags = F::HOST_VISIBLE | F::HOST_COHERENT;
        let hv = RawDevice::flags(Backing::HostVisible);
        assert_eq!(memory_type(&m, 0b111, hv), Some(2));
        assert_eq!(memory_type(&m, 0b011, hv), Some(1));
        assert_eq!(memory_type(&m, 0b001, hv), None);
        assert_eq!(
            memory_type(&m, 0b111, RawDevice::flags(Backing::Device)),
            Some(0)
        );
    }
}
