//! The safe layer over [`super::api`]: host memory lent to a run ([`HostView`]) and a run's
//! queues ([`Lanes`]), opened by [`in_flight`], which waits for every command before it
//! returns. Nothing enqueued through a [`Lanes`] can outlive the host memory, the device
//! memory or the kernel it uses, whatever the caller does (a panic included): this is what
//! lets the engine stream without `unsafe`.

use super::api::{
    Api, Device, ErrorOf, EventOf, HostSpan, Kernel, KernelArg, LaunchSize, Profile, Queue,
};
use std::marker::PhantomData;
use std::ops::Range;

/// Host memory a run can stream from or into: its bytes, piece by piece in order (memory
/// made of several driver allocations has one piece per chunk). Implemented for
/// `host::HostRegion` (pinned through OpenCL, in the engine) and, with the `cuda` feature,
/// `cuda::PinnedHost` (pinned through CUDA).
///
/// `slices(0..len())` and `slices_mut(0..len())` must succeed: a run lends the whole memory.
pub trait HostMemory {
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True for zero bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The bytes of `range`, one slice per piece it crosses.
    fn slices(&self, range: Range<usize>) -> Result<Vec<&[u8]>, OutOfRange>;
    /// The bytes of `range`, writable, one slice per piece it crosses.
    fn slices_mut(&mut self, range: Range<usize>) -> Result<Vec<&mut [u8]>, OutOfRange>;
    /// True for memory whose pieces are made ready (pinned) in the background: a run then
    /// lends it through [`Self::pending_view`] (which must then give a view) and waits,
    /// block by block, for the pieces it needs. The default: never.
    fn is_pending(&self) -> bool {
        false
    }
    /// The memory as a read-only view whose pieces may not be ready yet, with the gate a run
    /// waits on before each block ([`HostView::pending`]); `None` when nothing is pending.
    fn pending_view(&self) -> Option<HostView<'_>> {
        None
    }
    /// The same, writable by devices (the memory borrowed exclusively for the view's life).
    fn pending_view_mut(&mut self) -> Option<HostView<'_>> {
        None
    }
}

/// Readiness of memory made ready piece by piece in the background (a progressive pin):
/// [`Gate::wait_ready`] blocks (on a condition variable, not a spin) until the bytes
/// `..end` may be handed to a device, or says why they never will be.
pub trait Gate: Send + Sync {
    /// Waits until bytes `0..end` are ready; the background failure that stopped them (its
    /// message names the piece) otherwise.
    fn wait_ready(&self, end: usize) -> Result<(), String>;
}

/// A byte range outside some host memory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("range {}..{} is outside {len} bytes of host memory", .range.start, .range.end)]
pub struct OutOfRange {
    /// The range asked for.
    pub range: Range<usize>,
    /// The memory's length.
    pub len: usize,
}

/// Host memory lent to a run for `'h`: where its bytes lie (one piece per chunk), and whether
/// devices may write them. Made from slices, so the borrow checker keeps the memory alive and
/// (for a writable view) unaliased for `'h`; Rust code never reads or writes through it.
pub struct HostView<'h> {
    pieces: Vec<HostSpan>,
    len: usize,
    writable: bool,
    /// Where the pieces are still being made ready in the background.
    gate: Option<std::sync::Arc<dyn Gate>>,
    /// A ring view ([`Self::ring`]): the pieces hold this many bytes and byte `i` of the view
    /// lies at `i % wrap` in them.
    wrap: Option<usize>,
    _borrow: PhantomData<&'h mut [u8]>,
}

// SAFETY: a view is a token for memory borrowed for 'h; no Rust code reads or writes through
// its pointers, only devices do, in commands the engine orders by events, so sharing it
// between threads (one ring per device) shares no Rust-visible state.
unsafe impl Send for HostView<'_> {}
// SAFETY: as above.
unsafe impl Sync for HostView<'_> {}

impl<'h> HostView<'h> {
    /// Memory devices only read (uploads), piece by piece in order.
    pub fn reading(parts: Vec<&'h [u8]>) -> Self {
        let len = parts.iter().map(|p| p.len()).sum();
        let pieces = parts
            .into_iter()
            .map(|p| HostSpan {
                ptr: p.as_ptr().cast_mut(),
                len: p.len(),
            })
            .collect();
        HostView {
            pieces,
            len,
            writable: false,
            gate: None,
            wrap: None,
            _borrow: PhantomData,
        }
    }

