//! Host memory pinned with a Vulkan device, in chunks of at most `maxMemoryAllocationSize`
//! (and `maxBufferSize`), each a `VkBuffer` registered by address with the device so copies
//! find it: pinstream's own page-aligned memory imported with `VK_EXT_external_memory_host`
//! ([`VkPinning::Import`]), or the driver's host-visible memory, mapped, as ggml does
//! ([`VkPinning::HostVisible`], the fallback).

use super::device::{Backing, Shared, VulkanBuffer};
use super::raw::ImportedChunk;
use super::{Result, VulkanDevice};
use crate::backend::lanes::{HostMemory, OutOfRange};
use crate::backend::os::{self, PageMap};
use crate::backend::pinning::{check_registrable, CallerRange, HostError, PinKind, PinState};
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A way Vulkan pins host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VkPinning {
    /// pinstream's anonymous pages imported (`VK_EXT_external_memory_host`).
    Import,
    /// The driver's host-visible memory, mapped.
    HostVisible,
}

impl std::fmt::Display for VkPinning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            VkPinning::Import => "import",
            VkPinning::HostVisible => "host-visible",
        })
    }
}

/// One chunk of pinned memory, as a program's own Vulkan calls copy with it: the buffer over
/// it, its memory, and the host bytes it covers (`ptr..ptr + len`: the buffer's bytes from 0).
#[derive(Debug, Clone, Copy)]
pub struct HostChunk {
    /// The buffer (usage: transfer source and destination, storage).
    pub buffer: ash::vk::Buffer,
    /// Its memory: the import, or the driver's host-visible allocation.
    pub memory: ash::vk::DeviceMemory,
    /// The first host byte it covers.
    pub ptr: *mut u8,
    /// How many bytes it covers.
    pub len: usize,
}

/// A buffer over each chunk of mapped memory, with the bytes of the memory it covers.
pub type ChunkBuffers = Vec<(Range<usize>, VulkanBuffer)>;

/// One chunk: its buffer and the host bytes it covers.
struct Chunk {
    buffer: VulkanBuffer,
    ptr: *mut u8,
    len: usize,
}

/// The chunks and the pages under them, shared by the memory and by the buffers kernels bind
/// over it ([`VulkanHost::device_buffers`]), so those keep it alive.
struct Chunks {
    shared: Arc<Shared>,
    list: Vec<Chunk>,
    // Unmapped after the chunks' imports are freed.
    pages: Option<PageMap>,
}

// SAFETY: the chunk pointers are this value's own memory (for a registration, the caller's
// range, the bytes its import's pages take in beside it never handed out: accessors reach
// `lead..lead + len` alone), written only through a `VulkanHost`'s `&mut self` slices or by
// commands its owner orders, so sharing or sending it shares nothing else.
unsafe impl Send for Chunks {}
// SAFETY: as above.
unsafe impl Sync for Chunks {}

impl Drop for Chunks {
    fn drop(&mut self) {
        for c in &self.list {
            self.shared.registry.remove(c.buffer.buffer);
        }
    }
}

/// Host memory pinned with one Vulkan device.
pub struct VulkanHost {
    pinning: VkPinning,
    len: usize,
    /// Bytes of the first chunk before the memory's first byte: a registration imports the
    /// whole import-aligned pages the caller's range touches.
    lead: usize,
    pin_time: Duration,
    /// Made for kernels to bind in place ([`Self::mapped`]).
    mapped: bool,
    /// Made with a CPU device (lavapipe), whose memory is the host's: nothing to pin.
    cpu_device: bool,
    chunks: Arc<Chunks>,
}

/// True for a CPU device (lavapipe), whose memory is the host's.
fn is_cpu(device: &VulkanDevice) -> bool {
    use crate::backend::adapter::DeviceKind;
    use crate::backend::api::Device;
    device.info().kind == DeviceKind::Cpu
}

