//! `pinstream bench gather`: N pieces of S bytes at random (seeded) host and device
//! offsets, moved both ways by every way there is, side by side in one run: pinstream's
//! batch copies ([`pinstream::gather`]), the API's own per-piece loop (and its batch call
//! where it has one), one transfer of the same total bytes (the one-way peak), and CUDA's
//! per-piece `cuMemcpy*Async` loop, `cuMemcpyBatchAsync` and zero-copy kernel where CUDA is
//! there. Every row's result is read back and checked
//! against the reference, so a wrong fast path cannot win. Every row is written once over
//! any API ([`gather_bench`]): pinstream's (`ours`, through [`pinstream::gather::BatchApi`]),
//! the API's own calls (`pieces::native_rows`, through its `NativeCopies`: on Vulkan a
//! `vkCmdCopyBuffer` per piece, and one with a region per piece, its batch) and the peak
//! (`peak`, through pinstream's path over the API). Where the API has no zero-copy batch
//! copies ([`BatchApi::zero_copy_missing`]) the report says why instead of their rows.

mod ours;
mod peak;
mod pieces;

pub use pieces::{carve, host_order, offsets};

use ours::our_rows;
use pieces::{check, native_rows, row, timed, wrong_bytes};

use crate::tools::bench::BenchError;
use crate::tools::doctor::DoctorDevice;
use crate::tools::OnCuda;
use pinstream::gather::{BatchApi, DeviceTimes, GatherError, GatherOptions};
use pinstream::units::Bytes;
use serde::Serialize;

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

    /// How reports name the shape: "4096 x 4 KiB", "65536 x 256 B".
    pub fn label(&self) -> String {
        format!("{} x {}", self.pieces, Bytes(self.piece_size as u64))
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
    /// One API call per piece (the API's own, or CUDA's), waited for once.
    PerPiece,
    /// One batch call for every piece (Vulkan's `vkCmdCopyBuffer` with a region per piece,
    /// CUDA's `cuMemcpyBatchAsync`).
    Batch,
    /// One transfer of the total bytes (the one-way peak).
    Peak,
}

/// One way of moving the pieces one way.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `pinstream`, or the API whose own calls make the row (`opencl`, `vulkan`, `cuda`).
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

/// The report of `bench gather`, through any API.
#[derive(Debug, Clone, Serialize)]
pub struct GatherReport {
    /// The API pinstream's rows went through (`opencl`, `vulkan`, `cuda`).
    pub api: &'static str,
    /// The device.
    pub device: DoctorDevice,
    /// What was moved.
    pub shape: Shape,
    /// Bytes moved one way.
    pub total_bytes: usize,
    /// Staging bytes per batch of the staged calls.
    pub gather_capacity: usize,
    /// How pinstream's staged batch copies move a batch through this API.
    pub batch_way: String,
    /// Every row: pinstream's and the API's own, host to device first, then CUDA's.
    pub rows: Vec<Row>,
    /// Host to device.
    pub h2d: Goals,
    /// Device to host.
    pub d2h: Goals,
    /// Why there are no CUDA rows, if there are none.
    pub cuda_unavailable: Option<String>,
    /// Why an API's own batch call (this API's, or CUDA's `cuMemcpyBatchAsync`) has no row,
    /// for each that has none.
    pub batch_unavailable: Vec<String>,
    /// Why there are no zero-copy rows (no mapped memory on this device), if there are none.
    pub zero_copy_unavailable: Option<String>,
}

/// Measures every row of `shape` on `device` (`described`), pinstream's batch copies with
/// `staging`; `cuda` (the CLI's way to CUDA on the same GPU) adds CUDA's rows where CUDA can
/// measure this device, or says why not.
pub fn gather_bench<A: BatchApi>(
    device: &A::Device,
    described: DoctorDevice,
    (shape, staging): (&Shape, &GatherOptions),
    cuda: Option<OnCuda<'_>>,
) -> Result<GatherReport, GatherBenchError> {
    check_shape(shape)?;
    let offs = offsets(shape);
    let source = source(shape);
    let ours = our_rows::<A>(device, (shape, &offs, &source), staging, &ours::NAMES)?;
    // The API's own calls (`NativeCopies`: its per-piece loop, its batch call where it has
    // one) and the peak.
    let native = A::native_copies(device).ok_or(BenchError::NoPinning(A::NAME))?;
    let (own, why) = native_rows(A::ID, native, shape, &offs, &source)?;
    let mut batch_unavailable: Vec<String> = why.into_iter().collect();
    let (own_up, own_down): (Vec<Row>, Vec<Row>) = (own.into_iter())
        .chain(peak::peak::<A>(device, shape)?)
        .partition(|r| r.direction == "h2d");
    // Host to device first, each direction: the staged row, the API's own, the zero-copy rows.
    let mut rows = Vec::new();
    for (mut mine, own) in [(ours.up, own_up), (ours.down, own_down)] {
        let zero_copy = mine.split_off(1);
        rows.extend(mine.into_iter().chain(own).chain(zero_copy));
    }
    let cuda_unavailable = cuda.and_then(|on| {
        on(&mut |n| {
            let (r, why) =
                native_rows("cuda", n, shape, &offs, &source).map_err(|e| e.to_string())?;
            rows.extend(r);
            batch_unavailable.extend(why);
            Ok(())
        })
        .err()
    });
    compare_with_cuda(&mut rows);
    Ok(GatherReport {
        api: A::ID,
        device: described,
        shape: *shape,
        total_bytes: shape.total(),
        gather_capacity: staging.capacity,
        batch_way: ours.way,
        h2d: goals(A::ID, &rows, "h2d"),
        d2h: goals(A::ID, &rows, "d2h"),
        rows,
        cuda_unavailable,
        batch_unavailable,
        zero_copy_unavailable: ours.zero_copy_unavailable,
    })
}

