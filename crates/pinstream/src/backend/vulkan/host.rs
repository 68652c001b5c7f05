//! Host memory pinned with a Vulkan device, in chunks of at most `maxMemoryAllocationSize`
//! (and `maxBufferSize`), each a `VkBuffer` registered by address with the device so copies
//! find it: pinstream's own page-aligned memory imported with `VK_EXT_external_memory_host`
//! ([`VkPinning::Import`]), or the driver's host-visible memory, mapped, as ggml does
//! ([`VkPinning::HostVisible`], the fallback).

use super::device::{Backing, Shared, VulkanBuffer};
use super::{Result, VulkanDevice};
use crate::backend::lanes::{HostMemory, OutOfRange};
use crate::backend::os::{self, PageMap};
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

/// One chunk: its buffer and the host bytes it covers.
struct Chunk {
    buffer: VulkanBuffer,
    ptr: *mut u8,
    len: usize,
}

/// Host memory pinned with one Vulkan device.
pub struct VulkanHost {
    shared: Arc<Shared>,
    pinning: VkPinning,
    len: usize,
    pin_time: Duration,
    chunks: Vec<Chunk>,
    // Unmapped after the chunks' imports are freed.
    _pages: Option<PageMap>,
}

// SAFETY: the chunk pointers are this value's own memory, reached through `&self`/`&mut self`
// slices only, so sharing or sending it shares nothing else.
unsafe impl Send for VulkanHost {}
// SAFETY: as above.
unsafe impl Sync for VulkanHost {}

impl Drop for VulkanHost {
    fn drop(&mut self) {
        for c in &self.chunks {
            self.shared.registry.remove(c.buffer.buffer);
        }
    }
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
        let mut host = VulkanHost {
            shared: device.shared.clone(),
            pinning,
            len: bytes,
            pin_time: Duration::ZERO,
            chunks: Vec::new(),
            _pages: None,
        };
        match pinning {
            VkPinning::Import => host.import(bytes, max_chunk)?,
            VkPinning::HostVisible => host.host_visible(bytes, max_chunk)?,
        }
        host.pin_time = start.elapsed();
        Ok(host)
    }

    fn import(&mut self, bytes: usize, max_chunk: Option<usize>) -> Result<()> {
        let (pages, chunks) = self.shared.raw.import_pages(bytes, max_chunk)?;
        self._pages = Some(pages);
        for c in chunks {
            let buffer = VulkanBuffer::adopt(&self.shared, c.raw, c.len);
            self.add(buffer, c.ptr, c.len);
        }
        Ok(())
    }

    fn host_visible(&mut self, bytes: usize, max_chunk: Option<usize>) -> Result<()> {
        let chunk = self.shared.raw.chunk_size(max_chunk, os::page_size());
        for at in (0..bytes.max(1)).step_by(chunk) {
            let len = chunk.min(bytes.max(1) - at);
            let buffer = VulkanBuffer::new(&self.shared, len, Backing::HostVisible)?;
            let ptr = buffer.mapped;
            self.add(buffer, ptr, len);
        }
        Ok(())
    }

    fn add(&mut self, buffer: VulkanBuffer, ptr: *mut u8, len: usize) {
        self.shared.registry.add(ptr, len, buffer.buffer);
        self.chunks.push(Chunk { buffer, ptr, len });
    }

    /// How it was pinned.
    pub fn pinning(&self) -> VkPinning {
        self.pinning
    }

    /// Wall time pinning took.
    pub fn pin_time(&self) -> Duration {
        self.pin_time
    }

    /// Driver allocations (imports) it is made of.
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// The (pointer, length) of each chunk's part of `range`.
    fn parts(&self, range: Range<usize>) -> std::result::Result<Vec<(*mut u8, usize)>, OutOfRange> {
        if range.start > range.end || range.end > self.len {
            return Err(OutOfRange {
                range,
                len: self.len,
            });
        }
        if range.is_empty() {
            return Ok(vec![(self.chunks[0].ptr, 0)]);
        }
        let mut out = Vec::new();
        let mut base = 0;
        for c in &self.chunks {
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