    /// Memory devices read and write (in place, or the output), piece by piece in order.
    pub fn writing(parts: Vec<&'h mut [u8]>) -> Self {
        let len = parts.iter().map(|p| p.len()).sum();
        let pieces = parts
            .into_iter()
            .map(|p| HostSpan {
                ptr: p.as_mut_ptr(),
                len: p.len(),
            })
            .collect();
        HostView {
            pieces,
            len,
            writable: true,
            gate: None,
            wrap: None,
            _borrow: PhantomData,
        }
    }

    /// Memory whose pieces are made ready in the background: `gate` says when bytes may be
    /// handed to a device, and the run waits on it before each block ([`Self::wait_ready`]).
    ///
    /// # Safety
    /// Each piece must be memory that stays mapped for `'h`, that nothing else reads or
    /// writes for `'h` once `gate` has said it is ready (and, where `writable`, that devices
    /// may write), and that nobody but the background work behind `gate` touches before.
    pub unsafe fn pending(
        pieces: Vec<HostSpan>,
        writable: bool,
        gate: std::sync::Arc<dyn Gate>,
    ) -> Self {
        HostView {
            len: pieces.iter().map(|p| p.len).sum(),
            pieces,
            writable,
            gate: Some(gate),
            wrap: None,
            _borrow: PhantomData,
        }
    }

    /// A view of `len` bytes over pieces holding fewer (a staging ring, such as a file
    /// streamed through it): byte `i` of the view lies at `i % wrap` in the pieces, where
    /// `wrap` is their total length, and `gate` says when the bytes of a range may be handed
    /// to a device. A transfer must not cross the end of the pieces.
    ///
    /// # Safety
    /// As [`Self::pending`], for each turn of the ring: the bytes a range maps to are touched
    /// by nobody but the background work behind `gate` until the gate says they are ready,
    /// and by nobody but devices after that, until that work knows the device is done.
    pub unsafe fn ring(
        pieces: Vec<HostSpan>,
        len: usize,
        writable: bool,
        gate: std::sync::Arc<dyn Gate>,
    ) -> Self {
        let wrap = pieces.iter().map(|p| p.len).sum::<usize>();
        if wrap == 0 && len > 0 {
            misuse("a ring view over no bytes");
        }
        HostView {
            len,
            pieces,
            writable,
            gate: Some(gate),
            wrap: Some(wrap),
            _borrow: PhantomData,
        }
    }

    /// Waits until the bytes of `range` may be handed to a device (at once, unless the memory
    /// is still being made ready in the background); the background failure otherwise.
    pub fn wait_ready(&self, range: Range<usize>) -> Result<(), String> {
        match &self.gate {
            Some(g) if !range.is_empty() => g.wait_ready(range.end),
            _ => Ok(()),
        }
    }

    /// True when the memory was still being made ready when the view was made.
    pub fn is_gated(&self) -> bool {
        self.gate.is_some()
    }

    /// All of `memory`, which devices only read.
    pub fn of(memory: &'h dyn HostMemory) -> Self {
        if let Some(v) = memory.pending_view() {
            return v;
        }
        let parts = memory.slices(0..memory.len());
        Self::reading(parts.unwrap_or_else(|e| misuse(&format!("HostMemory::slices: {e}"))))
    }

    /// All of `memory`, which devices read and write.
    pub fn of_mut(memory: &'h mut dyn HostMemory) -> Self {
        if memory.is_pending() {
            return memory.pending_view_mut().unwrap_or_else(|| {
                misuse("HostMemory::is_pending said true but pending_view_mut gave nothing")
            });
        }
        let len = memory.len();
        let parts = memory.slices_mut(0..len);
        Self::writing(parts.unwrap_or_else(|e| misuse(&format!("HostMemory::slices_mut: {e}"))))
    }

    /// Bytes in the view.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty view.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The spans of `range`, one per piece it crosses, with each one's offset from
    /// `range.start`.
    fn spans(&self, range: Range<usize>) -> Vec<(HostSpan, usize)> {
        if range.start > range.end || range.end > self.len {
            misuse(&format!(
                "range {range:?} outside a view of {} bytes",
                self.len
            ));
        }
        let range = self.unwrapped(range);
        let mut out = Vec::new();
        let mut at = 0;
        for p in &self.pieces {
            let (lo, hi) = (range.start.max(at), range.end.min(at + p.len));
            if lo < hi {
                let span = HostSpan {
                    ptr: p.ptr.wrapping_add(lo - at),
                    len: hi - lo,
                };
                out.push((span, lo - range.start));
            }
            at += p.len;
        }
        out
    }
}