/// The bytes the pieces are cut from: `shape.span()` random bytes of its seed.
fn source(shape: &Shape) -> Vec<u8> {
    let mut source = vec![0u8; shape.span()];
    crate::tools::random::fill_random(vec![&mut source], shape.seed);
    source
}

/// Copies of the pieces' span the bench holds in host memory at once, about: the source,
/// and each direction's reference image, plain copy and mapped source and destination.
pub const HOST_COPIES: u64 = 8;

/// A shape with nothing to move refused, and one whose span overflows or whose copies
/// ([`HOST_COPIES`]) the host cannot hold (before anything is allocated): more than the memory
/// available (`MemAvailable`, which counts reclaimable page cache as free) or, in a container,
/// more than its whole limit (not what is left under it, which counts active page cache as
/// used and could refuse a shape the kernel would make room for).
pub fn check_shape(shape: &Shape) -> Result<(), GatherBenchError> {
    if shape.pieces == 0 || shape.piece_size == 0 || shape.repeat == 0 {
        return Err(GatherBenchError::Usage(
            "--pieces, --piece-size and --repeat must be at least 1".into(),
        ));
    }
    let (pieces, size) = (shape.pieces, Bytes(shape.piece_size as u64));
    let need = (shape.piece_size.checked_add(SLACK))
        .and_then(|each| each.checked_mul(shape.pieces))
        .and_then(|span| (span as u64).checked_mul(HOST_COPIES));
    let Some(need) = need else {
        return Err(GatherBenchError::Usage(format!(
            "{pieces} pieces of {size}: their span overflows the address space: ask for fewer or smaller pieces"
        )));
    };
    let room = pinstream::backend::os::host_room();
    let bound = (room.as_ref()).map(|r| r.cgroup.as_ref().map_or(r.bytes, |c| c.limit));
    match (room, bound) {
        (Some(room), Some(bound)) if need > bound => Err(GatherBenchError::Usage(format!(
            "{pieces} pieces of {size} need about {} of host memory ({HOST_COPIES} copies of their span), more than this host can give ({room}): ask for fewer or smaller pieces",
            Bytes(need)
        ))),
        _ => Ok(()),
    }
}

/// The shape `compare` measures unless asked for others: 4,096 pieces of 4 KiB.
pub const COMPARE_SHAPE: (usize, usize) = (4096, 4096);

/// Every row at `pieces` pieces of `piece_size` bytes (seed 1), `repeat` runs each, with the
/// default staging: what `compare` reports for each of its shapes.
pub fn compare_rows<A: BatchApi>(
    device: &A::Device,
    described: DoctorDevice,
    ((pieces, piece_size), repeat): ((usize, usize), usize),
    cuda: Option<OnCuda<'_>>,
) -> Result<GatherReport, GatherBenchError> {
    let shape = Shape {
        pieces,
        piece_size,
        seed: 1,
        repeat: repeat.max(1),
    };
    gather_bench::<A>(device, described, (&shape, &GatherOptions::default()), cuda)
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

/// The goals in direction `dir`, the peak being API `api`'s.
fn goals(api: &str, rows: &[Row], dir: &str) -> Goals {
    let find = |api: &str, way: Way| {
        rows.iter()
            .find(|r| r.direction == dir && r.api == api && r.way == way)
    };
    let peak = find(api, Way::Peak);
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
        let g = goals("opencl", &rows, "h2d");
        assert_eq!(g.of_peak, Some(0.5));
        assert_eq!(g.vs_cuda_loop, Some(10.0));
        assert_eq!(g.vs_cuda_batch, Some(2.0));
        // The two zero-copy rows are told apart by their API.
        assert_eq!(g.zero_copy_of_peak, Some(1.25));
        assert_eq!(g.zero_copy_vs_cuda_zero_copy, Some(2.0));
        assert_eq!(g.zero_copy_vs_cuda_loop, Some(25.0));
        assert_eq!(g.zero_copy_vs_cuda_batch, Some(5.0));
        assert_eq!(goals("opencl", &rows, "d2h").of_peak, None);
        // The shares are of the peak of the API the report is of, whatever else is there.
        rows.push(up("vulkan", Way::Peak, 2.0));
        assert_eq!(goals("vulkan", &rows, "h2d").of_peak, Some(0.2));
        assert_eq!(goals("opencl", &rows, "h2d").of_peak, Some(0.5));
    }

    #[test]
    fn shapes_past_the_address_space_or_the_host_memory_are_refused() {
        let shape = |pieces, piece_size| Shape {
            pieces,
            piece_size,
            seed: 1,
            repeat: 1,
        };
        assert!(check_shape(&shape(64, 256)).is_ok());
        for (pieces, size) in [
            (usize::MAX, 1),
            (2, usize::MAX - 8),
            (1 << 40, 1 << 30),
            (0, 8),
        ] {
            let e = check_shape(&shape(pieces, size)).unwrap_err();
            assert!(
                matches!(e, GatherBenchError::Usage(_)),
                "{pieces} x {size}: {e}"
            );
        }
        // A span that fits the address space (1 PiB) but no host memory: refused by the room,
        // which names what bounds it.
        if pinstream::backend::os::host_room().is_some() {
            let e = check_shape(&shape(1 << 30, 1 << 20))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("copies of their span") && e.contains("this host can give"),
                "{e}"
            );
        }
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
