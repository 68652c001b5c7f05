//! Vulkan's batch copies: [`Staged`] over [`VulkanStaged`] (one `vkCmdCopyBuffer` with a
//! region per piece, from staging imported as pinstream imports host memory).

use super::{backend, BatchApi, DownPieces, Staged, UpPieces};
use crate::backend::api::Queue;
use crate::backend::vulkan::{
    Vulkan, VulkanBuffer, VulkanDevice, VulkanEvent, VulkanQueue, VulkanStaged,
};
use crate::gather::{CallStats, GatherError, GatherOptions, OverlapCheck};

impl BatchApi for Vulkan {
    type Batch = Staged<VulkanStaged>;

    fn batch(device: &VulkanDevice, options: &GatherOptions) -> Result<Self::Batch, GatherError> {
        let copies = device.staged_copies(options.capacity).map_err(backend)?;
        Staged::new(copies, options)
    }

    fn upload_gather(
        batch: &mut Self::Batch,
        queue: &VulkanQueue,
        dst: &VulkanBuffer,
        pieces: &UpPieces<'_>,
    ) -> Result<VulkanEvent, GatherError> {
        batch.upload(queue, dst, pieces)?;
        queue.mark().map_err(backend)
    }

    fn download_scatter(
        batch: &mut Self::Batch,
        queue: &VulkanQueue,
        src: &VulkanBuffer,
        pieces: &mut DownPieces<'_>,
    ) -> Result<(), GatherError> {
        batch.download(queue, src, pieces)
    }

    /// Vulkan has mapped memory ([`crate::host::HostApi::mapped`]), but pinstream has no
    /// WGSL kernel yet that copies pieces out of it or into it.
    fn zero_copy_missing() -> Option<String> {
        Some("Vulkan's mapped memory streams through the engine, but pinstream has no WGSL kernel yet that copies scattered pieces from or into it: use the staged calls".into())
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
