//! Pinning as the stream goes (issue 13): the first chunk of a `register` region is made
//! resident and registered before [`HostRegion::new`] returns, the others on a
//! background thread while the caller streams; a run waits, block by block, for the chunk
//! that holds the block ([`ChunkGate`], a condition variable).
//!
//! The chunks follow the stream's blocks ([`chunk_plan`]): NVIDIA's driver runs a transfer
//! that crosses two `USE_HOST_PTR` registrations at pageable speed (7 GB/s instead of 51,
//! bench/results/h200/straddle/), so every chunk is a whole number of blocks and no block
//! straddles two. The first chunk is one block (the first block moves as soon as it is
//! pinned); each next one doubles, up to the largest registration.

use super::PinRecord;
use crate::backend::api::HostSpan;
use crate::backend::lanes::{Gate, HostView};
use crate::backend::opencl::host::{
    alloc_error, pin, HostRegion, PinOptions, Strategy, StrategyReason, VramCost,
};
use crate::backend::opencl::hostmem::{register_one, AllocError, HostAlloc};
use crate::backend::opencl::{pin_ceiling, ClError, Context, MemObject};
use crate::backend::os;
use crate::backend::pinning::{Fill, HostError};
use serde::Serialize;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// The chunks of a progressive pin of `len` bytes read by blocks of `block` bytes, with
/// registrations of at most `max_chunk` bytes: one block, then twice as many blocks each
/// time up to the most whole blocks `max_chunk` holds; the last chunk takes the rest. Empty
/// when no progressive plan exists: a block of 0 bytes, larger than `max_chunk`, or not a
/// multiple of `page` (chunk boundaries must fall on pages and on blocks).
pub fn chunk_plan(len: usize, block: usize, max_chunk: usize, page: usize) -> Vec<Range<usize>> {
    if block == 0 || block > max_chunk || !block.is_multiple_of(page.max(1)) {
        return Vec::new();
    }
    let most = max_chunk / block;
    let (mut out, mut at, mut blocks) = (Vec::new(), 0, 1);
    while at < len {
        // `blocks * block` is at most `max_chunk`.
        let end = len.min(at.saturating_add(blocks * block));
        out.push(at..end);
        at = end;
        blocks = (blocks * 2).min(most);
    }
    out
}

/// The progressive plan for a region of `size` bytes by strategy `s` with registrations of
/// at most `chunk` bytes, where `opts` asks for one and one applies: `register` (the only
/// strategy whose pinning is per chunk and ours to pace; `mlock` locks the whole mapping at
/// once, the driver-allocated strategies allocate their own chunks), no NUMA placement (it
/// binds pages before any touch, for the whole region), and more than one chunk.
pub(super) fn plan_for(
    s: Strategy,
    size: usize,
    chunk: usize,
    opts: &PinOptions,
) -> Option<Vec<Range<usize>>> {
    let p = opts.progressive.as_ref()?;
    if up_front_with(s).is_some() || !opts.placement.is_empty() {
        return None;
    }
    let plan = chunk_plan(size, p.block_bytes, chunk, os::page_size());
    (plan.len() > 1).then_some(plan)
}

/// Why memory made by strategy `s` is pinned up front even when progressive pinning is asked
/// for, if it is: only `register` (memory pinstream owns, registered chunk by chunk) can pin a
/// chunk at a time; the others allocate or lock the whole region in one call.
pub fn up_front_with(s: Strategy) -> Option<String> {
    (s != Strategy::Register).then(|| {
        format!("with strategy {s} (only register pins chunk by chunk; {s} pins the whole region in one call)")
    })
}

