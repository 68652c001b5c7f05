//! `pinstream bench gather`: N pieces of S bytes at random (seeded) host and device
//! offsets, moved both ways by every way there is, side by side in one run: pinstream's
//! gather ([`pinstream::gather`]), OpenCL's per-piece write/read loop, one transfer
//! of the same total bytes (the one-way peak), and CUDA's per-piece `cuMemcpy*Async` loop
//! and `cuMemcpyBatchAsync` where CUDA is there. Every row's result is read back and checked
//! against the reference, so a wrong fast path cannot win.

pub mod api;

use crate::tools::bench::BenchError;
use crate::tools::OnTwin;
use pinstream::backend::native::{NativeCopies, Piece, PieceWay};
use pinstream::backend::opencl::{ClError, Context, DeviceBuffer, DeviceInfo, Queue};
use pinstream::gather::{CallStats, DeviceTimes, Gather, GatherError, GatherOptions, OverlapCheck};
use pinstream::host::{HostError, HostRegion, PinOptions};
use pinstream::units::median;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::time::Instant;

/// Room each piece's slot has beyond the piece, for its random misalignment.
const SLACK: usize = 64;

/// What to move.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Shape {
    /// Pieces.
    pub pieces: usize,
    /// Bytes per piece.
    pub piece_size: usize,
    /// Seed of the offsets and the data.
    pub seed: u64,
    /// Timed repeats per row; figures are their median.
    pub repeat: usize,
}

impl Shape {
    /// Bytes moved one way.
    pub fn total(&self) -> usize {
        self.pieces * self.piece_size
    }

    /// Bytes of the host memory and of the device buffer the pieces are scattered over.
    pub fn span(&self) -> usize {
        self.pieces * (self.piece_size + SLACK)
    }
}

/// Why `bench gather` failed.
#[derive(Debug, thiserror::Error)]
pub enum GatherBenchError {
    /// Host memory or setup.
    #[error(transparent)]
    Bench(#[from] BenchError),
    /// The gather.
    #[error(transparent)]
    Gather(#[from] GatherError),
    /// A row moved wrong bytes.
    #[error("{row}: {wrong} bytes differ from the reference after the transfer: this path is broken on this driver, report it")]
    Wrong {
        /// The row.
        row: String,
        /// Bytes that differ.
        wrong: usize,
    },
    /// Sizes that cannot be measured.
    #[error("{0}")]
    Usage(String),
}

impl From<ClError> for GatherBenchError {
    fn from(e: ClError) -> Self {
        BenchError::Cl(e).into()
    }
}

impl From<HostError> for GatherBenchError {
    fn from(e: HostError) -> Self {
        BenchError::Host(e).into()
    }
}

/// How a row moves the pieces: what the goals and ratios pick rows by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// pinstream's gather (pack, one DMA, a kernel).
    Gather,
    /// One kernel reading or writing mapped pinned host memory in place, a block per piece:
    /// pinstream's zero-copy gather, or CUDA's kernel on `cudaHostAllocMapped` memory.
    ZeroCopy,
    /// pinstream's zero-copy gather with the caller vouching that the written ranges are
    /// disjoint ([`pinstream::gather::OverlapCheck::Vouched`]): no overlap check.
    ZeroCopyVouched,
    /// One API call per piece (OpenCL's or CUDA's), waited for once.
    PerPiece,
    /// One batch call for every piece (CUDA's `cuMemcpyBatchAsync`).
    Batch,
    /// One transfer of the total bytes (the one-way peak).
    Peak,
}

/// One way of moving the pieces one way.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `pinstream`, `opencl` or `cuda`.
    pub api: &'static str,
    /// How it moves the pieces (not in the report: `path` says it).
    #[serde(skip)]
    pub way: Way,
    /// What it does.
    pub path: &'static str,
    /// `h2d` or `d2h`.
    pub direction: &'static str,
    /// Median wall time of the whole move, µs.
    pub total_us: f64,
    /// Bytes moved over the median, GB/s.
    pub gbps: f64,
    /// Median µs per piece.
    pub us_per_piece: f64,
    /// How many times faster than CUDA's per-piece loop in the same direction, where measured.
    pub vs_cuda_loop: Option<f64>,
    /// pinstream's rows: median µs the host spent copying pieces into or out of staging
    /// (threads started included, waits not), part of `total_us`.
    pub host_copy_us: Option<f64>,
    /// pinstream's rows: batches the move was cut into.
    pub batches: Option<usize>,
    /// pinstream's rows: median µs spent checking and cutting the pieces into batches.
    pub plan_us: Option<f64>,
    /// pinstream's rows: median µs from the call to its return.
    pub call_us: Option<f64>,
    /// pinstream's rows: one more call through a gather with event profiling, its
    /// commands' device times (DMA and kernels summed, and the span).
    pub device: Option<DeviceTimes>,
    /// Read back and compared with the reference (always true in a report: a mismatch fails
    /// the run).
    pub verified: bool,
}

