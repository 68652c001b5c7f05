//! The overlap check of a zero-copy call's written side when its pieces do not come in
//! order: linear in the pieces, with no sort of them all. Each span `(start, length)` goes
//! into a bucket of starts (a power of two wide, one to two buckets per span, so a shift and
//! not a division picks it), chained to the others there by `u32` indexes; then the buckets
//! are walked in order, each bucket's few spans sorted among themselves, keeping the furthest
//! end reached so far: a span that starts before it overlaps the span that reached it. On the
//! project's 2-core test host (examples/zero_copy_timeline, least of 5 × 15 calls, checked
//! minus vouched), 65,536 pieces cost ~0.65 ms against ~2 ms for the counting sort of every
//! span it replaces (two divisions per span, a prefix sum, a scatter), and 4,096 pieces
//! ~20–50 µs against ~70. Pieces of one length, the common batch, are first tried by
//! [`DisjointEqual`], a pass of cells with at most one start each and no sort at all: on
//! the same host, least of 200, 4,096 shuffled spans of 4 KiB in 8 µs against the buckets'
//! 16, and 65,536 of 256 B in 182 µs against 284.

use super::GatherError;
use crate::backend::os::{par, simd};

/// No span: the end of a chain, an empty bucket.
const NONE: u32 = u32::MAX;

/// Memory the overlap check reuses from call to call: fresh allocations of a large call's
/// size cost page faults each time (the allocator gives them back to the system).
#[derive(Default)]
pub(super) struct Scratch {
    /// The buckets of the check on one thread.
    one: Buckets,
    /// Per range of starts of the check on several threads, its buckets and a copy of its
    /// spans `(start, length, piece)`: walking a compact copy touches 1/T of the memory
    /// that indexes into every span would.
    ranges: Vec<Range>,
    /// [`DisjointEqual`]'s cells: the start of the span in each, or [`EMPTY`].
    cells: Vec<usize>,
}

/// A cell of [`DisjointEqual`] that no span starts in.
const EMPTY: usize = usize::MAX;

/// A range's copy of its spans: `(start, length, piece)`.
type Spans = Vec<(usize, usize, usize)>;

/// The memory of one range of the check on several threads.
#[derive(Default)]
struct Range {
    buckets: Buckets,
    /// The spans starting in the range.
    spans: Spans,
    /// [`WINDOW`] spans being kept or not, without a branch.
    window: Spans,
}

/// Spans a range's pass over them sorts at a time (96 KiB): a range's memory stays its
/// own spans' and this, not every span's.
const WINDOW: usize = 4096;

/// The buckets of one walk over spans in order of start.
#[derive(Default)]
struct Buckets {
    /// Per bucket, the last span put there (its index), or [`NONE`]. `u32`s: half the
    /// memory to clear and to jump about in (more spans than that are sorted instead).
    heads: Vec<u32>,
    /// Per span, the span put in its bucket before it, or [`NONE`].
    next: Vec<u32>,
    /// The spans of one crowded bucket, being put in order.
    group: Vec<(usize, usize)>,
}

/// The furthest end reached by the spans visited so far, and the span that reached it.
#[derive(Clone, Copy)]
struct Reach {
    end: usize,
    index: usize,
}

/// No span visited yet.
const NO_REACH: Reach = Reach {
    end: 0,
    index: usize::MAX,
};

/// Whether `n` spans of one length `len`, span `i` starting at `start(i)` in `lo..=hi`
/// (ends not past `usize::MAX`; the fields in that order, the scratch last), are sure to be disjoint: two passes with no sort and no
/// division. Each start goes into a cell of `2^k` bytes, the largest power of two not above
/// `len`: two starts in one cell are less than `len` apart (an overlap), and a span can reach
/// only the next two cells. `false`: two spans overlap, or the starts are spread too thinly
/// for cells (more than 8 per span); [`check`] then gives the answer and names the pair.
/// Spans of one length are the common batch (pages, rows, blocks), and the general check
/// costs several times more per span. A loop for [`simd::widest`], which compiles it for
/// the widest vector unit.
pub(super) struct DisjointEqual<'a, S>(
    pub usize,
    pub S,
    pub usize,
    pub (usize, usize),
    pub &'a mut Scratch,
);

