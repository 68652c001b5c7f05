//! What a program's own copies need, shared by the batch copies (`batch`) and the benches'
//! copy calls (`native`): pinned memory in one chunk, a command buffer and fence on the queue
//! one direction's copies run on, and the recording of many copy regions.

use super::device::Shared;
use super::host::{VkPinning, VulkanHost};
use super::plan::Role;
use super::{Result, VulkanDevice, VulkanError};
use crate::backend::batch::Region;
use crate::backend::lanes::HostMemory;
use crate::sync::lock;
use ash::vk;
use std::sync::Arc;

/// `bytes` imported (the driver's host-visible memory where it does not import) in one chunk,
/// or why the bench cannot use one.
pub(super) fn one_chunk(device: &VulkanDevice, bytes: usize) -> Result<VulkanHost> {
    let how = match device.shared.raw.import_alignment() {
        Ok(_) => VkPinning::Import,
        Err(_) => VkPinning::HostVisible,
    };
    let host = VulkanHost::new(device, bytes.max(1), how, None)?;
    if host.chunk_count() != 1 {
        return Err(VulkanError::misuse(
            "native copies",
            format!("{bytes} bytes take more than one Vulkan allocation: measure fewer or smaller pieces"),
        ));
    }
    Ok(host)
}

/// All of `host`, memory [`one_chunk`] made (one chunk, so one slice).
pub(super) fn whole_mut(host: &mut VulkanHost) -> &mut [u8] {
    let len = host.len();
    let parts = host
        .slices_mut(0..len)
        .expect("the whole memory is in range");
    parts
        .into_iter()
        .next()
        .expect("one chunk: `one_chunk` checked it")
}

/// A command pool, a command buffer and a fence on the queue one direction's copies run on.
pub(super) struct Submitter {
    shared: Arc<Shared>,
    hw: super::plan::Hw,
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
}

impl Submitter {
    pub(super) fn new(shared: &Arc<Shared>, role: Role) -> Result<Self> {
        shared.has_queues("copy")?;
        let hw = shared.route_alone(role, 0)[0];
        let family = shared.family(hw).index;
        let d = &shared.device;
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(family)
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: the device is live; `info` lives through the call.
        let pool = unsafe { d.create_command_pool(&info, None) }
            .map_err(VulkanError::call("vkCreateCommandPool"))?;
        let mut s = Submitter {
            shared: shared.clone(),
            hw,
            pool,
            cmd: vk::CommandBuffer::null(),
            fence: vk::Fence::null(),
        };
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .command_buffer_count(1);
        // SAFETY: the pool is ours and live; on failure `s` drops what was made.
        s.cmd = unsafe { d.allocate_command_buffers(&alloc) }
            .map_err(VulkanError::call("vkAllocateCommandBuffers"))?[0];
        // SAFETY: as above.
        s.fence = unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) }
            .map_err(VulkanError::call("vkCreateFence"))?;
        Ok(s)
    }

    /// Records the command buffer anew with `record` (simultaneous use: it may be submitted
    /// again before the last submit ends).
    pub(super) fn record(
        &self,
        record: impl FnOnce(&ash::Device, vk::CommandBuffer),
    ) -> Result<()> {
        let d = &self.shared.device;
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE);
        // SAFETY: the buffer is ours and not pending (every submit was waited for by
        // `submit`'s fence before this returns to the caller).
        unsafe { d.begin_command_buffer(self.cmd, &begin) }
            .map_err(VulkanError::call("vkBeginCommandBuffer"))?;
        record(d, self.cmd);
        // SAFETY: recording began above.
        unsafe { d.end_command_buffer(self.cmd) }.map_err(VulkanError::call("vkEndCommandBuffer"))
    }

    /// The hardware queue, locked (external synchronization).
    fn queue(&self) -> std::sync::MutexGuard<'_, vk::Queue> {
        let family = self.shared.family(self.hw);
        lock(&family.queues[self.hw.queue % family.queues.len()])
    }

    /// Submits the command buffer `times` times, the fence on the last, and waits for it.
    pub(super) fn submit(&self, times: usize) -> Result<()> {
        let d = &self.shared.device;
        let cmds = [self.cmd];
        let submit = vk::SubmitInfo::default().command_buffers(&cmds);
        for i in 0..times.max(1) {
            let fence = if i + 1 == times.max(1) {
                self.fence
            } else {
                vk::Fence::null()
            };
            let queue = self.queue();
            // SAFETY: the queue is locked (external synchronization); the command buffer is
            // recorded for simultaneous use; `submit` lives through the call.
            unsafe { d.queue_submit(*queue, &[submit], fence) }
                .map_err(VulkanError::call("vkQueueSubmit"))?;
        }
        // SAFETY: the fence is ours and was submitted above.
        unsafe { d.wait_for_fences(&[self.fence], true, u64::MAX) }
            .map_err(VulkanError::call("vkWaitForFences"))?;
        // SAFETY: the fence is signalled and no longer in use.
        unsafe { d.reset_fences(&[self.fence]) }.map_err(VulkanError::call("vkResetFences"))
    }
}

impl Drop for Submitter {
    fn drop(&mut self) {
        let d = &self.shared.device;
        // SAFETY: every submit was waited for (`submit` returns after its fence, or failed
        // before the fence's submit, in which case the device is idled first); the handles
        // are ours (null ones are ignored by the driver).
        unsafe {
            let _ = d.queue_wait_idle(*self.queue());
            d.destroy_fence(self.fence, None);
            d.destroy_command_pool(self.pool, None);
        }
    }
}

/// Records `regions` from `src` to `dst`: one `vkCmdCopyBuffer` with them all (`whole`) or
/// one per region; for a download, the writes made visible to the host after.
pub(super) fn record_copies(
    d: &ash::Device,
    cmd: vk::CommandBuffer,
    (src, dst): (vk::Buffer, vk::Buffer),
    regions: &[vk::BufferCopy],
    whole: bool,
    to_host: bool,
) {
    // SAFETY: recording into `cmd`; both buffers are live and the regions lie inside them
    // (every caller checks its regions against both buffers' sizes first).
    unsafe {
        if whole {
            d.cmd_copy_buffer(cmd, src, dst, regions);
        } else {
            for r in regions {
                d.cmd_copy_buffer(cmd, src, dst, std::slice::from_ref(r));
            }
        }
    }
    if to_host {
        let barrier = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(vk::AccessFlags::HOST_READ);
        // SAFETY: recording into `cmd`.
        unsafe {
            d.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            )
        };
    }
}

/// `regions` as `vkCmdCopyBuffer` regions from the staging to the buffer (`up`) or back.
pub(super) fn buffer_copies(
    regions: impl Iterator<Item = Region>,
    up: bool,
) -> Vec<vk::BufferCopy> {
    regions
        .map(|r| {
            let (stage, device) = (r.stage as u64, r.device as u64);
            let (src, dst) = if up { (stage, device) } else { (device, stage) };
            vk::BufferCopy::default()
                .src_offset(src)
                .dst_offset(dst)
                .size(r.len as u64)
        })
        .collect()
}
