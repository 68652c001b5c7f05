//! What a run streams: the host memory of a [`Job`], whatever the API that pinned it
//! ([`HostMemory`], defined by the backend's safe layer and implemented here for
//! [`HostRegion`]), and the devices that run it, each with its kernel ([`Target`]).

use super::error::{LayoutError, StreamError};
use crate::backend::api::{Api, Device};
use crate::backend::lanes::HostView;
use crate::host::{HostError, HostRegion};
use std::ops::Range;

pub use crate::backend::lanes::{HostMemory, OutOfRange};

/// A region pinned through OpenCL is host memory a run can stream (the region's own
/// accessors wait for its transfers before handing out slices).
impl HostMemory for HostRegion {
    fn len(&self) -> usize {
        HostRegion::len(self)
    }
    fn slices(&self, range: Range<usize>) -> Result<Vec<&[u8]>, OutOfRange> {
        let len = self.len();
        HostRegion::slices(self, range.clone()).map_err(|_| OutOfRange { range, len })
    }
    fn slices_mut(&mut self, range: Range<usize>) -> Result<Vec<&mut [u8]>, OutOfRange> {
        let len = self.len();
        HostRegion::slices_mut(self, range.clone()).map_err(|_| OutOfRange { range, len })
    }
    fn is_pending(&self) -> bool {
        // Progressive regions always lend a gated view: a pin that ends between this call
        // and `pending_view` must not change the answer.
        HostRegion::is_progressive(self)
    }
    fn pending_view(&self) -> Option<HostView<'_>> {
        HostRegion::pending_view(self)
    }
    fn pending_view_mut(&mut self) -> Option<HostView<'_>> {
        HostRegion::pending_view_mut(self)
    }
}

/// So that `?` carries a range error into the memory layer's error.
impl From<OutOfRange> for HostError {
    fn from(e: OutOfRange) -> Self {
        HostError::Range {
            start: e.range.start,
            end: e.range.end,
            len: e.len,
        }
    }
}

/// The data of a run. The run borrows it whole for its length: `&mut` for the in-place
/// region and the output, `&` for inputs and residents, so the caller cannot touch them while
/// a device may.
#[derive(Default)]
pub struct Job<'a> {
    /// The memory processed in place (its blocks are uploaded and the results written back).
    pub in_place: Option<&'a mut dyn HostMemory>,
    /// Streamed inputs (after the in-place region, if any).
    pub inputs: Vec<&'a dyn HostMemory>,
    /// Output for out-of-place runs.
    pub output: Option<&'a mut dyn HostMemory>,
    /// Uploaded once to every device, bound after the output.
    pub residents: Vec<&'a dyn HostMemory>,
    /// User scalars, `NAME=VALUE`, typed by the kernel.
    pub args: Vec<(String, String)>,
}

/// A host range of a job as a front sees it before lending it: its addresses, and whether
/// the run writes it (the in-place range, the output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRange {
    /// The range's bytes, as addresses.
    pub span: Range<usize>,
    /// The run writes it.
    pub writes: bool,
}

/// The first two of `ranges` that share a byte while the run writes one of them, as indices
/// (the written one first), or `None`. A [`Job`] lends written memory as `&mut` and the rest
/// as `&`, so a front that builds one from raw addresses (the C library, Python) must refuse
/// such a pair: the two borrows would alias, and a device would write what another block
/// reads. Ranges that are only read may overlap.
pub fn aliased(ranges: &[JobRange]) -> Option<(usize, usize)> {
    ranges.iter().enumerate().find_map(|(i, a)| {
        let shares = |b: &JobRange| a.span.start < b.span.end && b.span.start < a.span.end;
        let j = (i + 1..ranges.len()).find(|&j| {
            let b = &ranges[j];
            (a.writes || b.writes) && shares(b)
        })?;
        Some(if a.writes { (i, j) } else { (j, i) })
    })
}

/// One device of a run with the kernel built for it.
pub struct Target<'a, D: Device> {
    /// The device.
    pub device: &'a D,
    /// The kernel, built on `device`.
    pub kernel: &'a mut <D::A as Api>::Kernel,
    /// Buffers the kernel reads in place from host memory (mapped pinned memory), each bound
    /// to the kernel argument of its name ([`super::bind::bind_hosted`]); nothing of them is
    /// copied or counted in the VRAM budget.
    pub hosted: Vec<Hosted<'a, D::A>>,
}

/// A buffer over host memory (mapped pinned memory) that a kernel reads and writes in place,
/// bound to the kernel argument `name`: `len` bytes the kernel may use, then `guard` bytes of
/// guard zone in the same buffer. A run that guards its buffers
/// ([`super::StreamOptions::check_bounds`]) guards it as every other buffer it binds: it
/// writes the canary into the zone and reads it back after each kernel, so the memory must
/// be made [`super::guard::hosted_allocation`]`(len, true)` bytes, with
/// [`super::guard::hosted_guard_bytes`]`(len)` as `guard`, and a hosted buffer without a zone
/// is refused there ([`super::LayoutError::HostedUnguarded`]). A buffer that holds fewer than
/// `len + guard` bytes is refused on every run ([`super::LayoutError::HostedShort`]).
pub struct Hosted<'a, A: Api> {
    /// The kernel argument it is bound to.
    pub name: String,
    /// The buffer, of at least `len + guard` bytes.
    pub buffer: &'a A::Buffer,
    /// Bytes the kernel may use.
    pub len: usize,
    /// Bytes of the guard zone after them (0: none, for runs that do not guard).
    pub guard: usize,
}