/// The two goals, per direction.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Goals {
    /// pinstream's gather GB/s as a share of the one-way peak (goal ≥ 0.5).
    pub of_peak: Option<f64>,
    /// pinstream's gather speed over CUDA's per-piece loop (goal ≥ 10).
    pub vs_cuda_loop: Option<f64>,
    /// pinstream's gather speed over `cuMemcpyBatchAsync`, where measured.
    pub vs_cuda_batch: Option<f64>,
    /// pinstream's zero-copy gather (pieces in mapped memory) GB/s as a share of the one-way
    /// peak (issue 23's goal >= 0.85), where measured.
    pub zero_copy_of_peak: Option<f64>,
    /// pinstream's zero-copy gather over CUDA's zero-copy kernel on `cudaHostAllocMapped`
    /// memory (goal >= 0.97), where measured.
    pub zero_copy_vs_cuda_zero_copy: Option<f64>,
    /// pinstream's zero-copy gather over CUDA's per-piece loop (goal >= 20), where measured.
    pub zero_copy_vs_cuda_loop: Option<f64>,
    /// pinstream's zero-copy gather over `cuMemcpyBatchAsync` (goal >= 15), where measured.
    pub zero_copy_vs_cuda_batch: Option<f64>,
    /// The same four for the zero-copy gather whose caller vouches that the written ranges
    /// are disjoint (no overlap check): share of the one-way peak.
    pub vouched_of_peak: Option<f64>,
    /// ... over CUDA's zero-copy kernel.
    pub vouched_vs_cuda_zero_copy: Option<f64>,
    /// ... over CUDA's per-piece loop.
    pub vouched_vs_cuda_loop: Option<f64>,
    /// ... over `cuMemcpyBatchAsync`.
    pub vouched_vs_cuda_batch: Option<f64>,
}

/// The report of `bench gather`.
#[derive(Debug, Clone, Serialize)]
pub struct GatherReport {
    /// The device.
    pub device: DeviceInfo,
    /// What was moved.
    pub shape: Shape,
    /// Bytes moved one way.
    pub total_bytes: usize,
    /// Staging bytes per batch of the gather.
    pub gather_capacity: usize,
    /// Every row, host to device first.
    pub rows: Vec<Row>,
    /// Host to device.
    pub h2d: Goals,
    /// Device to host.
    pub d2h: Goals,
    /// Why there are no CUDA rows, if there are none.
    pub cuda_unavailable: Option<String>,
    /// Why there is no `cuMemcpyBatchAsync` row, if there is none.
    pub cuda_batch_unavailable: Option<String>,
    /// Why there are no zero-copy rows (no mapped memory on this device), if there are none.
    pub zero_copy_unavailable: Option<String>,
}

/// The pieces: `(host offset, device offset)` for each, disjoint on both sides, each in a
/// slot of its own at a random misalignment, the slots shuffled.
pub fn offsets(shape: &Shape) -> Vec<(usize, usize)> {
    let mut rng = SmallRng::seed_from_u64(shape.seed);
    let stride = shape.piece_size + SLACK;
    let slots = |rng: &mut SmallRng| {
        let mut v: Vec<usize> = (0..shape.pieces).collect();
        v.shuffle(rng);
        v.into_iter()
            .map(|s| s * stride + rng.gen_range(0..SLACK))
            .collect::<Vec<_>>()
    };
    let host = slots(&mut rng);
    let device = slots(&mut rng);
    host.into_iter().zip(device).collect()
}

/// The device bytes after every piece was uploaded onto zeros.
fn expected_device(shape: &Shape, offs: &[(usize, usize)], host: &[u8]) -> Vec<u8> {
    let mut want = vec![0u8; shape.span()];
    for &(h, d) in offs {
        want[d..d + shape.piece_size].copy_from_slice(&host[h..h + shape.piece_size]);
    }
    want
}

/// Bytes of the pieces that differ between the host memory `got` and the device image.
fn wrong_pieces(shape: &Shape, offs: &[(usize, usize)], got: &[u8], device: &[u8]) -> usize {
    let n = shape.piece_size;
    offs.iter()
        .map(|&(h, d)| wrong_bytes(&got[h..h + n], &device[d..d + n]))
        .sum()
}

