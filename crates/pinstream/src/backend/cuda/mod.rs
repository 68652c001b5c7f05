//! The CUDA backend (cargo feature `cuda`): the driver API and NVRTC through `cudarc`, both
//! loaded at run time, so a build with the feature still runs where no CUDA driver exists.
//!
//! As in the OpenCL backend, cudarc's thin `result`/`sys` calls are wrapped by owning types
//! here whose `Drop` never panics. cudarc's own safe types were not used for streams, events
//! and memory because pinstream needs what they hide: a start and an end event around every
//! command (per-command device times, as OpenCL event profiling gives), cross-stream waits on
//! those events, `cuMemHostRegister` over memory pinstream maps itself, and raw device
//! pointers in a ring shared by three streams.
//!
//! Every call binds the context to the calling thread first (`cuCtxSetCurrent`, cheap), so
//! the types may be used from any thread.

mod api;
#[cfg(feature = "baselines")]
mod native;
mod program;
#[cfg(feature = "baselines")]
pub mod raw_copies;
#[cfg(feature = "baselines")]
pub mod scattered;
mod signature;

pub use api::{Cuda, CudaInstance};
pub use program::{CudaKernel, CudaProgram};

pub use super::api::HostSpan;
use super::api::Profile;
use super::lanes::OutOfRange;
use super::os::{PageMap, Residency};
use cudarc::driver::{result, sys, CudaContext, DriverError};
use std::sync::Arc;

/// A failed CUDA call, or a missing library.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// A driver call returned an error.
    #[error("{call} failed: {name} ({text})")]
    Driver {
        /// The call.
        call: &'static str,
        /// The `CUresult`.
        code: i32,
        /// `CUDA_ERROR_...`.
        name: String,
        /// The driver's description.
        text: String,
    },
    /// The source did not compile with NVRTC.
    #[error("NVRTC could not compile the kernel source:\n{log}")]
    Compile {
        /// The compiler's message.
        log: String,
    },
    /// The source declares no `__global__` function of that name.
    #[error("the source declares no __global__ function `{name}`")]
    NoKernel {
        /// The name asked for.
        name: String,
    },
    /// A kernel pinstream cannot call.
    #[error("kernel `{kernel}`: {why}")]
    Signature {
        /// The kernel.
        kernel: String,
        /// Why, and what to write instead.
        why: String,
    },
    /// No usable CUDA driver, NVRTC or device.
    #[error("{0}")]
    Unavailable(String),
    /// Mapping the host memory to register failed.
    #[error("mapping {bytes} bytes of host memory failed: {source}")]
    Map {
        /// Bytes asked for.
        bytes: usize,
        /// The OS error.
        source: std::io::Error,
    },
}

impl CudaError {
    fn driver(call: &'static str) -> impl FnOnce(DriverError) -> CudaError {
        move |e| CudaError::Driver {
            call,
            code: e.0 as i32,
            name: e
                .error_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|_| format!("CUresult {}", e.0 as i32)),
            text: e
                .error_string()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }
    }
}

type Result<T> = std::result::Result<T, CudaError>;

/// Says why CUDA cannot be used here, or `None` when the driver, NVRTC and a device exist.
/// Never panics (cudarc panics when a library it loads is missing, so this checks first).
pub fn unavailable_reason() -> Option<String> {
    // SAFETY: loading a shared library runs its initialisers; the CUDA driver's and NVRTC's
    // are meant to be loaded by any process.
    if !unsafe { sys::is_culib_present() } {
        return Some(if cfg!(windows) {
            "no CUDA driver: nvcuda.dll was not found (it comes with the NVIDIA display driver, in System32: install or repair the driver)".into()
        } else {
            "no CUDA driver: libcuda.so.1 was not found by the dynamic loader (install the NVIDIA driver, or add the directory holding libcuda.so.1 to LD_LIBRARY_PATH)".into()
        });
    }
    // SAFETY: as above.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Some(if cfg!(windows) {
            // cudarc looks for nvrtc64_<major><minor>_0.dll and its variants (nvrtc64_130_0.dll
            // for CUDA 13.0) on the DLL search path.
            format!("no NVRTC: nvrtc64_{CUDA_MAJOR}0_0.dll (or another nvrtc64_{CUDA_MAJOR}*.dll) was not found, so the built-in kernels cannot be compiled through CUDA (install NVRTC from the CUDA toolkit and add its bin folder to PATH; for another CUDA version, build with its cuda-NNNNN feature, see docs/cli.md, CUDA)")
        } else {
            format!("no NVRTC: libnvrtc.so.{CUDA_MAJOR} was not found by the dynamic loader, so the built-in kernels cannot be compiled through CUDA (install NVRTC from the CUDA toolkit, or add its directory to LD_LIBRARY_PATH; for another CUDA version, build with its cuda-NNNNN feature, see docs/cli.md, CUDA)")
        });
    }
    let mut driver = 0;
    // SAFETY: `driver` is a valid out-pointer; cuDriverGetVersion needs no cuInit.
    if unsafe { sys::cuDriverGetVersion(&mut driver) }
        .result()
        .is_ok()
        && driver < BUILT_FOR
    {
        let fix = match BUILDS.iter().find(|&&b| b <= driver) {
            Some(b) => format!("rebuild with `cargo build --release --no-default-features --features cuda,cuda-{b}`"),
            None => "no build of pinstream supports a driver older than CUDA 11.8".into(),
        };
        return Some(format!(
            "the CUDA driver supports CUDA {} but this pinstream was built for CUDA {}: update the NVIDIA driver, or {fix}",
            version(driver),
            version(BUILT_FOR),
        ));
    }
    match CudaContext::device_count() {
        Ok(0) => Some("the CUDA driver lists no device".into()),
        Ok(_) => None,
        Err(e) => Some(format!(
            "the CUDA driver did not start: {} (is the NVIDIA kernel module loaded and the GPU visible? `nvidia-smi` should list it)",
            CudaError::driver("cuInit")(e)
        )),
    }
}

