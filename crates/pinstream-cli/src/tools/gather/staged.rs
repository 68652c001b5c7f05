//! `bench gather`'s rows of pinstream's staged batch copies through any API
//! ([`BatchApi::upload_gather`], [`BatchApi::download_scatter`]): on Vulkan, pieces packed
//! into pinned staging and one `vkCmdCopyBuffer` with a region per piece; on CUDA,
//! `cuMemcpyBatchAsync` (or a copy per piece) from the staging. Each row checked as the
//! OpenCL rows are: one more call onto zeros, read back and compared with the reference.

use super::pieces::{carve, expected_device, host_order, row, timed, with_stats};
use super::pieces::{wrong_bytes, wrong_pieces};
use super::{GatherBenchError, Row, Shape, Way};
use crate::tools::bench::BenchError;
use pinstream::backend::api::Device;
use pinstream::gather::{BatchApi, CallStats, GatherOptions};

const UP: &str = "BatchApi::upload_gather (pack into pinned staging, one copy call per batch)";
const DOWN: &str =
    "BatchApi::download_scatter (one copy call per batch into pinned staging, unpack)";

/// A backend failure as the bench's.
fn backend(e: impl Into<pinstream::backend::error::BackendError>) -> GatherBenchError {
    BenchError::Backend(e.into()).into()
}

/// The staged rows both ways, checked, and how the API moves a batch.
pub(super) fn staged_rows<A: BatchApi>(
    device: &A::Device,
    shape: &Shape,
    offs: &[(usize, usize)],
    source: &[u8],
) -> Result<(Vec<Row>, String), GatherBenchError> {
    let mut batch = A::batch(device, &GatherOptions::default())?;
    let q = device.queue().map_err(backend)?;
    let span = shape.span();
    let buf = device.allocate(span).map_err(backend)?;
    let n = shape.piece_size;
    let zeros = vec![0u8; span];
    let mut calls: Vec<CallStats> = Vec::new();
    let pieces: Vec<(&[u8], usize)> = offs.iter().map(|&(h, d)| (&source[h..h + n], d)).collect();
    let up = |batch: &mut A::Batch, pieces: &[(&[u8], usize)]| {
        let done = A::upload_gather(batch, &q, &buf, pieces)?;
        device.wait(&done).map_err(backend)
    };
    let us = timed(shape.repeat, || {
        up(&mut batch, &pieces)?;
        calls.push(A::last_call(&batch));
        Ok::<_, GatherBenchError>(())
    })?;
    let up_row = with_stats(
        row(("pinstream", Way::Gather), UP, true, shape, &us),
        &calls,
    );
    up(&mut batch, &[(&zeros, 0)])?;
    up(&mut batch, &pieces)?;
    let want = expected_device(shape, offs, source);
    let mut got = vec![0u8; span];
    A::download_scatter(&mut batch, &q, &buf, &mut [(&mut got[..], 0)])?;
    check(UP, wrong_bytes(&got, &want))?;
    calls.clear();
    let order = host_order(offs);
    let down = |batch: &mut A::Batch, dst: &mut [u8]| {
        let mut pieces = carve(dst, offs, &order, n);
        A::download_scatter(batch, &q, &buf, &mut pieces)
    };
    let us = timed(shape.repeat, || {
        down(&mut batch, &mut got)?;
        calls.push(A::last_call(&batch));
        Ok::<_, GatherBenchError>(())
    })?;
    let down_row = with_stats(
        row(("pinstream", Way::Gather), DOWN, false, shape, &us),
        &calls,
    );
    got.fill(0);
    down(&mut batch, &mut got)?;
    check(DOWN, wrong_pieces(shape, offs, &got, &want))?;
    Ok((vec![up_row, down_row], A::batch_way(&batch)))
}

/// A row whose checked call moved `wrong` bytes wrong refused.
fn check(path: &str, wrong: usize) -> Result<(), GatherBenchError> {
    match wrong {
        0 => Ok(()),
        wrong => Err(GatherBenchError::Wrong {
            row: path.into(),
            wrong,
        }),
    }
}
