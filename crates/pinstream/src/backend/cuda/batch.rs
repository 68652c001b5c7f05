//! CUDA's half of the batch copies ([`crate::backend::batch`]): pinned staging of CUDA's own
//! (`cuMemHostAlloc`) and, on the caller's stream, `cuMemcpyBatchAsync` with a copy per
//! region where the driver and this build have it (CUDA 12.8+), else a `cuMemcpyHtoDAsync`
//! (`cuMemcpyDtoHAsync`) per region enqueued back to back; then one synchronisation. CUDA
//! has no one copy command that scatters (Vulkan's `vkCmdCopyBuffer` takes regions; OpenCL's
//! gather moves one DMA and scatters with a kernel): a packed DMA and a scatter kernel of
//! pinstream's own would need a CUDA copy kernel, which the library does not carry yet, so
//! the driver's own batch call is the one call per batch here. Also what the benches' CUDA
//! loops (`scattered`) call.

use super::api::Cuda;
use super::{CudaError, CudaPinning, DeviceMem, Gpu, PinnedHost, Result, Stream};
use crate::backend::batch::{outside, Region, StagedCopies};
use crate::backend::error::BackendError;
use cudarc::driver::{result, sys};
use std::time::Instant;

/// CUDA's staging and its copies of regions through it.
pub struct CudaStaged {
    host: PinnedHost,
}

impl Gpu {
    /// Staging of `capacity` bytes (`cuMemHostAlloc`).
    pub fn staged_copies(&self, capacity: usize) -> Result<CudaStaged> {
        Ok(CudaStaged {
            host: self.pinned(capacity.max(1), CudaPinning::HostAlloc)?,
        })
    }
}

impl StagedCopies for CudaStaged {
    type A = Cuda;

    fn staging(&mut self) -> &mut [u8] {
        self.host.as_mut_slice()
    }

    fn copy(
        &mut self,
        stream: &Stream,
        dev: &DeviceMem,
        regions: &[Region],
        up: bool,
    ) -> std::result::Result<(), BackendError> {
        Ok(copy_regions(stream, dev, &mut self.host, regions, up)?)
    }

    fn buffer_len(&self, dev: &DeviceMem) -> usize {
        dev.len
    }

    fn way(&self) -> String {
        match batch_unavailable() {
            None => "cuMemcpyBatchAsync from pinned staging".into(),
            Some(_) => "cuMemcpyHtoDAsync / cuMemcpyDtoHAsync per piece from pinned staging".into(),
        }
    }
}

/// Copies `regions` between `host` and `dev` on `stream` (the batch call where there is one),
/// then synchronises the stream.
fn copy_regions(
    stream: &Stream,
    dev: &DeviceMem,
    host: &mut PinnedHost,
    regions: &[Region],
    up: bool,
) -> Result<()> {
    if let Some(i) = outside(regions, host.len(), dev.len) {
        return Err(CudaError::Unavailable(format!(
            "region {i} lies outside the staging or the device memory: give ranges inside both"
        )));
    }
    stream.gpu.bind()?;
    let base = host.span_mut(0..host.len()).ptr as u64;
    let start = Instant::now();
    let r = match batch_unavailable() {
        None => {
            let (mut dsts, mut srcs, mut sizes) =
                batch_arrays((base, dev.ptr), regions.iter().copied(), up);
            let at = (up, stream.gpu.info.ordinal);
            // SAFETY: every range lies in its memory (checked above), borrowed until the
            // stream is synchronised in `finish`; the arrays outlive the call.
            unsafe { call_batch(&mut dsts, &mut srcs, &mut sizes, at, stream.raw) }
        }
        Some(_) => each_region(stream, (base, dev.ptr), regions, up),
    };
    finish(stream, r, start).map(drop)
}

/// The arrays `cuMemcpyBatchAsync` takes for `regions` between the staging at `host` and
/// the device memory at `dev`: destinations, sources and sizes.
pub(super) fn batch_arrays(
    (host, dev): (u64, u64),
    regions: impl Iterator<Item = Region>,
    up: bool,
) -> (Vec<u64>, Vec<u64>, Vec<usize>) {
    let mut out = (Vec::new(), Vec::new(), Vec::new());
    for r in regions {
        let (h, d) = (host + r.stage as u64, dev + r.device as u64);
        let (dst, src) = if up { (d, h) } else { (h, d) };
        out.0.push(dst);
        out.1.push(src);
        out.2.push(r.len);
    }
    out
}

/// A copy call per region, enqueued back to back on `stream`; the first failure stops them.
/// The caller checked the regions and synchronises the stream after.
fn each_region(
    stream: &Stream,
    (host, dev): (u64, u64),
    regions: &[Region],
    up: bool,
) -> Result<()> {
    for r in regions {
        let (h, d) = (host + r.stage as u64, dev + r.device as u64);
        // SAFETY: both ranges lie in their memory (the caller checked them), which the
        // caller borrows until it synchronises the stream.
        let done = unsafe {
            match up {
                true => {
                    sys::cuMemcpyHtoDAsync_v2(d, h as *const std::ffi::c_void, r.len, stream.raw)
                }
                false => {
                    sys::cuMemcpyDtoHAsync_v2(h as *mut std::ffi::c_void, d, r.len, stream.raw)
                }
            }
        };
        let call = if up {
            "cuMemcpyHtoDAsync"
        } else {
            "cuMemcpyDtoHAsync"
        };
        done.result().map_err(CudaError::driver(call))?;
    }
    Ok(())
}

