//! The batch copies every API can have: [`BatchApi`], the gather layer's extension of
//! [`HostApi`] (as `HostApi` is the memory layer's of the backend's `Api`). Many host pieces
//! `(&[u8], device offset)` go up into a device buffer, and many device ranges come down into
//! host pieces `(&mut [u8], device offset)`, staged through the API's pinned memory, with
//! OpenCL's [`Gather`] semantics and refusals on every API: no pieces, an empty piece, a
//! range past the buffer, and (uploads, unless vouched with [`OverlapCheck::Vouched`])
//! overlapping destination ranges are refused before anything is enqueued, and the host
//! pieces of an upload are free again when the call returns.
//!
//! - OpenCL: [`Gather`] itself (one DMA per batch and a copy kernel that places the pieces;
//!   its zero-copy calls from mapped memory too).
//! - Vulkan and CUDA, each a [`StagedApi`]: [`Staged`] over the API's [`StagedCopies`]:
//!   pieces packed into pinned staging, then one call per batch (Vulkan: one
//!   `vkCmdCopyBuffer` with a region per piece; CUDA: `cuMemcpyBatchAsync` where the driver
//!   has it, else a copy per piece from the staging), waited for before the call returns.
//!   Zero-copy: not offered (each says why, as [`GatherError::NotOffered`]).

use super::plan::{self, Batch};
use super::stage::copy_all;
use super::{CallStats, DeviceTimes, Gather, GatherError, GatherOptions, OverlapCheck};
use crate::backend::api::{Api, DeviceOf};
use crate::backend::batch::{Region, StagedCopies};
use crate::backend::fault::{Faulty, OutOfResources};
use crate::backend::opencl::{Context, DeviceBuffer, Event, OpenCl};
use crate::host::{HostApi, HostRegion};
use std::time::Instant;

/// Host pieces of an upload: each piece's bytes and its offset in the device buffer.
pub type UpPieces<'a> = [(&'a [u8], usize)];
/// Host pieces of a download: each piece's bytes and its offset in the device buffer.
pub type DownPieces<'a> = [(&'a mut [u8], usize)];
/// Pieces of mapped memory: `(host offset, length, device offset)`.
pub type MappedPieces = [(usize, usize, usize)];

/// An API's batch copies; see the module documentation.
pub trait BatchApi: HostApi {
    /// What a device keeps between calls: staging, copy kernels, command buffers.
    type Batch: Send;
    /// The batch copies of `device`, with staging as large as `options` says.
    fn batch(device: &DeviceOf<Self>, options: &GatherOptions) -> Result<Self::Batch, GatherError>;
    /// Copies each host piece to its offset in `dst`, after the commands enqueued on
    /// `queue` before, and returns an event on `queue` that completes once every piece is in
    /// place. The pieces are packed before the call returns.
    fn upload_gather(
        batch: &mut Self::Batch,
        queue: &Self::Queue,
        dst: &Self::Buffer,
        pieces: &UpPieces<'_>,
    ) -> Result<Self::Event, GatherError>;
    /// Copies `src` at each piece's offset into the piece, after the commands enqueued on
    /// `queue` before, and returns once every piece is in host memory. Device ranges may
    /// overlap.
    fn download_scatter(
        batch: &mut Self::Batch,
        queue: &Self::Queue,
        src: &Self::Buffer,
        pieces: &mut DownPieces<'_>,
    ) -> Result<(), GatherError>;
    /// Zero-copy upload: one kernel reads the pieces of mapped memory `src`
    /// ([`HostApi::mapped`]) across the bus into `dst`; the event completes when it ends.
    /// The default: not offered ([`Self::zero_copy_missing`]).
    fn upload_gather_mapped(
        batch: &mut Self::Batch,
        queue: &Self::Queue,
        dst: &Self::Buffer,
        src: &Self::HostMemory,
        pieces: &MappedPieces,
    ) -> Result<Self::Event, GatherError> {
        let _ = (batch, queue, dst, src, pieces);
        Err(zero_copy_refused::<Self>())
    }
    /// Zero-copy download: one kernel writes the pieces of `src` into mapped memory `dst`
    /// across the bus; the event completes when it ends. The default: not offered.
    fn download_scatter_mapped(
        batch: &mut Self::Batch,
        queue: &Self::Queue,
        src: &Self::Buffer,
        dst: &mut Self::HostMemory,
        pieces: &MappedPieces,
    ) -> Result<Self::Event, GatherError> {
        let _ = (batch, queue, src, dst, pieces);
        Err(zero_copy_refused::<Self>())
    }
    /// Why this API offers no zero-copy batch calls, or `None` where it does.
    fn zero_copy_missing() -> Option<String>;
    /// How the staged calls move a batch, for reports.
    fn batch_way(batch: &Self::Batch) -> String;
    /// Where the host time of the last call went.
    fn last_call(batch: &Self::Batch) -> CallStats;
    /// Device times of the last call's commands, for batch copies made with
    /// [`GatherOptions::profile`] where the API profiles them (OpenCL); `None` (the default)
    /// elsewhere.
    fn last_call_device(batch: &Self::Batch) -> Result<Option<DeviceTimes>, GatherError> {
        let _ = batch;
        Ok(None)
    }
    /// Sets whether later calls check that their written ranges are disjoint.
    fn set_overlap_check(batch: &mut Self::Batch, check: OverlapCheck);
}

