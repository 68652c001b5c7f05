//! CUDA's own ways of moving many scattered pieces, the comparison for `gather`: one
//! `cuMemcpyHtoDAsync` / `cuMemcpyDtoHAsync` per piece enqueued back to back, and the batch
//! call `cuMemcpyBatchAsync` (CUDA 12.8+) where the driver and this build have it. The host
//! and device memory are borrowed for the whole call and the stream is synchronised before
//! it returns, which makes the raw calls safe to offer.

use super::{CudaError, DeviceMem, PinnedHost, Result, Stream};
use cudarc::driver::{result, sys};
use std::time::Instant;

pub use crate::backend::native::Piece;

pub(super) fn check(dev: &DeviceMem, host: &PinnedHost, pieces: &[Piece]) -> Result<()> {
    let bad = pieces.iter().position(|p| {
        p.host.checked_add(p.len).is_none_or(|e| e > host.len())
            || p.device.checked_add(p.len).is_none_or(|e| e > dev.len)
    });
    match bad {
        Some(i) => Err(CudaError::Unavailable(format!(
            "piece {i} lies outside the host or device memory: give ranges inside both"
        ))),
        None => Ok(()),
    }
}

/// Copies every piece, host to device (`up`) or back, one call per piece enqueued back to
/// back on `stream`, then synchronises once; the wall time in microseconds.
pub fn each_piece(
    stream: &Stream,
    dev: &DeviceMem,
    host: &mut PinnedHost,
    pieces: &[Piece],
    up: bool,
) -> Result<f64> {
    check(dev, host, pieces)?;
    stream.gpu.bind()?;
    let base = host.span_mut(0..host.len()).ptr;
    let start = Instant::now();
    let mut r = Ok(());
    for p in pieces {
        let (h, d) = (base.wrapping_add(p.host), dev.ptr + p.device as u64);
        // SAFETY: both ranges lie in their memory (checked), which is borrowed until the
        // stream is synchronised below.
        r = unsafe {
            match up {
                true => sys::cuMemcpyHtoDAsync_v2(d, h.cast(), p.len, stream.raw),
                false => sys::cuMemcpyDtoHAsync_v2(h.cast(), d, p.len, stream.raw),
            }
        }
        .result();
        if r.is_err() {
            break;
        }
    }
    let call = if up {
        "cuMemcpyHtoDAsync"
    } else {
        "cuMemcpyDtoHAsync"
    };
    finish(stream, r.map_err(CudaError::driver(call)), start)
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

/// Copies all of `host` to the start of `dev` (`up`) or back, once, waited for: how a
/// comparison fills and reads back the device memory around the rows it times.
pub fn whole(stream: &Stream, dev: &DeviceMem, host: &mut PinnedHost, up: bool) -> Result<()> {
    let len = host.len().min(dev.len);
    each_piece(
        stream,
        dev,
        host,
        &[Piece {
            host: 0,
            device: 0,
            len,
        }],
        up,
    )
    .map(drop)
}

/// Copies every piece, host to device (`up`) or back, in one `cuMemcpyBatchAsync` on
/// `stream` (source order: the stream's), then synchronises; the wall time in µs. Check
/// [`batch_unavailable`] first.
pub fn batch(
    stream: &Stream,
    dev: &DeviceMem,
    host: &mut PinnedHost,
    pieces: &[Piece],
    up: bool,
) -> Result<f64> {
    if let Some(why) = batch_unavailable() {
        return Err(CudaError::Unavailable(why));
    }
    check(dev, host, pieces)?;
    stream.gpu.bind()?;
    let base = host.span_mut(0..host.len()).ptr as u64;
    let (mut hosts, mut devs): (Vec<u64>, Vec<u64>) = pieces
        .iter()
        .map(|p| (base + p.host as u64, dev.ptr + p.device as u64))
        .unzip();
    let mut sizes: Vec<usize> = pieces.iter().map(|p| p.len).collect();
    let (dsts, srcs) = match up {
        true => (&mut devs, &mut hosts),
        false => (&mut hosts, &mut devs),
    };
    let start = Instant::now();
    // SAFETY: every range lies in its memory (checked), borrowed until the stream is
    // synchronised in `finish`; the arrays outlive the call (the driver reads them in it).
    let r = unsafe {
        call_batch(
            dsts,
            srcs,
            &mut sizes,
            (up, stream.gpu.info.ordinal),
            stream.raw,
        )
    };
    finish(stream, r, start)
}

#[cfg(any(feature = "cuda-12080", feature = "cuda-13000"))]
/// # Safety
/// The addresses in `dsts` and `srcs` must be valid for `sizes` bytes until the stream's
/// copies complete.
unsafe fn call_batch(
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
unsafe fn call_batch(
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
