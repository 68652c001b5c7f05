//! OpenCL's own copy calls offered to the benches ([`crate::backend::native`]): the driver's
//! floor for a small upload ([`super::raw_writes`]), `clEnqueueWriteBuffer` called directly
//! and waited for in each way a program can, on a queue with event profiling (every way) and
//! on one without (the ways that matter to the floor); and scattered pieces moved by a
//! `clEnqueueWriteBuffer` / `clEnqueueReadBuffer` per piece (`bench gather`'s loop rows).

use super::host::{HostRegion, PinOptions};
use super::raw_writes::{write_floor, WriteWay};
use super::{Context, DeviceBuffer, OpenCl, Queue};
use crate::backend::api::Api;
use crate::backend::error::{BackendError, ErrorKind};
use crate::backend::native::{
    FloorWait, FloorWay, NativeCopies, Piece, PieceCopies, PieceWay, UploadFloor,
};
use crate::backend::pinning::HostError;
use std::time::Instant;

/// The ways timed without event profiling: those the floor is read from (the others only
/// repeat what the profiled rows show about waiting).
const PLAIN: [WriteWay; 4] = [
    WriteWay::WaitEvent,
    WriteWay::Finish,
    WriteWay::FlushPoll,
    WriteWay::Batch,
];

impl NativeCopies for Context {
    /// Over pinned memory of `auto`'s first strategy.
    fn upload_floor(
        &self,
        bytes: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<Box<dyn UploadFloor + '_>, BackendError> {
        let mut region = HostRegion::new(self, bytes, &PinOptions::default()).map_err(host)?;
        region
            .slices_mut(0..bytes)
            .map_err(host)?
            .into_iter()
            .for_each(fill);
        Floor::boxed(self, Source::Own(Box::new(region)), bytes)
    }

    /// Over the caller's memory itself (as pinned by its strategy), one contiguous piece.
    fn upload_floor_over<'a>(
        &'a self,
        source: &'a [u8],
    ) -> Result<Box<dyn UploadFloor + 'a>, BackendError> {
        Floor::boxed(self, Source::Lent(source), source.len())
    }

    /// `clEnqueueWriteBuffer` / `clEnqueueReadBuffer` per piece over two contiguous regions
    /// of `auto`'s first strategy (OpenCL has no batch call of its own).
    fn piece_copies(&self, source: &[u8]) -> Result<Box<dyn PieceCopies + '_>, BackendError> {
        let pin = PinOptions {
            contiguous: true,
            ..PinOptions::default()
        };
        let span = source.len();
        let mut src = HostRegion::new(self, span, &pin).map_err(host)?;
        whole_mut(&mut src)?.copy_from_slice(source);
        let dst = HostRegion::new(self, span, &pin).map_err(host)?;
        Ok(Box::new(Pieces {
            q: self.queue()?,
            dev: self.device_buffer(span)?,
            src,
            dst,
        }))
    }
}

/// A contiguous region's bytes (the piece copies pin theirs contiguous).
fn whole_mut(region: &mut HostRegion) -> Result<&mut [u8], BackendError> {
    region.as_mut_slice().ok_or_else(|| {
        refusal(
            "the piece copies' host memory is not contiguous".into(),
            ErrorKind::Other,
        )
    })
}

/// Scattered pieces between pinned source and destination regions and a device buffer, on a
/// queue of their own.
struct Pieces {
    q: Queue,
    dev: DeviceBuffer,
    src: HostRegion,
    dst: HostRegion,
}

/// The rows' names (up, down): the calls the loop makes.
const PER_PIECE: [&str; 2] = [
    "clEnqueueWriteBuffer per piece (HostRegion::upload), one wait",
    "clEnqueueReadBuffer per piece (HostRegion::download), one wait",
];

impl PieceCopies for Pieces {
    fn ways(&self) -> Vec<(PieceWay, [&'static str; 2])> {
        vec![(PieceWay::PerPiece, PER_PIECE)]
    }

    fn missing(&self) -> Option<String> {
        None
    }

    /// Only [`PieceWay::PerPiece`]. A piece past the host memory is refused by the region
    /// before its copy is enqueued, one past the device buffer by the driver; either fails
    /// the call after the pieces before it were enqueued and waited for.
    fn copy(&mut self, way: PieceWay, pieces: &[Piece], up: bool) -> Result<f64, BackendError> {
        if way != PieceWay::PerPiece {
            let why = format!("OpenCL has no {way:?} piece copies of its own");
            return Err(refusal(why, ErrorKind::Unsupported));
        }
        let start = Instant::now();
        let Pieces { q, dev, src, dst } = self;
        for p in pieces {
            let range = p.host..p.host.saturating_add(p.len);
            match up {
                true => src.upload(q, range, dev, p.device, &[]).map_err(host)?,
                false => dst.download(q, dev, p.device, range, &[]).map_err(host)?,
            };
        }
        match up {
            true => src.wait(),
            false => dst.wait(),
        }?;
        Ok(start.elapsed().as_secs_f64() * 1e6)
    }

    fn whole(&mut self, up: bool) -> Result<(), BackendError> {
        let len = self.dev.size().min(self.dst.len());
        let events = match up {
            true => self.dst.upload(&self.q, 0..len, &self.dev, 0, &[]),
            false => self.dst.download(&self.q, &self.dev, 0, 0..len, &[]),
        }
        .map_err(host)?;
        events.iter().try_for_each(|e| e.wait())?;
        Ok(())
    }

    fn dst(&mut self) -> &mut [u8] {
        self.dst
            .as_mut_slice()
            .expect("pinned contiguous when made")
    }
}

/// A failure before any OpenCL call, as the backend's error.
fn refusal(message: String, kind: ErrorKind) -> BackendError {
    BackendError {
        api: OpenCl::NAME,
        call: "",
        code: 0,
        message,
        kind,
    }
}

/// A host-memory failure as the backend's error.
fn host(e: HostError) -> BackendError {
    refusal(e.to_string(), ErrorKind::Other)
}

/// The bytes the writes read.
enum Source<'a> {
    /// Pinned here.
    Own(Box<HostRegion>),
    /// The caller's.
    Lent(&'a [u8]),
}

/// [`write_floor`] on a queue with profiling and one without, into one device buffer.
struct Floor<'a> {
    profiled: Queue,
    plain: Queue,
    buf: DeviceBuffer,
    source: Source<'a>,
}

