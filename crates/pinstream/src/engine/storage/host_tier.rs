//! The host tier of passes from storage: host memory that keeps whole blocks across passes,
//! so that only the rest is read from storage after the first pass.
//!
//! It holds the first [`HostTier::blocks`] blocks of each input: a read-only input's as the
//! first pass reads them from its file; in place, the data's as each pass but the last
//! computes them (the next pass reads them from here, and they are not written to the pass's
//! file). The last pass writes every block of the output, as a single pass does.

use crate::engine::job::HostMemory;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// One block's place in the tier (its slices of the caller's memory).
type Place<'m> = Mutex<Vec<&'m mut [u8]>>;

/// Whole blocks of every input kept in host memory across passes.
pub(super) struct HostTier<'m> {
    /// `[input][block]`.
    places: Vec<Vec<Place<'m>>>,
    /// The first input is the data, processed in place.
    in_place: bool,
    /// The pass running now (0: the first) and whether it is the last.
    pub(super) pass: usize,
    pub(super) last: bool,
    /// Bytes served from the tier in the pass running now.
    pub(super) served: AtomicU64,
}

/// The tier's side of a pass, for the storage's readers and writer.
pub(super) trait Tier: Sync {
    /// Fills `bufs` with block `b` of input `i` from host memory where the tier holds it
    /// for this pass: true if it did (no file read needed).
    fn read(&self, i: usize, b: usize, bufs: &mut [&mut [u8]]) -> bool;
    /// Block `b` of input `i`, just read from its file: kept where the tier holds it.
    fn keep_read(&self, i: usize, b: usize, bufs: &[&mut [u8]]);
    /// Result block `b`: kept where the next pass reads it from here; true if so (then it
    /// needs no write to the pass's file).
    fn keep_result(&self, b: usize, bufs: &[&[u8]]) -> bool;
}

impl<'m> HostTier<'m> {
    /// A tier over `memory` for `inputs` inputs of `blocks` blocks of `unit` bytes (the last
    /// `tail` bytes long): as many leading blocks of each as `memory` holds for all inputs,
    /// none from `below` on (the VRAM tier's).
    pub(super) fn new(
        memory: &'m mut dyn HostMemory,
        (inputs, in_place): (usize, bool),
        (blocks, unit, tail): (usize, usize, usize),
        below: usize,
    ) -> Self {
        let per_input = memory.len() / inputs.max(1);
        let size = |b: usize| if b + 1 == blocks { tail } else { unit };
        let held = (0..blocks)
            .scan(0usize, |sum, b| {
                *sum += size(b);
                (*sum <= per_input).then_some(b)
            })
            .count()
            .min(below);
        let total = memory.len();
        let mut slices = memory.slices_mut(0..total).unwrap_or_default();
        let mut places = Vec::with_capacity(inputs);
        for _ in 0..inputs {
            let input = (0..held).map(|b| Mutex::new(carve(&mut slices, size(b))));
            places.push(input.collect());
            carve(&mut slices, per_input - (0..held).map(size).sum::<usize>());
        }
        HostTier {
            places,
            in_place,
            pass: 0,
            last: false,
            served: AtomicU64::new(0),
        }
    }

    fn place(&self, i: usize, b: usize) -> Option<std::sync::MutexGuard<'_, Vec<&'m mut [u8]>>> {
        Some(crate::sync::lock(self.places.get(i)?.get(b)?))
    }
}

impl Tier for HostTier<'_> {
    fn read(&self, i: usize, b: usize, bufs: &mut [&mut [u8]]) -> bool {
        if self.pass == 0 {
            return false;
        }
        let Some(place) = self.place(i, b) else {
            return false;
        };
        let from: Vec<&[u8]> = place.iter().map(|s| &**s).collect();
        let n = copy(&from, bufs);
        self.served.fetch_add(n as u64, Ordering::Relaxed);
        true
    }

    fn keep_read(&self, i: usize, b: usize, bufs: &[&mut [u8]]) {
        if self.pass > 0 || (self.in_place && i == 0) {
            return;
        }
        if let Some(mut place) = self.place(i, b) {
            let from: Vec<&[u8]> = bufs.iter().map(|s| &**s).collect();
            copy(&from, &mut place);
        }
    }

    fn keep_result(&self, b: usize, bufs: &[&[u8]]) -> bool {
        if !self.in_place || self.last {
            return false;
        }
        let Some(mut place) = self.place(0, b) else {
            return false;
        };
        copy(bufs, &mut place);
        true
    }
}

/// The first `n` bytes of `slices`, taken off their front.
fn carve<'m>(slices: &mut Vec<&'m mut [u8]>, mut n: usize) -> Vec<&'m mut [u8]> {
    let mut out = Vec::new();
    while n > 0 && !slices.is_empty() {
        let s = slices.remove(0);
        if s.len() > n {
            let (head, rest) = s.split_at_mut(n);
            slices.insert(0, rest);
            out.push(head);
            n = 0;
        } else {
            n -= s.len();
            out.push(s);
        }
    }
    out
}

/// Copies the bytes of `from` over those of `to`, in order, as far as both go; the bytes
/// copied.
fn copy(from: &[&[u8]], to: &mut [&mut [u8]]) -> usize {
    let mut src = from.iter().flat_map(|s| s.chunks(1 << 16));
    let (mut done, mut pending): (usize, &[u8]) = (0, &[]);
    for dst in to.iter_mut() {
        let mut at = 0;
        while at < dst.len() {
            if pending.is_empty() {
                match src.next() {
                    Some(s) => pending = s,
                    None => return done,
                }
            }
            let n = pending.len().min(dst.len() - at);
            dst[at..at + n].copy_from_slice(&pending[..n]);
            (at, pending, done) = (at + n, &pending[n..], done + n);
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::{carve, copy};

    #[test]
    fn copies_across_slices_of_other_sizes() {
        let (a, b) = ([1u8, 2, 3], [4u8, 5]);
        let mut out = [0u8; 5];
        let (x, y) = out.split_at_mut(1);
        assert_eq!(copy(&[&a, &b], &mut [x, y]), 5);
        assert_eq!(out, [1, 2, 3, 4, 5]);
        let mut m = [0u8; 10];
        let (p, q) = m.split_at_mut(4);
        let mut slices = vec![p, q];
        let first = carve(&mut slices, 6);
        assert_eq!(first.iter().map(|s| s.len()).collect::<Vec<_>>(), [4, 2]);
        assert_eq!(slices.iter().map(|s| s.len()).sum::<usize>(), 4);
    }
}
