//! [`HostRegion`]: pinned host memory of any size, one range or a list of chunks, with the
//! transfers in flight kept inside it.

mod access;
mod mapped;
pub mod progressive;
mod release;
mod transfer;

pub use release::{Freeing, Released};

use super::pin::{self, PinState, VramCost};
use super::{
    alloc_error, alloc_failed, auto_order_for, smallest_max_alloc, Chosen, PinOptions, Strategy,
    StrategyChoice, StrategyReason, ZeroCopy,
};
use crate::backend::opencl::hostmem::{register_in, AllocError, HostAlloc, PageHold, RawChunk};
use crate::backend::opencl::{Context, Event, MemObject, Queue};
use crate::backend::os::Residency;
use crate::backend::pinning::{check_size, round_to_pages, HostError};
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

/// The memory strategy `s` makes: `size` bytes in chunks of at most `chunk`, made resident
/// as `resident` says and placed as `place` says (where the strategy maps its own pages).
fn allocate(
    ctx: &Context,
    s: Strategy,
    size: usize,
    chunk: usize,
    resident: Residency,
    place: &[(Range<usize>, u32)],
) -> Result<HostAlloc, AllocError> {
    let pages = |resident, hold| HostAlloc::pages(ctx, size, chunk, resident, place, hold);
    match s {
        Strategy::Register => pages(resident, PageHold::Register),
        Strategy::Mlock => pages(resident, PageHold::Mlock),
        Strategy::Pageable => {
            let untouched = Residency {
                huge_pages: false,
                touch_threads: 0,
            };
            pages(untouched, PageHold::Pageable)
        }
        Strategy::NvHost => HostAlloc::mapped(ctx, size, chunk, true),
        Strategy::AllocHostPtr => HostAlloc::mapped(ctx, size, chunk, false),
        Strategy::Svm => HostAlloc::svm(ctx, size, chunk),
        Strategy::IntelUsm => HostAlloc::usm(ctx, size, chunk),
    }
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
        let make = || allocate(ctx, s, size, chunk, resident, place);
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