/// The refusal of a zero-copy call on an API that offers none.
fn zero_copy_refused<A: BatchApi>() -> GatherError {
    GatherError::NotOffered {
        api: A::NAME,
        what: "zero-copy batch copies",
        why: A::zero_copy_missing().unwrap_or_default(),
    }
}

impl BatchApi for OpenCl {
    type Batch = Gather;

    fn batch(device: &Context, options: &GatherOptions) -> Result<Gather, GatherError> {
        Gather::new(device, options)
    }

    fn upload_gather(
        batch: &mut Gather,
        queue: &crate::backend::opencl::Queue,
        dst: &DeviceBuffer,
        pieces: &UpPieces<'_>,
    ) -> Result<Event, GatherError> {
        batch.upload_gather(queue, dst, pieces, &[])
    }

    fn download_scatter(
        batch: &mut Gather,
        queue: &crate::backend::opencl::Queue,
        src: &DeviceBuffer,
        pieces: &mut DownPieces<'_>,
    ) -> Result<(), GatherError> {
        batch.download_scatter(queue, src, pieces, &[])
    }

    fn upload_gather_mapped(
        batch: &mut Gather,
        queue: &crate::backend::opencl::Queue,
        dst: &DeviceBuffer,
        src: &HostRegion,
        pieces: &MappedPieces,
    ) -> Result<Event, GatherError> {
        batch.upload_gather_mapped(queue, dst, src, pieces, &[])
    }

    fn download_scatter_mapped(
        batch: &mut Gather,
        queue: &crate::backend::opencl::Queue,
        src: &DeviceBuffer,
        dst: &mut HostRegion,
        pieces: &MappedPieces,
    ) -> Result<Event, GatherError> {
        batch.download_scatter_mapped(queue, src, dst, pieces, &[])
    }

    fn zero_copy_missing() -> Option<String> {
        None
    }

    fn batch_way(_: &Gather) -> String {
        "one DMA per batch from pinned staging, placed by a copy kernel".into()
    }

    fn last_call(batch: &Gather) -> CallStats {
        batch.last_call()
    }

    fn last_call_device(batch: &Gather) -> Result<Option<DeviceTimes>, GatherError> {
        batch.last_call_device()
    }

    fn set_overlap_check(batch: &mut Gather, check: OverlapCheck) {
        batch.set_overlap_check(check);
    }
}

