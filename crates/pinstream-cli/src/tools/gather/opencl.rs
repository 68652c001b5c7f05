//! `bench gather`'s rows of OpenCL's own calls: the per-piece write/read loop and the one-way
//! peak, each checked; and the names OpenCL's rows of pinstream's batch copies (`ours`, its
//! `Gather`) have always had.

use super::ours::Names;
use super::pieces::{expected_device, row, timed, wrong_bytes, wrong_pieces};
use super::{GatherBenchError, Row, Shape, Way};
use pinstream::backend::opencl::{Context, DeviceBuffer, Queue};
use pinstream::host::{HostRegion, PinOptions};

/// OpenCL's names of pinstream's rows (`Gather`'s calls).
pub(super) const NAMES: Names = Names {
    staged: [
        "Gather::upload_gather (pack, DMA, scatter kernel)",
        "Gather::download_scatter (gather kernel, DMA, unpack)",
    ],
    zero_copy: [
        "Gather::upload_gather_mapped (one kernel reads mapped memory)",
        "Gather::download_scatter_mapped (one kernel writes mapped memory)",
    ],
    vouched: [
        "Gather::upload_gather_mapped (one kernel reads mapped memory), disjointness vouched: no overlap check",
        "Gather::download_scatter_mapped (one kernel writes mapped memory), disjointness vouched: no overlap check",
    ],
};

const PATH_LOOP_UP: &str = "clEnqueueWriteBuffer per piece (HostRegion::upload), one wait";
const PATH_LOOP_DOWN: &str = "clEnqueueReadBuffer per piece (HostRegion::download), one wait";
const PATH_PEAK: &str = "one transfer of the total bytes, pinned (the one-way peak)";

/// The OpenCL side: a queue, the pinned source (random) and destination host memory and the
/// device buffer.
pub(super) struct ClSide {
    q: Queue,
    src: HostRegion,
    dst: HostRegion,
    dev: DeviceBuffer,
}

/// OpenCL's own rows, each direction in order (the loop, the peak).
pub(super) struct ClRows {
    /// Host to device.
    pub up: Vec<Row>,
    /// Device to host.
    pub down: Vec<Row>,
}

impl ClSide {
    pub(super) fn new(ctx: &Context, shape: &Shape) -> Result<Self, GatherBenchError> {
        let span = shape.span();
        let pin = PinOptions {
            contiguous: true,
            ..PinOptions::default()
        };
        let mut src = HostRegion::new(ctx, span, &pin)?;
        crate::tools::random::fill_random(src.slices_mut(0..span)?, shape.seed ^ 0x5eed);
        Ok(ClSide {
            q: ctx.queue()?,
            dst: HostRegion::new(ctx, span, &pin)?,
            dev: ctx.device_buffer(span)?,
            src,
        })
    }

    pub(super) fn source(&self) -> Result<&[u8], GatherBenchError> {
        self.src
            .as_slice()
            .ok_or_else(|| GatherBenchError::Usage("the source region is not contiguous".into()))
    }

    pub(super) fn rows(
        &mut self,
        shape: &Shape,
        offs: &[(usize, usize)],
    ) -> Result<ClRows, GatherBenchError> {
        let want = expected_device(shape, offs, self.source()?);
        let loop_up = self.up_row(shape, &want, |s| s.loop_up(shape, offs))?;
        let us = timed(shape.repeat, || self.peak(shape.total(), true))?;
        let peak_up = row(("opencl", Way::Peak), PATH_PEAK, true, shape, &us);
        self.write_device(&want)?;
        let loop_down = self.down_row(shape, offs, &want, |s| s.loop_down(shape, offs))?;
        let us = timed(shape.repeat, || self.peak(shape.total(), false))?;
        let peak_down = row(("opencl", Way::Peak), PATH_PEAK, false, shape, &us);
        Ok(ClRows {
            up: vec![loop_up, peak_up],
            down: vec![loop_down, peak_down],
        })
    }

