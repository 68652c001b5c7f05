//! The checks' tests: chunked against one thread, and the one-pass scan against the exact one.
use super::{check_pieces, check_rows, scan, Piece, QuickScan, SEGMENT_MAX};
use crate::backend::os::simd::{self, Loop};
use crate::gather::zerocopy::Rows;
use crate::gather::OverlapCheck;

/// A random batch of `n` pieces: each side in order or shuffled, some longer than a
/// segment when `long` (else, when `one`, every piece of one length), then `bad` random
/// faults (an empty piece, one past either side,
/// a written range moved onto another piece's, on either side).
fn batch(
    rnd: &mut impl FnMut(usize) -> usize,
    n: usize,
    (long, one): (bool, bool),
    bad: usize,
) -> Vec<Piece> {
    let stride = if long { 3 * SEGMENT_MAX } else { 64 };
    let side = |rnd: &mut dyn FnMut(usize) -> usize| {
        let mut slots: Vec<usize> = (0..n).collect();
        if rnd(2) == 0 {
            (1..n).rev().for_each(|i| slots.swap(i, rnd(i + 1)));
        }
        slots
            .into_iter()
            .map(|s| s * stride + rnd(8))
            .collect::<Vec<_>>()
    };
    let (host, dev) = (side(rnd), side(rnd));
    let one = (one && !long).then_some(stride - 8);
    let len = |rnd: &mut dyn FnMut(usize) -> usize| match long && rnd(4) == 0 {
        true => SEGMENT_MAX + 1 + rnd(SEGMENT_MAX),
        false => one.unwrap_or_else(|| 1 + rnd(stride - 8)),
    };
    let mut pieces: Vec<Piece> = (0..n).map(|i| (host[i], len(rnd), dev[i])).collect();
    for _ in 0..bad {
        let (j, k) = (rnd(n), rnd(n));
        let p = pieces[k];
        match rnd(6) {
            0 => pieces[j].1 = 0,
            1 => pieces[j].2 = n * stride + rnd(8),
            2 => pieces[j].0 = usize::MAX - rnd(3),
            3 => pieces[j].0 = p.0 + rnd(p.1.max(1)),
            4 => pieces[j].2 = p.2 + rnd(p.1.max(1)),
            _ => pieces[j.max(1)].0 = pieces[j.max(1) - 1].0 + 1,
        }
    }
    pieces
}

/// Batches split only where the thresholds say, or as the caller sets, never into more
/// chunks or ranges than the pool has threads.
#[test]
fn batches_split_by_the_thresholds_or_the_callers_threads() {
    use super::{split, FEW_THREADS_MIN_CHUNK, MANY_THREADS, MIN_CHUNK, SPLIT_FROM};
    let pool = rayon::current_num_threads();
    assert_eq!(split(SPLIT_FROM - 1, None), (SPLIT_FROM - 1, 1));
    assert_eq!(split(1 << 20, Some(1)), (1 << 20, 1));
    let want = if pool >= MANY_THREADS {
        let chunks = (SPLIT_FROM / MIN_CHUNK).min(pool);
        (SPLIT_FROM.div_ceil(chunks), chunks)
    } else {
        (SPLIT_FROM, 1)
    };
    assert_eq!(split(SPLIT_FROM, None), want);
    if pool < MANY_THREADS {
        let n = 2 * FEW_THREADS_MIN_CHUNK;
        assert_eq!(split(n - 1, None), (n - 1, 1));
        assert_eq!(split(n, None), (n.div_ceil(pool.min(2)), 1));
    }
    let n = 64 * MIN_CHUNK;
    assert_eq!(split(n, Some(3)), (n.div_ceil(pool.min(3)), pool.min(3)));
    assert_eq!(split(MIN_CHUNK * 2 - 1, Some(8)), (2047, 1));
}

/// The checks on several threads (chunks of `per` pieces, forced small) give the same
/// table and the same refusal, naming the same pieces, as on one thread.
#[test]
fn chunked_checks_match_one_thread_on_random_batches() {
    let mut rnd = crate::gather::below(0x9e3779b97f4a7c15);
    let (mut refused, mut passed) = (0, 0);
    for round in 0..400 {
        let n = 1 + rnd(3000);
        let (long, bad) = (round % 5 == 0, [0, 0, 1, 3][round % 4]);
        let pieces = batch(&mut rnd, n, (long, round % 3 == 0), bad);
        let sizes = (n * 3 * SEGMENT_MAX + 8, n * 3 * SEGMENT_MAX);
        let check = (
            rnd(2) == 0,
            [OverlapCheck::On, OverlapCheck::Vouched][rnd(2)],
        );
        let mut want_rows = vec![[0u32; 3]; 3 * n];
        let mut rows = Rows::over(&mut want_rows, !check.0);
        let want = check_pieces(&pieces, sizes, check, &mut Default::default(), |p| {
            rows.put(p)
        });
        for per in [1, 1 + rnd(50), 1 + rnd(n), n] {
            let mut got_rows = vec![[0u32; 3]; 3 * n];
            let scratch = (&mut Default::default(), (per, 1 + rnd(4)));
            let got = check_rows(&mut got_rows, &pieces, sizes, check, scratch);
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "n {n} per {per}");
            if want.is_ok() {
                assert!(got_rows == want_rows, "the table, n {n} per {per}");
            }
        }
        (refused, passed) = if want.is_ok() {
            (refused, passed + 1)
        } else {
            (refused + 1, passed)
        };
    }
    assert!(
        refused > 100 && passed > 100,
        "{refused} refused, {passed} passed"
    );
}

