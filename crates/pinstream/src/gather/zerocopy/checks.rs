//! A zero-copy call's checks of its pieces, with its table's rows written in the same pass:
//! on one thread for small batches, on the pool's threads ([`crate::backend::os::par`]) for
//! large ones, where the host part (not the kernel) is most of a call's time: on the H200,
//! 65,536 pieces cost ~1.3 ms of checks and rows on one core against ~0.5 ms of kernel
//! (bench/results/h200/session-2026-12-02b/gpu-mapped/mapped.md: plan 1,293 µs, kernel 507).
//! Both ways refuse exactly the same pieces with exactly the same error. Each chunk is first
//! scanned in one pass with no branch per check ([`QuickScan`], compiled for AVX-512 where
//! the CPU has it: [`simd::widest`]), and again by the exact scan only where that finds
//! something to refuse. The scan once carried a running "still in order" flag, which kept
//! the loop scalar; it now flags any start inside the piece before it instead (an overlap
//! wherever it comes). On an H100's host, 4,096 shuffled 4 KiB pieces' checks and rows took
//! 8–10 µs vouched against 17–27 µs before both changes, in one machine call (the second of
//! two runs after: bench/results/h100/session-2026-12-08; on the 2-core test host,
//! bench/results/pocl/zero-copy-simd).

use super::super::overlap::{self, Scratch};
use super::super::plan::SEGMENT_MAX;
use super::{GatherError, OverlapCheck, Rows, TableShape, Word};
use crate::backend::os::{par, simd};

/// A piece: (host offset, length, device offset).
type Piece = (usize, usize, usize);

/// The fewest threads of the pool for the thresholds measured on the H200's host
/// ([`SPLIT_FROM`], [`MIN_CHUNK`], and the overlap check in ranges); smaller pools use
/// [`FEW_THREADS_MIN_CHUNK`] and keep the overlap check on one thread.
const MANY_THREADS: usize = 4;

/// The fewest pieces a batch splits from, unless the caller sets the threads, on a pool of
/// [`MANY_THREADS`] or more: below this, waking the pool's threads costs more than they save.
/// Measured on the H200's host (16 threads;
/// bench/results/h200/session-2026-12-02d/gpu-mapped/zero-copy-timeline.txt, least call of
/// 15): 4,096 pieces took 58–117 µs on one thread and 71–144 µs split; 16,384 took 92–247
/// split against 172–424 on one; 65,536 vouched 131–143 against 640–725. The overlap check
/// splits too (each range's thread reads every span to keep its own): 1,784 → 713 µs up
/// and 1,928 → 686 down at 65,536 pieces, 2.5x and 2.8x.
const SPLIT_FROM: usize = 8192;

/// The fewest pieces per thread there, and whenever the caller sets the threads
/// ([`super::super::GatherOptions::host_threads`]).
const MIN_CHUNK: usize = 1024;

/// The fewest pieces per thread on a smaller pool, which splits from twice this: on the
/// 2-core test host (bench/results/pocl/zero-copy-par) two chunks of 8,192 made 16,384-piece
/// calls slower (vouched 128–166 µs on one thread, 179–184 split), two of 32,768 made
/// 65,536 vouched pieces faster (~400 µs against ~510), and two overlap ranges of 65,536
/// shuffled spans slower (~1.8 ms against ~1.2).
const FEW_THREADS_MIN_CHUNK: usize = 16384;

/// How a batch of `n` pieces is split for up to `threads` threads (`None`: as measured to
/// pay): pieces per chunk of the checks, and ranges of the overlap check. At most one chunk
/// and one range per thread of the pool: its size, not [`crate::backend::os::cores`], which
/// reads the cgroup's files each time (~100 µs).
pub(super) fn split(n: usize, threads: Option<usize>) -> (usize, usize) {
    let pool = rayon::current_num_threads();
    let (chunks, ranges) = match threads {
        None if pool >= MANY_THREADS && n >= SPLIT_FROM => (n / MIN_CHUNK, n / MIN_CHUNK),
        None => (n / FEW_THREADS_MIN_CHUNK, 1),
        Some(t) => {
            let chunks = t.min(n / MIN_CHUNK);
            (chunks, chunks)
        }
    };
    let (chunks, ranges) = (chunks.clamp(1, pool), ranges.clamp(1, pool));
    (n.div_ceil(chunks), ranges)
}

