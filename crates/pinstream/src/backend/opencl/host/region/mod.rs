//! [`HostRegion`]: pinned host memory of any size, one range or a list of chunks, with the
//! transfers in flight kept inside it.

mod mapped;
pub mod progressive;
mod release;

pub use release::{Freeing, Released};

use super::pin::{self, PinState, VramCost};
use super::{
    alloc_error, alloc_failed, auto_order_for, smallest_max_alloc, Chosen, PinOptions, Strategy,
    StrategyChoice, StrategyReason, ZeroCopy,
};
use crate::backend::opencl::hostmem::{register_in, HostAlloc, PageHold, RawChunk};
use crate::backend::opencl::{ClError, Context, DeviceBuffer, Event, MemObject, Queue};
use crate::backend::os::Residency;
use crate::backend::pinning::{check_size, round_to_pages, HostError};
use crate::sync::lock;
use std::ops::Range;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a constructor made besides the memory: the record of how it was pinned (strategy,
/// reason, time, pin state, VRAM cost) that the region keeps and reports.
pub(crate) struct PinRecord {
    pub len: usize,
    pub strategy: Strategy,
    pub reason: StrategyReason,
    pub pin_time: Duration,
    pub pin: PinState,
    pub pin_note: String,
    pub vram: VramCost,
    pub owned: bool,
}

/// What may still read or write a region on a device, waited for before the region hands out
/// a slice or frees its memory.
#[derive(Default)]
struct InFlight {
    /// The queues that [`HostRegion::upload`] and [`HostRegion::download`] ran on, one
    /// reference each, finished: a transfer costs no event reference and no bookkeeping beyond
    /// a look in this short list (issue 13: an event kept per transfer was the small-transfer
    /// path's overhead).
    queues: Vec<Queue>,
    /// Per caller's queue (a reference that never finishes it, [`Queue::named`]), the event of the last work a batch call (the
    /// zero-copy gather) enqueued there on this region, waited for instead of the queue:
    /// finishing the queue would also wait for the caller's other work, which may wait on
    /// something only the caller sets after freeing (a user event), and never end. Every
    /// `Queue` is in order (adopted ones are checked), so the last event completes after the
    /// earlier calls' on that queue: one event per queue, replaced, with no driver call.
    events: Vec<(Queue, Event)>,
}

/// Pinned (or, for baselines, unpinned) host memory of any size.
pub struct HostRegion {
    /// What may still use this region on a device: the queues of its transfers, and the
    /// events of batch calls on their callers' queues ([`InFlight`]).
    in_flight: Mutex<InFlight>,
    pub(super) chunks: Vec<RawChunk>,
    len: usize,
    strategy: Strategy,
    contiguous: bool,
    pin_time: Duration,
    reason: StrategyReason,
    pin: PinState,
    pin_note: String,
    vram: VramCost,
    owned: bool,
    /// How kernels reach the memory in place, for mapped memory ([`HostRegion::mapped`]).
    zero_copy: Option<ZeroCopy>,
    /// Registrations of the same memory with other contexts; dropped before the memory.
    shared: Vec<ContextRegistration>,
    /// A progressive pin's background work and registrations; dropped (joined) before the
    /// memory.
    pub(super) background: Option<progressive::Background>,
    // Dropped last: the memory outlives every pointer above.
    _alloc: HostAlloc,
}

/// The region's registration with one more context ([`HostRegion::register_with`]).
struct ContextRegistration {
    device: String,
    pin: PinState,
    vram: VramCost,
    _registrations: Vec<MemObject>,
}

/// What one more context's registration of a region amounts to.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SharedRegistration {
    /// The context's device (`index (name)`).
    pub device: String,
    /// Whether that device's driver pins it.
    pub pin: PinState,
    /// What the registration cost in VRAM on that device, where measured.
    pub vram: VramCost,
}

// SAFETY: the chunk pointers point into `alloc`, which the region owns exclusively; shared
// access (`&self`) only reads the memory, exclusive access (`&mut self`) writes it, and the
// queues and events with transfers in flight (behind a Mutex) are waited for before either
// hands out a slice.
unsafe impl Send for HostRegion {}
// SAFETY: as above.
unsafe impl Sync for HostRegion {}

impl HostRegion {
    /// Pins `size` bytes on `ctx`'s device as `opts` says.
    pub fn new(ctx: &Context, size: usize, opts: &PinOptions) -> Result<Self, HostError> {
        crate::backend::check_injected_fault()?;
        check_size(size)?;
        match opts.strategy {
            StrategyChoice::Forced(s) => {
                s.offered_by_all(ctx.devices())
                    .map_err(|why| HostError::Unsupported {
                        pinning: s.to_string(),
                        device: format!("{} ({})", ctx.device().index, ctx.device().name),
                        why,
                    })?;
                let reason = StrategyReason::new(Chosen::Forced(s));
                Self::with_strategy(ctx, size, s, opts, reason)
            }
            StrategyChoice::Auto => Self::auto(ctx, size, opts),
        }
    }

