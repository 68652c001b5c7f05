//! The caller's host memory as a stream run borrows it: each range must lie inside one block
//! of the stream's API that the C library pinned (looked up in its registry).
//!
//! - An OpenCL stream's ranges come from `psHostAlloc` or `psHostRegister`, and are lent to
//!   the engine piece by piece along the block's chunks, so that no transfer crosses two
//!   registrations (which the NVIDIA driver runs at pageable speed).
//! - A Vulkan stream's come from `psVkHostAlloc` or `psVkHostRegister`, pinned for the
//!   caller's `VkDevice`. The stream runs on a device of its own, so each block is imported
//!   into that device too, once, on the first run over it ([`Borrowed::import_into`]). The
//!   import is a [`Guest`] of the block: it goes when the block is freed or the stream
//!   destroyed, and a run holds it until it ends.

use super::on::On;
use crate::error::{Failure, PS_ERROR_HOST_MEMORY_NOT_REGISTERED, PS_ERROR_INVALID_VALUE};
use crate::registry;
#[cfg(feature = "vulkan")]
pub(crate) use crate::registry::Guest;
use pinstream::engine::job::OutOfRange;
use pinstream::engine::HostMemory;
use pinstream::host::HostRegion;
use std::ops::Range;

/// A range the job names: its address and length, as the caller gave them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub ptr: usize,
    pub len: usize,
}

/// Caller memory lent to one run: its pieces (address, length) in order, each inside one
/// chunk of the pinned block. Addresses, not references: the header makes the caller keep the
/// memory allocated, pinned and untouched until the run ends.
pub(crate) struct Borrowed {
    pieces: Vec<(usize, usize)>,
    len: usize,
    /// A Vulkan block's imports into streams' devices, and the block's range.
    #[cfg(feature = "vulkan")]
    guests: Option<(registry::Guests, Range<usize>)>,
    /// The import into this stream's device the run copies through, held until it ends.
    #[cfg(feature = "vulkan")]
    held: Option<std::sync::Arc<dyn std::any::Any + Send + Sync>>,
}

/// Checks `span` as a job's range named `what`: not NULL, not empty, no wrap around the
/// address space (the registry lookup at the run checks that it is pinned).
pub(crate) fn span(ptr: *const std::ffi::c_void, len: usize, what: &str) -> Result<Span, Failure> {
    if ptr.is_null() {
        return Err(Failure::new(
            PS_ERROR_INVALID_VALUE,
            format!("{what}: the pointer is NULL"),
        ));
    }
    if len == 0 {
        return Err(Failure::new(
            PS_ERROR_INVALID_VALUE,
            format!("{what}: bytes is 0: pass the range's size"),
        ));
    }
    crate::api::range_of(ptr, len)
        .map_err(|f| Failure::new(f.code, format!("{what}: {}", f.detail)))?;
    Ok(Span {
        ptr: ptr as usize,
        len,
    })
}

/// `span` lent from the block of `on`'s API that pins it; refused where no such block holds
/// it whole, with the fix.
pub(crate) fn borrow(span: Span, what: &str, on: &On) -> Result<Borrowed, Failure> {
    match on {
        On::OpenCl(_) => borrow_cl(span, what),
        #[cfg(feature = "vulkan")]
        On::Vulkan(_) => borrow_vk(span, what),
    }
}

/// The refusal of `span` (named `what`), which no block of the calls `alloc` and `register`
/// holds whole (`why`).
fn unpinned(span: Span, what: &str, why: String, (alloc, register): (&str, &str)) -> Failure {
    let Span { ptr, len } = span;
    Failure::new(
        PS_ERROR_HOST_MEMORY_NOT_REGISTERED,
        format!("{what} ({ptr:#x}, {len} bytes) {why}: streams take pinned memory only; pin it with {register}, or allocate it with {alloc}"),
    )
}

/// Whether `len` bytes at `offset` of a block of `block_len` bytes at `start` lie inside it;
/// else why not.
fn inside(start: usize, block_len: usize, offset: usize, len: usize) -> Result<usize, String> {
    offset
        .checked_add(len)
        .filter(|&e| e <= block_len)
        .ok_or_else(|| {
            format!(
                "runs past the end of the pinned range {start:#x}..{:#x}",
                start + block_len
            )
        })
}

/// `f` of the block of `H`'s API that holds `span` (named `what`), under the registry's lock;
/// refused, naming `calls` (allocate, register) as the fix, where no such block holds it or
/// `f` says why it cannot be lent. A pointer in no block gets the registry's own detail,
/// which names another API's range holding it, if one does.
fn lend_from<H: registry::Host, T>(
    span: Span,
    what: &str,
    calls: (&str, &str),
    f: impl FnOnce(&registry::Block<H>) -> Result<T, String>,
) -> Result<T, Failure> {
    match registry::with_block(span.ptr, f) {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(why)) => Err(unpinned(span, what, why, calls)),
        Err(none) => Err(unpinned(span, what, none.detail, calls)),
    }
}

