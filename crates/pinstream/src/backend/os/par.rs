//! The one runner of parallel host work ([`try_each`], on rayon's persistent pool: no thread is
//! spawned per call, which on the H200's VM cost more than a gather batch's copies), and the
//! work over large buffers it runs, spread over the [`cores`]: fill, copy, invert, compare.
//! The gather's packing, file reads and writes (`engine::io`), making fresh pages resident
//! ([`super::PageMap`], progressive pins) and these run on this one pool. Not yet:
//! `backend::opencl::hostmem` registers chunks and faults in a caller's pages on threads of
//! its own.

use super::cores;
use rayon::prelude::*;

/// Largest piece one thread handles at a time.
pub const PIECE: usize = 16 << 20;

fn pieces(slices: Vec<&mut [u8]>) -> Vec<&mut [u8]> {
    slices
        .into_iter()
        .flat_map(|s| s.chunks_mut(PIECE))
        .collect()
}

/// Calls `f(i, item)` for every item (`i`: its index), on the pool, at most `most` (and at most
/// [`cores`]) at once: the items are dealt round-robin into that many lanes, each lane one
/// task that runs its items in order. A lane stops at its first error; the error returned
/// is one of those met. A panic in `f` reaches the caller once every lane has stopped.
pub fn try_each<T: Send, E: Send>(
    items: Vec<T>,
    most: usize,
    f: impl Fn(usize, T) -> Result<(), E> + Sync,
) -> Result<(), E> {
    let lanes = most.min(cores()).min(items.len()).max(1);
    let mut buckets: Vec<Vec<(usize, T)>> = (0..lanes).map(|_| Vec::new()).collect();
    for (i, item) in items.into_iter().enumerate() {
        buckets[i % lanes].push((i, item));
    }
    buckets
        .into_par_iter()
        .try_for_each(|lane| lane.into_iter().try_for_each(|(i, t)| f(i, t)))
}

/// As [`try_each`], for work that cannot fail.
pub(crate) fn run_each<T: Send>(items: Vec<T>, most: usize, f: impl Fn(usize, T) + Sync) {
    let done: Result<(), std::convert::Infallible> = try_each(items, most, |i, t| {
        f(i, t);
        Ok(())
    });
    let Ok(()) = done;
}

/// As [`run_each`], one item per task, with the calling thread taking part: it runs item 0
/// itself while the pool runs the others, then waits for them. For short work (tens to
/// hundreds of microseconds, a zero-copy call's checks) where a pool thread's wake-up is
/// itself microseconds to a hundred: the caller's share starts at once and one wake-up
/// fewer is waited for. A panic in `f` reaches the caller once every item has stopped.
pub(crate) fn run_here_and_each<T: Send>(items: Vec<T>, f: impl Fn(usize, T) + Sync) {
    let mut items = items.into_iter().enumerate();
    let Some((_, first)) = items.next() else {
        return;
    };
    let f = &f;
    rayon::in_place_scope(|s| {
        for (i, t) in items {
            s.spawn(move |_| f(i, t));
        }
        f(0, first);
    });
}

/// Calls `f(i, piece)` for every piece of at most [`PIECE`] bytes of the slices, in order
/// `i = 0, 1, …`, spread over the cores (a random fill seeds its generator from `i`).
pub fn for_pieces(slices: Vec<&mut [u8]>, f: impl Fn(usize, &mut [u8]) + Sync) {
    run_each(pieces(slices), usize::MAX, f);
}

/// Flips every bit: afterwards every byte differs from what it was.
pub fn invert(slices: Vec<&mut [u8]>) {
    run_each(pieces(slices), usize::MAX, |_, p| {
        p.iter_mut().for_each(|b| *b = !*b)
    });
}

/// Copies the concatenation of `src` into `dst` (lengths must match).
pub fn copy(dst: &mut [u8], src: Vec<&[u8]>) {
    let mut items = Vec::new();
    let mut rest = dst;
    for s in src {
        let (head, tail) = rest.split_at_mut(s.len());
        items.extend(head.chunks_mut(PIECE).zip(s.chunks(PIECE)));
        rest = tail;
    }
    run_each(items, usize::MAX, |_, (d, s)| d.copy_from_slice(s));
}

