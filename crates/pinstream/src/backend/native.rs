//! An API's own copy calls, which the benches time beside pinstream's path: CUDA's
//! `cuMemcpyHtoDAsync` with no event pair around it (the floor of a small upload; OpenCL's
//! floor is `clEnqueueWriteBuffer` called directly, waited for each way a program can), and
//! each API's per-piece loop (OpenCL's `clEnqueueWriteBuffer` / `clEnqueueReadBuffer`,
//! Vulkan's `vkCmdCopyBuffer`, CUDA's `cuMemcpy*Async`) and batch call where it has one
//! (Vulkan's regions, CUDA's `cuMemcpyBatchAsync`): the baselines of the gather. They have no
//! generic form (the generic [`super::api::Queue`] records an event with every command), so
//! an API offers them through `host::HostApi::native_copies`, and a bench written over any
//! API reaches them there; `None` where an API has none.

use super::error::BackendError;

/// One piece: `len` bytes at `host` in the host memory and at `device` in device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Offset in the host memory.
    pub host: usize,
    /// Offset in the device memory.
    pub device: usize,
    /// Bytes.
    pub len: usize,
}

impl From<Piece> for super::batch::Region {
    /// The piece as a region of a staged copy, its host memory as the staging.
    fn from(p: Piece) -> Self {
        super::batch::Region {
            stage: p.host,
            device: p.device,
            len: p.len,
        }
    }
}

/// An API's own copy calls on one device.
pub trait NativeCopies {
    /// Pinned host memory of `bytes` (the API's own allocator, written by `fill`), a device
    /// buffer as large and a queue of the API's own, to time small uploads on.
    fn upload_floor(
        &self,
        bytes: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<Box<dyn UploadFloor + '_>, BackendError>;
    /// The same over `source`, host memory the caller pinned through this API, so that the
    /// API's own calls read the bytes pinstream's path reads. The default: memory of the
    /// API's own, a copy of `source` (APIs whose own calls need their own allocation).
    fn upload_floor_over<'a>(
        &'a self,
        source: &'a [u8],
    ) -> Result<Box<dyn UploadFloor + 'a>, BackendError> {
        self.upload_floor(source.len(), &mut |b| b.copy_from_slice(source))
    }
    /// Two pinned host memories of `source.len()` bytes (the source, a copy of `source`, and
    /// the destination), a device buffer as large and a queue, to move scattered pieces on.
    fn piece_copies(&self, source: &[u8]) -> Result<Box<dyn PieceCopies + '_>, BackendError>;
}

/// Uploads from pinned host memory, each call timed by the wall clock.
pub trait UploadFloor {
    /// Every way the API's own calls make and wait for an upload here, in the order of the
    /// table: queues with device times first ([`FloorWay::profiled`]).
    fn ways(&self) -> Vec<FloorWay>;
    /// `count` samples of `batch` uploads of the first `len` bytes by the way at `way` in
    /// [`Self::ways`] (`batch` = 1 for a way that is not [`FloorWay::batched`]), each
    /// sample's wall time per upload, µs.
    fn time(
        &self,
        way: usize,
        len: usize,
        count: usize,
        batch: usize,
    ) -> Result<Vec<f64>, BackendError>;
}

/// One way an API's own calls make and wait for a small upload: a row of `bench latency`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloorWay {
    /// What the row does.
    pub path: &'static str,
    /// On a queue that times each command on the device (OpenCL's
    /// `CL_QUEUE_PROFILING_ENABLE`); false where the calls time nothing on the device.
    pub profiled: bool,
    /// Back to back, a batch waited for once (timed per upload).
    pub batched: bool,
    /// How the upload is waited for.
    pub wait: FloorWait,
}

impl FloorWay {
    /// The two ways of an API with one: `one` upload waited for by its event or fence, and a
    /// batch `batched` back to back waited for once, neither with device times.
    pub fn pair([one, batched]: [&'static str; 2]) -> Vec<FloorWay> {
        let way = |path, batched, wait| FloorWay {
            path,
            profiled: false,
            batched,
            wait,
        };
        vec![
            way(one, false, FloorWait::Event),
            way(batched, true, FloorWait::Whole),
        ]
    }
}

/// How a [`FloorWay`] waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloorWait {
    /// Each upload by its own event or fence: the wait whose cost with and without device
    /// times says what profiling costs.
    Event,
    /// Another wait for the whole transfer (the queue's, a blocking call, polling).
    Whole,
    /// The enqueue call alone, its wait outside the timed span: no transfer, so no bandwidth
    /// and no floor.
    EnqueueOnly,
}

/// A way an API moves scattered pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceWay {
    /// One copy call per piece, enqueued back to back (`cuMemcpyHtoDAsync` per piece).
    PerPiece,
    /// The API's batch copy call (`cuMemcpyBatchAsync`).
    Batch,
    /// One kernel reading or writing mapped pinned host memory directly, a block per piece
    /// (`cudaHostAllocMapped` memory).
    ZeroCopy,
}

/// Scattered pieces moved between pinned host memory and a device buffer by an API's calls.
pub trait PieceCopies {
    /// Each way that can be measured here, with its rows' names (up, down).
    fn ways(&self) -> Vec<(PieceWay, [&'static str; 2])>;
    /// Why a way the API has cannot be measured here, if one cannot.
    fn missing(&self) -> Option<String>;
    /// Moves `pieces` by `way` (one of [`Self::ways`]), from the source memory to the device
    /// (`up`) or from the device into the destination memory; the wall time, µs.
    fn copy(&mut self, way: PieceWay, pieces: &[Piece], up: bool) -> Result<f64, BackendError>;
    /// Copies the destination memory whole to the start of the device buffer (`up`) or back.
    fn whole(&mut self, up: bool) -> Result<(), BackendError>;
    /// The destination memory.
    fn dst(&mut self) -> &mut [u8];
}