impl<'a> Floor<'a> {
    /// The floor over `source`, its buffer filled once.
    fn boxed(
        ctx: &Context,
        source: Source<'a>,
        bytes: usize,
    ) -> Result<Box<dyn UploadFloor + 'a>, BackendError> {
        let floor = Floor {
            profiled: ctx.queue()?,
            plain: ctx.plain_queue()?,
            buf: ctx.device_buffer(bytes)?,
            source,
        };
        floor.profiled.fill(&floor.buf, 0, bytes, 1)?.wait()?;
        Ok(Box::new(floor))
    }

    /// Every way, with its queue: all on the profiled queue, then [`PLAIN`] on the plain one.
    fn ways(&self) -> impl Iterator<Item = (WriteWay, &Queue)> {
        let profiled = WriteWay::ALL.into_iter().map(|w| (w, &self.profiled));
        profiled.chain(PLAIN.into_iter().map(|w| (w, &self.plain)))
    }

    /// The first `len` bytes of the source, as one slice.
    fn src(&self, len: usize) -> Result<&[u8], BackendError> {
        let whole = match &self.source {
            Source::Lent(s) => s.get(..len),
            Source::Own(region) => match region.slices(0..len).map_err(host)?.as_slice() {
                [one] => Some(*one),
                _ => None,
            },
        };
        let len_now = self.buf.size();
        whole.ok_or_else(|| {
            host(HostError::Range {
                start: 0,
                end: len,
                len: len_now,
            })
        })
    }
}

impl UploadFloor for Floor<'_> {
    fn ways(&self) -> Vec<FloorWay> {
        Floor::ways(self)
            .map(|(way, q)| FloorWay {
                path: way.label(),
                profiled: std::ptr::eq(q, &self.profiled),
                batched: matches!(way, WriteWay::Batch | WriteWay::BatchWaitEach),
                wait: match way {
                    WriteWay::WaitEvent => FloorWait::Event,
                    WriteWay::EnqueueOnly => FloorWait::EnqueueOnly,
                    _ => FloorWait::Whole,
                },
            })
            .collect()
    }

    fn time(
        &self,
        way: usize,
        len: usize,
        count: usize,
        batch: usize,
    ) -> Result<Vec<f64>, BackendError> {
        let (way, q) = Floor::ways(self)
            .nth(way)
            .ok_or_else(|| refusal(format!("the floor has no way {way}"), ErrorKind::Other))?;
        Ok(write_floor(
            q,
            &self.buf,
            self.src(len)?,
            way,
            count,
            batch,
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::opencl::{default_device, devices};

    /// OpenCL's own piece copies move each piece where it says, both ways, and refuse a way
    /// OpenCL has no call for and a piece past the memory, with nothing moved wrong.
    #[test]
    fn piece_copies_move_each_piece_both_ways_and_refuse_what_they_cannot() {
        let Ok(all) = devices() else {
            return; // no OpenCL here; the PoCL CI has one
        };
        let ctx = Context::new(default_device(&all).unwrap()).unwrap();
        let source: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut copies = ctx.piece_copies(&source).unwrap();
        assert_eq!(copies.ways().len(), 1);
        let pieces = [
            Piece {
                host: 100,
                device: 4000,
                len: 300,
            },
            Piece {
                host: 5000,
                device: 17,
                len: 1000,
            },
        ];
        // Up onto a zeroed device, read back whole.
        copies.dst().fill(0);
        copies.whole(true).unwrap();
        copies.copy(PieceWay::PerPiece, &pieces, true).unwrap();
        copies.whole(false).unwrap();
        let mut want = vec![0u8; source.len()];
        for p in &pieces {
            want[p.device..p.device + p.len].copy_from_slice(&source[p.host..p.host + p.len]);
        }
        assert!(
            copies.dst() == want.as_slice(),
            "the device after the uploads"
        );
        // Down into a zeroed destination: each piece where its host offset says.
        copies.dst().fill(0);
        copies.copy(PieceWay::PerPiece, &pieces, false).unwrap();
        for p in &pieces {
            let got = &copies.dst()[p.host..p.host + p.len];
            assert_eq!(got, &want[p.device..p.device + p.len], "{p:?}");
        }
        let batch = copies.copy(PieceWay::Batch, &pieces, true).unwrap_err();
        assert_eq!(batch.kind, ErrorKind::Unsupported, "{batch}");
        let past = [Piece {
            host: 8000,
            device: 0,
            len: 500,
        }];
        assert!(copies.copy(PieceWay::PerPiece, &past, true).is_err());
        let past_device = [Piece {
            host: 0,
            device: 8000,
            len: 500,
        }];
        assert!(copies
            .copy(PieceWay::PerPiece, &past_device, false)
            .is_err());
        // Refused pieces moved nothing: the device still holds what the uploads left.
        copies.whole(false).unwrap();
        assert!(
            copies.dst() == want.as_slice(),
            "the device after the refusals"
        );
    }
}