/// What one chunk's pass over its pieces found, where it refused none.
#[derive(Debug)]
struct Scan {
    rows: usize,
    longest: usize,
    shortest: usize,
    /// The least and the greatest start of the written side.
    lo: usize,
    hi: usize,
    /// Whether a piece starts before the one before it on the written side.
    down: bool,
}

/// The written side's `(start, end)` of `piece` (its host side when `host_written`); the
/// end saturates, for pieces refused by their bounds.
fn written(&(host, len, dev): &Piece, host_written: bool) -> (usize, usize) {
    let at = if host_written { host } else { dev };
    (at, at.saturating_add(len))
}

/// Checks `pieces`, the first of which is piece `first` (`before`: the written range of the
/// piece before it, if any), against `sizes`, giving each piece to `put` once its bounds are
/// checked. Refused at the first piece out of bounds, or overlapping the one before it
/// while the chunk's written side is in order (the sequential check's refusal when the
/// chunk is the first or the chunks before it are in order).
fn scan(
    (pieces, first, before): (&[Piece], usize, Option<(usize, usize)>),
    sizes: (usize, usize),
    (host_written, check): (bool, OverlapCheck),
    mut put: impl FnMut(&Piece),
) -> Result<Scan, GatherError> {
    let (mut rows, mut longest, mut shortest, mut in_order) = (0, 0, usize::MAX, true);
    let (mut lo, mut hi) = (usize::MAX, 0);
    // The first piece has nothing before it: (0, 0) is neither above nor overlapping it.
    let mut last = before.unwrap_or((0, 0));
    for (index, &(host, len, dev)) in (first..).zip(pieces) {
        check_piece(index, (host, len, dev), sizes)?;
        put(&(host, len, dev));
        rows = usize::saturating_add(rows, len.div_ceil(SEGMENT_MAX));
        longest = longest.max(len);
        shortest = shortest.min(len);
        let at = if host_written { host } else { dev };
        (lo, hi) = (lo.min(at), hi.max(at));
        if at < last.0 {
            in_order = false;
        } else if in_order && at < last.1 && check == OverlapCheck::On {
            return Err(GatherError::Overlap {
                first: index - 1,
                second: index,
            });
        }
        last = (at, at + len);
    }
    let down = !in_order;
    Ok(Scan {
        rows,
        longest,
        shortest,
        lo,
        hi,
        down,
    })
}

/// [`scan`] of a chunk whose rows go into `rows` at row = piece (each piece one segment or
/// less): first in one pass without a branch per check ([`QuickScan`]), which the common
/// batch passes; where it finds anything to refuse, again by [`scan`], which finds the same
/// first refusal with its error, or leaves a start inside the piece before it, after the
/// written side went down, to the overlap check.
fn scan_rows<T: Word>(
    rows: &mut [[T; 3]],
    (pieces, first, before): (&[Piece], usize, Option<(usize, usize)>),
    sizes: (usize, usize),
    (host_written, check): (bool, OverlapCheck),
) -> Result<Scan, GatherError> {
    let quick = QuickScan(rows, (pieces, before), sizes, (host_written, check));
    if let Some(s) = simd::widest(quick) {
        return Ok(s);
    }
    let mut put = Rows::over(rows, !host_written);
    scan((pieces, first, before), sizes, (host_written, check), |p| {
        put.put(p)
    })
}

