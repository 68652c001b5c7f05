//! The arrays of a `stream` call, lent to the engine: each is looked up among the ranges
//! pinstream pins ([`registry::find`]), which keeps its region alive for the call, and lent
//! as [`Pieces`], the engine's [`HostMemory`] over the array's own bytes, split where the
//! region's chunks (driver allocations or registrations) meet.
//!
//! Arrays the run writes (in place, or the output) must not overlap any other array of the
//! call: the run holds them as `&mut [u8]`, and a device would write memory another block
//! reads.

use crate::export::Export;
use crate::register::refused;
use crate::registry::{self, Held};
use pinstream::engine::job::{aliased, HostMemory, JobRange, OutOfRange};
use pinstream::host::HostError;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::ops::Range;

/// An array of the call: its held export, the region that pins it, and where it lies there.
pub struct Lent {
    /// The parameter that passed it (`inout`, `input[1]`, `resident['x']`), for messages.
    pub name: String,
    /// The devices write it (in place, or the output).
    pub writes: bool,
    // Held so that the array stays alive and unresized during the call.
    export: Export,
    held: Held,
    /// The array's bytes, as addresses.
    span: Range<usize>,
    /// The array's first byte in its region.
    offset: usize,
}

impl Lent {
    /// Looks `array` up among the ranges pinstream pins; `name` is the parameter that passed
    /// it. Refused: memory pinstream does not pin (with the fix: `pinstream.empty`, or
    /// `pinstream.register`), non-contiguous views, zero bytes, and read-only arrays the run
    /// would write.
    pub fn find(array: &Bound<'_, PyAny>, name: String, writes: bool) -> PyResult<Lent> {
        let export = Export::get(array)?;
        if !export.is_c_contiguous() {
            return Err(PyValueError::new_err(format!("stream: {name} is not C-contiguous: pass a contiguous array (numpy.ascontiguousarray copies a view into new memory, which then needs pinning too)")));
        }
        if writes && export.readonly() {
            return Err(PyValueError::new_err(format!(
                "stream: {name} is read-only, and the run writes it: pass a writable array"
            )));
        }
        let span = export.span(&format!("stream: {name}"))?;
        if span.is_empty() {
            return Err(PyValueError::new_err(format!(
                "stream: {name} has no bytes: nothing to stream; pass an array of at least one element"
            )));
        }
        let (held, range) =
            registry::find(span.clone()).map_err(|e| refused(("stream", &name), &span, e))?;
        Ok(Lent {
            name,
            writes,
            offset: span.start - range.start,
            export,
            held,
            span,
        })
    }

    /// The array's length in bytes.
    pub fn len(&self) -> usize {
        self.span.len()
    }

    /// True for no bytes (never: [`Self::find`] refuses them).
    pub fn is_empty(&self) -> bool {
        self.span.is_empty()
    }

    /// The array's bytes, for reading: the region's own slices, which wait for the
    /// transfers in flight on it (a `gather` or `scatter` kernel) first.
    pub fn read(&self) -> Result<Pieces<'_>, HostError> {
        let slices = self
            .held
            .region()
            .slices(self.offset..self.offset + self.len())?;
        Ok(Pieces::Read(slices))
    }

    /// The array's bytes, for the devices to write, once the transfers in flight on its
    /// region are complete; split where the region's chunks meet.
    pub fn write(&mut self) -> Result<Pieces<'_>, HostError> {
        let region = self.held.region();
        region.wait().map_err(|e| HostError::Backend(e.into()))?;
        let (start, len) = (self.offset, self.len());
        let cuts: Vec<usize> = region
            .chunk_ranges()
            .into_iter()
            .map(|c| c.end)
            .filter(|&end| end > start && end < start + len)
            .map(|end| end - start)
            .collect();
        debug_assert!(self.writes && !self.export.readonly());
        // SAFETY: the export (`self.export`, held as long as the slice's borrow of `self`)
        // keeps the array's `len` bytes at `span.start` alive and in place, and the region
        // (`self.held`) keeps them pinned; the array is writable (`find`). No other slice of
        // the call aliases it (`check_disjoint`). Rust code never reads or writes through it:
        // only the devices, by DMA, during the run. Python code on another thread may still
        // touch the array, which the documented contract of `pinstream.stream` forbids, as a
        // CUDA copy's host memory must be left alone while it runs.
        let all = unsafe { std::slice::from_raw_parts_mut(self.span.start as *mut u8, len) };
        let mut pieces = Vec::with_capacity(cuts.len() + 1);
        let (mut rest, mut at) = (all, 0);
        for cut in cuts {
            let (head, tail) = rest.split_at_mut(cut - at);
            pieces.push(head);
            (rest, at) = (tail, cut);
        }
        pieces.push(rest);
        Ok(Pieces::Write(pieces))
    }
}

