//! The caller's own memory, handed to an API to register ([`CallerRange`]): its contract is
//! written once, at its `unsafe` constructor, and each API's registration cites it.

use super::{check_registrable, HostError};

/// A range of memory the caller owns (`malloc`'d, `mmap`'d, part of a larger allocation), to
/// register with an API so that its devices copy it pinned (`HostApi::register`, as
/// `cudaHostRegister` does). Made only by the `unsafe` [`CallerRange::new`], whose contract
/// every registration over the range relies on.
#[derive(Debug, Clone, Copy)]
pub struct CallerRange {
    ptr: *mut u8,
    len: usize,
}

impl CallerRange {
    /// The `len` bytes at `ptr`. Nothing is checked here: [`Self::check`] is what every
    /// registration checks first.
    ///
    /// # Safety
    /// - `ptr..ptr + len` must stay mapped, and must not be freed or unmapped, until every
    ///   memory registered over it has been dropped.
    /// - That memory's accessors and transfers read and write the range: while they run, the
    ///   caller must not access it in a way that races them (as for any memory handed to a
    ///   transfer in flight).
    /// - A registration may fault pages never written in writable first, without changing
    ///   them; other threads may go on writing the range meanwhile.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Self {
        CallerRange { ptr, len }
    }

    /// The first byte.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a range of no bytes (which registration refuses).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The checks every registration makes before it registers: a pointer
    /// ([`HostError::NullPointer`]), some bytes ([`HostError::ZeroSize`]), an end inside the
    /// address space, and memory that registration really pins ([`check_registrable`]).
    pub fn check(&self) -> Result<(), HostError> {
        if self.ptr.is_null() {
            return Err(HostError::NullPointer);
        }
        if self.len == 0 {
            return Err(HostError::ZeroSize);
        }
        let start = self.ptr as usize;
        let end = start.checked_add(self.len).ok_or(HostError::Unmapped {
            start,
            end: usize::MAX,
        })?;
        check_registrable(start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_empty_and_wrapping_ranges_are_refused() {
        let mut byte = 0u8;
        // SAFETY: none of these ranges is registered; `check` only reads the process's maps.
        let (null, empty, wraps) = unsafe {
            (
                CallerRange::new(std::ptr::null_mut(), 4096),
                CallerRange::new(&mut byte, 0),
                CallerRange::new(usize::MAX as *mut u8, 2),
            )
        };
        assert!(matches!(null.check(), Err(HostError::NullPointer)));
        assert!(matches!(empty.check(), Err(HostError::ZeroSize)));
        assert!(matches!(wraps.check(), Err(HostError::Unmapped { .. })));
    }
}