/// The largest binding mapped memory is cut into, below `maxStorageBufferRange` where that is
/// larger. On the H200 (NVIDIA 580, `maxStorageBufferRange` 4 GiB - 1) a kernel reading
/// imported host memory through a binding of 2 GiB or more reads nothing: the embedding lookup
/// checked right over tables of 256 MiB and 1 GiB (one binding each) and summed zeros over
/// tables of 2 GiB (one binding of 2 GiB), 3, 8 and 9 GiB (bindings of 2 GiB), and earlier
/// 10 GiB in bindings of almost 4 GiB (bench/results/h200/session-2026-12-02/vulkan-embed-sweep).
/// So bindings stop at 1 GiB, the largest power of two that read right.
const MAX_BINDING: usize = 1 << 30;

/// The most bytes one kernel binding of mapped memory covers on a device whose
/// `maxStorageBufferRange` is `max_storage_range`: that, or 1 GiB where it is larger (NVIDIA
/// reads nothing through larger bindings of imported memory; see `MAX_BINDING`).
pub fn mapped_binding(max_storage_range: u64) -> usize {
    usize::try_from(max_storage_range)
        .unwrap_or(usize::MAX)
        .min(MAX_BINDING)
}

impl VulkanHost {
    /// `bytes` pinned on `device` the way `pinning` says, in chunks of at most `max_chunk`.
    pub fn new(
        device: &VulkanDevice,
        bytes: usize,
        pinning: VkPinning,
        max_chunk: Option<usize>,
    ) -> Result<Self> {
        let start = Instant::now();
        let mut chunks = Chunks {
            shared: device.shared.clone(),
            list: Vec::new(),
            pages: None,
        };
        match pinning {
            VkPinning::Import => chunks.import(bytes, max_chunk)?,
            VkPinning::HostVisible => chunks.host_visible(bytes, max_chunk)?,
        }
        Ok(VulkanHost {
            pinning,
            len: bytes,
            lead: 0,
            pin_time: start.elapsed(),
            mapped: false,
            cpu_device: is_cpu(device),
            chunks: Arc::new(chunks),
        })
    }

    /// Mapped memory (`cudaHostAlloc(..., cudaHostAllocMapped)`): `bytes` pinned as `pinning`
    /// says, in chunks of one kernel binding each (at most `maxStorageBufferRange` and
    /// `max_chunk`, a multiple of the import alignment or the page), which kernels read and
    /// write in place across the bus ([`Self::device_buffers`]): no copy into VRAM.
    pub fn mapped(
        device: &VulkanDevice,
        bytes: usize,
        pinning: VkPinning,
        max_chunk: Option<usize>,
    ) -> Result<Self> {
        let chunk = Self::mapped_chunk(device, pinning, max_chunk)?;
        let mut host = Self::new(device, bytes, pinning, Some(chunk))?;
        host.mapped = true;
        Ok(host)
    }

    /// The bytes of each chunk (one kernel binding) of mapped memory pinned as `pinning` on
    /// `device` with `max_chunk`: [`mapped_binding`], the device's largest buffer and
    /// `max_chunk`, rounded down to the import alignment (imports) or the page.
    pub fn mapped_chunk(
        device: &VulkanDevice,
        pinning: VkPinning,
        max_chunk: Option<usize>,
    ) -> Result<usize> {
        if pinning == VkPinning::Import {
            device.shared.raw.import_alignment()?;
        }
        let binding = mapped_binding(device.shared.caps.max_storage_range);
        let chunk = max_chunk.map_or(binding, |c| c.min(binding));
        Ok(Self::chunk_bytes(device, pinning, Some(chunk)))
    }

    /// The most bytes one chunk of memory pinned as `pinning` on `device` holds, with
    /// `max_chunk`: the device's largest buffer and `max_chunk`, rounded down to the import
    /// alignment (imports) or the page (the driver's host-visible memory), at least one of
    /// those. Memory larger than this comes in several chunks: for host-visible memory,
    /// several mappings, not one range.
    pub fn chunk_bytes(
        device: &VulkanDevice,
        pinning: VkPinning,
        max_chunk: Option<usize>,
    ) -> usize {
        let raw = &device.shared.raw;
        let align = match (pinning, raw.import.as_ref()) {
            (VkPinning::Import, Ok(align)) => *align,
            _ => os::page_size(),
        };
        raw.chunk_size(max_chunk, align)
    }