/// [`scan`] of its arguments as one pass with no branch per piece, writing each piece's row
/// at its index in `rows`: `None` (rows then partly written) where a piece is empty, out of bounds, longer
/// than a segment, past `rows`, or (the overlap check on) starts inside the one before it
/// on the written side, all of which [`scan`] then sorts out. A start inside the one
/// before is an overlap wherever it comes, so such a batch is refused either way: by
/// [`scan`] while the written side is in order, otherwise by the overlap check after it.
/// With nothing carried from piece to piece but the one before, the loop vectorises where
/// the CPU has AVX-512 ([`simd::widest`]).
struct QuickScan<'a, T>(
    &'a mut [[T; 3]],
    (&'a [Piece], Option<(usize, usize)>),
    (usize, usize),
    (bool, OverlapCheck),
);

impl<T: Word> simd::Loop for QuickScan<'_, T> {
    type Out = Option<Scan>;
    #[inline(always)]
    fn run(self) -> Option<Scan> {
        let QuickScan(rows, (pieces, before), (host_len, dev_len), (host_written, check)) = self;
        if pieces.len() > rows.len() {
            return None;
        }
        let (mut longest, mut shortest, mut lo, mut hi) = (0, usize::MAX, usize::MAX, 0);
        let (mut bad, mut down, mut inside) = (false, false, false);
        let (mut last, mut last_end) = before.unwrap_or((0, 0));
        for (row, &(host, len, dev)) in rows.iter_mut().zip(pieces) {
            // Non-short-circuit `|` and `&`: the common batch takes no branch per check.
            // `len - 1 >= SEGMENT_MAX`: empty (wrapping) or longer than a segment.
            bad |= (len.wrapping_sub(1) >= SEGMENT_MAX)
                | (dev > dev_len)
                | (len > dev_len.wrapping_sub(dev))
                | (host > host_len)
                | (len > host_len.wrapping_sub(host));
            let (from, to) = if host_written {
                (dev, host)
            } else {
                (host, dev)
            };
            *row = [T::of(from), T::of(to), T::of(len)];
            (longest, shortest) = (longest.max(len), shortest.min(len));
            let at = if host_written { host } else { dev };
            (lo, hi) = (lo.min(at), hi.max(at));
            down |= at < last;
            inside |= (at >= last) & (at < last_end);
            (last, last_end) = (at, at.wrapping_add(len));
        }
        let refused = bad || (inside && check == OverlapCheck::On);
        (!refused).then_some(Scan {
            rows: pieces.len(),
            longest,
            shortest,
            lo,
            hi,
            down,
        })
    }
}

/// The batch's shape from its chunks' scans, in order, or the first refusal, with whether
/// it is the sequential check's: it is, except for an overlap of neighbours found in a
/// chunk after one out of order (the batch is refused, but the pair the sequential check
/// names needs it run). `Ok`: the shape, and whether the written side is out of order (the
/// overlap check still to do).
fn combine(
    scans: Vec<Result<Scan, GatherError>>,
    narrow: bool,
) -> Result<(TableShape, bool), (GatherError, bool)> {
    let (mut rows, mut longest, mut down) = (0, 0, false);
    for s in scans {
        let s = match s {
            Err(e @ GatherError::Overlap { .. }) if down => return Err((e, false)),
            Err(e) => return Err((e, true)),
            Ok(s) => s,
        };
        down |= s.down;
        rows = usize::saturating_add(rows, s.rows);
        longest = longest.max(s.longest);
    }
    let longest = longest.min(SEGMENT_MAX);
    Ok((
        TableShape {
            rows,
            longest,
            narrow,
        },
        down,
    ))
}

/// The least and greatest written start over `scans`, and the one length of every piece
/// where they have one.
fn bounds(scans: &[Result<Scan, GatherError>]) -> ((usize, usize), Option<usize>) {
    let (range, lens) = scans.iter().flatten().fold(
        ((usize::MAX, 0), (usize::MAX, 0)),
        |((lo, hi), (short, long)), s| {
            let range = (lo.min(s.lo), hi.max(s.hi));
            (range, (short.min(s.shortest), long.max(s.longest)))
        },
    );
    (range, (lens.0 == lens.1).then_some(lens.0))
}

