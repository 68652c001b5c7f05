//! Page-locked host memory the CUDA driver knows ([`PinnedHost`]), made as a CUDA program
//! would ([`CudaPinning`]), and the in-flight guard that waits for its copies.

use super::{CudaError, DeviceMem, Gpu, HostSpan, Result, Stream, Timed};
use crate::backend::lanes::OutOfRange;
use crate::backend::os::{PageMap, Residency};
use crate::backend::pinning::CallerRange;
use cudarc::driver::{result, sys};

/// How pinned host memory is made, as a CUDA program would.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CudaPinning {
    /// `cuMemHostAlloc` without write-combining (what `cudaMallocHost` does).
    HostAlloc,
    /// The program's own memory (huge pages, touched by all cores) registered with
    /// `cuMemHostRegister` (what `cudaHostRegister` does).
    Register,
}

impl CudaPinning {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            CudaPinning::HostAlloc => "cuda-host-alloc",
            CudaPinning::Register => "cuda-register",
        }
    }
}

impl std::fmt::Display for CudaPinning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

enum Mem {
    HostAlloc(*mut u8, usize),
    Registered(PageMap, usize),
    /// The caller's own memory, registered ([`Gpu::register`]): unregistered, never freed.
    Caller(CallerRange),
    /// `cuMemHostAlloc(DEVICEMAP)` memory, shared with the device buffers over it.
    Mapped(std::sync::Arc<MappedAlloc>),
}

/// Mapped pinned memory (`cuMemHostAlloc` with `CU_MEMHOSTALLOC_DEVICEMAP`), held by its
/// [`PinnedHost`] and by every [`DeviceMem`] over it ([`PinnedHost::device_mem`]): freed when
/// the last of them drops, so a kernel's buffer never outlives the memory it reaches.
struct MappedAlloc {
    ptr: *mut u8,
    len: usize,
    gpu: Gpu,
}

impl Drop for MappedAlloc {
    fn drop(&mut self) {
        if self.gpu.bind().is_err() {
            tracing::warn!("could not bind the CUDA context to free mapped pinned memory");
        }
        // SAFETY: the pointer came from cuMemHostAlloc and is freed once, by its last holder.
        if let Err(e) = unsafe { result::free_host(self.ptr.cast()) } {
            tracing::warn!("releasing CUDA mapped pinned memory failed: {e:?}");
        }
    }
}

// SAFETY: the allocation is only freed (by its last holder); its bytes are reached through
// `PinnedHost`, which mediates access, and by kernels through device pointers.
unsafe impl Send for MappedAlloc {}
// SAFETY: as above.
unsafe impl Sync for MappedAlloc {}

impl Mem {
    /// Allocates (or maps and registers) `bytes` by `how`, with the `cuMemHost*` `flags`, zeroed.
    fn new(bytes: usize, how: CudaPinning, flags: u32) -> Result<Mem> {
        let mem = match how {
            CudaPinning::HostAlloc => {
                // SAFETY: no write-combining; portable and device-mapped where `flags` ask.
                let p = unsafe { result::malloc_host(bytes.max(1), flags) }
                    .map_err(CudaError::driver("cuMemHostAlloc"))?;
                Mem::HostAlloc(p.cast(), bytes)
            }
            CudaPinning::Register => {
                let threads = crate::backend::os::cores();
                let map = PageMap::new(
                    bytes,
                    Residency {
                        huge_pages: true,
                        touch_threads: threads,
                    },
                )
                .map_err(|source| CudaError::Map { bytes, source })?;
                // SAFETY: the range is `map`, which lives as long as the registration
                // (PinnedHost's Drop unregisters before the map is unmapped).
                unsafe { sys::cuMemHostRegister_v2(map.as_ptr().cast(), map.len(), flags) }
                    .result()
                    .map_err(CudaError::driver("cuMemHostRegister"))?;
                Mem::Registered(map, bytes)
            }
        };
        if let Mem::HostAlloc(p, n) = &mem {
            // The driver does not promise zeroed memory; slices need initialised bytes.
            let (p, n) = (*p as usize, *n);
            crate::backend::os::par::for_ranges(n, |r| {
                // SAFETY: `r` lies inside the allocation, which nothing else uses yet.
                unsafe { std::ptr::write_bytes((p + r.start) as *mut u8, 0, r.len()) }
            });
        }
        Ok(mem)
    }
}