/// Bytes that differ between `got` and `want`, over the shorter: blocks compared whole first
/// (`memcmp`), counted byte by byte only where they differ, so a check of right bytes stays
/// quick in a debug build (the tests'), where a byte loop costs ~20 ns a byte.
fn wrong_bytes(got: &[u8], want: &[u8]) -> usize {
    const BLOCK: usize = 4096;
    got.chunks(BLOCK)
        .zip(want.chunks(BLOCK))
        .filter(|(a, b)| a != b)
        .map(|(a, b)| a.iter().zip(b).filter(|(x, y)| x != y).count())
        .sum()
}

/// Times `repeat` runs of `f` (one untimed first), µs each.
fn timed<E>(repeat: usize, mut f: impl FnMut() -> Result<(), E>) -> Result<Vec<f64>, E> {
    f()?;
    (0..repeat)
        .map(|_| {
            let start = Instant::now();
            f()?;
            Ok(start.elapsed().as_secs_f64() * 1e6)
        })
        .collect()
}

fn row(
    (api, way): (&'static str, Way),
    path: &'static str,
    up: bool,
    shape: &Shape,
    us: &[f64],
) -> Row {
    let total_us = median(us);
    Row {
        api,
        way,
        path,
        direction: if up { "h2d" } else { "d2h" },
        total_us,
        gbps: shape.total() as f64 / total_us / 1e3,
        us_per_piece: total_us / shape.pieces as f64,
        vs_cuda_loop: None,
        host_copy_us: None,
        batches: None,
        plan_us: None,
        call_us: None,
        device: None,
        verified: true,
    }
}

/// Measures every row; `cuda` (the CLI's way to CUDA) adds CUDA's rows where CUDA can
/// measure this device, or says why not.
pub fn gather_bench(
    ctx: &Context,
    shape: &Shape,
    staging: GatherOptions,
    cuda: Option<OnTwin>,
) -> Result<GatherReport, GatherBenchError> {
    check_shape(shape)?;
    let offs = offsets(shape);
    let mut side = ClSide::new(ctx, shape, &staging)?;
    let mut rows = side.rows(shape, &offs)?;
    let (mut cuda_unavailable, mut cuda_batch_unavailable) = (None, None);
    if let Some(on) = cuda {
        let source = side.source()?;
        let measured = on(ctx.device(), &mut |native| {
            let (r, why) = native_rows("cuda", native, shape, &offs, source)?;
            rows.extend(r);
            cuda_batch_unavailable = why;
            Ok(())
        });
        cuda_unavailable = measured.err();
    }
    compare_with_cuda(&mut rows);
    Ok(GatherReport {
        device: ctx.device().clone(),
        shape: *shape,
        total_bytes: shape.total(),
        gather_capacity: side.gather.options().capacity,
        h2d: goals(&rows, "h2d"),
        d2h: goals(&rows, "d2h"),
        rows,
        cuda_unavailable,
        cuda_batch_unavailable,
        zero_copy_unavailable: side.mapped.as_ref().err().cloned(),
    })
}

/// A shape with nothing to move refused.
fn check_shape(shape: &Shape) -> Result<(), GatherBenchError> {
    match shape.pieces == 0 || shape.piece_size == 0 || shape.repeat == 0 {
        true => Err(GatherBenchError::Usage(
            "--pieces, --piece-size and --repeat must be at least 1".into(),
        )),
        false => Ok(()),
    }
}

/// Every row at the default shape (4,096 x 4 KiB, seed 1), `repeat` runs each, with the
/// default staging: what `compare` reports.
pub fn default_shape(
    ctx: &Context,
    repeat: usize,
    cuda: Option<OnTwin>,
) -> Result<GatherReport, GatherBenchError> {
    let shape = Shape {
        pieces: 4096,
        piece_size: 4096,
        seed: 1,
        repeat: repeat.max(1),
    };
    gather_bench(ctx, &shape, GatherOptions::default(), cuda)
}

fn compare_with_cuda(rows: &mut [Row]) {
    for dir in ["h2d", "d2h"] {
        let base = rows
            .iter()
            .find(|r| r.api == "cuda" && r.direction == dir && r.way == Way::PerPiece)
            .map(|r| r.total_us);
        for r in rows.iter_mut().filter(|r| r.direction == dir) {
            r.vs_cuda_loop = base.map(|b| b / r.total_us);
        }
    }
}

fn goals(rows: &[Row], dir: &str) -> Goals {
    let find = |api: &str, way: Way| {
        rows.iter()
            .find(|r| r.direction == dir && r.api == api && r.way == way)
    };
    let peak = find("opencl", Way::Peak);
    // How many times faster `a` is than `b` (the same bytes both).
    let over = |a: Option<&Row>, b: Option<&Row>| a.zip(b).map(|(a, b)| b.total_us / a.total_us);
    let (staged, zero, vouched) = (
        find("pinstream", Way::Gather),
        find("pinstream", Way::ZeroCopy),
        find("pinstream", Way::ZeroCopyVouched),
    );
    let cuda = |way: Way| find("cuda", way);
    Goals {
        of_peak: over(staged, peak),
        vs_cuda_loop: over(staged, cuda(Way::PerPiece)),
        vs_cuda_batch: over(staged, cuda(Way::Batch)),
        zero_copy_of_peak: over(zero, peak),
        zero_copy_vs_cuda_zero_copy: over(zero, cuda(Way::ZeroCopy)),
        zero_copy_vs_cuda_loop: over(zero, cuda(Way::PerPiece)),
        zero_copy_vs_cuda_batch: over(zero, cuda(Way::Batch)),
        vouched_of_peak: over(vouched, peak),
        vouched_vs_cuda_zero_copy: over(vouched, cuda(Way::ZeroCopy)),
        vouched_vs_cuda_loop: over(vouched, cuda(Way::PerPiece)),
        vouched_vs_cuda_batch: over(vouched, cuda(Way::Batch)),
    }
}

/// The OpenCL side: a queue, the pinned source (random) and destination host memory, the
/// device buffer, the whole-transfer regions and the gather.
struct ClSide {
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
    gather: Gather,
    /// Mapped source and destination for the zero-copy rows (the source a copy of `src`), or
    /// why the device has none.
    mapped: Result<(HostRegion, HostRegion), String>,
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
    fn new(
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

    fn source(&self) -> Result<&[u8], GatherBenchError> {
        self.src
            .as_slice()
            .ok_or_else(|| GatherBenchError::Usage("the source region is not contiguous".into()))
    }

    fn rows(
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
    fn with_calls(&self, mut r: Row, device: Option<DeviceTimes>) -> Row {
        if let [_, timed @ ..] = &self.calls[..] {
            if !timed.is_empty() {
                let med = |f: fn(&CallStats) -> f64| {
                    Some(median(
                        &timed.iter().map(|c| f(c) * 1e6).collect::<Vec<_>>(),
                    ))
                };
                r.host_copy_us = med(|c| c.copy_s);
                r.plan_us = med(|c| c.plan_s);
                r.call_us = med(|c| c.call_s);
                r.batches = Some(timed[0].batches);
                r.device = device;
            }
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

/// The pieces' indices in the order of their host offsets (what [`carve`] walks).
pub fn host_order(offs: &[(usize, usize)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..offs.len()).collect();
    order.sort_unstable_by_key(|&i| offs[i].0);
    order
}

/// Disjoint mutable slices of `buf`, `len` bytes at each piece's host offset, in the
/// pieces' order, each paired with its device offset; `order` is [`host_order`]'s (sorted
/// once per shape, outside the timed calls: a program splitting its own buffer knows where
/// its pieces lie).
pub fn carve<'a>(
    buf: &'a mut [u8],
    offs: &[(usize, usize)],
    order: &[usize],
    len: usize,
) -> Vec<(&'a mut [u8], usize)> {
    let mut out: Vec<Option<(&'a mut [u8], usize)>> = (0..offs.len()).map(|_| None).collect();
    let (mut rest, mut at) = (buf, 0);
    for &i in order {
        let (h, d) = offs[i];
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(h - at);
        let (mine, after) = tail.split_at_mut(len);
        out[i] = Some((mine, d));
        (rest, at) = (after, h + len);
    }
    out.into_iter()
        .map(|p| p.expect("every piece carved"))
        .collect()
}

/// The rows of API `api`'s own calls (`native`: per-piece loop and batch, both ways; CUDA's
/// zero-copy kernel too), each checked, and why there is no batch row, if not.
fn native_rows(
    api: &'static str,
    native: &dyn NativeCopies,
    shape: &Shape,
    offs: &[(usize, usize)],
    source: &[u8],
) -> Result<(Vec<Row>, Option<String>), String> {
    let e = |e: pinstream::backend::error::BackendError| e.to_string();
    let mut copies = native.piece_copies(source).map_err(e)?;
    let pieces: Vec<Piece> = offs
        .iter()
        .map(|&(host, device)| Piece {
            host,
            device,
            len: shape.piece_size,
        })
        .collect();
    let want = expected_device(shape, offs, source);
    let mut rows = Vec::new();
    for (way, [up_path, down_path]) in copies.ways() {
        let kind = match way {
            PieceWay::PerPiece => Way::PerPiece,
            PieceWay::Batch => Way::Batch,
            PieceWay::ZeroCopy => Way::ZeroCopy,
        };
        // Up: zero the device, move, read back, compare.
        copies.dst().fill(0);
        copies.whole(true).map_err(e)?;
        let us = timed(shape.repeat, || copies.copy(way, &pieces, true).map(drop)).map_err(e)?;
        copies.whole(false).map_err(e)?;
        check(up_path, wrong_bytes(copies.dst(), &want))?;
        rows.push(row((api, kind), up_path, true, shape, &us));
        // Down: the device holds `want`; zero the destination, move, compare the pieces.
        copies.dst().fill(0);
        let us = timed(shape.repeat, || copies.copy(way, &pieces, false).map(drop)).map_err(e)?;
        check(down_path, wrong_pieces(shape, offs, copies.dst(), &want))?;
        rows.push(row((api, kind), down_path, false, shape, &us));
    }
    Ok((rows, copies.missing()))
}

fn check(path: &str, wrong: usize) -> Result<(), String> {
    match wrong {
        0 => Ok(()),
        n => Err(GatherBenchError::Wrong {
            row: path.into(),
            wrong: n,
        }
        .to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows are picked by how they move the pieces, whatever their text says: the goals
    /// and the ratios against CUDA's loop come out of the right rows.
    #[test]
    fn goals_pick_rows_by_their_way() {
        let shape = Shape {
            pieces: 10,
            piece_size: 100,
            seed: 1,
            repeat: 1,
        };
        let up = |api, way, us: f64| row((api, way), "a path", true, &shape, &[us]);
        let mut rows = vec![
            up("pinstream", Way::Gather, 10.0),
            up("opencl", Way::PerPiece, 40.0),
            up("opencl", Way::Peak, 5.0),
            up("cuda", Way::PerPiece, 100.0),
            up("cuda", Way::Batch, 20.0),
            up("cuda", Way::ZeroCopy, 8.0),
            up("pinstream", Way::ZeroCopy, 4.0),
        ];
        compare_with_cuda(&mut rows);
        let g = goals(&rows, "h2d");
        assert_eq!(g.of_peak, Some(0.5));
        assert_eq!(g.vs_cuda_loop, Some(10.0));
        assert_eq!(g.vs_cuda_batch, Some(2.0));
        // The two zero-copy rows are told apart by their API.
        assert_eq!(g.zero_copy_of_peak, Some(1.25));
        assert_eq!(g.zero_copy_vs_cuda_zero_copy, Some(2.0));
        assert_eq!(g.zero_copy_vs_cuda_loop, Some(25.0));
        assert_eq!(g.zero_copy_vs_cuda_batch, Some(5.0));
        assert_eq!(goals(&rows, "d2h").of_peak, None);
    }

    #[test]
    fn wrong_bytes_counts_each_differing_byte_over_the_shorter() {
        let want: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let mut got = want.clone();
        assert_eq!(super::wrong_bytes(&got, &want), 0);
        for at in [0, 4095, 4096, 9_999] {
            got[at] ^= 1;
        }
        assert_eq!(super::wrong_bytes(&got, &want), 4);
        assert_eq!(super::wrong_bytes(&got[..5000], &want), 3);
    }

    #[test]
    fn offsets_are_disjoint_on_both_sides_and_reproducible() {
        let shape = Shape {
            pieces: 500,
            piece_size: 100,
            seed: 3,
            repeat: 1,
        };
        let offs = offsets(&shape);
        assert_eq!(offs, offsets(&shape));
        for side in [0, 1] {
            let mut v: Vec<usize> = offs
                .iter()
                .map(|o| if side == 0 { o.0 } else { o.1 })
                .collect();
            v.sort_unstable();
            assert!(v.windows(2).all(|w| w[0] + 100 <= w[1]));
            assert!(*v.last().unwrap() + 100 <= shape.span());
        }
        assert!(
            offs.iter().any(|o| o.1 % 4 != 0),
            "unaligned offsets are drawn"
        );
    }

    #[test]
    fn carving_gives_each_piece_its_bytes() {
        let mut buf: Vec<u8> = (0..=255).collect();
        let offs = [(200, 1), (3, 2), (50, 3)];
        let pieces = carve(&mut buf, &offs, &host_order(&offs), 10);
        assert_eq!(pieces[0].0[0], 200);
        assert_eq!((pieces[1].0[9], pieces[1].1), (12, 2));
        assert_eq!(pieces[2].0.len(), 10);
    }
}
