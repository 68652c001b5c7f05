//! CUDA's own copy calls offered to the benches ([`crate::backend::native`]): the floor of a
//! small upload ([`super::raw_copies`]) and the per-piece and batch calls ([`super::scattered`]),
//! each over memory and a stream of its own.

use super::raw_copies::copy_floor;
use super::scattered::{batch, batch_unavailable, each_piece, whole, Piece};
use super::{CudaPinning, DeviceMem, Gpu, PinnedHost, Stream};
use crate::backend::error::BackendError;
use crate::backend::native::{NativeCopies, PieceCopies, UploadFloor};

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
        let mut src = self.pinned(span, CudaPinning::HostAlloc)?;
        src.as_mut_slice().copy_from_slice(source);
        let dst = self.pinned(span, CudaPinning::HostAlloc)?;
        Ok(Box::new(Pieces {
            stream,
            mem,
            src,
            dst,
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
    fn paths(&self) -> [&'static str; 2] {
        [
            "cuMemcpyHtoDAsync + cuStreamSynchronize",
            "N cuMemcpyHtoDAsync, one cuStreamSynchronize (per transfer)",
        ]
    }

    fn time(&self, len: usize, count: usize, batch: usize) -> Result<Vec<f64>, BackendError> {
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

/// [`each_piece`] and [`batch`] over their own memory and stream.
struct Pieces {
    stream: Stream,
    mem: DeviceMem,
    src: PinnedHost,
    dst: PinnedHost,
}

/// The per-piece loop, then the batch call.
const WAYS: [[&str; 2]; 2] = [
    [
        "cuMemcpyHtoDAsync per piece, one cuStreamSynchronize",
        "cuMemcpyDtoHAsync per piece, one cuStreamSynchronize",
    ],
    [
        "cuMemcpyBatchAsync, one cuStreamSynchronize",
        "cuMemcpyBatchAsync, one cuStreamSynchronize",
    ],
];

impl PieceCopies for Pieces {
    fn ways(&self) -> Vec<[&'static str; 2]> {
        let n = if batch_unavailable().is_none() { 2 } else { 1 };
        WAYS[..n].to_vec()
    }

    fn missing(&self) -> Option<String> {
        batch_unavailable()
    }

    fn copy(&mut self, way: usize, pieces: &[Piece], up: bool) -> Result<f64, BackendError> {
        let host = if up { &mut self.src } else { &mut self.dst };
        let copy = if way == 0 { each_piece } else { batch };
        Ok(copy(&self.stream, &self.mem, host, pieces, up)?)
    }

    fn whole(&mut self, up: bool) -> Result<(), BackendError> {
        Ok(whole(&self.stream, &self.mem, &mut self.dst, up)?)
    }

    fn dst(&mut self) -> &mut [u8] {
        self.dst.as_mut_slice()
    }
}