impl HostView<'_> {
    /// Where `range` lies in the pieces: itself, or in a ring view, its place in this turn
    /// of the ring.
    fn unwrapped(&self, range: Range<usize>) -> Range<usize> {
        let Some(wrap) = self.wrap else {
            return range;
        };
        let start = range.start % wrap;
        if start + range.len() > wrap {
            misuse(&format!(
                "range {range:?} crosses the end of a ring of {wrap} bytes"
            ));
        }
        start..start + range.len()
    }
}

/// One argument per parameter index, from the buffers and values given by index.
fn in_order<'a, A: Api>(
    buffers: impl ExactSizeIterator<Item = (u32, KernelArg<'a, A>)>,
    values: &[(u32, &'a [u8])],
) -> Vec<KernelArg<'a, A>> {
    let mut args: Vec<Option<KernelArg<'a, A>>> = vec![None; buffers.len() + values.len()];
    let given = buffers.chain(values.iter().map(|&(i, v)| (i, KernelArg::Value(v))));
    for (i, arg) in given {
        match args.get_mut(i as usize) {
            Some(slot @ None) => *slot = Some(arg),
            _ => misuse(&format!("kernel argument {i} given twice or past the last")),
        }
    }
    args.into_iter().flatten().collect()
}

/// Caller misuse of this layer: a bug above it, not a condition to handle.
#[cold]
#[track_caller]
/// Waits until `range` of a gated view is ready (the engine waits first, counting the time,
/// so this finds it ready); memory whose pinning failed is a caller's misuse here.
fn ready(view: &HostView<'_>, range: &Range<usize>) {
    if let Err(why) = view.wait_ready(range.clone()) {
        misuse(&format!(
            "a transfer of host memory whose background pinning failed ({why}): check the region's pin_state before streaming it"
        ));
    }
}

fn misuse(what: &str) -> ! {
    panic!("pinstream backend misuse: {what}")
}

/// Device bytes read into host memory this layer owns ([`Lanes::read_back`]): readable once
/// the copy completed, which [`Self::bytes`] waits for; dropping it waits too.
pub struct ReadBack<'s, A: Api> {
    device: &'s A::Device,
    event: EventOf<A>,
    bytes: Box<[u8]>,
}

impl<A: Api> ReadBack<'_, A> {
    /// Waits for the copy and lends its bytes; the copy's failure if it failed.
    pub fn bytes(&self) -> Result<&[u8], ErrorOf<A>> {
        self.device.wait(&self.event)?;
        Ok(&self.bytes)
    }
}

impl<A: Api> Drop for ReadBack<'_, A> {
    fn drop(&mut self) {
        // The copy may still be writing `bytes`: they are freed only after it ended.
        if let Err(e) = self.device.wait(&self.event) {
            tracing::warn!("waiting for a read-back at the end of a run failed: {e}");
        }
    }
}

/// A run's queues on one device, with its kernel. Everything borrowed for `'s` (host views,
/// buffers, the kernel) outlives the [`in_flight`] call that made the lanes, and that call
/// waits for every queue before it returns.
pub struct Lanes<'s, A: Api> {
    device: &'s A::Device,
    kernel: Option<&'s mut A::Kernel>,
    queues: Vec<A::Queue>,
}

/// Opens `lanes` queues on `device` for `kernel`, runs `f` with them, and waits for every
/// command enqueued (also when `f` fails or panics) before returning `f`'s result.
pub fn in_flight<'s, A: Api, R>(
    device: &'s A::Device,
    kernel: &'s mut A::Kernel,
    lanes: usize,
    f: impl FnOnce(&mut Lanes<'s, A>) -> R,
) -> Result<R, ErrorOf<A>> {
    lanes_for(device, Some(kernel), lanes, f)
}

/// As [`in_flight`], for copies only: the lanes have no kernel to launch.
pub fn copies_in_flight<'s, A: Api, R>(
    device: &'s A::Device,
    lanes: usize,
    f: impl FnOnce(&mut Lanes<'s, A>) -> R,
) -> Result<R, ErrorOf<A>> {
    lanes_for(device, None, lanes, f)
}

