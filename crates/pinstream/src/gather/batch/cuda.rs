//! CUDA's batch copies: [`Staged`] over [`CudaStaged`] (`cuMemcpyBatchAsync` where the
//! driver has it, else a copy per piece, from `cuMemHostAlloc` staging; see
//! `backend::cuda::batch` for why no single DMA).

use super::{backend, BatchApi, DownPieces, Staged, UpPieces};
use crate::backend::cuda::{Cuda, CudaStaged, DeviceMem, Gpu, Stream, Timed};
use crate::gather::{CallStats, GatherError, GatherOptions, OverlapCheck};

impl BatchApi for Cuda {
    type Batch = Staged<CudaStaged>;

    fn batch(device: &Gpu, options: &GatherOptions) -> Result<Self::Batch, GatherError> {
        let copies = device.staged_copies(options.capacity).map_err(backend)?;
        Staged::new(copies, options)
    }

    fn upload_gather(
        batch: &mut Self::Batch,
        queue: &Stream,
        dst: &DeviceMem,
        pieces: &UpPieces<'_>,
    ) -> Result<Timed, GatherError> {
        batch.upload(queue, dst, pieces)?;
        queue.mark().map_err(backend)
    }

    fn download_scatter(
        batch: &mut Self::Batch,
        queue: &Stream,
        src: &DeviceMem,
        pieces: &mut DownPieces<'_>,
    ) -> Result<(), GatherError> {
        batch.download(queue, src, pieces)
    }

    /// CUDA has mapped memory ([`crate::host::HostApi::mapped`]), and the benches' zero-copy
    /// kernel (`backend::cuda::zero_copy`, feature `baselines`) reads memory of its own; the
    /// library has no zero-copy kernel over `HostApi`'s mapped memory yet.
    fn zero_copy_missing() -> Option<String> {
        Some("CUDA's mapped memory streams through the engine, but the library's zero-copy piece kernel is only the benches' baseline over memory of its own: use the staged calls".into())
    }

    fn batch_way(batch: &Self::Batch) -> String {
        batch.way()
    }

    fn last_call(batch: &Self::Batch) -> CallStats {
        batch.last_call()
    }

    fn set_overlap_check(batch: &mut Self::Batch, check: OverlapCheck) {
        batch.set_overlap_check(check);
    }
}