/// `A` with a fault injected copies as `A` does: the batch calls reach `A`'s queue directly,
/// so they count no injected command.
impl<A: BatchApi> BatchApi for Faulty<A>
where
    A::Error: OutOfResources,
{
    type Batch = A::Batch;

    fn batch(device: &DeviceOf<Self>, options: &GatherOptions) -> Result<A::Batch, GatherError> {
        A::batch(device.inner(), options)
    }

    fn upload_gather(
        batch: &mut A::Batch,
        queue: &Self::Queue,
        dst: &A::Buffer,
        pieces: &UpPieces<'_>,
    ) -> Result<A::Event, GatherError> {
        A::upload_gather(batch, queue.inner(), dst, pieces)
    }

    fn download_scatter(
        batch: &mut A::Batch,
        queue: &Self::Queue,
        src: &A::Buffer,
        pieces: &mut DownPieces<'_>,
    ) -> Result<(), GatherError> {
        A::download_scatter(batch, queue.inner(), src, pieces)
    }

    fn upload_gather_mapped(
        batch: &mut A::Batch,
        queue: &Self::Queue,
        dst: &A::Buffer,
        src: &A::HostMemory,
        pieces: &MappedPieces,
    ) -> Result<A::Event, GatherError> {
        A::upload_gather_mapped(batch, queue.inner(), dst, src, pieces)
    }

    fn download_scatter_mapped(
        batch: &mut A::Batch,
        queue: &Self::Queue,
        src: &A::Buffer,
        dst: &mut A::HostMemory,
        pieces: &MappedPieces,
    ) -> Result<A::Event, GatherError> {
        A::download_scatter_mapped(batch, queue.inner(), src, dst, pieces)
    }

    fn zero_copy_missing() -> Option<String> {
        A::zero_copy_missing()
    }

    fn batch_way(batch: &A::Batch) -> String {
        A::batch_way(batch)
    }

    fn last_call(batch: &A::Batch) -> CallStats {
        A::last_call(batch)
    }

    fn last_call_device(batch: &A::Batch) -> Result<Option<DeviceTimes>, GatherError> {
        A::last_call_device(batch)
    }

    fn set_overlap_check(batch: &mut A::Batch, check: OverlapCheck) {
        A::set_overlap_check(batch, check);
    }
}

/// Staged batch copies over an API's [`StagedCopies`]: each batch packed into the staging,
/// moved by one call, waited for (unpacked after, for a download). Batches are cut as
/// [`Gather`]'s are ([`plan::batches`]: at most the staging's bytes and `rows` segments).
pub struct Staged<S: StagedCopies> {
    copies: S,
    options: GatherOptions,
    last: CallStats,
}

impl<S: StagedCopies> Staged<S> {
    /// Batch copies through `copies`, cut as `options` says; refused as [`Gather::new`]
    /// refuses a capacity that holds nothing.
    pub fn new(copies: S, options: &GatherOptions) -> Result<Self, GatherError> {
        options.check()?;
        Ok(Staged {
            copies,
            options: *options,
            last: CallStats::default(),
        })
    }

    /// The API's call that moves a batch.
    pub fn way(&self) -> String {
        self.copies.way()
    }

    /// Where the host time of the last call went.
    pub fn last_call(&self) -> CallStats {
        self.last
    }

    /// Sets whether later uploads check that their device ranges are disjoint.
    pub fn set_overlap_check(&mut self, check: OverlapCheck) {
        self.options.overlap_check = check;
    }

    /// Checks the pieces `(length, device offset)` against `size` bytes and cuts them into
    /// batches, starting the call's record.
    fn plan(
        &mut self,
        shape: &[(usize, usize)],
        size: usize,
        up: bool,
    ) -> Result<Vec<Batch>, GatherError> {
        let start = Instant::now();
        let writes = up && self.options.overlap_check == OverlapCheck::On;
        plan::check(shape, size, writes)?;
        let cap = self.copies.staging().len().min(self.options.capacity);
        let batches = plan::batches(shape, cap, self.options.rows);
        self.last = CallStats {
            batches: batches.len(),
            plan_s: start.elapsed().as_secs_f64(),
            ..CallStats::default()
        };
        Ok(batches)
    }