/// The CUDA API version the backend was built against (the `cuda-NNNNN` cargo feature): the
/// driver must be at least this version, or calls the bindings make (e.g.
/// `cuEventElapsedTime_v2` in 13.0) are missing from it.
const BUILT_FOR: i32 = if cfg!(feature = "cuda-13000") {
    13000
} else if cfg!(feature = "cuda-12080") {
    12080
} else if cfg!(feature = "cuda-12060") {
    12060
} else if cfg!(feature = "cuda-12040") {
    12040
} else if cfg!(feature = "cuda-12020") {
    12020
} else if cfg!(feature = "cuda-12000") {
    12000
} else {
    11080
};

/// The `cuda-NNNNN` features in Cargo.toml, newest first.
const BUILDS: [i32; 7] = [13000, 12080, 12060, 12040, 12020, 12000, 11080];

#[cfg(target_endian = "big")]
compile_error!("the CUDA backend passes 32-bit kernel arguments in 64-bit slots, which needs a little-endian target");

/// NVRTC's major version as the loader names it for this build.
const CUDA_MAJOR: i32 = BUILT_FOR / 1000;

fn version(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

/// What the CUDA driver says of one device.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CudaDeviceInfo {
    /// CUDA ordinal.
    pub ordinal: usize,
    /// Name.
    pub name: String,
    /// PCI address, `0000:3b:00.0` form.
    pub pci_address: String,
    /// Global memory in bytes.
    pub total_mem: u64,
    /// Compute capability.
    pub compute_capability: (i32, i32),
    /// Copy engines (`CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT`).
    pub copy_engines: i32,
    /// Driver version, e.g. 13000 for 13.0.
    pub driver_version: i32,
}

/// The CUDA devices.
pub fn devices() -> Result<Vec<CudaDeviceInfo>> {
    if let Some(why) = unavailable_reason() {
        return Err(CudaError::Unavailable(why));
    }
    let n = CudaContext::device_count().map_err(CudaError::driver("cuDeviceGetCount"))?;
    (0..n as usize).map(info).collect()
}

fn info(ordinal: usize) -> Result<CudaDeviceInfo> {
    let dev = result::device::get(ordinal as i32).map_err(CudaError::driver("cuDeviceGet"))?;
    let attr = |a| {
        // SAFETY: `dev` is a valid device handle from cuDeviceGet.
        unsafe { result::device::get_attribute(dev, a) }
            .map_err(CudaError::driver("cuDeviceGetAttribute"))
    };
    use sys::CUdevice_attribute as A;
    let mut bus = [0 as std::ffi::c_char; 32];
    // SAFETY: the buffer is 32 bytes and its length is passed; `dev` is valid.
    unsafe { sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as i32, dev) }
        .result()
        .map_err(CudaError::driver("cuDeviceGetPCIBusId"))?;
    // SAFETY: the driver wrote a NUL-terminated string into `bus`.
    let bus = unsafe { std::ffi::CStr::from_ptr(bus.as_ptr()) }
        .to_string_lossy()
        .to_ascii_lowercase();
    let mut version = 0;
    // SAFETY: `version` is a valid out-pointer.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(CudaError::driver("cuDriverGetVersion"))?;
    Ok(CudaDeviceInfo {
        ordinal,
        name: result::device::get_name(dev).map_err(CudaError::driver("cuDeviceGetName"))?,
        pci_address: bus,
        // SAFETY: `dev` is valid.
        total_mem: unsafe { result::device::total_mem(dev) }
            .map_err(CudaError::driver("cuDeviceTotalMem"))? as u64,
        compute_capability: (
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        copy_engines: attr(A::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT)?,
        driver_version: version,
    })
}