/// The one-pass scan accepts a chunk only where the exact scan does, with the same
/// findings and the same rows, every accepted piece inside both sides; where it falls
/// back and the exact scan accepts, a piece is longer than a segment. Sizes, offsets and
/// lengths at the edges: 0, 1, around `u32::MAX` and `usize::MAX`, ending at a side's end
/// and one byte past it.
#[test]
fn the_quick_scan_accepts_only_what_the_exact_scan_accepts() {
    let mut rnd = crate::gather::below(0x0dd_5ca1_ab1e);
    let (u32max, umax) = (u32::MAX as usize, usize::MAX);
    let sizes_pool = [0, 1, 4096, 1 << 20, u32max, u32max + 1, umax - 1, umax];
    // No length near `usize::MAX`: where a side is that large, such a piece passes the
    // bounds and `scan` would write its 2^48 rows; offsets near it test the overflow.
    let lens = [0, 1, 7, 4096, SEGMENT_MAX, SEGMENT_MAX + 1, 3 * SEGMENT_MAX];
    let (mut accepted, mut fell_back) = (0, 0);
    for _ in 0..40_000 {
        let sizes = (sizes_pool[rnd(8)], sizes_pool[rnd(8)]);
        // Mostly a few pieces, for the edges; at times enough for the vector loop's body.
        let n = 1 + [rnd(4), rnd(4), rnd(4), rnd(64)][rnd(4)];
        let at = |rnd: &mut dyn FnMut(usize) -> usize, size: usize, len: usize| match rnd(8) {
            0 => 0,
            1 => size,
            2 => size.saturating_sub(len),
            3 => size.saturating_sub(len).wrapping_add(1),
            4 => umax - rnd(3),
            5 => u32max + rnd(3) - 1,
            _ => rnd(size.clamp(1, 1 << 16)),
        };
        let pieces: Vec<Piece> = (0..n)
            .map(|_| {
                let len = match rnd(3) {
                    0 => lens[rnd(lens.len())],
                    _ => 1 + rnd(4096),
                };
                (at(&mut rnd, sizes.0, len), len, at(&mut rnd, sizes.1, len))
            })
            .collect();
        let before = match rnd(3) {
            0 => None,
            1 => Some((rnd(1 << 16), rnd(1 << 17))),
            _ => Some((umax, umax)),
        };
        let check = (
            rnd(2) == 0,
            [OverlapCheck::On, OverlapCheck::Vouched][rnd(2)],
        );
        let (mut quick, mut exact) = (vec![[0u64; 3]; n], vec![[0u64; 3]; n]);
        let q = QuickScan(&mut quick, (&pieces, before), sizes, check).run();
        // The same findings and rows compiled for the widest unit (AVX-512, where there).
        let mut wide = vec![[0u64; 3]; n];
        let w = simd::widest(QuickScan(&mut wide, (&pieces, before), sizes, check));
        assert_eq!(format!("{w:?}"), format!("{q:?}"), "{pieces:?} {sizes:?}");
        assert!(w.is_none() || wide == quick, "{pieces:?}");
        let mut rows = Rows::over(&mut exact, !check.0);
        let e = scan((&pieces, 3, before), sizes, check, |p| rows.put(p));
        match (q, e) {
            (Some(q), Ok(e)) => {
                accepted += 1;
                assert_eq!(format!("{q:?}"), format!("{e:?}"), "{pieces:?} {sizes:?}");
                assert_eq!(quick, exact, "{pieces:?}");
                let inside = |at: usize, len: usize, size: usize| {
                    len > 0 && at.checked_add(len).is_some_and(|end| end <= size)
                };
                assert!(pieces
                    .iter()
                    .all(|&(h, l, d)| inside(h, l, sizes.0) && inside(d, l, sizes.1)));
            }
            (Some(_), Err(e)) => {
                panic!("accepted what the exact scan refuses ({e:?}): {pieces:?} {sizes:?}")
            }
            (None, Ok(_)) => {
                fell_back += 1;
                // Or a piece starts inside the one before it on the written side, after the
                // written side went down: an overlap, which the overlap check then refuses.
                let side = |p: &Piece| if check.0 { p.0 } else { p.2 };
                let inside = std::iter::once(before.unwrap_or((0, 0)))
                    .chain(pieces.iter().map(|p| (side(p), side(p).wrapping_add(p.1))))
                    .zip(pieces.iter().map(side))
                    .any(|((at, end), next)| next >= at && next < end);
                assert!(
                    pieces.iter().any(|p| p.1 > SEGMENT_MAX)
                        || (check.1 == OverlapCheck::On && inside),
                    "{pieces:?} {sizes:?}"
                );
            }
            (None, Err(_)) => {}
        }
    }
    assert!(
        accepted > 1000 && fell_back > 100,
        "{accepted} accepted, {fell_back} fell back"
    );
}