impl<S: Fn(usize) -> usize> simd::Loop for DisjointEqual<'_, S> {
    type Out = bool;
    #[inline(always)]
    fn run(self) -> bool {
        let DisjointEqual(n, start, len, (lo, hi), scratch) = self;
        let Some(shift) = len.checked_ilog2() else {
            return false;
        };
        let count = ((hi - lo) >> shift).saturating_add(3);
        if count > n.saturating_mul(8).saturating_add(64) {
            return false;
        }
        let cells = &mut scratch.cells;
        cells.clear();
        cells.resize(count, EMPTY);
        for i in 0..n {
            let at = start(i);
            let cell = &mut cells[(at - lo) >> shift];
            if *cell != EMPTY {
                return false;
            }
            *cell = at;
        }
        // A start's end is not past `usize::MAX` (the caller's bounds), so `at + len` holds for
        // every start; an empty cell's wraps, and is not looked at. Each cell against the next
        // two, with no branch per cell: the loop vectorises where it is given the unit.
        let (at, next, after) = (&cells[..count - 2], &cells[1..count - 1], &cells[2..]);
        let mut clear = true;
        for ((&at, &next), &after) in at.iter().zip(next).zip(after) {
            let end = at.wrapping_add(len);
            let past = |c: usize| (c == EMPTY) | (c >= end);
            clear &= (at == EMPTY) | (past(next) & past(after));
        }
        clear
    }
}

/// Checks that the `n` spans `span(i) = (start, length)` are disjoint, their starts lying in
/// `lo..=hi`, their lengths not 0 and their ends not past `usize::MAX`; refused as
/// [`GatherError::Overlap`] with the two pieces' indexes in order.
pub(super) fn check(
    n: usize,
    span: impl Fn(usize) -> (usize, usize),
    range: (usize, usize),
    scratch: &mut Scratch,
) -> Result<(), GatherError> {
    let mut reach = NO_REACH;
    walk((n, &span, |k| k), range, &mut scratch.one, &mut reach)
}

/// Visits the spans `span(k)`, `k` in `0..n`, in order of start (their starts in
/// `lo..=hi`; equal starts in order of `k`), carrying `reach` on; span `k` is piece
/// `global(k)`, rising with `k`.
fn walk(
    (n, span, global): (
        usize,
        impl Fn(usize) -> (usize, usize),
        impl Fn(usize) -> usize,
    ),
    (lo, hi): (usize, usize),
    buckets: &mut Buckets,
    reach: &mut Reach,
) -> Result<(), GatherError> {
    let Buckets { heads, next, group } = buckets;
    let spans = (&span, &global);
    if n >= NONE as usize {
        return in_order_of_start(0..n, spans, group, reach);
    }
    let shift = bucket_shift(hi - lo, n);
    heads.clear();
    heads.resize(((hi - lo) >> shift) + 1, NONE);
    next.clear();
    for k in 0..n {
        let b = (span(k).0 - lo) >> shift;
        next.push(heads[b]);
        heads[b] = k as u32;
    }
    for &head in heads.iter().filter(|&&h| h != NONE) {
        let at = head as usize;
        if next[at] == NONE {
            visit(global(at), span(at), reach)?;
            continue;
        }
        let chain = std::iter::successors(Some(at), |&k| {
            let n = next[k];
            (n != NONE).then_some(n as usize)
        });
        in_order_of_start(chain, spans, group, reach)?;
    }
    Ok(())
}

/// [`check`] on `ranges` threads of the pool ([`par`]), when more than one: the starts
/// `lo..=hi` are cut into as many address ranges, each thread walks the spans starting in
/// its range, and the ranges are joined in order, the reach carried across them: the same
/// refusal, naming the same two pieces, as [`check`].
pub(super) fn check_par(
    n: usize,
    span: impl Fn(usize) -> (usize, usize) + Sync,
    (lo, hi): (usize, usize),
    scratch: &mut Scratch,
    ranges: usize,
) -> Result<(), GatherError> {
    if ranges <= 1 || n >= NONE as usize {
        return check(n, span, (lo, hi), scratch);
    }
    let width = (hi - lo) / ranges + 1;
    scratch.ranges.resize_with(ranges, Default::default);
    let mut parts: Vec<Option<Part>> = (0..ranges).map(|_| None).collect();
    let items: Vec<_> = scratch.ranges.iter_mut().zip(parts.iter_mut()).collect();
    par::run_here_and_each(items, |t, (range, out)| {
        let cut = (t * width, (t + 1 < ranges).then(|| (t + 1) * width));
        *out = Some(walk_range((n, lo, cut), &span, range));
    });
    join(parts.into_iter().flatten())
}

/// One range's walk: its first span in order of start `(start, index)`, if any, and the
/// reach after its spans, or the overlap found among them.
struct Part {
    first: Option<(usize, usize)>,
    walked: Result<Reach, GatherError>,
}