/// The overlap check of the written side's `n` spans `span(i)` starting in `range`:
/// [`overlap::DisjointEqual`] first where every piece has length `one` (`Some`), then,
/// unless that found them disjoint, [`overlap::check_par`] in `ranges` ranges (1: on this
/// thread), which names the pair.
fn overlap_check(
    n: usize,
    span: impl Fn(usize) -> (usize, usize) + Sync,
    (range, one): ((usize, usize), Option<usize>),
    scratch: &mut Scratch,
    ranges: usize,
) -> Result<(), GatherError> {
    let start = |i| span(i).0;
    let cells = |len| simd::widest(overlap::DisjointEqual(n, start, len, range, scratch));
    if one.is_some_and(cells) {
        return Ok(());
    }
    overlap::check_par(n, span, range, scratch, ranges)
}

/// Checks pieces `(host offset, length, device offset)` against a mapped region of `host_len` bytes
/// and a device buffer of `dev_len`, and, unless `check` is vouched, that the side written (the
/// host when `host_written`) gets disjoint ranges: refused as [`super::super::plan::check`]
/// refuses, and with [`GatherError::OutOfRegion`] for host ranges past the region. One pass when
/// the written side comes in order; otherwise, for pieces of one length, a pass over cells of
/// starts ([`overlap::DisjointEqual`]), and a linear check by buckets of starts
/// ([`overlap::check`]) for others or to name an overlap. Each piece is given to `put` once its
/// bounds are checked, so the table is written in the same pass. On one thread.
pub(super) fn check_pieces(
    pieces: &[Piece],
    (host_len, dev_len): (usize, usize),
    (host_written, check): (bool, OverlapCheck),
    scratch: &mut Scratch,
    put: impl FnMut(&Piece),
) -> Result<TableShape, GatherError> {
    if pieces.is_empty() {
        return Err(GatherError::NoPieces);
    }
    let sizes = (host_len, dev_len);
    let s = scan((pieces, 0, None), sizes, (host_written, check), put)?;
    let narrow = host_len.max(dev_len) <= u32::MAX as usize;
    finish(pieces, s, (narrow, host_written, check), scratch)
}

/// The shape of `pieces` from their one scan `s`, once the overlap check (on, and the written
/// side out of order) found them disjoint, on this thread.
fn finish(
    pieces: &[Piece],
    s: Scan,
    (narrow, host_written, check): (bool, bool, OverlapCheck),
    scratch: &mut Scratch,
) -> Result<TableShape, GatherError> {
    let one = (s.shortest == s.longest).then_some(s.longest);
    let shape = TableShape {
        rows: s.rows,
        longest: s.longest.min(SEGMENT_MAX),
        narrow,
    };
    if s.down && check == OverlapCheck::On {
        let side = |i: usize| (written(&pieces[i], host_written).0, pieces[i].1);
        overlap_check(pieces.len(), side, ((s.lo, s.hi), one), scratch, 1)?;
    }
    Ok(shape)
}