/// An OpenCL stream's `span`, cut at its block's chunks.
fn borrow_cl(span: Span, what: &str) -> Result<Borrowed, Failure> {
    let Span { ptr, len } = span;
    let calls = ("psHostAlloc", "psHostRegister(ctx, ptr, bytes, 0)");
    let pieces = lend_from(span, what, calls, |block: &registry::Block<HostRegion>| {
        let region = &block.host;
        let start = region.as_ptr().map_or(0, |p| p as usize);
        let offset = ptr - start;
        let end = inside(start, region.len(), offset, len)?;
        // Addresses only, waiting for nothing: this runs under the registry's lock, and
        // psStreamRunAsync waits for nothing (a batch copy into the block may sit behind a
        // user event on the caller's queue; the caller orders its own accesses).
        region
            .piece_addresses(offset..end)
            .map_err(|e| format!("cannot be lent: {e}"))
    })?;
    Ok(Borrowed {
        pieces,
        len,
        #[cfg(feature = "vulkan")]
        guests: None,
        #[cfg(feature = "vulkan")]
        held: None,
    })
}

/// A Vulkan stream's `span`, with its block's imports (the import into the stream's device
/// is found or made when the run starts: [`Borrowed::import_into`]).
#[cfg(feature = "vulkan")]
fn borrow_vk(span: Span, what: &str) -> Result<Borrowed, Failure> {
    use pinstream::backend::vulkan::{VkPinning, VulkanHost};
    let Span { ptr, len } = span;
    let calls = (
        "psVkHostAlloc on a VkDevice created with VK_EXT_external_memory_host",
        "psVkHostRegister",
    );
    let guests = lend_from(span, what, calls, |block: &registry::Block<VulkanHost>| {
        let Range { start, end } = block.range;
        inside(start, end - start, ptr - start, len)?;
        if block.host.pinning() == VkPinning::HostVisible {
            return Err(format!("lies in {start:#x}..{end:#x}, which psVkHostAlloc gave as the driver's host-visible memory (the VkDevice was created without VK_EXT_external_memory_host), and a stream cannot import that into its own device"));
        }
        Ok((block.guests.clone(), block.range.clone()))
    })?;
    Ok(Borrowed {
        pieces: vec![(ptr, len)],
        len,
        guests: Some(guests),
        held: None,
    })
}

/// A block's `range` imported again, into a device of pinstream's own (a Vulkan stream's:
/// this module), in chunks as `psVkHostRegister` imports.
#[cfg(feature = "vulkan")]
fn import_for_stream(
    device: &pinstream::backend::vulkan::VulkanDevice,
    range: std::ops::Range<usize>,
) -> Result<pinstream::backend::vulkan::VulkanHost, Failure> {
    use crate::api::max_chunk;
    use crate::error::PS_ERROR_NOT_PINNABLE;
    use crate::vulkan::pin_failure;
    use pinstream::backend::pinning::CallerRange;
    use pinstream::backend::vulkan::Vulkan;
    use pinstream::host::{HostApi, RegisterRequest};
    let request = RegisterRequest {
        max_chunk: max_chunk()?,
        measure_vram: false,
    };
    // SAFETY: `range` is a live block's (psVkHostAlloc's or psVkHostRegister's), which the
    // header keeps allocated while a run uses it; the import is dropped with the block or
    // the stream, and the pages it pinned stay pinned while it lives.
    let caller = unsafe { CallerRange::new(range.start as *mut u8, range.len()) };
    <Vulkan as HostApi>::register(device, caller, request).map_err(|e| {
        let f = pin_failure(e, "psVkHostAlloc", PS_ERROR_NOT_PINNABLE);
        Failure::new(
            f.code,
            format!(
                "importing {:#x}..{:#x} into the stream's own device: {}",
                range.start, range.end, f.detail
            ),
        )
    })
}

/// Removes stream `owner`'s imports from the blocks' lists it made them in (the stream is
/// being destroyed, its runs ended): each import goes once no run holds it.
#[cfg(feature = "vulkan")]
pub(crate) fn forget_guests(
    owner: usize,
    lists: Vec<std::sync::Weak<std::sync::Mutex<Vec<Guest>>>>,
) {
    for list in lists.iter().filter_map(std::sync::Weak::upgrade) {
        let gone: Vec<Guest> = {
            let mut l = list.lock().unwrap_or_else(|p| p.into_inner());
            let (gone, kept) = std::mem::take(&mut *l)
                .into_iter()
                .partition(|g| g.owner == owner);
            *l = kept;
            gone
        };
        // Released outside the list's lock (releasing imports calls the driver).
        drop(gone);
    }
}

