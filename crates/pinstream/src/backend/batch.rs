//! The API half of the batch copies (`gather::BatchApi`): pinned staging memory of an API's
//! own on one device, and the one call of that API that copies many regions between it and a
//! device buffer (Vulkan: one `vkCmdCopyBuffer` with a region each; CUDA:
//! `cuMemcpyBatchAsync`, or a copy per region). The gather layer packs the caller's pieces
//! into the staging and checks them; each implementation checks the regions again against
//! both memories, so the call is safe whoever calls it.

use super::api::Api;
use super::error::BackendError;

/// One region of a staged copy: `len` bytes at `stage` in the staging memory and at
/// `device` in the device buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Offset in the staging memory.
    pub stage: usize,
    /// Offset in the device buffer.
    pub device: usize,
    /// Bytes.
    pub len: usize,
}

/// Pinned staging memory of an API's own on one device, and its call that copies many
/// regions between the staging and a device buffer.
pub trait StagedCopies: Send {
    /// The API.
    type A: Api;
    /// The staging memory, to pack before [`Self::copy`] up and unpack after one down.
    /// Every copy has ended when [`Self::copy`] returns, so this waits for nothing.
    fn staging(&mut self) -> &mut [u8];
    /// Copies every region from the staging into `buffer` (`up`) or from `buffer` into the
    /// staging, after the commands enqueued on `queue` before the call, and returns once
    /// every region has been copied. Regions outside the staging or the buffer are refused
    /// before anything is enqueued.
    fn copy(
        &mut self,
        queue: &<Self::A as Api>::Queue,
        buffer: &<Self::A as Api>::Buffer,
        regions: &[Region],
        up: bool,
    ) -> Result<(), BackendError>;
    /// The bytes of `buffer`.
    fn buffer_len(&self, buffer: &<Self::A as Api>::Buffer) -> usize;
    /// The call that copies, for reports.
    fn way(&self) -> String;
}

/// The index of the first region that lies past `staging` bytes or `buffer` bytes.
pub fn outside(regions: &[Region], staging: usize, buffer: usize) -> Option<usize> {
    let past = |at: usize, len: usize, size: usize| at.checked_add(len).is_none_or(|e| e > size);
    regions
        .iter()
        .position(|r| past(r.stage, r.len, staging) || past(r.device, r.len, buffer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_past_either_memory_are_found() {
        let r = |stage, device, len| Region { stage, device, len };
        assert_eq!(outside(&[r(0, 0, 10), r(10, 90, 10)], 20, 100), None);
        assert_eq!(outside(&[r(0, 0, 10), r(11, 0, 10)], 20, 100), Some(1));
        assert_eq!(outside(&[r(0, 95, 10)], 20, 100), Some(0));
        assert_eq!(outside(&[r(usize::MAX, 0, 2)], 20, 100), Some(0));
    }
}