/// Walks the spans of `0..n` whose starts lie `from..to` past `lo` (to the end, with no
/// `to`), from no reach.
fn walk_range(
    (n, lo, (from, to)): (usize, usize, (usize, Option<usize>)),
    span: impl Fn(usize) -> (usize, usize),
    Range {
        buckets,
        spans,
        window,
    }: &mut Range,
) -> Part {
    // Every span is written at `window[kept]` and kept when in range: no branch to
    // mispredict on shuffled starts.
    let last = to.map_or(usize::MAX, |to| to - 1);
    let (mut first, mut hi) = ((usize::MAX, usize::MAX), 0);
    spans.clear();
    window.resize(WINDOW, (0, 0, 0));
    for block in (0..n).step_by(WINDOW) {
        let mut kept = 0;
        for i in block..(block + WINDOW).min(n) {
            let (start, len) = span(i);
            let off = start - lo;
            let keep = (off >= from) & (off <= last);
            window[kept] = (start, len, i);
            kept += usize::from(keep);
            let earlier = keep & (start < first.0);
            first = if earlier { (start, i) } else { first };
            hi = if keep { hi.max(start) } else { hi };
        }
        spans.extend_from_slice(&window[..kept]);
    }
    let kept = spans.len();
    let first = (kept > 0).then_some(first);
    let mut reach = NO_REACH;
    let range = (first.map_or(0, |f| f.0), hi);
    let local = &spans[..];
    let spans = (
        kept,
        |k: usize| (local[k].0, local[k].1),
        |k: usize| local[k].2,
    );
    let walked = walk(spans, range, buckets, &mut reach);
    Part {
        first,
        walked: walked.map(|()| reach),
    }
}

/// The ranges' walks joined in order of start: a range's first span must start at or past
/// the furthest end reached before it (as [`visit`] does), and the reach carries on.
fn join(parts: impl Iterator<Item = Part>) -> Result<(), GatherError> {
    let mut carried = NO_REACH;
    for part in parts {
        let Some((start, index)) = part.first else {
            continue;
        };
        if carried.index != usize::MAX && start < carried.end {
            return Err(GatherError::Overlap {
                first: carried.index.min(index),
                second: carried.index.max(index),
            });
        }
        // The range's first span ends past `carried` (it starts at or past its end and is
        // not empty), so the range's reach is the furthest.
        carried = part.walked?;
    }
    Ok(())
}

/// Visits the spans `members` (as [`walk`] numbers them) in order of start (sorted in
/// `group`).
fn in_order_of_start(
    members: impl Iterator<Item = usize>,
    (span, global): (impl Fn(usize) -> (usize, usize), impl Fn(usize) -> usize),
    group: &mut Vec<(usize, usize)>,
    reach: &mut Reach,
) -> Result<(), GatherError> {
    group.clear();
    group.extend(members.map(|k| (span(k).0, k)));
    group.sort_unstable();
    group
        .iter()
        .try_for_each(|&(_, k)| visit(global(k), span(k), reach))
}

/// The largest shift that puts starts `range` apart into at least `n` buckets (at most
/// `2n`), so that spread spans mostly have a bucket each and need no sort.
fn bucket_shift(range: usize, n: usize) -> u32 {
    (range / n.max(1)).checked_ilog2().unwrap_or(0)
}