/// Number of bytes where the concatenation of `got` differs from `want`.
pub fn count_diff(got: Vec<&[u8]>, want: &[u8]) -> u64 {
    let mut items = Vec::new();
    let mut rest = want;
    for g in got {
        let (head, tail) = rest.split_at(g.len());
        items.extend(g.chunks(PIECE).zip(head.chunks(PIECE)));
        rest = tail;
    }
    let total = std::sync::atomic::AtomicU64::new(0);
    run_each(items, usize::MAX, |_, (a, b)| {
        if a != b {
            let n = a.iter().zip(b).filter(|(x, y)| x != y).count() as u64;
            total.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
    });
    total.into_inner()
}

/// Sets element `i` of the concatenation of `slices` (as `T`) to `f(i)`, on all cores.
/// Slice lengths must be multiples of `size_of::<T>()` and suitably aligned (regions are).
pub fn fill_with<T: bytemuck::Pod + Send>(slices: Vec<&mut [u8]>, f: impl Fn(u64) -> T + Sync) {
    let size = std::mem::size_of::<T>() as u64;
    let mut items = Vec::new();
    let mut off = 0u64;
    for p in pieces(slices) {
        let n = p.len() as u64;
        items.push((off / size, p));
        off += n;
    }
    run_each(items, usize::MAX, |_, (first, p)| {
        let typed: &mut [T] = bytemuck::cast_slice_mut(p);
        for (k, v) in typed.iter_mut().enumerate() {
            *v = f(first + k as u64);
        }
    });
}

/// Counts elements `i` of the concatenation of `slices` (as `T`) for which `bad(i, value)`.
pub fn count_bad<T: bytemuck::Pod + Sync>(
    slices: Vec<&[u8]>,
    bad: impl Fn(u64, T) -> bool + Sync,
) -> u64 {
    let size = std::mem::size_of::<T>() as u64;
    let mut items = Vec::new();
    let mut off = 0u64;
    for s in slices {
        for p in s.chunks(PIECE) {
            items.push((off / size, p));
            off += p.len() as u64;
        }
    }
    let total = std::sync::atomic::AtomicU64::new(0);
    run_each(items, usize::MAX, |_, (first, p)| {
        let typed: &[T] = bytemuck::cast_slice(p);
        let n = typed
            .iter()
            .enumerate()
            .filter(|(k, v)| bad(first + *k as u64, **v))
            .count();
        total.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    });
    total.into_inner()
}

/// Runs `f` over `0..n` split into ranges, one batch per core.
pub fn for_ranges(n: usize, f: impl Fn(std::ops::Range<usize>) + Sync) {
    let per = n.div_ceil(cores() * 4).max(1);
    let ranges: Vec<_> = (0..n.div_ceil(per))
        .map(|i| i * per..((i + 1) * per).min(n))
        .collect();
    run_each(ranges, usize::MAX, |_, r| f(r));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every item runs once with its index, on the persistent pool (no thread per call), never
    /// more than `most` at once; an error stops the run and comes back.
    #[test]
    fn try_each_runs_every_item_on_the_pool_within_its_lanes() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        use std::sync::Mutex;
        let (now, most_seen) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let seen = Mutex::new(Vec::new());
        let done: Result<(), ()> = try_each((0..64).collect(), 2, |i, item: usize| {
            assert!(rayon::current_thread_index().is_some(), "not on the pool");
            most_seen.fetch_max(now.fetch_add(1, SeqCst) + 1, SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(1));
            now.fetch_sub(1, SeqCst);
            seen.lock().unwrap().push((i, item));
            Ok(())
        });
        assert_eq!(done, Ok(()));
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        assert_eq!(seen, (0..64).map(|i| (i, i)).collect::<Vec<_>>());
        assert!(most_seen.into_inner() <= 2);
        let failed = try_each(
            vec![1, 2, 3],
            8,
            |_, x| if x == 2 { Err(x) } else { Ok(()) },
        );
        assert_eq!(failed, Err(2));
    }

    /// Every item runs once with its index: item 0 on the calling thread, the others on the
    /// pool.
    #[test]
    fn run_here_and_each_runs_item_0_on_the_caller_and_the_rest_on_the_pool() {
        use std::sync::Mutex;
        let caller = std::thread::current().id();
        let seen = Mutex::new(Vec::new());
        run_here_and_each((10..15).collect(), |i, item: usize| {
            let here = std::thread::current().id() == caller;
            assert_eq!(here, i == 0, "item {i} on the caller: {here}");
            assert_eq!(rayon::current_thread_index().is_some(), i != 0);
            seen.lock().unwrap().push((i, item));
        });
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        assert_eq!(seen, (0..5).map(|i| (i, i + 10)).collect::<Vec<_>>());
        run_here_and_each(Vec::<usize>::new(), |_, _| panic!("no items"));
    }

    #[test]
    fn fill_invert_copy_compare() {
        let mut a = vec![0u8; 3 * PIECE + 5];
        for_pieces(vec![&mut a], |i, p| p.fill(i as u8 + 1));
        assert!(a.iter().all(|&b| b != 0) && a[3 * PIECE] == 4);
        let mut b = vec![0u8; a.len()];
        let (a1, a2) = a.split_at(100);
        copy(&mut b, vec![a1, a2]);
        assert_eq!(count_diff(vec![&b], &a), 0);
        invert(vec![&mut b[..10]]);
        assert_eq!(count_diff(vec![&b], &a), 10);
        let (x, y) = b.split_at_mut(PIECE + 8);
        fill_with::<u32>(vec![x, &mut y[..PIECE]], |i| i as u32);
        let (x, y) = b.split_at(PIECE + 8);
        assert_eq!(
            count_bad::<u32>(vec![x, &y[..PIECE]], |i, v| v != i as u32),
            0
        );
        assert_eq!(
            count_bad::<u32>(vec![x], |i, v| v != i as u32 + 1),
            (PIECE as u64 + 8) / 4
        );
    }
}