impl HostRegion {
    /// A `register` region pinned progressively along `plan` (see [`crate::backend::pinning::Progressive`]).
    pub(super) fn progressive(
        ctx: &Context,
        size: usize,
        plan: Vec<Range<usize>>,
        opts: &PinOptions,
        threads: usize,
        reason: StrategyReason,
    ) -> Result<Self, HostError> {
        let start = Instant::now();
        let fill = opts.progressive.as_ref().and_then(|p| p.fill.clone());
        let parts = plan.iter().map(|r| (r.start, r.len())).collect();
        let s = Strategy::Register;
        let alloc = HostAlloc::pages_untouched(size, parts).map_err(|e| alloc_error(s, size, e))?;
        let base = alloc.chunks()[0].ptr;
        let made = || {
            // SAFETY: `alloc` is our fresh mapping of `size` bytes, handed to nobody; the
            // region drops the background (joining its thread, releasing its registrations)
            // before `alloc` (field order).
            unsafe { Background::start(ctx, base, plan, fill, threads, start) }
        };
        let (made, vram) = if opts.measure_vram {
            pin::measure(ctx.devices(), made)
        } else {
            (made(), VramCost::NotMeasured)
        };
        let background = made.map_err(|e| alloc_error(s, size, e))?;
        let (pin, pin_note) = pin::pin_state(s, ctx.devices());
        let record = PinRecord {
            len: size,
            strategy: s,
            reason: StrategyReason {
                progressive: true,
                ..reason
            },
            pin_time: start.elapsed(),
            pin,
            pin_note,
            vram,
            owned: true,
        };
        let mut region = Self::from_alloc(alloc, record);
        region.background = Some(background);
        Ok(region)
    }

    /// True for a region pinned progressively ([`PinOptions::progressive`]): its
    /// [`Self::pin_time`] and VRAM cost cover the first chunk only, the rest is pinned in
    /// the background ([`Self::chunk_pins`]).
    pub fn is_progressive(&self) -> bool {
        self.background.is_some()
    }

    /// For a progressive pin: each chunk pinned so far, in order, with its timing, and the
    /// failure that stopped the others, if any. Empty for a region pinned up front.
    pub fn chunk_pins(&self) -> (Vec<ChunkPin>, Option<String>) {
        self.background
            .as_ref()
            .map(Background::pins)
            .unwrap_or_default()
    }

    /// Waits (without spinning) until the chunks holding `range` are pinned; the background
    /// failure otherwise.
    pub(super) fn wait_pinned(&self, range: Range<usize>) -> Result<(), HostError> {
        match &self.background {
            Some(b) if !range.is_empty() => {
                b.gate.wait_ready(range.end).map_err(HostError::Background)
            }
            _ => Ok(()),
        }
    }

    /// True while chunks are still being pinned in the background.
    pub fn is_pending(&self) -> bool {
        self.background.as_ref().is_some_and(Background::is_pending)
    }

    /// The region as a read-only view for a run, for a progressive pin: its chunks as they
    /// lie, gated by the background work (a run waits for each block's chunk; once every
    /// chunk is pinned the gate never waits). `None` for a region pinned up front.
    pub fn pending_view(&self) -> Option<HostView<'_>> {
        self.gated_view(false)
    }

    /// The same, writable by devices: borrows the region exclusively for the view's life.
    pub fn pending_view_mut(&mut self) -> Option<HostView<'_>> {
        self.gated_view(true)
    }

    /// A gated view; `writable` only through [`Self::pending_view_mut`], whose `&mut`
    /// borrow excludes every other access while the view lives.
    fn gated_view(&self, writable: bool) -> Option<HostView<'_>> {
        let b = self.background.as_ref()?;
        self.settle_transfers();
        let pieces = self
            .chunks
            .iter()
            .map(|c| HostSpan {
                ptr: c.ptr,
                len: c.len,
            })
            .collect();
        // SAFETY: the chunks are this region's live memory, kept for the borrow of `self`;
        // the background thread touches a chunk only before the gate says it is ready, and
        // a writable view comes only from `pending_view_mut`, whose `&mut` borrow excludes
        // every other access until the view is gone.
        Some(unsafe { HostView::pending(pieces, writable, b.gate()) })
    }
}

/// When and how long one chunk took to pin, for reports and traces.
#[derive(Debug, Clone, Serialize)]
pub struct ChunkPin {
    /// The chunk's bytes in the region.
    pub range: Range<usize>,
    /// Seconds from the start of the pin (the call) to the start of this chunk's work.
    pub start_s: f64,
    /// Seconds it took to make resident (and fill) and register.
    pub took_s: f64,
    /// True on the background thread, false for the first chunk (pinned in the call).
    pub background: bool,
}

struct State {
    /// Chunks ready (registered), from the first.
    ready: usize,
    /// The background failure, naming the chunk.
    failed: Option<String>,
    /// Set by the region's drop: stop after the chunk in progress.
    cancel: bool,
    /// Set when the background work returned: no chunk is being filled or registered any
    /// more (after a failure the other thread may still be preparing the next chunk).
    finished: bool,
    /// Registrations made so far, in order; released before the memory.
    regs: Vec<MemObject>,
    /// Each ready chunk's timing.
    pins: Vec<ChunkPin>,
}

