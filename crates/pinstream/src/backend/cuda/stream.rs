//! Streams and the event pair around each command ([`Timed`]): device times, cross-stream
//! waits, and the copies between host spans and device memory.

use super::{CudaError, DeviceMem, Gpu, HostSpan, Result};
use crate::backend::api::Profile;
use cudarc::driver::{result, sys, DriverError};
use std::sync::Arc;

/// A start and an end event around one command: its device times, and what later commands
/// wait for. Clones share the pair (pinned memory keeps one of each copy it must wait for).
#[derive(Clone)]
pub struct Timed(Arc<EventPair>);

/// The two events of a [`Timed`], destroyed when the last clone drops.
pub struct EventPair {
    start: sys::CUevent,
    end: sys::CUevent,
    gpu: Gpu,
}

// SAFETY: CUDA events may be used from any thread once the context is bound (done per call).
unsafe impl Send for EventPair {}
// SAFETY: as above; every method only reads the handles.
unsafe impl Sync for EventPair {}

impl std::ops::Deref for Timed {
    type Target = EventPair;

    fn deref(&self) -> &EventPair {
        &self.0
    }
}

impl Timed {
    fn new(gpu: &Gpu) -> Result<Timed> {
        let ev = || {
            result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
                .map_err(CudaError::driver("cuEventCreate"))
        };
        let start = ev()?;
        let end = match ev() {
            Ok(e) => e,
            Err(e) => {
                // SAFETY: created just above, destroyed once.
                let _ = unsafe { result::event::destroy(start) };
                return Err(e);
            }
        };
        Ok(Timed(Arc::new(EventPair {
            start,
            end,
            gpu: gpu.clone(),
        })))
    }

    /// True once the command completed successfully (`cuEventQuery` says so); false while it
    /// runs, or when it failed (its wait then reports the failure).
    pub fn is_done(&self) -> bool {
        // SAFETY: `end` is a live event.
        self.gpu.bind().is_ok() && unsafe { result::event::query(self.end) }.is_ok()
    }

    /// Blocks until the command completed; its error if it failed.
    pub fn wait(&self) -> Result<()> {
        self.gpu.bind()?;
        // SAFETY: `end` is a live event.
        unsafe { result::event::synchronize(self.end) }
            .map_err(CudaError::driver("cuEventSynchronize"))
    }

    /// Device times in nanoseconds since `base` was recorded (both must be complete).
    pub fn profile(&self, base: &Timed) -> Result<Profile> {
        self.gpu.bind()?;
        let ms = |e| {
            // SAFETY: both events are live and were recorded.
            unsafe { result::event::elapsed(base.end, e) }
                .map_err(CudaError::driver("cuEventElapsedTime"))
        };
        let ns = |m: f32| (f64::from(m) * 1e6).max(0.0) as u64;
        // The start from the base; the duration from the command's own pair, so it keeps
        // float precision however long after the base the command ran.
        // SAFETY: both events are live and were recorded.
        let busy = unsafe { result::event::elapsed(self.start, self.end) }
            .map_err(CudaError::driver("cuEventElapsedTime"))?;
        let s = ns(ms(self.start)?);
        let e = s + ns(busy);
        Ok(Profile {
            queued: None,
            submit: None,
            start: s,
            end: e.max(s),
        })
    }
}

impl Drop for EventPair {
    fn drop(&mut self) {
        let _ = self.gpu.bind();
        for e in [self.start, self.end] {
            // SAFETY: created by cuEventCreate, destroyed once (destroying a recorded event
            // that has not completed is allowed: the driver frees it on completion).
            if let Err(err) = unsafe { result::event::destroy(e) } {
                tracing::warn!("cuEventDestroy failed: {err:?}");
            }
        }
    }
}

/// A stream. Dropping it waits for its work first, so no command outlives the memory the
/// caller borrowed for it.
pub struct Stream {
    pub(super) raw: sys::CUstream,
    pub(super) gpu: Gpu,
}