    /// The addresses a registration of `len` bytes at `ptr` imports on `device`: the whole
    /// pages of the driver's import alignment they touch. Refused where the device does not
    /// import, for 0 bytes, and where the last page reaches past the address space.
    pub fn import_span(device: &VulkanDevice, ptr: usize, len: usize) -> Result<Range<usize>> {
        let align = device.shared.raw.import_alignment()?;
        if len == 0 {
            let what = "a range of 0 bytes: register at least one byte";
            return Err(super::VulkanError::misuse("import", what));
        }
        let end = ptr.checked_add(len);
        let end = end.and_then(|e| e.checked_next_multiple_of(align));
        let end = end.ok_or_else(|| {
            let what = format!(
                "{ptr:#x} + {len} bytes: its last {align}-byte page reaches past the address space"
            );
            super::VulkanError::misuse("import", what)
        })?;
        Ok(ptr / align * align..end)
    }

    /// The caller's `range` imported with `VK_EXT_external_memory_host`, in chunks of at most
    /// `max_chunk` (and the device's limit), each a `VkBuffer` registered by address with the
    /// device as pinstream's own imports are. Any alignment: the import covers the whole pages
    /// of the driver's import alignment (`minImportedHostPointerAlignment`, a page or more)
    /// that the range touches, and the memory is the range's bytes alone. Refused where the
    /// driver does not import, and where those pages are larger than the system's and the
    /// neighbouring bytes they take in are not memory a registration may pin
    /// ([`check_registrable`]). The memory is neither written nor zeroed; dropping the
    /// returned value releases the imports and never frees it. The range itself is not
    /// checked here ([`CallerRange::check`] is the caller's).
    pub fn register(
        device: &VulkanDevice,
        range: CallerRange,
        max_chunk: Option<usize>,
    ) -> std::result::Result<Self, HostError> {
        let start = Instant::now();
        let raw = &device.shared.raw;
        let (ptr, len) = (range.ptr() as usize, range.len());
        let fail = |e| host_error(e, VkPinning::Import, len);
        let align = raw.import_alignment().map_err(fail)?;
        let Range { start: base, end } = Self::import_span(device, ptr, len).map_err(fail)?;
        if align > os::page_size() {
            check_registrable(base, end)?;
        }
        let chunk = raw.chunk_size(max_chunk, align);
        // SAFETY: `CallerRange::new`'s contract keeps the range mapped until the returned
        // value, whose chunks release the imports when dropped, is dropped; the system's
        // pages it touches stay mapped while any byte of them is, and where the driver's
        // alignment is larger, the pages it takes in were checked above.
        let imported =
            unsafe { raw.import_range(base as *mut u8, end - base, chunk) }.map_err(fail)?;
        let mut chunks = Chunks {
            shared: device.shared.clone(),
            list: Vec::new(),
            pages: None,
        };
        chunks.adopt(imported, ptr..ptr + len);
        Ok(VulkanHost {
            pinning: VkPinning::Import,
            len,
            lead: ptr - base,
            pin_time: start.elapsed(),
            mapped: false,
            cpu_device: is_cpu(device),
            chunks: Arc::new(chunks),
        })
    }

    /// True for memory made by [`Self::mapped`].
    pub fn is_mapped(&self) -> bool {
        self.mapped
    }

    /// For mapped memory, a buffer over each chunk that a kernel binds (it keeps the memory
    /// alive while held), with the bytes of the memory it covers, in order; `None` for memory
    /// not made by [`Self::mapped`].
    pub fn device_buffers(&self) -> Option<Result<ChunkBuffers>> {
        self.mapped.then(|| {
            let (mut base, mut out) = (0, Vec::new());
            for c in &self.chunks.list {
                let end = (base + c.len).min(self.len).max(base);
                if base < end || out.is_empty() {
                    out.push((base..end, self.alias(c, end - base)?));
                }
                base += c.len;
            }
            Ok(out)
        })
    }

