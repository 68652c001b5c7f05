//! CUDA's own ways of moving many scattered pieces, the comparison for `gather`: one
//! `cuMemcpyHtoDAsync` / `cuMemcpyDtoHAsync` per piece enqueued back to back, and the batch
//! call `cuMemcpyBatchAsync` (CUDA 12.8+) where the driver and this build have it. The host
//! and device memory are borrowed for the whole call and the stream is synchronised before
//! it returns, which makes the raw calls safe to offer.

pub use super::batch::batch_unavailable;
pub(super) use super::batch::finish;
use super::batch::{batch_arrays, call_batch};
use super::{CudaError, DeviceMem, PinnedHost, Result, Stream};
use cudarc::driver::sys;
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
    let (mut dsts, mut srcs, mut sizes) =
        batch_arrays((base, dev.ptr), pieces.iter().map(|&p| p.into()), up);
    let start = Instant::now();
    // SAFETY: every range lies in its memory (checked), borrowed until the stream is
    // synchronised in `finish`; the arrays outlive the call (the driver reads them in it).
    let r = unsafe {
        call_batch(
            &mut dsts,
            &mut srcs,
            &mut sizes,
            (up, stream.gpu.info.ordinal),
            stream.raw,
        )
    };
    finish(stream, r, start)
}
