//! What a run streams: the host memory of a [`Job`], whatever the API that pinned it
//! ([`HostMemory`]), and the devices that run it, each with its kernel ([`Target`]).

use super::error::{LayoutError, StreamError};
use crate::backend::api::{Api, Device};
use crate::backend::lanes::HostView;
use crate::host::{HostError, HostRegion};
use std::ops::Range;

/// Host memory a run can stream from or into: its bytes, piece by piece in order (a region
/// made of several driver allocations has one piece per chunk). Implemented by
/// [`HostRegion`] (pinned through OpenCL) and, with the `cuda` feature, by
/// `backend::cuda::PinnedHost` (pinned through CUDA).
pub trait HostMemory {
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True for zero bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The bytes of `range`, one slice per piece it crosses.
    fn slices(&self, range: Range<usize>) -> Result<Vec<&[u8]>, HostError>;
    /// The bytes of `range`, writable, one slice per piece it crosses.
    fn slices_mut(&mut self, range: Range<usize>) -> Result<Vec<&mut [u8]>, HostError>;
}

impl HostMemory for HostRegion {
    fn len(&self) -> usize {
        HostRegion::len(self)
    }
    fn slices(&self, range: Range<usize>) -> Result<Vec<&[u8]>, HostError> {
        HostRegion::slices(self, range)
    }
    fn slices_mut(&mut self, range: Range<usize>) -> Result<Vec<&mut [u8]>, HostError> {
        HostRegion::slices_mut(self, range)
    }
}

#[cfg(feature = "cuda")]
impl HostMemory for crate::backend::cuda::PinnedHost {
    fn len(&self) -> usize {
        crate::backend::cuda::PinnedHost::len(self)
    }
    fn slices(&self, range: Range<usize>) -> Result<Vec<&[u8]>, HostError> {
        let len = self.len();
        self.as_slice()
            .get(range.clone())
            .map(|s| vec![s])
            .ok_or(HostError::Range {
                start: range.start,
                end: range.end,
                len,
            })
    }
    fn slices_mut(&mut self, range: Range<usize>) -> Result<Vec<&mut [u8]>, HostError> {
        let len = self.len();
        self.as_mut_slice()
            .get_mut(range.clone())
            .map(|s| vec![s])
            .ok_or(HostError::Range {
                start: range.start,
                end: range.end,
                len,
            })
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

/// One device of a run with the kernel built for it.
pub struct Target<'a, D: Device> {
    /// The device.
    pub device: &'a D,
    /// The kernel, built on `device`.
    pub kernel: &'a mut <D::A as Api>::Kernel,
}

impl<'a, D: Device> Target<'a, D> {
    /// `kernel` on `device`.
    pub fn new(device: &'a D, kernel: &'a mut <D::A as Api>::Kernel) -> Self {
        Target { device, kernel }
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
        let whole = |m: &'h dyn HostMemory| m.slices(0..m.len()).map(HostView::reading);
        let whole_mut = |m: &'h mut dyn HostMemory| m.slices_mut(0..m.len()).map(HostView::writing);
        let views = JobViews {
            in_place: job.in_place.map(whole_mut).transpose()?,
            inputs: job
                .inputs
                .into_iter()
                .map(whole)
                .collect::<Result<_, _>>()?,
            output: job.output.map(whole_mut).transpose()?,
            residents: job
                .residents
                .into_iter()
                .map(whole)
                .collect::<Result<_, _>>()?,
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