    /// A buffer over `len` bytes of chunk `c`'s memory, keeping the chunks alive.
    fn alias(&self, c: &Chunk, len: usize) -> Result<VulkanBuffer> {
        let shared = &self.chunks.shared;
        let backing = match self.pinning {
            VkPinning::Import => Backing::Import(c.ptr),
            VkPinning::HostVisible => Backing::HostVisible,
        };
        let raw = shared.raw.alias(c.buffer.memory, c.len, backing)?;
        let mut buffer = VulkanBuffer::adopt(shared, raw, len);
        buffer.keep = Some(self.chunks.clone());
        Ok(buffer)
    }
}

impl Chunks {
    fn import(&mut self, bytes: usize, max_chunk: Option<usize>) -> Result<()> {
        let huge = self.shared.huge_pages;
        let (pages, chunks) = self.shared.raw.import_pages(bytes, max_chunk, huge)?;
        let start = pages.as_ptr() as usize;
        self.pages = Some(pages);
        self.adopt(chunks, start..start + bytes.max(1));
        Ok(())
    }

    /// Takes imported chunks as this memory's, whose own bytes are `own` (addresses): the
    /// device's registry holds those alone, so that memories sharing a page find their own
    /// buffers.
    fn adopt(&mut self, imported: Vec<ImportedChunk>, own: Range<usize>) {
        for c in imported {
            let buffer = VulkanBuffer::adopt(&self.shared, c.raw, c.len);
            self.add(buffer, c.ptr, c.len, own.clone());
        }
    }

    fn host_visible(&mut self, bytes: usize, max_chunk: Option<usize>) -> Result<()> {
        let chunk = self.shared.raw.chunk_size(max_chunk, os::page_size());
        for at in (0..bytes.max(1)).step_by(chunk) {
            let len = chunk.min(bytes.max(1) - at);
            let buffer = VulkanBuffer::new(&self.shared, len, Backing::HostVisible)?;
            let ptr = buffer.mapped;
            self.add(buffer, ptr, len, ptr as usize..ptr as usize + len);
        }
        Ok(())
    }

    /// Takes `buffer` over `len` bytes at `ptr` as a chunk, the device's registry holding
    /// the part of it inside `own` (the memory's own bytes; a whole chunk of pinstream's).
    fn add(&mut self, buffer: VulkanBuffer, ptr: *mut u8, len: usize, own: Range<usize>) {
        let from = ptr as usize;
        let (lo, hi) = (from.max(own.start), (from + len).min(own.end));
        if lo < hi {
            self.shared.registry.add(lo, hi - lo, buffer.buffer, from);
        }
        self.list.push(Chunk { buffer, ptr, len });
    }
}

impl VulkanHost {
    /// How it was pinned.
    pub fn pinning(&self) -> VkPinning {
        self.pinning
    }

    /// True for a caller's memory registered ([`Self::register`]), not pinstream's own.
    pub fn is_registered(&self) -> bool {
        self.pinning == VkPinning::Import && self.chunks.pages.is_none()
    }

    /// Wall time pinning took.
    pub fn pin_time(&self) -> Duration {
        self.pin_time
    }

    /// Whether the driver pinned it: imports on a GPU are pinned by the extension's contract
    /// (the device reaches the caller's pages across the bus, so they stay resident and
    /// mapped for DMA); on a CPU device nothing needs pinning; the driver's host-visible
    /// memory is not claimed (pinstream has no basis that a driver pins it).
    pub fn pin_state(&self) -> PinState {
        match (self.cpu_device, self.pinning) {
            (true, _) => PinState::NotNeeded,
            (false, VkPinning::Import) => PinState::Pinned,
            (false, VkPinning::HostVisible) => PinState::Unknown,
        }
    }

    /// Driver allocations (imports) it is made of.
    pub fn chunk_count(&self) -> usize {
        self.chunks.list.len()
    }