/// As [`copies_in_flight`], on queues without per-command device times
/// ([`Device::plain_queue`]): `None`, with `f` not run, where the device makes no such
/// queues. Their events cannot be profiled.
pub fn plain_copies_in_flight<'s, A: Api, R>(
    device: &'s A::Device,
    lanes: usize,
    f: impl FnOnce(&mut Lanes<'s, A>) -> R,
) -> Result<Option<R>, ErrorOf<A>> {
    let mut queues = Vec::with_capacity(lanes.max(1));
    for _ in 0..lanes.max(1) {
        match device.plain_queue()? {
            Some(q) => queues.push(q),
            None => return Ok(None),
        }
    }
    Ok(Some(run_on(device, None, queues, f)))
}

fn lanes_for<'s, A: Api, R>(
    device: &'s A::Device,
    kernel: Option<&'s mut A::Kernel>,
    lanes: usize,
    f: impl FnOnce(&mut Lanes<'s, A>) -> R,
) -> Result<R, ErrorOf<A>> {
    let queues = (0..lanes.max(1))
        .map(|_| device.queue())
        .collect::<Result<Vec<_>, _>>()?;
    Ok(run_on(device, kernel, queues, f))
}

/// Runs `f` with lanes over `queues`, and waits for every queue before returning.
fn run_on<'s, A: Api, R>(
    device: &'s A::Device,
    kernel: Option<&'s mut A::Kernel>,
    queues: Vec<A::Queue>,
    f: impl FnOnce(&mut Lanes<'s, A>) -> R,
) -> R {
    let mut l = Lanes {
        device,
        kernel,
        queues,
    };
    f(&mut l)
    // `l` drops here, on every path: its Drop waits for every queue.
}

impl<A: Api> Drop for Lanes<'_, A> {
    fn drop(&mut self) {
        for q in &self.queues {
            if let Err(e) = q.finish() {
                tracing::warn!("waiting for a queue at the end of a run failed: {e}");
            }
        }
    }
}

impl<'s, A: Api> Lanes<'s, A> {
    fn queue(&self, lane: usize) -> &A::Queue {
        self.queues
            .get(lane)
            .unwrap_or_else(|| misuse(&format!("lane {lane} of {}", self.queues.len())))
    }

