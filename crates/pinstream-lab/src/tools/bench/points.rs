//! One device's bench transfers, whatever the API: written once over [`HostApi`], so the
//! OpenCL and CUDA curves (and `compare`'s paired passes) are the same code run through each.

use super::{measure_point, BenchError, Dir, Point};
use crate::tools::passes::{timed_pass, Pass};
use pinstream::backend::api::{Device, ErrorOf};
use pinstream::backend::error::BackendError;
use pinstream::backend::lanes::{copies_in_flight, HostMemory, HostView, Lanes};
use pinstream::host::{HostApi, PinRequest};

/// Two device buffers of the top block size and `2 * top` bytes of host memory pinned one
/// way (uploads read its lower half, downloads write its upper half), kept across points so
/// `compare` can measure a point of each API in turn (paired passes) instead of a whole curve
/// of one and then the other.
pub(crate) struct Points<'d, A: HostApi> {
    device: &'d A::Device,
    up: A::Buffer,
    down: A::Buffer,
    host: A::HostMemory,
    top: usize,
}

impl<'d, A: HostApi> Points<'d, A> {
    /// Buffers of `top` bytes (committed by [`Device::allocate`]) and a
    /// `2 * top` host memory pinned with `pinning`, filled with random bytes.
    pub(crate) fn new(
        device: &'d A::Device,
        pinning: A::Pinning,
        top: usize,
    ) -> Result<Self, BenchError> {
        super::check_top(device, top)?;
        let request = PinRequest {
            pinning: Some(pinning),
            ..Default::default()
        };
        let mut host = A::pin(device, 2 * top, request)?;
        crate::tools::random::fill_random(host.slices_mut(0..2 * top)?, 17);
        let points = Points {
            up: device.allocate(top).map_err(Into::into)?,
            down: device.allocate(top).map_err(Into::into)?,
            device,
            host,
            top,
        };
        Ok(points)
    }

    /// Every size of `sizes`, `repeats` passes each way.
    pub(crate) fn curve(
        &mut self,
        sizes: &[usize],
        repeats: usize,
    ) -> Result<Vec<Point>, BenchError> {
        sizes.iter().map(|&s| self.point(s, repeats)).collect()
    }

    /// `repeats` passes of each direction at `size`.
    pub(crate) fn point(&mut self, size: usize, repeats: usize) -> Result<Point, BenchError> {
        Ok(measure_point(size, repeats, |dir, k| {
            self.timed(dir, size, k)
        })?)
    }

    /// One pass of `k` blocks of `size` in `dir`.
    pub(crate) fn pass(&mut self, dir: Dir, size: usize, k: usize) -> Result<Pass, BackendError> {
        Ok(self.timed(dir, size, k)?.0)
    }

    /// One pass of `k` blocks of `size` in `dir` on lanes of its own (every copy waited for
    /// before it returns); the pass and the commands' summed busy time (ns).
    fn timed(&mut self, dir: Dir, size: usize, k: usize) -> Result<(Pass, u64), BackendError> {
        let view = HostView::of_mut(&mut self.host);
        let blocks = Blocks {
            view: &view,
            up: &self.up,
            down: &self.down,
            size,
            top: self.top,
        };
        copies_in_flight::<A, _>(self.device, 2, |lanes| blocks.pass(lanes, dir, k))
            .and_then(|r| r)
            .map_err(Into::into)
    }
}

/// What one pass moves: blocks of `size` from the view's lower half into `up`, and from
/// `down` (or `up`, one way at a time) into its upper half.
struct Blocks<'v, 's, A: HostApi> {
    view: &'v HostView<'s>,
    up: &'s A::Buffer,
    down: &'s A::Buffer,
    size: usize,
    top: usize,
}

impl<'s, A: HostApi> Blocks<'_, 's, A> {
    /// Times `k` blocks in `dir`: by the wall clock from the first enqueue to the end of both
    /// lanes (one wait per lane, not one per command: waiting on each in turn is a cost of the
    /// measuring loop, issue 13), and each command by its device times.
    fn pass(
        &self,
        lanes: &mut Lanes<'s, A>,
        dir: Dir,
        k: usize,
    ) -> Result<(Pass, u64), ErrorOf<A>> {
        timed_pass(lanes, |l| self.enqueue(l, dir, k))
    }

    /// Uploads on lane 0; downloads on lane 1 when both ways run at once, else lane 0.
    fn enqueue(
        &self,
        lanes: &Lanes<'s, A>,
        dir: Dir,
        k: usize,
    ) -> Result<Vec<A::Event>, ErrorOf<A>> {
        let (size, top) = (self.size, self.top);
        let mut events = Vec::new();
        for _ in 0..k {
            if dir != Dir::Down {
                events.extend(lanes.upload(0, self.up, 0, self.view, 0..size, &[])?);
            }
            if dir != Dir::Up {
                let (lane, buf) = match dir {
                    Dir::Both => (1, self.down),
                    _ => (0, self.up),
                };
                events.extend(lanes.download(lane, self.view, top..top + size, buf, 0, &[])?);
            }
        }
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::bench::transfers_per_pass;
    use pinstream::backend::api::{Adapter, Instance};
    use pinstream::backend::opencl::OpenCl;

    /// A pass up then a pass down (one lane, the same buffer) brings the lower half's bytes
    /// back into the upper half: the generic transfers move what they say.
    #[test]
    fn a_pass_up_then_down_round_trips_the_bytes() {
        let instance = <OpenCl as pinstream::backend::api::Api>::Instance::new().unwrap();
        let device = instance.adapters().unwrap()[0].open().unwrap();
        let pinning = OpenCl::pinnings(&device)[0];
        let (top, size) = (1 << 16, 1000);
        let mut points = Points::<OpenCl>::new(&device, pinning, top).unwrap();
        let half = |p: &Points<'_, OpenCl>, at: usize| -> Vec<u8> {
            p.host.slices(at..at + size).unwrap().concat()
        };
        assert_ne!(half(&points, 0), half(&points, top), "random halves differ");
        points.pass(Dir::Up, size, 2).unwrap();
        let pass = points.pass(Dir::Down, size, 1).unwrap();
        assert_eq!(half(&points, 0), half(&points, top));
        assert!(pass.wall_s > 0.0);
        let point = points.point(size, 1).unwrap();
        assert_eq!(
            (point.size, point.transfers),
            (size, transfers_per_pass(size))
        );
    }
}
