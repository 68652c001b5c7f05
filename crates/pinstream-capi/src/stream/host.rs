//! The caller's host memory as a stream run borrows it: each range must lie inside one block
//! `psHostAlloc` or `psHostRegister` pinned (looked up in the C library's registry), and is
//! lent to the engine piece by piece along that block's chunks, so that no transfer crosses
//! two registrations (which the NVIDIA driver runs at pageable speed).

use crate::error::{Failure, PS_ERROR_HOST_MEMORY_NOT_REGISTERED, PS_ERROR_INVALID_VALUE};
use crate::registry;
use pinstream::engine::job::OutOfRange;
use pinstream::engine::HostMemory;
use pinstream::host::HostRegion;
use std::ops::Range;

/// A range the job names: its address and length, as the caller gave them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub ptr: usize,
    pub len: usize,
}

/// Caller memory lent to one run: its pieces (address, length) in order, each inside one
/// chunk of the pinned block. Addresses, not references: the header makes the caller keep the
/// memory allocated, pinned and untouched until the run ends.
#[derive(Debug, Clone)]
pub(crate) struct Borrowed {
    pieces: Vec<(usize, usize)>,
    len: usize,
}

/// Checks `span` as a job's range named `what`: not NULL, not empty, no wrap around the
/// address space (the registry lookup at the run checks that it is pinned).
pub(crate) fn span(ptr: *const std::ffi::c_void, len: usize, what: &str) -> Result<Span, Failure> {
    if ptr.is_null() {
        return Err(Failure::new(
            PS_ERROR_INVALID_VALUE,
            format!("{what}: the pointer is NULL"),
        ));
    }
    if len == 0 {
        return Err(Failure::new(
            PS_ERROR_INVALID_VALUE,
            format!("{what}: bytes is 0: pass the range's size"),
        ));
    }
    crate::api::range_of(ptr, len)
        .map_err(|f| Failure::new(f.code, format!("{what}: {}", f.detail)))?;
    Ok(Span {
        ptr: ptr as usize,
        len,
    })
}

/// `span` lent from the block that pins it, cut at the block's chunks; refused where no
/// block pinstream pinned holds it whole, with the fix.
pub(crate) fn borrow(span: Span, what: &str) -> Result<Borrowed, Failure> {
    let Span { ptr, len } = span;
    let unpinned = |why: String| {
        Failure::new(
            PS_ERROR_HOST_MEMORY_NOT_REGISTERED,
            format!("{what} ({ptr:#x}, {len} bytes) {why}: streams take pinned memory only; pin it with psHostRegister(ctx, ptr, bytes, 0), or allocate it with psHostAlloc"),
        )
    };
    let found = registry::with_block(ptr, |block: &registry::Block<HostRegion>| {
        let region = &block.host;
        let start = region.as_ptr().map_or(0, |p| p as usize);
        let offset = ptr - start;
        let end = offset.checked_add(len).filter(|&e| e <= region.len());
        let Some(end) = end else {
            return Err(format!(
                "runs past the end of the pinned range {start:#x}..{:#x}",
                start + region.len()
            ));
        };
        // Addresses only, waiting for nothing: this runs under the registry's lock, and
        // psStreamRunAsync waits for nothing (a batch copy into the block may sit behind a
        // user event on the caller's queue; the caller orders its own accesses).
        region
            .piece_addresses(offset..end)
            .map_err(|e| format!("cannot be lent: {e}"))
    });
    match found {
        Ok(Ok(pieces)) => Ok(Borrowed { pieces, len }),
        Ok(Err(why)) => Err(unpinned(why)),
        Err(_) => Err(unpinned(
            "lies in no range psHostAlloc or psHostRegister pinned".into(),
        )),
    }
}

impl Borrowed {
    /// The pieces of `range` (address, length), in order.
    fn spans(&self, range: Range<usize>) -> Result<Vec<(usize, usize)>, OutOfRange> {
        if range.start > range.end || range.end > self.len {
            let len = self.len;
            return Err(OutOfRange { range, len });
        }
        let mut out = Vec::new();
        let mut at = 0;
        for &(p, n) in &self.pieces {
            let (lo, hi) = (range.start.max(at), range.end.min(at + n));
            if lo < hi {
                out.push((p + (lo - at), hi - lo));
            }
            at += n;
        }
        Ok(out)
    }
}

impl HostMemory for Borrowed {
    fn len(&self) -> usize {
        self.len
    }

    fn slices(&self, range: Range<usize>) -> Result<Vec<&[u8]>, OutOfRange> {
        let spans = self.spans(range)?;
        // SAFETY: each piece lies inside a block pinstream pinned (checked when borrowed),
        // which the header makes the caller keep allocated and unwritten until the run ends,
        // with no batch copy into it in flight when the run was issued (`borrow` waits for none);
        // no range the run writes overlaps it (`handle::lend` refuses such a job), so no
        // `&mut` slice of the run aliases these bytes.
        Ok(spans
            .into_iter()
            .map(|(p, n)| unsafe { std::slice::from_raw_parts(p as *const u8, n) })
            .collect())
    }

    fn slices_mut(&mut self, range: Range<usize>) -> Result<Vec<&mut [u8]>, OutOfRange> {
        let spans = self.spans(range)?;
        // SAFETY: as above; the header also makes the caller leave the memory untouched
        // while the run writes it, and `handle::lend` refused a job where this range overlaps
        // any other of its ranges, so these are the only slices over these bytes meanwhile.
        Ok(spans
            .into_iter()
            .map(|(p, n)| unsafe { std::slice::from_raw_parts_mut(p as *mut u8, n) })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_cut_at_the_pieces() {
        let b = Borrowed {
            pieces: vec![(1000, 10), (5000, 20)],
            len: 30,
        };
        assert_eq!(b.spans(0..30).unwrap(), [(1000, 10), (5000, 20)]);
        assert_eq!(b.spans(5..15).unwrap(), [(1005, 5), (5000, 5)]);
        assert_eq!(b.spans(12..14).unwrap(), [(5002, 2)]);
        assert!(b.spans(0..31).is_err());
    }

    #[test]
    fn null_empty_and_wrapping_spans_are_refused() {
        let p = 0x1000 as *const std::ffi::c_void;
        assert!(span(std::ptr::null(), 4, "x").is_err());
        assert!(span(p, 0, "x").is_err());
        assert!(span(p, usize::MAX, "x").is_err());
        assert_eq!(
            span(p, 4, "x").unwrap(),
            Span {
                ptr: 0x1000,
                len: 4
            }
        );
    }
}
