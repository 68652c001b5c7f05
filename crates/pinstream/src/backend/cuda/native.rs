//! CUDA's own copy calls offered to the benches ([`crate::backend::native`]): the floor of a
//! small upload ([`super::raw_copies`]), the per-piece and batch calls ([`super::scattered`])
//! and the zero-copy kernel ([`super::zero_copy`]), each over memory and a stream of its own.

use super::raw_copies::copy_floor;
use super::scattered::{batch, batch_unavailable, each_piece, whole, Piece};
use super::zero_copy::ZeroCopy;
use super::{CudaPinning, DeviceMem, Gpu, PinnedHost, Stream};
use crate::backend::error::BackendError;
use crate::backend::native::{FloorWay, NativeCopies, PieceCopies, PieceWay, UploadFloor};

impl NativeCopies for Gpu {
    fn upload_floor(
        &self,
        bytes: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<Box<dyn UploadFloor + '_>, BackendError> {
        let stream = self.stream()?;
        let dst = self.alloc(bytes)?;
        let mut host = self.pinned(bytes, CudaPinning::HostAlloc)?;
        fill(host.as_mut_slice());
        Ok(Box::new(Floor { stream, dst, host }))
    }

    fn piece_copies(&self, source: &[u8]) -> Result<Box<dyn PieceCopies + '_>, BackendError> {
        let span = source.len();
        let stream = self.stream()?;
        let mem = self.alloc(span)?;
        // Mapped (`cudaHostAllocMapped`), for the zero-copy kernel; copies treat it as any
        // `cuMemHostAlloc` memory.
        let mut src = self.pinned_mapped(span)?;
        src.as_mut_slice().copy_from_slice(source);
        let dst = self.pinned_mapped(span)?;
        Ok(Box::new(Pieces {
            stream,
            mem,
            src,
            dst,
            zero_copy: ZeroCopy::new(self)?,
        }))
    }
}

/// [`copy_floor`] over its own memory and stream.
struct Floor {
    stream: Stream,
    dst: DeviceMem,
    host: PinnedHost,
}

impl UploadFloor for Floor {
    fn ways(&self) -> Vec<FloorWay> {
        FloorWay::pair([
            "cuMemcpyHtoDAsync + cuStreamSynchronize",
            "N cuMemcpyHtoDAsync, one cuStreamSynchronize (per transfer)",
        ])
    }

    /// Both ways are one call: `batch` says which.
    fn time(
        &self,
        _way: usize,
        len: usize,
        count: usize,
        batch: usize,
    ) -> Result<Vec<f64>, BackendError> {
        Ok(copy_floor(
            &self.stream,
            &self.dst,
            &self.host,
            len,
            count,
            batch,
        )?)
    }
}

/// [`each_piece`], [`batch`] and the [`ZeroCopy`] kernels over their own memory and stream.
struct Pieces {
    stream: Stream,
    mem: DeviceMem,
    src: PinnedHost,
    dst: PinnedHost,
    zero_copy: ZeroCopy,
}

const PER_PIECE: [&str; 2] = [
    "cuMemcpyHtoDAsync per piece, one cuStreamSynchronize",
    "cuMemcpyDtoHAsync per piece, one cuStreamSynchronize",
];
const BATCH: [&str; 2] = [
    "cuMemcpyBatchAsync, one cuStreamSynchronize",
    "cuMemcpyBatchAsync, one cuStreamSynchronize",
];
const ZERO_COPY: [&str; 2] = [
    "kernel reading cudaHostAllocMapped memory, a block per piece",
    "kernel writing cudaHostAllocMapped memory, a block per piece",
];

impl PieceCopies for Pieces {
    fn ways(&self) -> Vec<(PieceWay, [&'static str; 2])> {
        let mut ways = vec![(PieceWay::PerPiece, PER_PIECE)];
        if batch_unavailable().is_none() {
            ways.push((PieceWay::Batch, BATCH));
        }
        ways.push((PieceWay::ZeroCopy, ZERO_COPY));
        ways
    }

    fn missing(&self) -> Option<String> {
        batch_unavailable()
    }

    fn copy(&mut self, way: PieceWay, pieces: &[Piece], up: bool) -> Result<f64, BackendError> {
        let host = if up { &mut self.src } else { &mut self.dst };
        let (stream, mem) = (&self.stream, &self.mem);
        Ok(match way {
            PieceWay::PerPiece => each_piece(stream, mem, host, pieces, up),
            PieceWay::Batch => batch(stream, mem, host, pieces, up),
            PieceWay::ZeroCopy => self.zero_copy.copy(stream, mem, host, pieces, up),
        }?)
    }

    fn whole(&mut self, up: bool) -> Result<(), BackendError> {
        Ok(whole(&self.stream, &self.mem, &mut self.dst, up)?)
    }

    fn dst(&mut self) -> &mut [u8] {
        self.dst.as_mut_slice()
    }
}
