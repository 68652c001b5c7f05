//! What a region says of itself (its pin, strategy, chunks) and its bytes as slices, each
//! handed out only once the transfers in flight on it are waited for.

use super::HostRegion;
use crate::backend::opencl::host::{PinState, Strategy, StrategyReason, VramCost};
use crate::backend::opencl::ClError;
use crate::backend::pinning::HostError;
use crate::sync::lock;
use std::ops::Range;
use std::time::Duration;

impl HostRegion {
    /// Whether the driver pinned the memory for DMA; see [`Self::pin_note`] for the basis.
    /// A progressive pin is waited for first; if its background part failed, the region is
    /// not pinned as a whole ([`PinState::NotPinned`]; [`Self::chunk_pins`] says which chunks
    /// are).
    pub fn pin_state(&self) -> PinState {
        match &self.background {
            Some(b) if b.failure().is_some() => PinState::NotPinned,
            _ => self.pin,
        }
    }

    /// Why [`Self::pin_state`] says what it says (the measurement or driver source behind a
    /// pin, or why there is none).
    pub fn pin_note(&self) -> &str {
        &self.pin_note
    }

    /// The VRAM the pinning cost, where measured (see `measure_vram` in the options).
    pub fn vram_cost(&self) -> &VramCost {
        &self.vram
    }

    /// True when pinstream allocated the memory (and frees it on drop); false for memory the
    /// caller registered ([`Self::register`]), which is never freed here.
    pub fn owns_memory(&self) -> bool {
        self.owned
    }