/// Refuses a call whose written arrays overlap another of its arrays ([`aliased`]).
pub fn check_disjoint(arrays: &[&Lent]) -> PyResult<()> {
    let ranges: Vec<JobRange> = (arrays.iter())
        .map(|a| JobRange {
            span: a.span.clone(),
            writes: a.writes,
        })
        .collect();
    match aliased(&ranges) {
        Some((w, other)) => {
            let (w, other) = (arrays[w], arrays[other]);
            Err(PyValueError::new_err(format!(
                "stream: {} and {} share memory, and the run writes {}: pass inout= alone to stream an array in place, or an output array of its own",
                w.name, other.name, w.name
            )))
        }
        None => Ok(()),
    }
}

/// An array's bytes lent to a run, one slice per chunk of its region.
pub enum Pieces<'a> {
    /// Read by the devices (inputs, residents).
    Read(Vec<&'a [u8]>),
    /// Written by the devices (in place, or the output).
    Write(Vec<&'a mut [u8]>),
}

/// Where `range` meets each of the pieces of `lens` bytes in turn: (piece, range in it).
fn walk(lens: impl Iterator<Item = usize>, range: &Range<usize>) -> Vec<(usize, Range<usize>)> {
    let mut at = 0;
    let mut out = Vec::new();
    for (i, n) in lens.enumerate() {
        let (lo, hi) = (range.start.max(at), range.end.min(at + n));
        if lo < hi {
            out.push((i, lo - at..hi - at));
        }
        at += n;
    }
    out
}

impl HostMemory for Pieces<'_> {
    fn len(&self) -> usize {
        match self {
            Pieces::Read(p) => p.iter().map(|s| s.len()).sum(),
            Pieces::Write(p) => p.iter().map(|s| s.len()).sum(),
        }
    }

    fn slices(&self, range: Range<usize>) -> Result<Vec<&[u8]>, OutOfRange> {
        let len = HostMemory::len(self);
        if range.start > range.end || range.end > len {
            return Err(OutOfRange { range, len });
        }
        let piece = |i: usize| -> &[u8] {
            match self {
                Pieces::Read(p) => p[i],
                Pieces::Write(p) => &*p[i],
            }
        };
        let lens: Vec<usize> = (0..self.count()).map(|i| piece(i).len()).collect();
        Ok(walk(lens.into_iter(), &range)
            .into_iter()
            .map(|(i, r)| &piece(i)[r])
            .collect())
    }

    fn slices_mut(&mut self, range: Range<usize>) -> Result<Vec<&mut [u8]>, OutOfRange> {
        let len = HostMemory::len(self);
        let Pieces::Write(pieces) = self else {
            // Never asked: read pieces go to the job's inputs and residents only.
            return Err(OutOfRange { range, len: 0 });
        };
        if range.start > range.end || range.end > len {
            return Err(OutOfRange { range, len });
        }
        let parts = walk(pieces.iter().map(|s| s.len()), &range);
        let mut out = Vec::with_capacity(parts.len());
        let mut parts = parts.into_iter().peekable();
        for (i, piece) in pieces.iter_mut().enumerate() {
            if let Some((_, r)) = parts.next_if(|(j, _)| *j == i) {
                out.push(&mut piece[r]);
            }
        }
        Ok(out)
    }
}

impl Pieces<'_> {
    fn count(&self) -> usize {
        match self {
            Pieces::Read(p) => p.len(),
            Pieces::Write(p) => p.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_cut_where_the_pieces_meet() {
        let (mut a, mut b) = ([1u8; 4], [2u8; 3]);
        let mut p = Pieces::Write(vec![&mut a, &mut b]);
        assert_eq!(HostMemory::len(&p), 7);
        let s = p.slices(2..6).unwrap();
        assert_eq!(s, vec![&[1u8, 1][..], &[2u8, 2][..]]);
        let m = p.slices_mut(4..7).unwrap();
        assert_eq!(m.len(), 1);
        assert!(p.slices(0..8).is_err());
        let r = Pieces::Read(vec![&a[..], &b[..]]);
        assert_eq!(r.slices(0..4).unwrap(), vec![&[1u8; 4][..]]);
    }
}