    /// Times `f` uploading, then zeroes the device, calls `f` once more and checks the device
    /// against `want`.
    fn up_row(
        &mut self,
        shape: &Shape,
        want: &[u8],
        mut f: impl FnMut(&mut Self) -> Result<(), GatherBenchError>,
    ) -> Result<Row, GatherBenchError> {
        let us = timed(shape.repeat, || f(self))?;
        // One more call onto zeros, the one checked: each call is checked alone.
        self.q.fill(&self.dev, 0, self.dev.size(), 0)?.wait()?;
        f(self)?;
        let got = self.read_device()?;
        match wrong_bytes(&got, want) {
            0 => Ok(row(
                ("opencl", Way::PerPiece),
                PATH_LOOP_UP,
                true,
                shape,
                &us,
            )),
            wrong => Err(GatherBenchError::Wrong {
                row: PATH_LOOP_UP.into(),
                wrong,
            }),
        }
    }

    /// Times `f` downloading, then zeroes the destination, calls `f` once more and checks
    /// every piece.
    fn down_row(
        &mut self,
        shape: &Shape,
        offs: &[(usize, usize)],
        device: &[u8],
        mut f: impl FnMut(&mut Self) -> Result<(), GatherBenchError>,
    ) -> Result<Row, GatherBenchError> {
        let us = timed(shape.repeat, || f(self))?;
        self.dst.as_mut_slice().expect("contiguous").fill(0);
        f(self)?;
        let got = self.dst.as_slice().expect("contiguous");
        match wrong_pieces(shape, offs, got, device) {
            0 => Ok(row(
                ("opencl", Way::PerPiece),
                PATH_LOOP_DOWN,
                false,
                shape,
                &us,
            )),
            wrong => Err(GatherBenchError::Wrong {
                row: PATH_LOOP_DOWN.into(),
                wrong,
            }),
        }
    }

    fn loop_up(&mut self, shape: &Shape, offs: &[(usize, usize)]) -> Result<(), GatherBenchError> {
        let n = shape.piece_size;
        for &(h, d) in offs {
            self.src.upload(&self.q, h..h + n, &self.dev, d, &[])?;
        }
        self.src.wait()?;
        Ok(())
    }

    fn loop_down(
        &mut self,
        shape: &Shape,
        offs: &[(usize, usize)],
    ) -> Result<(), GatherBenchError> {
        let n = shape.piece_size;
        for &(h, d) in offs {
            self.dst.download(&self.q, &self.dev, d, h..h + n, &[])?;
        }
        self.dst.wait()?;
        Ok(())
    }

    /// One transfer of `total` bytes from (or into) the start of pinned memory.
    fn peak(&mut self, total: usize, up: bool) -> Result<(), GatherBenchError> {
        let events = match up {
            true => self.src.upload(&self.q, 0..total, &self.dev, 0, &[])?,
            false => self.dst.download(&self.q, &self.dev, 0, 0..total, &[])?,
        };
        events.iter().try_for_each(|e| e.wait())?;
        Ok(())
    }

    /// The whole device buffer, through the destination region.
    fn read_device(&mut self) -> Result<Vec<u8>, GatherBenchError> {
        let size = self.dev.size();
        for e in self.dst.download(&self.q, &self.dev, 0, 0..size, &[])? {
            e.wait()?;
        }
        Ok(self.dst.as_slice().expect("contiguous").to_vec())
    }

    /// Writes `bytes` to the device buffer, through the destination region.
    fn write_device(&mut self, bytes: &[u8]) -> Result<(), GatherBenchError> {
        self.dst
            .as_mut_slice()
            .expect("contiguous")
            .copy_from_slice(bytes);
        for e in self
            .dst
            .upload(&self.q, 0..bytes.len(), &self.dev, 0, &[])?
        {
            e.wait()?;
        }
        Ok(())
    }
}
