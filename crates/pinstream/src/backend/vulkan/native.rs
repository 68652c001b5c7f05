//! Vulkan's own copy calls offered to the benches ([`crate::backend::native`]), beside
//! pinstream's path: a small upload as a program would make it with Vulkan alone (one
//! recorded `vkCmdCopyBuffer`, `vkQueueSubmit` with a fence, `vkWaitForFences`: no timeline
//! semaphore, no timestamps), and scattered pieces as one command buffer of a
//! `vkCmdCopyBuffer` per piece or of one `vkCmdCopyBuffer` with a region per piece (Vulkan's
//! batch). Each over memory imported as pinstream imports it, on the queue the device's copy
//! way sends that direction to.

use super::device::{Backing, Shared, VulkanBuffer};
use super::host::{VkPinning, VulkanHost};
use super::plan::Role;
use super::{Result, VulkanDevice, VulkanError};
use crate::backend::error::BackendError;
use crate::backend::lanes::HostMemory;
use crate::backend::native::{NativeCopies, Piece, PieceCopies, PieceWay, UploadFloor};
use crate::sync::lock;
use ash::vk;
use std::sync::Arc;
use std::time::Instant;

impl NativeCopies for VulkanDevice {
    fn upload_floor(
        &self,
        bytes: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> std::result::Result<Box<dyn UploadFloor + '_>, BackendError> {
        let mut host = one_chunk(self, bytes)?;
        host.slices_mut(0..bytes)
            .map_err(|e| VulkanError::misuse("upload floor", e.to_string()))?
            .into_iter()
            .for_each(fill);
        let dst = VulkanBuffer::new(&self.shared, bytes, Backing::Device)?;
        let submitter = Submitter::new(&self.shared, Role::Upload)?;
        Ok(Box::new(Floor {
            host,
            dst,
            submitter,
        }))
    }

    fn piece_copies(
        &self,
        source: &[u8],
    ) -> std::result::Result<Box<dyn PieceCopies + '_>, BackendError> {
        let span = source.len();
        let mut src = one_chunk(self, span)?;
        src.slices_mut(0..span)
            .map_err(|e| VulkanError::misuse("piece copies", e.to_string()))?[0]
            .copy_from_slice(source);
        Ok(Box::new(Pieces {
            src,
            dst: one_chunk(self, span)?,
            mem: VulkanBuffer::new(&self.shared, span, Backing::Device)?,
            up: Submitter::new(&self.shared, Role::Upload)?,
            down: Submitter::new(&self.shared, Role::Download)?,
        }))
    }
}