    fn auto(ctx: &Context, size: usize, opts: &PinOptions) -> Result<Self, HostError> {
        let (order, rule) = auto_order_for(ctx.devices());
        let mut tried = Vec::new();
        for s in order {
            let reason = StrategyReason::new(Chosen::Auto {
                rule: rule.clone(),
                taken: s,
                fell_back_after: tried.clone(),
            });
            match Self::with_strategy(ctx, size, s, opts, reason) {
                Ok(r) => return Ok(r),
                Err(e) => tried.push(format!("{s}: {e}")),
            }
        }
        Err(HostError::AutoFailed { bytes: size, tried })
    }

    fn with_strategy(
        ctx: &Context,
        size: usize,
        s: Strategy,
        opts: &PinOptions,
        reason: StrategyReason,
    ) -> Result<Self, HostError> {
        let max_alloc = smallest_max_alloc(ctx);
        let chunk = opts.max_chunk.map_or(max_alloc, |c| c.clamp(1, max_alloc));
        let chunk = round_to_pages(chunk);
        let threads = opts.touch_threads.unwrap_or_else(crate::backend::os::cores);
        let resident = Residency {
            huge_pages: true,
            touch_threads: threads,
        };
        let place = &opts.placement[..];
        if let Some(plan) = progressive::plan_for(s, size, chunk, opts) {
            return Self::progressive(ctx, size, plan, opts, threads, reason);
        }
        if opts.contiguous && !s.contiguous() && size > chunk {
            return Err(HostError::NotContiguous {
                pinning: s.to_string(),
                bytes: size,
                chunk,
            });
        }
        let start = Instant::now();
        let make = || match s {
            Strategy::Register => {
                HostAlloc::pages(ctx, size, chunk, resident, place, PageHold::Register)
            }
            Strategy::Mlock => HostAlloc::pages(ctx, size, chunk, resident, place, PageHold::Mlock),
            Strategy::Pageable => HostAlloc::pages(
                ctx,
                size,
                chunk,
                Residency {
                    huge_pages: false,
                    touch_threads: 0,
                },
                place,
                PageHold::Pageable,
            ),
            Strategy::NvHost => HostAlloc::mapped(ctx, size, chunk, true),
            Strategy::AllocHostPtr => HostAlloc::mapped(ctx, size, chunk, false),
            Strategy::Svm => HostAlloc::svm(ctx, size, chunk),
            Strategy::IntelUsm => HostAlloc::usm(ctx, size, chunk),
        };
        let (made, vram) = if opts.measure_vram {
            pin::measure(ctx.devices(), make)
        } else {
            (make(), VramCost::NotMeasured)
        };
        let alloc = made.map_err(|e| alloc_error(s, size, e))?;
        let (pin, pin_note) = pin::pin_state(s, ctx.devices());
        let record = PinRecord {
            len: size,
            strategy: s,
            reason,
            pin_time: start.elapsed(),
            pin,
            pin_note,
            vram,
            owned: true,
        };
        Ok(Self::from_alloc(alloc, record))
    }

    pub(crate) fn from_alloc(alloc: HostAlloc, record: PinRecord) -> Self {
        HostRegion {
            in_flight: Mutex::new(InFlight::default()),
            contiguous: alloc.is_contiguous(),
            chunks: alloc.chunks(),
            len: record.len,
            strategy: record.strategy,
            pin_time: record.pin_time,
            reason: record.reason,
            pin: record.pin,
            pin_note: record.pin_note,
            vram: record.vram,
            owned: record.owned,
            zero_copy: None,
            shared: Vec::new(),
            background: None,
            _alloc: alloc,
        }
    }

    /// Registers the region's memory with one more context, so that its devices read it
    /// pinned too (several GPUs streaming one region: each device reads through a
    /// registration in its own context). One `USE_HOST_PTR` registration per chunk, with the
    /// region's own chunk boundaries (a transfer that crosses two registrations runs at
    /// pageable speed on NVIDIA, and pinstream's transfers split at chunk boundaries). With
    /// `measure_vram`, its VRAM cost is measured on that context's devices. Only regions made
    /// or registered with the `register` strategy can be shared: driver-allocated memory
    /// (`nv-host`, `alloc-host-ptr`, `svm`, `intel-usm`) belongs to its own context, and the
    /// baselines (`mlock`, `pageable`) pin nothing.
    pub fn register_with(&mut self, ctx: &Context, measure_vram: bool) -> Result<(), HostError> {
        let device = format!("{} ({})", ctx.device().index, ctx.device().name);
        if self.strategy != Strategy::Register {
            return Err(HostError::Unsupported {
                pinning: self.strategy.to_string(),
                device,
                why: "only memory made or registered with `register` can be registered with a second context".into(),
            });
        }
        self.settle();
        let chunks = self.chunks.clone();
        // SAFETY: the chunks are live, resident pieces of this region's memory, which `_alloc`
        // keeps until after `shared` (field order) is dropped.
        let make = || unsafe { register_in(ctx, &chunks) };
        let (made, vram) = if measure_vram {
            pin::measure(ctx.devices(), make)
        } else {
            (make(), VramCost::NotMeasured)
        };
        let regs = made.map_err(|e| alloc_failed(self.strategy, self.len, e))?;
        self.shared.push(ContextRegistration {
            device,
            pin: pin::pin_state(Strategy::Register, ctx.devices()).0,
            vram,
            _registrations: regs,
        });
        Ok(())
    }