impl Gpu {
    /// Pinned host memory of `bytes`, by `how`, pinned for this device's context.
    pub fn pinned(&self, bytes: usize, how: CudaPinning) -> Result<PinnedHost> {
        self.pinned_for(bytes, how, false)
    }

    /// Pinned host memory of `bytes`, by `how`; with `portable`, pinned for every CUDA
    /// context of the process (`CU_MEMHOSTALLOC_PORTABLE` / `CU_MEMHOSTREGISTER_PORTABLE`,
    /// 0x01 both), as a run over several GPUs needs: without it, another device reads the
    /// memory as pageable.
    pub fn pinned_for(&self, bytes: usize, how: CudaPinning, portable: bool) -> Result<PinnedHost> {
        self.pinned_flags(bytes, how, u32::from(portable))
    }

    /// `cuMemHostAlloc` memory of `bytes` mapped into the device's address space
    /// (`CU_MEMHOSTALLOC_DEVICEMAP`, what `cudaHostAlloc(..., cudaHostAllocMapped)` asks):
    /// kernels reach it through [`PinnedHost::device_ptr`] or [`PinnedHost::device_mem`].
    pub fn pinned_mapped(&self, bytes: usize) -> Result<PinnedHost> {
        const CU_MEMHOSTALLOC_DEVICEMAP: u32 = 0x02;
        let mut host =
            self.pinned_flags(bytes, CudaPinning::HostAlloc, CU_MEMHOSTALLOC_DEVICEMAP)?;
        if let Mem::HostAlloc(ptr, len) = host.mem {
            let shared = MappedAlloc {
                ptr,
                len,
                gpu: self.clone(),
            };
            host.mem = Mem::Mapped(std::sync::Arc::new(shared));
        }
        Ok(host)
    }

    fn pinned_flags(&self, bytes: usize, how: CudaPinning, flags: u32) -> Result<PinnedHost> {
        self.bind()?;
        let start = std::time::Instant::now();
        let mem = Mem::new(bytes, how, flags)?;
        Ok(self.holding(mem, how, start))
    }

    /// The caller's `range` registered with `cuMemHostRegister`, as `cudaHostRegister` does
    /// (any alignment: the driver pins the whole pages it touches); with `portable`, for every
    /// CUDA context of the process. The memory is neither written nor zeroed; dropping the
    /// returned value unregisters it and never frees it. The range is not checked here
    /// ([`CallerRange::check`] is the caller's).
    pub fn register(&self, range: CallerRange, portable: bool) -> Result<PinnedHost> {
        self.bind()?;
        let start = std::time::Instant::now();
        let flags = u32::from(portable);
        // SAFETY: `CallerRange::new`'s contract keeps the range mapped until the returned
        // value, whose Drop unregisters it, is dropped.
        unsafe { sys::cuMemHostRegister_v2(range.ptr().cast(), range.len(), flags) }
            .result()
            .map_err(CudaError::driver("cuMemHostRegister"))?;
        Ok(self.holding(Mem::Caller(range), CudaPinning::Register, start))
    }

    fn holding(&self, mem: Mem, how: CudaPinning, start: std::time::Instant) -> PinnedHost {
        PinnedHost {
            mem,
            how,
            gpu: self.clone(),
            in_flight: std::sync::Mutex::new(Vec::new()),
            unsettled: std::sync::atomic::AtomicBool::new(false),
            took: start.elapsed(),
        }
    }
}

/// Page-locked host memory the CUDA driver knows.
///
/// Copies into and out of it go through [`PinnedHost::upload`] and [`PinnedHost::download`]
/// (or the engine's lanes, which wait for their streams before the borrow ends): each copy
/// leaves a completion event here, and the memory waits for every such event before it hands
/// out a slice or is freed, as `HostRegion` waits for its queues. No copy can outlive the
/// memory or race a Rust reference to it, whatever the caller does.
pub struct PinnedHost {
    mem: Mem,
    how: CudaPinning,
    gpu: Gpu,
    /// The end of every copy made through `upload`/`download` and not yet waited for.
    in_flight: std::sync::Mutex<Vec<Timed>>,
    /// Set when a copy failed and the context could not be synchronised either: the memory
    /// is then never freed (a copy of a broken context might still reach it), only leaked.
    unsettled: std::sync::atomic::AtomicBool,
    took: std::time::Duration,
}