/// [`check_pieces`] writing the rows into `rows` (from the host side when `host_from`), on
/// the pool in chunks of `per` pieces when that makes more than one, the overlap check in
/// `ranges` ranges of starts ([`overlap::check_par`]): each chunk is checked
/// and its rows written at their place in parallel (row = piece while no piece is longer
/// than a segment; otherwise the rows are written again at each chunk's prefix sum of
/// rows, where they fit). `rows` holds at least a row per piece.
pub(super) fn check_rows<T: Word + Send>(
    rows: &mut [[T; 3]],
    pieces: &[Piece],
    sizes: (usize, usize),
    (host_written, check): (bool, OverlapCheck),
    (scratch, (per, ranges)): (&mut Scratch, (usize, usize)),
) -> Result<TableShape, GatherError> {
    // Narrow rows only where every offset fits them (the caller's choice of `T`).
    debug_assert!(size_of::<T>() == 8 || sizes.0.max(sizes.1) <= u32::MAX as usize);
    let host_from = !host_written;
    if pieces.len() <= per {
        if pieces.is_empty() {
            return Err(GatherError::NoPieces);
        }
        let s = scan_rows(rows, (pieces, 0, None), sizes, (host_written, check))?;
        let narrow = sizes.0.max(sizes.1) <= u32::MAX as usize;
        return finish(pieces, s, (narrow, host_written, check), scratch);
    }
    let scans = scan_chunks(rows, pieces, sizes, (host_written, check), per);
    let found = bounds(&scans);
    let counts: Vec<usize> = scans.iter().flatten().map(|s| s.rows).collect();
    let narrow = sizes.0.max(sizes.1) <= u32::MAX as usize;
    let (shape, down) = match combine(scans, narrow) {
        Ok(found) => found,
        Err((e, true)) => return Err(e),
        Err((found, false)) => {
            let again = check_pieces(pieces, sizes, (host_written, check), scratch, |_| ());
            return Err(again.err().unwrap_or(found));
        }
    };
    if down && check == OverlapCheck::On {
        let side = |i: usize| (written(&pieces[i], host_written).0, pieces[i].1);
        overlap_check(pieces.len(), side, found, scratch, ranges)?;
    }
    if shape.rows != pieces.len() && shape.rows <= rows.len() {
        write_at(&mut rows[..shape.rows], pieces, (per, &counts), host_from);
    }
    Ok(shape)
}

/// Scans `pieces` in chunks of `per` on the pool, each writing its rows at row = piece
/// index into its own part of `rows` (a chunk with pieces longer than a segment writes
/// what fits in its part).
fn scan_chunks<T: Word + Send>(
    rows: &mut [[T; 3]],
    pieces: &[Piece],
    sizes: (usize, usize),
    (host_written, check): (bool, OverlapCheck),
    per: usize,
) -> Vec<Result<Scan, GatherError>> {
    let parts = rows[..pieces.len()].chunks_mut(per);
    let items: Vec<_> = pieces.chunks(per).zip(parts).collect();
    let mut scans: Vec<Option<Result<Scan, GatherError>>> =
        (0..items.len()).map(|_| None).collect();
    let items: Vec<_> = items.into_iter().zip(scans.iter_mut()).collect();
    par::run_here_and_each(items, |k, ((chunk, part), out)| {
        let first = k * per;
        let before = first
            .checked_sub(1)
            .map(|i| written(&pieces[i], host_written));
        let s = scan_rows(part, (chunk, first, before), sizes, (host_written, check));
        *out = Some(s);
    });
    scans.into_iter().flatten().collect()
}

/// Writes the rows of `pieces` into `rows` on the pool, chunk `k` (of `per` pieces) at the
/// sum of `counts[..k]`, the rows of the chunks before it.
fn write_at<T: Word + Send>(
    mut rows: &mut [[T; 3]],
    pieces: &[Piece],
    (per, counts): (usize, &[usize]),
    host_from: bool,
) {
    let mut items = Vec::with_capacity(counts.len());
    for (chunk, &n) in pieces.chunks(per).zip(counts) {
        let (part, rest) = rows.split_at_mut(n);
        items.push((chunk, part));
        rows = rest;
    }
    par::run_here_and_each(items, |_, (chunk, part)| {
        let mut out = Rows::over(part, host_from);
        chunk.iter().for_each(|p| out.put(p));
    });
}

/// One piece's checks: not empty, inside the device buffer and inside the mapped region.
fn check_piece(
    index: usize,
    (host, len, dev): Piece,
    (host_len, dev_len): (usize, usize),
) -> Result<(), GatherError> {
    let past = |at: usize, size: usize| at.checked_add(len).is_none_or(|end| end > size);
    if len == 0 {
        Err(GatherError::EmptyPiece { index })
    } else if past(dev, dev_len) {
        Err(GatherError::OutOfBuffer {
            index,
            offset: dev,
            len,
            size: dev_len,
        })
    } else if past(host, host_len) {
        Err(GatherError::OutOfRegion {
            index,
            offset: host,
            len,
            size: host_len,
        })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