    /// The region's registrations with other contexts ([`Self::register_with`]), in order.
    pub fn shared_with(&self) -> Vec<SharedRegistration> {
        self.shared
            .iter()
            .map(|s| SharedRegistration {
                device: s.device.clone(),
                pin: s.pin,
                vram: s.vram.clone(),
            })
            .collect()
    }

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
    fn settle(&self) {
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
    fn each_piece<E: From<HostError>>(
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

    /// Notes that `queue` may now have transfers in flight on this region (a reference to
    /// it the first time; nothing after).
    pub(crate) fn touch(&self, queue: &Queue) -> Result<(), ClError> {
        let mut f = lock(&self.in_flight);
        if !f.queues.iter().any(|q| q.raw == queue.raw) {
            f.queues.push(queue.retained()?);
        }
        Ok(())
    }

    /// Runs `enqueue`, which enqueues work on this region's memory on `queue`, a queue that
    /// is not ours (a batch call's caller's), and keeps the event it returns as `queue`'s
    /// last, which is all that [`Self::wait`] and `Drop` then wait for: never the caller's
    /// queue. The lock is held while `enqueue` runs, so no other thread finds the region idle
    /// in between; a queue new to the region is retained first, so a failure there enqueues
    /// nothing.
    pub(crate) fn in_flight_until<E: From<ClError>>(
        &self,
        queue: &Queue,
        enqueue: impl FnOnce() -> Result<Event, E>,
    ) -> Result<Event, E> {
        let mut f = lock(&self.in_flight);
        let at = match f.events.iter().position(|(q, _)| q.raw == queue.raw) {
            Some(at) => at,
            None => {
                let held = queue.named()?;
                let done = enqueue()?;
                f.events.push((held, done.clone()));
                return Ok(done);
            }
        };
        let done = enqueue()?;
        f.events[at].1 = done.clone();
        Ok(done)
    }

    /// Enqueues a copy of `range` of this region into `dst` at `dst_offset` on `queue`, after
    /// `wait`. Returns one event per chunk crossed.
    pub fn upload(
        &self,
        queue: &Queue,
        range: Range<usize>,
        dst: &DeviceBuffer,
        dst_offset: usize,
        wait: &[&Event],
    ) -> Result<Vec<Event>, HostError> {
        // SAFETY: each piece is inside this region; `queue` is in `queues` before anything is
        // enqueued, and nothing hands out a mutable slice or frees the memory before every
        // queue there is finished.
        self.enqueue_pieces(queue, range, |ptr, n, rel| unsafe {
            // Saturated: the driver refuses an offset past the buffer (never a wrapped one).
            queue.write_raw(dst, dst_offset.saturating_add(rel), ptr, n, wait)
        })
    }

    /// Enqueues a copy of `src` at `src_offset` into `range` of this region on `queue`, after
    /// `wait`. Returns one event per chunk crossed.
    pub fn download(
        &mut self,
        queue: &Queue,
        src: &DeviceBuffer,
        src_offset: usize,
        range: Range<usize>,
        wait: &[&Event],
    ) -> Result<Vec<Event>, HostError> {
        // SAFETY: as in `upload`; `&mut self` also excludes every outstanding slice.
        self.enqueue_pieces(queue, range, |ptr, n, rel| unsafe {
            queue.read_raw(src, src_offset.saturating_add(rel), ptr, n, wait)
        })
    }

    /// Enqueues one command per chunk piece of `range` on `queue`, which is tracked first, so
    /// a later piece's failure leaves the earlier ones waited for by `wait` and `Drop`.
    fn enqueue_pieces(
        &self,
        queue: &Queue,
        range: Range<usize>,
        mut enqueue: impl FnMut(*mut u8, usize, usize) -> Result<Event, ClError>,
    ) -> Result<Vec<Event>, HostError> {
        self.wait_pinned(range.clone())?;
        self.touch(queue)?;
        let mut events = Vec::with_capacity(1);
        self.each_piece(range, |ptr, n, rel| {
            events.push(enqueue(ptr, n, rel)?);
            Ok::<(), HostError>(())
        })?;
        Ok(events)
    }
}

impl Drop for HostRegion {
    fn drop(&mut self) {
        // The device may still be using the memory: wait before `alloc` frees it. A
        // progressive pin's thread is stopped and joined when `background` drops, before
        // `alloc` (field order).
        self.settle_transfers();
    }
}

impl std::fmt::Debug for HostRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostRegion")
            .field("len", &self.len)
            .field("strategy", &self.strategy)
            .field("chunks", &self.chunks.len())
            .field("contiguous", &self.contiguous)
            .field("zero_copy", &self.zero_copy)
            .finish()
    }
}