    /// Its chunks, in order of address (for a program's own copy calls: the C library's
    /// `psVkHostGetChunks`). A registration covers the whole import-aligned pages the
    /// caller's range touches, so its chunks may start before the range and end past it.
    pub fn chunks(&self) -> Vec<HostChunk> {
        let chunk = |c: &Chunk| HostChunk {
            buffer: c.buffer.buffer,
            memory: c.buffer.memory,
            ptr: c.ptr,
            len: c.len,
        };
        self.chunks.list.iter().map(chunk).collect()
    }

    /// The `VkBuffer` over chunk `i` (for Vulkan's own copy calls in the benches, on memory
    /// pinned by [`Self::new`], which starts at its first chunk's start).
    pub(super) fn chunk_buffer(&self, i: usize) -> ash::vk::Buffer {
        self.chunks.list[i].buffer.buffer
    }

    /// The (pointer, length) of each chunk's part of `range` (bytes of the memory, which
    /// starts `lead` bytes into the first chunk).
    fn parts(&self, range: Range<usize>) -> std::result::Result<Vec<(*mut u8, usize)>, OutOfRange> {
        if range.start > range.end || range.end > self.len {
            return Err(OutOfRange {
                range,
                len: self.len,
            });
        }
        if range.is_empty() {
            // SAFETY: `lead` lies inside the first chunk (it is less than the alignment).
            return Ok(vec![(unsafe { self.chunks.list[0].ptr.add(self.lead) }, 0)]);
        }
        let range = range.start + self.lead..range.end + self.lead;
        let mut out = Vec::new();
        let mut base = 0;
        for c in &self.chunks.list {
            let (lo, hi) = (range.start.max(base), range.end.min(base + c.len));
            if lo < hi {
                // SAFETY: `lo - base` lies inside the chunk's mapped bytes.
                out.push((unsafe { c.ptr.add(lo - base) }, hi.saturating_sub(lo)));
            }
            base += c.len;
        }
        Ok(out)
    }
}

impl HostMemory for VulkanHost {
    fn len(&self) -> usize {
        self.len
    }

    fn slices(&self, range: Range<usize>) -> std::result::Result<Vec<&[u8]>, OutOfRange> {
        let parts = self.parts(range)?;
        // SAFETY: each part is mapped memory this value owns, borrowed for `&self`.
        Ok(parts
            .into_iter()
            .map(|(p, n)| unsafe { std::slice::from_raw_parts(p.cast_const(), n) })
            .collect())
    }

    fn slices_mut(
        &mut self,
        range: Range<usize>,
    ) -> std::result::Result<Vec<&mut [u8]>, OutOfRange> {
        let parts = self.parts(range)?;
        // SAFETY: as above, borrowed exclusively for `&mut self`; the parts do not overlap.
        Ok(parts
            .into_iter()
            .map(|(p, n)| unsafe { std::slice::from_raw_parts_mut(p, n) })
            .collect())
    }
}

/// A Vulkan failure of making host memory `pinning` of `bytes` as the fronts class it: an
/// import the driver refused is the mechanism's failure ([`HostError::Alloc`], with the
/// driver's words); any other is a failed call.
pub(crate) fn host_error(e: super::VulkanError, pinning: VkPinning, bytes: usize) -> HostError {
    match e {
        super::VulkanError::Import { .. } => HostError::Alloc {
            pinning: pinning.to_string(),
            kind: PinKind::Driver,
            bytes,
            source: e.into(),
        },
        e => HostError::Backend(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::mapped_binding;

    /// A binding stops at the device's range or at 1 GiB, whichever is smaller: NVIDIA's
    /// 4 GiB - 1 gives 1 GiB (larger bindings of imported memory read nothing there), and
    /// lavapipe's 128 MiB stays 128 MiB.
    #[test]
    fn bindings_stop_at_the_range_or_one_gib() {
        assert_eq!(mapped_binding((4 << 30) - 1), 1 << 30);
        assert_eq!(mapped_binding(2 << 30), 1 << 30);
        assert_eq!(mapped_binding(128 << 20), 128 << 20);
    }
}
