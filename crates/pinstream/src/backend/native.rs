//! An API's own copy calls, which the benches time beside pinstream's path: CUDA's
//! `cuMemcpyHtoDAsync` with no event pair around it (the floor of a small upload), and its
//! per-piece loop and `cuMemcpyBatchAsync` (the baselines of `engine::gather`). They have no
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
    /// Two pinned host memories of `source.len()` bytes (the source, a copy of `source`, and
    /// the destination), a device buffer as large and a queue, to move scattered pieces on.
    fn piece_copies(&self, source: &[u8]) -> Result<Box<dyn PieceCopies + '_>, BackendError>;
}

/// Uploads from pinned host memory, each call timed by the wall clock.
pub trait UploadFloor {
    /// The rows' names: one upload waited for; a batch waited for once.
    fn paths(&self) -> [&'static str; 2];
    /// `count` samples of `batch` uploads of the first `len` bytes (`batch` = 1: each waited
    /// for), each sample's wall time per upload, µs.
    fn time(&self, len: usize, count: usize, batch: usize) -> Result<Vec<f64>, BackendError>;
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