    /// Uploads `pieces` into `dst`; see [`BatchApi::upload_gather`].
    pub fn upload(
        &mut self,
        queue: &<S::A as Api>::Queue,
        dst: &<S::A as Api>::Buffer,
        pieces: &UpPieces<'_>,
    ) -> Result<(), GatherError> {
        let start = Instant::now();
        let shape: Vec<(usize, usize)> = pieces.iter().map(|(h, o)| (h.len(), *o)).collect();
        let size = self.copies.buffer_len(dst);
        for batch in self.plan(&shape, size, true)? {
            let staged = self.copies.staging();
            let pairs = split(staged, &batch)
                .into_iter()
                .zip(&batch.segments)
                .map(|(to, s)| {
                    (
                        to,
                        &pieces[s.piece].0[s.piece_offset..s.piece_offset + s.len],
                    )
                })
                .collect();
            self.last.copy_s += copy_all(pairs, batch.data_end, true);
            self.copies.copy(queue, dst, &regions(&batch), true)?;
        }
        self.last.call_s = start.elapsed().as_secs_f64();
        Ok(())
    }

    /// Downloads `src` into `pieces`; see [`BatchApi::download_scatter`].
    pub fn download(
        &mut self,
        queue: &<S::A as Api>::Queue,
        src: &<S::A as Api>::Buffer,
        pieces: &mut DownPieces<'_>,
    ) -> Result<(), GatherError> {
        let start = Instant::now();
        let shape: Vec<(usize, usize)> = pieces.iter().map(|(h, o)| (h.len(), *o)).collect();
        let size = self.copies.buffer_len(src);
        for batch in self.plan(&shape, size, false)? {
            self.copies.copy(queue, src, &regions(&batch), false)?;
            let staged: &[u8] = self.copies.staging();
            let mut rest: Vec<&mut [u8]> = pieces.iter_mut().map(|(h, _)| &mut **h).collect();
            let mut done = vec![0usize; rest.len()];
            let mut pairs = Vec::with_capacity(batch.segments.len());
            for s in &batch.segments {
                let left = std::mem::take(&mut rest[s.piece]);
                let (_, tail) = left.split_at_mut(s.piece_offset - done[s.piece]);
                let (mine, after) = tail.split_at_mut(s.len);
                (rest[s.piece], done[s.piece]) = (after, s.piece_offset + s.len);
                pairs.push((mine, &staged[s.stage..s.stage + s.len]));
            }
            self.last.copy_s += copy_all(pairs, batch.data_end, false);
        }
        self.last.call_s = start.elapsed().as_secs_f64();
        Ok(())
    }
}

/// The staging bytes of each of `batch`'s segments, in order.
fn split<'a>(staged: &'a mut [u8], batch: &Batch) -> Vec<&'a mut [u8]> {
    let mut out = Vec::with_capacity(batch.segments.len());
    let (mut free, mut cursor) = (staged, 0);
    for s in &batch.segments {
        let (_, tail) = std::mem::take(&mut free).split_at_mut(s.stage - cursor);
        let (mine, after) = tail.split_at_mut(s.len);
        out.push(mine);
        (free, cursor) = (after, s.stage + s.len);
    }
    out
}

/// `batch`'s segments as copy regions.
fn regions(batch: &Batch) -> Vec<Region> {
    batch
        .segments
        .iter()
        .map(|s| Region {
            stage: s.stage,
            device: s.device,
            len: s.len,
        })
        .collect()
}

mod staged;
pub use staged::StagedApi;

/// A backend's failure as the gather's.
fn backend(e: impl Into<crate::backend::error::BackendError>) -> GatherError {
    GatherError::Backend(e.into())
}