/// Synchronises `stream` whatever `r` was (so no copy outlives the borrowed memory), then
/// gives `r`'s failure or the time since `start`, µs.
pub(super) fn finish(stream: &Stream, r: Result<()>, start: Instant) -> Result<f64> {
    // SAFETY: live stream.
    let done = unsafe { result::stream::synchronize(stream.raw) }
        .map_err(CudaError::driver("cuStreamSynchronize"));
    r?;
    done?;
    Ok(start.elapsed().as_secs_f64() * 1e6)
}

/// The driver's CUDA version (`cuDriverGetVersion`, e.g. 12080).
fn driver_version() -> Result<i32> {
    let mut v = 0;
    // SAFETY: writes one int.
    unsafe { sys::cuDriverGetVersion(&mut v) }
        .result()
        .map_err(CudaError::driver("cuDriverGetVersion"))?;
    Ok(v)
}

/// The CUDA version whose `cuMemcpyBatchAsync` this build calls, if any.
const BATCH_BUILT: Option<i32> = if cfg!(feature = "cuda-13000") {
    Some(13000)
} else if cfg!(feature = "cuda-12080") {
    Some(12080)
} else {
    None
};

/// Why `cuMemcpyBatchAsync` cannot be measured here, if it cannot.
pub fn batch_unavailable() -> Option<String> {
    let Some(built) = BATCH_BUILT else {
        return Some("this build's CUDA bindings predate cuMemcpyBatchAsync (CUDA 12.8) or postdate the layout pinstream calls (13.0): build with --features cuda-12080 or cuda-13000".into());
    };
    match driver_version() {
        Err(e) => Some(e.to_string()),
        Ok(v) if v < built => Some(format!(
            "the driver is CUDA {}.{}, and this build calls the CUDA {}.{} form of cuMemcpyBatchAsync: update the driver, or build for CUDA 12.8 (--features cuda-12080)",
            v / 1000, v % 1000 / 10, built / 1000, built % 1000 / 10
        )),
        Ok(_) => None,
    }
}

#[cfg(any(feature = "cuda-12080", feature = "cuda-13000"))]
/// # Safety
/// The addresses in `dsts` and `srcs` must be valid for `sizes` bytes until the stream's
/// copies complete.
pub(super) unsafe fn call_batch(
    dsts: &mut [u64],
    srcs: &mut [u64],
    sizes: &mut [usize],
    (up, ordinal): (bool, usize),
    stream: sys::CUstream,
) -> Result<()> {
    use sys::CUmemLocationType::{CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_HOST};
    let host = sys::CUmemLocation {
        type_: CU_MEM_LOCATION_TYPE_HOST,
        id: 0,
    };
    let device = sys::CUmemLocation {
        type_: CU_MEM_LOCATION_TYPE_DEVICE,
        id: ordinal as i32,
    };
    let (src_hint, dst_hint) = if up { (host, device) } else { (device, host) };
    let mut attrs = sys::CUmemcpyAttributes {
        srcAccessOrder: sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
        srcLocHint: src_hint,
        dstLocHint: dst_hint,
        flags: 0,
    };
    let mut idx = 0usize;
    let n = sizes.len();
    let (d, s, z) = (dsts.as_mut_ptr(), srcs.as_mut_ptr(), sizes.as_mut_ptr());
    #[cfg(feature = "cuda-13000")]
    // SAFETY: the arrays hold `n` entries each; one attribute applies from index 0.
    let r = unsafe { sys::cuMemcpyBatchAsync_v2(d, s, z, n, &mut attrs, &mut idx, 1, stream) };
    #[cfg(not(feature = "cuda-13000"))]
    let r = {
        let mut fail = 0usize;
        // SAFETY: as above; `fail` receives the failing index.
        unsafe { sys::cuMemcpyBatchAsync(d, s, z, n, &mut attrs, &mut idx, 1, &mut fail, stream) }
    };
    r.result().map_err(CudaError::driver("cuMemcpyBatchAsync"))
}

#[cfg(not(any(feature = "cuda-12080", feature = "cuda-13000")))]
/// # Safety
/// Nothing is called: this build has no `cuMemcpyBatchAsync`.
pub(super) unsafe fn call_batch(
    _: &mut [u64],
    _: &mut [u64],
    _: &mut [usize],
    _: (bool, usize),
    _: sys::CUstream,
) -> Result<()> {
    Err(CudaError::Unavailable(
        batch_unavailable().unwrap_or_default(),
    ))
}
