//! The pieces of `bench gather` and what every API's rows share: where each piece lies, the
//! checks of what arrived, the timing, a row, and the rows of an API's own copy calls.

use super::{GatherBenchError, Row, Shape, Way, SLACK};
use pinstream::backend::native::{NativeCopies, Piece, PieceWay};
use pinstream::gather::CallStats;
use pinstream::units::median;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::time::Instant;

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
pub(super) fn expected_device(shape: &Shape, offs: &[(usize, usize)], host: &[u8]) -> Vec<u8> {
    let mut want = vec![0u8; shape.span()];
    for &(h, d) in offs {
        want[d..d + shape.piece_size].copy_from_slice(&host[h..h + shape.piece_size]);
    }
    want
}

/// Bytes of the pieces that differ between the host memory `got` and the device image.
pub(super) fn wrong_pieces(
    shape: &Shape,
    offs: &[(usize, usize)],
    got: &[u8],
    device: &[u8],
) -> usize {
    let n = shape.piece_size;
    offs.iter()
        .map(|&(h, d)| wrong_bytes(&got[h..h + n], &device[d..d + n]))
        .sum()
}

/// Bytes that differ between `got` and `want`, over the shorter: blocks compared whole first
/// (`memcmp`), counted byte by byte only where they differ, so a check of right bytes stays
/// quick in a debug build (the tests'), where a byte loop costs ~20 ns a byte.
pub(super) fn wrong_bytes(got: &[u8], want: &[u8]) -> usize {
    const BLOCK: usize = 4096;
    got.chunks(BLOCK)
        .zip(want.chunks(BLOCK))
        .filter(|(a, b)| a != b)
        .map(|(a, b)| a.iter().zip(b).filter(|(x, y)| x != y).count())
        .sum()
}

/// Times `repeat` runs of `f` (one untimed first), µs each.
pub(super) fn timed<E>(repeat: usize, mut f: impl FnMut() -> Result<(), E>) -> Result<Vec<f64>, E> {
    f()?;
    (0..repeat)
        .map(|_| {
            let start = Instant::now();
            f()?;
            Ok(start.elapsed().as_secs_f64() * 1e6)
        })
        .collect()
}

/// The row of `api`'s `way` by `path`, one direction, from the µs of its runs.
pub(super) fn row(
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

/// The pieces' indices in the order of their host offsets (what [`carve`] walks).
pub fn host_order(offs: &[(usize, usize)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..offs.len()).collect();
    order.sort_unstable_by_key(|&i| offs[i].0);
    order
}

/// `r` with the batch calls' host times and batches, the first (untimed) call left out:
/// the medians of the rest.
pub(super) fn with_stats(mut r: Row, calls: &[CallStats]) -> Row {
    if let [_, timed @ ..] = calls {
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
        }
    }
    r
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
pub(super) fn native_rows(
    api: &'static str,
    native: &dyn NativeCopies,
    shape: &Shape,
    offs: &[(usize, usize)],
    source: &[u8],
) -> Result<(Vec<Row>, Option<String>), GatherBenchError> {
    let e = |e: pinstream::backend::error::BackendError| {
        GatherBenchError::from(crate::tools::bench::BenchError::Backend(e))
    };
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

/// `path`'s row refused where `wrong` bytes arrived wrong.
pub(super) fn check(path: &str, wrong: usize) -> Result<(), GatherBenchError> {
    match wrong {
        0 => Ok(()),
        n => Err(GatherBenchError::Wrong {
            row: path.into(),
            wrong: n,
        }),
    }
}
