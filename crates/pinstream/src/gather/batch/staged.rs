//! The batch copies of the APIs that stage them: [`BatchApi`] for every [`StagedApi`], as
//! [`Staged`] over the API's [`StagedCopies`].
//!
//! - CUDA: `CudaStaged` (`cuMemcpyBatchAsync` where the driver has it, else a copy per
//!   piece, from `cuMemHostAlloc` staging; see `backend::cuda::batch` for why no single DMA).
//! - Vulkan: `VulkanStaged` (one `vkCmdCopyBuffer` with a region per piece, from staging
//!   imported as pinstream imports host memory).

use super::{backend, BatchApi, DownPieces, Staged, UpPieces};
use crate::backend::api::{DeviceOf, ErrorOf, Queue};
use crate::backend::batch::StagedCopies;
#[cfg(feature = "cuda")]
use crate::backend::cuda::{Cuda, CudaStaged, Gpu};
#[cfg(feature = "vulkan")]
use crate::backend::vulkan::{Vulkan, VulkanDevice, VulkanStaged};
use crate::gather::{CallStats, GatherError, GatherOptions, OverlapCheck};
use crate::host::HostApi;

/// An API whose batch copies are [`Staged`] over staging of its own ([`StagedCopies`]):
/// its [`BatchApi`] is the one below.
pub trait StagedApi: HostApi {
    /// The API's staging and its call that copies regions through it.
    type Copies: StagedCopies<A = Self>;
    /// Staging of `capacity` bytes on `device`.
    fn staged_copies(
        device: &DeviceOf<Self>,
        capacity: usize,
    ) -> Result<Self::Copies, ErrorOf<Self>>;
    /// Why the API offers no zero-copy batch calls ([`BatchApi::zero_copy_missing`]).
    fn why_no_zero_copy() -> &'static str;
}

impl<A: StagedApi> BatchApi for A {
    type Batch = Staged<A::Copies>;

    fn batch(device: &DeviceOf<A>, options: &GatherOptions) -> Result<Self::Batch, GatherError> {
        let copies = A::staged_copies(device, options.capacity).map_err(backend)?;
        Staged::new(copies, options)
    }

    fn upload_gather(
        batch: &mut Self::Batch,
        queue: &A::Queue,
        dst: &A::Buffer,
        pieces: &UpPieces<'_>,
    ) -> Result<A::Event, GatherError> {
        batch.upload(queue, dst, pieces)?;
        queue.mark().map_err(backend)
    }

    fn download_scatter(
        batch: &mut Self::Batch,
        queue: &A::Queue,
        src: &A::Buffer,
        pieces: &mut DownPieces<'_>,
    ) -> Result<(), GatherError> {
        batch.download(queue, src, pieces)
    }

    fn zero_copy_missing() -> Option<String> {
        Some(A::why_no_zero_copy().into())
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

#[cfg(feature = "cuda")]
impl StagedApi for Cuda {
    type Copies = CudaStaged;

    fn staged_copies(device: &Gpu, capacity: usize) -> Result<CudaStaged, ErrorOf<Cuda>> {
        device.staged_copies(capacity)
    }

    /// CUDA has mapped memory ([`crate::host::HostApi::mapped`]), and the benches' zero-copy
    /// kernel (`backend::cuda::zero_copy`, feature `baselines`) reads memory of its own; the
    /// library has no zero-copy kernel over `HostApi`'s mapped memory yet.
    fn why_no_zero_copy() -> &'static str {
        "CUDA's mapped memory streams through the engine, but the library's zero-copy piece kernel is only the benches' baseline over memory of its own: use the staged calls"
    }
}

#[cfg(feature = "vulkan")]
impl StagedApi for Vulkan {
    type Copies = VulkanStaged;

    fn staged_copies(
        device: &VulkanDevice,
        capacity: usize,
    ) -> Result<VulkanStaged, ErrorOf<Vulkan>> {
        device.staged_copies(capacity)
    }

    /// Vulkan has mapped memory ([`crate::host::HostApi::mapped`]), but pinstream has no
    /// WGSL kernel yet that copies pieces out of it or into it.
    fn why_no_zero_copy() -> &'static str {
        "Vulkan's mapped memory streams through the engine, but pinstream has no WGSL kernel yet that copies scattered pieces from or into it: use the staged calls"
    }
}