impl<'a, D: Device> Target<'a, D> {
    /// `kernel` on `device`.
    pub fn new(device: &'a D, kernel: &'a mut <D::A as Api>::Kernel) -> Self {
        Target {
            device,
            kernel,
            hosted: Vec::new(),
        }
    }

    /// With `hosted`: buffers over host memory, each bound to the argument of its name.
    pub fn with_hosted(mut self, hosted: Vec<Hosted<'a, D::A>>) -> Self {
        self.hosted = hosted;
        self
    }

    /// The names of the hosted buffers, in order.
    pub(crate) fn hosted_names(&self) -> Vec<String> {
        self.hosted.iter().map(|h| h.name.clone()).collect()
    }
}

/// A job's memory as views for the backend, borrowed for `'h`.
pub(crate) struct JobViews<'h> {
    in_place: Option<HostView<'h>>,
    inputs: Vec<HostView<'h>>,
    output: Option<HostView<'h>>,
    pub(crate) residents: Vec<HostView<'h>>,
    pub(crate) args: Vec<(String, String)>,
}

impl<'h> JobViews<'h> {
    /// Lends the job's memory to the backend, checking that it makes a run.
    pub(crate) fn new(job: Job<'h>) -> Result<Self, StreamError> {
        if job.in_place.is_none() && job.inputs.is_empty() {
            return Err(LayoutError::NoInput.into());
        }
        if job.in_place.is_some() == job.output.is_some() {
            return Err(LayoutError::InPlaceAndOutput.into());
        }
        let views = JobViews {
            in_place: job.in_place.map(HostView::of_mut),
            inputs: job.inputs.into_iter().map(HostView::of).collect(),
            output: job.output.map(HostView::of_mut),
            residents: job.residents.into_iter().map(HostView::of).collect(),
            args: job.args,
        };
        views.check_lengths()
    }

    fn check_lengths(self) -> Result<Self, StreamError> {
        let len = self.sources().next().map_or(0, HostView::len);
        if let Some(other) = self.sources().map(HostView::len).find(|&l| l != len) {
            return Err(LayoutError::InputsDiffer { first: len, other }.into());
        }
        Ok(self)
    }

    /// The streamed sources in binding order: the in-place memory, then the inputs.
    pub(crate) fn sources(&self) -> impl Iterator<Item = &HostView<'h>> {
        self.in_place.iter().chain(&self.inputs)
    }

    /// Where results go: the in-place memory, or the output.
    pub(crate) fn target(&self) -> &HostView<'h> {
        match (&self.in_place, &self.output) {
            (Some(v), _) | (None, Some(v)) => v,
            (None, None) => unreachable!("JobViews::new checked that one exists"),
        }
    }

    /// Bytes per input.
    pub(crate) fn input_len(&self) -> usize {
        self.sources().next().map_or(0, HostView::len)
    }

    /// Streamed inputs, the in-place memory counted.
    pub(crate) fn input_count(&self) -> usize {
        self.sources().count()
    }

    /// True in place.
    pub(crate) fn in_place(&self) -> bool {
        self.in_place.is_some()
    }

    /// The output's length, out of place.
    pub(crate) fn output_len(&self) -> Option<usize> {
        self.output.as_ref().map(HostView::len)
    }

    /// Resident bytes.
    pub(crate) fn resident_bytes(&self) -> u64 {
        self.residents.iter().map(|r| r.len() as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::{aliased, JobRange};

    fn r(start: usize, end: usize, writes: bool) -> JobRange {
        JobRange {
            span: start..end,
            writes,
        }
    }

    #[test]
    fn a_written_range_may_share_no_byte_with_another() {
        assert_eq!(aliased(&[]), None);
        // Read ranges may overlap; touching ranges share no byte.
        assert_eq!(aliased(&[r(0, 8, false), r(4, 12, false)]), None);
        assert_eq!(aliased(&[r(0, 8, true), r(8, 16, false)]), None);
        // The written one comes first, whichever order they were given in.
        assert_eq!(aliased(&[r(0, 8, true), r(7, 9, false)]), Some((0, 1)));
        assert_eq!(aliased(&[r(7, 9, false), r(0, 8, true)]), Some((1, 0)));
        assert_eq!(
            aliased(&[r(0, 4, false), r(100, 200, true), r(150, 151, false)]),
            Some((1, 2))
        );
        assert_eq!(aliased(&[r(0, 8, true), r(2, 3, true)]), Some((0, 1)));
    }
}
