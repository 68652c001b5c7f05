//! `bench gather`'s OpenCL rows: pinstream's gathers (staged, zero-copy, disjointness
//! vouched), OpenCL's per-piece loop and the one-way peak, each checked.

use super::pieces::{carve, expected_device, host_order, row, timed, with_stats};
use super::pieces::{wrong_bytes, wrong_pieces};
use super::{GatherBenchError, Row, Shape, Way};
use pinstream::backend::opencl::{Context, DeviceBuffer, Queue};
use pinstream::gather::{CallStats, DeviceTimes, Gather, GatherOptions, OverlapCheck};
use pinstream::host::{HostRegion, PinOptions};

/// The OpenCL side: a queue, the pinned source (random) and destination host memory, the
/// device buffer, the whole-transfer regions and the gather.
pub(super) struct ClSide {
    /// The gather's record of each call since the row began.
    calls: Vec<CallStats>,
    /// The same gather with event profiling, for one more call per row.
    profiled: Gather,
    /// The pieces in host order, for [`carve`].
    order: Vec<usize>,
    q: Queue,
    src: HostRegion,
    dst: HostRegion,
    dev: DeviceBuffer,
    pub(super) gather: Gather,
    /// Mapped source and destination for the zero-copy rows (the source a copy of `src`), or
    /// why the device has none.
    pub(super) mapped: Result<(HostRegion, HostRegion), String>,
}

/// A mapped copy of `src` and a mapped destination of its size, for the zero-copy rows; or
/// why there are none (the device has no zero-copy mechanism, or the span is above its
/// largest buffer).
fn mapped_pair(ctx: &Context, src: &HostRegion) -> Result<(HostRegion, HostRegion), String> {
    let make = || HostRegion::mapped(ctx, src.len(), false).map_err(|e| e.to_string());
    let (mut msrc, mdst) = (make()?, make()?);
    let from = src
        .as_slice()
        .ok_or("the source region is not contiguous")?;
    msrc.as_mut_slice()
        .ok_or("the mapped region is not contiguous")?
        .copy_from_slice(from);
    Ok((msrc, mdst))
}

/// Who makes an OpenCL-side row of `way`: pinstream's gather, or the driver called directly.
fn opencl_api(way: Way) -> &'static str {
    match way {
        Way::Gather | Way::ZeroCopy | Way::ZeroCopyVouched => "pinstream",
        _ => "opencl",
    }
}

const PATH_GATHER_UP: &str = "Gather::upload_gather (pack, DMA, scatter kernel)";
const PATH_GATHER_DOWN: &str = "Gather::download_scatter (gather kernel, DMA, unpack)";
const PATH_ZERO_COPY_UP: &str = "Gather::upload_gather_mapped (one kernel reads mapped memory)";
const PATH_ZERO_COPY_DOWN: &str =
    "Gather::download_scatter_mapped (one kernel writes mapped memory)";
const PATH_VOUCHED_UP: &str =
    "Gather::upload_gather_mapped (one kernel reads mapped memory), disjointness vouched: no overlap check";
const PATH_VOUCHED_DOWN: &str =
    "Gather::download_scatter_mapped (one kernel writes mapped memory), disjointness vouched: no overlap check";
const PATH_LOOP_UP: &str = "clEnqueueWriteBuffer per piece (HostRegion::upload), one wait";
const PATH_LOOP_DOWN: &str = "clEnqueueReadBuffer per piece (HostRegion::download), one wait";
const PATH_PEAK: &str = "one transfer of the total bytes, pinned (the one-way peak)";

