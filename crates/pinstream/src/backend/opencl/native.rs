//! OpenCL's own copy calls offered to the benches ([`crate::backend::native`]): the driver's
//! floor for a small upload ([`super::raw_writes`]), `clEnqueueWriteBuffer` called directly
//! and waited for in each way a program can, on a queue with event profiling (every way) and
//! on one without (the ways that matter to the floor).

use super::host::{HostRegion, PinOptions};
use super::raw_writes::{write_floor, WriteWay};
use super::{Context, DeviceBuffer, OpenCl, Queue};
use crate::backend::api::Api;
use crate::backend::error::{BackendError, ErrorKind};
use crate::backend::native::{FloorWait, FloorWay, NativeCopies, PieceCopies, UploadFloor};
use crate::backend::pinning::HostError;

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

    fn piece_copies(&self, _source: &[u8]) -> Result<Box<dyn PieceCopies + '_>, BackendError> {
        let why = "OpenCL offers no piece copies of its own through this seam yet";
        Err(refusal(why.into(), ErrorKind::Unsupported))
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