    /// The device.
    pub fn device(&self) -> &'s A::Device {
        self.device
    }

    /// The kernel.
    pub fn kernel(&self) -> &A::Kernel {
        self.kernel
            .as_deref()
            .unwrap_or_else(|| misuse("a kernel of lanes made for copies only"))
    }

    /// Copies `range` of `src` into `dst` at `dst_offset` on `lane` after `wait`: one command
    /// per piece of the view the range crosses, their events in order.
    pub fn upload(
        &self,
        lane: usize,
        dst: &'s A::Buffer,
        dst_offset: usize,
        src: &HostView<'s>,
        range: Range<usize>,
        wait: &[&EventOf<A>],
    ) -> Result<Vec<EventOf<A>>, ErrorOf<A>> {
        ready(src, &range);
        let q = self.queue(lane);
        src.spans(range)
            .into_iter()
            // SAFETY: the span lies in memory borrowed for 's and `dst` lives for 's, both
            // beyond the `in_flight` call, which waits for this queue before returning.
            .map(|(span, rel)| unsafe { q.upload(dst, dst_offset + rel, span, wait) })
            .collect()
    }

    /// Copies `src` at `src_offset` into `range` of `dst` on `lane` after `wait`: one command
    /// per piece of the view the range crosses.
    pub fn download(
        &self,
        lane: usize,
        dst: &HostView<'s>,
        range: Range<usize>,
        src: &'s A::Buffer,
        src_offset: usize,
        wait: &[&EventOf<A>],
    ) -> Result<Vec<EventOf<A>>, ErrorOf<A>> {
        if !dst.writable {
            misuse("a download into a read-only view");
        }
        ready(dst, &range);
        let q = self.queue(lane);
        dst.spans(range)
            .into_iter()
            // SAFETY: the span lies in memory borrowed exclusively for 's (a writable view is
            // made from `&mut` slices), which no Rust reference reaches until `in_flight`
            // returns, after waiting for this queue; `src` lives for 's.
            .map(|(span, rel)| unsafe { q.download(span, src, src_offset + rel, wait) })
            .collect()
    }

    /// Copies `len` bytes of `src` at `src_offset` into host memory of its own on `lane`
    /// after `wait`; [`ReadBack::bytes`] waits for the copy and lends them (a small read,
    /// such as the bounds guard's).
    pub fn read_back(
        &self,
        lane: usize,
        src: &'s A::Buffer,
        src_offset: usize,
        len: usize,
        wait: &[&EventOf<A>],
    ) -> Result<ReadBack<'s, A>, ErrorOf<A>> {
        let mut bytes = vec![0u8; len].into_boxed_slice();
        let span = HostSpan {
            ptr: bytes.as_mut_ptr(),
            len,
        };
        // SAFETY: `bytes` is a heap allocation that the returned ReadBack owns and reaches
        // through no Rust reference until the copy completed ([`ReadBack::bytes`] waits
        // first); dropping the ReadBack waits for the copy before freeing it, and a
        // forgotten one leaks it. `src` lives for 's, beyond the `in_flight` call.
        let event = unsafe { self.queue(lane).download(span, src, src_offset, wait) }?;
        Ok(ReadBack {
            device: self.device,
            event,
            bytes,
        })
    }

    /// Launches the kernel over `size` on `lane` after `wait`, with `buffers` and `values` at
    /// their parameter indices (together one argument per parameter).
    pub fn launch(
        &mut self,
        lane: usize,
        buffers: &[(u32, &'s A::Buffer)],
        values: &[(u32, &[u8])],
        size: LaunchSize,
        wait: &[&EventOf<A>],
    ) -> Result<EventOf<A>, ErrorOf<A>> {
        let buffers = buffers.iter().map(|&(i, b)| (i, KernelArg::Buffer(b)));
        self.enqueue(lane, &in_order::<A>(buffers, values), size, wait)
    }

    /// [`Self::launch`] with each buffer given as its first `.2` bytes, the rest being its
    /// bounds guard's zone ([`KernelArg::Within`]).
    pub fn launch_within(
        &mut self,
        lane: usize,
        buffers: &[(u32, &'s A::Buffer, usize)],
        values: &[(u32, &[u8])],
        size: LaunchSize,
        wait: &[&EventOf<A>],
    ) -> Result<EventOf<A>, ErrorOf<A>> {
        let buffers = buffers
            .iter()
            .map(|&(i, b, n)| (i, KernelArg::Within(b, n)));
        self.enqueue(lane, &in_order::<A>(buffers, values), size, wait)
    }

    /// Launches the kernel with `args` (whose buffers the callers borrow for 's).
    fn enqueue(
        &mut self,
        lane: usize,
        args: &[KernelArg<'_, A>],
        size: LaunchSize,
        wait: &[&EventOf<A>],
    ) -> Result<EventOf<A>, ErrorOf<A>> {
        let Some(q) = self.queues.get(lane) else {
            misuse(&format!("lane {lane} of {}", self.queues.len()))
        };
        let Some(kernel) = self.kernel.as_deref_mut() else {
            misuse("a launch on lanes made for copies only")
        };
        // SAFETY: the buffers and the kernel are borrowed for 's, beyond the `in_flight` call,
        // which waits for this queue; host memory is reached only through views, which no
        // Rust reference reaches meanwhile.
        unsafe { q.launch(kernel, args, size, wait) }
    }

    /// An event at the current end of `lane`.
    pub fn mark(&self, lane: usize) -> Result<EventOf<A>, ErrorOf<A>> {
        self.queue(lane).mark()
    }

    /// Submits every lane's commands.
    pub fn flush(&self) -> Result<(), ErrorOf<A>> {
        self.queues.iter().try_for_each(|q| q.flush())
    }

    /// Waits for every lane; the first failure, after waiting for all.
    pub fn finish(&self) -> Result<(), ErrorOf<A>> {
        let mut first = Ok(());
        for q in &self.queues {
            if let (Err(e), Ok(())) = (q.finish(), &first) {
                first = Err(e);
            }
        }
        first
    }

    /// Blocks until `event`'s command completed; its failure if it failed.
    pub fn wait(&self, event: &EventOf<A>) -> Result<(), ErrorOf<A>> {
        self.device.wait(event)
    }

    /// Blocks until `event`'s command completed as a program waits for one call it made
    /// ([`Device::wait_call`]); its failure if it failed.
    pub fn wait_call(&self, event: &EventOf<A>) -> Result<(), ErrorOf<A>> {
        self.device.wait_call(event)
    }

    /// The device times of `event`'s completed command (see [`Device::profile`]).
    pub fn profile(&self, event: &EventOf<A>, origin: &EventOf<A>) -> Result<Profile, ErrorOf<A>> {
        self.device.profile(event, origin)
    }

    /// The kernel's parameters.
    pub fn params(&self) -> Result<Vec<super::api::ArgInfo>, ErrorOf<A>> {
        self.kernel().params()
    }
}

#[cfg(test)]
#[path = "lanes_tests.rs"]
mod tests;
