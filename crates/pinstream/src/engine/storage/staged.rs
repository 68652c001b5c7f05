//! A staging ring lent to a run as its memory ([`Staged`]).

use crate::backend::lanes::HostView;
use crate::backend::staging::Staging;
use crate::engine::job::{HostMemory, OutOfRange};
use std::ops::Range;

/// A staging ring lent to a run as its memory: devices see the data through the ring's gate
/// ([`HostMemory::pending_view`]); it has no slices of its own to lend (the data is not all
/// there at once), so `slices` answers out of range and only a run's view reaches it.
pub(super) struct Staged<'s, 'h>(pub(super) &'s Staging<'h>, pub(super) usize);

impl HostMemory for Staged<'_, '_> {
    fn len(&self) -> usize {
        self.1
    }
    fn slices(&self, range: Range<usize>) -> Result<Vec<&[u8]>, OutOfRange> {
        Err(OutOfRange { range, len: 0 })
    }
    fn slices_mut(&mut self, range: Range<usize>) -> Result<Vec<&mut [u8]>, OutOfRange> {
        Err(OutOfRange { range, len: 0 })
    }
    fn is_pending(&self) -> bool {
        true
    }
    fn pending_view(&self) -> Option<HostView<'_>> {
        Some(self.0.view())
    }
    fn pending_view_mut(&mut self) -> Option<HostView<'_>> {
        Some(self.0.view())
    }
}
