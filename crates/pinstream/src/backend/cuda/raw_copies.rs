//! CUDA's own floor for small copies: `cuMemcpyHtoDAsync` called directly on a stream, with
//! no event pair around it (pinstream's CUDA path records two), each copy waited for with
//! `cuStreamSynchronize` or a batch of them enqueued back to back and waited for once. The
//! host memory is borrowed for the whole call and the stream is synchronised before it
//! returns, which makes the raw loop safe to offer.

use super::{CudaError, DeviceMem, PinnedHost, Result, Stream};
use cudarc::driver::{result, sys};
use std::time::Instant;

/// Copies the first `len` bytes of `src` into `dst` `count` times, each copy waited for
/// (`batch` = 1) or in `count` batches of `batch` copies waited for once; each sample's wall
/// time per copy, in microseconds.
pub fn copy_floor(
    stream: &Stream,
    dst: &DeviceMem,
    src: &PinnedHost,
    len: usize,
    count: usize,
    batch: usize,
) -> Result<Vec<f64>> {
    assert!(len <= dst.len && len <= src.len(), "copy past the memory");
    stream.gpu.bind()?;
    let span = src.span(0..len);
    let batch = batch.max(1);
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let start = Instant::now();
        let mut r = Ok(());
        for _ in 0..batch {
            // SAFETY: `src` is borrowed until the stream is synchronised below; the range
            // lies in both allocations (checked above).
            r = unsafe { sys::cuMemcpyHtoDAsync_v2(dst.ptr, span.ptr.cast(), len, stream.raw) }
                .result()
                .map_err(CudaError::driver("cuMemcpyHtoDAsync"));
            if r.is_err() {
                break;
            }
        }
        // SAFETY: live stream; waited for whatever happened, so no copy outlives `src`.
        let done = unsafe { result::stream::synchronize(stream.raw) }
            .map_err(CudaError::driver("cuStreamSynchronize"));
        r?;
        done?;
        out.push(start.elapsed().as_secs_f64() * 1e6 / batch as f64);
    }
    Ok(out)
}