// SAFETY: the memory is owned exclusively; `&[u8]` is handed out through `&self` only and
// `&mut [u8]` through `&mut self` only.
unsafe impl Send for PinnedHost {}
// SAFETY: as above.
unsafe impl Sync for PinnedHost {}

impl PinnedHost {
    fn ptr_len(&self) -> (*mut u8, usize) {
        match &self.mem {
            Mem::HostAlloc(p, n) => (*p, *n),
            Mem::Registered(m, n) => (m.as_ptr(), *n),
            Mem::Caller(r) => (r.ptr(), r.len()),
            Mem::Mapped(a) => (a.ptr, a.len),
        }
    }

    /// False for the caller's memory registered by [`Gpu::register`] (never freed here).
    pub fn owns_memory(&self) -> bool {
        !matches!(self.mem, Mem::Caller(_))
    }

    /// True for mapped memory ([`Gpu::pinned_mapped`]).
    pub fn is_mapped(&self) -> bool {
        matches!(self.mem, Mem::Mapped(_))
    }

    /// A device buffer over the whole of mapped memory ([`Gpu::pinned_mapped`]), which
    /// kernels read and write in place; it keeps the memory alive while it is held, after
    /// this value is dropped too. `None` for memory that is not mapped.
    pub fn device_mem(&self) -> Result<Option<DeviceMem>> {
        let Mem::Mapped(shared) = &self.mem else {
            return Ok(None);
        };
        let ptr = self.device_ptr()?;
        Ok(Some(DeviceMem::over_host(
            ptr,
            shared.len,
            &self.gpu,
            shared.clone(),
        )))
    }

    /// Waits for every copy made through [`Self::upload`] and [`Self::download`]; the first
    /// failure among them, if any. The lock is held while waiting, so another thread's
    /// accessor never finds the list empty while those copies still run.
    ///
    /// Every copy is waited for, not only those before a failure. Where one failed, the whole
    /// context is synchronised too (a failed event says nothing of the copies behind it); if
    /// that fails as well, the memory is marked unsettled and its `Drop` leaks it rather than
    /// free what a copy of the broken context might still reach.
    pub fn wait(&self) -> Result<()> {
        let mut copies = crate::sync::lock(&self.in_flight);
        let mut first = Ok(());
        for copy in copies.iter() {
            if let (Err(e), Ok(())) = (copy.wait(), &first) {
                first = Err(e);
            }
        }
        copies.clear();
        if first.is_err() && self.gpu.synchronize().is_err() {
            self.unsettled
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        first
    }

    fn settle(&self) {
        if let Err(e) = self.wait() {
            tracing::warn!("a copy of CUDA pinned memory failed: {e}");
        }
    }

    /// Enqueues a copy of `range` of this memory into `dst` at `dst_offset` on `stream`, after
    /// `wait`. The memory waits for it before handing out a slice or being freed.
    pub fn upload(
        &self,
        stream: &Stream,
        range: std::ops::Range<usize>,
        dst: &DeviceMem,
        dst_offset: usize,
        wait: &[&Timed],
    ) -> Result<Timed> {
        let span = self.span(range);
        // SAFETY: the span lies in this memory, which keeps the copy's event (below) and waits
        // for it before it gives out a slice or is freed.
        let copy = unsafe { stream.upload(dst, dst_offset, span, wait) }?;
        self.track(&copy);
        Ok(copy)
    }

    /// Enqueues a copy of `src` at `src_offset` into `range` of this memory on `stream`,
    /// after `wait`. The memory waits for it before handing out a slice or being freed.
    pub fn download(
        &mut self,
        stream: &Stream,
        src: &DeviceMem,
        src_offset: usize,
        range: std::ops::Range<usize>,
        wait: &[&Timed],
    ) -> Result<Timed> {
        let span = self.span(range);
        // SAFETY: as in `upload`; `&mut self` also excludes every outstanding slice.
        let copy = unsafe { stream.download(span, src, src_offset, wait) }?;
        self.track(&copy);
        Ok(copy)
    }

    /// Keeps `copy` (a clone of its events) until the memory next waits, and lets go of the
    /// copies already done, so a caller that waits on each returned event does not pile them
    /// up.
    fn track(&self, copy: &Timed) {
        let mut copies = crate::sync::lock(&self.in_flight);
        copies.retain(|c| !c.is_done());
        copies.push(copy.clone());
    }

    /// The bytes, once every copy in flight ended.
    pub fn as_slice(&self) -> &[u8] {
        self.settle();
        let (p, n) = self.ptr_len();
        // SAFETY: `p` holds `n` initialised bytes (zeroed pages, or driver memory zeroed in
        // `Mem::new`) owned by `self`; copies use raw spans, and the engine waits for
        // them before a slice is taken again.
        unsafe { std::slice::from_raw_parts(p, n) }
    }

    /// The bytes, writable, once every copy in flight ended.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.settle();
        let (p, n) = self.ptr_len();
        // SAFETY: as above, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(p, n) }
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.ptr_len().1
    }