impl Gpu {
    /// A new stream that does not synchronise with the legacy default stream.
    pub fn stream(&self) -> Result<Stream> {
        self.bind()?;
        let raw = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(CudaError::driver("cuStreamCreate"))?;
        Ok(Stream {
            raw,
            gpu: self.clone(),
        })
    }
}

// SAFETY: CUDA streams may be used from any thread with the context bound (done per call).
unsafe impl Send for Stream {}
// SAFETY: as above; the driver serialises work submitted to one stream.
unsafe impl Sync for Stream {}

impl Stream {
    /// Records an event now (the reference time of a run's profile).
    pub fn mark(&self) -> Result<Timed> {
        self.around(&[], "cuEventRecord", |_| Ok(()))
    }

    /// Waits for `wait`, records a start event, runs `f`, records an end event.
    pub(super) fn around(
        &self,
        wait: &[&Timed],
        call: &'static str,
        f: impl FnOnce(sys::CUstream) -> std::result::Result<(), DriverError>,
    ) -> Result<Timed> {
        self.gpu.bind()?;
        let t = Timed::new(&self.gpu)?;
        for w in wait {
            // SAFETY: live stream and event.
            unsafe {
                result::stream::wait_event(
                    self.raw,
                    w.end,
                    sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                )
            }
            .map_err(CudaError::driver("cuStreamWaitEvent"))?;
        }
        // SAFETY: live stream and events.
        unsafe { result::event::record(t.start, self.raw) }
            .map_err(CudaError::driver("cuEventRecord"))?;
        f(self.raw).map_err(CudaError::driver(call))?;
        // SAFETY: as above.
        if let Err(e) = unsafe { result::event::record(t.end, self.raw) } {
            // The command is enqueued but nothing marks its end: wait for it here, so no
            // caller is left with a command in flight and no event to wait on.
            let _ = self.synchronize();
            return Err(CudaError::driver("cuEventRecord")(e));
        }
        Ok(t)
    }

    /// Copies `src` into `dst` at `offset` after `wait`.
    ///
    /// # Safety
    /// The memory behind `src` must stay alive and unwritten until the returned event
    /// completes (or this stream is synchronised or dropped).
    pub unsafe fn upload(
        &self,
        dst: &DeviceMem,
        offset: usize,
        src: HostSpan,
        wait: &[&Timed],
    ) -> Result<Timed> {
        assert!(offset + src.len <= dst.len, "upload past the device buffer");
        self.around(wait, "cuMemcpyHtoDAsync", |s| {
            // SAFETY: the destination range lies in `dst`; the caller keeps `src` alive.
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(dst.ptr + offset as u64, src.ptr.cast(), src.len, s)
                    .result()
            }
        })
    }

    /// Copies `src` at `offset` into `dst` after `wait`.
    ///
    /// # Safety
    /// The memory behind `dst` must stay alive and untouched (no reads, no writes) until the
    /// returned event completes (or this stream is synchronised or dropped).
    pub unsafe fn download(
        &self,
        dst: HostSpan,
        src: &DeviceMem,
        offset: usize,
        wait: &[&Timed],
    ) -> Result<Timed> {
        assert!(
            offset + dst.len <= src.len,
            "download past the device buffer"
        );
        self.around(wait, "cuMemcpyDtoHAsync", |s| {
            // SAFETY: the source range lies in `src`; the caller keeps `dst` alive.
            unsafe {
                sys::cuMemcpyDtoHAsync_v2(dst.ptr.cast(), src.ptr + offset as u64, dst.len, s)
                    .result()
            }
        })
    }

    /// Blocks until all work on the stream completed.
    pub fn synchronize(&self) -> Result<()> {
        self.gpu.bind()?;
        // SAFETY: live stream.
        unsafe { result::stream::synchronize(self.raw) }
            .map_err(CudaError::driver("cuStreamSynchronize"))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Err(e) = self.synchronize() {
            tracing::warn!("cuStreamSynchronize before destroying a stream failed: {e}");
        }
        // SAFETY: created by cuStreamCreate, destroyed once, its work done.
        if let Err(e) = unsafe { result::stream::destroy(self.raw) } {
            tracing::warn!("cuStreamDestroy failed: {e:?}");
        }
    }
}