impl Borrowed {
    /// Holds, for the run, the import of this range's block into the stream's `device`
    /// (stream `owner`'s): the one an earlier run made, else a new one of the whole block,
    /// kept among the block's guests. Returns the list it was added to, for the stream to
    /// empty when destroyed; `None` where nothing was added (an OpenCL range, or an import
    /// that was there).
    #[cfg(feature = "vulkan")]
    pub fn import_into(
        &mut self,
        device: &pinstream::backend::vulkan::VulkanDevice,
        owner: usize,
    ) -> Result<Option<std::sync::Weak<std::sync::Mutex<Vec<Guest>>>>, Failure> {
        let (Some((guests, range)), None) = (&self.guests, &self.held) else {
            return Ok(None);
        };
        // The block's list stays locked through an import, so that two runs never import
        // one block twice.
        let mut list = guests.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(g) = list.iter().find(|g| g.owner == owner) {
            self.held = Some(g.host.clone());
            return Ok(None);
        }
        let host: std::sync::Arc<dyn std::any::Any + Send + Sync> =
            std::sync::Arc::new(import_for_stream(device, range.clone())?);
        list.push(Guest {
            owner,
            host: host.clone(),
        });
        self.held = Some(host);
        Ok(Some(std::sync::Arc::downgrade(guests)))
    }

    /// The pieces of `range` (address, length), in order.
    fn spans(&self, range: Range<usize>) -> Result<Vec<(usize, usize)>, OutOfRange> {
        if range.start > range.end || range.end > self.len {
            let len = self.len;
            return Err(OutOfRange { range, len });
        }
        let mut out = Vec::new();
        let mut at = 0;
        for &(p, n) in &self.pieces {
            let (lo, hi) = (range.start.max(at), range.end.min(at + n));
            if lo < hi {
                out.push((p + (lo - at), hi - lo));
            }
            at += n;
        }
        Ok(out)
    }
}

impl HostMemory for Borrowed {
    fn len(&self) -> usize {
        self.len
    }

    fn slices(&self, range: Range<usize>) -> Result<Vec<&[u8]>, OutOfRange> {
        let spans = self.spans(range)?;
        // SAFETY: each piece lies inside a block pinstream pinned (checked when borrowed),
        // which the header makes the caller keep allocated and unwritten until the run ends,
        // with no batch copy into it in flight when the run was issued (`borrow` waits for none);
        // no range the run writes overlaps it (`handle::lend` refuses such a job), so no
        // `&mut` slice of the run aliases these bytes.
        Ok(spans
            .into_iter()
            .map(|(p, n)| unsafe { std::slice::from_raw_parts(p as *const u8, n) })
            .collect())
    }

    fn slices_mut(&mut self, range: Range<usize>) -> Result<Vec<&mut [u8]>, OutOfRange> {
        let spans = self.spans(range)?;
        // SAFETY: as above; the header also makes the caller leave the memory untouched
        // while the run writes it, and `handle::lend` refused a job where this range overlaps
        // any other of its ranges, so these are the only slices over these bytes meanwhile.
        Ok(spans
            .into_iter()
            .map(|(p, n)| unsafe { std::slice::from_raw_parts_mut(p as *mut u8, n) })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_cut_at_the_pieces() {
        let b = Borrowed {
            pieces: vec![(1000, 10), (5000, 20)],
            len: 30,
            #[cfg(feature = "vulkan")]
            guests: None,
            #[cfg(feature = "vulkan")]
            held: None,
        };
        assert_eq!(b.spans(0..30).unwrap(), [(1000, 10), (5000, 20)]);
        assert_eq!(b.spans(5..15).unwrap(), [(1005, 5), (5000, 5)]);
        assert_eq!(b.spans(12..14).unwrap(), [(5002, 2)]);
        assert!(b.spans(0..31).is_err());
    }

    #[test]
    fn null_empty_and_wrapping_spans_are_refused() {
        let p = 0x1000 as *const std::ffi::c_void;
        assert!(span(std::ptr::null(), 4, "x").is_err());
        assert!(span(p, 0, "x").is_err());
        assert!(span(p, usize::MAX, "x").is_err());
        assert_eq!(
            span(p, 4, "x").unwrap(),
            Span {
                ptr: 0x1000,
                len: 4
            }
        );
    }
}