/// Visits span `index`, the next in order of start: refused if it starts before `reach`.
fn visit(index: usize, (start, len): (usize, usize), reach: &mut Reach) -> Result<(), GatherError> {
    if reach.index != usize::MAX && start < reach.end {
        return Err(GatherError::Overlap {
            first: reach.index.min(index),
            second: reach.index.max(index),
        });
    }
    if reach.index == usize::MAX || start + len > reach.end {
        *reach = Reach {
            end: start + len,
            index,
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{check, check_par, Scratch};
    use crate::gather::GatherError;

    /// Whether spans `a` and `b` share a byte.
    fn overlap(a: (usize, usize), b: (usize, usize)) -> bool {
        a.0 < b.0 + b.1 && b.0 < a.0 + a.1
    }

    /// Spans of one length found disjoint by cells exactly when they are (every pair
    /// compared): dense, spread, touching, overlapping by one byte, lengths that are powers
    /// of two and lengths that are not; too thin a spread is left to the general check.
    #[test]
    fn equal_spans_are_disjoint_by_cells_exactly_when_they_are() {
        use super::{simd, DisjointEqual};
        use crate::backend::os::simd::Loop;
        let mut rnd = crate::gather::below(0x51afd7ed558ccd);
        let mut scratch = Scratch::default();
        let (mut yes, mut no) = (0, 0);
        for round in 0..3000 {
            let len = [1, 2, 3, 7, 8, 9, 64, 100, 4096, 4097][round % 10];
            let n = 1 + rnd(200);
            let gap = [0, 1, len / 2 + 1, len][rnd(4)];
            let mut starts: Vec<usize> = (0..n).map(|i| i * (len + gap) + 5).collect();
            (1..n).rev().for_each(|i| starts.swap(i, rnd(i + 1)));
            if rnd(3) == 0 {
                let (j, k) = (rnd(n), rnd(n));
                starts[j] = starts[k] + rnd(len + 1); // maybe onto piece k, maybe just past
            }
            let lo = *starts.iter().min().unwrap();
            let hi = *starts.iter().max().unwrap();
            let spans = |i: usize| (starts[i], len);
            let any = (0..n).any(|i| (0..i).any(|j| overlap(spans(i), spans(j))));
            let sure = DisjointEqual(n, |i| starts[i], len, (lo, hi), &mut scratch).run();
            // The same answer compiled for the widest unit (AVX-512, where this CPU has it).
            let wide = DisjointEqual(n, |i| starts[i], len, (lo, hi), &mut scratch);
            assert_eq!(simd::widest(wide), sure, "{starts:?} {len}");
            assert!(!(sure && any), "len {len} gap {gap}: an overlap missed");
            assert_eq!(sure, !any, "len {len} gap {gap}, {n} spans");
            (yes, no) = if sure { (yes + 1, no) } else { (yes, no + 1) };
        }
        assert!(yes > 500 && no > 500, "{yes} disjoint, {no} not");
        // Spread over more than 8 cells a span: not decided by cells.
        let far = [0, 1 << 20];
        assert!(!DisjointEqual(2, |i| far[i], 16, (0, 1 << 20), &mut scratch).run());
    }

    /// The check against every pair compared, on random spans: spread, crowded into few
    /// starts, with a far start crowding the rest into one bucket, disjoint or not.
    #[test]
    fn finds_an_overlap_exactly_when_two_spans_share_a_byte() {
        let mut rnd = crate::gather::below(0x2545f4914f6cdd1d);
        let mut scratch = Scratch::default();
        for (n, range, longest) in [(1, 1, 1), (2, 1, 1), (300, 1 << 30, 4), (300, 3000, 9)]
            .into_iter()
            .chain([(200, 50, 1), (400, 1 << 20, 4096), (500, 500 * 16, 16)])
        {
            for far in [false, true] {
                let mut spans: Vec<(usize, usize)> =
                    (0..n).map(|_| (rnd(range), 1 + rnd(longest))).collect();
                if far {
                    spans.push((usize::MAX / 2, 3));
                }
                let lo = spans.iter().map(|s| s.0).min().unwrap();
                let hi = spans.iter().map(|s| s.0).max().unwrap();
                let got = check(spans.len(), |i| spans[i], (lo, hi), &mut scratch);
                for ranges in [2, 3, 16] {
                    let par = check_par(spans.len(), |i| spans[i], (lo, hi), &mut scratch, ranges);
                    assert_eq!(format!("{par:?}"), format!("{got:?}"), "{ranges} ranges");
                }
                let any = (0..spans.len()).any(|i| (0..i).any(|j| overlap(spans[i], spans[j])));
                match got {
                    Ok(()) => assert!(!any, "{n} spans below {range}: an overlap missed"),
                    Err(GatherError::Overlap { first, second }) => {
                        assert!(first < second, "{first} {second}");
                        assert!(overlap(spans[first], spans[second]), "{n} below {range}");
                    }
                    Err(e) => panic!("{e:?}"),
                }
            }
        }
    }

    #[test]
    fn disjoint_shuffled_spans_pass_and_one_moved_byte_is_found() {
        let n = 40_000;
        let mut spans: Vec<(usize, usize)> = (0..n).map(|i| ((i * 7919) % n * 16, 16)).collect();
        let hi = (n - 1) * 16;
        let mut scratch = Scratch::default();
        // One range, and ranges that each take spans from many windows of 4,096.
        let each = |spans: &[(usize, usize)], scratch: &mut Scratch| {
            let one = check(n, |i| spans[i], (0, hi), scratch);
            let par = [2, 5].map(|r| check_par(n, |i| spans[i], (0, hi), scratch, r));
            par.into_iter().fold(one, |one, par| {
                assert_eq!(format!("{par:?}"), format!("{one:?}"));
                one
            })
        };
        assert!(each(&spans, &mut scratch).is_ok());
        // A moved span in every window: each range must keep every span of its own.
        for b in (0..n).step_by(1009) {
            let mut moved = spans.clone();
            moved[b].0 = spans[(b * 31 + 7) % n].0 + 15;
            assert!(each(&moved, &mut scratch).is_err(), "span {b} moved");
        }
        let (a, b) = (spans[123].0, 30_000);
        spans[b].0 = a + 15;
        let e = each(&spans, &mut scratch).unwrap_err();
        assert!(
            matches!(
                e,
                GatherError::Overlap {
                    first: 123,
                    second: 30_000
                }
            ),
            "{e:?}"
        );
    }
}
