//! Vulkan's own copy calls offered to the benches ([`crate::backend::native`]), beside
//! pinstream's path: a small upload as a program would make it with Vulkan alone (one
//! recorded `vkCmdCopyBuffer`, `vkQueueSubmit` with a fence, `vkWaitForFences`: no timeline
//! semaphore, no timestamps), and scattered pieces as one command buffer of a
//! `vkCmdCopyBuffer` per piece or of one `vkCmdCopyBuffer` with a region per piece (Vulkan's
//! batch). Each over memory imported as pinstream imports it, on the queue the device's copy
//! way sends that direction to when the other has nothing in flight (`Shared::route_alone`).

use super::device::{Backing, VulkanBuffer};
use super::host::VulkanHost;
use super::plan::Role;
use super::submit::{buffer_copies, one_chunk, record_copies, whole_mut, Submitter};
use super::{VulkanDevice, VulkanError};
use crate::backend::error::BackendError;
use crate::backend::lanes::HostMemory;
use crate::backend::native::{FloorWay, NativeCopies, Piece, PieceCopies, PieceWay, UploadFloor};
use ash::vk;
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

/// The upload floor over its own memory, buffer and fence.
struct Floor {
    host: VulkanHost,
    dst: VulkanBuffer,
    submitter: Submitter,
}

impl UploadFloor for Floor {
    fn ways(&self) -> Vec<FloorWay> {
        FloorWay::pair([
            "vkCmdCopyBuffer: vkQueueSubmit + vkWaitForFences",
            "N vkQueueSubmit, one vkWaitForFences (per transfer)",
        ])
    }

    /// Both ways are one call: `batch` says which.
    fn time(
        &self,
        _way: usize,
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
        let regions = buffer_copies(pieces.iter().map(|&p| p.into()), up);
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
        whole_mut(&mut self.dst)
    }
}