/// `bytes` imported (the driver's host-visible memory where it does not import) in one chunk,
/// or why the bench cannot use one.
fn one_chunk(device: &VulkanDevice, bytes: usize) -> Result<VulkanHost> {
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

/// A command pool, a command buffer and a fence on the queue one direction's copies run on.
struct Submitter {
    shared: Arc<Shared>,
    hw: super::plan::Hw,
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
}

impl Submitter {
    fn new(shared: &Arc<Shared>, role: Role) -> Result<Self> {
        let hw = shared.route(role, 0)[0];
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
    fn record(&self, record: impl FnOnce(&ash::Device, vk::CommandBuffer)) -> Result<()> {
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
    fn submit(&self, times: usize) -> Result<()> {
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

/// The upload floor over its own memory, buffer and fence.
struct Floor {
    host: VulkanHost,
    dst: VulkanBuffer,
    submitter: Submitter,
}

impl UploadFloor for Floor {
    fn paths(&self) -> [&'static str; 2] {
        [
            "vkCmdCopyBuffer: vkQueueSubmit + vkWaitForFences",
            "N vkQueueSubmit, one vkWaitForFences (per transfer)",
        ]
    }

    fn time(
        &self,
        len: usize,
        count: usize,
        batch: usize,
    ) -> std::result::Result<Vec<f64>, BackendError> {
        let (src, dst) = (self.host.chunk_buffer(0), self.dst.buffer);
        let region = [vk::BufferCopy::default().size(len as u64)];
        if len as u64 > self.dst.size {
            return Err(
                VulkanError::misuse("upload floor", format!("{len} bytes above its size")).into(),
            );
        }
        let copy = |d: &ash::Device, cmd| record_copies(d, cmd, (src, dst), &region, true, false);
        self.submitter.record(copy)?;
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            let start = Instant::now();
            self.submitter.submit(batch)?;
            out.push(start.elapsed().as_secs_f64() * 1e6 / batch.max(1) as f64);
        }
        Ok(out)
    }
}

/// Scattered pieces over their own memory (source and destination) and device buffer.
struct Pieces {
    src: VulkanHost,
    dst: VulkanHost,
    mem: VulkanBuffer,
    up: Submitter,
    down: Submitter,
}

const PER_PIECE: [&str; 2] = [
    "vkCmdCopyBuffer per piece, one submit and fence",
    "vkCmdCopyBuffer per piece, one submit and fence",
];
const BATCH: [&str; 2] = [
    "one vkCmdCopyBuffer with a region per piece, one submit and fence",
    "one vkCmdCopyBuffer with a region per piece, one submit and fence",
];

impl PieceCopies for Pieces {
    fn ways(&self) -> Vec<(PieceWay, [&'static str; 2])> {
        vec![(PieceWay::PerPiece, PER_PIECE), (PieceWay::Batch, BATCH)]
    }

    fn missing(&self) -> Option<String> {
        None
    }

    fn copy(
        &mut self,
        way: PieceWay,
        pieces: &[Piece],
        up: bool,
    ) -> std::result::Result<f64, BackendError> {
        let fits = |at: usize, len: usize, size: u64| {
            at.checked_add(len).is_some_and(|end| end as u64 <= size)
        };
        let (host, device) = (self.src.len().min(self.dst.len()) as u64, self.mem.size);
        if let Some(p) = pieces
            .iter()
            .find(|p| !fits(p.host, p.len, host) || !fits(p.device, p.len, device))
        {
            let what = format!(
                "{p:?} lies past the host memory ({host} bytes) or the device buffer ({device})"
            );
            return Err(VulkanError::misuse("piece copies", what).into());
        }
        let start = Instant::now();
        let regions: Vec<vk::BufferCopy> = pieces
            .iter()
            .map(|p| {
                let (host, device) = (p.host as u64, p.device as u64);
                let (src_offset, dst_offset) = if up { (host, device) } else { (device, host) };
                vk::BufferCopy::default()
                    .src_offset(src_offset)
                    .dst_offset(dst_offset)
                    .size(p.len as u64)
            })
            .collect();
        let (src, dst, submitter) = match up {
            true => (self.src.chunk_buffer(0), self.mem.buffer, &self.up),
            false => (self.mem.buffer, self.dst.chunk_buffer(0), &self.down),
        };
        let whole = way != PieceWay::PerPiece;
        submitter.record(|d, cmd| record_copies(d, cmd, (src, dst), &regions, whole, !up))?;
        submitter.submit(1)?;
        Ok(start.elapsed().as_secs_f64() * 1e6)
    }

    fn whole(&mut self, up: bool) -> std::result::Result<(), BackendError> {
        let len = self.mem.size;
        let regions = [vk::BufferCopy::default().size(len)];
        let (src, dst, submitter) = match up {
            true => (self.dst.chunk_buffer(0), self.mem.buffer, &self.up),
            false => (self.mem.buffer, self.dst.chunk_buffer(0), &self.down),
        };
        submitter.record(|d, cmd| record_copies(d, cmd, (src, dst), &regions, true, !up))?;
        Ok(submitter.submit(1)?)
    }

    fn dst(&mut self) -> &mut [u8] {
        let len = self.dst.len();
        let parts = self
            .dst
            .slices_mut(0..len)
            .expect("the whole memory is in range");
        parts
            .into_iter()
            .next()
            .expect("one chunk: `one_chunk` checked it")
    }
}

/// Records `regions` from `src` to `dst`: one `vkCmdCopyBuffer` with them all (`whole`) or
/// one per region; for a download, the writes made visible to the host after.
fn record_copies(
    d: &ash::Device,
    cmd: vk::CommandBuffer,
    (src, dst): (vk::Buffer, vk::Buffer),
    regions: &[vk::BufferCopy],
    whole: bool,
    to_host: bool,
) {
    // SAFETY: recording into `cmd`; both buffers are live and the regions lie inside them
    // (the bench's pieces are within its span, the size of both).
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