    /// How it was pinned.
    pub fn pinning(&self) -> CudaPinning {
        self.how
    }

    /// Wall time it took to allocate (or map), pin and zero.
    pub fn pin_time(&self) -> std::time::Duration {
        self.took
    }

    /// The bytes of `range` as a raw span for an upload (no reference to them is made). Inside
    /// the backend only: a copy from it is not tracked ([`Self::upload`] is).
    pub(crate) fn span(&self, range: std::ops::Range<usize>) -> HostSpan {
        let (p, n) = self.ptr_len();
        assert!(
            range.start <= range.end && range.end <= n,
            "span past the memory"
        );
        HostSpan {
            ptr: p.wrapping_add(range.start),
            len: range.len(),
        }
    }

    /// The bytes of `range` as a raw span for a download, which writes them (backend only).
    pub(crate) fn span_mut(&mut self, range: std::ops::Range<usize>) -> HostSpan {
        self.span(range)
    }

    /// True for zero bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The address kernels reach this memory at (`cuMemHostGetDevicePointer`): memory from
    /// [`Gpu::pinned_mapped`], or any pinned memory on a device with unified addressing.
    pub fn device_ptr(&self) -> Result<sys::CUdeviceptr> {
        self.gpu.bind()?;
        let mut d: sys::CUdeviceptr = 0;
        // SAFETY: writes one device pointer; the host pointer is this memory's start.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, self.ptr_len().0.cast(), 0) }
            .result()
            .map_err(CudaError::driver("cuMemHostGetDevicePointer"))?;
        Ok(d)
    }
}

impl crate::backend::lanes::HostMemory for PinnedHost {
    fn len(&self) -> usize {
        PinnedHost::len(self)
    }
    fn slices(&self, range: std::ops::Range<usize>) -> std::result::Result<Vec<&[u8]>, OutOfRange> {
        let len = self.len();
        let s = self.as_slice().get(range.clone());
        s.map(|s| vec![s]).ok_or(OutOfRange { range, len })
    }
    fn slices_mut(
        &mut self,
        range: std::ops::Range<usize>,
    ) -> std::result::Result<Vec<&mut [u8]>, OutOfRange> {
        let len = self.len();
        let s = self.as_mut_slice().get_mut(range.clone());
        s.map(|s| vec![s]).ok_or(OutOfRange { range, len })
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        self.settle();
        if self.unsettled.load(std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(
                "a copy of CUDA pinned memory failed and its context could not be synchronised: leaking the {} bytes rather than freeing memory it might still reach",
                self.len()
            );
            if let Mem::Mapped(shared) = &self.mem {
                // Never freed: the count the forgotten clone holds is never given back.
                std::mem::forget(shared.clone());
            }
            return;
        }
        if self.gpu.bind().is_err() {
            tracing::warn!("could not bind the CUDA context to free pinned memory");
        }
        let r = match &self.mem {
            // SAFETY: the pointer came from cuMemHostAlloc and is freed once.
            Mem::HostAlloc(p, _) => unsafe { result::free_host(p.cast()) },
            // SAFETY: the range was registered by `Gpu::pinned`; the map unmaps afterwards.
            Mem::Registered(m, _) => unsafe {
                sys::cuMemHostUnregister(m.as_ptr().cast()).result()
            },
            // SAFETY: registered by `Gpu::register`; the caller's memory outlives this value.
            Mem::Caller(r) => unsafe { sys::cuMemHostUnregister(r.ptr().cast()).result() },
            // Freed by its last holder (this value's or a device buffer's `Arc`).
            Mem::Mapped(_) => Ok(()),
        };
        if let Err(e) = r {
            tracing::warn!("releasing CUDA pinned memory failed: {e:?}");
        }
    }
}