/// One CUDA device's primary context.
#[derive(Clone)]
pub struct Gpu {
    ctx: Arc<CudaContext>,
    info: CudaDeviceInfo,
}

impl Gpu {
    /// Opens device `ordinal` (its primary context, as the CUDA runtime would).
    pub fn open(ordinal: usize) -> Result<Gpu> {
        if let Some(why) = unavailable_reason() {
            return Err(CudaError::Unavailable(why));
        }
        let ctx =
            CudaContext::new(ordinal).map_err(CudaError::driver("cuDevicePrimaryCtxRetain"))?;
        Ok(Gpu {
            info: info(ordinal)?,
            ctx,
        })
    }

    /// The device.
    pub fn info(&self) -> &CudaDeviceInfo {
        &self.info
    }

    fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(CudaError::driver("cuCtxSetCurrent"))
    }

    /// Blocks until all work of this device's context completed (`cuCtxSynchronize`).
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        result::ctx::synchronize().map_err(CudaError::driver("cuCtxSynchronize"))
    }

    /// Free and total device memory (`cuMemGetInfo`).
    pub fn mem_info(&self) -> Result<(u64, u64)> {
        self.bind()?;
        let (free, total) = result::mem_get_info().map_err(CudaError::driver("cuMemGetInfo"))?;
        Ok((free as u64, total as u64))
    }

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

    /// `bytes` of device memory, zeroed (so it is committed now).
    pub fn alloc(&self, bytes: usize) -> Result<DeviceMem> {
        self.bind()?;
        // SAFETY: a plain allocation; the pointer is owned by the returned value.
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }
            .map_err(CudaError::driver("cuMemAlloc"))?;
        let mem = DeviceMem {
            ptr,
            len: bytes,
            gpu: self.clone(),
        };
        // SAFETY: `ptr` holds `bytes` bytes.
        unsafe { result::memset_d8_sync(ptr, 0, bytes) }
            .map_err(CudaError::driver("cuMemsetD8"))?;
        Ok(mem)
    }

    /// Pinned host memory of `bytes`, by `how`, pinned for this device's context.
    pub fn pinned(&self, bytes: usize, how: CudaPinning) -> Result<PinnedHost> {
        self.pinned_for(bytes, how, false)
    }

    /// Pinned host memory of `bytes`, by `how`; with `portable`, pinned for every CUDA
    /// context of the process (`CU_MEMHOSTALLOC_PORTABLE` / `CU_MEMHOSTREGISTER_PORTABLE`,
    /// 0x01 both), as a run over several GPUs needs: without it, another device reads the
    /// memory as pageable.
    pub fn pinned_for(&self, bytes: usize, how: CudaPinning, portable: bool) -> Result<PinnedHost> {
        self.bind()?;
        let start = std::time::Instant::now();
        let flags = u32::from(portable);
        let mem = match how {
            CudaPinning::HostAlloc => {
                // SAFETY: no write-combining, not mapped; portable where asked.
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
        Ok(PinnedHost {
            mem,
            how,
            gpu: self.clone(),
            in_flight: std::sync::Mutex::new(Vec::new()),
            unsettled: std::sync::atomic::AtomicBool::new(false),
            took: start.elapsed(),
        })
    }
}

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
        }
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
        let mut copies = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
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
        let mut copies = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        copies.retain(|c| !c.is_done());
        copies.push(copy.clone());
    }

    /// The bytes, once every copy in flight ended.
    pub fn as_slice(&self) -> &[u8] {
        self.settle();
        let (p, n) = self.ptr_len();
        // SAFETY: `p` holds `n` initialised bytes (zeroed pages, or driver memory zeroed in
        // `Gpu::pinned`) owned by `self`; copies use raw spans, and the engine waits for
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
    #[cfg(feature = "baselines")]
    pub(crate) fn span_mut(&mut self, range: std::ops::Range<usize>) -> HostSpan {
        self.span(range)
    }

    /// True for zero bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
        };
        if let Err(e) = r {
            tracing::warn!("releasing CUDA pinned memory failed: {e:?}");
        }
    }
}

/// Device memory (`cuMemAlloc`).
pub struct DeviceMem {
    ptr: sys::CUdeviceptr,
    len: usize,
    gpu: Gpu,
}

impl DeviceMem {
    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for zero bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for DeviceMem {
    fn drop(&mut self) {
        let _ = self.gpu.bind();
        // SAFETY: allocated by cuMemAlloc, freed once; streams using it were synchronised
        // (Stream's Drop) before the engine drops its slots.
        if let Err(e) = unsafe { result::free_sync(self.ptr) } {
            tracing::warn!("cuMemFree failed: {e:?}");
        }
    }
}

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
    raw: sys::CUstream,
    gpu: Gpu,
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
    fn around(
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