/// The readiness of a progressive pin's chunks, shared by the region, its views and the
/// background thread.
pub(crate) struct ChunkGate {
    /// Each chunk's end offset, in order.
    ends: Vec<usize>,
    state: Mutex<State>,
    changed: Condvar,
}

impl ChunkGate {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::sync::lock(&self.state)
    }

    /// Marks the next chunk ready (or the failure), and wakes every waiter.
    fn publish(&self, made: Result<(MemObject, ChunkPin), String>) {
        let mut s = self.lock();
        match made {
            Ok((reg, pin)) => {
                s.regs.push(reg);
                s.pins.push(pin);
                s.ready += 1;
            }
            Err(why) => s.failed = Some(why),
        }
        drop(s);
        self.changed.notify_all();
    }

    fn cancelled(&self) -> bool {
        self.lock().cancel
    }

    /// Blocks until every chunk is ready or the background work returned (after a failure,
    /// until it stopped touching the memory, so the region may be handed out).
    fn wait_all(&self) {
        let mut s = self.lock();
        while s.ready < self.ends.len() && !s.finished && !s.cancel {
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Marks the background work returned, and wakes every waiter.
    fn finish(&self) {
        self.lock().finished = true;
        self.changed.notify_all();
    }
}

impl Gate for ChunkGate {
    fn wait_ready(&self, end: usize) -> Result<(), String> {
        let need = self.ends.partition_point(|&e| e < end) + 1;
        let mut s = self.lock();
        loop {
            if s.ready >= need.min(self.ends.len()) {
                return Ok(());
            }
            if let Some(why) = &s.failed {
                return Err(why.clone());
            }
            if s.cancel {
                return Err("the region is being released".into());
            }
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// A progressive pin in progress: the gate and the background thread, joined on drop.
pub(crate) struct Background {
    gate: Arc<ChunkGate>,
    thread: Option<JoinHandle<()>>,
}

/// Where the chunks lie and what pins them: shared with the background thread.
struct Work {
    ctx: Context,
    /// The region's first byte (pinstream's own mapping, alive until the thread is joined).
    base: usize,
    plan: Vec<Range<usize>>,
    fill: Option<Fill>,
    threads: usize,
    start: Instant,
}

impl Background {
    /// Pins chunk 0 of `plan` over the mapping at `base` now, then starts the thread that
    /// pins the others. Chunk 0's failure is returned (nothing stays registered).
    ///
    /// # Safety
    /// `base..base + plan.last().end` must be pinstream's own fresh mapping, not handed out
    /// to anyone, that outlives the returned value (the region drops it first).
    pub(crate) unsafe fn start(
        ctx: &Context,
        base: *mut u8,
        plan: Vec<Range<usize>>,
        fill: Option<Fill>,
        threads: usize,
        start: Instant,
    ) -> Result<Self, AllocError> {
        let gate = Arc::new(ChunkGate {
            ends: plan.iter().map(|r| r.end).collect(),
            state: Mutex::new(State {
                ready: 0,
                failed: None,
                cancel: false,
                finished: false,
                regs: Vec::new(),
                pins: Vec::new(),
            }),
            changed: Condvar::new(),
        });
        let work = Work {
            ctx: ctx.clone(),
            base: base as usize,
            plan,
            fill,
            threads: threads.max(1),
            start,
        };
        // SAFETY: chunk 0 lies in the fresh mapping (this function's contract).
        gate.publish(Ok(unsafe { work.pin(0) }?));
        let thread = (work.plan.len() > 1).then(|| {
            let gate = gate.clone();
            std::thread::Builder::new()
                .name("pinstream-pin".into())
                .spawn(move || work.run(&gate))
        });
        let thread = thread.transpose().map_err(|e| AllocError::Map {
            bytes: 0,
            source: std::io::Error::new(e.kind(), format!("starting the pinning thread: {e}")),
        })?;
        Ok(Background { gate, thread })
    }

    /// The gate a run waits on.
    pub(crate) fn gate(&self) -> Arc<ChunkGate> {
        self.gate.clone()
    }

    /// True while chunks are still being pinned.
    pub(crate) fn is_pending(&self) -> bool {
        let s = self.gate.lock();
        s.ready < self.gate.ends.len() && s.failed.is_none() && !s.cancel
    }

    /// Waits for the background work to end (every chunk pinned, or a failure).
    pub(crate) fn settle(&self) {
        self.gate.wait_all();
    }

    /// Each pinned chunk's timing, in order, and the failure that stopped the others.
    pub(crate) fn pins(&self) -> (Vec<ChunkPin>, Option<String>) {
        let s = self.gate.lock();
        (s.pins.clone(), s.failed.clone())
    }

    /// The failure of the background work, once it ended in one.
    pub(crate) fn failure(&self) -> Option<String> {
        self.settle();
        self.gate.lock().failed.clone()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.gate.lock().cancel = true;
        self.gate.changed.notify_all();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::warn!("the background pinning thread panicked");
            }
        }
        // The registrations go now, before the memory they cover.
        self.gate.lock().regs.clear();
    }
}

impl Work {
    /// Pins chunks 1.. in order, publishing each: this thread makes chunk k + 1 resident
    /// while a second one registers chunk k (making resident and registering take about as
    /// long on the H200, so the pipeline nearly halves the pin). Stops at the first failure
    /// or a cancel.
    fn run(self, gate: &ChunkGate) {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, Instant)>(1);
        let mut unfilled = None;
        std::thread::scope(|s| {
            s.spawn(|| {
                for (k, begin) in rx {
                    let made = self.register(k, begin);
                    let failed = made.is_err();
                    gate.publish(made.map_err(|e| self.failure(k, &e)));
                    if failed {
                        return;
                    }
                }
            });
            for k in 1..self.plan.len() {
                if gate.cancelled() {
                    break;
                }
                let begin = Instant::now();
                // SAFETY: chunk k lies in the mapping, which the region keeps until this
                // thread is joined; nobody else touches it before the gate says it is ready.
                if let Err(e) = unsafe { self.prepare(k) } {
                    unfilled = Some((k, e));
                    break;
                }
                if tx.send((k, begin)).is_err() {
                    break; // the registering thread stopped at a failure
                }
            }
            drop(tx);
        });
        // The registering thread has published every chunk before the one not filled.
        if let Some((k, e)) = unfilled {
            if gate.lock().failed.is_none() {
                gate.publish(Err(self.failure(k, &e)));
            }
        }
        gate.finish();
    }

    fn failure(&self, k: usize, e: &AllocError) -> String {
        let r = &self.plan[k];
        format!(
            "pinning chunk {k} of {} (bytes {}..{}) in the background failed: {e}",
            self.plan.len(),
            r.start,
            r.end
        )
    }

    /// Makes chunk `k` and registers it, as one step (the first chunk).
    ///
    /// # Safety
    /// As for [`Self::prepare`].
    unsafe fn pin(&self, k: usize) -> Result<(MemObject, ChunkPin), AllocError> {
        let begin = Instant::now();
        // SAFETY: this function's contract.
        unsafe { self.prepare(k) }?;
        self.register(k, begin)
    }

    /// Makes chunk `k` resident, writing its data (or a zero into each page) on the work's
    /// threads.
    ///
    /// # Safety
    /// Chunk `k` must lie in the live mapping at `base`, touched by nobody else until it is
    /// published.
    unsafe fn prepare(&self, k: usize) -> Result<(), AllocError> {
        let r = self.plan[k].clone();
        // SAFETY: the chunk is live memory nobody else references (this function's contract).
        let bytes =
            unsafe { std::slice::from_raw_parts_mut((self.base + r.start) as *mut u8, r.len()) };
        match &self.fill {
            Some(fill) => fill(r.start, bytes).map_err(AllocError::Fill),
            None => {
                touch(bytes, self.threads);
                Ok(())
            }
        }
    }

    /// Registers chunk `k` (made resident since `begin`).
    fn register(&self, k: usize, begin: Instant) -> Result<(MemObject, ChunkPin), AllocError> {
        let r = self.plan[k].clone();
        injected(k, r.end)?;
        let reg = register_one(&self.ctx, (self.base + r.start) as *mut u8, r.len())?;
        let pin = ChunkPin {
            start_s: begin.duration_since(self.start).as_secs_f64(),
            took_s: begin.elapsed().as_secs_f64(),
            background: k > 0,
            range: r,
        };
        Ok((reg, pin))
    }
}

/// Writes a zero into every page of `bytes` (fresh memory) in `threads` pieces, on the pool
/// (at most `threads` at once).
fn touch(bytes: &mut [u8], threads: usize) {
    let page = os::page_size();
    let per = bytes.len().div_ceil(threads).div_ceil(page).max(1) * page;
    let pieces = bytes.chunks_mut(per).collect();
    os::par::run_each(pieces, threads, |_, piece: &mut [u8]| {
        piece.iter_mut().step_by(page).for_each(|b| *b = 0)
    });
}

/// The test hooks for chunk `k`, ending at byte `end` of the region: `chunk:K` fails chunk K's
/// registration as a driver out of resources would (`CL_OUT_OF_RESOURCES`), so tests can
/// provoke a failure of the background pin on any device; the pin ceiling (`pin:BYTES`)
/// fails the chunk that takes the region's pinned bytes past BYTES, as it fails a whole pin.
fn injected(k: usize, end: usize) -> Result<(), AllocError> {
    pin_ceiling::check_driver(end, "clCreateBuffer")?;
    let hit = crate::backend::injected_fault() == Some(("chunk", k));
    if hit {
        tracing::warn!("PINSTREAM_INJECT_FAULT: failing the pin of chunk {k} on purpose");
        return Err(ClError::new("clCreateBuffer", -5).into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{chunk_plan, up_front_with, Strategy};

    #[test]
    fn only_register_pins_chunk_by_chunk() {
        assert_eq!(up_front_with(Strategy::Register), None);
        for s in [Strategy::Mlock, Strategy::Pageable, Strategy::NvHost] {
            let why = up_front_with(s).unwrap();
            assert!(why.contains(&format!("with strategy {s}")), "{why}");
        }
    }

    const MIB: usize = 1 << 20;

    #[test]
    fn chunks_grow_from_one_block_and_never_split_one() {
        let block = 256 * MIB;
        let plan = chunk_plan(10 << 30, block, 35 << 30, 4096);
        let blocks: Vec<usize> = plan.iter().map(|r| r.len() / block).collect();
        assert_eq!(blocks, [1, 2, 4, 8, 16, 9]);
        assert_eq!(plan[0].start, 0);
        assert_eq!(plan.last().unwrap().end, 10 << 30);
        for w in plan.windows(2) {
            assert_eq!(w[0].end, w[1].start, "contiguous");
        }
        assert!(
            plan.iter().all(|r| r.start % block == 0),
            "on block boundaries"
        );
    }

    #[test]
    fn chunks_stop_growing_at_the_largest_registration() {
        // A 4 GiB card's max allocation of 1 GiB holds 4 blocks of 256 MiB.
        let plan = chunk_plan(3 << 30, 256 * MIB, 1 << 30, 4096);
        let sizes: Vec<usize> = plan.iter().map(|r| r.len() / MIB).collect();
        assert_eq!(sizes, [256, 512, 1024, 1024, 256]);
        // A max allocation that is not a whole number of blocks: chunks stay whole blocks.
        let plan = chunk_plan(10 * MIB, 3 * MIB, 7 * MIB, 4096);
        let sizes: Vec<usize> = plan.iter().map(|r| r.len() / MIB).collect();
        assert_eq!(sizes, [3, 6, 1]);
        assert!(plan.iter().all(|r| r.len() <= 7 * MIB));
    }

    #[test]
    fn a_partial_last_block_ends_the_last_chunk() {
        let plan = chunk_plan(5 * MIB + 100, MIB, 64 * MIB, 4096);
        assert_eq!(plan.last().unwrap().end, 5 * MIB + 100);
        assert_eq!(plan.len(), 3); // 1, 2, then 2 blocks and the 100-byte tail
        assert_eq!(chunk_plan(100, MIB, 64 * MIB, 4096), vec![0..100usize]);
    }

    #[test]
    fn no_plan_where_blocks_cannot_be_kept_whole() {
        assert!(chunk_plan(10 * MIB, 0, 64 * MIB, 4096).is_empty());
        assert!(
            chunk_plan(10 * MIB, 2 * MIB, MIB, 4096).is_empty(),
            "block > max"
        );
        assert!(
            chunk_plan(10 * MIB, 1000, MIB, 4096).is_empty(),
            "not whole pages"
        );
    }
}