    /// The first byte of the region, where it is contiguous (for C callers and other raw
    /// users). Writing through it while a transfer of this region is in flight, or after the
    /// region is dropped, is undefined behaviour; [`Self::wait`] settles the transfers.
    pub fn as_ptr(&self) -> Option<*mut u8> {
        self.contiguous.then(|| self.chunks[0].ptr)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length region (never: regions have at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The strategy that made the region.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// Why that strategy (forced, or `auto`'s reasoning and fallbacks), in words.
    pub fn reason(&self) -> String {
        self.reason.to_string()
    }

    /// Why that strategy, as data.
    pub fn strategy_reason(&self) -> &StrategyReason {
        &self.reason
    }

    /// Wall time it took to allocate and pin.
    pub fn pin_time(&self) -> Duration {
        self.pin_time
    }

    /// Of [`Self::pin_time`], the part spent mapping and making pages resident (for
    /// `register`, `mlock` and `pageable`; the rest is registration or locking).
    pub fn resident_time(&self) -> Option<Duration> {
        self._alloc.resident_time()
    }

    /// True when [`Self::as_slice`] gives the whole region.
    pub fn is_contiguous(&self) -> bool {
        self.contiguous
    }

    /// Number of chunks (driver allocations or registrations).
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// The byte range each chunk covers.
    pub fn chunk_ranges(&self) -> Vec<Range<usize>> {
        let mut off = 0;
        self.chunks
            .iter()
            .map(|c| {
                off += c.len;
                off - c.len..off
            })
            .collect()
    }

    /// Waits for every transfer in flight on this region: finishes each queue that
    /// `upload` or `download` used since the last wait (`clFinish`), and waits for the work a
    /// batch call enqueued on its caller's queue (its event only, not the queue); the first
    /// queue's failure, if any. A failed transfer or batch kernel is reported by its own
    /// event, which `upload`, `download` and the batch call return, not here.
    pub fn wait(&self) -> Result<(), ClError> {
        // The lock is held while waiting: another thread's accessor must not find the list
        // empty while these transfers still run (it waits here instead).
        let mut f = lock(&self.in_flight);
        let first = f
            .queues
            .iter()
            .map(|q| q.finish())
            .fold(Ok(()), Result::and);
        for (_, e) in &f.events {
            // Ended either way once this returns; a failure is the event's own to report.
            let _ = e.wait();
        }
        f.queues.clear();
        f.events.clear();
        first
    }

    /// Waits for the background pin, if any, then for the transfers in flight.
    pub(super) fn settle(&self) {
        if let Some(b) = &self.background {
            b.settle();
        }
        self.settle_transfers();
    }

    pub(super) fn settle_transfers(&self) {
        if let Err(e) = self.wait() {
            tracing::warn!("a transfer on this region failed: {e}");
        }
    }

    /// The whole region as one slice, where it is contiguous.
    pub fn as_slice(&self) -> Option<&[u8]> {
        self.settle();
        // SAFETY: contiguous chunks are adjacent pieces of one live mapping of `len` bytes;
        // no transfer is in flight (settled) and `&self` excludes `download`.
        self.contiguous
            .then(|| unsafe { std::slice::from_raw_parts(self.chunks[0].ptr, self.len) })
    }

    /// The whole region as one mutable slice, where it is contiguous.
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        self.settle();
        // SAFETY: as in `as_slice`; `&mut self` makes the access exclusive.
        self.contiguous
            .then(|| unsafe { std::slice::from_raw_parts_mut(self.chunks[0].ptr, self.len) })
    }

    /// Chunk `i`.
    pub fn chunk(&self, i: usize) -> &[u8] {
        self.settle();
        let c = self.chunks[i];
        // SAFETY: the chunk is live memory of `c.len` bytes owned by `alloc`; settled.
        unsafe { std::slice::from_raw_parts(c.ptr, c.len) }
    }

    /// Every chunk, mutable, in order (disjoint slices, usable from several threads).
    pub fn chunks_mut(&mut self) -> Vec<&mut [u8]> {
        self.settle();
        // SAFETY: chunks are disjoint live ranges; `&mut self` makes access exclusive.
        self.chunks
            .iter()
            .map(|c| unsafe { std::slice::from_raw_parts_mut(c.ptr, c.len) })
            .collect()
    }

    /// Every chunk, in order.
    pub fn chunks(&self) -> Vec<&[u8]> {
        (0..self.chunks.len()).map(|i| self.chunk(i)).collect()
    }

    /// The region as a slice of `T` (`f32`, `half::f16`, `u8`, …), where it is contiguous and
    /// its length is a multiple of `size_of::<T>()`.
    pub fn typed<T: bytemuck::Pod>(&self) -> Option<&[T]> {
        self.as_slice()
            .and_then(|s| bytemuck::try_cast_slice(s).ok())
    }

    /// Mutable typed view; see [`Self::typed`].
    pub fn typed_mut<T: bytemuck::Pod>(&mut self) -> Option<&mut [T]> {
        self.as_mut_slice()
            .and_then(|s| bytemuck::try_cast_slice_mut(s).ok())
    }

    /// The bytes of `range`, one slice per chunk it crosses.
    pub fn slices(&self, range: Range<usize>) -> Result<Vec<&[u8]>, HostError> {
        self.settle();
        let parts = self.pieces(range)?;
        // SAFETY: each piece is live memory inside one chunk; settled; `&self` excludes writes.
        Ok(parts
            .into_iter()
            .map(|(p, n, _)| unsafe { std::slice::from_raw_parts(p as *const u8, n) })
            .collect())
    }

    /// The bytes of `range`, mutable, one slice per chunk it crosses.
    pub fn slices_mut(&mut self, range: Range<usize>) -> Result<Vec<&mut [u8]>, HostError> {
        self.settle();
        let parts = self.pieces(range)?;
        // SAFETY: pieces are disjoint live ranges; settled; `&mut self` makes access exclusive.
        Ok(parts
            .into_iter()
            .map(|(p, n, _)| unsafe { std::slice::from_raw_parts_mut(p, n) })
            .collect())
    }

    /// The address and length of each chunk piece of `range`, in order, without waiting for
    /// the transfers in flight on the region, as [`Self::slices`] does: for a caller that
    /// orders its own accesses (the C library's streams leave that to their caller, as CUDA's
    /// streams wait for no other stream), and never waits holding a lock others need. A
    /// progressive pin's chunks still being pinned are given as they are: [`Self::slices`]
    /// waits for them, this does not.
    pub fn piece_addresses(&self, range: Range<usize>) -> Result<Vec<(usize, usize)>, HostError> {
        let parts = self.pieces(range)?;
        Ok(parts.into_iter().map(|(p, n, _)| (p as usize, n)).collect())
    }

    fn pieces(&self, range: Range<usize>) -> Result<Vec<(*mut u8, usize, usize)>, HostError> {
        let mut out = Vec::new();
        self.each_piece(range, |p, n, rel| {
            out.push((p, n, rel));
            Ok::<(), HostError>(())
        })?;
        Ok(out)
    }

    /// Calls `f(pointer, length, offset in range)` for each chunk piece of `range`, in order,
    /// without allocating (the small-transfer path runs through here).
    pub(super) fn each_piece<E: From<HostError>>(
        &self,
        range: Range<usize>,
        mut f: impl FnMut(*mut u8, usize, usize) -> Result<(), E>,
    ) -> Result<(), E> {
        if range.start > range.end || range.end > self.len {
            return Err(HostError::Range {
                start: range.start,
                end: range.end,
                len: self.len,
            }
            .into());
        }
        let mut start = 0;
        for c in &self.chunks {
            let (lo, hi) = (range.start.max(start), range.end.min(start + c.len));
            if lo < hi {
                // SAFETY: lo - start < c.len, inside the chunk.
                f(unsafe { c.ptr.add(lo - start) }, hi - lo, lo - range.start)?;
            }
            start += c.len;
            if start >= range.end {
                break;
            }
        }
        Ok(())
    }
}
