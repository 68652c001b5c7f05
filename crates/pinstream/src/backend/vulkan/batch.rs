//! Vulkan's half of the batch copies ([`crate::backend::batch`]): staging imported as
//! pinstream imports host memory (the driver's host-visible memory where it does not import),
//! in one chunk, and one command buffer of one `vkCmdCopyBuffer` with a region per piece,
//! submitted once and waited for by a fence, on the queue the device's copy way sends that
//! direction to when the other has nothing in flight (`Shared::route_alone`). One DMA command per batch, as Vulkan allows: the copy engine walks the
//! regions itself, so no copy kernel is needed (OpenCL's gather needs one).

use super::api::Vulkan;
use super::device::VulkanBuffer;
use super::host::VulkanHost;
use super::plan::Role;
use super::queue::VulkanQueue;
use super::submit::{buffer_copies, one_chunk, record_copies, whole_mut, Submitter};
use super::{Result, VulkanDevice, VulkanError};
use crate::backend::batch::{outside, Region, StagedCopies};
use crate::backend::error::BackendError;
use crate::backend::lanes::HostMemory;

/// Vulkan's staging and the command buffers that copy regions through it.
pub struct VulkanStaged {
    host: VulkanHost,
    up: Submitter,
    down: Submitter,
}

impl VulkanDevice {
    /// Staging of `capacity` bytes in one chunk, and a command buffer for each direction.
    pub fn staged_copies(&self, capacity: usize) -> Result<VulkanStaged> {
        Ok(VulkanStaged {
            host: one_chunk(self, capacity)?,
            up: Submitter::new(&self.shared, Role::Upload)?,
            down: Submitter::new(&self.shared, Role::Download)?,
        })
    }
}

impl StagedCopies for VulkanStaged {
    type A = Vulkan;

    fn staging(&mut self) -> &mut [u8] {
        whole_mut(&mut self.host)
    }

    fn copy(
        &mut self,
        queue: &VulkanQueue,
        buffer: &VulkanBuffer,
        regions: &[Region],
        up: bool,
    ) -> std::result::Result<(), BackendError> {
        if let Some(i) = outside(regions, self.host.len(), self.buffer_len(buffer)) {
            let what = format!(
                "region {i} ({:?}) lies past the staging or the buffer",
                regions[i]
            );
            return Err(VulkanError::misuse("batch copy", what).into());
        }
        // The caller's commands before this call come first: its queue is drained.
        queue.finish()?;
        let copies = buffer_copies(regions.iter().copied(), up);
        let (src, dst, submitter) = match up {
            true => (self.host.chunk_buffer(0), buffer.buffer, &self.up),
            false => (buffer.buffer, self.host.chunk_buffer(0), &self.down),
        };
        submitter.record(|d, cmd| record_copies(d, cmd, (src, dst), &copies, true, !up))?;
        Ok(submitter.submit(1)?)
    }

    fn buffer_len(&self, buffer: &VulkanBuffer) -> usize {
        usize::try_from(buffer.size).unwrap_or(usize::MAX)
    }

    fn way(&self) -> String {
        "one vkCmdCopyBuffer with a region per piece, from pinned staging".into()
    }
}