impl ClSide {
    pub(super) fn new(
        ctx: &Context,
        shape: &Shape,
        staging: &GatherOptions,
    ) -> Result<Self, GatherBenchError> {
        let span = shape.span();
        let pin = PinOptions {
            contiguous: true,
            ..PinOptions::default()
        };
        let mut src = HostRegion::new(ctx, span, &pin)?;
        crate::tools::random::fill_random(src.slices_mut(0..span)?, shape.seed ^ 0x5eed);
        let profiled = GatherOptions {
            profile: true,
            ..*staging
        };
        Ok(ClSide {
            calls: Vec::new(),
            order: Vec::new(),
            profiled: Gather::new(ctx, &profiled)?,
            q: ctx.queue()?,
            dst: HostRegion::new(ctx, span, &pin)?,
            dev: ctx.device_buffer(span)?,
            gather: Gather::new(ctx, staging)?,
            mapped: mapped_pair(ctx, &src),
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
    ) -> Result<Vec<Row>, GatherBenchError> {
        let want = expected_device(shape, offs, self.source()?);
        self.order = host_order(offs);
        let mut rows = vec![
            self.up_row(shape, &want, (Way::Gather, PATH_GATHER_UP), |s| {
                s.gather_up(shape, offs)
            })?,
            self.up_row(shape, &want, (Way::PerPiece, PATH_LOOP_UP), |s| {
                s.loop_up(shape, offs)
            })?,
        ];
        let us = timed(shape.repeat, || self.peak(shape.total(), true))?;
        rows.push(row(("opencl", Way::Peak), PATH_PEAK, true, shape, &us));
        self.write_device(&want)?;
        rows.push(
            self.down_row(shape, offs, &want, (Way::Gather, PATH_GATHER_DOWN), |s| {
                s.gather_down(shape, offs)
            })?,
        );
        rows.push(
            self.down_row(shape, offs, &want, (Way::PerPiece, PATH_LOOP_DOWN), |s| {
                s.loop_down(shape, offs)
            })?,
        );
        let us = timed(shape.repeat, || self.peak(shape.total(), false))?;
        rows.push(row(("opencl", Way::Peak), PATH_PEAK, false, shape, &us));
        self.zero_copy_rows(shape, offs, &want, &mut rows)?;
        Ok(rows)
    }

    /// The zero-copy rows, both ways, where the device has mapped memory: the up row first
    /// (after the staged rows: `rows` keeps host to device first by sorting on direction).
    fn zero_copy_rows(
        &mut self,
        shape: &Shape,
        offs: &[(usize, usize)],
        want: &[u8],
        rows: &mut Vec<Row>,
    ) -> Result<(), GatherBenchError> {
        let Ok((src, dst)) = &mut self.mapped else {
            return Ok(());
        };
        // The rows run on the mapped regions in place of the pinned ones.
        std::mem::swap(&mut self.src, src);
        std::mem::swap(&mut self.dst, dst);
        let checked = self.zero_copy_pair(shape, offs, want, OverlapCheck::On);
        let vouched = checked.and_then(|c| {
            let v = self.zero_copy_pair(shape, offs, want, OverlapCheck::Vouched);
            v.map(|v| [c, v])
        });
        self.gather.set_overlap_check(OverlapCheck::On);
        self.profiled.set_overlap_check(OverlapCheck::On);
        if let Ok((src, dst)) = &mut self.mapped {
            std::mem::swap(&mut self.src, src);
            std::mem::swap(&mut self.dst, dst);
        }
        for (up, down) in vouched? {
            let at = rows
                .iter()
                .position(|r| r.direction == "d2h")
                .unwrap_or(rows.len());
            rows.insert(at, up);
            rows.push(down);
        }
        Ok(())
    }

    /// The zero-copy rows up and down with `check` (the regions already swapped in).
    fn zero_copy_pair(
        &mut self,
        shape: &Shape,
        offs: &[(usize, usize)],
        want: &[u8],
        check: OverlapCheck,
    ) -> Result<(Row, Row), GatherBenchError> {
        self.gather.set_overlap_check(check);
        self.profiled.set_overlap_check(check);
        let (way, up_path, down_path) = match check {
            OverlapCheck::On => (Way::ZeroCopy, PATH_ZERO_COPY_UP, PATH_ZERO_COPY_DOWN),
            OverlapCheck::Vouched => (Way::ZeroCopyVouched, PATH_VOUCHED_UP, PATH_VOUCHED_DOWN),
        };
        let up = self.up_row(shape, want, (way, up_path), |s| {
            s.zero_copy(shape, offs, true)
        })?;
        let down = self.down_row(shape, offs, want, (way, down_path), |s| {
            s.zero_copy(shape, offs, false)
        })?;
        Ok((up, down))
    }

    /// One zero-copy call of every piece, up from `src` or down into `dst` (both mapped
    /// while the zero-copy rows run), waited for.
    fn zero_copy(
        &mut self,
        shape: &Shape,
        offs: &[(usize, usize)],
        up: bool,
    ) -> Result<(), GatherBenchError> {
        let n = shape.piece_size;
        let pieces: Vec<(usize, usize, usize)> = offs.iter().map(|&(h, d)| (h, n, d)).collect();
        let done = match up {
            true => self
                .gather
                .upload_gather_mapped(&self.q, &self.dev, &self.src, &pieces, &[]),
            false => {
                let g = &mut self.gather;
                g.download_scatter_mapped(&self.q, &self.dev, &mut self.dst, &pieces, &[])
            }
        }?;
        done.wait()?;
        self.calls.push(self.gather.last_call());
        Ok(())
    }

    /// Times `f` uploading, then zeroes the device, calls `f` once more and checks the device
    /// against `want`.
    fn up_row(
        &mut self,
        shape: &Shape,
        want: &[u8],
        (way, path): (Way, &'static str),
        mut f: impl FnMut(&mut Self) -> Result<(), GatherBenchError>,
    ) -> Result<Row, GatherBenchError> {
        self.calls.clear();
        let us = timed(shape.repeat, || f(self))?;
        // One more call onto zeros, the one checked: each call is checked alone.
        self.q.fill(&self.dev, 0, self.dev.size(), 0)?.wait()?;
        let device = self.checked_call(&mut f)?;
        let api = (opencl_api(way), way);
        let got = self.read_device()?;
        match wrong_bytes(&got, want) {
            0 => Ok(self.with_calls(row(api, path, true, shape, &us), device)),
            wrong => Err(GatherBenchError::Wrong {
                row: path.into(),
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
        (way, path): (Way, &'static str),
        mut f: impl FnMut(&mut Self) -> Result<(), GatherBenchError>,
    ) -> Result<Row, GatherBenchError> {
        self.calls.clear();
        let us = timed(shape.repeat, || f(self))?;
        self.dst.as_mut_slice().expect("contiguous").fill(0);
        let times = self.checked_call(&mut f)?;
        let api = (opencl_api(way), way);
        let got = self.dst.as_slice().expect("contiguous");
        match wrong_pieces(shape, offs, got, device) {
            0 => Ok(self.with_calls(row(api, path, false, shape, &us), times)),
            wrong => Err(GatherBenchError::Wrong {
                row: path.into(),
                wrong,
            }),
        }
    }

    /// One more call of `f`, whose result the row checks; for the gather's rows (which
    /// record their calls) through the profiled gather, with its device times.
    fn checked_call(
        &mut self,
        f: &mut impl FnMut(&mut Self) -> Result<(), GatherBenchError>,
    ) -> Result<Option<DeviceTimes>, GatherBenchError> {
        if self.calls.is_empty() {
            f(self)?;
            return Ok(None);
        }
        std::mem::swap(&mut self.gather, &mut self.profiled);
        let r = f(self);
        std::mem::swap(&mut self.gather, &mut self.profiled);
        self.calls.pop();
        r?;
        Ok(self.profiled.last_call_device()?)
    }

    /// `r` with the gather's host times and batches (the first, untimed call left out) and
    /// `device`, for the gather's rows.
    fn with_calls(&self, r: Row, device: Option<DeviceTimes>) -> Row {
        let mut r = with_stats(r, &self.calls);
        if r.batches.is_some() {
            r.device = device;
        }
        r
    }

    fn gather_up(
        &mut self,
        shape: &Shape,
        offs: &[(usize, usize)],
    ) -> Result<(), GatherBenchError> {
        let src = self.src.as_slice().expect("contiguous");
        let n = shape.piece_size;
        let pieces: Vec<(&[u8], usize)> = offs.iter().map(|&(h, d)| (&src[h..h + n], d)).collect();
        self.gather
            .upload_gather(&self.q, &self.dev, &pieces, &[])?
            .wait()?;
        self.calls.push(self.gather.last_call());
        Ok(())
    }

    fn gather_down(
        &mut self,
        shape: &Shape,
        offs: &[(usize, usize)],
    ) -> Result<(), GatherBenchError> {
        let dst = self.dst.as_mut_slice().expect("contiguous");
        let mut pieces = carve(dst, offs, &self.order, shape.piece_size);
        self.gather
            .download_scatter(&self.q, &self.dev, &mut pieces, &[])?;
        self.calls.push(self.gather.last_call());
        Ok(())
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
